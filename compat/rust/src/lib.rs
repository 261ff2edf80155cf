//! Settings for the Rust driver suites, from the environment compat/run sets: `COMPAT_URL` is
//! PostgreSQL directly or pgvia, and every test must pass on both.

use std::time::Duration;

/// The connection URL; panics with a hint when the suite is run outside compat/run.
pub fn url() -> String {
    std::env::var("COMPAT_URL").expect("COMPAT_URL is not set: run the suite through compat/run")
}

/// How long the stress tests run (`COMPAT_STRESS_SECONDS`, default 10).
pub fn stress_duration() -> Duration {
    Duration::from_secs(env_number("COMPAT_STRESS_SECONDS", 10))
}

/// How many clients the stress tests start (`COMPAT_STRESS_CLIENTS`, default 50).
pub fn stress_clients() -> u64 {
    env_number("COMPAT_STRESS_CLIENTS", 50)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small seeded generator, so every stress client's sequence of work can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
