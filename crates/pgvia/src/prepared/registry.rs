//! The statement registry: one immutable [`Statement`] per distinct (query, parameter types),
//! shared by pointer among every client and server that uses it.
//!
//! The global map is touched only on Parse, and only when the client's own map (see
//! [`super::ClientStatements`]) does not already have the statement: a read lock to find a
//! statement someone else registered, a write lock to register a new one. Bind, Describe,
//! Execute and Close never come here.
//!
//! Statement texts and parameter types come from clients, so the hash is keyed with a
//! random per-process seed: with a known seed, three parameter types chosen for it make
//! every statement hash alike (foldhash folds the sponge holding them with `seeds[0]`, and a
//! product with zero forgets the query), and every registration would scan one bucket.
//! Both the number of statements one client names and the number the registry holds are
//! capped ([`Caps`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};

/// References are counted in one atomic: clients in the low half, servers in the high half, so
/// "no one holds it" is one load and the transition to it is seen exactly once.
const CLIENT_REF: u64 = 1;
const SERVER_REF: u64 = 1 << 32;

/// Prefix of the names statements carry on servers.
pub const SERVER_NAME_PREFIX: &str = "pgvia_";

/// Immutable metadata of one prepared statement, shared by every client and server using it.
pub struct Statement {
    pub id: u64,
    /// The name servers know it by, `pgvia_<id>`, with its terminating NUL.
    server_name: Box<[u8]>,
    /// The text as the client sent it, in its `client_encoding` (not necessarily UTF-8).
    pub query: Box<[u8]>,
    pub param_types: Box<[u32]>,
    pub hash: u64,
    /// What the statement does, so binding it never analyses again.
    pub analysis: Arc<route::Analysis>,
    refs: AtomicU64,
    /// Bumped when a server reports the statement's plan stale (its tables changed shape):
    /// servers that parsed it in an older epoch parse it again before its next use.
    epoch: AtomicU64,
    /// The oldest schema generation (see [`Registry::schema_generation`]) a server's copy may
    /// have been parsed in to serve this statement. Raised by a client's fresh Parse, which on
    /// a dedicated server would parse against the catalog as it is now.
    fresh_from: AtomicU64,
}

impl std::fmt::Debug for Statement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Statement")
            .field("id", &self.id)
            .field("query", &String::from_utf8_lossy(&self.query))
            .finish()
    }
}

impl Statement {
    /// The server-side name with its NUL terminator, as it goes on the wire.
    pub fn server_name_cstr(&self) -> &[u8] {
        &self.server_name
    }

    /// The server-side name, for logs and tests.
    pub fn server_name(&self) -> &str {
        std::str::from_utf8(&self.server_name[..self.server_name.len() - 1]).unwrap_or("")
    }

    /// Whether this is the statement for `query` with `param_types`.
    pub fn matches(&self, hash: u64, query: &[u8], param_types: wire::reader::Oids<'_>) -> bool {
        self.hash == hash
            && *self.query == *query
            && self.param_types.len() == param_types.len()
            && self.param_types.iter().zip(param_types.iter()).all(|(a, b)| *a == b)
    }

    /// A Parse message creating this statement on a server, under `name` (with NUL) — pgvia's
    /// name, or the empty name for a client's unnamed statement.
    pub fn write_parse(&self, out: &mut BytesMut, name_cstr: &[u8]) {
        let len = 4 + name_cstr.len() + self.query.len() + 1 + 2 + 4 * self.param_types.len();
        out.reserve(1 + len);
        out.put_u8(wire::frontend::tag::PARSE);
        out.put_i32(len as i32);
        out.put_slice(name_cstr);
        out.put_slice(&self.query);
        out.put_u8(0);
        // At most 65,535: the types came from a client's Parse, whose count is 16 bits.
        out.put_u16(u16::try_from(self.param_types.len()).unwrap_or(u16::MAX));
        for oid in self.param_types.iter() {
            out.put_u32(*oid);
        }
    }

    /// Whether the statement was made by SQL `PREPARE` (its registry text is
    /// [`super::sql::SQL_PREPARE_KEY`] followed by what came after the client's name).
    pub fn is_sql(&self) -> bool {
        self.query.starts_with(super::sql::SQL_PREPARE_KEY.as_bytes())
    }

    /// For a statement made by SQL `PREPARE`: the query that makes it on a server under
    /// pgvia's name.
    pub fn sql_prepare(&self) -> Option<String> {
        let rest = self.query.strip_prefix(super::sql::SQL_PREPARE_KEY.as_bytes())?;
        // Made from a simple query that analysis read, so UTF-8.
        let rest = std::str::from_utf8(rest).ok()?;
        Some(format!("PREPARE {}{rest}", self.server_name()))
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// A server found the plan it made in `seen` stale; later uses elsewhere re-parse. Several
    /// servers reporting the same epoch bump it once.
    pub fn plan_went_stale(&self, seen: u64) {
        let _ = self.epoch.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// See the field: copies parsed before this schema generation are parsed again first.
    pub fn fresh_from(&self) -> u64 {
        self.fresh_from.load(Ordering::Acquire)
    }

    /// A client prepares the statement afresh in schema generation `generation`: server
    /// copies parsed before it no longer serve it. A plain load first, so the common case
    /// (nothing changed) writes nothing to the shared statement.
    pub fn require_generation(&self, generation: u64) {
        if self.fresh_from.load(Ordering::Acquire) < generation {
            self.fresh_from.fetch_max(generation, Ordering::AcqRel);
        }
    }

    pub fn client_refs(&self) -> u64 {
        self.refs.load(Ordering::Relaxed) & (SERVER_REF - 1)
    }

    pub fn server_refs(&self) -> u64 {
        self.refs.load(Ordering::Relaxed) >> 32
    }
}

/// How many prepared statements one client may name, and the registry may hold. Atomics,
/// so a reload changes them for every session at once.
#[derive(Debug)]
pub struct Caps {
    per_client: AtomicUsize,
    total: AtomicUsize,
}

impl Caps {
    /// The defaults of `max_prepared_statements_per_client` and
    /// `max_prepared_statements_total`.
    pub const DEFAULT_PER_CLIENT: usize = 10_000;
    pub const DEFAULT_TOTAL: usize = 100_000;

    pub fn set(&self, per_client: usize, total: usize) {
        self.per_client.store(per_client, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }

    pub fn per_client(&self) -> usize {
        self.per_client.load(Ordering::Relaxed)
    }

    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            per_client: AtomicUsize::new(Self::DEFAULT_PER_CLIENT),
            total: AtomicUsize::new(Self::DEFAULT_TOTAL),
        }
    }
}

/// A statement refused because a cap is reached. The session goes on: the client gets an
/// error in the Parse's (or `PREPARE`'s) place, as for any failed Parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StatementLimit {
    #[error("too many prepared statements in this session (max_prepared_statements_per_client = {0})")]
    PerClient(usize),
    #[error("too many prepared statements in pgvia (max_prepared_statements_total = {0})")]
    Total(usize),
}

impl StatementLimit {
    pub const SQLSTATE: wire::sqlstate::SqlState = wire::sqlstate::SqlState::CONFIGURATION_LIMIT_EXCEEDED;

    pub fn hint(&self) -> &'static str {
        match self {
            Self::PerClient(_) => {
                "Close or DEALLOCATE statements no longer needed, or raise max_prepared_statements_per_client in pgvia's configuration."
            }
            Self::Total(_) => "Raise max_prepared_statements_total in pgvia's configuration.",
        }
    }

    /// The ErrorResponse the client gets.
    pub fn write_error(&self, out: &mut BytesMut) {
        let message = self.to_string();
        wire::build::ErrorFields::error(Self::SQLSTATE, &message).with_hint(self.hint()).write(out);
    }
}

/// When the registry may drop statements nobody references.
#[derive(Debug, Clone, Copy)]
pub struct PurgePolicy {
    /// Purge only while the registry holds more statements than this.
    pub max_statements: usize,
    /// ... and at least this many of them are unreferenced ...
    pub min_unreferenced: usize,
    /// ... and this long has passed since the last purge.
    pub min_interval: Duration,
}

impl Default for PurgePolicy {
    fn default() -> Self {
        Self { max_statements: 10_000, min_unreferenced: 1_000, min_interval: Duration::from_secs(1) }
    }
}

/// Counters for operators; relaxed atomics, summed on read.
#[derive(Debug, Default)]
pub struct RegistryStats {
    /// Parses the client's own map answered (no lock).
    pub client_hits: AtomicU64,
    /// Parses found in the registry under the read lock.
    pub registry_hits: AtomicU64,
    /// Parses that registered a new statement.
    pub registered: AtomicU64,
    /// Parses pgvia sent ahead of a client's Bind or Describe because its server lacked the
    /// statement.
    pub injected_parses: AtomicU64,
    /// Client Parses answered without the server (it held the statement already).
    pub parses_skipped: AtomicU64,
    /// Statements closed on servers to keep their per-connection cache bounded.
    pub evictions: AtomicU64,
    pub purges: AtomicU64,
    pub purged: AtomicU64,
    /// Exchanges sent again after a stale plan (`cached plan must not change result type`).
    pub stale_plan_retries: AtomicU64,
    /// Queries that may have changed the schema, and ends of their transactions.
    pub schema_changes: AtomicU64,
}

/// A point-in-time copy of the registry's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistrySnapshot {
    pub statements: usize,
    pub unreferenced: usize,
    pub client_hits: u64,
    pub registry_hits: u64,
    pub registered: u64,
    pub injected_parses: u64,
    pub parses_skipped: u64,
    pub evictions: u64,
    pub purges: u64,
    pub purged: u64,
    pub stale_plan_retries: u64,
}

/// Collisions of the 64-bit hash are kept side by side.
type Buckets = HashMap<u64, Vec<Arc<Statement>>, foldhash::fast::RandomState>;

pub struct Registry {
    map: RwLock<Buckets>,
    /// Keys [`Self::hash`] with this process's own random seed (SipHash-1-3).
    seed: RandomState,
    pub caps: Caps,
    next_id: AtomicU64,
    /// Statement count and unreferenced count, readable without the lock for the purge
    /// pre-check.
    len: AtomicUsize,
    unreferenced: AtomicUsize,
    policy: PurgePolicy,
    created: Instant,
    /// Milliseconds since `created` at the last purge.
    last_purge_ms: AtomicU64,
    pub stats: RegistryStats,
    /// Bumped whenever a client's query may have changed the schema (DDL, `DO`, `CALL`, SQL
    /// pgvia could not read) and again when the transaction that sent it ends: a statement a
    /// server parsed in an older generation may hold type OIDs or a result shape that no
    /// longer exist, so it does not answer a fresh Parse.
    schema_generation: AtomicU64,
}

impl Registry {
    pub fn new(policy: PurgePolicy) -> Self {
        Self {
            map: RwLock::new(Buckets::default()),
            seed: RandomState::new(),
            caps: Caps::default(),
            next_id: AtomicU64::new(1),
            len: AtomicUsize::new(0),
            unreferenced: AtomicUsize::new(0),
            policy,
            created: Instant::now(),
            last_purge_ms: AtomicU64::new(0),
            stats: RegistryStats::default(),
            schema_generation: AtomicU64::new(0),
        }
    }

    /// A name of pgvia's shape that no statement has or will have: for a statement pgvia
    /// makes on a server for a moment (see `server::sql_names`).
    pub fn scratch_name(&self) -> String {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{SERVER_NAME_PREFIX}{id}")
    }

    /// The current schema generation (see the field).
    pub fn schema_generation(&self) -> u64 {
        self.schema_generation.load(Ordering::Acquire)
    }

    /// A query that may change the schema was sent, or its transaction ended.
    pub fn schema_changed(&self) {
        self.stats.schema_changes.fetch_add(1, Ordering::Relaxed);
        self.schema_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Hashes a statement's identity: its text and its declared parameter types.
    pub fn hash(&self, query: &[u8], param_types: wire::reader::Oids<'_>) -> u64 {
        let mut h = self.seed.build_hasher();
        h.write(query);
        h.write_usize(param_types.len());
        for oid in param_types.iter() {
            h.write_u32(oid);
        }
        h.finish()
    }

    /// The statement for this text and these parameter types, registered if new, with one
    /// client reference taken for the caller. `analyze` runs only for a new statement, and a
    /// new one is refused while the registry holds `max_prepared_statements_total`.
    pub fn acquire(
        &self,
        query: &[u8],
        param_types: wire::reader::Oids<'_>,
        hash: u64,
        analyze: impl FnOnce() -> Arc<route::Analysis>,
    ) -> Result<Arc<Statement>, StatementLimit> {
        {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            if let Some(found) = find(&map, hash, query, param_types) {
                // Taken under the read lock, so a purge (which needs the write lock) sees it.
                self.add_ref(&found, CLIENT_REF);
                // A Parse this client did not make before: fresh, as on a dedicated server.
                found.require_generation(self.schema_generation());
                self.stats.registry_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(found);
            }
        }
        self.make_room()?;
        // Analyse outside the lock; a concurrent registration of the same statement wins.
        let analysis = analyze();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut server_name = format!("{SERVER_NAME_PREFIX}{id}").into_bytes();
        server_name.push(0);
        let fresh = Arc::new(Statement {
            id,
            server_name: server_name.into_boxed_slice(),
            query: query.into(),
            param_types: param_types.iter().collect(),
            hash,
            analysis,
            refs: AtomicU64::new(CLIENT_REF),
            epoch: AtomicU64::new(0),
            fresh_from: AtomicU64::new(self.schema_generation()),
        });
        let stmt = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            if let Some(found) = find(&map, hash, query, param_types) {
                self.add_ref(&found, CLIENT_REF);
                found.require_generation(self.schema_generation());
                self.stats.registry_hits.fetch_add(1, Ordering::Relaxed);
                found
            } else {
                map.entry(hash).or_default().push(fresh.clone());
                self.len.fetch_add(1, Ordering::Relaxed);
                self.stats.registered.fetch_add(1, Ordering::Relaxed);
                fresh
            }
        };
        self.maybe_purge();
        Ok(stmt)
    }

    /// Below the total cap, or brought below it by dropping unreferenced statements. A purge
    /// costs a pass over the registry under the write lock, so at the cap it runs only when it
    /// frees an eighth of the cap (amortised: constant work per registration) or when the
    /// purge interval has passed; otherwise the statement is refused.
    fn make_room(&self) -> Result<(), StatementLimit> {
        let total = self.caps.total();
        if self.len.load(Ordering::Relaxed) < total {
            return Ok(());
        }
        let unreferenced = self.unreferenced.load(Ordering::Relaxed);
        let now_ms = self.created.elapsed().as_millis() as u64;
        let last = self.last_purge_ms.load(Ordering::Relaxed);
        let due = now_ms.saturating_sub(last) >= self.policy.min_interval.as_millis() as u64;
        if unreferenced > 0
            && (unreferenced >= total / 8 || due)
            && self.last_purge_ms.compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            self.purge_unreferenced();
        }
        if self.len.load(Ordering::Relaxed) < total {
            Ok(())
        } else {
            Err(StatementLimit::Total(total))
        }
    }

    /// Takes a reference of the given kind on a statement the caller already holds.
    fn add_ref(&self, stmt: &Statement, one: u64) {
        if stmt.refs.fetch_add(one, Ordering::AcqRel) == 0 {
            dec_saturating(&self.unreferenced);
        }
    }

    fn drop_ref(&self, stmt: &Statement, one: u64) {
        if stmt.refs.fetch_sub(one, Ordering::AcqRel) == one {
            self.unreferenced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A client (another name, or the same statement again) takes a reference.
    pub fn add_client_ref(&self, stmt: &Statement) {
        self.add_ref(stmt, CLIENT_REF);
    }

    pub fn release_client(&self, stmt: &Statement) {
        self.drop_ref(stmt, CLIENT_REF);
    }

    pub fn add_server_ref(&self, stmt: &Statement) {
        self.add_ref(stmt, SERVER_REF);
    }

    pub fn release_server(&self, stmt: &Statement) {
        self.drop_ref(stmt, SERVER_REF);
    }

    /// Phase one, without a lock: is a purge worth taking the write lock for? Phase two,
    /// under the lock: drop what is still unreferenced.
    fn maybe_purge(&self) {
        let p = &self.policy;
        if self.len.load(Ordering::Relaxed) <= p.max_statements
            || self.unreferenced.load(Ordering::Relaxed) < p.min_unreferenced
        {
            return;
        }
        let now_ms = self.created.elapsed().as_millis() as u64;
        let last = self.last_purge_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < p.min_interval.as_millis() as u64 {
            return;
        }
        // One purger at a time; the others go on.
        if self.last_purge_ms.compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        self.purge_unreferenced();
    }

    /// Removes every statement no client and no server references. Returns how many.
    pub fn purge_unreferenced(&self) -> usize {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let mut removed = 0;
        map.retain(|_, bucket| {
            bucket.retain(|s| {
                // Under the write lock no one can find the statement to take a new reference.
                let keep = s.refs.load(Ordering::Acquire) != 0;
                removed += usize::from(!keep);
                keep
            });
            !bucket.is_empty()
        });
        drop(map);
        dec_saturating_by(&self.len, removed);
        dec_saturating_by(&self.unreferenced, removed);
        self.stats.purges.fetch_add(1, Ordering::Relaxed);
        self.stats.purged.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    pub fn snapshot(&self) -> RegistrySnapshot {
        let s = &self.stats;
        RegistrySnapshot {
            statements: self.len.load(Ordering::Relaxed),
            unreferenced: self.unreferenced.load(Ordering::Relaxed),
            client_hits: s.client_hits.load(Ordering::Relaxed),
            registry_hits: s.registry_hits.load(Ordering::Relaxed),
            registered: s.registered.load(Ordering::Relaxed),
            injected_parses: s.injected_parses.load(Ordering::Relaxed),
            parses_skipped: s.parses_skipped.load(Ordering::Relaxed),
            evictions: s.evictions.load(Ordering::Relaxed),
            purges: s.purges.load(Ordering::Relaxed),
            purged: s.purged.load(Ordering::Relaxed),
            stale_plan_retries: s.stale_plan_retries.load(Ordering::Relaxed),
        }
    }

    /// Every registered statement, for the admin console.
    pub fn statements(&self) -> Vec<Arc<Statement>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().flatten().cloned().collect()
    }
}

fn find(
    map: &Buckets,
    hash: u64,
    query: &[u8],
    param_types: wire::reader::Oids<'_>,
) -> Option<Arc<Statement>> {
    map.get(&hash)?.iter().find(|s| s.matches(hash, query, param_types)).cloned()
}

fn dec_saturating(a: &AtomicUsize) {
    dec_saturating_by(a, 1);
}

fn dec_saturating_by(a: &AtomicUsize, n: usize) {
    let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
}
