//! What each fuzz target does with its input, as plain functions.
//!
//! The cargo-fuzz project (`fuzz/`, nightly, libFuzzer) calls one of these per target; this
//! crate's own test (`tests/replay.rs`, stable) runs every committed seed and every saved crash
//! through the same function, so an input that once crashed stays a regression test. A target
//! fails by panicking: on a decoder's panic, or on an `assert!` of an invariant stated here.
//!
//! [`TARGETS`] is the one list of targets; `scripts/fuzz` and the replay test both read it.

pub mod config;
pub mod scram;
pub mod seeds;
pub mod split;
pub mod sql;
pub mod startup;
pub mod tracker;
pub mod wire_frames;

pub use config::config;
pub use scram::{client as scram_client, server as scram_server};
pub use sql::{analyze, shape};
pub use startup::startup;
pub use tracker::tracker;
pub use wire_frames::{backend, frontend};

/// A target's name (as in `fuzz/fuzz_targets/<name>.rs` and `fuzz/seeds/<name>/`) and body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order `scripts/fuzz` runs them.
pub const TARGETS: &[Target] = &[
    ("frontend", wire_frames::frontend),
    ("backend", wire_frames::backend),
    ("startup", startup::startup),
    ("scram_server", scram::server),
    ("scram_client", scram::client),
    ("config", config::config),
    ("analyze", sql::analyze),
    ("shape", sql::shape),
    ("tracker", tracker::tracker),
];

/// The body of the target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
