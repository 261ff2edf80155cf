//! A property test over generated rows: for every supported type (and arrays of them,
//! NULLs, NaN and infinities, extreme numerics, unicode and control characters), the JSON
//! the gateway writes means the same as PostgreSQL's own `row_to_json` of the same row,
//! in object mode, array mode and raw-text mode.
//!
//! Neon's mapping differs from `row_to_json` by design in two ways, and the comparison
//! allows exactly those: `int8` and `numeric` are strings (the same number), and timestamps
//! are PostgreSQL's text (a space where `row_to_json` writes `T`).

mod common;

use common::http::{self, neon_auth};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{json, Value};

/// One generated column: its SQL type and its value as text (None: NULL).
#[derive(Debug, Clone)]
struct Col {
    ty: &'static str,
    value: Option<String>,
}

fn text_value() -> impl Strategy<Value = String> {
    // Any character but NUL (which PostgreSQL's text cannot hold), control characters
    // and astral-plane ones included.
    prop::collection::vec(any::<char>().prop_filter("no NUL", |c| *c != '\0'), 0..12)
        .prop_map(|v| v.into_iter().collect())
}

fn float8() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NaN".to_owned()),
        Just("Infinity".to_owned()),
        Just("-Infinity".to_owned()),
        Just("-0".to_owned()),
        Just("1.7976931348623157e308".to_owned()),
        Just("5e-324".to_owned()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
    ]
}

fn numeric() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NaN".to_owned()),
        Just("123456789012345678901234567890.123456789".to_owned()),
        Just("-0.000000000000000000001".to_owned()),
        (any::<i64>(), 0u32..6).prop_map(|(i, s)| format!("{}.{}", i, "7".repeat(s as usize))),
    ]
}

fn array_literal(items: &[Option<String>]) -> String {
    let inner: Vec<String> = items
        .iter()
        .map(|i| match i {
            None => "NULL".to_owned(),
            Some(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn json_value() -> impl Strategy<Value = String> {
    // Numbers inside jsonb are kept to a range a test client's f64 parser takes (jsonb
    // writes 1e308 as 309 digits; that is valid JSON, but not what this test is about).
    (text_value(), any::<i32>(), any::<bool>(), any::<i32>()).prop_map(|(t, i, b, f)| {
        json!({"t": t, "i": i, "b": b, "f": f as f64 / 1024.0, "a": [null, i, [t.clone()]]}).to_string()
    })
}

fn col() -> impl Strategy<Value = Col> {
    let scalar = prop_oneof![
        any::<i16>().prop_map(|v| ("int2", v.to_string())),
        any::<i32>().prop_map(|v| ("int4", v.to_string())),
        any::<i64>().prop_map(|v| ("int8", v.to_string())),
        any::<f32>().prop_filter("finite", |f| f.is_finite()).prop_map(|v| ("float4", format!("{v:e}"))),
        float8().prop_map(|v| ("float8", v)),
        numeric().prop_map(|v| ("numeric", v)),
        any::<bool>().prop_map(|v| ("bool", v.to_string())),
        text_value().prop_map(|v| ("text", v)),
        text_value().prop_map(|v| ("varchar", v)),
        json_value().prop_map(|v| ("json", v)),
        json_value().prop_map(|v| ("jsonb", v)),
        (1i32..9999, 1u32..13, 1u32..29, 0u32..24, 0u32..60, 0u32..60, 0u32..1_000_000).prop_map(
            |(y, mo, d, h, mi, s, us)| (
                "timestamp",
                format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")
            )
        ),
        (1i32..9999, 1u32..13, 1u32..29).prop_map(|(y, mo, d)| ("date", format!("{y:04}-{mo:02}-{d:02}"))),
        Just(("timestamptz", "infinity".to_owned())),
        any::<u128>().prop_map(|u| ("uuid", format!("{:032x}", u))),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|b| (
            "bytea",
            format!("\\x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        )),
        prop::collection::vec(prop::option::of(any::<i32>()), 0..5).prop_map(|v| (
            "int4[]",
            array_literal(&v.iter().map(|o| o.map(|i| i.to_string())).collect::<Vec<_>>())
        )),
        prop::collection::vec(prop::option::of(any::<i64>()), 0..5).prop_map(|v| (
            "int8[]",
            array_literal(&v.iter().map(|o| o.map(|i| i.to_string())).collect::<Vec<_>>())
        )),
        prop::collection::vec(prop::option::of(float8()), 0..5).prop_map(|v| ("float8[]", array_literal(&v))),
        prop::collection::vec(prop::option::of(text_value()), 0..5)
            .prop_map(|v| ("text[]", array_literal(&v))),
        prop::collection::vec(prop::option::of(any::<bool>()), 0..5).prop_map(|v| (
            "bool[]",
            array_literal(&v.iter().map(|o| o.map(|b| b.to_string())).collect::<Vec<_>>())
        )),
        prop::collection::vec(prop::option::of(json_value()), 0..3)
            .prop_map(|v| ("jsonb[]", array_literal(&v))),
        prop::collection::vec(any::<i32>(), 1..3).prop_map(|v| {
            let row = v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
            ("int4[]", format!("{{{{{row}}},{{{row}}}}}"))
        }),
    ];
    (scalar, prop::bool::weighted(0.15)).prop_map(|((ty, v), null)| Col { ty, value: (!null).then_some(v) })
}

/// Whether the gateway's value `g` means the same as `row_to_json`'s `r` for type `ty`.
fn same(ty: &str, g: &Value, r: &Value) -> bool {
    match (g, r) {
        // serde_json (without `float_roundtrip`) may parse a long decimal one or two ulps off
        // the correctly rounded f64, so the reference is only near; the caller checks the exact
        // digits against PostgreSQL's own text.
        (Value::String(s), Value::Number(n)) if ty.starts_with("int8") || ty.starts_with("numeric") => {
            match (s.parse::<f64>(), n.as_f64()) {
                (Ok(a), Some(b)) => a == b || (a - b).abs() <= a.abs().max(b.abs()) * 4.0 * f64::EPSILON,
                _ => false,
            }
        }
        (Value::String(s), Value::String(t)) if ty.starts_with("timestamp") => s.replace(' ', "T") == *t,
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(ty, x, y))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => g == r,
    }
}

#[test]
fn json_means_what_row_to_json_means() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let pg = start_pg();
    let p = rt.block_on(TestProxy::start(
        &ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"").gateway("flush_interval = \"20ms\""),
    ));
    let gw = p.gateway.expect("gateway");
    let auth = vec![neon_auth(p.port(), USER, PASSWORD, DB)];
    let cases: u32 = std::env::var("PGVIA_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let mut runner = TestRunner::new(RunnerConfig { cases, ..RunnerConfig::default() });
    let strategy = prop::collection::vec(col(), 1..8);
    let result = runner.run(&strategy, |cols| {
        // Values go as parameters, cast to their types; timestamps and dates as expressions.
        let mut params = Vec::new();
        let mut exprs = Vec::new();
        for (i, c) in cols.iter().enumerate() {
            let name = format!("c{i}");
            params.push(c.value.clone().map_or(Value::Null, Value::String));
            exprs.push(format!("${}::{} as {name}", params.len(), c.ty));
        }
        let sql =
            format!("select row_to_json(t)::text as reference, t.* from (select {}) t", exprs.join(", "));
        let body = json!({"query": sql, "params": params});
        let (objects, arrays, raw) = rt.block_on(async {
            let objects = http::sql(gw, &auth, &body).await;
            let mut h = auth.clone();
            h.push(("Neon-Array-Mode".into(), "true".into()));
            let arrays = http::sql(gw, &h, &body).await;
            h.push(("Neon-Raw-Text-Output".into(), "true".into()));
            let raw = http::sql(gw, &h, &body).await;
            (objects, arrays, raw)
        });
        prop_assert_eq!(objects.status, 200, "{}", objects.text());
        let o = objects.json();
        let row = &o["rows"][0];
        let reference: Value =
            serde_json::from_str(row["reference"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
        let a = arrays.json();
        let arow = &a["rows"][0];
        let r = raw.json();
        let rrow = &r["rows"][0];
        for (i, c) in cols.iter().enumerate() {
            let name = format!("c{i}");
            let g = &row[&name];
            let want = &reference[&name];
            prop_assert!(
                same(c.ty, g, want),
                "{} {:?}: gateway {} vs row_to_json {}",
                c.ty,
                c.value,
                g,
                want
            );
            prop_assert_eq!(&arow[i + 1], g, "array mode differs for {}", c.ty);
            // Raw text: PostgreSQL's text of the value, or null. A numeric or int8 the gateway
            // sends as a string must carry exactly PostgreSQL's digits.
            match (&rrow[i + 1], g) {
                (Value::Null, Value::Null) => {}
                (Value::String(raw), Value::String(s)) if c.ty == "int8" || c.ty == "numeric" => {
                    prop_assert_eq!(raw, s, "{} digits differ from PostgreSQL's text", c.ty)
                }
                (Value::String(_), _) => {}
                (other, _) => prop_assert!(false, "raw value not a string: {}", other),
            }
            prop_assert_eq!(o["fields"][i + 1]["name"].as_str(), Some(name.as_str()));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(p.assert_no_leaks());
}
