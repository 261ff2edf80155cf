use std::collections::BTreeSet;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::config_rows;
use crate::config::{AnalysisSettings, AuthQuery, Config, Gateway, General, Limits, PoolDefaults};

/// A deserializer that answers nothing and records the field names a derived
/// `Deserialize` asks for: the struct's keys as the file spells them, straight from serde.
struct FieldNames(Vec<&'static str>);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for &mut FieldNames {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0.extend_from_slice(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

fn keys_of<T: for<'de> Deserialize<'de>>(prefix: &str) -> Vec<String> {
    let mut names = FieldNames(Vec::new());
    assert!(T::deserialize(&mut names).is_err());
    assert!(!names.0.is_empty(), "{prefix}: no fields recorded");
    names.0.iter().map(|f| format!("{prefix}{f}")).collect()
}

#[test]
fn every_key_of_every_section_is_shown_and_no_secret() {
    let mut expected: BTreeSet<String> = BTreeSet::new();
    expected.extend(keys_of::<General>(""));
    expected.extend(keys_of::<PoolDefaults>("pool."));
    expected.extend(keys_of::<Limits>("limits."));
    expected.extend(keys_of::<AnalysisSettings>("analysis."));
    expected.extend(keys_of::<Gateway>("gateway."));
    expected.extend(keys_of::<AuthQuery>("auth_query."));
    // The one secret the console never shows.
    assert!(expected.remove("metrics_auth_token"));

    let shown: Vec<String> = config_rows(&Config::default()).into_iter().map(|r| r.0).collect();
    let shown_set: BTreeSet<String> = shown.iter().cloned().collect();
    assert_eq!(shown.len(), shown_set.len(), "a key listed twice: {shown:?}");
    let missing: Vec<&String> = expected.difference(&shown_set).collect();
    let unknown: Vec<&String> = shown_set.difference(&expected).collect();
    assert!(missing.is_empty(), "keys missing from SHOW CONFIG: {missing:?}");
    assert!(unknown.is_empty(), "SHOW CONFIG rows that are no key: {unknown:?}");
}

#[test]
fn defaults_equal_values_in_a_default_config_and_secrets_stay_hidden() {
    // Read without validation: the token's user and database need not exist here.
    let config: Config = toml::from_str(
        "[general]\nmetrics_auth_token = \"sekrit-token-value\"\n\
         [limits]\nmerge_memory_budget = 1048576\nmerge_spill = false\n\
         [[gateway.tokens]]\ntoken = \"another-secret-token\"\nuser = \"u\"\ndatabase = \"d\"\n",
    )
    .expect("valid");
    let rows = config_rows(&config);
    for (key, value, default, _) in &rows {
        assert!(!value.contains("secret") && !value.contains("sekrit"), "{key} shows a secret");
        let changed = ["limits.merge_memory_budget", "limits.merge_spill", "gateway.tokens"];
        if !changed.contains(&key.as_str()) && !key.starts_with("auth_query.") {
            assert_eq!(value, default, "{key}");
        }
    }
    let value = |k: &str| rows.iter().find(|r| r.0 == k).map(|r| r.1.clone()).expect(k);
    assert_eq!(value("limits.merge_memory_budget"), "1048576");
    assert_eq!(value("limits.merge_spill"), "false");
    assert_eq!(value("gateway.tokens"), "1");
}
