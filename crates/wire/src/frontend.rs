//! Views of messages a client sends after startup, borrowed from a [`Frame`].

use crate::reader::Reader;
pub use crate::reader::{Formats, Oids};
use crate::{Frame, WireError};

pub mod tag {
    pub const BIND: u8 = b'B';
    pub const CLOSE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const PARSE: u8 = b'P';
    /// PasswordMessage, SASLInitialResponse, SASLResponse and GSSResponse share this tag;
    /// which one it is depends on the authentication exchange in progress.
    pub const PASSWORD: u8 = b'p';
    pub const QUERY: u8 = b'Q';
    pub const SYNC: u8 = b'S';
    pub const TERMINATE: u8 = b'X';
}

/// Whether a Describe or Close names a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

impl Target {
    fn parse(b: u8, message: &'static str) -> Result<Self, WireError> {
        match b {
            b'S' => Ok(Self::Statement),
            b'P' => Ok(Self::Portal),
            _ => Err(WireError::Invalid { message, detail: "target must be 'S' or 'P'" }),
        }
    }
}

/// A list of length-prefixed values where -1 is NULL (Bind parameters, FunctionCall arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Values<'a> {
    count: usize,
    bytes: &'a [u8],
}

impl<'a> Values<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Values in order; bounds were checked when the message was parsed.
    pub fn iter(&self) -> impl Iterator<Item = Option<&'a [u8]>> + 'a {
        let mut r = Reader::new(self.bytes, "Bind");
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            r.nullable_bytes().ok()
        })
    }
}

fn formats<'a>(r: &mut Reader<'a>) -> Result<Formats<'a>, WireError> {
    let n = r.count16()?;
    Formats::read(r, n)
}

fn values<'a>(r: &mut Reader<'a>) -> Result<Values<'a>, WireError> {
    let count = r.count16()?;
    let start = r.rest();
    for _ in 0..count {
        r.nullable_bytes()?;
    }
    let used = start.len() - r.remaining();
    Ok(Values { count, bytes: &start[..used] })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parse<'a> {
    pub name: &'a str,
    /// The query text in the client's encoding (`client_encoding`), which need not be UTF-8.
    pub query: &'a [u8],
    pub param_types: Oids<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bind<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    pub param_formats: Formats<'a>,
    pub params: Values<'a>,
    pub result_formats: Formats<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionCall<'a> {
    pub function_oid: u32,
    pub arg_formats: Formats<'a>,
    pub args: Values<'a>,
    pub result_format: i16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendMessage<'a> {
    Bind(Bind<'a>),
    Close {
        target: Target,
        name: &'a str,
    },
    CopyData(&'a [u8]),
    CopyDone,
    /// The message is in the client's encoding.
    CopyFail {
        message: &'a [u8],
    },
    Describe {
        target: Target,
        name: &'a str,
    },
    Execute {
        portal: &'a str,
        max_rows: i32,
    },
    Flush,
    FunctionCall(FunctionCall<'a>),
    Parse(Parse<'a>),
    /// The raw body of a 'p' message; its meaning depends on the auth exchange in progress.
    Password(&'a [u8]),
    /// The query text in the client's encoding (`client_encoding`), which need not be UTF-8.
    Query {
        sql: &'a [u8],
    },
    Sync,
    Terminate,
}

fn empty(body: &[u8], message: &'static str) -> Result<(), WireError> {
    Reader::new(body, message).finish()
}

impl<'a> FrontendMessage<'a> {
    pub fn parse(frame: &'a Frame) -> Result<Self, WireError> {
        Self::parse_body(frame.tag(), frame.body())
    }

    pub fn parse_body(tag_byte: u8, body: &'a [u8]) -> Result<Self, WireError> {
        use tag::*;
        Ok(match tag_byte {
            BIND => {
                let mut r = Reader::new(body, "Bind");
                let portal = r.cstr()?;
                let statement = r.cstr()?;
                let param_formats = formats(&mut r)?;
                let params = values(&mut r)?;
                let result_formats = formats(&mut r)?;
                r.finish()?;
                Self::Bind(Bind { portal, statement, param_formats, params, result_formats })
            }
            CLOSE | DESCRIBE => {
                let message = if tag_byte == CLOSE { "Close" } else { "Describe" };
                let mut r = Reader::new(body, message);
                let target = Target::parse(r.u8()?, message)?;
                let name = r.cstr()?;
                r.finish()?;
                if tag_byte == CLOSE {
                    Self::Close { target, name }
                } else {
                    Self::Describe { target, name }
                }
            }
            COPY_DATA => Self::CopyData(body),
            COPY_DONE => empty(body, "CopyDone").map(|()| Self::CopyDone)?,
            COPY_FAIL => {
                let mut r = Reader::new(body, "CopyFail");
                let message = r.cstr_bytes()?;
                r.finish()?;
                Self::CopyFail { message }
            }
            EXECUTE => {
                let mut r = Reader::new(body, "Execute");
                let portal = r.cstr()?;
                let max_rows = r.i32()?;
                r.finish()?;
                Self::Execute { portal, max_rows }
            }
            FLUSH => empty(body, "Flush").map(|()| Self::Flush)?,
            FUNCTION_CALL => {
                let mut r = Reader::new(body, "FunctionCall");
                let function_oid = r.u32()?;
                let arg_formats = formats(&mut r)?;
                let args = values(&mut r)?;
                let result_format = r.i16()?;
                r.finish()?;
                Self::FunctionCall(FunctionCall { function_oid, arg_formats, args, result_format })
            }
            PARSE => {
                let mut r = Reader::new(body, "Parse");
                let name = r.cstr()?;
                let query = r.cstr_bytes()?;
                let n = r.count16()?;
                let param_types = Oids::read(&mut r, n)?;
                r.finish()?;
                Self::Parse(Parse { name, query, param_types })
            }
            PASSWORD => Self::Password(body),
            QUERY => {
                let mut r = Reader::new(body, "Query");
                let sql = r.cstr_bytes()?;
                r.finish()?;
                Self::Query { sql }
            }
            SYNC => empty(body, "Sync").map(|()| Self::Sync)?,
            TERMINATE => empty(body, "Terminate").map(|()| Self::Terminate)?,
            other => return Err(WireError::UnknownTag { direction: "frontend", tag: char::from(other) }),
        })
    }
}

/// True for tags a client may send after startup. The relay checks this on every frame
/// without parsing the body, so garbage is refused before it reaches a server.
pub fn is_known_tag(t: u8) -> bool {
    matches!(
        t,
        b'B' | b'C' | b'd' | b'c' | b'f' | b'D' | b'E' | b'H' | b'F' | b'P' | b'p' | b'Q' | b'S' | b'X'
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_frame as frame;

    #[test]
    fn bind_round_trip() {
        let body = b"p1\0s1\0\0\x01\0\x01\0\x02\0\0\0\x02hi\xff\xff\xff\xff\0\0";
        let f = frame(b'B', body);
        let FrontendMessage::Bind(b) = FrontendMessage::parse(&f).unwrap() else { panic!() };
        assert_eq!((b.portal, b.statement), ("p1", "s1"));
        assert_eq!(b.param_formats.iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(b.params.iter().collect::<Vec<_>>(), vec![Some(&b"hi"[..]), None]);
        assert!(b.result_formats.is_empty());
        // A value length past the end of the message.
        let bad = b"\0\0\0\0\0\x01\0\0\0\x09hi\0\0";
        assert!(FrontendMessage::parse(&frame(b'B', bad)).is_err());
    }

    #[test]
    fn parse_message() {
        let f = frame(b'P', b"s\0select $1\0\0\x01\0\0\0\x17");
        let FrontendMessage::Parse(p) = FrontendMessage::parse(&f).unwrap() else { panic!() };
        assert_eq!(p.query, b"select $1");
        assert_eq!(p.param_types.iter().collect::<Vec<_>>(), vec![23]);
        assert!(FrontendMessage::parse(&frame(b'P', b"s\0select")).is_err());
    }

    #[test]
    fn query_text_is_bytes_in_the_client_encoding() {
        // 'привет' in KOI8-R, 'café' in LATIN1: not UTF-8, and not for the wire to judge.
        let f = frame(b'Q', b"SELECT '\xd0\xd2\xc9\xd7\xc5\xd4'\0");
        let Ok(FrontendMessage::Query { sql }) = FrontendMessage::parse(&f) else { panic!() };
        assert_eq!(sql, b"SELECT '\xd0\xd2\xc9\xd7\xc5\xd4'");
        let f = frame(b'P', b"\0SELECT 'caf\xe9'\0\0\0");
        let Ok(FrontendMessage::Parse(p)) = FrontendMessage::parse(&f) else { panic!() };
        assert_eq!(p.query, b"SELECT 'caf\xe9'");
        let f = frame(b'f', b"abandon\xe9\0");
        assert_eq!(FrontendMessage::parse(&f), Ok(FrontendMessage::CopyFail { message: b"abandon\xe9" }));
    }

    #[test]
    fn malformed_is_an_error() {
        assert!(FrontendMessage::parse(&frame(b'Q', b"no nul")).is_err());
        assert!(FrontendMessage::parse(&frame(b'S', b"x")).is_err());
        assert!(FrontendMessage::parse(&frame(b'D', b"X\0")).is_err());
        assert!(matches!(FrontendMessage::parse(&frame(b'~', b"")), Err(WireError::UnknownTag { .. })));
    }
}
