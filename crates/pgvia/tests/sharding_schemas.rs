//! Schema-based sharding through a live session: a table named with its schema goes to the
//! schema's shard, an unqualified one to the shard of the first listed schema of the session's
//! `search_path`, as `SET search_path` changes it, in the simple and the extended protocol.
//! Where each row landed is read on the shards themselves.

mod common;

use common::{TestProxy, DB, PASSWORD, USER};
use tokio_postgres::Client;

const SCHEMA: &str = "CREATE SCHEMA tenant_a AUTHORIZATION app; CREATE SCHEMA tenant_b AUTHORIZATION app;
CREATE TABLE tenant_a.orders (id bigint PRIMARY KEY, note text NOT NULL);
CREATE TABLE tenant_b.orders (id bigint PRIMARY KEY, note text NOT NULL);
ALTER TABLE tenant_a.orders OWNER TO app; ALTER TABLE tenant_b.orders OWNER TO app;";

/// tenant_a lives on shard 1, tenant_b on shard 3.
const PLACES: [(&str, usize); 2] = [("tenant_a", 1), ("tenant_b", 3)];

async fn start() -> (common::shards::ShardClusters, TestProxy, Client) {
    let c = common::shards::start(SCHEMA);
    let mut toml = common::shards::config(&c, &[]);
    let users = toml.find("[[users]]").expect("users");
    let schemas: String = PLACES
        .iter()
        .map(|(name, shard)| format!("[[databases.sharded_schemas]]\nname = \"{name}\"\nshard = {shard}\n\n"))
        .collect();
    toml.insert_str(users, &schemas);
    let proxy = TestProxy::start_toml(&toml).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    (c, proxy, via)
}

/// Per shard, the ids `schema.orders` holds there.
async fn ids_by_shard(c: &common::shards::ShardClusters, schema: &str) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    for s in &c.shards {
        let client = common::connect(&common::direct_conninfo(s, USER, PASSWORD, DB)).await.expect("shard");
        let rows =
            client.query(&format!("SELECT id FROM {schema}.orders ORDER BY id"), &[]).await.expect("ids");
        out.push(rows.iter().map(|r| r.get::<_, i64>(0)).collect());
    }
    out
}

/// `ids` on `shard` and nothing anywhere else.
fn only_on(shard: usize, ids: &[i64]) -> Vec<Vec<i64>> {
    (0..common::shards::SHARDS).map(|s| if s == shard { ids.to_vec() } else { Vec::new() }).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_go_to_their_schemas_shard_by_name_and_by_search_path() {
    let (c, _proxy, via) = start().await;

    // Qualified names, simple protocol.
    via.batch_execute("INSERT INTO tenant_a.orders VALUES (1, 'a1')").await.expect("qualified a");
    via.batch_execute("INSERT INTO tenant_b.orders VALUES (1, 'b1')").await.expect("qualified b");

    // Unqualified, placed by the session's search_path (public is not listed: stepped over).
    via.batch_execute("SET search_path = public, tenant_b").await.expect("set search_path");
    via.batch_execute("INSERT INTO orders VALUES (2, 'b2')").await.expect("unqualified b");
    // The extended protocol, a key in a Bind parameter: the same search_path places it.
    let insert = via.prepare("INSERT INTO orders VALUES ($1, $2)").await.expect("prepare");
    via.execute(&insert, &[&3i64, &"b3"]).await.expect("extended b");

    via.batch_execute("SET search_path = tenant_a").await.expect("set search_path again");
    via.execute("INSERT INTO orders VALUES ($1, $2)", &[&4i64, &"a4"]).await.expect("extended a");
    via.batch_execute("INSERT INTO orders VALUES (5, 'a5')").await.expect("unqualified a");

    // Reads follow the same rule.
    let n: i64 = via.query_one("SELECT count(*) FROM orders", &[]).await.expect("count a").get(0);
    assert_eq!(n, 3, "tenant_a's rows, read through the search_path");
    let n: i64 = via.query_one("SELECT count(*) FROM tenant_b.orders", &[]).await.expect("count b").get(0);
    assert_eq!(n, 3, "tenant_b's rows, read by name");

    assert_eq!(ids_by_shard(&c, "tenant_a").await, only_on(1, &[1, 4, 5]));
    assert_eq!(ids_by_shard(&c, "tenant_b").await, only_on(3, &[1, 2, 3]));

    // Inside a transaction the rows land on the same shard and commit together.
    via.batch_execute("SET search_path = tenant_b").await.expect("set search_path b");
    via.batch_execute(
        "BEGIN; INSERT INTO orders VALUES (6, 'b6'); INSERT INTO orders VALUES (7, 'b7'); COMMIT",
    )
    .await
    .expect("transaction on tenant_b");
    assert_eq!(ids_by_shard(&c, "tenant_b").await, only_on(3, &[1, 2, 3, 6, 7]));
}
