//! A bare-bones protocol client over a raw socket: our own framing, so tests can send exactly
//! the bytes they want (pipelines, garbage, cancel requests) and see exactly what comes back.
//! Only SCRAM's arithmetic is borrowed, from postgres-protocol.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const PROTOCOL_3_0: i32 = 196_608;
pub const CANCEL_CODE: i32 = 80_877_102;
pub const SSL_CODE: i32 = 80_877_103;
pub const GSSENC_CODE: i32 = 80_877_104;

/// One backend message: its tag and body (without tag and length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub tag: u8,
    pub body: Bytes,
}

impl Msg {
    /// ErrorResponse / NoticeResponse fields by their one-letter code.
    pub fn fields(&self) -> BTreeMap<char, String> {
        let mut out = BTreeMap::new();
        let mut b = &self.body[..];
        while let Some((&code, rest)) = b.split_first() {
            if code == 0 {
                break;
            }
            let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
            out.insert(char::from(code), String::from_utf8_lossy(&rest[..end]).into_owned());
            b = rest.get(end + 1..).unwrap_or_default();
        }
        out
    }

    pub fn sqlstate(&self) -> Option<String> {
        self.fields().get(&'C').cloned()
    }

    /// A ParameterStatus message's (name, value).
    pub fn parameter(&self) -> Option<(String, String)> {
        if self.tag != b'S' {
            return None;
        }
        let mut parts = self.body.split(|&b| b == 0).map(|p| String::from_utf8_lossy(p).into_owned());
        Some((parts.next()?, parts.next()?))
    }
}

/// A frame with a tag: tag, length (including itself), body.
pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 5);
    v.push(tag);
    v.put_i32(i32::try_from(body.len() + 4).expect("frame fits"));
    v.extend_from_slice(body);
    v
}

/// An untagged startup-phase packet: length, code, rest.
pub fn untagged(code: i32, rest: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(rest.len() + 8);
    v.put_i32(i32::try_from(rest.len() + 8).expect("packet fits"));
    v.put_i32(code);
    v.extend_from_slice(rest);
    v
}

pub fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut rest = Vec::new();
    for (k, v) in params {
        cstr(&mut rest, k);
        cstr(&mut rest, v);
    }
    rest.push(0);
    untagged(PROTOCOL_3_0, &rest)
}

pub fn cancel_request(process_id: i32, secret: i32) -> Vec<u8> {
    let mut rest = Vec::new();
    rest.put_i32(process_id);
    rest.put_i32(secret);
    untagged(CANCEL_CODE, &rest)
}

fn cstr(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(s.as_bytes());
    v.push(0);
}

pub fn query(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    frame(b'Q', &b)
}

pub fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.put_i16(0);
    frame(b'P', &b)
}

/// Bind with text-format parameters (`None` is NULL) and text results.
pub fn bind(portal: &str, statement: &str, params: &[Option<&str>]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    cstr(&mut b, statement);
    b.put_i16(0);
    b.put_u16(u16::try_from(params.len()).expect("at most 65,535 params"));
    for p in params {
        match p {
            Some(v) => {
                b.put_i32(i32::try_from(v.len()).expect("small param"));
                b.extend_from_slice(v.as_bytes());
            }
            None => b.put_i32(-1),
        }
    }
    b.put_i16(0);
    frame(b'B', &b)
}

/// Parse with declared parameter types.
pub fn parse_typed(name: &str, sql: &str, types: &[u32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.put_u16(u16::try_from(types.len()).expect("at most 65,535 types"));
    for t in types {
        b.put_u32(*t);
    }
    frame(b'P', &b)
}

pub fn describe_statement(name: &str) -> Vec<u8> {
    let mut b = vec![b'S'];
    cstr(&mut b, name);
    frame(b'D', &b)
}

pub fn close_statement(name: &str) -> Vec<u8> {
    let mut b = vec![b'S'];
    cstr(&mut b, name);
    frame(b'C', &b)
}

pub fn flush() -> Vec<u8> {
    frame(b'H', &[])
}

pub fn describe_portal(portal: &str) -> Vec<u8> {
    let mut b = vec![b'P'];
    cstr(&mut b, portal);
    frame(b'D', &b)
}

pub fn execute(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    b.put_i32(max_rows);
    frame(b'E', &b)
}

pub fn sync() -> Vec<u8> {
    frame(b'S', &[])
}

pub fn terminate() -> Vec<u8> {
    frame(b'X', &[])
}

/// A connection speaking the protocol by hand.
pub struct RawConn {
    pub stream: TcpStream,
    buf: BytesMut,
    /// BackendKeyData from login: (process id, secret).
    pub key: Option<(i32, i32)>,
    /// The authentication requests received during login (3 cleartext, 5 MD5, 10 SASL, ...).
    pub auth_requests: Vec<i32>,
    /// The ParameterStatus messages received during login.
    pub login_messages: Vec<Msg>,
    /// The NoticeResponse messages received during login.
    pub login_notices: Vec<Msg>,
}

/// Why a login did not reach ReadyForQuery.
#[derive(Debug)]
pub enum LoginError {
    /// The server sent an ErrorResponse.
    Refused(Msg),
    /// The connection closed or misbehaved.
    Io(String),
}

impl LoginError {
    pub fn refused(self) -> Msg {
        match self {
            LoginError::Refused(m) => m,
            LoginError::Io(e) => panic!("expected an ErrorResponse, got: {e}"),
        }
    }
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> std::io::Result<RawConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            buf: BytesMut::with_capacity(8192),
            key: None,
            auth_requests: Vec::new(),
            login_messages: Vec::new(),
            login_notices: Vec::new(),
        })
    }

    /// Connects and logs in (trust, cleartext, MD5 or SCRAM, whatever is asked) up to the
    /// first ReadyForQuery.
    pub async fn login(
        addr: SocketAddr,
        user: &str,
        password: &str,
        db: &str,
    ) -> Result<RawConn, LoginError> {
        Self::login_with(addr, user, password, &[("database", db)]).await
    }

    /// `login` with more startup parameters (`database`, `options`, settings).
    pub async fn login_with(
        addr: SocketAddr,
        user: &str,
        password: &str,
        params: &[(&str, &str)],
    ) -> Result<RawConn, LoginError> {
        let mut conn = RawConn::connect(addr).await.map_err(|e| LoginError::Io(e.to_string()))?;
        let mut all = vec![("user", user)];
        all.extend_from_slice(params);
        conn.send(&startup(&all)).await;
        let mut scram: Option<ScramSha256> = None;
        loop {
            let Some(msg) = conn.recv().await else {
                return Err(LoginError::Io("connection closed during login".into()));
            };
            match msg.tag {
                b'E' => return Err(LoginError::Refused(msg)),
                b'K' => {
                    let mut b = &msg.body[..];
                    conn.key = Some((b.get_i32(), b.get_i32()));
                }
                b'Z' => return Ok(conn),
                b'S' => conn.login_messages.push(msg),
                b'N' => conn.login_notices.push(msg),
                b'v' => {}
                b'R' => {
                    let mut b = &msg.body[..];
                    let code = b.get_i32();
                    conn.auth_requests.push(code);
                    match code {
                        0 => {}
                        3 => {
                            let mut p = Vec::new();
                            cstr(&mut p, password);
                            conn.send(&frame(b'p', &p)).await;
                        }
                        5 => {
                            let salt = [b[0], b[1], b[2], b[3]];
                            let hash = postgres_protocol::authentication::md5_hash(
                                user.as_bytes(),
                                password.as_bytes(),
                                salt,
                            );
                            let mut p = Vec::new();
                            cstr(&mut p, &hash);
                            conn.send(&frame(b'p', &p)).await;
                        }
                        10 => {
                            let s = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
                            let mut p = Vec::new();
                            cstr(&mut p, "SCRAM-SHA-256");
                            p.put_i32(i32::try_from(s.message().len()).expect("small"));
                            p.extend_from_slice(s.message());
                            conn.send(&frame(b'p', &p)).await;
                            scram = Some(s);
                        }
                        11 => {
                            let s =
                                scram.as_mut().ok_or_else(|| LoginError::Io("SASLContinue first".into()))?;
                            s.update(b).map_err(|e| LoginError::Io(e.to_string()))?;
                            let reply = s.message().to_vec();
                            conn.send(&frame(b'p', &reply)).await;
                        }
                        12 => {
                            let mut s =
                                scram.take().ok_or_else(|| LoginError::Io("SASLFinal first".into()))?;
                            s.finish(b).map_err(|e| LoginError::Io(e.to_string()))?;
                        }
                        other => return Err(LoginError::Io(format!("unexpected auth request {other}"))),
                    }
                }
                other => return Err(LoginError::Io(format!("unexpected message {:?}", char::from(other)))),
            }
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to socket");
    }

    /// Like `send`, for sockets the peer may already have closed.
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// The next message, or `None` at end of stream (or on a reset).
    pub async fn recv(&mut self) -> Option<Msg> {
        loop {
            if self.buf.len() >= 5 {
                let len =
                    usize::try_from(i32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]))
                        .expect("sane length");
                if self.buf.len() > len {
                    let tag = self.buf[0];
                    self.buf.advance(5);
                    let body = self.buf.split_to(len - 4).freeze();
                    return Some(Msg { tag, body });
                }
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// `recv` with a time limit; panics if nothing arrives in time.
    pub async fn recv_within(&mut self, limit: Duration) -> Option<Msg> {
        tokio::time::timeout(limit, self.recv()).await.expect("a message (or EOF) in time")
    }

    /// Messages up to and including the next ReadyForQuery (10 s limit).
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let msg =
                self.recv_within(Duration::from_secs(10)).await.expect("connection open until ReadyForQuery");
            let ready = msg.tag == b'Z';
            out.push(msg);
            if ready {
                return out;
            }
        }
    }

    /// Reads whatever arrives until the peer closes; `None` if it stays open past `limit`.
    pub async fn until_closed(&mut self, limit: Duration) -> Option<Vec<Msg>> {
        let mut out = Vec::new();
        let drain = async {
            while let Some(m) = self.recv().await {
                out.push(m);
            }
        };
        tokio::time::timeout(limit, drain).await.ok()?;
        Some(out)
    }

    /// Bytes received but not yet framed (a trailing partial message).
    pub fn leftover(&self) -> &[u8] {
        &self.buf
    }
}

/// Messages as `tag: fields/body`, for readable assertion failures.
pub fn describe(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .map(|m| match m.tag {
            b'E' | b'N' => format!("{}: {:?}", char::from(m.tag), m.fields()),
            _ => format!("{}: {:?}", char::from(m.tag), String::from_utf8_lossy(&m.body)),
        })
        .collect()
}

/// A message as a differential comparison sees it: its tag and what matters of its content
/// (an error's SQLSTATE and message, a row's or tag's bytes); notices and parameter reports
/// are left out (`None`).
pub fn summary(m: &Msg) -> Option<String> {
    let tag = char::from(m.tag);
    Some(match m.tag {
        b'N' | b'S' => return None,
        b'E' => {
            let f = m.fields();
            format!(
                "E {} {}",
                f.get(&'C').cloned().unwrap_or_default(),
                f.get(&'M').cloned().unwrap_or_default()
            )
        }
        b'Z' | b'C' | b'D' => format!("{tag} {}", String::from_utf8_lossy(&m.body).replace('\0', "|")),
        _ => tag.to_string(),
    })
}
