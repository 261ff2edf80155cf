//! Rendering of postgresql.conf / pg_hba.conf fragments and SQL/URL quoting.

use std::fmt;
use std::str::FromStr;

use crate::HarnessError;

/// Authentication method for TCP (`host`) connections. Unix-socket
/// connections are always `trust` so the harness can administer the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HbaAuth {
    Trust,
    /// The password in clear text (`password` in pg_hba.conf).
    Password,
    /// A TLS client certificate whose CN is the user name (`hostssl ... cert`; needs
    /// `ClusterOptions::ssl_ca`).
    Cert,
    Md5,
    #[default]
    ScramSha256,
}

impl HbaAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            HbaAuth::Trust => "trust",
            HbaAuth::Password => "password",
            HbaAuth::Cert => "cert",
            HbaAuth::Md5 => "md5",
            HbaAuth::ScramSha256 => "scram-sha-256",
        }
    }

    /// How passwords are stored by default, so roles created with plain
    /// `CREATE ROLE ... PASSWORD` can authenticate with this method.
    pub(crate) fn password_encryption(self) -> &'static str {
        match self {
            HbaAuth::Md5 => "md5",
            HbaAuth::Trust | HbaAuth::Password | HbaAuth::Cert | HbaAuth::ScramSha256 => "scram-sha-256",
        }
    }
}

impl fmt::Display for HbaAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HbaAuth {
    type Err = HarnessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trust" => Ok(HbaAuth::Trust),
            "password" => Ok(HbaAuth::Password),
            "cert" => Ok(HbaAuth::Cert),
            "md5" => Ok(HbaAuth::Md5),
            "scram-sha-256" | "scram" => Ok(HbaAuth::ScramSha256),
            other => Err(HarnessError::InvalidOption(format!(
                "auth method `{other}` (expected trust, password, cert, md5 or scram-sha-256)"
            ))),
        }
    }
}

/// Replaces the initdb-generated pg_hba.conf entirely, so nothing permissive
/// (e.g. `host ... trust`) lingers to mask auth bugs under test.
///
/// Replicas (`Cluster::start_replica`) stream from their primary over its unix
/// socket, which `local replication all trust` admits: the `postgres` superuser
/// they connect as has no password, and TCP auth stays exactly what the tests
/// chose, with no `host ... trust` line of any kind.
pub(crate) fn hba_conf(auth: HbaAuth) -> String {
    let m = auth.as_str();
    // Certificates exist only over TLS.
    let host = if auth == HbaAuth::Cert { "hostssl" } else { "host " };
    format!(
        "# Written by pgvia's test harness.\n\
         local all         all                trust\n\
         {host} all         all  127.0.0.1/32  {m}\n\
         {host} all         all  ::1/128       {m}\n\
         local replication all                trust\n"
    )
}

/// `key = 'value'` lines. Every value is quoted: the server accepts quoted
/// numbers and booleans, and quoting makes arbitrary strings safe.
pub(crate) fn render_settings(settings: &[(String, String)]) -> Result<String, HarnessError> {
    let mut out = String::new();
    for (key, value) in settings {
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(HarnessError::InvalidOption(format!("setting name `{key}`")));
        }
        if value.contains('\n') {
            return Err(HarnessError::InvalidOption(format!("newline in value of setting `{key}`")));
        }
        out.push_str(&format!("{key} = {}\n", quote_literal(value)));
    }
    Ok(out)
}

/// Parses `key=value` as given on pgharness's command line.
pub fn parse_setting(kv: &str) -> Result<(String, String), HarnessError> {
    match kv.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(HarnessError::InvalidOption(format!("setting `{kv}` (expected key=value)"))),
    }
}

/// SQL string literal (standard_conforming_strings is on in every supported version).
pub(crate) fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// SQL identifier, always quoted so names are taken verbatim.
pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Percent-encodes everything but RFC 3986 unreserved characters, which is
/// always valid in the userinfo and path of a postgres:// URL.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(url_encode("p@ss w:rd/é"), "p%40ss%20w%3Ard%2F%C3%A9");
    }

    #[test]
    fn settings() {
        let s = render_settings(&[("work_mem".into(), "4MB".into())]).expect("render");
        assert_eq!(s, "work_mem = '4MB'\n");
        assert!(render_settings(&[("bad key".into(), "1".into())]).is_err());
        assert_eq!(parse_setting("a = b=c").expect("parse"), ("a".into(), "b=c".into()));
        assert!(parse_setting("=x").is_err());
    }

    #[test]
    fn auth_names() {
        for a in [HbaAuth::Trust, HbaAuth::Md5, HbaAuth::ScramSha256] {
            assert_eq!(a.as_str().parse::<HbaAuth>().expect("parse"), a);
        }
        let hba = hba_conf(HbaAuth::Md5);
        assert!(hba.contains("host  all         all  127.0.0.1/32  md5"));
        // Nothing is trusted over TCP; replication is over the unix socket.
        assert!(!hba.lines().any(|l| l.starts_with("host") && l.ends_with("trust")));
        assert!(hba.contains("local replication all                trust"));
    }
}
