//! The read-back at the end of a transaction, shared by both session engines: what the
//! analysis marked in a [`SessionState`] is asked of the server that ran it, so that the
//! record of the client's settings and pins is the server's, not the text's. The plain
//! session runs it on its one server, the sharded session once per shard it held.

use std::time::Duration;

use super::error::SessionError;
use super::settings;
use super::state::{self, Check, Pins, Reach, SessionState};
use crate::server::ServerConn;

/// What a read-back found besides what it wrote into the state.
#[derive(Debug, Default)]
pub struct Found {
    /// Pins no text showed (a function or `DO` block took them), for stats and logs.
    pub added: Pins,
    /// With [`Reach::Everything`]: the channels the server listens to, which the caller
    /// moves to the notification hub or keeps the server for.
    pub listening: Option<Vec<String>>,
}

/// Reads back from `conn` what `state` says may have changed: everything in one round trip
/// after an opaque statement, else the pins (when some may have been released) and the
/// settings the analysis marked. The client's settings become the server's, startup
/// settings a RESET took away are put back, and `conn.applied` is made what pgvia applied.
/// `Check::Listening` is the caller's: only it knows where channels go.
pub async fn read_back(
    conn: &mut ServerConn,
    state: &mut SessionState,
    pool_user: &str,
    timeout: Duration,
) -> Result<Found, SessionError> {
    if state.reach == Reach::Everything {
        let rows = conn.query_rows(&state::full_check_query(pool_user), timeout).await?;
        let report = state::ServerReport::read(rows)
            .ok_or(SessionError::ProtocolState("unexpected session check reply"))?;
        state.reach = Reach::Seen;
        let added = state.set_checked_pins(&report.pins);
        conn.applied = state.set_settings_from_server(report.settings).into_iter().collect();
        settings::apply(conn, &state.settings, timeout).await?;
        return Ok(Found { added, listening: Some(report.listening) });
    }
    if state.checks.contains(Check::Pins) && !state.pins.is_empty() {
        let rows = conn.query_rows(&state::pin_check_query(pool_user), timeout).await?;
        let row = rows.first().ok_or(SessionError::ProtocolState("pin check returned no row"))?;
        let held: Vec<_> = state::pin_check_reasons()
            .into_iter()
            .zip(row.iter())
            .map(|(reason, v)| (reason, v.as_deref() == Some("t")))
            .collect();
        state.set_checked_pins(&held);
    }
    state.checks.remove(Check::Pins);
    if state.checks.contains(Check::Settings) {
        let rows = conn.query_rows(state::SESSION_SETTINGS_QUERY, timeout).await?;
        let reported = rows
            .into_iter()
            .filter_map(|r| match r.as_slice() {
                [Some(name), Some(value)] => Some((name.clone(), value.clone())),
                _ => None,
            })
            .collect();
        conn.applied = state.set_settings_from_server(reported).into_iter().collect();
        settings::apply(conn, &state.settings, timeout).await?;
    }
    Ok(Found::default())
}

/// Whether [`read_back`] has anything to ask of the server.
pub fn needed(state: &SessionState) -> bool {
    state.reach == Reach::Everything
        || state.checks.contains(Check::Settings)
        || (state.checks.contains(Check::Pins) && !state.pins.is_empty())
}
