//! What a `POST /sql` asks for: its body (`{"query","params","arrayMode"}` or
//! `{"queries":[...]}`) and the headers that shape the answer (Neon's array mode, raw text,
//! batch isolation; `Accept` for streaming).

use hyper::header::{HeaderMap, ACCEPT};
use serde_json::Value;

use super::json::ValueText;
use super::results::RowAs;

/// The most parameters one statement may have (the protocol's limit).
const MAX_PARAMS: usize = 65_535;

/// One statement and its parameters (text, `None` for NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub sql: String,
    pub params: Vec<Option<String>>,
    pub row_as: RowAs,
}

/// A request's statements: one, or a batch run in one transaction opened by `begin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    One(Query),
    Batch { queries: Vec<Query>, begin: String },
}

impl Work {
    pub fn queries(&self) -> &[Query] {
        match self {
            Work::One(q) => std::slice::from_ref(q),
            Work::Batch { queries, .. } => queries,
        }
    }
}

/// How the response is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Neon's JSON document (`application/json`), written as rows arrive.
    Json,
    /// One JSON value per row and line (`application/x-ndjson`).
    Ndjson,
    /// Neon's message stream (`application/vnd.neon.sql.v1+json`): `[1, ...fields]`,
    /// `[0, ...values]`, `[2, command, rowCount]`, `[3]` or `[4, error]`, one per line.
    NeonStream,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Ndjson => "application/x-ndjson",
            Format::NeonStream => NEON_STREAM,
        }
    }

    /// Whether an error after rows can be told in the body (NDJSON's `{"error":..}` line,
    /// Neon's `[4, error]`); a JSON answer has no such place.
    pub fn has_error_trailer(self) -> bool {
        self != Format::Json
    }
}

pub const NEON_STREAM: &str = "application/vnd.neon.sql.v1+json";

/// A request pgvia cannot run as sent: 400 with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

fn bad(m: impl Into<String>) -> BadRequest {
    BadRequest(m.into())
}

/// The answer's format from `Accept` (the first of ours it names; JSON otherwise).
pub fn format(headers: &HeaderMap) -> Format {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    for part in accept.split(',') {
        match part.split(';').next().unwrap_or("").trim() {
            "application/x-ndjson" => return Format::Ndjson,
            NEON_STREAM => return Format::NeonStream,
            _ => {}
        }
    }
    Format::Json
}

fn flag(headers: &HeaderMap, name: &str) -> Result<Option<bool>, BadRequest> {
    match headers.get(name).map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if v == "true" => Ok(Some(true)),
        Some(v) if v == "false" => Ok(Some(false)),
        Some(_) => Err(bad(format!("header {name} must be true or false"))),
    }
}

/// `Neon-Raw-Text-Output: true`: every value as PostgreSQL's text.
pub fn value_text(headers: &HeaderMap) -> Result<ValueText, BadRequest> {
    Ok(if flag(headers, "neon-raw-text-output")? == Some(true) { ValueText::Raw } else { ValueText::Typed })
}

/// `Neon-Array-Mode: true`: rows as arrays unless a query says otherwise.
pub fn default_row_as(headers: &HeaderMap) -> Result<RowAs, BadRequest> {
    Ok(if flag(headers, "neon-array-mode")? == Some(true) { RowAs::Array } else { RowAs::Object })
}

/// The statement that opens a batch's transaction, from Neon's batch headers.
pub fn begin_statement(headers: &HeaderMap) -> Result<String, BadRequest> {
    let mut begin = String::from("BEGIN");
    if let Some(level) = headers.get("neon-batch-isolation-level") {
        let level = match level.to_str().unwrap_or("") {
            "ReadUncommitted" => "READ UNCOMMITTED",
            "ReadCommitted" => "READ COMMITTED",
            "RepeatableRead" => "REPEATABLE READ",
            "Serializable" => "SERIALIZABLE",
            _ => {
                return Err(bad(
                    "Neon-Batch-Isolation-Level must be ReadUncommitted, ReadCommitted, RepeatableRead or Serializable",
                ))
            }
        };
        begin.push_str(" ISOLATION LEVEL ");
        begin.push_str(level);
    }
    match flag(headers, "neon-batch-read-only")? {
        Some(true) => begin.push_str(" READ ONLY"),
        Some(false) => begin.push_str(" READ WRITE"),
        None => {}
    }
    match flag(headers, "neon-batch-deferrable")? {
        Some(true) => begin.push_str(" DEFERRABLE"),
        Some(false) => begin.push_str(" NOT DEFERRABLE"),
        None => {}
    }
    Ok(begin)
}

/// Reads the body: one query, or `{"queries": [...]}`.
pub fn work(
    body: &[u8],
    row_as: RowAs,
    begin: impl FnOnce() -> Result<String, BadRequest>,
) -> Result<Work, BadRequest> {
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("malformed JSON body: {e}")))?;
    let Value::Object(mut o) = v else { return Err(bad("the body must be a JSON object")) };
    if let Some(qs) = o.remove("queries") {
        let Value::Array(qs) = qs else { return Err(bad("\"queries\" must be an array")) };
        let queries = qs.into_iter().map(|q| query(q, row_as)).collect::<Result<Vec<_>, _>>()?;
        return Ok(Work::Batch { queries, begin: begin()? });
    }
    query(Value::Object(o), row_as).map(Work::One)
}

fn query(v: Value, row_as: RowAs) -> Result<Query, BadRequest> {
    let Value::Object(mut o) = v else { return Err(bad("each query must be a JSON object")) };
    let Some(Value::String(sql)) = o.remove("query") else {
        return Err(bad("\"query\" must be a string"));
    };
    let params = match o.remove("params") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ps)) => ps.iter().map(param).collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(bad("\"params\" must be an array")),
    };
    if params.len() > MAX_PARAMS {
        return Err(bad(format!("at most {MAX_PARAMS} parameters are allowed")));
    }
    let row_as = match o.remove("arrayMode") {
        None | Some(Value::Null) => row_as,
        Some(Value::Bool(true)) => RowAs::Array,
        Some(Value::Bool(false)) => RowAs::Object,
        Some(_) => return Err(bad("\"arrayMode\" must be a boolean")),
    };
    Ok(Query { sql, params, row_as })
}

/// A parameter as the text PostgreSQL is sent in Bind: strings as they are, numbers and
/// booleans as their JSON text, arrays as PostgreSQL array literals, objects as JSON text
/// (for `json`/`jsonb` parameters), `null` as NULL.
fn param(v: &Value) -> Result<Option<String>, BadRequest> {
    Ok(match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Object(_) => Some(v.to_string()),
        Value::Array(items) => {
            let mut s = String::from("{");
            array_literal(items, &mut s, 0)?;
            s.push('}');
            Some(s)
        }
    })
}

fn array_literal(items: &[Value], s: &mut String, depth: u32) -> Result<(), BadRequest> {
    if depth >= 6 {
        return Err(bad("array parameters may have at most 6 dimensions"));
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        match item {
            Value::Null => s.push_str("NULL"),
            Value::Array(inner) => {
                s.push('{');
                array_literal(inner, s, depth + 1)?;
                s.push('}');
            }
            Value::String(t) => quote_element(t, s),
            other => quote_element(&other.to_string(), s),
        }
    }
    Ok(())
}

fn quote_element(t: &str, s: &mut String) {
    s.push('"');
    for c in t.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_become_text() {
        let body = br#"{"query":"select $1, $2, $3, $4, $5, $6","params":["a",1.5,true,null,[1,"x\"y",null,[2]],{"k":1}]}"#;
        let w = work(body, RowAs::Object, || Ok(String::new())).unwrap_or_else(|e| panic!("{e}"));
        let Work::One(q) = w else { panic!("one query") };
        assert_eq!(
            q.params,
            vec![
                Some("a".into()),
                Some("1.5".into()),
                Some("true".into()),
                None,
                Some(r#"{"1","x\"y",NULL,{"2"}}"#.into()),
                Some(r#"{"k":1}"#.into())
            ]
        );
    }

    #[test]
    fn malformed_bodies_are_refused() {
        for body in
            [&b"{"[..], b"[]", br#"{"query":1}"#, br#"{"query":"x","params":{}}"#, br#"{"queries":{}}"#]
        {
            assert!(work(body, RowAs::Object, || Ok(String::new())).is_err());
        }
    }
}
