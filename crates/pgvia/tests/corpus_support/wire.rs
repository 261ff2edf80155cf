//! One statement in one protocol over a raw connection, and what came back, reduced to what
//! one PostgreSQL promises: column names, type OIDs, typmods and formats; the rows (raw bytes,
//! text or binary); the command tag; the SQLSTATE; the transaction status after it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut};

use crate::common::raw::{self, Msg, RawConn};

/// How long one exchange may take before it counts as a hang.
pub const HANG: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Simple,
    Extended,
    Prepared,
    /// Extended, fetched two rows at a time from the portal (Execute with a row limit, as
    /// drivers with a fetch size do), for the items whose order is fixed.
    Portal,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Simple, Protocol::Extended, Protocol::Prepared];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "simple",
            Protocol::Extended => "extended",
            Protocol::Prepared => "prepared",
            Protocol::Portal => "portal",
        }
    }
}

/// One statement's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answer {
        /// (name, type OID, typmod, format) per column; empty for statements without rows.
        columns: Vec<(String, u32, i32, i16)>,
        rows: Vec<Vec<Option<Vec<u8>>>>,
        tag: String,
    },
    Error {
        code: String,
        message: String,
    },
    /// No ReadyForQuery within [`HANG`], or the connection closed.
    Hang(String),
}

impl Outcome {
    pub fn code(&self) -> Option<&str> {
        match self {
            Outcome::Error { code, .. } => Some(code),
            _ => None,
        }
    }

    /// A short human description for failure reports.
    pub fn show(&self) -> String {
        match self {
            Outcome::Answer { columns, rows, tag } => {
                let cols: Vec<String> = columns.iter().map(|c| format!("{}:{}/{}", c.0, c.1, c.3)).collect();
                let mut shown: Vec<String> = rows.iter().take(8).map(|r| show_row(r, columns)).collect();
                if rows.len() > 8 {
                    shown.push(format!("... {} rows", rows.len()));
                }
                format!("{tag} [{}] {}", cols.join(", "), shown.join(" | "))
            }
            Outcome::Error { code, message } => format!("ERROR {code}: {message}"),
            Outcome::Hang(why) => format!("HANG: {why}"),
        }
    }
}

fn show_row(r: &[Option<Vec<u8>>], columns: &[(String, u32, i32, i16)]) -> String {
    let cells: Vec<String> = r
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            None => "NULL".to_owned(),
            Some(b) if columns.get(i).is_some_and(|c| c.3 == 1) => format!("0x{}", hex(b)),
            Some(b) => String::from_utf8_lossy(b).replace('\n', "\\n").replace('\t', "\\t"),
        })
        .collect();
    format!("({})", cells.join(","))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A connection that runs statements in any protocol; its prepared statements get fresh names.
pub struct Wire {
    addr: SocketAddr,
    conn: RawConn,
    named: u64,
    /// The transaction status of the last ReadyForQuery: `I`, `T` or `E`.
    pub status: u8,
}

impl Wire {
    pub async fn connect(addr: SocketAddr) -> Wire {
        let conn = RawConn::login(addr, crate::common::USER, crate::common::PASSWORD, crate::common::DB)
            .await
            .unwrap_or_else(|e| panic!("login to {addr}: {e:?}"));
        Wire { addr, conn, named: 0, status: b'I' }
    }

    /// A fresh connection after a hang (the old one's state is unknown).
    pub async fn reconnect(&mut self) {
        *self = Wire::connect(self.addr).await;
    }

    /// Runs `sql` once in `protocol` (prepared: with `params` in text format, twice on one
    /// named statement; both results are returned).
    pub async fn run(&mut self, protocol: Protocol, sql: &str, params: &[Option<String>]) -> Vec<Outcome> {
        match protocol {
            Protocol::Simple => {
                self.conn.send(&raw::query(sql)).await;
                vec![self.collect().await]
            }
            Protocol::Extended => {
                let mut out = raw::parse("", sql);
                out.extend(bind_binary("", "", &[]));
                out.extend(raw::describe_portal(""));
                out.extend(raw::execute("", 0));
                out.extend(raw::sync());
                self.conn.send(&out).await;
                vec![self.collect().await]
            }
            Protocol::Portal => {
                // Three suspended fetches, then the rest; the same messages go to both sides,
                // so what PostgreSQL does with a portal run to its end is compared too.
                let mut out = raw::parse("", sql);
                out.extend(bind_binary("", "", &[]));
                out.extend(raw::describe_portal(""));
                for _ in 0..3 {
                    out.extend(raw::execute("", 2));
                }
                out.extend(raw::execute("", 0));
                out.extend(raw::sync());
                self.conn.send(&out).await;
                vec![self.collect().await]
            }
            Protocol::Prepared => {
                self.named += 1;
                let name = format!("corpus_{}", self.named);
                self.conn
                    .send(&[raw::parse(&name, sql), raw::describe_statement(&name), raw::sync()].concat())
                    .await;
                let parsed = self.collect().await;
                if !matches!(parsed, Outcome::Answer { .. }) {
                    return vec![parsed];
                }
                let mut results = Vec::new();
                for _ in 0..2 {
                    let mut out = bind_binary("", &name, params);
                    out.extend(raw::describe_portal(""));
                    out.extend(raw::execute("", 0));
                    out.extend(raw::sync());
                    self.conn.send(&out).await;
                    results.push(self.collect().await);
                    if matches!(results.last(), Some(Outcome::Hang(_))) {
                        return results;
                    }
                }
                self.conn.send(&[raw::close_statement(&name), raw::sync()].concat()).await;
                let _ = self.collect().await;
                results
            }
        }
    }

    /// `COPY ... FROM STDIN` in the simple protocol with `data` as its one CopyData.
    pub async fn copy_in(&mut self, sql: &str, data: &[u8]) -> Outcome {
        self.conn.send(&raw::query(sql)).await;
        match tokio::time::timeout(HANG, self.conn.recv()).await {
            Ok(Some(m)) if m.tag == b'G' => {
                self.conn.send(&[raw::frame(b'd', data), raw::frame(b'c', &[])].concat()).await;
                self.collect().await
            }
            Ok(Some(m)) if m.tag == b'E' => {
                let f = m.fields();
                let _ = self.collect().await;
                Outcome::Error {
                    code: f.get(&'C').cloned().unwrap_or_default(),
                    message: f.get(&'M').cloned().unwrap_or_default(),
                }
            }
            Ok(other) => Outcome::Hang(format!("no CopyInResponse: {other:?}")),
            Err(_) => Outcome::Hang(format!("no CopyInResponse in {HANG:?}")),
        }
    }

    /// Reads to ReadyForQuery; the outcome of the exchange's last statement, or its error.
    async fn collect(&mut self) -> Outcome {
        let mut columns = Vec::new();
        let mut rows = Vec::new();
        let mut tag = String::new();
        let mut error: Option<Outcome> = None;
        loop {
            let msg = match tokio::time::timeout(HANG, self.conn.recv()).await {
                Ok(Some(m)) => m,
                Ok(None) => return Outcome::Hang("connection closed".into()),
                Err(_) => return Outcome::Hang(format!("no ReadyForQuery in {HANG:?}")),
            };
            match msg.tag {
                b'T' => {
                    columns = row_description(&msg);
                    rows.clear();
                }
                b'D' => rows.push(data_row(&msg)),
                // COPY ... TO STDOUT: each CopyData is one row of one raw cell.
                b'd' => rows.push(vec![Some(msg.body.to_vec())]),
                b'C' if tag.is_empty() => tag = cstr(&msg.body),
                b'C' => tag = format!("{tag}; {}", cstr(&msg.body)),
                b's' => tag.push_str("(suspended) "),
                b'I' => tag = "EMPTY".into(),
                b'E' => {
                    let f = msg.fields();
                    let code = f.get(&'C').cloned().unwrap_or_default();
                    let message = f.get(&'M').cloned().unwrap_or_default();
                    error.get_or_insert(Outcome::Error { code, message });
                }
                b'Z' => {
                    self.status = msg.body.first().copied().unwrap_or(b'?');
                    return error.unwrap_or(Outcome::Answer { columns, rows, tag });
                }
                _ => {}
            }
        }
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn row_description(msg: &Msg) -> Vec<(String, u32, i32, i16)> {
    let mut b = &msg.body[..];
    let n = b.get_i16();
    let mut out = Vec::new();
    for _ in 0..n {
        let name = cstr(b);
        b.advance(name.len() + 1);
        let _table = b.get_u32();
        let _attnum = b.get_i16();
        let ty = b.get_u32();
        let _len = b.get_i16();
        let typmod = b.get_i32();
        let format = b.get_i16();
        out.push((name, ty, typmod, format));
    }
    out
}

fn data_row(msg: &Msg) -> Vec<Option<Vec<u8>>> {
    let mut b = &msg.body[..];
    let n = b.get_i16();
    let mut out = Vec::new();
    for _ in 0..n {
        let len = b.get_i32();
        if len < 0 {
            out.push(None);
        } else {
            let len = usize::try_from(len).unwrap_or(0);
            out.push(Some(b[..len].to_vec()));
            b.advance(len);
        }
    }
    out
}

/// Bind with text-format parameters (`None` is NULL) and every result column in binary.
fn bind_binary(portal: &str, statement: &str, params: &[Option<String>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(portal.as_bytes());
    b.push(0);
    b.extend_from_slice(statement.as_bytes());
    b.push(0);
    b.put_i16(0);
    b.put_u16(u16::try_from(params.len()).unwrap_or(0));
    for p in params {
        match p {
            Some(v) => {
                b.put_i32(i32::try_from(v.len()).unwrap_or(0));
                b.extend_from_slice(v.as_bytes());
            }
            None => b.put_i32(-1),
        }
    }
    b.put_i16(1);
    b.put_i16(1);
    raw::frame(b'B', &b)
}
