//! `COPY ... FROM STDIN` through pgvia and into the reference, in the simple protocol (a
//! raw Query) and the extended one (a driver's `copy_in`: Parse, Bind, Execute), into a
//! sharded table and into the table on every shard; then the tables are compared shard by
//! shard and the rows removed again.

use std::time::Duration;

use futures_util::SinkExt;
use tokio_postgres::Client;

use super::wire::{Outcome, Protocol};
use super::{Runner, Wrong};

const CASES: [(&str, &str, &str); 2] = [
    (
        "customers",
        "COPY customers (customer_id, name, tier, signup) FROM STDIN",
        "7501\tCopied\t0\t2024-01-01\n7502\tcopied\t1\t2024-01-02\n-7503\tCOPIED\t2\t2024-01-03\n",
    ),
    (
        "products",
        "COPY products (product_id, sku, title, price, stock) FROM STDIN",
        "991\tSKU-991\tCopied\t1.50\t7\n992\tSKU-992\tCopied\t2.50\t8\n",
    ),
];

const CLEANUP: [&str; 2] = [
    "DELETE FROM customers WHERE customer_id IN (7501, 7502, -7503)",
    "DELETE FROM products WHERE product_id IN (991, 992)",
];

/// The driver's extended-protocol COPY: the command tag's row count, or what went wrong.
async fn driver_copy(c: &Client, sql: &str, data: &str) -> Result<u64, String> {
    let run = async {
        let sink = c.copy_in(sql).await.map_err(|e| format!("{e:?}"))?;
        futures_util::pin_mut!(sink);
        sink.send(bytes::Bytes::from(data.to_owned())).await.map_err(|e| format!("{e:?}"))?;
        sink.as_mut().finish().await.map_err(|e| format!("{e:?}"))
    };
    match tokio::time::timeout(Duration::from_secs(20), run).await {
        Ok(r) => r,
        Err(_) => Err("HANG: no answer to the COPY in 20 s".into()),
    }
}

/// Runs the cases; `via_driver` is a driver connection through pgvia (given up on after a
/// hang), `ref_driver` one to the reference.
pub async fn run(runner: &mut Runner, via_conninfo: &str, ref_driver: &Client) {
    for protocol in [Protocol::Simple, Protocol::Extended] {
        for ((table, sql, data), cleanup) in CASES.iter().zip(CLEANUP) {
            let (via, reference) = match protocol {
                Protocol::Simple => {
                    let v = runner.via.copy_in(sql, data.as_bytes()).await;
                    let r = runner.reference.copy_in(sql, data.as_bytes()).await;
                    if matches!(v, Outcome::Hang(_)) {
                        runner.via.reconnect().await;
                    }
                    (v.show(), r.show())
                }
                _ => {
                    // A connection of its own per COPY: after an error that comes before the
                    // CopyInResponse, the driver's own CopyFail and Sync draw one more
                    // ReadyForQuery than it waits for (from PostgreSQL too), wedging it.
                    let via_driver = crate::common::connect(via_conninfo).await.expect("connect");
                    let v = driver_copy(&via_driver, sql, data).await;
                    if v.as_ref().is_err_and(|e| e.contains("E0A000")) {
                        // Refused: not run on the reference either.
                        let counts = runner.tally.per_protocol.entry(protocol).or_default();
                        counts.refused += 1;
                        *runner
                            .tally
                            .refusals
                            .entry("COPY FROM STDIN".to_owned())
                            .or_default()
                            .entry(protocol)
                            .or_default() += 1;
                        continue;
                    }
                    let r = driver_copy(ref_driver, sql, data).await;
                    (format!("{v:?}"), format!("{r:?}"))
                }
            };
            let diff = runner.compare_table(table).await;
            let counts = runner.tally.per_protocol.entry(protocol).or_default();
            if via == reference && diff.is_none() {
                counts.identical += 1;
            } else {
                counts.wrong += 1;
                runner.tally.wrong.push(Wrong {
                    item: format!("{sql} ({} rows; COPY FROM STDIN)", data.lines().count()),
                    protocol,
                    via,
                    reference,
                    why: diff
                        .map_or_else(|| "different outcome".to_owned(), |d| format!("table differs: {d}")),
                });
            }
            runner.tally.writes_compared += 1;
            // Through pgvia's raw connection (the driver's may be wedged), and on the reference.
            runner.via.run(Protocol::Simple, cleanup, &[]).await;
            runner.reference.run(Protocol::Simple, cleanup, &[]).await;
            if let Some(d) = runner.compare_table(table).await {
                if let Err(e) = runner.resync(table).await {
                    runner
                        .tally
                        .table_diffs
                        .push(format!("{table} after the COPY cases ({d}) could not be put back: {e}"));
                }
            }
        }
    }
}
