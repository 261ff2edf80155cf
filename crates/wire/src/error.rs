use thiserror::Error;

/// Everything that can be wrong with bytes received from a peer.
///
/// Every decoder and view in this crate reports malformed input through this type and never
/// panics, whatever the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("message length {0} is smaller than the 4 bytes of the length field itself")]
    LengthTooSmall(i64),
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLong { len: usize, max: usize },
    #[error("unknown {direction} message type {tag:?}")]
    UnknownTag { direction: &'static str, tag: char },
    #[error("{message}: truncated, needed {needed} more bytes")]
    Truncated { message: &'static str, needed: usize },
    #[error("{message}: string is missing its NUL terminator")]
    MissingNul { message: &'static str },
    #[error("{message}: text is not valid UTF-8")]
    InvalidUtf8 { message: &'static str },
    #[error("{message}: {detail}")]
    Invalid { message: &'static str, detail: &'static str },
    #[error("{message}: {extra} unexpected bytes after the last field")]
    TrailingBytes { message: &'static str, extra: usize },
    #[error("unsupported protocol version {major}.{minor}")]
    UnsupportedProtocol { major: u16, minor: u16 },
}
