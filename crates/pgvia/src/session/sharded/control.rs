//! Statements the sharded session answers or steers itself: `BEGIN`, `COMMIT`, `ROLLBACK`
//! (two-phase when several shards wrote), `SET pgvia.shard` / `pgvia.sharding_key`, and what
//! a sharded database does not run yet (refused with 0A000 rather than run wrongly).

use bytes::{Bytes, BytesMut};
use route::StatementKind;
use shard::ShardSet;
use wire::sqlstate::SqlState;

use super::fanout::Combine;
use super::{ShardedSession, Tx};
use crate::session::error::SessionError;
use crate::sharding;
use crate::sharding::key_move::quote_ident;

const SHARD_SETTING: &str = "pgvia.shard";

const KEY_SETTING: &str = "pgvia.sharding_key";

/// Why a statement of `kind` is refused on a sharded database, if it is: one answer for every
/// protocol path (simple, extended, prepared), so none of them runs it on a shard.
/// `PREPARE TRANSACTION`, `COMMIT PREPARED` and `ROLLBACK PREPARED` are pgvia's own across the
/// shards: a client's would commit or roll back one shard of a transaction that pgvia's
/// two-phase commit has not decided yet.
pub(super) fn unsupported(kind: StatementKind) -> Option<String> {
    let what = match kind {
        StatementKind::PrepareTransaction => "PREPARE TRANSACTION",
        StatementKind::CommitPrepared => "COMMIT PREPARED",
        StatementKind::RollbackPrepared => "ROLLBACK PREPARED",
        StatementKind::Listen | StatementKind::Unlisten => "LISTEN/UNLISTEN",
        StatementKind::Commit { chain: true } => "COMMIT AND CHAIN",
        StatementKind::Rollback { chain: true } => "ROLLBACK AND CHAIN",
        _ => return None,
    };
    Some(match kind {
        StatementKind::PrepareTransaction
        | StatementKind::CommitPrepared
        | StatementKind::RollbackPrepared => {
            format!("{what} is not supported on a sharded database: pgvia runs two-phase commit across the shards itself")
        }
        _ => format!("{what} is not supported on a sharded database yet"),
    })
}

impl ShardedSession<'_> {
    /// Handles `analysis` if it is a statement the session answers itself. Returns whether it
    /// did (the reply and its ReadyForQuery are in `to_client`).
    pub(super) async fn control(
        &mut self,
        analysis: &route::Analysis,
        frame: &Bytes,
    ) -> Result<bool, SessionError> {
        if analysis.is_conservative() || analysis.len() != 1 {
            return Ok(false);
        }
        let Some(statement) = analysis.statement(0) else { return Ok(false) };
        let kind = statement.kind();
        let name = statement.name().map(str::to_ascii_lowercase);
        match kind {
            StatementKind::Begin(_) => {
                self.begin(frame.clone());
                Ok(true)
            }
            StatementKind::Savepoint | StatementKind::Release | StatementKind::RollbackToSavepoint => {
                self.savepoint(kind, statement.name().unwrap_or_default().to_owned(), frame.clone()).await?;
                Ok(true)
            }
            StatementKind::Copy { direction: route::CopyDirection::From, stdio: true } => {
                let table =
                    statement.tables().next().map(|t| (t.schema.map(str::to_owned), t.name.to_owned()));
                let rule = table
                    .as_ref()
                    .and_then(|(schema, name)| self.rules.table(schema.as_deref(), name).cloned());
                match (rule, table) {
                    (Some(rule), Some((schema, name))) => {
                        let qualified = match schema {
                            Some(s) => format!("{}.{}", quote_ident(&s), quote_ident(&name)),
                            None => quote_ident(&name),
                        };
                        if let Tx::Open { failed: true, .. } = self.tx {
                            return Ok(false);
                        }
                        self.copy_in(frame.clone(), rule, qualified).await?;
                        Ok(true)
                    }
                    // Not a sharded table: routed as any statement (one shard, or refused).
                    _ => Ok(false),
                }
            }
            StatementKind::Commit { chain: false } => {
                self.commit().await?;
                Ok(true)
            }
            StatementKind::Rollback { chain: false } => {
                self.rollback().await;
                Ok(true)
            }
            StatementKind::Set { .. } | StatementKind::Reset
                if matches!(name.as_deref(), Some(SHARD_SETTING | KEY_SETTING)) =>
            {
                self.set_hint(
                    name.as_deref().unwrap_or_default(),
                    statement.value(),
                    kind == StatementKind::Reset,
                );
                Ok(true)
            }
            _ => match unsupported(kind) {
                Some(why) => {
                    self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &why);
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// `BEGIN`: answered at once; each shard hears it when the transaction first reaches it.
    pub(super) fn begin(&mut self, frame: Bytes) {
        self.open_transaction(frame);
        self.ready();
    }

    /// `BEGIN`'s answer without its ReadyForQuery (the statements after it in an extended
    /// batch answer on): the transaction opens with the client's own text (its isolation level
    /// and access mode) for the shards, and the client's tag (`BEGIN` or `START TRANSACTION`).
    pub(super) fn open_transaction(&mut self, frame: Bytes) {
        let tag = if frame
            .get(5..)
            .is_some_and(|s| s.trim_ascii_start().get(..5).is_some_and(|w| w.eq_ignore_ascii_case(b"start")))
        {
            "START TRANSACTION"
        } else {
            "BEGIN"
        };
        match self.tx {
            Tx::Idle => {
                self.tx = Tx::Open {
                    begin: frame,
                    participants: ShardSet::EMPTY,
                    writers: ShardSet::EMPTY,
                    failed: false,
                    savepoints: Vec::new(),
                };
            }
            Tx::Open { .. } => {
                wire::build::ErrorFields::with_code(
                    wire::build::Severity::Warning,
                    "25001",
                    "there is already a transaction in progress",
                )
                .write(&mut self.to_client);
            }
        }
        wire::build::command_complete(&mut self.to_client, tag);
    }

    /// `SAVEPOINT`, `RELEASE` and `ROLLBACK TO`: run on every shard the transaction reached
    /// and remembered for those that join it later.
    pub(super) async fn savepoint(
        &mut self,
        kind: StatementKind,
        name: String,
        frame: Bytes,
    ) -> Result<(), SessionError> {
        let (verb, tag) = match kind {
            StatementKind::Savepoint => ("SAVEPOINT", "SAVEPOINT"),
            StatementKind::Release => ("RELEASE SAVEPOINT", "RELEASE"),
            _ => ("ROLLBACK TO SAVEPOINT", "ROLLBACK"),
        };
        let Tx::Open { participants, failed, savepoints, .. } = &mut self.tx else {
            self.refuse("25P01", &format!("{verb} can only be used in transaction blocks"));
            return Ok(());
        };
        let rolling_back = kind == StatementKind::RollbackToSavepoint;
        if *failed && !rolling_back {
            self.refuse(SqlState::IN_FAILED_SQL_TRANSACTION.code(), super::ABORTED);
            return Ok(());
        }
        let known = savepoints.iter().rposition(|(n, _)| *n == name);
        let participants = *participants;
        if kind != StatementKind::Savepoint && known.is_none() {
            self.refuse("3B001", &format!("savepoint \"{name}\" does not exist"));
            return Ok(());
        }
        if rolling_back {
            // As on PostgreSQL, rolling back to a savepoint ends the failed state.
            *failed = false;
        }
        if participants.is_empty() {
            wire::build::command_complete(&mut self.to_client, tag);
            self.errored = false;
            self.ready();
        } else {
            self.exchange(participants, super::io::Payload::Same(&frame), Combine::Concat, &[], false)
                .await?;
        }
        if self.errored {
            return Ok(());
        }
        let mut cursors_at = None;
        if let Tx::Open { savepoints, .. } = &mut self.tx {
            match (kind, known) {
                (StatementKind::Savepoint, _) => savepoints.push((name, frame)),
                (StatementKind::Release, Some(i)) => {
                    savepoints.truncate(i);
                    cursors_at = Some((i, false));
                }
                (_, Some(i)) => {
                    savepoints.truncate(i + 1);
                    cursors_at = Some((i + 1, true));
                }
                _ => {}
            }
        }
        if let Some((depth, rolled_back)) = cursors_at {
            self.cursors_at_savepoint(depth, rolled_back);
        }
        Ok(())
    }

    /// `COMMIT`: on one writing shard (or none) a plain commit everywhere; on several, two-phase.
    pub(super) async fn commit(&mut self) -> Result<(), SessionError> {
        let tx = std::mem::replace(&mut self.tx, Tx::Idle);
        let (participants, writers, failed) = match tx {
            Tx::Idle => {
                self.warn_no_transaction();
                wire::build::command_complete(&mut self.to_client, "COMMIT");
                self.ready();
                return Ok(());
            }
            Tx::Open { participants, writers, failed, .. } => (participants, writers, failed),
        };
        self.cursors_at_end(!failed);
        if failed {
            self.rollback_held(participants).await;
            wire::build::command_complete(&mut self.to_client, "ROLLBACK");
        } else if writers.len() <= 1 {
            let mut commit = BytesMut::new();
            wire::build::query(&mut commit, "COMMIT");
            // Readers first: if the one writer's commit fails, nothing else was written.
            let readers = participants.iter().filter(|&s| !writers.contains(s)).collect::<ShardSet>();
            self.commit_readers(readers).await;
            if writers.is_empty() {
                wire::build::command_complete(&mut self.to_client, "COMMIT");
            } else {
                match self.send_and_merge(writers, &commit, &[], false).await {
                    Ok(_) => {}
                    Err(e) => {
                        let shard = writers.first().unwrap_or(0);
                        self.shard_failed(shard, &e).await;
                        self.give_back_all().await;
                        return Ok(());
                    }
                }
            }
        } else {
            match self.two_phase_commit(writers, participants).await {
                Ok(()) => wire::build::command_complete(&mut self.to_client, "COMMIT"),
                Err(error) => self.to_client.extend_from_slice(&error),
            }
        }
        self.ready();
        self.give_back_all().await;
        Ok(())
    }

    /// PostgreSQL's WARNING for COMMIT or ROLLBACK outside a transaction block.
    fn warn_no_transaction(&mut self) {
        wire::build::ErrorFields::with_code(
            wire::build::Severity::Warning,
            "25P01",
            "there is no transaction in progress",
        )
        .write(&mut self.to_client);
    }

    /// Commits the shards that only read: whatever happens to them, nothing they did is lost;
    /// one whose COMMIT fails is closed rather than pooled.
    async fn commit_readers(&mut self, readers: ShardSet) {
        let timeout = self.app.config().general.server_reset_timeout;
        for shard in readers.iter() {
            if let Some(c) = self.held[shard].as_mut() {
                if c.conn().run_internal(&["COMMIT"], timeout).await.is_err() {
                    c.conn().mark_broken();
                }
            }
        }
    }

    /// `ROLLBACK`: on every shard the transaction reached.
    pub(super) async fn rollback(&mut self) {
        let tx = std::mem::replace(&mut self.tx, Tx::Idle);
        match tx {
            Tx::Idle => {
                self.warn_no_transaction();
            }
            Tx::Open { participants, .. } => {
                self.cursors_at_end(false);
                self.rollback_held(participants).await
            }
        }
        wire::build::command_complete(&mut self.to_client, "ROLLBACK");
        self.ready();
        self.give_back_all().await;
    }

    /// Commits a transaction that wrote on several shards: the readers among `participants`
    /// commit plainly, the `writers` with two-phase commit. On failure, the ErrorResponse the
    /// client gets (everything was rolled back, or the outcome is in recovery's hands: 08007).
    pub(super) async fn two_phase_commit(
        &mut self,
        writers: ShardSet,
        participants: ShardSet,
    ) -> Result<(), Bytes> {
        let config = self.app.config();
        let timeout = config.general.server_reset_timeout;
        drop(config);
        let readers = participants.iter().filter(|&s| !writers.contains(s)).collect::<ShardSet>();
        self.commit_readers(readers).await;
        super::two_phase::commit(&mut self.held, writers, &self.groups, &self.patron, timeout).await
    }

    fn set_hint(&mut self, name: &str, value: Option<&str>, reset: bool) {
        let value = if reset { None } else { value };
        if name == SHARD_SETTING {
            match value.map(|v| sharding::shard_setting(&self.rules, v)) {
                None => self.hint_shard = None,
                Some(Ok(s)) => self.hint_shard = Some(s),
                Some(Err(e)) => {
                    self.refuse_route(&e);
                    return;
                }
            }
        } else {
            self.hint_key = value.map(str::to_owned);
        }
        wire::build::command_complete(&mut self.to_client, if reset { "RESET" } else { "SET" });
        self.ready();
    }
}
