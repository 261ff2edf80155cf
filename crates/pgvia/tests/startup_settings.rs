//! Settings a client gives at startup (parameters and `options=-c ...`) take effect on the
//! server it is given, end up reported exactly as PostgreSQL reports them, and do not follow
//! the server to the next client.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use common::raw::{describe, query, RawConn};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};

const SETTINGS: &[&str] = &[
    "application_name",
    "DateStyle",
    "TimeZone",
    "extra_float_digits",
    "search_path",
    "work_mem",
    "statement_timeout",
];

/// What a client ends up with: every ParameterStatus received up to the end of its first
/// query, folded in order, and the settings as the server reports them.
#[derive(Debug, PartialEq, Eq)]
struct View {
    reported: BTreeMap<String, String>,
    settings: Vec<String>,
}

async fn view(addr: SocketAddr, params: &[(&str, &str)]) -> View {
    let mut all = vec![("database", DB)];
    all.extend_from_slice(params);
    let mut conn = RawConn::login_with(addr, USER, PASSWORD, &all)
        .await
        .unwrap_or_else(|e| panic!("login with {params:?} at {addr}: {e:?}"));
    let select: Vec<String> = SETTINGS.iter().map(|s| format!("current_setting('{s}')")).collect();
    conn.send(&query(&format!("select {}", select.join(", ")))).await;
    let replies = conn.until_ready().await;
    let mut reported = BTreeMap::new();
    for m in conn.login_messages.iter().chain(&replies) {
        if let Some((k, v)) = m.parameter() {
            reported.insert(k, v);
        }
    }
    let row = replies.iter().find(|m| m.tag == b'D').unwrap_or_else(|| panic!("{:?}", describe(&replies)));
    View { reported, settings: data_row(&row.body) }
}

fn data_row(body: &[u8]) -> Vec<String> {
    let n = u16::from_be_bytes([body[0], body[1]]);
    let mut rest = &body[2..];
    (0..n)
        .map(|_| {
            let len = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let len = usize::try_from(len).expect("no NULL settings");
            let v = String::from_utf8_lossy(&rest[4..4 + len]).into_owned();
            rest = &rest[4 + len..];
            v
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_settings_apply_like_direct_and_do_not_leak() {
    let pg = start_pg();
    // One server: every session below reuses it after the previous one's reset.
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_size = 1")).await;
    let direct: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();
    let cases: &[&[(&str, &str)]] = &[
        &[("application_name", "reporting job"), ("DateStyle", "SQL, DMY"), ("TimeZone", "Europe/Paris")],
        &[
            ("application_name", "opts"),
            ("options", "-c search_path=pg_catalog,public -c work_mem=12MB --statement-timeout=5s"),
            ("extra_float_digits", "2"),
        ],
        // Spelled differently from how PostgreSQL reports them.
        &[
            ("application_name", "héllo"),
            ("datestyle", "iso, dmy"),
            ("TimeZone", "utc"),
            ("client_encoding", "utf8"),
        ],
        // Nothing but a name: everything else must be back to the defaults.
        &[("application_name", "plain")],
    ];
    for params in cases {
        let via = view(proxy.addr, params).await;
        let direct = view(direct, params).await;
        assert_eq!(
            via.settings, direct.settings,
            "settings with {params:?}: through pgvia (left), direct (right)"
        );
        assert_eq!(via.reported, direct.reported, "ParameterStatus with {params:?}: through pgvia, direct");
    }
    let pools = proxy.app.pools.all();
    assert_eq!(pools[0].stats.servers_created.load(Ordering::Relaxed), 1, "the one server was reused");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// (severity, SQLSTATE, message) of a login that must be refused.
async fn refused(addr: SocketAddr, params: &[(&str, &str)]) -> (String, String, String) {
    let mut all = vec![("database", DB)];
    all.extend_from_slice(params);
    let conn = match RawConn::login_with(addr, USER, PASSWORD, &all).await {
        Ok(mut conn) => {
            // Logged in: show what the first query gets, for the failure message.
            conn.send(&query("select 1")).await;
            let replies = conn.until_closed(std::time::Duration::from_secs(5)).await.unwrap_or_default();
            panic!("login with {params:?} at {addr} succeeded; first query got {:?}", describe(&replies));
        }
        Err(e) => e.refused(),
    };
    let f = conn.fields();
    (f[&'S'].clone(), f[&'C'].clone(), f[&'M'].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_startup_settings_are_refused_at_login() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let direct: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();
    for params in [&[("options", "-c work_mem=bogus")][..], &[("no_such_setting", "1")][..]] {
        let expected = refused(direct, params).await;
        assert_eq!(refused(proxy.addr, params).await, expected, "{params:?}");
    }
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
