//! The faults, each applied to the shared world for a while and then lifted.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::toxiproxy::Stream;
use crate::common::{app_backends, connect, direct_conninfo, DB, PASSWORD, USER};
use crate::World;

/// Which link a toxic sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// Between the clients and pgvia (Toxiproxy's `client` proxy).
    Client,
    /// Between pgvia and PostgreSQL (Toxiproxy's `server` proxy).
    Server,
}

impl Leg {
    fn proxy(self) -> &'static str {
        match self {
            Leg::Client => "client",
            Leg::Server => "server",
        }
    }
}

pub enum Fault {
    /// Toxiproxy toxics (kind, direction, attributes) on one leg.
    Toxics(Leg, Vec<(&'static str, Stream, Value)>),
    /// `pg_terminate_backend` of every pgvia server of the pool.
    Terminate,
    /// `kill -9` of one busy backend: PostgreSQL then resets every backend (crash recovery).
    Kill9,
    /// `pg_ctl stop -m immediate`, then start again.
    Immediate,
}

pub struct Scenario {
    pub name: &'static str,
    pub fault: Fault,
    /// How long the fault stays before it is lifted.
    pub hold: Duration,
}

impl Scenario {
    pub fn leg(&self) -> Option<Leg> {
        match &self.fault {
            Fault::Toxics(leg, _) => Some(*leg),
            _ => None,
        }
    }

    /// A restart or crash of PostgreSQL ends every backend, the bystander's too.
    pub fn bystander_must_be_clean(&self) -> bool {
        !matches!(self.fault, Fault::Kill9 | Fault::Immediate)
    }

    pub async fn apply(&self, w: &World) {
        match &self.fault {
            Fault::Toxics(leg, toxics) => {
                for (kind, stream, attrs) in toxics {
                    w.toxi.add(leg.proxy(), kind, *stream, attrs.clone()).await;
                }
            }
            Fault::Terminate => {
                let op = connect(&direct_conninfo(&w.pg, USER, PASSWORD, DB)).await.unwrap();
                op.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE usename = $1 AND pid <> pg_backend_pid() AND application_name <> 'operator'",
                    &[&USER],
                )
                .await
                .unwrap();
            }
            Fault::Kill9 => {
                // A backend in the middle of something, if one is (else any).
                let op = connect(&direct_conninfo(&w.pg, USER, PASSWORD, DB)).await.unwrap();
                let busy: Option<i32> = op
                    .query_opt(
                        "SELECT pid FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid() \
                         ORDER BY state = 'idle' LIMIT 1",
                        &[&USER],
                    )
                    .await
                    .unwrap()
                    .map(|r| r.get(0));
                drop(op);
                let pid = busy.map(|p| p.to_string()).or_else(|| app_backends(&w.pg).into_iter().next());
                let pid = pid.expect("a backend of the pool to kill");
                let status = std::process::Command::new("kill").args(["-9", &pid]).status().unwrap();
                assert!(status.success(), "kill -9 {pid}");
            }
            Fault::Immediate => w.pg.stop_now().unwrap(),
        }
    }

    pub async fn lift(&self, w: &World) {
        match &self.fault {
            Fault::Toxics(leg, _) => w.toxi.clear(leg.proxy()).await,
            Fault::Immediate => w.pg.start_again().unwrap(),
            Fault::Terminate | Fault::Kill9 => {}
        }
    }
}

fn toxic(leg: Leg, kind: &'static str, stream: Stream, attrs: Value) -> Fault {
    Fault::Toxics(leg, vec![(kind, stream, attrs)])
}

fn both(leg: Leg, kind: &'static str, attrs: Value) -> Fault {
    Fault::Toxics(leg, vec![(kind, Stream::Upstream, attrs.clone()), (kind, Stream::Downstream, attrs)])
}

pub fn all() -> Vec<Scenario> {
    let s2 = Duration::from_secs(2);
    let s4 = Duration::from_secs(7);
    let mut out = Vec::new();
    for (leg, side) in [(Leg::Client, "client ↔ pgvia"), (Leg::Server, "pgvia ↔ PostgreSQL")] {
        let name = |what: &str| -> &'static str { Box::leak(format!("{what}, {side}").into_boxed_str()) };
        out.extend([
            Scenario {
                name: name("latency 200 ms ± 50 ms each way"),
                fault: both(leg, "latency", json!({"latency": 200, "jitter": 50})),
                hold: s2,
            },
            Scenario {
                name: name("bandwidth 8 KB/s each way"),
                fault: both(leg, "bandwidth", json!({"rate": 8})),
                hold: s2,
            },
            Scenario {
                name: name("fragmented writes (1-byte slices)"),
                fault: both(leg, "slicer", json!({"average_size": 1, "size_variation": 0, "delay": 50})),
                hold: s2,
            },
            Scenario {
                name: name("half-open: replies stop, closed after 1 s"),
                fault: toxic(leg, "timeout", Stream::Downstream, json!({"timeout": 1000})),
                hold: s2,
            },
            Scenario {
                name: name("reset mid-stream (reset_peer after 300 ms)"),
                fault: toxic(leg, "reset_peer", Stream::Downstream, json!({"timeout": 300})),
                hold: s2,
            },
            Scenario {
                name: name("cut mid-message (limit_data 700 bytes)"),
                fault: toxic(leg, "limit_data", Stream::Downstream, json!({"bytes": 700})),
                hold: s2,
            },
            Scenario {
                name: name("black hole (no data either way, never closed)"),
                fault: both(leg, "timeout", json!({"timeout": 0})),
                hold: s4,
            },
        ]);
    }
    out.extend([
        Scenario {
            name: "pg_terminate_backend of every server",
            fault: Fault::Terminate,
            hold: Duration::ZERO,
        },
        Scenario { name: "kill -9 of a busy backend", fault: Fault::Kill9, hold: Duration::ZERO },
        Scenario {
            name: "pg_ctl stop -m immediate, start after 1 s",
            fault: Fault::Immediate,
            hold: Duration::from_secs(1),
        },
    ]);
    out
}
