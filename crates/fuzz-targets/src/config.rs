//! The configuration parser and validator (`Config::parse`).
//!
//! Input: the text of a `pgvia.toml` (bytes that are not UTF-8 are not a file pgvia could
//! read). Errors are formatted as `pgvia check` prints them. Invariants: a configuration that
//! validates yields analyzer options the analyzer accepts, pool settings for every database
//! and user, and a fallback lookup that does not panic.

use std::path::Path;

use pgvia::config::Config;

pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::parse(text, Path::new("/fuzz/pgvia.toml")) {
        Ok(config) => {
            route::Analyzer::new(config.analyzer_options()).expect("validated analyzer options are accepted");
            for db in &config.databases {
                let _ = db.server_dbname();
                for user in &config.users {
                    let _ = config.pool_settings(db, user);
                    let _ = config.auth_method(user);
                }
            }
            let _ = config.database_for_client("fuzz_unlisted");
            let _ = format!("{config:?}");
        }
        Err(e) => {
            let _ = e.to_string();
            let _ = format!("{e:?}");
        }
    }
}
