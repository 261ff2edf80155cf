//! What a client cannot do to the statements of others: make every statement hash alike,
//! register without bound, or reach pgvia's own names.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use wire::frontend::Oids;

use super::*;

fn analyzer() -> route::Analyzer {
    route::Analyzer::new(route::AnalyzerOptions::default()).expect("default options")
}

/// Three parameter types chosen against foldhash's fixed seed: the first two fill the
/// sponge's high half with `seeds[0]` (0xc0ac29b7_c97c50dd), so the fold multiplies by
/// zero and forgets the query; the third is anything.
const CHOSEN: [u32; 3] = [0xc97c_50dd, 0xc0ac_29b7, 23];

fn chosen_types() -> Vec<u8> {
    CHOSEN.iter().flat_map(|t| t.to_be_bytes()).collect()
}

/// The hash the registry used before: foldhash with a fixed, public seed.
fn fixed_seed_hash(query: &str, param_types: Oids<'_>) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(0x7067_7669_6120_7073).build_hasher();
    h.write(query.as_bytes());
    h.write_usize(param_types.len());
    for oid in param_types.iter() {
        h.write_u32(oid);
    }
    h.finish()
}

#[test]
fn three_chosen_parameter_types_no_longer_make_every_statement_collide() {
    let types = chosen_types();
    let queries: Vec<String> = (0..1000).map(|i| format!("SELECT {i}")).collect();
    // The attack on a public seed: a thousand different statements, one hash.
    let old: HashSet<u64> = queries.iter().map(|q| fixed_seed_hash(q, Oids::new(&types))).collect();
    assert_eq!(old.len(), 1, "the fixed seed lets chosen types collide");

    let reg = Registry::new(PurgePolicy::default());
    let new: HashSet<u64> = queries.iter().map(|q| reg.hash(q.as_bytes(), Oids::new(&types))).collect();
    assert_eq!(new.len(), queries.len(), "the per-process seed keeps them apart");
    // And the seed is the process's own: another registry hashes differently.
    let other = Registry::new(PurgePolicy::default());
    assert_ne!(reg.hash(b"SELECT 1", Oids::new(&types)), other.hash(b"SELECT 1", Oids::new(&types)));
}

#[test]
fn a_client_past_its_cap_is_refused_before_any_lookup() {
    let reg = Arc::new(Registry::new(PurgePolicy::default()));
    reg.caps.set(2, 100);
    let a = analyzer();
    let mut client = ClientStatements::new(reg.clone());
    for (name, sql) in [("a", "SELECT 1"), ("b", "SELECT 2")] {
        client.admit(name).expect("below the cap");
        let stmt =
            client.resolve(sql.as_bytes(), Oids::new(&[]), || a.analyze(sql, &[])).expect("registered");
        client.bind_name(name, stmt).expect("new name");
    }
    assert_eq!(client.admit("c").unwrap_err(), StatementLimit::PerClient(2));
    assert!(client.admit("a").is_ok(), "a name in use goes on to get PostgreSQL's 42P05");
    assert!(client.admit("").is_ok(), "the unnamed statement is replaced, never counted");
    let error = StatementLimit::PerClient(2).to_string();
    assert_eq!(
        error,
        "too many prepared statements in this session (max_prepared_statements_per_client = 2)"
    );
    // Closing one makes room.
    let closed = client.unbind("a").expect("bound");
    client.release(&closed);
    assert!(client.admit("c").is_ok());
}

#[test]
fn the_registry_is_capped_and_makes_room_from_unreferenced_statements() {
    let reg = Arc::new(Registry::new(PurgePolicy::default()));
    reg.caps.set(100, 3);
    let a = analyzer();
    let mut client = ClientStatements::new(reg.clone());
    let mut held = Vec::new();
    for i in 0..3 {
        let sql = format!("SELECT {i}");
        held.push(
            client.resolve(sql.as_bytes(), Oids::new(&[]), || a.analyze(&sql, &[])).expect("below the cap"),
        );
    }
    let refused = client.resolve(b"SELECT 'new'", Oids::new(&[]), || a.analyze("SELECT 'new'", &[]));
    assert_eq!(refused.unwrap_err(), StatementLimit::Total(3));
    // A statement already registered is never refused.
    let again = client.resolve(b"SELECT 0", Oids::new(&[]), || unreachable!("registered")).expect("found");
    reg.release_client(&again);
    // Once nobody references one, a new statement takes its place.
    reg.release_client(&held.remove(0));
    let fits = client.resolve(b"SELECT 'new'", Oids::new(&[]), || a.analyze("SELECT 'new'", &[]));
    let fits = fits.expect("room made by a purge");
    assert_eq!(reg.snapshot().statements, 3);
    for s in held.iter().chain([&fits]) {
        reg.release_client(s);
    }
}

#[test]
fn pgvia_names_are_recognised() {
    for name in ["pgvia_1", "pgvia_0", "pgvia_123456789012345678901"] {
        assert!(is_reserved_name(name), "{name}");
    }
    for name in ["pgvia_", "pgvia_1a", "Pgvia_1", "my_pgvia_1", "pgvia", "s1", ""] {
        assert!(!is_reserved_name(name), "{name}");
    }
}
