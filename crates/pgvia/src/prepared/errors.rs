//! PostgreSQL's errors about statement names, in its own words, for the places where pgvia
//! answers in the server's stead (plain pools' forwarding and the sharded session alike).

use bytes::{Bytes, BytesMut};
use wire::sqlstate::SqlState;

/// 26000 for a Bind, Describe or `EXECUTE` of a statement the client does not hold; the
/// unnamed statement has a message of its own.
pub fn no_such_statement(name: &str) -> Bytes {
    if name.is_empty() {
        return error(SqlState::INVALID_SQL_STATEMENT_NAME, "unnamed prepared statement does not exist");
    }
    error(SqlState::INVALID_SQL_STATEMENT_NAME, &format!("prepared statement \"{name}\" does not exist"))
}

/// 42P05 for a Parse or `PREPARE` under a name the client already uses.
pub fn duplicate_statement(name: &str) -> Bytes {
    error(SqlState::DUPLICATE_PREPARED_STATEMENT, &format!("prepared statement \"{name}\" already exists"))
}

fn error(code: SqlState, message: &str) -> Bytes {
    let mut out = BytesMut::new();
    wire::build::ErrorFields::error(code, message).write(&mut out);
    out.freeze()
}
