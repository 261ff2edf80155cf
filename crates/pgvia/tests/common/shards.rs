//! Four PostgreSQL shards and a fifth cluster holding every row (the reference), for the
//! sharding tests, with pgvia's configuration for them.

use harness::{Cluster, ClusterOptions};
use tokio_postgres::Client;

use super::{ConfigBuilder, DB};

pub const SHARDS: usize = 4;

pub struct ShardClusters {
    pub shards: Vec<Cluster>,
    pub reference: Cluster,
}

/// Starts the five clusters in parallel, each with `schema` applied in database `app`, and
/// gives the reference a table `placed` hash-partitioned four ways (PostgreSQL's own
/// placement, to check pgvia's against).
pub fn start(schema: &str) -> ShardClusters {
    let handles: Vec<_> = (0..=SHARDS)
        .map(|_| {
            let schema = schema.to_owned();
            std::thread::spawn(move || {
                let mut opts = ClusterOptions::default();
                opts.settings.push(("max_prepared_transactions".into(), "20".into()));
                let pg = super::start_pg_with(opts);
                pg.psql(DB, &schema).expect("schema");
                pg.psql(DB, "GRANT ALL ON ALL TABLES IN SCHEMA public TO app;").expect("grant");
                pg
            })
        })
        .collect();
    let mut all: Vec<Cluster> = handles.into_iter().map(|h| h.join().expect("cluster thread")).collect();
    let reference = all.pop().expect("reference");
    reference
        .psql(
            DB,
            "CREATE TABLE placed (id bigint) PARTITION BY HASH (id);
             CREATE TABLE placed_0 PARTITION OF placed FOR VALUES WITH (MODULUS 4, REMAINDER 0);
             CREATE TABLE placed_1 PARTITION OF placed FOR VALUES WITH (MODULUS 4, REMAINDER 1);
             CREATE TABLE placed_2 PARTITION OF placed FOR VALUES WITH (MODULUS 4, REMAINDER 2);
             CREATE TABLE placed_3 PARTITION OF placed FOR VALUES WITH (MODULUS 4, REMAINDER 3);
             GRANT ALL ON ALL TABLES IN SCHEMA public TO app;",
        )
        .expect("partitioned copy");
    ShardClusters { shards: all, reference }
}

/// pgvia's configuration: database `app` over the shards, transaction pooling, each of
/// `tables` hash-sharded on its bigint column `id`, other tables omnisharded; and the admin
/// console's user (`common::ops`).
pub fn config(c: &ShardClusters, tables: &[&str]) -> String {
    config_with(c, tables, |b| b)
}

/// As [`config`], with each table sharded on its own key column and type: `(table, column,
/// type)`, e.g. `("accounts", "email", "text")`. Tables with equal key types are co-located.
pub fn config_keyed(c: &ShardClusters, tables: &[(&str, &str, &str)]) -> String {
    keyed_with(c, tables, |b| b)
}

/// As [`config`], with more settings from `more` (a `[gateway]`, say).
pub fn config_with(
    c: &ShardClusters,
    tables: &[&str],
    more: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
) -> String {
    let keyed: Vec<(&str, &str, &str)> = tables.iter().map(|t| (*t, "id", "bigint")).collect();
    keyed_with(c, &keyed, more)
}

fn keyed_with(
    c: &ShardClusters,
    tables: &[(&str, &str, &str)],
    more: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
) -> String {
    let base = ConfigBuilder::new(&c.reference)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 4")
        // Fifty clients log in at once on a busy two-core machine.
        .pool("connect_timeout = \"30s\"")
        .user(&super::ops::admin_user());
    let mut toml = more(base).toml();
    let start = toml.find("[[databases]]").expect("databases");
    let end = toml.find("[[users]]").expect("users");
    let mut db = format!("[[databases]]\nname = \"{DB}\"\nunsharded_tables = \"omnisharded\"\n");
    for s in &c.shards {
        db.push_str(&format!("\n[[databases.shards]]\nhost = \"{}\"\nport = {}\n", s.host(), s.port()));
    }
    for (t, column, ty) in tables {
        db.push_str(&format!(
            "\n[[databases.sharded_tables]]\nname = \"{t}\"\ncolumn = \"{column}\"\ntype = \"{ty}\"\n"
        ));
    }
    db.push('\n');
    toml.replace_range(start..end, &db);
    toml
}

/// `builder`'s configuration with its database `app` made a sharded one over `shards`, each
/// with its own pool of the builder's `[pool]` settings and no sharded table (every table is
/// omnisharded): the sharded session engine, where the unsharded tests run against the plain
/// one.
pub fn sharded_over(builder: &ConfigBuilder, shards: &[&Cluster]) -> String {
    let mut toml = builder.toml();
    let start = toml.find("[[databases]]").expect("databases");
    let end = toml.find("[[users]]").expect("users");
    let mut db = format!("[[databases]]\nname = \"{DB}\"\nunsharded_tables = \"omnisharded\"\n");
    for s in shards {
        db.push_str(&format!("\n[[databases.shards]]\nhost = \"{}\"\nport = {}\n", s.host(), s.port()));
    }
    db.push('\n');
    toml.replace_range(start..end, &db);
    toml
}

/// The two session engines a test of the session's guarantees runs against: database `app`
/// unsharded (the plain session) and sharded over the same cluster as its one shard (the
/// sharded session), with the same `[pool]` settings, so `pool_size = 1` is one server per
/// shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Plain,
    Sharded,
}

pub const ENGINES: [Engine; 2] = [Engine::Plain, Engine::Sharded];

impl Engine {
    /// pgvia serving `builder`'s configuration through this engine, over `pg`.
    pub async fn start(self, builder: &ConfigBuilder, pg: &Cluster) -> super::TestProxy {
        match self {
            Engine::Plain => super::TestProxy::start(builder).await,
            Engine::Sharded => super::TestProxy::start_toml(&sharded_over(builder, &[pg])).await,
        }
    }
}

/// The partition of the reference's `placed` table (`PARTITION BY HASH (id)`, modulus 4) that
/// PostgreSQL puts `id` in: the shard pgvia must route it to.
pub async fn partition_of(reference: &Client, id: i64) -> usize {
    let row = reference
        .query_one(
            "WITH p AS (INSERT INTO placed VALUES ($1) RETURNING tableoid::regclass::text AS part) SELECT part FROM p",
            &[&id],
        )
        .await
        .expect("place");
    reference.execute("DELETE FROM placed", &[]).await.expect("clear placed");
    let part: String = row.get(0);
    part.trim_start_matches("placed_").parse().expect("partition number")
}
