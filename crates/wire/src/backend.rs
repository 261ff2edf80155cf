//! Views of messages a PostgreSQL server sends, borrowed from a [`Frame`].
//!
//! `BackendMessage::parse` checks the fixed part of each message; variable parts (rows, fields,
//! column descriptions) are iterated lazily and report malformed bytes when reached.

use crate::reader::Reader;
pub use crate::reader::{Formats, Oids};
use crate::{Frame, WireError};

pub mod tag {
    pub const AUTHENTICATION: u8 = b'R';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const DATA_ROW: u8 = b'D';
    pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub const NO_DATA: u8 = b'n';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ROW_DESCRIPTION: u8 = b'T';
}

/// The transaction status carried by ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    Idle,
    InTransaction,
    Failed,
}

impl TransactionStatus {
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'I' => Some(Self::Idle),
            b'T' => Some(Self::InTransaction),
            b'E' => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            Self::Idle => b'I',
            Self::InTransaction => b'T',
            Self::Failed => b'E',
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authentication<'a> {
    Ok,
    KerberosV5,
    CleartextPassword,
    Md5Password { salt: [u8; 4] },
    Gss,
    GssContinue(&'a [u8]),
    Sspi,
    Sasl(NameList<'a>),
    SaslContinue(&'a [u8]),
    SaslFinal(&'a [u8]),
}

/// A list of NUL-terminated names ending with an empty one (SASL mechanisms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameList<'a>(&'a [u8]);

impl<'a> NameList<'a> {
    /// Names in order; a malformed list yields one error and ends (see [`Fields::iter`]).
    pub fn iter(&self) -> impl Iterator<Item = Result<&'a str, WireError>> + 'a {
        let mut r = Some(Reader::new(self.0, "AuthenticationSASL"));
        std::iter::from_fn(move || match r.as_mut()?.cstr() {
            Ok("") => None,
            Ok(name) => Some(Ok(name)),
            Err(e) => {
                r = None;
                Some(Err(e))
            }
        })
    }
}

/// Format codes and column count of CopyIn/CopyOut/CopyBothResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyResponse<'a> {
    pub format: u8,
    pub column_formats: Formats<'a>,
}

impl<'a> CopyResponse<'a> {
    fn parse(body: &'a [u8], message: &'static str) -> Result<Self, WireError> {
        let mut r = Reader::new(body, message);
        let format = r.u8()?;
        let n = r.count16()?;
        let column_formats = Formats::read(&mut r, n)?;
        r.finish()?;
        Ok(Self { format, column_formats })
    }
}

/// The fields of an ErrorResponse or NoticeResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    /// Views an ErrorResponse/NoticeResponse body; malformed fields surface while iterating.
    pub fn new(body: &'a [u8]) -> Self {
        Self(body)
    }

    /// Fields as bytes: a server writes them in the client's encoding, which need not be
    /// UTF-8 (a message quoting the client's text after `SET client_encoding TO 'KOI8'`).
    ///
    /// A malformed body (no closing zero byte, a value without its NUL) yields one error and
    /// then ends: a failed read does not advance the cursor, so going on would yield the same
    /// error forever and spin any caller that skips errors (`get_bytes`, hence `is_fatal`).
    pub fn iter(&self) -> impl Iterator<Item = Result<(u8, &'a [u8]), WireError>> + 'a {
        let mut r = Some(Reader::new(self.0, "ErrorResponse"));
        std::iter::from_fn(move || {
            let read = r.as_mut()?;
            let field = match read.u8() {
                Ok(0) => None,
                Ok(code) => Some(read.cstr_bytes().map(|v| (code, v))),
                Err(e) => Some(Err(e)),
            };
            if !matches!(field, Some(Ok(_))) {
                r = None;
            }
            field
        })
    }

    /// A field's bytes, in the client's encoding.
    pub fn get_bytes(&self, code: u8) -> Option<&'a [u8]> {
        self.iter().filter_map(Result::ok).find(|(c, _)| *c == code).map(|(_, v)| v)
    }

    /// A field that is UTF-8 (SQLSTATE and severity always are: they are ASCII); `None` for
    /// one in another encoding.
    pub fn get(&self, code: u8) -> Option<&'a str> {
        self.get_bytes(code).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The SQLSTATE ('C' field).
    pub fn code(&self) -> Option<&'a str> {
        self.get(b'C')
    }

    pub fn message(&self) -> Option<&'a str> {
        self.get(b'M')
    }

    /// The non-localized severity ('V', PostgreSQL 9.6+), else the localized one ('S').
    pub fn severity(&self) -> Option<&'a str> {
        self.get(b'V').or_else(|| self.get(b'S'))
    }
}

/// A DataRow: column values, each NULL or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRow<'a> {
    count: usize,
    values: &'a [u8],
}

impl<'a> DataRow<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn values(&self) -> impl Iterator<Item = Result<Option<&'a [u8]>, WireError>> + 'a {
        let mut r = Reader::new(self.values, "DataRow");
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            Some(r.nullable_bytes())
        })
    }
}

/// One column of a RowDescription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column<'a> {
    pub name: &'a str,
    pub table_oid: u32,
    pub column_id: i16,
    pub type_oid: u32,
    pub type_size: i16,
    pub type_modifier: i32,
    pub format: i16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowDescription<'a> {
    count: usize,
    columns: &'a [u8],
}

impl<'a> RowDescription<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn columns(&self) -> impl Iterator<Item = Result<Column<'a>, WireError>> + 'a {
        let mut r = Reader::new(self.columns, "RowDescription");
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            Some((|| {
                Ok(Column {
                    name: r.cstr()?,
                    table_oid: r.u32()?,
                    column_id: r.i16()?,
                    type_oid: r.u32()?,
                    type_size: r.i16()?,
                    type_modifier: r.i32()?,
                    format: r.i16()?,
                })
            })())
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendMessage<'a> {
    Authentication(Authentication<'a>),
    /// `secret` is 4 bytes in protocol 3.0, up to 256 in 3.2.
    BackendKeyData {
        process_id: u32,
        secret: &'a [u8],
    },
    BindComplete,
    CloseComplete,
    CommandComplete {
        tag: &'a str,
    },
    CopyData(&'a [u8]),
    CopyDone,
    CopyInResponse(CopyResponse<'a>),
    CopyOutResponse(CopyResponse<'a>),
    CopyBothResponse(CopyResponse<'a>),
    DataRow(DataRow<'a>),
    EmptyQueryResponse,
    ErrorResponse(Fields<'a>),
    FunctionCallResponse(Option<&'a [u8]>),
    NegotiateProtocolVersion {
        newest_minor: u32,
        unrecognized: NameList<'a>,
    },
    NoData,
    NoticeResponse(Fields<'a>),
    NotificationResponse {
        process_id: u32,
        channel: &'a str,
        payload: &'a str,
    },
    ParameterDescription(Oids<'a>),
    /// The value is in the client's encoding (an `application_name` set after
    /// `SET client_encoding TO 'LATIN1'`), which need not be UTF-8.
    ParameterStatus {
        name: &'a str,
        value: &'a [u8],
    },
    ParseComplete,
    PortalSuspended,
    ReadyForQuery(TransactionStatus),
    RowDescription(RowDescription<'a>),
}

fn empty(body: &[u8], message: &'static str) -> Result<(), WireError> {
    Reader::new(body, message).finish()
}

/// Checks the framing of a list of NUL-terminated strings ended by an empty one, and that
/// nothing follows it.
fn fields_end(body: &[u8], message: &'static str) -> Result<(), WireError> {
    let mut r = Reader::new(body, message);
    loop {
        if r.u8()? == 0 {
            return r.finish();
        }
        // In the client's encoding, which need not be UTF-8.
        r.cstr_bytes()?;
    }
}

impl<'a> BackendMessage<'a> {
    pub fn parse(frame: &'a Frame) -> Result<Self, WireError> {
        Self::parse_body(frame.tag(), frame.body())
    }

    pub fn parse_body(tag_byte: u8, body: &'a [u8]) -> Result<Self, WireError> {
        use tag::*;
        Ok(match tag_byte {
            AUTHENTICATION => Self::Authentication(parse_auth(body)?),
            BACKEND_KEY_DATA => {
                let mut r = Reader::new(body, "BackendKeyData");
                let process_id = r.u32()?;
                let secret = r.rest();
                if secret.len() < 4 || secret.len() > 256 {
                    return Err(WireError::Invalid {
                        message: "BackendKeyData",
                        detail: "secret key must be 4 to 256 bytes",
                    });
                }
                Self::BackendKeyData { process_id, secret }
            }
            BIND_COMPLETE => empty(body, "BindComplete").map(|()| Self::BindComplete)?,
            CLOSE_COMPLETE => empty(body, "CloseComplete").map(|()| Self::CloseComplete)?,
            COMMAND_COMPLETE => {
                let mut r = Reader::new(body, "CommandComplete");
                let tag = r.cstr()?;
                r.finish()?;
                Self::CommandComplete { tag }
            }
            COPY_DATA => Self::CopyData(body),
            COPY_DONE => empty(body, "CopyDone").map(|()| Self::CopyDone)?,
            COPY_IN_RESPONSE => Self::CopyInResponse(CopyResponse::parse(body, "CopyInResponse")?),
            COPY_OUT_RESPONSE => Self::CopyOutResponse(CopyResponse::parse(body, "CopyOutResponse")?),
            COPY_BOTH_RESPONSE => Self::CopyBothResponse(CopyResponse::parse(body, "CopyBothResponse")?),
            DATA_ROW => {
                let mut r = Reader::new(body, "DataRow");
                let count = r.count16()?;
                Self::DataRow(DataRow { count, values: r.rest() })
            }
            EMPTY_QUERY_RESPONSE => empty(body, "EmptyQueryResponse").map(|()| Self::EmptyQueryResponse)?,
            ERROR_RESPONSE => {
                fields_end(body, "ErrorResponse")?;
                Self::ErrorResponse(Fields(body))
            }
            FUNCTION_CALL_RESPONSE => {
                let mut r = Reader::new(body, "FunctionCallResponse");
                let v = r.nullable_bytes()?;
                r.finish()?;
                Self::FunctionCallResponse(v)
            }
            NEGOTIATE_PROTOCOL_VERSION => {
                let mut r = Reader::new(body, "NegotiateProtocolVersion");
                let newest_minor = r.u32()?;
                let n = r.u32()?;
                let names = r.rest();
                let mut check = Reader::new(names, "NegotiateProtocolVersion");
                for _ in 0..n {
                    check.cstr()?;
                }
                check.finish()?;
                Self::NegotiateProtocolVersion { newest_minor, unrecognized: NameList(names) }
            }
            NO_DATA => empty(body, "NoData").map(|()| Self::NoData)?,
            NOTICE_RESPONSE => {
                fields_end(body, "NoticeResponse")?;
                Self::NoticeResponse(Fields(body))
            }
            NOTIFICATION_RESPONSE => {
                let mut r = Reader::new(body, "NotificationResponse");
                let process_id = r.u32()?;
                let channel = r.cstr()?;
                let payload = r.cstr()?;
                r.finish()?;
                Self::NotificationResponse { process_id, channel, payload }
            }
            PARAMETER_DESCRIPTION => {
                let mut r = Reader::new(body, "ParameterDescription");
                let n = usize::from(r.u16()?);
                let oids = Oids::read(&mut r, n)?;
                r.finish()?;
                Self::ParameterDescription(oids)
            }
            PARAMETER_STATUS => {
                let mut r = Reader::new(body, "ParameterStatus");
                let name = r.cstr()?;
                let value = r.cstr_bytes()?;
                r.finish()?;
                Self::ParameterStatus { name, value }
            }
            PARSE_COMPLETE => empty(body, "ParseComplete").map(|()| Self::ParseComplete)?,
            PORTAL_SUSPENDED => empty(body, "PortalSuspended").map(|()| Self::PortalSuspended)?,
            READY_FOR_QUERY => {
                let mut r = Reader::new(body, "ReadyForQuery");
                let b = r.u8()?;
                r.finish()?;
                let status = TransactionStatus::from_byte(b).ok_or(WireError::Invalid {
                    message: "ReadyForQuery",
                    detail: "transaction status is not I, T or E",
                })?;
                Self::ReadyForQuery(status)
            }
            ROW_DESCRIPTION => {
                let mut r = Reader::new(body, "RowDescription");
                let count = r.count16()?;
                Self::RowDescription(RowDescription { count, columns: r.rest() })
            }
            other => return Err(WireError::UnknownTag { direction: "backend", tag: char::from(other) }),
        })
    }
}

fn parse_auth(body: &[u8]) -> Result<Authentication<'_>, WireError> {
    let mut r = Reader::new(body, "Authentication");
    let code = r.i32()?;
    let auth = match code {
        0 => Authentication::Ok,
        2 => Authentication::KerberosV5,
        3 => Authentication::CleartextPassword,
        5 => {
            let s = r.bytes(4)?;
            Authentication::Md5Password { salt: [s[0], s[1], s[2], s[3]] }
        }
        7 => Authentication::Gss,
        8 => return Ok(Authentication::GssContinue(r.rest())),
        9 => Authentication::Sspi,
        10 => {
            fields_end(r.rest(), "AuthenticationSASL")?;
            return Ok(Authentication::Sasl(NameList(r.rest())));
        }
        11 => return Ok(Authentication::SaslContinue(r.rest())),
        12 => return Ok(Authentication::SaslFinal(r.rest())),
        _ => return Err(WireError::Invalid { message: "Authentication", detail: "unknown request code" }),
    };
    r.finish()?;
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_frame as frame;

    #[test]
    fn ready_for_query() {
        let f = frame(b'Z', b"T");
        assert_eq!(
            BackendMessage::parse(&f).unwrap(),
            BackendMessage::ReadyForQuery(TransactionStatus::InTransaction)
        );
        assert!(BackendMessage::parse(&frame(b'Z', b"X")).is_err());
        assert!(BackendMessage::parse(&frame(b'Z', b"")).is_err());
    }

    #[test]
    fn malformed_fields_end_after_one_error() {
        // Raw bodies no parse checked, as the reply tracker's `is_fatal` reads them: each must
        // give at most one error and end, or a caller skipping errors spins forever.
        for (body, severity) in [
            (&b""[..], None),
            (b"1", None),
            (b"SFATAL\0", Some("FATAL")),
            (b"SFATAL", None),
            (b"Sx\0C", Some("x")),
            (b"erver_version\x0015.8\0", None),
        ] {
            let fields = Fields::new(body);
            let items: Vec<_> = fields.iter().take(100).collect();
            assert!(items.len() <= 3, "{body:?} gave {items:?}");
            assert_eq!(items.iter().filter(|i| i.is_err()).count(), 1, "{body:?}");
            assert!(items.last().is_some_and(Result::is_err), "{body:?}");
            assert_eq!(fields.severity(), severity, "{body:?}");
        }
        let names = NameList(b"SCRAM-SHA-256\0SCRAM");
        let items: Vec<_> = names.iter().take(100).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], Ok("SCRAM-SHA-256"));
        assert!(items[1].is_err());
    }

    #[test]
    fn error_fields() {
        let f = frame(b'E', b"SERROR\0C42601\0Msyntax error\0P5\0\0");
        let BackendMessage::ErrorResponse(fields) = BackendMessage::parse(&f).unwrap() else { panic!() };
        assert_eq!(fields.code(), Some("42601"));
        assert_eq!(fields.message(), Some("syntax error"));
        assert_eq!(fields.severity(), Some("ERROR"));
        assert!(BackendMessage::parse(&frame(b'E', b"SERROR\0C4")).is_err());
        // A message quoting the client's text in its own encoding (KOI8-R here).
        let f = frame(b'E', b"SERROR\0C22P02\0Mbad \"\xd0\xd2\"\0\0");
        let BackendMessage::ErrorResponse(fields) = BackendMessage::parse(&f).unwrap() else { panic!() };
        assert_eq!(fields.code(), Some("22P02"));
        assert_eq!(fields.message(), None);
        assert_eq!(fields.get_bytes(b'M'), Some(&b"bad \"\xd0\xd2\""[..]));
        let f = frame(b'S', b"application_name\0caf\xe9\0");
        let status = BackendMessage::parse(&f).unwrap();
        assert_eq!(status, BackendMessage::ParameterStatus { name: "application_name", value: b"caf\xe9" });
    }

    #[test]
    fn data_row_values() {
        let f = frame(b'D', b"\0\x02\0\0\0\x01a\xff\xff\xff\xff");
        let BackendMessage::DataRow(row) = BackendMessage::parse(&f).unwrap() else { panic!() };
        let v: Vec<_> = row.values().collect::<Result<_, _>>().unwrap();
        assert_eq!(v, vec![Some(&b"a"[..]), None]);
        let f = frame(b'D', b"\0\x02\0\0\0\x05a");
        let BackendMessage::DataRow(row) = BackendMessage::parse(&f).unwrap() else { panic!() };
        assert!(row.values().next().unwrap().is_err());
    }

    #[test]
    fn auth_requests() {
        let f = frame(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0");
        let BackendMessage::Authentication(Authentication::Sasl(m)) = BackendMessage::parse(&f).unwrap()
        else {
            panic!()
        };
        assert_eq!(m.iter().collect::<Result<Vec<_>, _>>().unwrap(), vec!["SCRAM-SHA-256"]);
        let f = frame(b'R', b"\0\0\0\x05ab");
        assert!(BackendMessage::parse(&f).is_err());
    }

    #[test]
    fn unknown_tag() {
        assert!(matches!(BackendMessage::parse(&frame(b'@', b"")), Err(WireError::UnknownTag { .. })));
    }
}
