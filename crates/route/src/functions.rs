//! Function calls that matter to a pooler: those that write (so the query needs the
//! primary) and those that change session state (`set_config`, advisory locks).

use pg_raw_parse::const_val::ConstValue;
use pg_raw_parse::list::NodeList;
use pg_raw_parse::nodes::FuncCall;
use pg_raw_parse::Node;

use crate::model::{LockOp, LockScope};
use crate::store::{EffectData, Span};
use crate::walk::{Walker, W};

/// Built-in functions that cannot run on a hot standby or only make sense on the primary.
/// `currval`/`lastval` read session state left by `nextval`, which ran on the primary.
const BUILTIN_WRITES: &[&str] = &[
    "nextval",
    "setval",
    "currval",
    "lastval",
    "pg_notify",
    "txid_current",
    "pg_current_xact_id",
    "lo_create",
    "lo_creat",
    "lo_import",
    "lo_unlink",
    "lo_put",
    "lo_from_bytea",
    "lowrite",
    "lo_truncate",
    "lo_truncate64",
    "pg_switch_wal",
    "pg_create_restore_point",
];

/// Common built-ins that only read: a `SELECT` calling nothing else cannot hide a write in a
/// function body. Sorted, for a binary search.
const BUILTIN_READS: &[&str] = &[
    "abs",
    "age",
    "array_agg",
    "array_length",
    "array_position",
    "array_to_string",
    "avg",
    "bit_length",
    "bool_and",
    "bool_or",
    "btrim",
    "cardinality",
    "cast",
    "cbrt",
    "ceil",
    "ceiling",
    "char_length",
    "character_length",
    "clock_timestamp",
    "coalesce",
    "concat",
    "concat_ws",
    "count",
    "current_database",
    "current_date",
    "current_schema",
    "current_setting",
    "current_time",
    "current_timestamp",
    "current_user",
    "date_part",
    "date_trunc",
    "decode",
    "div",
    "encode",
    "every",
    "exp",
    "extract",
    "floor",
    "format",
    "gen_random_uuid",
    "generate_series",
    "greatest",
    "initcap",
    "json_agg",
    "json_build_array",
    "json_build_object",
    "json_extract_path",
    "json_extract_path_text",
    "json_object_agg",
    "jsonb_agg",
    "jsonb_array_elements",
    "jsonb_array_length",
    "jsonb_build_array",
    "jsonb_build_object",
    "jsonb_each",
    "jsonb_extract_path",
    "jsonb_extract_path_text",
    "jsonb_object_agg",
    "jsonb_set",
    "jsonb_typeof",
    "least",
    "left",
    "length",
    "ln",
    "localtime",
    "localtimestamp",
    "log",
    "lower",
    "lpad",
    "ltrim",
    "make_date",
    "make_interval",
    "make_timestamp",
    "make_timestamptz",
    "max",
    "md5",
    "min",
    "mod",
    "now",
    "nullif",
    "octet_length",
    "overlaps",
    "pg_backend_pid",
    "pg_is_in_recovery",
    "pg_postmaster_start_time",
    "position",
    "power",
    "random",
    "regexp_match",
    "regexp_matches",
    "regexp_replace",
    "regexp_split_to_array",
    "repeat",
    "replace",
    "reverse",
    "right",
    "round",
    "row_number",
    "rpad",
    "rtrim",
    "session_user",
    "sign",
    "split_part",
    "sqrt",
    "statement_timestamp",
    "string_agg",
    "strpos",
    "substr",
    "substring",
    "sum",
    "timeofday",
    "to_char",
    "to_date",
    "to_json",
    "to_jsonb",
    "to_number",
    "to_timestamp",
    "transaction_timestamp",
    "trim",
    "trunc",
    "unnest",
    "upper",
    "version",
];

/// What an advisory lock function does, by name.
fn advisory(name: &str) -> Option<(LockScope, LockOp)> {
    let rest = name.strip_prefix("pg_")?;
    let rest = rest.strip_prefix("try_").unwrap_or(rest);
    Some(match rest {
        "advisory_lock" | "advisory_lock_shared" => (LockScope::Session, LockOp::Acquire),
        "advisory_xact_lock" | "advisory_xact_lock_shared" => (LockScope::Transaction, LockOp::Acquire),
        "advisory_unlock" | "advisory_unlock_shared" if !name.starts_with("pg_try_") => {
            (LockScope::Session, LockOp::Release)
        }
        "advisory_unlock_all" if !name.starts_with("pg_try_") => (LockScope::Session, LockOp::ReleaseAll),
        _ => return None,
    })
}

/// The last two parts of a function name: `(schema, name)`.
pub(crate) fn func_name(parts: &NodeList) -> (Option<&str>, &str) {
    let mut schema = None;
    let mut name = "";
    for part in parts {
        if let Node::String(s) = part {
            schema = if name.is_empty() { None } else { Some(name) };
            name = s.sval().unwrap_or("");
        }
    }
    (schema, name)
}

/// The text of a constant, looking through casts: `'x'`, `'x'::text`, `42`, `true`.
pub(crate) fn const_text<'a>(node: Node<'a>, buf: &mut itoa_buf::Buf) -> Option<ConstText<'a>> {
    match node {
        Node::A_Const(c) if !c.isnull => match c.val()? {
            ConstValue::String(s) | ConstValue::Float(s) => Some(ConstText::Str(s)),
            ConstValue::Integer(i) => Some(ConstText::Int(buf.format(i))),
            ConstValue::Boolean(b) => Some(ConstText::Bool(b)),
            _ => None,
        },
        Node::TypeCast(c) => const_text(c.arg(), buf),
        _ => None,
    }
}

/// A constant's text, or its boolean value when the parser kept it as one.
pub(crate) enum ConstText<'a> {
    Str(&'a str),
    Int(std::ops::Range<usize>),
    Bool(bool),
}

/// A tiny integer formatter so constants need no allocation.
pub(crate) mod itoa_buf {
    pub struct Buf {
        pub bytes: [u8; 12],
    }

    impl Buf {
        pub fn new() -> Buf {
            Buf { bytes: [0; 12] }
        }

        /// Writes `v` right-aligned and returns the range that holds it.
        pub fn format(&mut self, v: i32) -> std::ops::Range<usize> {
            let mut n = v.unsigned_abs();
            let mut i = self.bytes.len();
            loop {
                i -= 1;
                self.bytes[i] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            if v < 0 {
                i -= 1;
                self.bytes[i] = b'-';
            }
            i..self.bytes.len()
        }

        pub fn get(&self, r: std::ops::Range<usize>) -> &str {
            std::str::from_utf8(&self.bytes[r]).unwrap_or("")
        }
    }
}

/// PostgreSQL's spellings of boolean true (`parse_bool`), for `set_config`'s `is_local`.
fn is_true_text(s: &str) -> bool {
    let s = s.trim();
    ["t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"].iter().any(|t| s.eq_ignore_ascii_case(t))
}

impl<'t> Walker<'t, '_> {
    /// Classifies one function call: writes, advisory locks, `set_config`.
    pub fn func_call(&mut self, f: &'t FuncCall) -> W {
        let (schema, name) = func_name(f.funcname());
        let builtin = schema.is_none() || schema == Some("pg_catalog");
        let reads = builtin && BUILTIN_READS.binary_search(&name).is_ok();
        if !reads {
            self.s.calls_unlisted = true;
        }
        // Whether the call is one whose every effect on the session the analysis records
        // (or that has none worth tracking); anything else may change the session unseen.
        let mut seen = reads;
        if builtin {
            if BUILTIN_WRITES.contains(&name) {
                self.writes = true;
                self.s.calls_notify |= name == "pg_notify";
                seen = true;
            } else if let Some((scope, op)) = advisory(name) {
                // Advisory locks taken on a standby would not exclude writers on the primary.
                self.writes = true;
                self.s.effects.push(EffectData::AdvisoryLock { scope, op });
                seen = true;
            } else if name == "set_config" {
                self.set_config(f.args());
                seen = true;
            }
        }
        if !seen && !self.fns.user_neutral(schema, name) {
            self.s.hidden_effects = true;
        }
        if self.fns.user_writes(schema, name) {
            self.writes = true;
        }
        Ok(())
    }

    /// `set_config(name, value, is_local)`: a session `SET` unless `is_local` is a literal
    /// true. A computed name or value is recorded as unknown rather than ignored.
    fn set_config(&mut self, args: &'t NodeList) {
        let mut buf = itoa_buf::Buf::new();
        let local = args.get(2).and_then(|a| const_text(a, &mut buf));
        let is_local = match local {
            Some(ConstText::Bool(b)) => b,
            Some(ConstText::Str(s)) => is_true_text(s),
            Some(ConstText::Int(r)) => buf.get(r) != "0",
            None => false,
        };
        if is_local {
            return;
        }
        let name = args.get(0).and_then(|a| self.intern_const(a));
        let value = args.get(1).and_then(|a| self.intern_const(a));
        self.s.effects.push(EffectData::Set { name, value });
    }

    /// Copies a constant's text into the analysis.
    pub fn intern_const(&mut self, node: Node<'_>) -> Option<Span> {
        let mut buf = itoa_buf::Buf::new();
        match const_text(node, &mut buf)? {
            ConstText::Str(s) => Some(self.s.intern(s)),
            ConstText::Int(r) => Some(self.s.intern(buf.get(r))),
            ConstText::Bool(b) => Some(self.s.intern(if b { "on" } else { "off" })),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_reads_are_sorted_for_binary_search() {
        assert!(super::BUILTIN_READS.windows(2).all(|w| w[0] < w[1]));
    }

    use super::*;

    #[test]
    fn advisory_names() {
        assert_eq!(advisory("pg_advisory_lock"), Some((LockScope::Session, LockOp::Acquire)));
        assert_eq!(advisory("pg_try_advisory_lock_shared"), Some((LockScope::Session, LockOp::Acquire)));
        assert_eq!(advisory("pg_advisory_xact_lock"), Some((LockScope::Transaction, LockOp::Acquire)));
        assert_eq!(
            advisory("pg_try_advisory_xact_lock_shared"),
            Some((LockScope::Transaction, LockOp::Acquire))
        );
        assert_eq!(advisory("pg_advisory_unlock"), Some((LockScope::Session, LockOp::Release)));
        assert_eq!(advisory("pg_advisory_unlock_all"), Some((LockScope::Session, LockOp::ReleaseAll)));
        assert_eq!(advisory("pg_try_advisory_unlock"), None);
        assert_eq!(advisory("pg_advisory"), None);
        assert_eq!(advisory("advisory_lock"), None);
    }

    #[test]
    fn integers_format_without_allocating() {
        let mut b = itoa_buf::Buf::new();
        for v in [0, 7, -7, 42, i32::MAX, i32::MIN] {
            let r = b.format(v);
            assert_eq!(b.get(r), v.to_string());
        }
    }
}
