//! A blocking, bare-bones protocol client for the merge tests: the merger is fed the raw
//! RowDescription/DataRow bodies, so the test needs the frames themselves, not a driver's
//! decoded rows.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

/// One backend message: tag and body.
pub type Msg = (u8, Vec<u8>);

pub struct Conn {
    stream: TcpStream,
}

fn frame(tag: Option<u8>, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    if let Some(t) = tag {
        v.push(t);
    }
    v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

impl Conn {
    /// Connects with trust auth, in UTC and ISO DateStyle.
    pub fn connect(host: &str, port: u16, db: &str) -> Conn {
        let stream = TcpStream::connect((host, port)).expect("connect");
        let mut c = Conn { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec();
        for (k, v) in [("user", "postgres"), ("database", db), ("TimeZone", "UTC"), ("DateStyle", "ISO, YMD")]
        {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        c.stream.write_all(&frame(None, &body)).expect("startup");
        loop {
            let (tag, body) = c.read();
            match tag {
                b'R' => assert_eq!(body[..4], [0, 0, 0, 0], "trust auth expected"),
                b'E' => panic!("startup failed: {}", String::from_utf8_lossy(&body)),
                b'Z' => break,
                _ => {}
            }
        }
        c
    }

    fn read(&mut self) -> Msg {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head).expect("read header");
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len - 4];
        self.stream.read_exact(&mut body).expect("read body");
        (head[0], body)
    }

    /// Runs one simple query; every message up to (not including) ReadyForQuery.
    pub fn query(&mut self, sql: &str) -> Vec<Msg> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.stream.write_all(&frame(Some(b'Q'), &body)).expect("send query");
        let mut out = Vec::new();
        loop {
            let m = self.read();
            if m.0 == b'Z' {
                return out;
            }
            out.push(m);
        }
    }
}

impl Conn {
    /// Runs one query in the extended protocol (unnamed statement and portal), asking for
    /// every result column in binary format; every message up to ReadyForQuery.
    pub fn query_binary(&mut self, sql: &str) -> Vec<Msg> {
        self.query_extended(sql, &[], true)
    }

    /// Parse, Bind (text parameters, `None` for NULL; all results binary or all text),
    /// Describe, Execute, Sync; every message up to ReadyForQuery.
    pub fn query_extended(&mut self, sql: &str, params: &[Option<&str>], binary: bool) -> Vec<Msg> {
        let mut parse = vec![0u8];
        parse.extend_from_slice(sql.as_bytes());
        parse.extend_from_slice(&[0, 0, 0]);
        let mut bind = vec![0u8, 0, 0, 0];
        bind.extend_from_slice(&(params.len() as i16).to_be_bytes());
        for p in params {
            match p {
                Some(v) => {
                    bind.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    bind.extend_from_slice(v.as_bytes());
                }
                None => bind.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        bind.extend_from_slice(&[0, 1, 0, u8::from(binary)]);
        let mut msgs = frame(Some(b'P'), &parse);
        msgs.extend(frame(Some(b'B'), &bind));
        msgs.extend(frame(Some(b'D'), b"P\0"));
        msgs.extend(frame(Some(b'E'), &[0, 0, 0, 0, 0]));
        msgs.extend(frame(Some(b'S'), &[]));
        self.stream.write_all(&msgs).expect("send extended query");
        let mut out = Vec::new();
        loop {
            let m = self.read();
            if m.0 == b'Z' {
                return out;
            }
            out.push(m);
        }
    }
}

/// The SQLSTATE of an ErrorResponse body.
pub fn sqlstate(body: &[u8]) -> String {
    field(body, b'C')
}

pub fn field(body: &[u8], code: u8) -> String {
    let mut rest = body;
    while let Some((&c, tail)) = rest.split_first() {
        if c == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if c == code {
            return String::from_utf8_lossy(&tail[..end]).into_owned();
        }
        rest = &tail[(end + 1).min(tail.len())..];
    }
    String::new()
}

/// A result as the test compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// (name, type OID, format code) per column.
    pub columns: Vec<(String, u32, i16)>,
    /// (column number, type length, type modifier) per column; the table OID is left out
    /// (it differs between databases).
    pub details: Vec<(i16, i16, i32)>,
    pub rows: Vec<Vec<Option<String>>>,
    pub tag: String,
}

/// Reads RowDescription, DataRows and CommandComplete frames (tag + body each).
pub fn outcome(msgs: &[Msg]) -> Result<Outcome, String> {
    let mut o = Outcome { columns: Vec::new(), details: Vec::new(), rows: Vec::new(), tag: String::new() };
    for (tag, body) in msgs {
        match tag {
            b'T' => {
                let n = i16::from_be_bytes([body[0], body[1]]) as usize;
                let mut p = 2;
                for _ in 0..n {
                    let end = p + body[p..].iter().position(|&b| b == 0).expect("name");
                    let name = String::from_utf8_lossy(&body[p..end]).into_owned();
                    p = end + 1;
                    let oid = u32::from_be_bytes([body[p + 6], body[p + 7], body[p + 8], body[p + 9]]);
                    let format = i16::from_be_bytes([body[p + 16], body[p + 17]]);
                    let attnum = i16::from_be_bytes([body[p + 4], body[p + 5]]);
                    let len = i16::from_be_bytes([body[p + 10], body[p + 11]]);
                    let typmod = i32::from_be_bytes([body[p + 12], body[p + 13], body[p + 14], body[p + 15]]);
                    p += 18;
                    o.columns.push((name, oid, format));
                    o.details.push((attnum, len, typmod));
                }
            }
            b'D' => {
                let n = i16::from_be_bytes([body[0], body[1]]) as usize;
                let mut p = 2;
                let mut row = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = i32::from_be_bytes([body[p], body[p + 1], body[p + 2], body[p + 3]]);
                    p += 4;
                    if len < 0 {
                        row.push(None);
                    } else {
                        let l = len as usize;
                        let cell = &body[p..p + l];
                        // Binary cells need not be UTF-8: show those in hex.
                        row.push(Some(match std::str::from_utf8(cell) {
                            Ok(s) => s.to_string(),
                            Err(_) => {
                                format!("\\x{}", cell.iter().map(|b| format!("{b:02x}")).collect::<String>())
                            }
                        }));
                        p += l;
                    }
                }
                o.rows.push(row);
            }
            b'C' => o.tag = String::from_utf8_lossy(body).trim_end_matches('\0').to_string(),
            b'E' => return Err(sqlstate(body)),
            _ => {}
        }
    }
    Ok(o)
}

/// Splits a buffer of wire frames into (tag, body).
pub fn frames(mut buf: &[u8]) -> Vec<Msg> {
    let mut out = Vec::new();
    while buf.len() >= 5 {
        let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        out.push((buf[0], buf[5..1 + len].to_vec()));
        buf = &buf[1 + len..];
    }
    out
}
