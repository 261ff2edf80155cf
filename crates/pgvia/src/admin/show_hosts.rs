//! `SHOW HOSTS`: every server of every database, with the role and state routing sees.

use std::sync::atomic::Ordering;

use super::rows::{Kind, RowSet};
use crate::app::App;

pub fn hosts(app: &App) -> RowSet {
    use Kind::{Int, Text};
    let mut rs = RowSet::new(&[
        ("database", Text),
        ("host", Text),
        ("port", Int),
        ("configured_role", Text),
        ("role", Text),
        ("state", Text),
        ("lag_bytes", Int),
        ("lag_ms", Int),
        ("weight", Int),
        ("routed", Int),
        ("last_error", Text),
    ]);
    for hosts in app.all_hosts() {
        for h in hosts.all() {
            rs.push(vec![
                hosts.database.as_str().into(),
                h.entry.host.as_str().into(),
                h.entry.port.into(),
                h.entry.role.as_str().into(),
                h.role().as_str().into(),
                h.state().as_str().into(),
                h.lag_bytes().into(),
                h.lag_ms().into(),
                h.entry.weight.into(),
                h.routed.load(Ordering::Relaxed).into(),
                h.last_error().into(),
            ]);
        }
    }
    rs
}
