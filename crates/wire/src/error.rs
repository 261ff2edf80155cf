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
    /// A startup parameter (a user or database name, a setting) that cannot be written into
    /// a StartupMessage as it is: a NUL byte would end it early and turn the rest into
    /// parameters of the sender's choosing (`app\0user\0postgres`).
    #[error("startup parameter {name:?} {problem}")]
    BadStartupParam { name: String, problem: &'static str },
}
