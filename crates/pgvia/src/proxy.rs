//! The accept loop and the shutdown sequence.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::app::{App, AppError, Phase};
use crate::config::{Config, ThreadLayout};
use crate::cores::{Cores, Stage};
use crate::net::listener::UnixSocket;
use crate::net::{ClientPeer, ClientStream};

/// Clients on the Unix socket have no address: for the per-address login limits they all count
/// as this one (`0.0.0.0`, which no TCP client can come from).
const UNIX_CLIENTS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
    #[error("cannot start the client threads: {0}")]
    Threads(std::io::Error),
}

/// A bound, not yet running proxy. Binding first lets callers (tests, the binary) learn the
/// address before serving.
pub struct Proxy {
    app: Arc<App>,
    listener: TcpListener,
    /// The other client threads (`thread_layout = "per_core"`), accepting on the same port.
    cores: Cores,
    /// Ends (every sender dropped) once each of those threads has closed its listener.
    listeners_closed: mpsc::Receiver<()>,
    /// `/metrics` and `/health`, when `general.metrics_listen` is set.
    metrics: Option<TcpListener>,
    /// The Unix socket, when `general.unix_socket_dir` is set.
    unix: Option<UnixSocket>,
    /// `POST /sql` and WebSocket, when `gateway.listen` is set.
    gateway: Option<(TcpListener, Arc<crate::gateway::Gateway>)>,
}

/// How long sessions get to send their last words after `shutdown_timeout` has passed.
const FINAL_GRACE: Duration = Duration::from_secs(2);

impl Proxy {
    pub async fn bind(config: Config) -> Result<Self, ProxyError> {
        let host = config.general.listen_addr.clone();
        let port = config.general.listen_port;
        let metrics_addr = config.general.metrics_listen.clone();
        let app = App::new(config)?;
        // Before any merge can spill: what pgvia processes that are gone left behind.
        app.spill.clean_at_start(&app.config().limits);
        // Health checks start now, not at the first client: roles and lag are known by then.
        app.all_hosts();
        let threads = crate::app::thread_count(&app.config());
        let bind_error = |source| ProxyError::Bind { addr: format!("{host}:{port}"), source };
        let (listener_open, listeners_closed) = mpsc::channel::<()>(1);
        let (listener, cores) = match app.config().general.thread_layout {
            ThreadLayout::PerCore if threads > 1 => {
                let mut group =
                    crate::net::listener::bind_group(&host, port, threads).await.map_err(bind_error)?;
                let first = TcpListener::from_std(group.remove(0)).map_err(bind_error)?;
                let work = group
                    .into_iter()
                    .map(|l| {
                        let app = app.clone();
                        let open = listener_open.clone();
                        move |stage| accept_on_core(app, l, stage, open)
                    })
                    .collect();
                let cores = Cores::start(work, crate::app::worker_stack_size(&app.config()))
                    .map_err(ProxyError::Threads)?;
                (first, cores)
            }
            _ => {
                let l = crate::net::listener::bind(&host, port).await.map_err(bind_error)?;
                (l, Cores::none())
            }
        };
        // Named after the port actually bound (a test's port 0 becomes a real one).
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let unix = match &app.config().general.unix_socket_dir {
            Some(dir) => Some(crate::net::listener::bind_unix(dir, port).map_err(|source| {
                ProxyError::Bind { addr: format!("{}/.s.PGSQL.{port}", dir.display()), source }
            })?),
            None => None,
        };
        let metrics = match metrics_addr {
            Some(addr) => Some(
                TcpListener::bind(addr.as_str()).await.map_err(|source| ProxyError::Bind { addr, source })?,
            ),
            None => None,
        };
        let gateway = match app.config().gateway.listen.clone() {
            Some(addr) => {
                let l = TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|source| ProxyError::Bind { addr, source })?;
                Some((l, crate::gateway::Gateway::new(app.clone())?))
            }
            None => None,
        };
        drop(listener_open);
        Ok(Self { app, listener, cores, listeners_closed, metrics, unix, gateway })
    }

    /// Where the HTTP gateway is served, if it is.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The Unix socket file, if pgvia listens on one.
    pub fn unix_socket_path(&self) -> Option<&std::path::Path> {
        self.unix.as_ref().map(|u| u.path.as_path())
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Serves until `stop` completes, then shuts down gracefully: new connections are refused
    /// at once, sessions finish their transactions for up to `shutdown_timeout`, and whoever
    /// is left is told 57P01 and closed.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let Proxy { app, listener, cores, mut listeners_closed, metrics, unix, gateway } = self;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(app.config().general.listen_port);
        tokio::pin!(stop);
        let sampler = tokio::spawn(sample_stats(Arc::downgrade(&app)));
        let fallback_sweeper = tokio::spawn(retire_idle_fallback_pools(Arc::downgrade(&app)));
        let shard_recovery = tokio::spawn(crate::session::recover_shards(Arc::downgrade(&app), port));
        let on_demand_sweeper = tokio::spawn(crate::auth_query::pools::retire_idle(Arc::downgrade(&app)));
        let metrics = metrics.map(|l| tokio::spawn(crate::metrics::serve(l, app.clone())));
        let gateway = gateway.map(|(l, gw)| tokio::spawn(crate::gateway::serve(l, gw)));
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = app.shutdown_requested.notified() => break,
                accepted = listener.accept() => admit_tcp(&app, accepted).await,
                accepted = accept_unix(unix.as_ref()) => match accepted {
                    Ok(stream) => admit(&app, ClientStream::Unix(stream), ClientPeer::Unix { port }, UNIX_CLIENTS),
                    Err(e) => {
                        // Running out of file descriptors must not end the process; back off.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        drop(listener);
        cores.drain();
        // The other threads close their listeners when they next run: wait, so that nobody is
        // told 57P01 while the port still takes new connections on one of them.
        let _ = tokio::time::timeout(Duration::from_secs(1), listeners_closed.recv()).await;
        drop(unix);
        // The gateway takes no new requests either; its sessions drain with the others.
        if let Some(g) = gateway {
            g.abort();
        }
        let timeout = app.config().general.shutdown_timeout;
        tracing::info!(
            sessions = app.active_sessions(),
            ?timeout,
            "shutting down: no new connections; waiting for transactions to finish"
        );
        app.set_phase(Phase::Draining);
        if tokio::time::timeout(timeout, app.sessions_finished()).await.is_err() {
            tracing::warn!(
                sessions = app.active_sessions(),
                "shutdown_timeout reached; closing remaining sessions"
            );
            app.set_phase(Phase::Terminating);
            let _ = tokio::time::timeout(FINAL_GRACE, app.sessions_finished()).await;
        }
        app.pools.close_all();
        sampler.abort();
        fallback_sweeper.abort();
        shard_recovery.abort();
        on_demand_sweeper.abort();
        if let Some(m) = metrics {
            m.abort();
        }
        app.notify.close_all();
        cores.exit().await;
        tracing::info!("pgvia stopped");
    }
}

/// Another client thread's accept loop, until shutdown.
async fn accept_on_core(
    app: Arc<App>,
    listener: std::net::TcpListener,
    mut stage: tokio::sync::watch::Receiver<Stage>,
    // Held until the listener is dropped (locals go before parameters), which `run` waits for.
    _open: mpsc::Sender<()>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            // Dropping it takes it out of the port's group: the other threads get its clients.
            tracing::error!(thread = crate::cores::current(), error = %e, "a client thread cannot accept; the others serve the port");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = stage.wait_for(|s| *s != Stage::Serve) => return,
            accepted = listener.accept() => admit_tcp(&app, accepted).await,
        }
    }
}

async fn admit_tcp(app: &Arc<App>, accepted: std::io::Result<(tokio::net::TcpStream, SocketAddr)>) {
    match accepted {
        Ok((tcp, peer)) => admit(app, ClientStream::Plain(tcp), ClientPeer::Tcp(peer), peer.ip()),
        Err(e) => {
            // Running out of file descriptors must not end the process; back off.
            tracing::warn!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Starts a session for a new connection, or closes it at once with 53300 when too many
/// connections are logging in (in all, or from its address). The refusal is written without
/// waiting (a fresh socket's send buffer takes it whole) and logged at most once a second,
/// with a count, so a flood costs neither a task per connection nor a log line each.
fn admit(app: &Arc<App>, stream: ClientStream, peer: ClientPeer, address: IpAddr) {
    let admitted = app.admission.admit(address, &app.config().limits);
    match admitted {
        Ok(pending) => {
            tokio::spawn(crate::session::serve(app.clone(), stream, peer, pending));
        }
        Err(refusal) => {
            let mut out = bytes::BytesMut::new();
            let message = refusal.message();
            wire::build::ErrorFields::with_code(
                wire::build::Severity::Fatal,
                refusal.sqlstate().code(),
                &message,
            )
            .write(&mut out);
            let _ = match &stream {
                ClientStream::Plain(tcp) => tcp.try_write(&out),
                ClientStream::Unix(unix) => unix.try_write(&out),
                ClientStream::Tls(_) | ClientStream::Memory(..) => Ok(0),
            };
            if let Some(count) = app.admission.note_refusal(refusal) {
                tracing::warn!(%peer, refused = count, reason = %message, "connections refused before login");
            }
        }
    }
}

/// The next client on the Unix socket; never, without one.
async fn accept_unix(unix: Option<&UnixSocket>) -> std::io::Result<tokio::net::UnixStream> {
    match unix {
        Some(u) => u.listener.accept().await.map(|(s, _)| s),
        None => std::future::pending().await,
    }
}

/// Closes the pools of `*`-entry databases no client has used for `fallback_idle_timeout`,
/// checking a few times per timeout (at most every 30 s, at least every 100 ms).
async fn retire_idle_fallback_pools(app: std::sync::Weak<App>) {
    let mut idle_since = std::collections::HashMap::new();
    loop {
        let Some(period) = app.upgrade().map(|a| a.config().general.fallback_idle_timeout / 4) else {
            return;
        };
        tokio::time::sleep(period.clamp(Duration::from_millis(100), Duration::from_secs(30))).await;
        let Some(app) = app.upgrade() else { return };
        // Pools retired here or by a reload release their users' SCRAM ClientKeys.
        app.client_keys.sweep();
        for name in app.retire_idle_fallback_pools(&mut idle_since, std::time::Instant::now()) {
            tracing::info!(database = %name, "closed the pools of a database reached through \"*\": unused for fallback_idle_timeout");
        }
    }
}

/// Records per-database totals every stats period, for `SHOW STATS_AVERAGES`.
async fn sample_stats(app: std::sync::Weak<App>) {
    let mut tick = tokio::time::interval(crate::stats::STATS_PERIOD);
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else { return };
        let totals = crate::admin::census::Census::take(&app).by_database();
        app.stats_history.push(totals);
    }
}
