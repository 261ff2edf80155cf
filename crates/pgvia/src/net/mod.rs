//! Sockets: the listeners, client and server streams that may be TLS or Unix-domain, and
//! TLS configuration both ways.

pub mod cert_name;
pub mod client_halves;
pub mod limits;
pub mod listener;
pub mod pem;
pub mod server_stream;
pub mod server_tls;
pub mod stream;
pub mod tls;

pub use client_halves::{ClientRead, ClientWrite};
pub use server_stream::{ServerEndpoint, ServerStream};
pub use stream::{Carrier, ClientPeer, ClientStream};
