//! One client connection from accept to close.
//!
//! `startup` handles the untagged phase (TLS, cancel), `login` authentication, `client` the
//! logged-in session (server assignment, settings), `relay` the bytes in between; this file
//! strings them together.

mod backpressure;
mod client;
mod client_scan;
mod deferred;
mod error;
mod exchange;
mod idle;
mod local;
mod login;
mod memo;
mod meter;
mod pipelined;
mod read_back;
mod relay;
mod retry;
mod server_scan;
mod settings;
mod sharded;
mod startup;
mod state;
mod statement_mode;
mod timeouts;
pub mod transport;
mod turns;
mod work;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use wire::backend::TransactionStatus;
use wire::sqlstate::SqlState;
use wire::startup::StartupMessage;
use wire::{build, FrameDecoder};

pub use error::SessionError;
use startup::Opening;

use crate::app::App;
use crate::clients::ClientIdentity;
use crate::config::{Config, PoolMode, RolePreference};
use crate::net::limits::PendingLogin;
use crate::net::{ClientPeer, ClientStream};
use crate::server::ServerParams;

/// How long the last write to a client that is being closed may take. Its socket's buffers
/// take a few frames at once; one that cannot is not reading, and gets nothing more.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// Serves one client connection to the end. Never panics on client input; logs why it ended.
/// `pending` is the connection's place among those logging in, given back once it has.
///
/// Not an `async fn`: the arguments of one stay in its future for the task's whole life (a
/// coroutine keeps room for them in every state), and this future is the task every idle
/// client keeps; they are boxed once here instead (issue 19, `docs/benchmarks.md`).
pub fn serve(
    app: Arc<App>,
    stream: ClientStream,
    peer: ClientPeer,
    pending: PendingLogin,
) -> impl std::future::Future<Output = ()> + Send {
    let local = match &stream {
        ClientStream::Plain(tcp) => {
            if !crate::net::stream::ACCEPTED_INHERIT_TUNING {
                crate::net::stream::tune(tcp);
            }
            tcp.local_addr().ok()
        }
        ClientStream::Unix(_) | ClientStream::Tls(_) | ClientStream::Memory(..) => None,
    };
    let accepted =
        Box::new(Accepted { stream, ends: Endpoints { peer, local }, pending, entry: Entry::Wire });
    async move {
        let _session = app.session_started();
        match run(&app, accepted).await {
            Ok(()) => tracing::debug!(%peer, "client session ended"),
            Err(SessionError::ClientIo(e)) => tracing::debug!(%peer, error = %e, "client connection closed"),
            Err(e) => tracing::info!(%peer, error = %e, "client refused"),
        }
    }
}

/// Serves a client whose credentials pgvia has already checked (the HTTP gateway, against
/// the same users and secrets): `startup` stands for the StartupMessage it would have sent,
/// and the session goes from there as for any client (AuthenticationOk, settings, pools,
/// routing), over `stream`, the session's end of an in-memory pipe.
pub fn serve_verified(
    app: Arc<App>,
    stream: ClientStream,
    peer: ClientPeer,
    startup: StartupMessage,
    pending: PendingLogin,
) -> impl std::future::Future<Output = ()> + Send {
    let entry = Entry::Verified(Box::new(startup));
    let accepted = Box::new(Accepted { stream, ends: Endpoints { peer, local: None }, pending, entry });
    async move {
        let _session = app.session_started();
        match run(&app, accepted).await {
            Ok(()) => tracing::debug!(%peer, "gateway session ended"),
            Err(e) => tracing::debug!(%peer, error = %e, "gateway session refused"),
        }
    }
}

/// How a client's session begins: from the first byte of the wire protocol, or already
/// authenticated by the gateway with its startup parameters given.
enum Entry {
    Wire,
    Verified(Box<StartupMessage>),
}

/// A connection as it was accepted, before its first byte is read.
struct Accepted {
    stream: ClientStream,
    ends: Endpoints,
    pending: PendingLogin,
    entry: Entry,
}

/// The two ends of a client's connection (`local` for TCP only).
#[derive(Debug, Clone, Copy)]
struct Endpoints {
    peer: ClientPeer,
    local: Option<SocketAddr>,
}

/// A client's connection once its StartupMessage is read. On the heap, so that the task's
/// future holds a pointer to it; the login's buffers are not here but in the login's own
/// future (`log_in_with_buffers`), so that a logged-in client does not keep them (issue 19).
type Conn = Box<ClientStream>;

/// The session's task, from the first byte to the close. The steps that are not the idle
/// wait (the opening, the login, the end) are futures of their own on the heap: inline, the
/// largest of them would size the task that an idle client keeps for its whole life.
async fn run(app: &App, accepted: Box<Accepted>) -> Result<(), SessionError> {
    // No large value here may live across more than one `.await`: the coroutine keeps such a
    // value in every one of its states, the idle wait's included. So each step's result is
    // taken apart in the statement that awaits it (the opening's, the login's and a kept
    // `Result` cost an idle client 460 bytes).
    // A refusal is answered and closed inside `open`: a value matched here and kept across
    // that close's `.await` made this coroutine 200 bytes larger (stable rustc 1.95).
    let Some((mut conn, start)) = Box::pin(open(app, accepted)).await? else {
        return Ok(());
    };
    let failed = {
        // A login failure is kept boxed (8 bytes) until the close.
        let (ready, failed) = match Box::pin(log_in_with_buffers(app, &mut conn, start)).await {
            Ok(ready) => (ready, None),
            Err(failed) => (None, Some(failed)),
        };
        if let Some(mut ready) = ready {
            // Used in place, not taken apart: locals would be a second copy here.
            let (reason, out) = ready.session.run().await;
            Box::pin(end_session(app, out, ready, reason)).await;
        }
        failed
    };
    let (result, out) = match failed {
        Some(failed) => {
            let (error, out) = *failed;
            (Err(error), out)
        }
        None => (Ok(()), BytesMut::new()),
    };
    Box::pin(close(&mut conn, out, result)).await
}

/// Reads the StartupMessage (after TLS, or a cancel request), within the login deadline.
/// `None` when there is nothing more to do (a cancel request, or the client left); a client
/// that broke the protocol is told why and closed here, and its error returned.
async fn open(app: &App, accepted: Box<Accepted>) -> Result<Option<(Conn, Start)>, SessionError> {
    let Accepted { stream: raw, ends, pending, entry } = *accepted;
    // One deadline from accept to the end of authentication (`limits.startup_timeout`), so a
    // client cannot stretch its login by taking each step slowly.
    let limit = app.config().limits.startup_timeout;
    let login = Login { deadline: tokio::time::Instant::now() + limit, limit, pending };
    let (opening, checked) = match entry {
        Entry::Wire => {
            let opening = tokio::time::timeout_at(login.deadline, startup::open(app, raw))
                .await
                .map_err(|_| SessionError::LoginTimeout(limit))??;
            (opening, Checked::No)
        }
        Entry::Verified(startup) => {
            (Some(Opening::Login { stream: raw, startup: *startup, buf: BytesMut::new() }), Checked::Yes)
        }
    };
    match opening {
        None | Some(Opening::Cancelled) => Ok(None),
        Some(Opening::Refused { mut stream, error }) => {
            close(&mut stream, BytesMut::new(), Err(error)).await.map(|()| None)
        }
        Some(Opening::Login { stream, startup, buf }) => {
            Ok(Some((Box::new(stream), Start { startup, buf, ends, login, checked })))
        }
    }
}

/// The end of a connection: the client hears why it was closed (a login failure), then the
/// socket is shut.
async fn close(
    stream: &mut ClientStream,
    mut out: BytesMut,
    result: Result<(), SessionError>,
) -> Result<(), SessionError> {
    if let Err(e) = &result {
        e.write_fatal(&mut out);
    }
    last_words(stream, &mut out).await;
    // A TLS close_notify is a write too, and a pipe's end tells the gateway. A plain socket is
    // not shut here: dropping it closes it with the same FIN, and a `shutdown` was one system
    // call more per login (last words that were sent have shut and drained it already).
    if matches!(stream, ClientStream::Tls(_) | ClientStream::Memory(..)) {
        let _ = tokio::time::timeout(LAST_WORDS, stream.shutdown()).await;
    }
    result
}

/// A connection that is logging in: when it must be done, and its place among those logging
/// in (`limits.max_pending_logins`).
struct Login {
    deadline: tokio::time::Instant,
    limit: Duration,
    pending: PendingLogin,
}

/// Whether the client's credentials were checked before its session began (by the gateway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    No,
    Yes,
}

/// What a session starts from once its StartupMessage is known.
struct Start {
    /// Owned, so that it is gone once the client is logged in (an idle client kept it).
    startup: StartupMessage,
    /// What the client sent after its StartupMessage and pgvia has not consumed yet.
    buf: BytesMut,
    ends: Endpoints,
    login: Login,
    checked: Checked,
}

/// A client logged in to a real database, with what its session needs to the end.
struct Ready<'a> {
    session: client::Session<'a>,
    handle: crate::clients::ClientHandle,
    /// Its places among the process's, the database's and the user's clients.
    _slots: [crate::app::ClientSlot<'a>; 3],
}

/// [`log_in`] with the login's two buffers (what the client sent, what goes to it) in its own
/// future, freed with it; a failure comes with what is left to send before the close.
async fn log_in_with_buffers<'a>(
    app: &'a App,
    stream: &'a mut ClientStream,
    mut start: Start,
) -> Result<Option<Box<Ready<'a>>>, Box<(SessionError, BytesMut)>> {
    let mut buf = std::mem::take(&mut start.buf);
    let mut out = BytesMut::with_capacity(512);
    let result = log_in(app, stream, &mut buf, &mut out, start).await;
    result.map_err(|e| Box::new((e, out)))
}

/// The login proper: authentication, limits, the welcome, the client's registration. An
/// admin console or sharded client is served here to the end (`None`); any other gets its
/// session back.
async fn log_in<'a>(
    app: &'a App,
    stream: &'a mut ClientStream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    start: Start,
) -> Result<Option<Box<Ready<'a>>>, SessionError> {
    let Start { startup, ends, login, checked, .. } = start;
    let since = std::time::Instant::now();
    let identity = login::identify(&startup)?;
    let protocol = login::negotiate(&startup, out);
    let application_name = startup.param("application_name").unwrap_or_default().to_owned();
    drop(startup);
    if checked == Checked::No {
        // Not boxed on its own: the whole of `log_in` is, for the login's duration only.
        let auth = login::authenticate(app, stream, buf, out, &identity.user);
        tokio::time::timeout_at(login.deadline, auth)
            .await
            .map_err(|_| SessionError::LoginTimeout(login.limit))??;
    }
    let config = app.config();
    // Counted once authenticated: a host that cannot log in holds a place among those
    // logging in (bounded per address), never one of max_client_connections.
    let client_slot = app.process_slot(config.user(&identity.user).is_some_and(|u| u.admin))?;
    let tls = stream.is_tls();
    let who = |admin| ClientIdentity {
        peer: ends.peer,
        local: ends.local,
        names: crate::clients::ClientNames::new(&identity.user, &identity.database, &application_name),
        tls,
        admin,
    };
    if Config::is_admin_database(&identity.database) {
        if !config.user(&identity.user).is_some_and(|u| u.admin) {
            return Err(SessionError::refused(
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                format!(
                    "user \"{}\" may not use the admin console (set admin = true on the user)",
                    identity.user
                ),
            ));
        }
        drop(login.pending);
        let handle = app.clients.register(who(true), since, None, || app.phase());
        let log = config.general.log_connections;
        drop(config);
        if log {
            tracing::info!(client = handle.info.id, addr = %ends.peer, user = %identity.user, database = %identity.database, "admin console client connected");
        }
        let result = crate::admin::serve(app, stream, buf, out, &handle.info).await;
        if log {
            let reason = match &result {
                Ok(why) => (*why).to_owned(),
                Err(e) => e.to_string(),
            };
            tracing::info!(client = handle.info.id, addr = %ends.peer, user = %identity.user, duration = ?since.elapsed(), %reason, "admin console client disconnected");
        }
        return result.map(|_| None).map_err(SessionError::from);
    }
    let Some(database) = config.database_for_client(&identity.database) else {
        return Err(SessionError::refused(
            SqlState::INVALID_CATALOG_NAME,
            format!("database \"{}\" does not exist", identity.database),
        ));
    };
    let Some(user) = config.user(&identity.user) else {
        // Authentication cannot succeed for an unknown user; this is belt and braces.
        return Err(SessionError::refused(SqlState::INVALID_PASSWORD, "authentication failed"));
    };
    let db_slot = app.database_slot(&database.name)?;
    let user_slot = app.user_client_slot(&user.name)?;
    // AuthenticationOk (after SASLFinal, still in `out`) goes out with the welcome below in one
    // write: a login is a handful of round trips, and each write is a send and a wake-up of the
    // client. Nothing the client does depends on seeing it earlier; a failure from here on
    // is appended after it, as before.
    build::authentication_ok(out);

    // A sharded database: a pool group per shard; the first shard's stands for the
    // database at login (parameters, settings check).
    let shard_groups = app.shard_groups(&database, user);
    let group = match shard_groups.first() {
        Some(g) => g.clone(),
        None => app.group_for(&database, user),
    };
    let pool = group.home();
    let fresh = pool.startup_params().await?;
    let report =
        settings::check_at_login(&pool, &identity.settings, config.general.server_reset_timeout).await?;
    // Session mode: the client owns one server for its whole life, so it takes it now and is
    // told that server's real pid (with pgvia's own secret, so cancels still come through
    // pgvia): pg_backend_pid(), the BackendKeyData pid, NOTIFY sender pids and terminating
    // its own backend behave as on a direct connection.
    // When every server is taken, the client logs in at once with a pid of pgvia's and waits
    // for a server at its first query, as before: a login never queues behind other sessions.
    let owned =
        if pool.settings.pool_mode == PoolMode::Session && group.is_single() && shard_groups.is_empty() {
            server_for_life(&pool, &identity.settings, config.general.server_reset_timeout).await?
        } else {
            None
        };
    let (told, cancel) = match &owned {
        Some(checkout) => {
            let conn = checkout.conn_ref();
            (
                Arc::new(conn.params.clone()),
                app.cancels.register_as(conn.cancel_target().process_id, protocol.cancel_key_len()),
            )
        }
        None => {
            (welcome_params(&pool, &fresh, &report.values), app.cancels.register(protocol.cancel_key_len()))
        }
    };
    // As PostgreSQL, which raises them while it applies the startup settings.
    for notice in &report.notices {
        out.extend_from_slice(notice);
    }
    for (name, value) in told.iter() {
        build::parameter_status(out, name, value);
    }
    build::backend_key_data(out, cancel.process_id, cancel.secret());
    build::ready_for_query(out, TransactionStatus::Idle.as_byte());
    send(stream, out).await?;
    drop(login.pending);
    // Logged in: what is left of the login's buffers would stay with an idle client for its
    // whole life. The session's own buffers grow when it sends or is sent something.
    *out = BytesMut::new();

    let handle = app.clients.register(who(false), since, Some(cancel.slot.clone()), || app.phase());
    let info = handle.info.clone();
    let patron: crate::pool::PatronRef = info.clone();
    let mut owned = owned;
    if let Some(checkout) = &mut owned {
        cancel.slot.set(Some(checkout.conn_ref().cancel_target()));
        checkout.attach(patron.clone());
    }
    if config.general.log_connections {
        tracing::info!(client = info.id, addr = %ends.peer, user = %identity.user, database = %identity.database, "client connected");
    }
    if !shard_groups.is_empty() {
        let rules = match database.sharding_rules(0) {
            Ok(Some(rules)) => rules,
            _ => {
                return Err(SessionError::refused(
                    SqlState::CONFIG_FILE_ERROR,
                    format!("database \"{}\" has invalid sharding rules", database.name),
                ))
            }
        };
        let from_client = std::mem::take(buf);
        // A sharded session is boxed: inline, its state would size every client's task.
        let mut session = Box::new(sharded::ShardedSession::new(
            app,
            stream,
            pool,
            rules,
            shard_groups,
            cancel,
            FrameDecoder::new(config.general.max_message_size as usize),
            info.phase_watch(),
            patron,
            identity.settings.clone(),
            from_client,
        ));
        drop(config);
        let reason = session.run(out).await;
        let pool = session.pool.clone();
        last_words(session.client, out).await;
        handle.leave(&pool.totals);
        if app.config().general.log_connections {
            tracing::info!(client = info.id, addr = %ends.peer, user = %identity.user, database = %identity.database, duration = ?since.elapsed(), reason = %reason, "client disconnected");
        }
        return Ok(None);
    }
    // Built in a block: the parts moved into the session are then not kept a second time
    // in this function's future, which every idle client carries.
    let session = {
        // An idle client holds no buffers (work.rs): they are taken at its first request,
        // now if it already sent more than its login (pipelined after it).
        let terms = work::Terms::of(&config);
        let work = if buf.is_empty() {
            *buf = BytesMut::new();
            work::Work::new(terms)
        } else {
            let mut parts = work::Parts::take(app, &info, terms);
            parts.bufs.from_client = std::mem::take(buf);
            work::Work::with(parts, terms)
        };
        let timers = timeouts::Timers::new(&pool.settings);
        let statements = pool.client_statements();
        client::Session {
            app,
            client: stream,
            pool,
            group,
            role: user.default_role.unwrap_or(RolePreference::Auto),
            primary_until: None,
            routed: client::Routed::Unrouted,
            state: state::SessionState {
                statements_followed: statements.is_some(),
                ..state::SessionState::new(identity.settings.clone())
            },
            cancel,
            told,
            work,
            decoder: FrameDecoder::new(config.general.max_message_size as usize),
            shutdown: info.phase_watch(),
            server: owned.map(Box::new),
            deferred_begin: None,
            timers,
            discard: client::Discard::Nothing,
            inbox: None,
            // Made at the first request (`client::statements!`).
            statements: None,
        }
    };
    drop(config);
    // Boxed: moved as a whole, it would be kept twice in the caller's future (the result of
    // this one and the argument of the next).
    Ok(Some(Box::new(Ready { session, handle, _slots: [client_slot, db_slot, user_slot] })))
}

/// The end of a logged-in client's session, once `reason` (why it ended) is known.
async fn end_session(app: &App, mut out: BytesMut, mut ready: Box<Ready<'_>>, reason: String) {
    let session = &mut ready.session;
    // The server is reset (or closed) while the client hears why it was closed, not after:
    // a client that stopped reading must not keep the server, its locks and its pool slot,
    // and the client need not wait for the reset's round trips.
    let (checkout, unsent) = session.take_server();
    // Boxed like the login: the reset's state would otherwise size every idle client's task.
    Box::pin(async {
        tokio::join!(client::release(app, checkout, &unsent), last_words(session.client, &mut out))
    })
    .await;
    let Ready { session, handle, _slots } = *ready;
    let info = handle.info.clone();
    handle.leave(&session.pool.totals);
    if app.config().general.log_connections {
        // Who it was, from its registry entry (a copy in `Ready` would be kept while idle).
        let who = &info.who;
        tracing::info!(
            client = info.id,
            addr = %who.peer,
            user = %who.user(),
            database = %who.database(),
            duration = ?info.since.elapsed(),
            reason = %reason,
            "client disconnected"
        );
    }
}

/// Finishes the in-doubt cross-shard transactions of every sharded database at start, then
/// every [`sharded::two_phase::RECOVERY_INTERVAL`] (see `sharded/two_phase.rs`), and installs
/// `pgvia.unique_id()` on each shard that does not have it from this run yet
/// (`sharded/unique_id.rs`). Logs in as each database's health-check user.
pub async fn recover_shards(app: std::sync::Weak<App>, port: u16) {
    let instance = match app.upgrade() {
        Some(app) => app.config().general.instance_id.clone().unwrap_or_else(|| {
            let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
            format!("{host}{port}")
        }),
        None => return,
    };
    sharded::two_phase::init(&instance);
    // Shards that have `pgvia.unique_id()` from this run, per database.
    let mut ids_installed: std::collections::HashMap<String, Vec<bool>> = std::collections::HashMap::new();
    loop {
        let Some(app) = app.upgrade() else { return };
        let config = app.config();
        let timeout = config.general.server_reset_timeout;
        let work: Vec<_> = config
            .databases
            .iter()
            .filter(|db| db.is_sharded())
            .filter_map(|db| {
                let user =
                    db.routing(&config.users).health_check_user.and_then(|u| config.user(&u).cloned())?;
                Some((db.name.clone(), app.shard_groups(db, &user)))
            })
            .collect();
        drop(config);
        for (name, groups) in work {
            match sharded::two_phase::recover(&groups, timeout).await {
                Ok(done) if done != Default::default() => {
                    tracing::info!(database = %name, committed = done.committed, rolled_back = done.rolled_back, left_to_others = done.left, failed = done.failed, "cross-shard recovery")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(database = %name, error = %e, "cross-shard recovery failed; retrying later")
                }
            }
            // After recovery, which creates the decision log the first commits need.
            let done = ids_installed.entry(name.clone()).or_default();
            sharded::unique_id::install(&name, &groups, done, timeout).await;
        }
        drop(app);
        tokio::time::sleep(sharded::two_phase::RECOVERY_INTERVAL).await;
    }
}

/// A session-mode client's server, taken at login if the pool has room for it now and
/// brought to the client's startup settings.
async fn server_for_life(
    pool: &Arc<crate::pool::Pool>,
    settings: &[(String, String)],
    timeout: Duration,
) -> Result<Option<crate::pool::Checkout>, SessionError> {
    let Some(checkout) = pool.try_checkout().await else { return Ok(None) };
    let mut checkout = checkout?;
    settings::apply(checkout.conn(), settings, timeout).await?;
    Ok(Some(checkout))
}

/// Sends the client's last message (why it is closed), if any, giving up after
/// [`LAST_WORDS`]: a client that does not read must not hold its session open.
///
/// Then the connection is closed as a lingering close: our side is shut (FIN) and whatever
/// the client still sends is read and dropped until it closes too, for at most
/// [`LAST_WORDS`]. Closing a socket with unread input makes the kernel send a reset, and a
/// peer that gets the reset before it has read the FATAL loses it (a TCP proxy in front of
/// pgvia then hands its client a bare close): a client that sent its next query just as
/// pgvia ended the session must still hear why.
async fn last_words(stream: &mut ClientStream, out: &mut BytesMut) {
    if out.is_empty() {
        return;
    }
    if !matches!(tokio::time::timeout(LAST_WORDS, send(stream, out)).await, Ok(Ok(()))) {
        // Not read: there is nothing left for the client to lose.
        return;
    }
    let _ = tokio::time::timeout(LAST_WORDS, stream.shutdown()).await;
    stream.drain_until_closed(LAST_WORDS).await;
}

/// Writes and flushes everything in `out` (TLS may otherwise keep the tail), then clears it.
async fn send(stream: &mut ClientStream, out: &mut BytesMut) -> std::io::Result<()> {
    stream.write_all(out).await?;
    stream.flush().await?;
    out.clear();
    Ok(())
}

/// What to report at login: a fresh server's parameters, with the client's own startup
/// settings in place of the defaults, as the server shows them (see
/// [`settings::check_at_login`]). A server given later that reports otherwise sends a
/// correcting ParameterStatus, as PostgreSQL may at any time.
///
/// Clients share the map rather than hold a copy each (some fifty allocations, about 3 KiB an
/// idle client): the pool's own when their settings change none of the reported values, else
/// one the pool keeps for clients told the same (`Pool::shared_params`). A later change
/// copies it then (`Arc::make_mut`).
fn welcome_params(
    pool: &crate::pool::Pool,
    server: &Arc<ServerParams>,
    settings: &[(String, String)],
) -> Arc<ServerParams> {
    let differs = |(name, value): &(String, String)| {
        server.iter().any(|(k, v)| k.eq_ignore_ascii_case(name) && v != value)
    };
    if !settings.iter().any(differs) {
        return server.clone();
    }
    let mut told = ServerParams::clone(server);
    for (name, value) in settings {
        if let Some((_, v)) = told.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
            v.clone_from(value);
        }
    }
    pool.shared_params(told)
}
