//! The differential corpus's machinery: run an item through pgvia and on the reference in one
//! protocol, judge the pair (identical, refused, wrong), compare the tables a write touched
//! shard by shard with the reference, and count it all.

pub mod copy;
pub mod data;
pub mod gen;
pub mod items;
pub mod wire;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use futures_util::{SinkExt, StreamExt};
use tokio_postgres::{Client, SimpleQueryMessage};

use items::{Item, Kind};
use wire::{Outcome, Protocol, Wire};

/// The corpus's tables; the last is on every shard.
pub const OMNISHARDED: [&str; 1] = ["products"];
pub const TABLES: [&str; 6] = ["customers", "orders", "order_items", "accounts", "events", "products"];

/// An abort the reference runs when pgvia refused a statement inside a transaction, so both
/// sides are in a failed transaction, as PostgreSQL is after any error there.
const ABORT: &str = "SELECT 1/0 AS pgvia_refused_this";

#[derive(Debug, Default)]
pub struct Counts {
    pub identical: u64,
    pub refused: u64,
    pub wrong: u64,
}

pub struct Wrong {
    pub item: String,
    pub protocol: Protocol,
    pub via: String,
    pub reference: String,
    pub why: String,
}

#[derive(Default)]
pub struct Tally {
    pub per_protocol: BTreeMap<Protocol, Counts>,
    /// construct -> protocol -> refusals.
    pub refusals: BTreeMap<String, BTreeMap<Protocol, u64>>,
    pub wrong: Vec<Wrong>,
    pub table_diffs: Vec<String>,
    pub writes_compared: u64,
}

impl Tally {
    pub fn report(&self, title: &str) -> String {
        let mut s = format!("==== {title} ====\n");
        for (p, c) in &self.per_protocol {
            let _ = writeln!(
                s,
                "{:<9} identical {:>5}  refused {:>5}  wrong {:>4}",
                p.name(),
                c.identical,
                c.refused,
                c.wrong
            );
        }
        let _ = writeln!(
            s,
            "table comparisons after writes: {}, differences: {}",
            self.writes_compared,
            self.table_diffs.len()
        );
        let _ = writeln!(s, "refusals per construct (simple/extended/prepared/portal):");
        for (construct, by) in &self.refusals {
            let n = |p| by.get(&p).copied().unwrap_or(0);
            let _ = writeln!(
                s,
                "  {construct}: {}/{}/{}/{}",
                n(Protocol::Simple),
                n(Protocol::Extended),
                n(Protocol::Prepared),
                n(Protocol::Portal)
            );
        }
        for w in &self.wrong {
            let _ = writeln!(
                s,
                "WRONG [{}] {}\n    sql: {}\n    pgvia:     {}\n    reference: {}",
                w.protocol.name(),
                w.why,
                w.item,
                w.via,
                w.reference
            );
        }
        for d in &self.table_diffs {
            let _ = writeln!(s, "TABLE DIFFERENCE {d}");
        }
        s
    }
}

/// pgvia and the reference, each over a raw connection, and every cluster read directly for
/// the table comparisons.
pub struct Runner {
    pub via: Wire,
    pub reference: Wire,
    pub direct_ref: Client,
    pub direct_shards: Vec<Client>,
    /// A connection through pgvia to put a table back after a difference.
    pub via_copy: Wire,
    pub tally: Tally,
    /// Tables written since the reference was last idle.
    dirty: Vec<&'static str>,
}

/// What an item did, for the generated corpus to save the wrong ones.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Identical,
    Refused,
    Wrong,
}

impl Runner {
    pub fn new(
        via: Wire,
        reference: Wire,
        direct_ref: Client,
        direct_shards: Vec<Client>,
        via_copy: Wire,
    ) -> Runner {
        Runner {
            via,
            reference,
            direct_ref,
            direct_shards,
            via_copy,
            tally: Tally::default(),
            dirty: Vec::new(),
        }
    }

    /// Runs `item` in `protocol` on both sides and judges it; after a write, once the
    /// transaction is over, compares the tables it named.
    pub async fn check(&mut self, item: &Item, protocol: Protocol) -> Verdict {
        let (sql, params) = match protocol {
            Protocol::Prepared => items::parameterize(&item.sql),
            _ => (item.sql.clone(), Vec::new()),
        };
        let kind = items::kind(&sql);
        let via = self.via.run(protocol, &sql, &params).await;
        let hung = via.iter().find(|o| matches!(o, Outcome::Hang(_))).cloned();
        // A refused write or transaction control is not run on the reference, so the two
        // stay comparable.
        let refused_write = kind != Kind::Read && via.first().and_then(Outcome::code) == Some("0A000");
        let reference =
            if refused_write { Vec::new() } else { self.reference.run(protocol, &sql, &params).await };
        if kind != Kind::Read && !refused_write {
            for t in items::tables_named(&sql, &TABLES) {
                if !self.dirty.contains(&t) {
                    self.dirty.push(t);
                }
            }
        }
        let mut verdict = Verdict::Identical;
        let mut why = String::new();
        if let Some(h) = &hung {
            verdict = Verdict::Wrong;
            why = format!("pgvia hung: {}", h.show());
        } else if refused_write {
            verdict = Verdict::Refused;
        } else {
            for (i, r) in reference.iter().enumerate() {
                let Some(v) = via.get(i) else {
                    if via.first().and_then(Outcome::code) == Some("0A000") {
                        break;
                    }
                    verdict = Verdict::Wrong;
                    why = "pgvia gave fewer results".into();
                    break;
                };
                match judge(v, r, item.ordered) {
                    // The runs after a refusal follow from it (its transaction failed).
                    Ok(Verdict::Refused) => {
                        verdict = Verdict::Refused;
                        break;
                    }
                    Ok(_) => {}
                    Err(w) => {
                        verdict = Verdict::Wrong;
                        why = w;
                        break;
                    }
                }
            }
        }
        // A refusal inside a transaction failed pgvia's; fail the reference's the same way.
        if verdict == Verdict::Refused && self.via.status == b'E' && self.reference.status == b'T' {
            self.reference.run(Protocol::Simple, ABORT, &[]).await;
        }
        if hung.is_some() {
            self.via.reconnect().await;
            self.reference.run(Protocol::Simple, "ROLLBACK", &[]).await;
        } else if verdict != Verdict::Wrong && self.via.status != self.reference.status {
            verdict = Verdict::Wrong;
            why = format!(
                "transaction status after it: pgvia {} reference {}",
                self.via.status as char, self.reference.status as char
            );
        }
        if self.via.status != self.reference.status {
            self.via.run(Protocol::Simple, "ROLLBACK", &[]).await;
            self.reference.run(Protocol::Simple, "ROLLBACK", &[]).await;
        }
        let counts = self.tally.per_protocol.entry(protocol).or_default();
        match verdict {
            Verdict::Identical => counts.identical += 1,
            Verdict::Refused => {
                counts.refused += 1;
                *self
                    .tally
                    .refusals
                    .entry(item.construct.clone())
                    .or_default()
                    .entry(protocol)
                    .or_default() += 1;
            }
            Verdict::Wrong => {
                counts.wrong += 1;
                let show = |o: &[Outcome]| o.iter().map(Outcome::show).collect::<Vec<_>>().join(" ;; ");
                self.tally.wrong.push(Wrong {
                    item: format!("{} ({}, {})", sql, item.construct, item.place),
                    protocol,
                    via: show(&via),
                    reference: show(&reference),
                    why,
                });
            }
        }
        if self.reference.status == b'I' && !self.dirty.is_empty() {
            let tables = std::mem::take(&mut self.dirty);
            for t in tables {
                self.tally.writes_compared += 1;
                if let Some(d) = self.compare_table(t).await {
                    self.tally.table_diffs.push(format!(
                        "after {} [{}] ({}): {d}",
                        sql,
                        protocol.name(),
                        item.place
                    ));
                    // Later items should show their own defects, not this one's aftermath.
                    if let Err(e) = self.resync(t).await {
                        self.tally.table_diffs.push(format!("{t} could not be put back: {e}"));
                    }
                }
            }
        }
        verdict
    }

    /// Every row of `table` on the shards (their union for a sharded table, each shard alone
    /// for the one on every shard) against the reference's, sorted; `None` when the same.
    pub async fn compare_table(&self, table: &str) -> Option<String> {
        let sql = format!("SELECT x::text FROM {table} x");
        let want = sorted_text(&self.direct_ref, &sql).await;
        if OMNISHARDED.contains(&table) {
            for (i, s) in self.direct_shards.iter().enumerate() {
                let got = sorted_text(s, &sql).await;
                if got != want {
                    return Some(format!("{table} on shard {i}: {}", diff(&got, &want)));
                }
            }
            return None;
        }
        let mut got = Vec::new();
        for s in &self.direct_shards {
            got.extend(sorted_text(s, &sql).await);
        }
        got.sort();
        if got != want {
            return Some(format!("{table} over the shards: {}", diff(&got, &want)));
        }
        self.misplaced(table).await
    }

    /// Rows of sharded `table` on a shard other than the one PostgreSQL's own hash
    /// partitioning (four ways, on the reference) puts their key in; `None` when all are home.
    async fn misplaced(&self, table: &str) -> Option<String> {
        let (key, ty) = KEYS.iter().find(|k| k.0 == table).map(|k| (k.1, k.2))?;
        let mut keys: Vec<String> = Vec::new();
        let mut homes: Vec<i32> = Vec::new();
        for (i, s) in self.direct_shards.iter().enumerate() {
            for k in sorted_text(s, &format!("SELECT {key}::text FROM {table}")).await {
                keys.push(k);
                homes.push(i32::try_from(i).unwrap_or(0));
            }
        }
        let place = format!("corpus_place_{ty}");
        let sql = format!(
            "WITH p AS (INSERT INTO {place} SELECT k::{ty}, s FROM unnest($1::text[], $2::int[]) u(k, s) \
             RETURNING k::text, s, tableoid::regclass::text AS part) \
             SELECT k, s, part FROM p WHERE part <> '{place}_' || s ORDER BY k LIMIT 5"
        );
        let rows =
            self.direct_ref.query(&sql, &[&keys, &homes]).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        self.direct_ref.batch_execute(&format!("TRUNCATE {place}")).await.expect("empty the placement table");
        if rows.is_empty() {
            return None;
        }
        let wrong: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{} on shard {}, belongs in {}",
                    r.get::<_, String>(0),
                    r.get::<_, i32>(1),
                    r.get::<_, String>(2)
                )
            })
            .collect();
        Some(format!("{table} rows on the wrong shard: {wrong:?}"))
    }
}

/// Sharded tables' key columns and types, for the placement check.
pub const KEYS: [(&str, &str, &str); 5] = [
    ("customers", "customer_id", "bigint"),
    ("orders", "customer_id", "bigint"),
    ("order_items", "customer_id", "bigint"),
    ("accounts", "email", "text"),
    ("events", "id", "uuid"),
];

/// The reference's partitioned tables the placement check asks (`PARTITION BY HASH`, modulus
/// 4: what pgvia's hash sharding over four shards must match).
pub fn placement_tables() -> String {
    let mut sql = String::new();
    for ty in ["bigint", "text", "uuid"] {
        sql.push_str(&format!("CREATE TABLE corpus_place_{ty} (k {ty}, s int) PARTITION BY HASH (k);\n"));
        for i in 0..4 {
            sql.push_str(&format!(
                "CREATE TABLE corpus_place_{ty}_{i} PARTITION OF corpus_place_{ty} FOR VALUES WITH (MODULUS 4, REMAINDER {i});\n"
            ));
        }
    }
    sql.push_str("GRANT ALL ON ALL TABLES IN SCHEMA public TO app;");
    sql
}

impl Runner {
    /// Makes `table` on the shards the reference's again: emptied on every shard, then the
    /// reference's rows copied in, through pgvia for a sharded table (pgvia places them),
    /// directly into each shard for the table on every shard.
    pub async fn resync(&mut self, table: &str) -> Result<(), String> {
        let err = |e: tokio_postgres::Error| e.to_string();
        let out = self.direct_ref.copy_out(&format!("COPY {table} TO STDOUT")).await.map_err(err)?;
        let mut data = Vec::new();
        futures_util::pin_mut!(out);
        while let Some(chunk) = out.next().await {
            data.extend_from_slice(&chunk.map_err(err)?);
        }
        for s in &self.direct_shards {
            // A lock pgvia left behind would block the TRUNCATE for ever.
            s.batch_execute(&format!("SET lock_timeout = '10s'; TRUNCATE {table}")).await.map_err(err)?;
        }
        let copy = format!("COPY {table} FROM STDIN");
        if OMNISHARDED.contains(&table) {
            for s in &self.direct_shards {
                let sink = s.copy_in(&copy).await.map_err(err)?;
                futures_util::pin_mut!(sink);
                sink.send(bytes::Bytes::from(data.clone())).await.map_err(err)?;
                sink.as_mut().finish().await.map_err(err)?;
            }
        } else {
            match self.via_copy.copy_in(&copy, &data).await {
                Outcome::Answer { .. } => {}
                other => {
                    self.via_copy.reconnect().await;
                    return Err(format!("COPY through pgvia: {}", other.show()));
                }
            }
        }
        match self.compare_table(table).await {
            None => Ok(()),
            Some(d) => Err(d),
        }
    }
}

async fn sorted_text(c: &Client, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_owned()),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn diff(got: &[String], want: &[String]) -> String {
    let extra: Vec<&String> = got.iter().filter(|g| !want.contains(g)).take(5).collect();
    let missing: Vec<&String> = want.iter().filter(|w| !got.contains(w)).take(5).collect();
    format!("{} rows vs {} in the reference; extra {extra:?}; missing {missing:?}", got.len(), want.len())
}

/// One result of pgvia against the reference's.
fn judge(via: &Outcome, reference: &Outcome, ordered: bool) -> Result<Verdict, String> {
    match (via, reference) {
        (Outcome::Error { code: a, .. }, Outcome::Error { code: b, .. }) if a == b => Ok(Verdict::Identical),
        // pgvia refuses a construct before any shard reads the statement, so an invalid one
        // (mismatched UNION types, a negative LIMIT) may be refused rather than get the
        // reference's own error: a refusal either way, never an answer.
        (Outcome::Error { code, .. }, _) if code == "0A000" => Ok(Verdict::Refused),
        (
            Outcome::Answer { columns: ca, rows: ra, tag: ta },
            Outcome::Answer { columns: cb, rows: rb, tag: tb },
        ) => {
            if ca != cb {
                return Err("columns differ (names, types, typmods or formats)".into());
            }
            if ta != tb {
                return Err("command tags differ".into());
            }
            if ordered {
                if ra != rb {
                    return Err("rows differ (in order)".into());
                }
            } else {
                let (mut a, mut b) = (ra.clone(), rb.clone());
                a.sort();
                b.sort();
                if a != b {
                    return Err("rows differ (as multisets)".into());
                }
            }
            Ok(Verdict::Identical)
        }
        _ => Err("different outcome".into()),
    }
}
