//! `[auth_query]`: users the file does not list, looked up in PostgreSQL when they log in.
//!
//! A login by a name no `[[users]]` entry has runs `query` (as `user`, in `database`) and
//! takes the stored secret it returns, so roles created or re-keyed in PostgreSQL log in
//! with no reload. Their pools are made on demand and closed when idle, under a cap.

use std::time::Duration;

use serde::Deserialize;

use super::{values, AuthMethod, Config, Password, User};

/// `[auth_query]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthQuery {
    /// SQL returning the role's name and stored secret (`rolpassword`: a SCRAM verifier or an
    /// MD5 hash), where `$1` stands for the name the client gave. Required.
    pub query: String,
    /// The `[[users]]` entry pgvia runs the query as. Required.
    pub user: String,
    /// The `[[databases]]` entry the query runs in. Required.
    pub database: String,
    /// How long a looked-up secret (or a role found missing) is used before it is fetched
    /// again. Default `"60s"`, more than zero.
    #[serde(default = "default_cache_ttl", deserialize_with = "values::duration")]
    pub cache_ttl: Duration,
    /// How long the query may take. Default `"5s"`, more than zero.
    #[serde(default = "default_timeout", deserialize_with = "values::duration")]
    pub timeout: Duration,
    /// Pools of looked-up users with no client for this long are closed. Default `"60s"`.
    #[serde(default = "default_cache_ttl", deserialize_with = "values::duration")]
    pub pool_idle_timeout: Duration,
    /// Most pools of looked-up users at once. Default 100, at least 1.
    #[serde(default = "default_max_pools")]
    pub max_pools: u32,
}

pub(crate) fn default_cache_ttl() -> Duration {
    Duration::from_secs(60)
}

pub(crate) fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

pub(crate) fn default_max_pools() -> u32 {
    100
}

impl AuthQuery {
    /// The query with `$1` replaced by `user` as a dollar-quoted literal. A dollar-quoted
    /// string has no escapes, so whatever the name holds it stays one literal: the tag is
    /// chosen so that it does not occur in the name.
    pub fn query_for(&self, user: &str) -> String {
        let mut tag = String::from("pgvia");
        while user.contains(&format!("${tag}$")) || user.ends_with(&format!("${tag}")) {
            tag.push('x');
        }
        self.query.replace("$1", &format!("${tag}${user}${tag}$"))
    }
}

/// Problems with the section, as (key, message).
pub(crate) fn problems(aq: &AuthQuery, config: &Config) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if !aq.query.contains("$1") {
        out.push(("auth_query.query", "must contain $1, where the user name goes".to_owned()));
    }
    if config.user(&aq.user).is_none() {
        out.push(("auth_query.user", format!("{:?} is not a [[users]] entry", aq.user)));
    }
    if config.database(&aq.database).is_none() {
        out.push(("auth_query.database", format!("{:?} is not a [[databases]] entry", aq.database)));
    }
    for (key, value) in [("auth_query.cache_ttl", aq.cache_ttl), ("auth_query.timeout", aq.timeout)] {
        if value.is_zero() {
            out.push((key, "must be more than zero".to_owned()));
        }
    }
    if aq.max_pools == 0 {
        out.push(("auth_query.max_pools", "must be at least 1".to_owned()));
    }
    if matches!(config.general.auth_method, AuthMethod::Trust | AuthMethod::Cert) {
        out.push((
            "auth_query",
            format!(
                "looked-up users log in with general.auth_method, which is \"{}\": it checks no password",
                config.general.auth_method
            ),
        ));
    }
    out
}

impl User {
    /// A user found by `[auth_query]`: its stored secret, and every other setting from the
    /// database and `[pool]`.
    pub fn looked_up(name: &str, secret: &str) -> User {
        User {
            name: name.to_owned(),
            password: Some(Password::new(secret)),
            auth_method: None,
            admin: false,
            server_password: None,
            max_client_connections: None,
            default_role: None,
            pool_mode: None,
            pool_size: None,
            min_idle: None,
            connect_timeout: None,
            checkout_timeout: None,
            idle_timeout: None,
            max_lifetime: None,
            client_idle_timeout: None,
            idle_in_transaction_timeout: None,
            query_timeout: None,
            max_prepared_statements: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const BASE: &str =
        "[general]\nauth_method = \"scram-sha-256\"\n[[databases]]\nname = \"app\"\nhost = \"h\"\n\
                        [[users]]\nname = \"lookup\"\npassword = \"pw\"\n";

    fn parse(section: &str) -> Result<Config, String> {
        Config::parse(&format!("{BASE}{section}"), std::path::Path::new("/tmp/x.toml"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_valid_section_with_defaults() {
        let c = parse("[auth_query]\nquery = \"SELECT usename, passwd FROM lookup($1)\"\nuser = \"lookup\"\ndatabase = \"app\"\n")
            .unwrap();
        let aq = c.auth_query.unwrap();
        assert_eq!(aq.cache_ttl, Duration::from_secs(60));
        assert_eq!(aq.max_pools, 100);
    }

    #[test]
    fn each_problem_is_reported() {
        let e = parse(
            "[auth_query]\nquery = \"SELECT 1\"\nuser = \"nobody\"\ndatabase = \"nowhere\"\ncache_ttl = \"0s\"\nmax_pools = 0\n",
        )
        .unwrap_err();
        for key in [
            "auth_query.query",
            "auth_query.user",
            "auth_query.database",
            "auth_query.cache_ttl",
            "auth_query.max_pools",
        ] {
            assert!(e.contains(key), "{key}: {e}");
        }
        assert!(parse("[auth_query]\nquery = \"$1\"\nuser = \"lookup\"\ndatabase = \"app\"\nttl = \"1s\"\n")
            .is_err());
    }

    #[test]
    fn the_name_stays_one_literal() {
        let aq = AuthQuery {
            query: "SELECT * FROM f($1)".into(),
            user: String::new(),
            database: String::new(),
            cache_ttl: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            pool_idle_timeout: Duration::from_secs(1),
            max_pools: 1,
        };
        assert_eq!(aq.query_for("bob"), "SELECT * FROM f($pgvia$bob$pgvia$)");
        assert_eq!(aq.query_for("x$pgvia$); DROP"), "SELECT * FROM f($pgviax$x$pgvia$); DROP$pgviax$)");
        assert_eq!(aq.query_for("a$pgvia"), "SELECT * FROM f($pgviax$a$pgvia$pgviax$)");
    }
}
