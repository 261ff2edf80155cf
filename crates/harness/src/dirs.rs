//! Where clusters live: an explicit directory must be new or empty, and whether directories
//! are kept after a test.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{HarnessError, IoContext};

/// Set to `1` to keep cluster directories (data, log) after a test for post-mortems.
pub const KEEP_ENV: &str = "PGVIA_KEEP_CLUSTERS";

pub(crate) fn keep_clusters() -> bool {
    std::env::var(KEEP_ENV).is_ok_and(|v| v == "1")
}

/// An explicit cluster dir must be new or empty: silently reusing an old
/// data dir would hand a test stale state.
pub(crate) fn prepare_dir(dir: &Path) -> Result<PathBuf, HarnessError> {
    fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    let dir = fs::canonicalize(dir).ctx(|| format!("resolve {}", dir.display()))?;
    let mut entries = fs::read_dir(&dir).ctx(|| format!("list {}", dir.display()))?;
    if entries.next().is_some() {
        return Err(HarnessError::InvalidOption(format!(
            "{} is not empty; stop and remove the old cluster first",
            dir.display()
        )));
    }
    Ok(dir)
}
