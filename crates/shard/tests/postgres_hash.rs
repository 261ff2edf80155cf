//! Differential test: for 100,000 random keys of each supported type, the shard pgvia computes
//! equals the partition PostgreSQL itself puts the row in, for a table `PARTITION BY HASH (k)`
//! with `MODULUS 4` (real PostgreSQL, version from `PGVIA_TEST_PG`).

use harness::{Cluster, ClusterOptions, HbaAuth};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shard::{partition_of, KeyType};

const KEYS: usize = 100_000;
const MODULUS: u64 = 4;

/// Random keys of one SQL type, in its text form.
fn keys(ty: &str, rng: &mut StdRng) -> Vec<String> {
    (0..KEYS)
        .map(|i| match ty {
            "smallint" => rng.gen::<i16>().to_string(),
            // Small values too: they are where sign and width mistakes show.
            "integer" if i % 10 == 0 => rng.gen_range(-1000i32..1000).to_string(),
            "integer" => rng.gen::<i32>().to_string(),
            "bigint" if i % 10 == 0 => rng.gen_range(-1000i64..1000).to_string(),
            "bigint" if i % 10 == 1 => rng.gen::<i32>().to_string(),
            "bigint" => rng.gen::<i64>().to_string(),
            "text" | "varchar" => random_text(rng),
            "uuid" => {
                let b: [u8; 16] = rng.gen();
                b.iter().map(|x| format!("{x:02x}")).collect()
            }
            "date" => format!(
                "{:04}-{:02}-{:02}",
                rng.gen_range(1900..2100),
                rng.gen_range(1..=12),
                rng.gen_range(1..=28)
            ),
            "timestamp" | "timestamptz" => format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}{}",
                rng.gen_range(1900..2100),
                rng.gen_range(1..=12),
                rng.gen_range(1..=28),
                rng.gen_range(0..24),
                rng.gen_range(0..60),
                rng.gen_range(0..60),
                rng.gen_range(0..1_000_000),
                if ty == "timestamptz" { "+00" } else { "" }
            ),
            other => panic!("no generator for {other}"),
        })
        .collect()
}

/// Lengths 0 to 40 (both tails of lookup3 and several 12-byte blocks), ASCII and multi-byte
/// UTF-8, never NUL (PostgreSQL's text cannot hold it).
fn random_text(rng: &mut StdRng) -> String {
    let len = rng.gen_range(0..=40);
    (0..len)
        .map(|_| match rng.gen_range(0..4) {
            0 => char::from_u32(rng.gen_range(0x80..0x800)).unwrap_or('é'),
            1 => char::from_u32(rng.gen_range(0x4E00..0x9FFF)).unwrap_or('字'),
            _ => char::from(rng.gen_range(0x20u8..0x7f)),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_routing_agrees_with_postgres_partitioning() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    let conninfo = format!("host={} port={} user=postgres dbname=postgres", pg.host(), pg.port());
    let (client, conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    client.batch_execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'").await.expect("session settings");
    let mut rng = StdRng::seed_from_u64(0x5eed);

    let types =
        ["smallint", "integer", "bigint", "text", "varchar", "uuid", "date", "timestamp", "timestamptz"];
    for ty in types {
        let table = format!("h_{ty}");
        let mut ddl = format!("CREATE TABLE {table} (k {ty}) PARTITION BY HASH (k);");
        for r in 0..MODULUS {
            ddl.push_str(&format!(
                "CREATE TABLE {table}_{r} PARTITION OF {table} FOR VALUES WITH (MODULUS {MODULUS}, REMAINDER {r});"
            ));
        }
        client.batch_execute(&ddl).await.expect("create the partitioned table");
        let keys = keys(ty, &mut rng);
        client
            .execute(&format!("INSERT INTO {table} SELECT unnest($1::text[])::{ty}"), &[&keys])
            .await
            .expect("insert the keys");
        let rows = client
            .query(&format!("SELECT k::text, tableoid::regclass::text FROM {table}"), &[])
            .await
            .expect("read back");
        assert_eq!(rows.len(), KEYS);
        let key_type = KeyType::from_sql_name(ty).expect("a key type");
        let mut mismatches = Vec::new();
        for row in &rows {
            let text: String = row.get(0);
            let partition: String = row.get(1);
            let postgres: u64 = partition.rsplit('_').next().and_then(|r| r.parse().ok()).expect("remainder");
            let value = key_type.parse_text(text.as_bytes()).unwrap_or_else(|e| panic!("{ty} {text:?}: {e}"));
            let ours = partition_of(&value, MODULUS);
            if ours != postgres {
                mismatches.push((text, postgres, ours));
            }
        }
        assert!(
            mismatches.is_empty(),
            "{ty}: {} of {KEYS} keys in another partition than PostgreSQL's, first: {:?}",
            mismatches.len(),
            &mismatches[..mismatches.len().min(5)]
        );
        eprintln!("{ty}: {KEYS} keys, every one in PostgreSQL's partition");
    }
}

/// The binary form of a key (Bind parameters in binary format) routes like its text form.
#[test]
fn binary_and_text_forms_agree() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..10_000 {
        let v: i64 = rng.gen();
        let text = KeyType::BigInt.parse_text(v.to_string().as_bytes()).expect("text");
        let binary = KeyType::BigInt.parse_binary(&v.to_be_bytes()).expect("binary");
        assert_eq!(partition_of(&text, 4), partition_of(&binary, 4));
        let small = v as i32;
        let text = KeyType::Integer.parse_text(small.to_string().as_bytes()).expect("text");
        let binary = KeyType::Integer.parse_binary(&small.to_be_bytes()).expect("binary");
        assert_eq!(text, binary);
    }
}
