//! A logged-in client: it gets a server at its first message and keeps it (session pooling)
//! until it leaves; what the client was told about server parameters is kept in step.

use std::sync::Arc;

/// The session's per-request parts, taken if it holds none (work.rs). A macro, not a method:
/// it borrows the three fields it needs, not the whole session.
macro_rules! parts {
    ($s:expr) => {
        $s.work.get($s.app, $s.shutdown.client())
    };
}
pub(super) use parts;

/// The client's statements, made at their first use, when its pool follows them.
macro_rules! statements {
    ($s:expr) => {
        $crate::session::client::statements_of(&mut $s.statements, &$s.pool, $s.state.statements_followed)
    };
}
pub(super) use statements;

/// What `statements!` expands to: the fields it needs, so the rest of the session stays free.
pub(super) fn statements_of<'s>(
    slot: &'s mut Option<Box<ClientStatements>>,
    pool: &Pool,
    followed: bool,
) -> Option<&'s mut ClientStatements> {
    if slot.is_none() && followed {
        *slot = pool.client_statements().map(Box::new);
    }
    slot.as_deref_mut()
}

use bytes::BytesMut;
use wire::sqlstate::SqlState;
use wire::FrameDecoder;

use super::deferred::DeferredBegin;
use super::error::SessionError;
use super::exchange::{self, Buffers, RelayEnd};
use super::relay;
use super::settings;
use super::state::{self, SessionState};
use super::timeouts::Timers;
use super::work::{Parts, Work};
use crate::app::App;
use crate::cancel::CancelKey;
use crate::config::{PoolMode, RolePreference};
use crate::net::ClientStream;
use crate::notify::Inbox;
use crate::pool::{Checkout, PatronRef, Pool};
use crate::prepared::ClientStatements;
use crate::routing::decide::{self, Decision};
use crate::routing::PoolGroup;
use crate::routing::Target;
use crate::server::tracker::{Pending, Replies, Request};
use crate::server::CANCEL_SETTLE;
use crate::server::{ServerError, ServerParams};

/// How the transaction being served was routed (on a database with several servers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Routed {
    /// Not routed: no transaction yet, or one server only.
    #[default]
    Unrouted,
    /// A reading transaction, on the primary or where a hint or the session's role sent it.
    Reads,
    /// The transaction writes (or may): once it is over, the client's reads stay on the
    /// primary for the database's `read_your_writes` window.
    Writes,
    /// A reading transaction on a replica the analysis chose (not a hint or the session's
    /// role): an exchange pipelined behind the first that needs the primary is held for it.
    ReadsOnReplica,
}

/// Whether the client's messages are discarded until its next Sync, as PostgreSQL does
/// after an error in an extended-protocol batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Discard {
    #[default]
    Nothing,
    UntilSync,
}

/// How the wait for a server ended.
enum Assigned {
    /// The session holds it.
    Server,
    /// A cancel came first; the request is the session's to answer.
    Cancelled,
}

pub struct Session<'a> {
    pub app: &'a App,
    pub client: &'a mut ClientStream,
    /// The pool whose settings and statistics the session uses (the primary's at login).
    pub pool: Arc<Pool>,
    /// The pools of every server of the database; transactions are checked out of these.
    pub group: Arc<PoolGroup>,
    /// `SET pgvia.role`, or the user's `default_role`.
    pub role: RolePreference,
    /// Read-your-writes: reads stay on the primary until then.
    pub primary_until: Option<std::time::Instant>,
    /// How the transaction being served was routed.
    pub routed: Routed,
    /// Settings and pins: what follows the client from server to server.
    pub state: SessionState,
    pub cancel: CancelKey,
    /// The parameter values the client has been told (ParameterStatus); shared with the pool
    /// and other clients until it differs from theirs.
    pub told: Arc<ServerParams>,
    /// Buffers, meter, read limits and query memo: held only while the client has something
    /// to do (work.rs); an idle client keeps none of them.
    pub work: Work,
    pub decoder: FrameDecoder,
    pub shutdown: crate::clients::PhaseWatch,
    /// The server the client holds. Boxed: a client holds one only while it has a
    /// transaction (or for life, in session mode), and inline the checkout made every idle
    /// client 470 bytes larger (issue 19). One allocation per transaction.
    pub server: Option<Box<Checkout>>,
    /// A `BEGIN` answered locally, to be sent ahead of the client's next statement.
    pub deferred_begin: Option<DeferredBegin>,
    /// Idle, idle-in-transaction and query time limits.
    pub timers: Timers,
    /// Whether the client's messages up to its next Sync are discarded (statement mode
    /// refused a Parse, or a cancel answered a batch that waited for a server).
    pub discard: Discard,
    /// The channels this client listens to through the pool's notification hub, and the
    /// notifications waiting for it. `None` until its first `LISTEN` in transaction mode.
    /// Boxed: few clients listen, and inline it was 56 bytes of every idle client.
    pub inbox: Option<Box<Inbox>>,
    /// The client's prepared statements, when the pool follows them across servers
    /// (`state.statements_followed`). Made at the client's first request (`statements!`):
    /// inline, they were 176 bytes of every client, idle or not (issue 19).
    pub statements: Option<Box<ClientStatements>>,
}

impl Session<'_> {
    /// Serves the client until it leaves, fails, or shutdown ends it. Returns why the
    /// session ended (for the log) and the client's last message (why it was closed), if any;
    /// the server is still held, for [`release`]. The message's buffer is made at the end:
    /// kept in the session's future, it would be 32 bytes of every idle client.
    pub async fn run(&mut self) -> (String, BytesMut) {
        let end = self.serve().await;
        let mut out = BytesMut::new();
        let reason = self.ended(end, &mut out);
        (reason, out)
    }

    /// Why the session ended, with its last words written to `out`.
    fn ended(&mut self, end: RelayEnd, out: &mut BytesMut) -> String {
        self.cancel.slot.set(None);
        let ended_by_pgvia = match &end {
            RelayEnd::Shutdown => true,
            RelayEnd::Error(SessionError::Refused { code, .. }) => {
                *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
                    || *code == SqlState::IDLE_SESSION_TIMEOUT
            }
            _ => false,
        };
        if ended_by_pgvia {
            self.interrupt_server();
        }
        match end {
            RelayEnd::ClientDone => "client closed the connection".to_owned(),
            RelayEnd::Error(e) => {
                tracing::info!(pool = %self.pool.name, error = %e, "closing client session");
                e.write_fatal(out);
                e.to_string()
            }
            RelayEnd::ServerLost { error, told_client } => {
                // What the server said last (its FATAL among it, when it explained itself)
                // may still wait in the client's buffer: the relay saw the server's EOF before
                // it could write them. The client hears them first, as directly.
                if let Some(parts) = self.work.peek_mut() {
                    out.extend_from_slice(&std::mem::take(&mut parts.bufs.to_client));
                }
                // The pool of the server that was lost, which routing may have picked.
                let pool = self.server.as_ref().map_or(&self.pool, |c| c.pool());
                tracing::warn!(pool = %pool.name, error = %error, "server connection lost during a session");
                let reason = format!("server connection lost: {error}");
                // When the server's own FATAL already reached the client, that is the last word.
                if !told_client {
                    SessionError::Server(error).write_fatal(out);
                }
                reason
            }
            RelayEnd::Shutdown => {
                SessionError::Shutdown.write_fatal(out);
                "shutdown or killed by the admin console".to_owned()
            }
            // `serve` handles this itself and never returns it.
            RelayEnd::Quiescent => String::new(),
        }
    }

    /// A kill, shutdown or time limit ends the session while the server still works for it
    /// (a long statement, or a large result the client stopped reading): that work is
    /// cancelled, as PostgreSQL's own termination of a backend would abort it, so the reset
    /// does not wait it out and the server, its locks and its pool slot are freed at once.
    /// The reset waits for the cancel to land before it sends anything. A client that left
    /// by itself (or sent something invalid) is not interrupted: a direct server would finish
    /// what it had been sent.
    fn interrupt_server(&mut self) {
        let Some(checkout) = self.server.as_mut() else { return };
        let conn = checkout.conn();
        if conn.is_broken() || !conn.tracker.has_pending() {
            return;
        }
        // Counted in flight now, so the reset cannot overtake it.
        let cancel = crate::cancel::ArmedCancel::for_held_server(conn.cancel_target());
        let timeout = self.pool.settings.connect_timeout;
        tokio::spawn(async move {
            if let Err(e) = crate::cancel::forward(cancel, timeout).await {
                tracing::warn!(error = %e, "could not cancel the work of a client pgvia ended");
            }
        });
    }

    /// Takes what [`release`] needs, so the session's last words to its client can be
    /// written while the server is reset.
    pub fn take_server(&mut self) -> (Option<Checkout>, BytesMut) {
        let unsent = self.work.peek_mut().map(|p| std::mem::take(&mut p.bufs.to_server)).unwrap_or_default();
        (self.server.take().map(|c| *c), unsent)
    }
}

/// Gives a session's server back: reset and pooled if it can be made clean, closed
/// otherwise. `unsent` holds client frames counted by the tracker but not yet written.
pub async fn release(app: &App, checkout: Option<Checkout>, unsent: &[u8]) {
    let Some(checkout) = checkout else { return };
    if checkout.conn_ref().is_broken() {
        drop(checkout);
        return;
    }
    let config = app.config();
    // Boxed: the reset's state would otherwise be part of every session's future, and so of
    // every idle client's memory, for a step taken once at the end.
    let general = &config.general;
    Box::pin(checkout.release(unsent, &general.server_reset_query, general.server_reset_timeout)).await;
}

impl Session<'_> {
    async fn serve(&mut self) -> RelayEnd {
        loop {
            if self.server.is_none() {
                if let Some(end) = self.wait_for_work().await {
                    return end;
                }
                let Buffers { first, from_client, .. } = &mut parts!(self).bufs;
                first.keep(from_client, self.deferred_begin.as_ref());
            }
            // What needs a server (checkout, relay, state refresh, give-back) is a future of
            // its own on the heap, for as long as the client has a server: inline, its state
            // would size every session's task, and an idle client would carry it (issue 19,
            // docs/benchmarks.md). One allocation per transaction, none per message.
            if let Some(end) = Box::pin(self.busy()).await {
                return end;
            }
        }
    }

    /// Takes a server if the client holds none, then relays until the server goes back to
    /// the pool (`None`: wait for the next request) or the session ends (`Some`).
    async fn busy(&mut self) -> Option<RelayEnd> {
        let release_when_quiescent = self.pool.settings.pool_mode != PoolMode::Session;
        if self.server.is_none() {
            match self.assign().await {
                Ok(Assigned::Server) => {}
                Ok(Assigned::Cancelled) => {
                    self.answer_cancelled();
                    return None;
                }
                Err(e) => return Some(RelayEnd::Error(e)),
            }
        }
        loop {
            let checkout = self.server.as_mut()?;
            let Parts { bufs, memo } = self.work.get(self.app, self.shutdown.client());
            let statements = statements!(self);
            let tracking = release_when_quiescent.then_some(exchange::Tracking {
                analyzer: &self.app.analyzer,
                memo,
                state: &mut self.state,
                pool_name: &self.pool.name,
                pool_stats: &self.pool.stats,
                refuse_transactions: self.pool.settings.pool_mode == PoolMode::Statement,
                held: None,
                open_batch: false,
                statements,
                role: &mut self.role,
                replica_split: (self.routed == Routed::ReadsOnReplica)
                    .then_some(self.group.hosts.settings.read_write_split),
                notifier: Some((&self.app.notify.senders, self.cancel.process_id)),
            });
            let end = relay::relay(
                self.client,
                checkout.conn(),
                bufs,
                &self.decoder,
                &mut self.shutdown,
                tracking,
                relay::Waits { timers: &mut self.timers, inbox: self.inbox.as_deref_mut() },
            )
            .await;
            match end {
                RelayEnd::Quiescent => {
                    if let Err(e) = self.refresh_state().await {
                        return Some(RelayEnd::Error(e));
                    }
                    self.note_transaction_end();
                    if self.state.pins.is_empty() {
                        self.give_back_quiescent().await;
                        return None;
                    } else if !parts!(self).bufs.from_client.is_empty() {
                        // The relay stopped at a message statement mode refuses; answer it
                        // here, keeping the pinned server.
                        if let Some(end) = self.wait_for_work().await {
                            return Some(end);
                        }
                    }
                }
                RelayEnd::ServerLost { error, .. } if self.retry_elsewhere(&error) => {}
                other => return Some(other),
            }
        }
    }

    /// Returns a server that finished the client's transaction to the pool. From here on a
    /// cancel from this client finds no target, and a cancel already sent must have been
    /// acted on before the server may serve anyone else.
    async fn give_back_quiescent(&mut self) {
        self.cancel.slot.set(None);
        let Some(checkout) = self.server.take() else { return };
        if checkout.conn_ref().cancels.settled(CANCEL_SETTLE).await {
            checkout.give_back_idle();
        } else {
            tracing::warn!(pool = %self.pool.name, "a cancel request did not complete; closing its server");
            drop(checkout);
        }
    }

    /// Takes a server from the pool, brings it to the client's settings, tells the client
    /// about parameters that differ from what it was told, and points cancels at it. A
    /// cancel that comes while the request waits (`Assigned::Cancelled`) is the session's to
    /// answer: the request then goes to no server.
    async fn assign(&mut self) -> Result<Assigned, SessionError> {
        let timeout = self.app.config().general.server_reset_timeout;
        let mut tries = 0;
        let slot = Arc::clone(&self.cancel.slot);
        let queued = slot.queue();
        let (mut checkout, applied) = loop {
            // Only the wait for a pool server is cut short: a server already taking the
            // client's settings finishes, and is given back clean below. The checkout is
            // polled first: when a server is free at once (the common case) the cancel's
            // wake-up is never registered.
            let mut checkout = tokio::select! {
                biased;
                checkout = self.checkout() => checkout?,
                () = queued.cancelled() => return Ok(Assigned::Cancelled),
            };
            let applied = settings::apply(checkout.conn(), &self.state.settings, timeout).await;
            // A server that died taking the client's settings has run nothing of the
            // client's: another one is taken (one that timed out is not: it may be slow).
            let dead = checkout.conn_ref().is_broken()
                && !matches!(applied, Err(SessionError::Server(crate::server::ServerError::Timeout(_))));
            tries += 1;
            if dead && tries < 8 {
                tracing::info!(pool = %checkout.pool().name, "server connection died while taking the client's settings; taking another");
                continue;
            }
            break (checkout, applied);
        };
        let conn = checkout.conn();
        self.app.notify.senders.server_taken(&conn.peer, conn.key.process_id);
        self.cancel.slot.set(Some(conn.cancel_target()));
        if queued.finish() {
            // Cancelled before the slot pointed at this server: nothing of the request was
            // sent, and the server goes back as it came (once any cancel that found it in
            // between has landed).
            match applied {
                Ok(()) => {
                    self.server = Some(Box::new(checkout));
                    self.give_back_quiescent().await;
                }
                // Its state is unknown: dropped, it is closed.
                Err(_) => drop(checkout),
            }
            return Ok(Assigned::Cancelled);
        }
        if let Some(begin) = self.deferred_begin.take() {
            // The client was told its BEGIN succeeded; the server hears it now, first, and
            // its reply is not passed on a second time.
            parts!(self).bufs.to_server.extend_from_slice(begin.frame());
            // Like any simple query, it replaces the server's unnamed statement.
            conn.statements.unnamed = None;
            conn.tracker.push(Pending {
                request: Request::Query,
                replies: Replies::DropAll,
                server_effect: None,
                client_effect: None,
            });
            conn.mark_used();
        }
        self.server = Some(Box::new(checkout));
        self.tell_parameter_changes();
        applied.map(|()| Assigned::Server)
    }

    /// After the relay lost its server: when the client's first request can have left
    /// nothing on it, drops the server and puts the request back, to be sent to another one
    /// (retry.rs). Returns whether it did.
    fn retry_elsewhere(&mut self, error: &crate::server::ServerError) -> bool {
        let Some(checkout) = self.server.as_mut() else { return false };
        let pool = checkout.pool().clone();
        let conn = checkout.conn();
        if !parts!(self).bufs.first.begin_retry(&pool.name, conn, error) {
            return false;
        }
        // The statement bookkeeping of what was sent is undone, as for requests a server
        // refused, so the request finds the client's statements as they were.
        conn.tracker.abandon();
        conn.settle_statements(statements!(self));
        conn.mark_broken();
        self.cancel.slot.set(None);
        // Dropped, not given back: the guard closes a broken server.
        self.server = None;
        let bufs = &mut parts!(self).bufs;
        let (request, begin) = bufs.first.kept();
        self.deferred_begin = begin.cloned();
        bufs.to_server.clear();
        bufs.from_client.clear();
        bufs.from_client.extend_from_slice(request);
        true
    }

    /// This client as its pools see it (its state and waits for `SHOW CLIENTS`): its registry
    /// entry, which the phase watch holds already (a field of its own was 16 bytes of every
    /// idle client).
    fn patron(&self) -> PatronRef {
        self.shutdown.client().clone()
    }

    /// Whether this session picks a server per transaction (several servers, transaction
    /// or statement mode).
    pub(super) fn routes_transactions(&self) -> bool {
        !self.group.is_single() && self.pool.settings.pool_mode != PoolMode::Session
    }

    /// A server for what the client sent: the primary or a replica, as [`Self::route`] says.
    async fn checkout(&mut self) -> Result<Checkout, SessionError> {
        if self.group.is_single() {
            self.routed = Routed::Unrouted;
            let patron = self.patron();
            return Ok(self.pool.checkout(Some(&patron)).await?);
        }
        if self.group.hosts.is_retired() {
            // A reload changed the database's servers.
            let config = self.app.config();
            if let Some((db, user)) =
                config.database(&self.pool.key.database).zip(config.user(&self.pool.key.user))
            {
                self.group = self.app.group_for(db, user);
            }
        }
        let (target, by_analysis) = self.route();
        let patron = self.patron();
        let checkout = self.group.checkout(target, Some(&patron)).await?;
        let primary = self.group.hosts.primary().and_then(|i| self.group.pools.get(i));
        let on_replica = by_analysis
            && target == Target::Replica
            && !primary.is_some_and(|p| Arc::ptr_eq(p, checkout.pool()));
        if on_replica && self.routed == Routed::Reads {
            self.routed = Routed::ReadsOnReplica;
        }
        Ok(checkout)
    }

    /// Where the transaction waiting in the client's buffer goes: a comment hint, else the
    /// session's role (`SET pgvia.role`, the user's `default_role`), else the analysis of its
    /// statements, with reads kept on the primary for a while after a write. Also says
    /// whether the analysis made the choice.
    fn route(&mut self) -> (Target, bool) {
        let decision = if self.pool.settings.pool_mode == PoolMode::Session {
            // The whole session on one server: only the role preference can choose.
            Decision { target: Target::Primary, hinted: false, writes: true }
        } else {
            let analyzer = &self.app.analyzer;
            let standard = self.state.standard_strings(&self.told);
            let Parts { bufs, memo } = self.work.get(self.app, self.shutdown.client());
            decide::decide(
                analyzer,
                |sql| analyzer.for_session(memo.analyze(analyzer, sql), sql, standard),
                &self.decoder,
                statements!(self).map(|s| &*s),
                self.group.hosts.settings.read_write_split,
                self.deferred_begin.as_ref().map(|d| &d.frame()[..]),
                &bufs.from_client,
            )
        };
        self.routed = if decision.writes { Routed::Writes } else { Routed::Reads };
        tracing::debug!(pool = %self.pool.name, ?decision, role = self.role.as_str(), "routing a transaction");
        if decision.hinted {
            return (decision.target, false);
        }
        match self.role {
            RolePreference::Primary => (Target::Primary, false),
            RolePreference::Replica => (Target::Replica, false),
            RolePreference::Auto
                if decision.target == Target::Replica
                    && self.primary_until.is_some_and(|t| std::time::Instant::now() < t) =>
            {
                (Target::Primary, true)
            }
            RolePreference::Auto => (decision.target, true),
        }
    }

    /// After a transaction that wrote, the client's reads stay on the primary for the
    /// database's `read_your_writes` window.
    fn note_transaction_end(&mut self) {
        let window = self.group.hosts.settings.read_your_writes;
        if std::mem::take(&mut self.routed) == Routed::Writes && !window.is_zero() && !self.group.is_single()
        {
            self.primary_until = Some(std::time::Instant::now() + window);
        }
    }

    /// Sends the client ParameterStatus for every reported parameter of its server that
    /// differs from what the client was last told.
    fn tell_parameter_changes(&mut self) {
        let Some(checkout) = self.server.as_mut() else { return };
        let conn = checkout.conn();
        // Twice per transaction, and servers of one pool nearly always report what the
        // client was told, which most clients share (`welcome_params`): a pointer comparison
        // settles it, else one ordered walk of both maps, without a search per name.
        if conn.params_told.as_ref().is_some_and(|told| Arc::ptr_eq(told, &self.told)) {
            return;
        }
        if conn.params == *self.told {
            conn.params_told = Some(self.told.clone());
            return;
        }
        for (name, value) in &conn.params {
            if self.told.get(name) != Some(value) {
                wire::build::parameter_status(&mut parts!(self).bufs.to_client, name, value);
                Arc::make_mut(&mut self.told).insert(name.clone(), value.clone());
            }
        }
    }

    /// After a transaction that ran `LISTEN` or `UNLISTEN`: reads what the server listens to
    /// (committed `LISTEN`s: PostgreSQL applies them at commit, so the server is the record)
    /// and moves it to the hub.
    async fn move_listens(&mut self) -> Result<(), SessionError> {
        let timeout = self.app.config().general.server_reset_timeout;
        let Some(checkout) = self.server.as_mut() else { return Ok(()) };
        let rows = checkout.conn().query_rows("SELECT pg_catalog.pg_listening_channels()", timeout).await?;
        let listening: Vec<String> =
            rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect();
        self.move_listening(listening).await
    }

    /// Applies the `UNLISTEN`s seen to the client's hub subscriptions, subscribes it to
    /// `listening` (what its server listens to), waits until the hub's connection listens to
    /// them, and only then has the server `UNLISTEN *`, so no notification committed meanwhile
    /// is lost and the server can go back to the pool.
    async fn move_listening(&mut self, listening: Vec<String>) -> Result<(), SessionError> {
        self.state.checks.remove(state::Check::Listening);
        let unlistens = std::mem::take(&mut self.state.unlistens);
        let timeout = self.app.config().general.server_reset_timeout;
        let max_frame = self.app.config().general.max_message_size as usize;
        let Some(checkout) = self.server.as_mut() else { return Ok(()) };
        // The hub listens on the server the LISTEN ran on: the primary, where routing sends it.
        let listen_pool = checkout.pool().clone();
        let conn = checkout.conn();
        if listening.is_empty() && self.inbox.is_none() {
            return Ok(());
        }
        let inbox = self
            .inbox
            .get_or_insert_with(|| Box::new(Inbox::new(self.app.notify.hub_for(&listen_pool, max_frame))));
        for channel in &unlistens {
            inbox.unlisten(channel.as_deref());
        }
        for channel in &listening {
            if !inbox.listen(channel, timeout).await {
                tracing::warn!(pool = %self.pool.name, channel, "the LISTEN connection did not confirm in time; notifications may be late or missed");
            }
        }
        if !listening.is_empty() {
            conn.run_internal(&["UNLISTEN *"], timeout).await?;
        }
        if inbox.channels().is_empty() {
            self.inbox = None;
        }
        Ok(())
    }

    /// [`Self::refresh_state_once`], run again once if a cancel interrupted it: a client's
    /// cancel that reaches the server just after its statement ended (two cancels sent at
    /// once, or one racing the statement's end) lands on pgvia's own read-back. Directly
    /// connected, that cancel would hit an idle backend and do nothing; it must not cost the
    /// client its connection here. The read-back only reads and re-applies, so it can repeat.
    async fn refresh_state(&mut self) -> Result<(), SessionError> {
        match self.refresh_state_once().await {
            Err(SessionError::Server(ServerError::Query { code, .. }))
                if code == SqlState::QUERY_CANCELED.code() =>
            {
                if let Some(checkout) = self.server.as_ref() {
                    checkout.conn_ref().cancels.settled(CANCEL_SETTLE).await;
                }
                tracing::debug!(pool = %self.pool.name, "a late cancel hit the session read-back; reading again");
                self.refresh_state_once().await
            }
            other => other,
        }
    }

    /// At the end of a transaction that may have changed the session: reads the settings and
    /// the pins back from the server (everything, after something whose effects its text does
    /// not show: a user function, a `DO` block, `EXECUTE`), restores startup settings a RESET
    /// took away, moves listened channels to the hub, and tells the client about parameters
    /// that changed on the way.
    async fn refresh_state_once(&mut self) -> Result<(), SessionError> {
        let timeout = self.app.config().general.server_reset_timeout;
        let everything = self.state.reach == state::Reach::Everything;
        if !everything && self.state.checks.contains(state::Check::Listening) {
            self.move_listens().await?;
        }
        let Some(checkout) = self.server.as_mut() else { return Ok(()) };
        let found =
            super::read_back::read_back(checkout.conn(), &mut self.state, &self.pool.key.user, timeout)
                .await?;
        for reason in found.added.reasons() {
            self.pool.stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(pool = %self.pool.name, reason = reason.as_str(), "a function or DO block pinned the client to its server until the effect ends");
        }
        if let Some(listening) = found.listening {
            if !listening.is_empty() || self.state.checks.contains(state::Check::Listening) {
                self.move_listening(listening).await?;
            }
        }
        self.tell_parameter_changes();
        Ok(())
    }
}
