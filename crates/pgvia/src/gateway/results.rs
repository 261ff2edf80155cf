//! A result's parts as JSON: its fields (from RowDescription), its rows (from DataRow), its
//! command tag and an error's fields, in Neon's names.
//!
//! Per result, [`Columns`] decides each column's shape and escapes its name once; per row,
//! [`row_into`] only copies and escapes bytes into the output (no allocation while the
//! output has room).

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use wire::backend::{DataRow, Fields, RowDescription};
use wire::WireError;

use super::json::{self, Shape, ValueText};

/// Rows as objects keyed by column name, or as arrays (Neon's `arrayMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowAs {
    Object,
    Array,
}

/// What a result's rows need to be written: each column's shape and its escaped key.
#[derive(Debug, Default)]
pub struct Columns {
    shapes: Vec<Shape>,
    /// Every column's `"name":`, one after the other; `key_ends[i]` is where column i's ends.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
}

impl Columns {
    /// A result with no columns (a statement answered with NoData).
    pub fn none() -> Self {
        Self::default()
    }

    pub fn describe(desc: &RowDescription<'_>, text: ValueText) -> Result<Self, WireError> {
        let mut cols = Columns { shapes: Vec::with_capacity(desc.len()), ..Columns::default() };
        let mut key = BytesMut::new();
        for c in desc.columns() {
            let c = c?;
            cols.shapes.push(json::shape_of(c.type_oid, text));
            key.clear();
            json::string_into(&mut key, c.name.as_bytes());
            key.put_u8(b':');
            cols.keys.extend_from_slice(&key);
            cols.key_ends.push(cols.keys.len());
        }
        Ok(cols)
    }

    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }
}

/// Writes `[{"name":..,"dataTypeID":..,"tableID":..,"columnID":..,"dataTypeSize":..,
/// "dataTypeModifier":..,"format":"text"}, ...]`, the elements only when `bare` (for
/// Neon's stream, where they follow the message's kind).
pub fn fields_into(
    out: &mut BytesMut,
    desc: Option<&RowDescription<'_>>,
    bare: bool,
) -> Result<(), WireError> {
    if !bare {
        out.put_u8(b'[');
    }
    if let Some(desc) = desc {
        for (i, c) in desc.columns().enumerate() {
            let c = c?;
            if i > 0 {
                out.put_u8(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            json::string_into(out, c.name.as_bytes());
            let format = if c.format == 1 { "binary" } else { "text" };
            // fmt::Write into BytesMut cannot fail.
            let _ = write!(
                out,
                ",\"dataTypeID\":{},\"tableID\":{},\"columnID\":{},\"dataTypeSize\":{},\"dataTypeModifier\":{},\"format\":\"{format}\"}}",
                c.type_oid, c.table_oid, c.column_id, c.type_size, c.type_modifier
            );
        }
    }
    if !bare {
        out.put_u8(b']');
    }
    Ok(())
}

/// Writes one row as an object or an array.
pub fn row_into(
    out: &mut BytesMut,
    cols: &Columns,
    row: &DataRow<'_>,
    row_as: RowAs,
) -> Result<(), WireError> {
    let (open, close) = match row_as {
        RowAs::Object => (b'{', b'}'),
        RowAs::Array => (b'[', b']'),
    };
    out.put_u8(open);
    values_into(out, cols, row, row_as)?;
    out.put_u8(close);
    Ok(())
}

/// Writes a row's values separated by commas (keys first for objects), without brackets.
pub fn values_into(
    out: &mut BytesMut,
    cols: &Columns,
    row: &DataRow<'_>,
    row_as: RowAs,
) -> Result<(), WireError> {
    if row.len() != cols.len() {
        return Err(WireError::Invalid {
            message: "DataRow",
            detail: "column count differs from RowDescription",
        });
    }
    for (i, v) in row.values().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        if row_as == RowAs::Object {
            out.extend_from_slice(cols.key(i));
        }
        json::value_into(out, cols.shapes[i], v?);
    }
    Ok(())
}

/// The rows a command tag reports (`INSERT 0 5` → 5, `SELECT 3` → 3), if any.
pub fn tag_rows(tag: &str) -> Option<u64> {
    let last = tag.rsplit(' ').next()?;
    if tag.contains(' ') {
        last.parse().ok()
    } else {
        None
    }
}

/// The command of a tag (`INSERT 0 5` → `INSERT`).
pub fn tag_command(tag: &str) -> &str {
    tag.split(' ').next().unwrap_or(tag)
}

/// Writes `"command":"SELECT","rowCount":3` (no braces).
pub fn command_into(out: &mut BytesMut, tag: &str) {
    out.extend_from_slice(b"\"command\":");
    json::string_into(out, tag_command(tag).as_bytes());
    out.extend_from_slice(b",\"rowCount\":");
    match tag_rows(tag) {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// PostgreSQL's error fields under the names node-postgres (and Neon's driver) use.
const ERROR_FIELDS: [(u8, &str); 16] = [
    (b'V', "severity"),
    (b'C', "code"),
    (b'D', "detail"),
    (b'H', "hint"),
    (b'P', "position"),
    (b'p', "internalPosition"),
    (b'q', "internalQuery"),
    (b'W', "where"),
    (b's', "schema"),
    (b't', "table"),
    (b'c', "column"),
    (b'd', "dataType"),
    (b'n', "constraint"),
    (b'F', "file"),
    (b'L', "line"),
    (b'R', "routine"),
];

/// Writes an ErrorResponse as `{"message":..,"severity":..,"code":..,...}`: every field the
/// server sent, as strings.
pub fn error_into(out: &mut BytesMut, fields: &Fields<'_>) {
    out.extend_from_slice(b"{\"message\":");
    json::string_into(out, fields.get_bytes(b'M').unwrap_or_default());
    for (code, name) in ERROR_FIELDS {
        let value = match code {
            b'V' => fields.get_bytes(b'V').or_else(|| fields.get_bytes(b'S')),
            _ => fields.get_bytes(code),
        };
        if let Some(v) = value {
            let _ = write!(out, ",\"{name}\":");
            json::string_into(out, v);
        }
    }
    out.put_u8(b'}');
}

/// Writes an error pgvia raises itself (no server involved), in the same shape.
pub fn own_error_into(out: &mut BytesMut, code: &str, message: &str) {
    out.extend_from_slice(b"{\"message\":");
    json::string_into(out, message.as_bytes());
    out.extend_from_slice(b",\"severity\":\"ERROR\",\"code\":");
    json::string_into(out, code.as_bytes());
    out.put_u8(b'}');
}

/// Writes `"SELECT",3` (for Neon's stream).
pub fn command_into_array(out: &mut BytesMut, tag: &str) {
    json::string_into(out, tag_command(tag).as_bytes());
    out.put_u8(b',');
    match tag_rows(tag) {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => out.extend_from_slice(b"null"),
    }
}
