//! A TOML document written in pgvia's section order, with values quoted by the `toml` crate.
//!
//! Written by hand rather than serialised from `Config` so the output keeps the order a person
//! reads a configuration in (name first) and carries comments.

use std::fmt::Write;

/// A TOML value as the importer produces them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl Value {
    fn render(&self) -> String {
        match self {
            Value::Str(s) => toml::Value::String(s.clone()).to_string(),
            Value::Int(i) => i.to_string(),
            Value::Bool(b) => b.to_string(),
        }
    }
}

/// `key = value` lines of one table, in insertion order; a key set twice keeps its last value.
#[derive(Debug, Clone, Default)]
pub struct Table {
    entries: Vec<(&'static str, Value)>,
}

impl Table {
    pub fn set(&mut self, key: &'static str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn write(&self, out: &mut String) {
        for (key, value) in &self.entries {
            let _ = writeln!(out, "{key} = {}", value.render());
        }
    }
}

/// The whole file: header comments, `[general]`, `[pool]`, then the array tables.
#[derive(Debug, Clone, Default)]
pub struct Document {
    pub comments: Vec<String>,
    pub general: Table,
    pub pool: Table,
    pub databases: Vec<Table>,
    pub users: Vec<Table>,
}

impl Document {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in &self.comments {
            let _ = writeln!(out, "# {line}");
        }
        out.push_str("\n[general]\n");
        self.general.write(&mut out);
        out.push_str("\n[pool]\n");
        self.pool.write(&mut out);
        for (name, tables) in [("databases", &self.databases), ("users", &self.users)] {
            for table in tables {
                let _ = writeln!(out, "\n[[{name}]]");
                table.write(&mut out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_in_order_with_quoting() {
        let mut doc = Document { comments: vec!["made by a test".into()], ..Document::default() };
        doc.general.set("listen_port", Value::Int(6432));
        doc.general.set("listen_addr", Value::Str("0.0.0.0".into()));
        doc.general.set("listen_port", Value::Int(7000));
        let mut db = Table::default();
        db.set("name", Value::Str("we\"ird".into()));
        doc.databases.push(db);
        let text = doc.render();
        assert_eq!(
            text,
            "# made by a test\n\n[general]\nlisten_port = 7000\nlisten_addr = \"0.0.0.0\"\n\n[pool]\n\n[[databases]]\nname = 'we\"ird'\n"
        );
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(parsed["databases"][0]["name"].as_str(), Some("we\"ird"));
    }
}
