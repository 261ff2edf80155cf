//! `pgvia import-pgbouncer`: a PgBouncer setup (`pgbouncer.ini` and its `userlist.txt`) turned
//! into an equivalent `pgvia.toml`, with every setting that could not be carried over listed
//! with the reason, so a move from PgBouncer takes minutes and hides nothing.
//!
//! I/O-free apart from [`command`]: [`import`] takes the files' text and returns the TOML and
//! the notes, so it is tested without files.

mod ini;
mod pgbouncer;
mod toml_out;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use ini::IniError;

/// A setting that was not carried over as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Where it came from: `[section] key (line N)` or a user name.
    pub place: String,
    pub why: String,
}

impl Note {
    fn new(place: &str, why: &str) -> Self {
        Note { place: place.to_owned(), why: why.to_owned() }
    }

    fn of(entry: &ini::Entry, why: &str) -> Self {
        let place = format!("[{}] {} = {} (line {})", entry.section, entry.key, entry.value, entry.line);
        Note { place, why: why.to_owned() }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.why)
    }
}

/// The result of an import: the configuration text and what it leaves out.
#[derive(Debug, Clone)]
pub struct Imported {
    pub toml: String,
    pub notes: Vec<Note>,
}

/// Converts the text of `pgbouncer.ini` and, if given, of its user list. `source` only names
/// the file in the output's header comment.
pub fn import(ini_text: &str, userlist: Option<&str>, source: &str) -> Result<Imported, IniError> {
    let entries = ini::parse(ini_text)?;
    let users = userlist.map(ini::userlist).transpose()?;
    let mut notes = Vec::new();
    let mut doc = pgbouncer::convert(&entries, users.as_deref(), &mut notes);
    doc.comments.push(format!("Imported from {source} by `pgvia import-pgbouncer`."));
    doc.comments
        .push("PgBouncer's defaults are written out where pgvia's differ, so it behaves as before.".into());
    if !notes.is_empty() {
        doc.comments.push("Not carried over:".into());
        doc.comments.extend(notes.iter().map(|n| format!("  {n}")));
    }
    Ok(Imported { toml: doc.render(), notes })
}

/// Why the command could not run.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: IniError },
    #[error("{}: cannot write: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

/// The command line: reads the files, writes the TOML to `output` (or standard output) and the
/// notes to standard error. The user list is `userlist` if given, else the INI's `auth_file`
/// (relative to the INI's folder), if readable.
pub fn command(ini_path: &Path, userlist: Option<&Path>, output: Option<&Path>) -> ExitCode {
    match run(ini_path, userlist, output) {
        Ok(notes) => {
            for note in &notes {
                eprintln!("not carried over: {note}");
            }
            eprintln!("{} setting(s) not carried over", notes.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgvia import-pgbouncer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(ini_path: &Path, userlist: Option<&Path>, output: Option<&Path>) -> Result<Vec<Note>, ImportError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| ImportError::Read { path: path.to_owned(), source })
    };
    let ini_text = read(ini_path)?;
    let parse_err = |path: &Path| {
        let path = path.to_owned();
        move |source| ImportError::Parse { path, source }
    };
    let userlist_path = match userlist {
        Some(p) => Some(p.to_owned()),
        None => ini::parse(&ini_text)
            .map_err(parse_err(ini_path))?
            .iter()
            .rev()
            .find(|e| e.section == "pgbouncer" && e.key == "auth_file")
            .map(|e| ini_path.parent().unwrap_or(Path::new(".")).join(&e.value)),
    };
    let userlist_text = match &userlist_path {
        Some(p) if userlist.is_some() || p.exists() => Some(read(p)?),
        _ => None,
    };
    let source = ini_path.display().to_string();
    let imported = match import(&ini_text, userlist_text.as_deref(), &source) {
        Ok(i) => i,
        // A userlist error names the user list; anything else is the INI's.
        Err(e @ IniError::Userlist { .. }) => {
            return Err(parse_err(userlist_path.as_deref().unwrap_or(ini_path))(e));
        }
        Err(e) => return Err(parse_err(ini_path)(e)),
    };
    match output {
        Some(path) => std::fs::write(path, &imported.toml)
            .map_err(|source| ImportError::Write { path: path.to_owned(), source })?,
        None => print!("{}", imported.toml),
    }
    Ok(imported.notes)
}

#[cfg(test)]
mod tests;
