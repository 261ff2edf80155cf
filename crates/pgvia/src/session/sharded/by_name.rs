//! The client's statements and portals by name, with the unnamed one in a field of its own.
//!
//! Drivers that do not name their statements (pgbench `-M extended`, most ORMs' one-off
//! queries) send the unnamed statement and portal in every batch: a Parse, Bind, Describe and
//! Execute each look one up. Keeping it beside the map makes those lookups a field read instead
//! of a hash and a compare per message.

use std::collections::HashMap;

#[derive(Debug)]
pub(super) struct ByName<T> {
    unnamed: Option<T>,
    named: HashMap<String, T>,
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName { unnamed: None, named: HashMap::new() }
    }
}

impl<T> ByName<T> {
    pub fn get(&self, name: &str) -> Option<&T> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }

    /// Replaces what `name` held, as a Parse or Bind under a used name does, and returns it.
    pub fn insert(&mut self, name: &str, value: T) -> Option<T> {
        if name.is_empty() {
            self.unnamed.replace(value)
        } else {
            self.named.insert(name.to_owned(), value)
        }
    }

    /// As [`Self::insert`], for a name the caller owns already.
    pub fn insert_owned(&mut self, name: String, value: T) -> Option<T> {
        if name.is_empty() {
            self.unnamed.replace(value)
        } else {
            self.named.insert(name, value)
        }
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// How many named entries there are (the unnamed one not counted).
    pub fn named_len(&self) -> usize {
        self.named.len()
    }

    pub fn remove(&mut self, name: &str) -> Option<T> {
        if name.is_empty() {
            self.unnamed.take()
        } else {
            self.named.remove(name)
        }
    }

    pub fn clear(&mut self) {
        self.unnamed = None;
        self.named.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unnamed_entry_and_named_ones_are_kept_apart() {
        let mut m = ByName::default();
        assert_eq!(m.insert("", 1), None);
        assert_eq!(m.insert("s1", 2), None);
        assert_eq!(m.get(""), Some(&1));
        assert_eq!(m.get("s1"), Some(&2));
        assert_eq!(m.insert("", 3), Some(1));
        assert_eq!((m.named_len(), m.contains_key(""), m.contains_key("s1")), (1, true, true));
        assert_eq!(m.insert_owned("s1".to_owned(), 5), Some(2));
        assert_eq!(m.insert_owned(String::new(), 3), Some(3));
        assert_eq!(m.insert("s1", 2), Some(5));
        assert_eq!(m.remove("s1"), Some(2));
        assert_eq!(m.get("s1"), None);
        assert_eq!(m.get(""), Some(&3));
        m.insert("s2", 4);
        m.clear();
        assert_eq!((m.get(""), m.get("s2")), (None, None));
    }
}
