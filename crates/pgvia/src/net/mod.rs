//! Sockets: the listener, client streams that may be TLS, and TLS configuration.

pub mod limits;
pub mod listener;
pub mod stream;
pub mod tls;

pub use stream::ClientStream;
