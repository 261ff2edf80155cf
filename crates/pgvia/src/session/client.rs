//! A logged-in client: it gets a server at its first message and keeps it (session pooling)
//! until it leaves; what the client was told about server parameters is kept in step.

use std::sync::Arc;

use bytes::Buf;
use bytes::BytesMut;
use route::StatementKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use wire::backend::TransactionStatus;
use wire::frontend::FrontendMessage;
use wire::FrameDecoder;

use super::error::SessionError;
use super::relay::{self, Buffers, RelayEnd};
use super::settings;
use super::state::{self, SessionState};
use crate::app::{App, Phase};
use crate::cancel::CancelKey;
use crate::config::PoolMode;
use crate::net::ClientStream;
use crate::pool::{Checkout, Pool};
use crate::prepared::ClientStatements;
use crate::server::tracker::{Pending, Replies, Request};
use crate::server::ServerParams;
use crate::server::CANCEL_SETTLE;

/// A transaction-control statement pgvia answers itself while the client holds no server.
enum Local {
    /// A lone `BEGIN`/`START TRANSACTION`: the server is taken at the first real statement, so
    /// where that statement should run can still be chosen. Carries the command tag.
    Begin(&'static str),
    /// `COMMIT`/`ROLLBACK` of a transaction that never needed a server.
    End(&'static str),
}

/// Whether a simple query is a lone transaction-control statement that needs no server yet.
fn local_answer(analyzer: &route::Analyzer, sql: &str, begun: bool) -> Option<Local> {
    let analysis = analyzer.analyze(sql, &[]);
    if analysis.is_conservative() || analysis.len() != 1 {
        return None;
    }
    let statement = analysis.statement(0)?;
    let first_word = sql.get(statement.location())?.split_whitespace().next()?.to_ascii_uppercase();
    match (statement.kind(), begun) {
        (StatementKind::Begin(_), false) => {
            Some(Local::Begin(if first_word == "START" { "START TRANSACTION" } else { "BEGIN" }))
        }
        (StatementKind::Commit { chain: false }, true) => Some(Local::End("COMMIT")),
        (StatementKind::Rollback { chain: false }, true) => Some(Local::End("ROLLBACK")),
        _ => None,
    }
}

pub struct Session<'a> {
    pub app: &'a App,
    pub client: &'a mut ClientStream,
    pub pool: Arc<Pool>,
    /// Settings and pins: what follows the client from server to server.
    pub state: SessionState,
    pub cancel: CancelKey,
    /// The parameter values the client has been told (ParameterStatus).
    pub told: ServerParams,
    pub bufs: Buffers,
    pub decoder: FrameDecoder,
    pub shutdown: watch::Receiver<Phase>,
    pub server: Option<Checkout>,
    /// A `BEGIN` answered locally, to be sent ahead of the client's next statement.
    pub deferred_begin: Option<bytes::Bytes>,
    /// The client's prepared statements, when the pool follows them across servers.
    pub statements: Option<ClientStatements>,
}

impl Session<'_> {
    /// Serves the client until it leaves, fails, or shutdown ends it. The client's last
    /// message (why it was closed), if any, is left in `out`; the server is still held, for
    /// [`Session::release_server`].
    pub async fn run(&mut self, out: &mut BytesMut) {
        let end = self.serve().await;
        self.cancel.slot.set(None);
        match end {
            RelayEnd::ClientDone => {}
            RelayEnd::Error(e) => {
                tracing::info!(pool = %self.pool.name, error = %e, "closing client session");
                e.write_fatal(out);
            }
            RelayEnd::ServerLost { error, told_client } => {
                tracing::warn!(pool = %self.pool.name, error = %error, "server connection lost during a session");
                // When the server's own FATAL already reached the client, that is the last word.
                if !told_client {
                    SessionError::Server(error).write_fatal(out);
                }
            }
            RelayEnd::Shutdown => SessionError::Shutdown.write_fatal(out),
            // `serve` handles this itself and never returns it.
            RelayEnd::Quiescent => {}
        }
    }

    /// Gives the server back: reset and pooled if it can be made clean, closed otherwise.
    pub async fn release_server(&mut self) {
        let Some(checkout) = self.server.take() else { return };
        if checkout.conn_ref().broken {
            drop(checkout);
        } else {
            let general = &self.app.config().general;
            checkout.release(&general.server_reset_query, general.server_reset_timeout).await;
        }
    }

    async fn serve(&mut self) -> RelayEnd {
        let release_when_quiescent = self.pool.settings.pool_mode != PoolMode::Session;
        loop {
            if self.server.is_none() {
                if let Some(end) = self.wait_for_work().await {
                    return end;
                }
                if let Err(e) = self.assign().await {
                    return RelayEnd::Error(e);
                }
            }
            let Some(checkout) = self.server.as_mut() else { continue };
            let tracking = release_when_quiescent.then_some(relay::Tracking {
                analyzer: &self.app.analyzer,
                state: &mut self.state,
                pool: &self.pool,
                statements: self.statements.as_mut(),
            });
            let end = relay::relay(
                self.client,
                checkout.conn(),
                &mut self.bufs,
                &self.decoder,
                &mut self.shutdown,
                tracking,
            )
            .await;
            match end {
                RelayEnd::Quiescent => {
                    if let Err(e) = self.refresh_state().await {
                        return RelayEnd::Error(e);
                    }
                    if self.state.pins.is_empty() {
                        self.give_back_quiescent().await;
                    }
                }
                other => return other,
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

    /// Waits, holding no server, until the client has sent a whole message that needs one.
    /// Returns `Some` when the session ends instead.
    async fn wait_for_work(&mut self) -> Option<RelayEnd> {
        loop {
            match self.decoder.peek_len(&self.bufs.from_client) {
                Ok(Some(len)) => {
                    // Garbage must not cost a server: check the first message before asking
                    // the pool for one.
                    let frame = &self.bufs.from_client[..len];
                    let local = match (frame[0], FrontendMessage::parse_body(frame[0], &frame[5..])) {
                        (_, Err(e)) if frame[0] != wire::frontend::tag::COPY_DATA => {
                            return Some(RelayEnd::Error(e.into()))
                        }
                        (wire::frontend::tag::TERMINATE, _) => return Some(RelayEnd::ClientDone),
                        (_, Ok(FrontendMessage::Query { sql }))
                            if self.pool.settings.pool_mode != PoolMode::Session =>
                        {
                            local_answer(&self.app.analyzer, sql, self.deferred_begin.is_some())
                        }
                        _ => None,
                    };
                    if local.is_none() && self.answer_statement_command(len) {
                        continue;
                    }
                    let local = local?;
                    self.answer_locally(local, len);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Some(RelayEnd::Error(e.into())),
            }
            if *self.shutdown.borrow() != Phase::Running {
                return Some(RelayEnd::Shutdown);
            }
            relay::ensure_room(&mut self.bufs.from_client, relay::IDLE_READ);
            // Replies of the last transaction may still be on their way to the client.
            let (mut reader, mut writer) = tokio::io::split(&mut *self.client);
            tokio::select! {
                biased;
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return Some(RelayEnd::Shutdown);
                    }
                }
                r = reader.read_buf(&mut self.bufs.from_client) => match r {
                    Ok(0) | Err(_) => return Some(RelayEnd::ClientDone),
                    Ok(_) => {}
                },
                r = writer.write(&self.bufs.to_client), if !self.bufs.to_client.is_empty() => match r {
                    Ok(n) => {
                        self.bufs.to_client.advance(n);
                        if self.bufs.to_client.is_empty() && writer.flush().await.is_err() {
                            return Some(RelayEnd::ClientDone);
                        }
                    }
                    Err(_) => return Some(RelayEnd::ClientDone),
                },
            }
        }
    }

    /// Answers a transaction-control statement without a server (see [`local_answer`]).
    fn answer_locally(&mut self, local: Local, len: usize) {
        let frame = self.bufs.from_client.split_to(len);
        let (tag, status) = match local {
            Local::Begin(tag) => {
                self.deferred_begin = Some(frame.freeze());
                (tag, TransactionStatus::InTransaction)
            }
            Local::End(tag) => {
                self.deferred_begin = None;
                (tag, TransactionStatus::Idle)
            }
        };
        wire::build::command_complete(&mut self.bufs.to_client, tag);
        wire::build::ready_for_query(&mut self.bufs.to_client, status.as_byte());
    }

    /// Takes a server from the pool, brings it to the client's settings, tells the client
    /// about parameters that differ from what it was told, and points cancels at it.
    async fn assign(&mut self) -> Result<(), SessionError> {
        let mut checkout = self.pool.checkout().await?;
        let timeout = self.app.config().general.server_reset_timeout;
        let applied = settings::apply(checkout.conn(), &self.state.settings, timeout).await;
        let conn = checkout.conn();
        self.cancel.slot.set(Some(conn.cancel_target()));
        if let Some(begin) = self.deferred_begin.take() {
            // The client was told its BEGIN succeeded; the server hears it now, first, and
            // its reply is not passed on a second time.
            self.bufs.to_server.extend_from_slice(&begin);
            // Like any simple query, it replaces the server's unnamed statement.
            conn.statements.unnamed = None;
            conn.tracker.push(Pending {
                request: Request::Query,
                replies: Replies::DropAll,
                server_effect: None,
                client_effect: None,
            });
            conn.dirty = true;
        }
        self.server = Some(checkout);
        self.tell_parameter_changes();
        applied
    }

    /// Sends the client ParameterStatus for every reported parameter of its server that
    /// differs from what the client was last told.
    fn tell_parameter_changes(&mut self) {
        let Some(checkout) = self.server.as_ref() else { return };
        for (name, value) in &checkout.conn_ref().params {
            if self.told.get(name) != Some(value) {
                wire::build::parameter_status(&mut self.bufs.to_client, name, value);
                self.told.insert(name.clone(), value.clone());
            }
        }
    }

    /// At the end of a transaction that may have changed the session: reads the settings and
    /// the pins back from the server, restores startup settings a RESET took away, and tells
    /// the client about parameters that changed on the way.
    async fn refresh_state(&mut self) -> Result<(), SessionError> {
        let timeout = self.app.config().general.server_reset_timeout;
        let user = self.pool.key.user.clone();
        let Some(checkout) = self.server.as_mut() else { return Ok(()) };
        let conn = checkout.conn();
        if self.state.recheck_pins && !self.state.pins.is_empty() {
            let rows = conn.query_rows(&state::pin_check_query(&user), timeout).await?;
            let row = rows.first().ok_or(SessionError::ProtocolState("pin check returned no row"))?;
            let held: Vec<_> = state::pin_check_reasons()
                .into_iter()
                .zip(row.iter())
                .map(|(reason, v)| (reason, v.as_deref() == Some("t")))
                .collect();
            self.state.set_checked_pins(&held);
        }
        self.state.recheck_pins = false;
        if self.state.settings_changed {
            let rows = conn.query_rows(state::SESSION_SETTINGS_QUERY, timeout).await?;
            let reported = rows
                .into_iter()
                .filter_map(|r| match r.as_slice() {
                    [Some(name), Some(value)] => Some((name.clone(), value.clone())),
                    _ => None,
                })
                .collect();
            conn.applied = self.state.set_settings_from_server(reported).into_iter().collect();
            settings::apply(conn, &self.state.settings, timeout).await?;
        }
        self.tell_parameter_changes();
        Ok(())
    }
}
