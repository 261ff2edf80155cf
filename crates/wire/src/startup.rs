//! Untagged packets a client may send before (or instead of) logging in.

use bytes::Bytes;

use crate::reader::Reader;
use crate::WireError;

pub const SSL_REQUEST_CODE: u32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;
/// Protocol 3.0 as sent in a StartupMessage.
pub const PROTOCOL_3_0: u32 = 3 << 16;

/// The payload of an untagged packet, after its length field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup(StartupMessage),
    SslRequest,
    GssEncRequest,
    /// `secret` is 4 bytes in protocol 3.0 and up to 256 in 3.2.
    Cancel {
        process_id: u32,
        secret: Bytes,
    },
}

/// A StartupMessage: protocol version and parameters in the order the client sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupMessage {
    pub major: u16,
    pub minor: u16,
    pub params: Vec<(String, String)>,
}

/// Whether (`name`, `value`) can be one parameter of a StartupMessage: the one check every
/// StartupMessage pgvia builds or accepts from elsewhere than the wire goes through. A NUL in
/// either would end the string early, and what follows it would be read as further
/// parameters (another `user`, an `options`); an empty name ends the list itself.
pub fn check_param(name: &str, value: &str) -> Result<(), WireError> {
    let problem = if name.is_empty() {
        "has an empty name"
    } else if name.contains('\0') {
        "has a NUL byte in its name"
    } else if value.contains('\0') {
        "holds a NUL byte"
    } else {
        return Ok(());
    };
    Err(WireError::BadStartupParam { name: name.to_owned(), problem })
}

impl StartupMessage {
    /// A StartupMessage from parameters given by other means than the wire (the HTTP
    /// gateway's credentials and settings), refused as a whole if any parameter fails
    /// [`check_param`]. One parsed from the wire passes by construction.
    pub fn new(major: u16, minor: u16, params: Vec<(String, String)>) -> Result<Self, WireError> {
        for (k, v) in &params {
            check_param(k, v)?;
        }
        Ok(StartupMessage { major, minor, params })
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Parameters the client sent whose names the 3.0 protocol does not know: `_pq_.*`
    /// protocol options, which must be reported back in NegotiateProtocolVersion.
    pub fn protocol_options(&self) -> impl Iterator<Item = &str> {
        self.params.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("_pq_."))
    }
}

impl StartupPacket {
    pub fn parse(payload: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(payload, "StartupMessage");
        let code = r.u32()?;
        match code {
            SSL_REQUEST_CODE => r.finish().map(|()| Self::SslRequest),
            GSSENC_REQUEST_CODE => r.finish().map(|()| Self::GssEncRequest),
            CANCEL_REQUEST_CODE => {
                let mut r = Reader::new(r.rest(), "CancelRequest");
                let process_id = r.u32()?;
                let secret = r.rest();
                if secret.len() < 4 || secret.len() > 256 {
                    return Err(WireError::Invalid {
                        message: "CancelRequest",
                        detail: "secret key must be 4 to 256 bytes",
                    });
                }
                Ok(Self::Cancel { process_id, secret: Bytes::copy_from_slice(secret) })
            }
            _ => {
                let major = (code >> 16) as u16;
                let minor = (code & 0xffff) as u16;
                if major != 3 {
                    return Err(WireError::UnsupportedProtocol { major, minor });
                }
                let mut params = Vec::new();
                loop {
                    let key = r.cstr()?;
                    if key.is_empty() {
                        break;
                    }
                    let value = r.cstr()?;
                    params.push((key.to_owned(), value.to_owned()));
                }
                r.finish()?;
                Ok(Self::Startup(StartupMessage { major, minor, params }))
            }
        }
    }
}

/// Splits a libpq `options` string (`-c name=value --name=value`, backslash escapes spaces)
/// into (name, value) settings. Words that are not settings are reported as errors so the
/// client hears about them instead of having them silently dropped.
pub fn parse_options(options: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_ascii_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let setting = if w == "-c" {
            it.next().ok_or_else(|| "option -c needs a name=value after it".to_owned())?
        } else if let Some(s) = w.strip_prefix("--") {
            s.to_owned()
        } else if let Some(s) = w.strip_prefix("-c") {
            s.to_owned()
        } else {
            return Err(format!(
                "unsupported startup option {w:?}: only -c name=value and --name=value are accepted"
            ));
        };
        let Some((k, v)) = setting.split_once('=') else {
            return Err(format!("startup option {setting:?} has no value"));
        };
        out.push((k.replace('-', "_"), v.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup_payload(version: u32, params: &[(&str, &str)]) -> Vec<u8> {
        let mut v = version.to_be_bytes().to_vec();
        for (k, val) in params {
            v.extend_from_slice(k.as_bytes());
            v.push(0);
            v.extend_from_slice(val.as_bytes());
            v.push(0);
        }
        v.push(0);
        v
    }

    #[test]
    fn parses_startup() {
        let p = startup_payload(PROTOCOL_3_0 | 2, &[("user", "u"), ("database", "d")]);
        let StartupPacket::Startup(m) = StartupPacket::parse(&p).unwrap() else { panic!() };
        assert_eq!((m.major, m.minor), (3, 2));
        assert_eq!(m.param("user"), Some("u"));
        assert_eq!(m.param("database"), Some("d"));
    }

    #[test]
    fn rejects_bad_startup() {
        let mut p = startup_payload(PROTOCOL_3_0, &[("user", "u")]);
        p.pop();
        assert!(StartupPacket::parse(&p).is_err());
        assert!(matches!(
            StartupPacket::parse(&startup_payload(2 << 16, &[])),
            Err(WireError::UnsupportedProtocol { major: 2, .. })
        ));
        assert!(StartupPacket::parse(&[0, 0]).is_err());
        let mut cancel = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
        cancel.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
        assert!(StartupPacket::parse(&cancel).is_err());
    }

    #[test]
    fn options() {
        let o = parse_options(r"-c search_path=a\ b --statement-timeout=5 -cwork_mem=64kB").unwrap();
        assert_eq!(
            o,
            vec![
                ("search_path".into(), "a b".into()),
                ("statement_timeout".into(), "5".into()),
                ("work_mem".into(), "64kB".into())
            ]
        );
        assert!(parse_options("-x").is_err());
        assert!(parse_options("-c").is_err());
    }
}
