//! One connection to a PostgreSQL server: connecting and authenticating, the parameters it
//! reported, what it still owes (the reply tracker), and bringing it back to a clean state.

mod address;
mod conn;
mod error;
pub mod forward;
mod reset;
mod sql_names;
pub mod tracker;
pub mod transport;

pub use address::ServerAddress;
pub use conn::{
    first_reply, BackendKey, Condition, FirstReply, FirstRequest, IdleDeath, Rows, ServerConn, ServerParams,
};
pub use error::ServerError;
pub use reset::CANCEL_SETTLE;
pub use tracker::{CopyState, ReplyTracker, ServerEvent};
