//! Merging `string_agg`, `array_agg`, `jsonb_agg` and `json_agg`: each shard sends its
//! values as an array, in the aggregate's ORDER BY order, with one array per ordering key;
//! the merge interleaves the shards' runs by those keys and prints the result the way
//! PostgreSQL prints the single-node aggregate.

use crate::agg::{ListAgg, ListFunc};
use crate::array_text::{element_of, parse_array, quote_element};
use crate::error::MergeError;
use crate::value::{self, Class, Value};

type Item = (Option<Vec<u8>>, Vec<Option<Value>>);

#[derive(Debug, Clone)]
pub(crate) struct ListAcc {
    list: ListAgg,
    /// (class, element OID) of each ordering key.
    keys: Vec<(Class, u32)>,
    items: Vec<Item>,
}

impl ListAcc {
    /// `oids`: the array types of the value part and of each key part.
    pub fn new(list: &ListAgg, oids: &[u32]) -> Result<ListAcc, MergeError> {
        let value = oids.first().copied().unwrap_or(0);
        let ok = match list.func {
            ListFunc::String => matches!(value, 1009 | 1015),
            ListFunc::Jsonb => value == 3807,
            ListFunc::Json => value == 199,
            ListFunc::Array => true,
        };
        if !ok {
            return Err(MergeError::unsupported(format!(
                "list aggregate over array type OID {value} across shards"
            )));
        }
        let mut keys = Vec::new();
        for &oid in oids.iter().skip(1) {
            let elem = element_of(oid).ok_or_else(|| {
                MergeError::unsupported(format!("aggregate ORDER BY a value of array type OID {oid}"))
            })?;
            let class = Class::of(elem);
            if matches!(class, Class::Opaque | Class::Canonical) {
                return Err(MergeError::unsupported(format!(
                    "aggregate ORDER BY a value of type OID {elem}"
                )));
            }
            keys.push((class, elem));
        }
        Ok(ListAcc { list: list.clone(), keys, items: Vec::new() })
    }

    /// Whether the aggregate's ORDER BY compares text.
    pub fn orders_text(&self) -> bool {
        self.keys.iter().any(|(class, _)| class.is_text())
    }

    /// The client-facing type when it is not the value part's array type.
    pub fn out_type(&self) -> Option<(u32, i16)> {
        match self.list.func {
            ListFunc::String => Some((25, -1)),
            ListFunc::Jsonb => Some((3802, -1)),
            ListFunc::Json => Some((114, -1)),
            ListFunc::Array => None,
        }
    }

    /// One shard's arrays for this group; returns the bytes of state added.
    pub fn add(&mut self, parts: &[Option<&[u8]>], oids: &[u32]) -> Result<usize, MergeError> {
        let Some(Some(values)) = parts.first() else { return Ok(0) };
        let values = parse_array(values, oids.first().copied().unwrap_or(0))?;
        let mut keys: Vec<Vec<Option<Value>>> = vec![Vec::with_capacity(self.keys.len()); values.len()];
        for (k, &(class, elem)) in self.keys.iter().enumerate() {
            let Some(Some(text)) = parts.get(k + 1) else {
                return Err(MergeError::Protocol("missing ordering key array".into()));
            };
            let elems = parse_array(text, oids.get(k + 1).copied().unwrap_or(0))?;
            if elems.len() != values.len() {
                return Err(MergeError::Protocol("ordering key array of another length".into()));
            }
            for (i, e) in elems.into_iter().enumerate() {
                keys[i].push(e.map(|t| value::decode(class, elem, &t)).transpose()?);
            }
        }
        let mut added = 0;
        for (v, k) in values.into_iter().zip(keys) {
            added += v.as_ref().map_or(0, Vec::len) + 32 + k.len() * 32;
            self.items.push((v, k));
        }
        Ok(added)
    }

    pub fn finish(&self) -> Result<Option<Vec<u8>>, MergeError> {
        if self.items.is_empty() {
            return Ok(None);
        }
        let mut items: Vec<&Item> = self.items.iter().collect();
        if !self.list.order.is_empty() {
            // Stable: equal keys keep their shard's order, which is as good as any.
            items.sort_by(|a, b| {
                for (i, &(desc, nulls_first)) in self.list.order.iter().enumerate() {
                    let ord = match (&a.1[i], &b.1[i]) {
                        (None, None) => std::cmp::Ordering::Equal,
                        (None, Some(_)) => nulls_first_ord(nulls_first),
                        (Some(_), None) => nulls_first_ord(nulls_first).reverse(),
                        (Some(x), Some(y)) => {
                            let o = value::compare(x, y);
                            if desc {
                                o.reverse()
                            } else {
                                o
                            }
                        }
                    };
                    if ord.is_ne() {
                        return ord;
                    }
                }
                std::cmp::Ordering::Equal
            });
        }
        let mut out = Vec::new();
        match self.list.func {
            ListFunc::String => {
                let mut any = false;
                for v in items.iter().filter_map(|i| i.0.as_ref()) {
                    if any {
                        out.extend_from_slice(self.list.delim.as_bytes());
                    }
                    out.extend_from_slice(v);
                    any = true;
                }
                if !any {
                    return Ok(None);
                }
            }
            ListFunc::Array => {
                out.push(b'{');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    match &item.0 {
                        Some(v) => quote_element(&mut out, v),
                        None => out.extend_from_slice(b"NULL"),
                    }
                }
                out.push(b'}');
            }
            ListFunc::Jsonb | ListFunc::Json => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b", ");
                    }
                    match &item.0 {
                        // json_agg separates arrays and records with an extra newline, which
                        // the element's text cannot tell from a json value: refuse those.
                        Some(v)
                            if self.list.func == ListFunc::Json && matches!(v.first(), Some(b'{' | b'[')) =>
                        {
                            return Err(MergeError::unsupported(
                                "json_agg of arrays or records across shards (use jsonb_agg)",
                            ))
                        }
                        Some(v) => out.extend_from_slice(v),
                        None => out.extend_from_slice(b"null"),
                    }
                }
                out.push(b']');
            }
        }
        Ok(Some(out))
    }
}

fn nulls_first_ord(nulls_first: bool) -> std::cmp::Ordering {
    if nulls_first {
        std::cmp::Ordering::Less
    } else {
        std::cmp::Ordering::Greater
    }
}
