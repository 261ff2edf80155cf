//! Sockets: the listener, client streams that may be TLS, and TLS configuration.

pub mod listener;
pub mod stream;
pub mod tls;

pub use stream::ClientStream;
