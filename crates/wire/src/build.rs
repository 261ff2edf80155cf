//! Builders for the messages pgvia writes, appending to a reusable buffer.
//!
//! Each function writes one whole frame (tag, length, body). Lengths are back-patched, so a
//! builder never formats into a temporary allocation.

use bytes::{BufMut, BytesMut};

use crate::sqlstate::SqlState;

/// Writes a frame with `tag` whose body is produced by `body`, fixing up the length after.
pub fn frame(buf: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    buf.put_u8(tag);
    let at = buf.len();
    buf.put_i32(0);
    body(buf);
    patch_len(buf, at);
}

/// Writes an untagged startup-phase packet (StartupMessage, SSLRequest, CancelRequest).
pub fn untagged(buf: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let at = buf.len();
    buf.put_i32(0);
    body(buf);
    patch_len(buf, at);
}

fn patch_len(buf: &mut BytesMut, at: usize) {
    // Frames pgvia builds are far below 2 GiB; saturate rather than wrap if that ever breaks.
    let len = i32::try_from(buf.len() - at).unwrap_or(i32::MAX);
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn put_cstr(buf: &mut BytesMut, s: &[u8]) {
    buf.put_slice(s);
    buf.put_u8(0);
}

/// One value as DataRow and Bind carry it: its length and bytes, or -1 for NULL.
pub fn put_value(buf: &mut BytesMut, value: Option<&[u8]>) {
    match value {
        Some(v) => {
            buf.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
            buf.put_slice(v);
        }
        None => buf.put_i32(-1),
    }
}

// ---- backend messages (pgvia as the server) ----

/// Severity of an ErrorResponse or NoticeResponse pgvia writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
    Notice,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
            Severity::Notice => "NOTICE",
            Severity::Warning => "WARNING",
        }
    }
}

/// An ErrorResponse (or, with a notice severity, a NoticeResponse).
#[derive(Debug, Clone, Copy)]
pub struct ErrorFields<'a> {
    pub severity: Severity,
    /// The SQLSTATE; a `&str` so a server's own code can be passed along unchanged.
    pub code: &'a str,
    pub message: &'a str,
    pub detail: Option<&'a str>,
    pub hint: Option<&'a str>,
}

impl<'a> ErrorFields<'a> {
    pub fn new(severity: Severity, code: SqlState, message: &'a str) -> Self {
        Self { severity, code: code.0, message, detail: None, hint: None }
    }

    /// With a SQLSTATE that came from elsewhere (a server's error).
    pub fn with_code(severity: Severity, code: &'a str, message: &'a str) -> Self {
        Self { severity, code, message, detail: None, hint: None }
    }

    pub fn error(code: SqlState, message: &'a str) -> Self {
        Self::new(Severity::Error, code, message)
    }

    pub fn fatal(code: SqlState, message: &'a str) -> Self {
        Self::new(Severity::Fatal, code, message)
    }

    pub fn with_detail(mut self, detail: &'a str) -> Self {
        self.detail = Some(detail);
        self
    }

    pub fn with_hint(mut self, hint: &'a str) -> Self {
        self.hint = Some(hint);
        self
    }

    pub fn write(&self, buf: &mut BytesMut) {
        let tag = match self.severity {
            Severity::Error | Severity::Fatal => b'E',
            Severity::Notice | Severity::Warning => b'N',
        };
        frame(buf, tag, |b| {
            let sev = self.severity.as_str().as_bytes();
            b.put_u8(b'S');
            put_cstr(b, sev);
            b.put_u8(b'V');
            put_cstr(b, sev);
            b.put_u8(b'C');
            put_cstr(b, self.code.as_bytes());
            b.put_u8(b'M');
            put_cstr(b, self.message.as_bytes());
            if let Some(d) = self.detail {
                b.put_u8(b'D');
                put_cstr(b, d.as_bytes());
            }
            if let Some(h) = self.hint {
                b.put_u8(b'H');
                put_cstr(b, h.as_bytes());
            }
            b.put_u8(0);
        });
    }
}

pub fn authentication_ok(buf: &mut BytesMut) {
    frame(buf, b'R', |b| b.put_i32(0));
}

pub fn authentication_cleartext_password(buf: &mut BytesMut) {
    frame(buf, b'R', |b| b.put_i32(3));
}

pub fn authentication_md5_password(buf: &mut BytesMut, salt: [u8; 4]) {
    frame(buf, b'R', |b| {
        b.put_i32(5);
        b.put_slice(&salt);
    });
}

pub fn authentication_sasl(buf: &mut BytesMut, mechanisms: &[&str]) {
    frame(buf, b'R', |b| {
        b.put_i32(10);
        for m in mechanisms {
            put_cstr(b, m.as_bytes());
        }
        b.put_u8(0);
    });
}

pub fn authentication_sasl_continue(buf: &mut BytesMut, data: &[u8]) {
    frame(buf, b'R', |b| {
        b.put_i32(11);
        b.put_slice(data);
    });
}

pub fn authentication_sasl_final(buf: &mut BytesMut, data: &[u8]) {
    frame(buf, b'R', |b| {
        b.put_i32(12);
        b.put_slice(data);
    });
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    frame(buf, b'S', |b| {
        put_cstr(b, name.as_bytes());
        put_cstr(b, value.as_bytes());
    });
}

pub fn backend_key_data(buf: &mut BytesMut, process_id: u32, secret: &[u8]) {
    frame(buf, b'K', |b| {
        b.put_u32(process_id);
        b.put_slice(secret);
    });
}

pub fn ready_for_query(buf: &mut BytesMut, status: u8) {
    frame(buf, b'Z', |b| b.put_u8(status));
}

/// Tells a client that asked for a newer 3.x minor version (or `_pq_.` options) what we speak.
pub fn negotiate_protocol_version<'s>(
    buf: &mut BytesMut,
    newest_minor: u32,
    unrecognized: impl ExactSizeIterator<Item = &'s str>,
) {
    frame(buf, b'v', |b| {
        b.put_u32(newest_minor);
        b.put_u32(u32::try_from(unrecognized.len()).unwrap_or(u32::MAX));
        for o in unrecognized {
            put_cstr(b, o.as_bytes());
        }
    });
}

pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    frame(buf, b'C', |b| put_cstr(b, tag.as_bytes()));
}

pub fn parse_complete(buf: &mut BytesMut) {
    frame(buf, b'1', |_| {});
}

pub fn close_complete(buf: &mut BytesMut) {
    frame(buf, b'3', |_| {});
}

// ---- frontend messages (pgvia as the client of PostgreSQL) ----

/// A StartupMessage (protocol 3.0) with `params` in order. A parameter that fails
/// [`crate::startup::check_param`] (a NUL byte in a name or value, an empty name) refuses the
/// whole message and leaves `buf` as it was: written as it is, it would smuggle parameters
/// of its own into what the server reads.
pub fn startup_message<'s>(
    buf: &mut BytesMut,
    params: impl IntoIterator<Item = (&'s str, &'s str)>,
) -> Result<(), crate::WireError> {
    let start = buf.len();
    let mut bad = None;
    untagged(buf, |b| {
        b.put_u32(crate::startup::PROTOCOL_3_0);
        for (k, v) in params {
            if let Err(e) = crate::startup::check_param(k, v) {
                bad = Some(e);
                return;
            }
            put_cstr(b, k.as_bytes());
            put_cstr(b, v.as_bytes());
        }
        b.put_u8(0);
    });
    match bad {
        Some(e) => {
            buf.truncate(start);
            Err(e)
        }
        None => Ok(()),
    }
}

pub fn ssl_request(buf: &mut BytesMut) {
    untagged(buf, |b| b.put_u32(crate::startup::SSL_REQUEST_CODE));
}

pub fn cancel_request(buf: &mut BytesMut, process_id: u32, secret: &[u8]) {
    untagged(buf, |b| {
        b.put_u32(crate::startup::CANCEL_REQUEST_CODE);
        b.put_u32(process_id);
        b.put_slice(secret);
    });
}

/// PasswordMessage carrying a cleartext or MD5 password (NUL-terminated).
pub fn password_message(buf: &mut BytesMut, password: &[u8]) {
    frame(buf, b'p', |b| put_cstr(b, password));
}

pub fn sasl_initial_response(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    frame(buf, b'p', |b| {
        put_cstr(b, mechanism.as_bytes());
        b.put_i32(i32::try_from(data.len()).unwrap_or(i32::MAX));
        b.put_slice(data);
    });
}

pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
    frame(buf, b'p', |b| b.put_slice(data));
}

pub fn query(buf: &mut BytesMut, sql: &str) {
    frame(buf, b'Q', |b| put_cstr(b, sql.as_bytes()));
}

/// Parse of an unnamed statement, parameter types left for the server to infer.
pub fn parse_unnamed(buf: &mut BytesMut, sql: &str) {
    frame(buf, b'P', |b| {
        b.put_u8(0);
        put_cstr(b, sql.as_bytes());
        b.put_i16(0);
    });
}

/// Bind of the unnamed statement to the unnamed portal, every parameter and result column in
/// text format; `None` is NULL.
pub fn bind_text<'v>(buf: &mut BytesMut, params: impl ExactSizeIterator<Item = Option<&'v [u8]>>) {
    frame(buf, b'B', |b| {
        b.put_u8(0);
        b.put_u8(0);
        b.put_i16(0);
        b.put_i16(i16::try_from(params.len()).unwrap_or(i16::MAX));
        for p in params {
            put_value(b, p);
        }
        b.put_i16(0);
    });
}

/// Describe of the unnamed portal.
pub fn describe_portal(buf: &mut BytesMut) {
    frame(buf, b'D', |b| {
        b.put_u8(b'P');
        b.put_u8(0);
    });
}

/// Execute of the unnamed portal, all rows.
pub fn execute_all(buf: &mut BytesMut) {
    frame(buf, b'E', |b| {
        b.put_u8(0);
        b.put_i32(0);
    });
}

pub fn sync(buf: &mut BytesMut) {
    frame(buf, b'S', |_| {});
}

pub fn terminate(buf: &mut BytesMut) {
    frame(buf, b'X', |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_response_layout() {
        let mut b = BytesMut::new();
        ErrorFields::fatal(SqlState::INVALID_PASSWORD, "nope").write(&mut b);
        assert_eq!(b[0], b'E');
        let len = i32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        assert_eq!(len + 1, b.len());
        assert!(b.ends_with(b"Mnope\0\0"));
    }

    #[test]
    fn startup_round_trip() {
        let mut b = BytesMut::new();
        startup_message(&mut b, [("user", "u"), ("database", "d")]).unwrap();
        let payload =
            crate::frame::decode_untagged(&mut b, crate::frame::MAX_STARTUP_FRAME).unwrap().unwrap();
        let crate::startup::StartupPacket::Startup(m) =
            crate::startup::StartupPacket::parse(&payload).unwrap()
        else {
            panic!("not a startup message")
        };
        assert_eq!(m.param("user"), Some("u"));
    }
}
