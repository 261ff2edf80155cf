//! What the analyzer can be told, and how those settings are checked.

/// Settings for an [`Analyzer`](crate::Analyzer). Build with [`Default`] and override fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalyzerOptions {
    /// Queries longer than this many bytes are not parsed: they get the conservative
    /// decision. Default 1 MiB; between 1 and 1 GiB.
    pub max_query_length: usize,
    /// Most analyses the cache holds. 0 disables the cache. Default 10,000.
    pub cache_entries: usize,
    /// Most bytes the cache holds (query text plus analysis). Default 32 MiB; at least
    /// 64 KiB when the cache is enabled.
    pub cache_bytes: usize,
    /// Which misses the cache admits. Default [`Admission::SecondSight`].
    pub cache_admission: Admission,
    /// Functions that write, in addition to the built-in list (`nextval`, `setval`,
    /// advisory locks, ...): `name` matches in any schema, `schema.name` only there. Names
    /// are compared as PostgreSQL stores them: lower case unless created quoted.
    pub write_functions: Vec<String>,
    /// Functions that leave the session alone (no `set_config`, `SET`, `LISTEN`, session
    /// advisory lock, temporary table, `PREPARE` or `WITH HOLD` cursor, however deep), so a
    /// call to one is not [a hidden effect](crate::Analysis::may_have_hidden_effects). Same
    /// spelling as `write_functions`.
    pub session_neutral_functions: Vec<String>,
    /// Deepest expression or subquery nesting walked before the query is declared too
    /// complex. Default 1,000; between 16 and 10,000.
    pub max_nesting: u32,
    /// Most literal values (predicate and insert values) recorded per query; past that a
    /// statement is marked [truncated](crate::Statement::values_truncated). Default 65,536.
    pub max_values: usize,
}

impl Default for AnalyzerOptions {
    fn default() -> Self {
        AnalyzerOptions {
            max_query_length: 1024 * 1024,
            cache_entries: 10_000,
            cache_bytes: 32 * 1024 * 1024,
            cache_admission: Admission::SecondSight,
            write_functions: Vec::new(),
            session_neutral_functions: Vec::new(),
            max_nesting: 1_000,
            max_values: 65_536,
        }
    }
}

/// When a cache miss is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Every miss is stored (the cache's own eviction still protects frequently used
    /// entries, but every one-off query costs an insertion and an eviction).
    Always,
    /// A miss is stored only when the same text was missed before, recently: queries with
    /// inline literals, seen once each, are analysed without touching the cache.
    SecondSight,
}

/// A setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("max_query_length must be between 1 and {max} bytes, not {value}")]
    MaxQueryLength { value: usize, max: usize },
    #[error("cache_bytes must be at least {min} when the cache is enabled, not {value}")]
    CacheBytes { value: usize, min: usize },
    #[error("max_nesting must be between 16 and 10000, not {0}")]
    MaxNesting(u32),
    #[error("max_values must be at most {max}, not {value}")]
    MaxValues { value: usize, max: usize },
    #[error("write_functions entry {0:?} is not `name` or `schema.name`")]
    WriteFunction(String),
    #[error("session_neutral_functions entry {0:?} is not `name` or `schema.name`")]
    NeutralFunction(String),
}

pub(crate) const MAX_QUERY_LENGTH: usize = 1024 * 1024 * 1024;
pub(crate) const MIN_CACHE_BYTES: usize = 64 * 1024;
const MAX_VALUES: usize = 16 * 1024 * 1024;

impl AnalyzerOptions {
    /// Checks every setting; the analyzer refuses options that fail. Returns the first
    /// problem; [`AnalyzerOptions::problems`] lists them all.
    pub fn validate(&self) -> Result<(), OptionsError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every setting out of range, in field order.
    pub fn problems(&self) -> Vec<OptionsError> {
        let mut out = Vec::new();
        if self.max_query_length == 0 || self.max_query_length > MAX_QUERY_LENGTH {
            out.push(OptionsError::MaxQueryLength { value: self.max_query_length, max: MAX_QUERY_LENGTH });
        }
        if self.cache_entries > 0 && self.cache_bytes < MIN_CACHE_BYTES {
            out.push(OptionsError::CacheBytes { value: self.cache_bytes, min: MIN_CACHE_BYTES });
        }
        for f in &self.write_functions {
            if !valid_function_name(f) {
                out.push(OptionsError::WriteFunction(f.clone()));
            }
        }
        for f in &self.session_neutral_functions {
            if !valid_function_name(f) {
                out.push(OptionsError::NeutralFunction(f.clone()));
            }
        }
        if !(16..=10_000).contains(&self.max_nesting) {
            out.push(OptionsError::MaxNesting(self.max_nesting));
        }
        if self.max_values > MAX_VALUES {
            out.push(OptionsError::MaxValues { value: self.max_values, max: MAX_VALUES });
        }
        out
    }
}

impl OptionsError {
    /// The name of the setting at fault, as spelt in [`AnalyzerOptions`].
    pub fn key(&self) -> &'static str {
        match self {
            OptionsError::MaxQueryLength { .. } => "max_query_length",
            OptionsError::CacheBytes { .. } => "cache_bytes",
            OptionsError::MaxNesting(_) => "max_nesting",
            OptionsError::MaxValues { .. } => "max_values",
            OptionsError::WriteFunction(_) => "write_functions",
            OptionsError::NeutralFunction(_) => "session_neutral_functions",
        }
    }
}

/// One or two non-empty dot-separated parts without spaces or quotes.
fn valid_function_name(name: &str) -> bool {
    let mut parts = name.split('.');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| !p.is_empty() && !p.contains(|c: char| c.is_whitespace() || c == '"'))
    };
    match (parts.next(), parts.next(), parts.next()) {
        (a, None, None) => ok(a),
        (a, b @ Some(_), None) => ok(a) && ok(b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_listed() {
        let o = AnalyzerOptions {
            max_query_length: 0,
            max_nesting: 1,
            write_functions: vec!["ok".into(), "".into()],
            ..Default::default()
        };
        let keys: Vec<&str> = o.problems().iter().map(OptionsError::key).collect();
        assert_eq!(keys, ["max_query_length", "write_functions", "max_nesting"]);
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(AnalyzerOptions::default().validate(), Ok(()));
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let bad = |f: fn(&mut AnalyzerOptions)| {
            let mut o = AnalyzerOptions::default();
            f(&mut o);
            o.validate().unwrap_err()
        };
        assert!(matches!(bad(|o| o.max_query_length = 0), OptionsError::MaxQueryLength { .. }));
        assert_eq!(bad(|o| o.max_query_length = 0).key(), "max_query_length");
        assert!(matches!(bad(|o| o.cache_bytes = 10), OptionsError::CacheBytes { .. }));
        assert!(matches!(bad(|o| o.max_nesting = 3), OptionsError::MaxNesting(3)));
        assert!(matches!(bad(|o| o.max_values = usize::MAX), OptionsError::MaxValues { .. }));
        for name in ["", "a.b.c", ".x", "x.", "a b", "\"q\""] {
            let o = AnalyzerOptions { write_functions: vec![name.to_owned()], ..Default::default() };
            assert_eq!(o.validate(), Err(OptionsError::WriteFunction(name.to_owned())), "{name}");
        }
        let o = AnalyzerOptions {
            cache_entries: 0,
            cache_bytes: 0,
            write_functions: vec!["audit.log".into(), "bump".into()],
            ..Default::default()
        };
        assert_eq!(o.validate(), Ok(()));
    }
}
