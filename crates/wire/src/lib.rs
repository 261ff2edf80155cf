//! PostgreSQL wire protocol v3 without I/O.
//!
//! Frames are cut once from a read buffer ([`frame::FrameDecoder`]) and then read through
//! borrowed views ([`frontend::FrontendMessage`], [`backend::BackendMessage`]) that parse
//! lazily, so a frame that needs no rewrite can be forwarded as the same bytes.
//! Nothing here knows about sockets, sessions or pools.

pub mod backend;
pub mod build;
pub mod error;
pub mod frame;
pub mod frontend;
pub mod md5;
pub mod reader;
pub mod scram;
pub mod sqlstate;
pub mod startup;

pub use error::WireError;
pub use frame::{Frame, FrameDecoder};
