//! `COPY ... FROM STDIN` on a sharded database: the COPY starts on every shard the rows may
//! go to, the client's data is cut into rows (`sharding::copy`) and each row streamed to its
//! own shard as it arrives; nothing is buffered beyond a row and a flush's worth per shard.
//! Like any write on several shards, it commits on all of them or none. Into a table on every
//! shard (omnisharded), every row goes to every shard.

use bytes::{Bytes, BytesMut};
use shard::ShardSet;
use wire::frontend::tag as fe;
use wire::sqlstate::SqlState;

use super::fanout::Combine;
use super::ShardedSession;
use crate::config::TableRule;
use crate::session::error::SessionError;
use crate::sharding::copy::{self, CopyError, KeyPlace, Splitter};

/// A shard's rows are sent once this much is waiting.
const SHARD_FLUSH: usize = 64 * 1024;

impl ShardedSession<'_> {
    /// Runs a `COPY ... FROM STDIN` into a table that is not sharded by key, on `targets`
    /// (every shard for an omnisharded table, with `Combine::Replicated`; its shard for a
    /// table of a sharded schema): every row goes to each of them as the client sent it.
    /// `payload` is the client's Query, or (`extended`) its batch up to the Sync, with
    /// `parse_drops` for its Parses.
    pub(super) async fn copy_in_whole(
        &mut self,
        payload: &[u8],
        parse_drops: &[bool],
        targets: ShardSet,
        combine: Combine,
        extended: bool,
    ) -> Result<(), SessionError> {
        for shard in targets.iter() {
            if let Err(e) = self.ensure_server(shard, true).await {
                self.shard_failed(shard, &e).await;
                return Ok(());
            }
        }
        let implicit = matches!(self.tx, super::Tx::Idle) && targets.len() > 1;
        self.aim_cancels(targets);
        let mut flight = match self
            .launch(targets, super::io::Payload::Same(payload), combine, parse_drops, implicit)
            .await
        {
            Ok(f) => f,
            Err(e) => {
                self.shard_failed(targets.first().unwrap_or(0), &e).await;
                return Ok(());
            }
        };
        if let Err(e) = self.pump(&mut flight, true).await {
            self.shard_failed(targets.first().unwrap_or(0), &e).await;
            return Ok(());
        }
        if flight.fan.copy_in_started() {
            self.flush_client().await?;
            if let Err(e) = self.stream_whole(&flight.lanes, extended).await {
                match e {
                    StreamEnd::Client(e) => return Err(e),
                    StreamEnd::Server(e) => {
                        self.shard_failed(targets.first().unwrap_or(0), &e).await;
                        return Ok(());
                    }
                }
            }
            if let Err(e) = self.pump(&mut flight, false).await {
                self.shard_failed(targets.first().unwrap_or(0), &e).await;
                return Ok(());
            }
        }
        match flight.outcome() {
            Ok(outcome) => self.finish_exchange(targets, true, implicit, &outcome).await,
            Err(e) => self.shard_failed(targets.first().unwrap_or(0), &e).await,
        }
        Ok(())
    }

    /// Sends the client's COPY data, as it comes, to every one of `lanes`' shards, up to its
    /// CopyDone or CopyFail; in the extended protocol, up to the Sync after it (the servers
    /// ignored the batch's own Sync during the COPY, as PostgreSQL does, and answer this one).
    async fn stream_whole(&mut self, lanes: &[usize], extended: bool) -> Result<(), StreamEnd> {
        let mut copying = true;
        loop {
            let frame = self.next_client_frame().await.map_err(StreamEnd::Client)?;
            let end = match frame.first().copied() {
                Some(fe::COPY_DATA) if copying => false,
                Some(fe::COPY_DONE | fe::COPY_FAIL) if copying => !extended,
                Some(fe::SYNC) if !copying => true,
                // Flush and Sync mean nothing inside COPY, as with PostgreSQL.
                Some(fe::FLUSH | fe::SYNC) => continue,
                Some(_) if !copying => {
                    // The next exchange: the COPY's ends here, as at a Sync.
                    let mut rest = BytesMut::from(&frame[..]);
                    rest.extend_from_slice(&self.from_client);
                    self.from_client = rest;
                    let mut sync = BytesMut::new();
                    wire::build::sync(&mut sync);
                    for &shard in lanes {
                        self.send_to(shard, &sync).await.map_err(StreamEnd::Server)?;
                    }
                    return Ok(());
                }
                _ => {
                    let mut fail = BytesMut::new();
                    wire::build::frame(&mut fail, fe::COPY_FAIL, |b| {
                        wire::build::put_cstr(b, b"unexpected message during COPY")
                    });
                    for &shard in lanes {
                        self.send_to(shard, &fail).await.map_err(StreamEnd::Server)?;
                    }
                    return Ok(());
                }
            };
            for &shard in lanes {
                self.send_to(shard, &frame).await.map_err(StreamEnd::Server)?;
            }
            if end {
                return Ok(());
            }
            copying &= !matches!(frame.first().copied(), Some(fe::COPY_DONE | fe::COPY_FAIL));
        }
    }

    /// Whether `analysis` is one `COPY ... FROM STDIN`: `Some(true)` into a table sharded by
    /// key (its rows are split, `copy_in`), `Some(false)` into one that is not (every row to
    /// each of its shards, `copy_in_whole`).
    pub(super) fn copy_from_stdin(&self, analysis: &route::Analysis) -> Option<bool> {
        let statement = analysis.statement(0).filter(|_| analysis.len() == 1)?;
        if statement.kind()
            != (route::StatementKind::Copy { direction: route::CopyDirection::From, stdio: true })
        {
            return None;
        }
        let keyed = statement.tables().next().is_some_and(|t| self.rules.table(t.schema, t.name).is_some());
        Some(keyed)
    }

    /// `COPY ... FROM STDIN` into a table sharded by key through the extended protocol, as a
    /// driver sends it once the statement is prepared (Bind, Describe of its portal, Execute,
    /// Sync: tokio-postgres's `copy_in`): those messages are answered as PostgreSQL answers
    /// them, then the rows are split by key exactly as for a simple query, whose
    /// CommandComplete and ReadyForQuery end both. A batch that also parses or runs other
    /// statements is refused.
    pub(super) async fn copy_in_extended(
        &mut self,
        frames: &[Bytes],
        analysis: &route::Analysis,
        sql: &[u8],
    ) -> Result<(), SessionError> {
        let bound_alone = frames.iter().filter(|f| f[0] == fe::BIND).count() == 1
            && frames.iter().all(|f| match f[0] {
                fe::BIND | fe::EXECUTE | fe::SYNC => true,
                fe::DESCRIBE => f.get(5) == Some(&b'P'),
                _ => false,
            });
        if !bound_alone {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "COPY FROM STDIN into a sharded table through the extended protocol must be bound and run in a batch of its own (Bind, Execute, Sync), or sent as a simple query",
            );
            return Ok(());
        }
        for f in frames {
            match f[0] {
                fe::BIND => wire::build::frame(&mut self.to_client, b'2', |_| {}),
                // A COPY's portal returns no rows.
                fe::DESCRIBE => wire::build::frame(&mut self.to_client, b'n', |_| {}),
                _ => {}
            }
        }
        let mut query = BytesMut::new();
        wire::build::frame(&mut query, fe::QUERY, |b| wire::build::put_cstr(b, sql));
        self.copy_in_began = false;
        let quiet = std::mem::replace(&mut self.quiet, true);
        let handled = self.control(analysis, &query.freeze()).await;
        self.quiet = quiet;
        if !handled? {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "this COPY FROM STDIN cannot be split by key",
            );
            return Ok(());
        }
        if !self.copy_in_began {
            // Refused or failed before its data: the Sync sent with the Execute is answered.
            self.ready();
        }
        // Else that Sync was ignored during the COPY, as PostgreSQL ignores it; the client's
        // Sync after its CopyDone comes as a batch of its own and gets the ReadyForQuery.
        Ok(())
    }

    /// Runs a `COPY ... FROM STDIN` into `rule`'s table (`table` as the statement names it).
    pub(super) async fn copy_in(
        &mut self,
        frame: Bytes,
        rule: TableRule,
        table: String,
    ) -> Result<(), SessionError> {
        let sql = String::from_utf8_lossy(frame.get(5..frame.len().saturating_sub(1)).unwrap_or_default())
            .into_owned();
        let options = match copy::options(&sql) {
            Ok(o) => o,
            Err(e) => {
                self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &e.to_string());
                return Ok(());
            }
        };
        let targets = ShardSet::all(self.groups.len());
        for shard in targets.iter() {
            if let Err(e) = self.ensure_server(shard, true).await {
                self.shard_failed(shard, &e).await;
                return Ok(());
            }
        }
        let index = match self.key_index(&options.columns, &rule, &table).await {
            Ok(Some(i)) => i,
            Ok(None) => {
                self.refuse(
                    SqlState::FEATURE_NOT_SUPPORTED.code(),
                    &format!("COPY into {table} must include the sharding key column {}", rule.column),
                );
                self.after_refusal().await;
                return Ok(());
            }
            Err(e) => {
                self.shard_failed(0, &e).await;
                return Ok(());
            }
        };
        let implicit = matches!(self.tx, super::Tx::Idle);
        self.aim_cancels(targets);
        let mut flight = match self
            .launch(targets, super::io::Payload::Same(&frame), Combine::Concat, &[], implicit)
            .await
        {
            Ok(f) => f,
            Err(e) => {
                self.shard_failed(0, &e).await;
                return Ok(());
            }
        };
        if let Err(e) = self.pump(&mut flight, true).await {
            self.shard_failed(0, &e).await;
            return Ok(());
        }
        self.copy_in_began = flight.fan.copy_in_started();
        if self.copy_in_began {
            // The client was told to send its data (the merged CopyInResponse).
            self.flush_client().await?;
            let key = KeyPlace { index, key_type: rule.key_type, function: &rule.function };
            if let Err(e) = self.stream_rows(&flight.lanes, options, &key).await {
                match e {
                    StreamEnd::Client(e) => return Err(e),
                    StreamEnd::Server(e) => {
                        self.shard_failed(0, &e).await;
                        return Ok(());
                    }
                }
            }
            if let Err(e) = self.pump(&mut flight, false).await {
                self.shard_failed(0, &e).await;
                return Ok(());
            }
        }
        match flight.outcome() {
            Ok(outcome) => self.finish_exchange(targets, true, implicit, &outcome).await,
            Err(e) => self.shard_failed(0, &e).await,
        }
        Ok(())
    }

    /// After a refusal with servers taken and no transaction: they go back.
    async fn after_refusal(&mut self) {
        if matches!(self.tx, super::Tx::Idle) {
            self.give_back_all().await;
        }
    }

    /// The key column's position in the COPY's rows: in its column list, else in the table's
    /// columns as the first shard's catalog has them.
    async fn key_index(
        &mut self,
        columns: &[String],
        rule: &TableRule,
        table: &str,
    ) -> Result<Option<usize>, crate::server::ServerError> {
        if !columns.is_empty() {
            return Ok(columns.iter().position(|c| *c == rule.column));
        }
        let timeout = self.app.config().general.server_reset_timeout;
        let Some(c) = self.held.iter_mut().flatten().next() else { return Ok(None) };
        // The shared quoting: doubled quotes alone would let a backslash in the name end the
        // literal under standard_conforming_strings = off, which clients may set.
        let literal = crate::sharding::key_move::quote_literal(table);
        let sql = format!(
            "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {literal}::pg_catalog.regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        );
        let rows = c.conn().query_rows(&sql, timeout).await?;
        Ok(rows.iter().position(|r| r.first().and_then(|v| v.as_deref()) == Some(rule.column.as_str())))
    }

    /// Reads the client's COPY data up to its CopyDone or CopyFail, sending each row to its
    /// shard; ends the COPY on every lane.
    async fn stream_rows(
        &mut self,
        lanes: &[usize],
        options: copy::CopyOptions,
        key: &KeyPlace<'_>,
    ) -> Result<(), StreamEnd> {
        let shards = self.groups.len();
        let mut splitter = Splitter::new(options);
        let mut out: Vec<BytesMut> = (0..shards).map(|_| BytesMut::new()).collect();
        let mut failure: Option<CopyError> = None;
        loop {
            let frame = self.next_client_frame().await.map_err(StreamEnd::Client)?;
            match frame.first().copied() {
                Some(fe::COPY_DATA) if failure.is_none() => {
                    if let Err(e) = splitter.push(&frame[5..], key, &mut out) {
                        failure = Some(e);
                        continue;
                    }
                    for &shard in lanes {
                        if out[shard].len() >= SHARD_FLUSH {
                            self.send_rows(shard, &mut out[shard]).await.map_err(StreamEnd::Server)?;
                        }
                    }
                }
                Some(fe::COPY_DATA) => {}
                Some(fe::COPY_DONE) if failure.is_none() => {
                    if let Err(e) = splitter.finish(key, &mut out) {
                        failure = Some(e);
                    } else {
                        for &shard in lanes {
                            self.send_rows(shard, &mut out[shard]).await.map_err(StreamEnd::Server)?;
                            let mut done = BytesMut::new();
                            wire::build::frame(&mut done, fe::COPY_DONE, |_| {});
                            self.send_to(shard, &done).await.map_err(StreamEnd::Server)?;
                        }
                        return Ok(());
                    }
                }
                Some(fe::COPY_DONE | fe::COPY_FAIL) => {}
                // Flush and Sync mean nothing inside COPY, as with PostgreSQL.
                Some(fe::FLUSH | fe::SYNC) => continue,
                _ => {
                    failure.get_or_insert(CopyError::Row {
                        row: splitter.rows(),
                        why: "unexpected message during COPY".into(),
                    });
                }
            }
            if let Some(e) = &failure {
                if matches!(frame.first().copied(), Some(fe::COPY_DATA)) {
                    continue;
                }
                let client_fail = frame.first() == Some(&fe::COPY_FAIL);
                let message = if client_fail {
                    let body = frame.get(5..frame.len().saturating_sub(1)).unwrap_or_default();
                    String::from_utf8_lossy(body).into_owned()
                } else {
                    e.to_string()
                };
                for &shard in lanes {
                    let mut fail = BytesMut::new();
                    wire::build::frame(&mut fail, fe::COPY_FAIL, |b| {
                        wire::build::put_cstr(b, message.as_bytes())
                    });
                    self.send_to(shard, &fail).await.map_err(StreamEnd::Server)?;
                }
                return Ok(());
            }
            if frame.first() == Some(&fe::COPY_FAIL) {
                for &shard in lanes {
                    self.send_to(shard, &frame).await.map_err(StreamEnd::Server)?;
                }
                return Ok(());
            }
        }
    }

    /// Sends a shard the rows waiting for it, as CopyData.
    async fn send_rows(
        &mut self,
        shard: usize,
        rows: &mut BytesMut,
    ) -> Result<(), crate::server::ServerError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut frame = BytesMut::with_capacity(rows.len() + 5);
        wire::build::frame(&mut frame, fe::COPY_DATA, |b| b.extend_from_slice(rows));
        rows.clear();
        self.send_to(shard, &frame).await
    }
}

enum StreamEnd {
    Client(SessionError),
    Server(crate::server::ServerError),
}
