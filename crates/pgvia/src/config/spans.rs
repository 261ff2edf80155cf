//! Line numbers for key paths, so problems found after deserialization (duplicate names,
//! impossible combinations) can point at a line just like syntax errors do.
//!
//! The file is deserialized a second time into a tree of [`toml::Spanned`] nodes. This keeps
//! spans out of the public config structs, which stay plain data.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

/// Where each key and array element of a TOML document starts.
pub(crate) struct Spans<'a> {
    text: &'a str,
    root: BTreeMap<String, Spanned<Node>>,
}

enum Node {
    Table(BTreeMap<String, Spanned<Node>>),
    Array(Vec<Spanned<Node>>),
    Leaf,
}

impl<'a> Spans<'a> {
    /// Indexes `text`. A document that cannot be indexed (it only happens to invalid ones)
    /// yields an empty index: problems are still reported, without line numbers.
    pub(crate) fn new(text: &'a str) -> Self {
        let root =
            BTreeMap::<String, Spanned<Node>>::deserialize(toml::Deserializer::new(text)).unwrap_or_default();
        Spans { text, root }
    }

    /// The line of the deepest part of `path` (`databases[1].port`) present in the file: a key
    /// that was left out points at its table, so "missing password" lands on the right user.
    pub(crate) fn line_of(&self, path: &str) -> Option<usize> {
        let mut table = &self.root;
        let mut best = None;
        for part in path.split('.') {
            let (key, indexes) = split_indexes(part)?;
            let mut node = match table.get(key) {
                Some(n) => n,
                None => break,
            };
            best = Some(node.span().start);
            for index in indexes {
                match node.get_ref() {
                    Node::Array(items) => match items.get(index) {
                        Some(item) => {
                            node = item;
                            best = Some(node.span().start);
                        }
                        None => return best.map(|b| self.line_at(b)),
                    },
                    _ => return best.map(|b| self.line_at(b)),
                }
            }
            match node.get_ref() {
                Node::Table(t) => table = t,
                _ => break,
            }
        }
        best.map(|b| self.line_at(b))
    }

    /// 1-based line number of a byte offset.
    pub(crate) fn line_at(&self, offset: usize) -> usize {
        line_at(self.text, offset)
    }
}

/// 1-based line number of a byte offset in `text`.
pub(crate) fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    1 + text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count()
}

/// `databases[1][2]` → (`databases`, [1, 2]). None for a malformed part.
fn split_indexes(part: &str) -> Option<(&str, Vec<usize>)> {
    let Some(open) = part.find('[') else {
        return Some((part, Vec::new()));
    };
    let key = &part[..open];
    let mut indexes = Vec::new();
    for piece in part[open + 1..].split('[') {
        indexes.push(piece.strip_suffix(']')?.parse().ok()?);
    }
    Some((key, indexes))
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut table = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, Spanned<Node>>()? {
            table.insert(k, v);
        }
        Ok(Node::Table(table))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
[general]
listen_port = 1

[[databases]]
name = \"a\"

[[databases]]
name = \"b\"
port = 2
";

    #[test]
    fn paths_map_to_lines() {
        let spans = Spans::new(DOC);
        assert_eq!(spans.line_of("general.listen_port"), Some(2));
        assert_eq!(spans.line_of("databases[1].port"), Some(9));
        assert_eq!(spans.line_of("databases[0].name"), Some(5));
        // Absent keys fall back to their table.
        let db1 = spans.line_of("databases[1].host");
        assert!(matches!(db1, Some(7..=8)), "{db1:?}");
        assert_eq!(spans.line_of("nothing"), None);
    }

    #[test]
    fn unindexable_text_gives_no_lines() {
        assert_eq!(Spans::new("[[a]]\nx = 1\n[a]").line_of("a"), None);
    }
}
