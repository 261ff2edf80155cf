//! What a client's session holds that a shared server must neither lose nor leak.
//!
//! The SQL analysis says which statements *may* change session state; it is a trigger, not
//! the record. Whether a `SET` took effect (it can fail, or be rolled back with its
//! transaction) and whether a lock or a `LISTEN` is still held is asked of the server once the
//! transaction is over, because the server is the only one that knows for sure.
//!
//! A function, a `DO` block or a prepared statement run by `EXECUTE` can change the session
//! without its text showing anything ([`Reach::Everything`]); then the whole record
//! (settings, role, listened channels and every checkable pin) is read back in one round
//! trip. Transactions whose text shows all they do pay nothing for this.

use std::fmt::Write;

use route::{Analysis, DiscardTarget, LockOp, LockScope, SessionEffect};

use crate::pool::PinReason;

/// The pins a client holds, as a set of reasons.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pins(u8);

impl Pins {
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, r: PinReason) -> bool {
        self.0 & r.bit() != 0
    }

    fn insert(&mut self, r: PinReason) {
        self.0 |= r.bit();
    }

    fn remove(&mut self, r: PinReason) {
        self.0 &= !r.bit();
    }

    pub fn reasons(self) -> impl Iterator<Item = PinReason> {
        PinReason::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

/// A part of the session a statement may have changed, to be read back from the server when
/// its transaction is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Settings (a `SET`, `RESET`, `DISCARD ALL`, or SQL pgvia could not read).
    Settings,
    /// Pins a statement may have released (an unlock, `CLOSE`, `DEALLOCATE`, `DISCARD`).
    Pins,
    /// A `LISTEN` or `UNLISTEN` ran: what the server listens to moves to the pool's
    /// notification hub (crate::notify).
    Listening,
}

/// The parts of the session to read back, as a set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checks(u8);

impl Checks {
    fn bit(check: Check) -> u8 {
        1 << check as u8
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, check: Check) -> bool {
        self.0 & Self::bit(check) != 0
    }

    pub fn insert(&mut self, check: Check) {
        self.0 |= Self::bit(check);
    }

    pub fn remove(&mut self, check: Check) {
        self.0 &= !Self::bit(check);
    }
}

/// How much of the session the check at the end of a transaction must read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// What the analysis saw, as [`SessionState::checks`] says (often nothing).
    #[default]
    Seen,
    /// Something ran whose effects the text does not show: read back everything.
    Everything,
}

/// Which protocol a statement came by. pgvia follows SQL `PREPARE` across servers only in
/// a simple query, whose text it rewrites to pgvia's names; through the extended protocol
/// (asyncpg's `execute`, node-postgres in extended mode, the HTTP gateway) the text is a
/// shared statement's, run as it is, so the statement is made on the server under the
/// client's own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Query,
    Extended,
}

/// What one server holds of a session apart from its settings: the pins, and what to read
/// back. The sharded session keeps one per shard and swaps it into its [`SessionState`]
/// around the shared observation and read-back (`read_back.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    pub pins: Pins,
    pub checks: Checks,
    pub reach: Reach,
}

/// Per-client session state for transaction pooling.
#[derive(Debug, Default)]
pub struct SessionState {
    /// Settings from the startup packet and `options`, in order.
    pub startup: Vec<(String, String)>,
    /// The settings the client's session has, to apply on every server it is given.
    pub settings: Vec<(String, String)>,
    pub pins: Pins,
    /// What statements since the last refresh may have changed.
    pub checks: Checks,
    /// Channels `UNLISTEN`ed since the last move (`None`: `UNLISTEN *`), in order.
    pub unlistens: Vec<Option<String>>,
    /// pgvia follows the client's prepared statements across servers (transaction mode), so
    /// SQL `PREPARE` needs no dedicated server.
    pub statements_followed: bool,
    pub reach: Reach,
    /// A statement since the last read-back may have changed `standard_conforming_strings`,
    /// and the server's report of it may still be on its way.
    pub strings_may_change: bool,
}

impl SessionState {
    pub fn new(startup: Vec<(String, String)>) -> Self {
        Self { settings: startup.clone(), startup, ..Self::default() }
    }

    /// Whether the session reads string literals as the standard says (the analysis does),
    /// given what its server last reported: not while the report says off, nor while a
    /// statement that may have turned it off is not yet read back (a query pipelined behind
    /// the `SET` reaches pgvia before the server's ParameterStatus does).
    pub fn standard_strings(&self, reported: &crate::server::ServerParams) -> bool {
        !self.strings_may_change
            && self.reach == Reach::Seen
            && reported.get("standard_conforming_strings").is_none_or(|v| v == "on")
    }

    /// Exchanges the per-server part of the state with `marks` (one server's of several).
    pub fn swap_marks(&mut self, marks: &mut Marks) {
        std::mem::swap(&mut self.pins, &mut marks.pins);
        std::mem::swap(&mut self.checks, &mut marks.checks);
        std::mem::swap(&mut self.reach, &mut marks.reach);
    }

    /// For a session that cannot move its channels to the notification hub (a sharded one):
    /// a `LISTEN` seen keeps the server, until the pin check finds it listens to nothing.
    pub fn pin_listening(&mut self) {
        if self.checks.contains(Check::Listening) {
            self.checks.remove(Check::Listening);
            self.unlistens.clear();
            self.pins.insert(PinReason::Listen);
            self.checks.insert(Check::Pins);
        }
    }

    /// Takes note of what the statements of a query may do to the session. Returns the pins
    /// this query added, for stats and logs.
    pub fn observe(&mut self, analysis: &Analysis, via: Via) -> Pins {
        let before = self.pins;
        if analysis.is_conservative() {
            // Unreadable SQL may do anything to settings; a refresh costs one round trip.
            self.checks.insert(Check::Settings);
        }
        if analysis.may_have_hidden_effects() {
            self.reach = Reach::Everything;
        }
        for effect in analysis.session_effects() {
            self.apply(effect, via);
        }
        Pins(self.pins.0 & !before.0)
    }

    fn apply(&mut self, effect: SessionEffect<'_>, via: Via) {
        use PinReason::*;
        match effect {
            SessionEffect::Set { name, .. } | SessionEffect::Reset { name } => {
                if name.is_none_or(|n| n.eq_ignore_ascii_case("standard_conforming_strings")) {
                    self.strings_may_change = true;
                }
                // pg_settings does not show the role GUCs, so they cannot be carried over.
                if name.is_some_and(|n| {
                    n.eq_ignore_ascii_case("role") || n.eq_ignore_ascii_case("session_authorization")
                }) {
                    self.pins.insert(Role);
                }
                if name.is_none() && self.pins.contains(Role) {
                    self.checks.insert(Check::Pins);
                }
                self.checks.insert(Check::Settings);
            }
            SessionEffect::AdvisoryLock { scope: LockScope::Session, op: LockOp::Acquire } => {
                self.pins.insert(AdvisoryLock)
            }
            SessionEffect::AdvisoryLock { scope: LockScope::Session, .. } => self.checks.insert(Check::Pins),
            SessionEffect::AdvisoryLock { .. } => {}
            // LISTEN does not pin: its channels move to the notification hub.
            SessionEffect::Listen { .. } => self.checks.insert(Check::Listening),
            SessionEffect::Unlisten { channel } => {
                self.checks.insert(Check::Listening);
                self.unlistens.push(channel.map(str::to_owned));
            }
            SessionEffect::TempTable { on_commit_drop: false, .. } => self.pins.insert(TempTable),
            SessionEffect::TempTable { .. } => {}
            SessionEffect::HoldCursor { .. } => self.pins.insert(HoldCursor),
            SessionEffect::CloseCursor { .. } => self.checks.insert(Check::Pins),
            SessionEffect::Prepare { .. } if !self.statements_followed => self.pins.insert(SqlPrepare),
            SessionEffect::Prepare { .. } if via == Via::Extended => {
                // The server holds it under the client's name from its Execute on, so the
                // client stays with that server as on a dedicated one; whether it was run
                // (a Parse alone makes nothing) is asked of the server when the transaction
                // ends, and a DEALLOCATE lets the server go again.
                self.pins.insert(SqlPrepare);
                self.checks.insert(Check::Pins);
            }
            SessionEffect::Prepare { .. } => {}
            SessionEffect::Deallocate { .. } => self.checks.insert(Check::Pins),
            SessionEffect::Discard(DiscardTarget::All) => {
                self.strings_may_change = true;
                self.checks.insert(Check::Settings);
                self.checks.insert(Check::Pins);
            }
            SessionEffect::Discard(DiscardTarget::Temp) => self.checks.insert(Check::Pins),
            SessionEffect::Discard(_) => {}
            SessionEffect::Load => self.pins.insert(LoadedLibrary),
            _ => {
                // An effect this version does not know: keep the server, as for any pin.
                self.pins.insert(LoadedLibrary);
            }
        }
    }

    /// Replaces the pins that can be checked with what the server reports; `LOAD` cannot be
    /// undone and stays. Returns the pins the report added (effects that no text showed).
    pub fn set_checked_pins(&mut self, held: &[(PinReason, bool)]) -> Pins {
        let before = self.pins;
        for &(reason, is_held) in held {
            if is_held {
                self.pins.insert(reason);
            } else {
                self.pins.remove(reason);
            }
        }
        self.checks.remove(Check::Pins);
        Pins(self.pins.0 & !before.0)
    }

    /// Takes the server's report of session-level settings as the client's, then puts back
    /// startup settings the session lost (after `RESET`, `RESET ALL` or `DISCARD ALL` a
    /// dedicated server returns to the values from the startup packet, a shared one to its
    /// own defaults). Returns the settings the server now has, which pgvia applied for it.
    pub fn set_settings_from_server(&mut self, reported: Vec<(String, String)>) -> Vec<(String, String)> {
        let mut settings = reported.clone();
        for (name, value) in &self.startup {
            if !settings.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
                settings.push((name.clone(), value.clone()));
            }
        }
        self.settings = settings;
        self.checks.remove(Check::Settings);
        self.strings_may_change = false;
        reported
    }
}

/// The condition that tells whether the server holds what pins for `reason`, or `None` for
/// a pin the server cannot be asked about (`LOAD`).
fn pin_condition(reason: PinReason, pool_user: &str) -> Option<String> {
    use PinReason::*;
    Some(match reason {
        AdvisoryLock => "EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' \
                         AND pid = pg_catalog.pg_backend_pid())"
            .to_owned(),
        Listen => "EXISTS (SELECT 1 FROM pg_catalog.pg_listening_channels())".to_owned(),
        TempTable => {
            "EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema())"
                .to_owned()
        }
        HoldCursor => "EXISTS (SELECT 1 FROM pg_catalog.pg_cursors WHERE is_holdable)".to_owned(),
        // A pattern without a backslash, which reads the same in a session whose
        // standard_conforming_strings is off.
        SqlPrepare => "EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_statements \
                       WHERE from_sql AND name !~ '^pgvia_[0-9]+$')"
            .to_owned(),
        Role => {
            let mut user = String::new();
            for c in pool_user.chars() {
                if c == '\'' {
                    user.push('\'');
                }
                user.push(c);
            }
            format!("(current_user <> session_user OR session_user <> '{user}')")
        }
        LoadedLibrary => return None,
    })
}

/// The query whose one row tells which checkable pins the server still holds, in the order of
/// [`pin_check_reasons`].
pub fn pin_check_query(pool_user: &str) -> String {
    let mut sql = String::from("SELECT ");
    for (i, reason) in pin_check_reasons().into_iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&pin_condition(reason, pool_user).unwrap_or_default());
    }
    sql
}

/// The pins [`pin_check_query`] reports on, in its column order.
pub fn pin_check_reasons() -> [PinReason; 6] {
    use PinReason::*;
    [AdvisoryLock, Listen, TempTable, HoldCursor, SqlPrepare, Role]
}

/// The pins the full check reports on. `LISTEN` is not among them: what the server listens
/// to moves to the notification hub instead.
const FULL_CHECK_PINS: [PinReason; 5] = [
    PinReason::AdvisoryLock,
    PinReason::TempTable,
    PinReason::HoldCursor,
    PinReason::SqlPrepare,
    PinReason::Role,
];

/// One query, so one round trip, that reads back everything a transaction may have changed
/// unseen: a row `('p', <pin index>, 'true'|'false')` per checkable pin, `('s', name, value)`
/// per session-level setting and `('l', channel, NULL)` per channel the server listens to.
pub fn full_check_query(pool_user: &str) -> String {
    let mut sql = String::new();
    for reason in FULL_CHECK_PINS {
        let condition = pin_condition(reason, pool_user).unwrap_or_else(|| "false".to_owned());
        let _ = write!(sql, "SELECT 'p', '{}', ({condition})::text UNION ALL ", reason.index());
    }
    sql.push_str(
        "SELECT 's', name, setting FROM pg_catalog.pg_settings WHERE source = 'session' UNION ALL \
         SELECT 'l', c, NULL FROM pg_catalog.pg_listening_channels() AS c",
    );
    sql
}

/// What [`full_check_query`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ServerReport {
    pub pins: Vec<(PinReason, bool)>,
    /// Session-level settings, by name.
    pub settings: Vec<(String, String)>,
    pub listening: Vec<String>,
}

impl ServerReport {
    /// Reads the rows of [`full_check_query`]; `None` when they are not what it returns.
    pub fn read(rows: Vec<Vec<Option<String>>>) -> Option<ServerReport> {
        let mut report = ServerReport::default();
        for row in rows {
            let mut row = row.into_iter();
            let (Some(Some(kind)), Some(Some(name)), Some(value)) = (row.next(), row.next(), row.next())
            else {
                return None;
            };
            match (kind.as_str(), value) {
                ("p", Some(held)) => {
                    let reason = PinReason::ALL.into_iter().find(|r| r.index().to_string() == name)?;
                    report.pins.push((reason, held == "true"));
                }
                ("s", Some(value)) => report.settings.push((name, value)),
                ("l", _) => report.listening.push(name),
                _ => return None,
            }
        }
        if report.pins.len() != FULL_CHECK_PINS.len() {
            return None;
        }
        report.settings.sort();
        Some(report)
    }
}

/// The server's session-level settings: what `SET`, `set_config(..., false)` and pgvia's own
/// settings sync left behind.
pub const SESSION_SETTINGS_QUERY: &str =
    "SELECT name, setting FROM pg_catalog.pg_settings WHERE source = 'session' ORDER BY name";

#[cfg(test)]
mod tests {
    use super::*;

    fn analyze(sql: &str) -> std::sync::Arc<Analysis> {
        route::Analyzer::new(route::AnalyzerOptions::default()).unwrap().analyze(sql, &[])
    }

    #[test]
    fn pins_and_triggers() {
        let mut s = SessionState::new(vec![]);
        let added = s.observe(&analyze("select pg_advisory_lock(1)"), Via::Query);
        assert!(added.contains(PinReason::AdvisoryLock));
        assert!(s.observe(&analyze("select pg_advisory_xact_lock(1)"), Via::Query).is_empty());
        s.observe(&analyze("select pg_advisory_unlock(1)"), Via::Query);
        assert!(s.checks.contains(Check::Pins));
        s.set_checked_pins(&[(PinReason::AdvisoryLock, false)]);
        assert!(s.pins.is_empty());
        s.observe(&analyze("LISTEN jobs"), Via::Query);
        assert!(
            s.pins.is_empty() && s.checks.contains(Check::Listening),
            "LISTEN moves to the hub, it does not pin"
        );
        s.observe(&analyze("UNLISTEN *; UNLISTEN jobs"), Via::Query);
        assert_eq!(s.unlistens, [None, Some("jobs".to_owned())]);
        s.observe(&analyze("SET search_path = a, b"), Via::Query);
        assert!(s.checks.contains(Check::Settings));
        let mut t = SessionState::new(vec![]);
        t.observe(&analyze("SET LOCAL work_mem = '1MB'"), Via::Query);
        assert!(!t.checks.contains(Check::Settings), "SET LOCAL lasts only for its transaction");
        t.observe(&analyze("SET ROLE nobody"), Via::Query);
        assert!(t.pins.contains(PinReason::Role));
        t.observe(&analyze("create temp table x (a int)"), Via::Query);
        assert!(t.pins.contains(PinReason::TempTable));
    }

    #[test]
    fn hidden_effects_widen_the_check() {
        let mut s = SessionState::new(vec![]);
        s.observe(
            &analyze("SELECT lower('A'), set_config('a.b', 'c', false), pg_advisory_xact_lock(1)"),
            Via::Query,
        );
        assert_eq!(s.reach, Reach::Seen, "built-ins whose effects the analysis records");
        for sql in ["SELECT my_func()", "CALL p()", "DO $$ BEGIN END $$", "EXECUTE s", "SELEC"] {
            let mut s = SessionState::new(vec![]);
            s.observe(&analyze(sql), Via::Query);
            assert_eq!(s.reach, Reach::Everything, "{sql}");
        }
    }

    #[test]
    fn the_full_check_is_read_back() {
        let text = |v: &str| Some(v.to_owned());
        let mut rows: Vec<Vec<Option<String>>> = FULL_CHECK_PINS
            .iter()
            .map(|r| {
                vec![
                    text("p"),
                    text(&r.index().to_string()),
                    text(if *r == PinReason::Role { "true" } else { "false" }),
                ]
            })
            .collect();
        rows.push(vec![text("s"), text("work_mem"), text("8192")]);
        rows.push(vec![text("s"), text("search_path"), text("x")]);
        rows.push(vec![text("l"), text("jobs"), None]);
        let report = ServerReport::read(rows.clone()).expect("a report");
        assert_eq!(report.settings, [("search_path".into(), "x".into()), ("work_mem".into(), "8192".into())]);
        assert_eq!(report.listening, ["jobs"]);
        assert!(report.pins.contains(&(PinReason::Role, true)));
        assert!(report.pins.contains(&(PinReason::TempTable, false)));
        assert!(ServerReport::read(rows[1..].to_vec()).is_none(), "a pin row missing");
        assert!(ServerReport::read(vec![vec![text("x"), text("y"), None]]).is_none());
        let sql = full_check_query("o'hara");
        assert!(sql.contains("'o''hara'") && sql.contains("pg_listening_channels"));
    }

    #[test]
    fn startup_settings_come_back_after_reset() {
        let mut s = SessionState::new(vec![("application_name".into(), "app".into())]);
        let applied = s.set_settings_from_server(vec![("work_mem".into(), "8192".into())]);
        assert_eq!(applied.len(), 1);
        assert_eq!(
            s.settings,
            vec![("work_mem".into(), "8192".into()), ("application_name".into(), "app".into())]
        );
    }

    #[test]
    fn string_rules_follow_the_session() {
        let mut s = SessionState::new(vec![]);
        let mut reported = crate::server::ServerParams::new();
        reported.insert("standard_conforming_strings".into(), "on".into());
        assert!(s.standard_strings(&reported));
        s.observe(&analyze("SET standard_conforming_strings = off"), Via::Query);
        assert!(!s.standard_strings(&reported), "the server's report may be on its way");
        s.set_settings_from_server(vec![]);
        assert!(s.standard_strings(&reported));
        reported.insert("standard_conforming_strings".into(), "off".into());
        assert!(!s.standard_strings(&reported));
        s.observe(&analyze("SELECT my_func()"), Via::Query);
        reported.insert("standard_conforming_strings".into(), "on".into());
        assert!(!s.standard_strings(&reported), "a function may have changed it");
    }

    #[test]
    fn a_sql_prepare_through_the_extended_protocol_pins_until_checked() {
        let mut s = SessionState { statements_followed: true, ..SessionState::new(vec![]) };
        assert!(s.observe(&analyze("PREPARE p AS SELECT 1"), Via::Query).is_empty());
        let added = s.observe(&analyze("PREPARE p AS SELECT 1"), Via::Extended);
        assert!(added.contains(PinReason::SqlPrepare));
        assert!(s.checks.contains(Check::Pins), "a Parse alone makes nothing on the server");
    }
}
