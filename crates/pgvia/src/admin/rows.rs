//! A typed result set: column names and types, rows of values, written as RowDescription,
//! DataRows and CommandComplete.

use bytes::{BufMut, BytesMut};
use wire::build;

/// A column's type as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
}

impl Kind {
    fn oid(self) -> i32 {
        match self {
            Kind::Text => 25,
            Kind::Int => 20,
        }
    }

    fn len(self) -> i16 {
        match self {
            Kind::Text => -1,
            Kind::Int => 8,
        }
    }
}

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Text(String),
    Int(i64),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::from(v as u64)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<u16> for Value {
    fn from(v: u16) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// Columns and rows of one `SHOW`.
#[derive(Debug)]
pub struct RowSet {
    columns: Vec<(&'static str, Kind)>,
    rows: Vec<Vec<Value>>,
}

impl RowSet {
    pub fn new(columns: &[(&'static str, Kind)]) -> Self {
        Self { columns: columns.to_vec(), rows: Vec::new() }
    }

    /// Adds a row; it must have one value per column.
    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len(), "row width");
        self.rows.push(row);
    }

    pub fn column_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.columns.iter().map(|(n, _)| *n)
    }

    pub fn rows(&self) -> &[Vec<Value>] {
        &self.rows
    }

    /// RowDescription, DataRows and `CommandComplete` with `tag`.
    pub fn write(&self, out: &mut BytesMut, tag: &str) {
        build::frame(out, b'T', |b| {
            b.put_i16(self.columns.len() as i16);
            for (name, kind) in &self.columns {
                build::put_cstr(b, name.as_bytes());
                b.put_i32(0);
                b.put_i16(0);
                b.put_i32(kind.oid());
                b.put_i16(kind.len());
                b.put_i32(-1);
                b.put_i16(0);
            }
        });
        let mut cell = String::new();
        for row in &self.rows {
            build::frame(out, b'D', |b| {
                b.put_i16(row.len() as i16);
                for v in row {
                    cell.clear();
                    match v {
                        Value::Null => {
                            b.put_i32(-1);
                            continue;
                        }
                        Value::Text(s) => cell.push_str(s),
                        Value::Int(i) => cell.push_str(&i.to_string()),
                    }
                    b.put_i32(cell.len() as i32);
                    b.put_slice(cell.as_bytes());
                }
            });
        }
        build::command_complete(out, tag);
    }
}

/// A wall-clock time as PgBouncer prints it: `2024-01-31 12:00:00 UTC`.
pub fn timestamp(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29 00:00:00 UTC");
        assert_eq!(timestamp(UNIX_EPOCH + Duration::from_secs(1_700_000_000)), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn writes_frames() {
        let mut rs = RowSet::new(&[("a", Kind::Text), ("b", Kind::Int)]);
        rs.push(vec!["x".into(), Value::Null]);
        let mut out = BytesMut::new();
        rs.write(&mut out, "SHOW");
        assert_eq!(out[0], b'T');
        assert!(out.windows(4).any(|w| w == b"SHOW"));
    }
}
