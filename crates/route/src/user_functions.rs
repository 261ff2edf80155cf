//! Functions the configuration names, on top of the built-in lists.

/// Functions the configuration describes, on top of the built-in lists: those that write
/// (`write_functions`) and those that leave the session alone (`session_neutral_functions`).
#[derive(Debug, Clone, Default)]
pub(crate) struct UserFunctions {
    /// `(schema, name)`; a `None` schema matches the name in any schema.
    writes: Vec<(Option<String>, String)>,
    neutral: Vec<(Option<String>, String)>,
}

fn split_names(names: &[String]) -> Vec<(Option<String>, String)> {
    names
        .iter()
        .map(|n| match n.split_once('.') {
            Some((schema, name)) => (Some(schema.to_owned()), name.to_owned()),
            None => (None, n.clone()),
        })
        .collect()
}

fn listed(list: &[(Option<String>, String)], schema: Option<&str>, name: &str) -> bool {
    list.iter().any(|(s, n)| n == name && (s.is_none() || s.as_deref() == schema))
}

impl UserFunctions {
    pub fn new(writes: &[String], neutral: &[String]) -> UserFunctions {
        UserFunctions { writes: split_names(writes), neutral: split_names(neutral) }
    }

    pub(crate) fn user_writes(&self, schema: Option<&str>, name: &str) -> bool {
        listed(&self.writes, schema, name)
    }

    pub(crate) fn user_neutral(&self, schema: Option<&str>, name: &str) -> bool {
        !self.neutral.is_empty() && listed(&self.neutral, schema, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_functions_match_with_or_without_schema() {
        let f = UserFunctions::new(&["audit.log_event".to_owned(), "bump".to_owned()], &[]);
        assert!(f.user_writes(Some("audit"), "log_event"));
        assert!(!f.user_writes(None, "log_event"));
        assert!(!f.user_writes(Some("public"), "log_event"));
        assert!(f.user_writes(None, "bump"));
        assert!(f.user_writes(Some("x"), "bump"));
        let n = UserFunctions::new(&[], &["app.score".to_owned()]);
        assert!(n.user_neutral(Some("app"), "score") && !n.user_neutral(None, "score"));
        assert!(!n.user_writes(Some("app"), "score"));
    }
}
