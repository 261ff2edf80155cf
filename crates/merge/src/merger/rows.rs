//! Rows as the merger holds them, their layout, and the helpers that read and order them.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use crate::binary;
use crate::error::MergeError;
use crate::value::{self, Class, Value};

/// Bytes the allocator adds to each allocation, roughly.
pub(super) const MALLOC_BYTES: usize = 16;

/// Per-row bookkeeping bytes, on top of the values, for the memory budget.
pub(super) const ROW_BYTES: usize = 48;

pub(super) struct Row {
    /// The shard's DataRow body, forwarded as it came when the row has no hidden columns.
    pub(super) body: Option<Bytes>,
    pub(super) cells: Vec<Option<Bytes>>,
    pub(super) keys: Vec<Option<Value>>,
    pub(super) size: usize,
}

/// Column facts fixed by the first RowDescription.
pub(super) struct Layout {
    /// Shard columns: (type OID, format).
    pub(super) shard: Vec<(u32, i16)>,
    pub(super) visible: usize,
    pub(super) hidden: usize,
    /// Merged columns' (class, type OID).
    pub(super) types: Vec<(Class, u32)>,
    /// Merged columns' formats (0 text, 1 binary): the first part's.
    pub(super) formats: Vec<i16>,
    /// Merged column of each sort key, with its direction.
    pub(super) sort: Vec<(usize, bool, bool)>,
    pub(super) distinct: Option<Vec<usize>>,
}

/// A cell as text: binary-format cells converted, text ones borrowed.
pub(super) fn text_cell(
    oid: u32,
    format: i16,
    cell: Option<&[u8]>,
) -> Result<Option<Cow<'_, [u8]>>, MergeError> {
    match cell {
        None => Ok(None),
        Some(b) if format == 1 => Ok(Some(Cow::Owned(binary::to_text(oid, b)?))),
        Some(b) => Ok(Some(Cow::Borrowed(b))),
    }
}

/// Decoded sort keys of a row; `in_format`: cells are in the columns' formats (else text).
pub(super) fn merged_sort_keys(
    layout: &Layout,
    cells: &[Option<Bytes>],
    in_format: bool,
) -> Result<Vec<Option<Value>>, MergeError> {
    layout
        .sort
        .iter()
        .map(|&(c, _, _)| {
            let (class, oid) = layout.types[c];
            let format = if in_format { layout.formats[c] } else { 0 };
            text_cell(oid, format, cells[c].as_deref())?.map(|t| value::decode(class, oid, &t)).transpose()
        })
        .collect()
}

pub(super) fn compare_rows(layout: &Layout, a: &Row, b: &Row) -> std::cmp::Ordering {
    compare_keys(layout, &a.keys, &b.keys)
}

/// Orders two rows' decoded sort keys as the ORDER BY does.
pub(super) fn compare_keys(layout: &Layout, a: &[Option<Value>], b: &[Option<Value>]) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    for (i, &(_, desc, nulls_first)) in layout.sort.iter().enumerate() {
        let (Some(x), Some(y)) = (a.get(i), b.get(i)) else { return a.len().cmp(&b.len()) };
        let ord = match (x, y) {
            (None, None) => Equal,
            (None, Some(_)) => {
                if nulls_first {
                    Less
                } else {
                    Greater
                }
            }
            (Some(_), None) => {
                if nulls_first {
                    Greater
                } else {
                    Less
                }
            }
            (Some(x), Some(y)) => {
                let o = value::compare(x, y);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if ord != Equal {
            return ord;
        }
    }
    Equal
}

#[allow(clippy::too_many_arguments)]
pub(super) fn put_field(
    b: &mut BytesMut,
    name: &str,
    table: u32,
    attnum: i16,
    oid: u32,
    len: i16,
    typmod: i32,
    format: i16,
) {
    wire::build::put_cstr(b, name.as_bytes());
    b.put_u32(table);
    b.put_i16(attnum);
    b.put_u32(oid);
    b.put_i16(len);
    b.put_i32(typmod);
    b.put_i16(format);
}

pub(super) fn rd_body(
    rd: &wire::backend::RowDescription<'_>,
    fields: &[wire::backend::Column<'_>],
) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_i16(rd.len() as i16);
    for f in fields {
        put_field(
            &mut body,
            f.name,
            f.table_oid,
            f.column_id,
            f.type_oid,
            f.type_size,
            f.type_modifier,
            f.format,
        );
    }
    body.to_vec()
}
