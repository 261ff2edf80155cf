//! Errors from loading a configuration file.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read configuration: {source}", path.display())]
    Io {
        /// The file we tried to read.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is wrong; every problem found is listed, one per line.
    #[error("{}", ProblemList { file, problems })]
    Invalid {
        /// The file the problems are in (as given, for messages).
        file: PathBuf,
        /// At least one problem, in file order where known.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems, if this is [`ConfigError::Invalid`]; empty otherwise.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            ConfigError::Io { .. } => &[],
        }
    }
}

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, as a key path such as `databases[1].port`; empty for the whole file
    /// (for instance a TOML syntax error).
    pub path: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong, for a human.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem { path: path.into(), line: None, message: message.into() }
    }
}

/// `<path>: <message>`, or just the message for whole-file problems.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

struct ProblemList<'a> {
    file: &'a PathBuf,
    problems: &'a [Problem],
}

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}:", self.file.display())?;
            if let Some(line) = p.line {
                write!(f, "{line}:")?;
            }
            write!(f, " {p}")?;
        }
        Ok(())
    }
}
