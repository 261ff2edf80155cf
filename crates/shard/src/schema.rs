//! Schema-based sharding: each listed schema lives on one shard, and a table's shard is its
//! schema's. A qualified name says the schema; an unqualified one is looked up the way
//! PostgreSQL would find it, through `search_path`.

use crate::function::ShardId;

/// Schema names and the shard each lives on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaShards {
    schemas: Vec<(String, ShardId)>,
}

impl SchemaShards {
    pub fn new(schemas: Vec<(String, ShardId)>) -> SchemaShards {
        SchemaShards { schemas }
    }

    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }

    /// The shard of a listed schema.
    pub fn shard_of_schema(&self, schema: &str) -> Option<ShardId> {
        self.schemas.iter().find(|(s, _)| s == schema).map(|(_, shard)| *shard)
    }

    /// The shard of a table named with `schema` (when qualified) or else found through
    /// `search_path`: the first entry of the path that is a listed schema. pgvia cannot see
    /// which schemas hold the table, so an unlisted schema earlier in the path (`public`,
    /// `$user`) is stepped over, as if it did not hold it. `None` when no listed schema
    /// applies.
    pub fn shard_of<'p>(
        &self,
        schema: Option<&str>,
        search_path: impl IntoIterator<Item = &'p str>,
    ) -> Option<ShardId> {
        match schema {
            Some(s) => self.shard_of_schema(s),
            None => search_path.into_iter().find_map(|s| self.shard_of_schema(s.trim())),
        }
    }
}

/// The schemas of a `search_path` setting's value, as PostgreSQL splits it: comma-separated,
/// double-quoted names kept as written (quotes removed), others lower-cased.
pub fn parse_search_path(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in value.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
            Some(quoted) => out.push(quoted.replace("\"\"", "\"")),
            None => out.push(part.to_ascii_lowercase()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_then_the_search_path() {
        let s = SchemaShards::new(vec![("tenant_a".into(), 0), ("tenant_b".into(), 1)]);
        assert_eq!(s.shard_of(Some("tenant_b"), ["tenant_a"]), Some(1));
        assert_eq!(s.shard_of(Some("public"), ["tenant_a"]), None);
        assert_eq!(s.shard_of(None, ["$user", "public", "tenant_b", "tenant_a"]), Some(1));
        assert_eq!(s.shard_of(None, ["public"]), None);
        let path = parse_search_path(r#"Tenant_A, "Tenant_B", public"#);
        assert_eq!(path, ["tenant_a", "Tenant_B", "public"]);
        assert_eq!(s.shard_of(None, path.iter().map(String::as_str)), Some(0));
    }
}
