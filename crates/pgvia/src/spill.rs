//! The merges' spill directory for this process, and the cleaning of what stopped pgvia
//! processes left in `limits.merge_spill_dir`.
//!
//! The directory (`pgvia-spill-<pid>-<stamp>`, locked while in use: see `merge::SpillDir`)
//! is made at the first merge that is given a spill store, in the configured directory of
//! that moment; a reload that names another directory makes a new one there at the next
//! merge, and the old one goes when its last merge ends. Before pgvia makes its directory in
//! a place, and at start, it removes the directories whose process is gone, logging each.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Limits;

/// Where this process spills: nothing yet, a configured directory cleaned of leftovers, or
/// this process's spill directory made in one.
#[derive(Debug, Default)]
enum Place {
    #[default]
    Unset,
    Cleaned(PathBuf),
    Made(Arc<merge::SpillDir>),
}

/// Holds this process's spill directory (one per [`crate::app::App`]).
#[derive(Debug, Default)]
pub struct SpillDirs {
    place: Mutex<Place>,
}

/// The configured directory whether spilling is on or not: where leftovers may be.
fn configured(limits: &Limits) -> PathBuf {
    if limits.merge_spill_dir.is_empty() {
        std::env::temp_dir()
    } else {
        PathBuf::from(&limits.merge_spill_dir)
    }
}

impl SpillDirs {
    /// At start: removes what stopped pgvia processes left in the configured directory.
    pub fn clean_at_start(&self, limits: &Limits) {
        let parent = configured(limits);
        clean(&parent);
        *self.place.lock().unwrap_or_else(PoisonError::into_inner) = Place::Cleaned(parent);
    }

    /// A spill store for one merge, or `None` with `limits.merge_spill` off. When the
    /// directory cannot be made, the store fails the merge's first spill with the reason
    /// (58030), so merges that fit the budget are not affected.
    pub fn store(&self, limits: &Limits) -> Option<merge::DirStore> {
        let parent = limits.merge_spill_path()?;
        let mut place = self.place.lock().unwrap_or_else(PoisonError::into_inner);
        if let Place::Made(dir) = &*place {
            if dir.parent() == parent {
                return Some(merge::DirStore::new(dir.clone()));
            }
        }
        if !matches!(&*place, Place::Cleaned(p) if *p == parent) {
            clean(&parent);
        }
        match merge::SpillDir::create(&parent) {
            Ok(dir) => {
                let dir = Arc::new(dir);
                *place = Place::Made(dir.clone());
                Some(merge::DirStore::new(dir))
            }
            Err(e) => {
                tracing::warn!(dir = %parent.display(), error = %e, "cannot make the merge spill directory; merges past limits.merge_memory_budget will fail");
                *place = Place::Cleaned(parent);
                Some(merge::DirStore::unavailable(&e))
            }
        }
    }
}

/// Removes leftovers in `parent`, logging what was removed or kept and why.
fn clean(parent: &Path) {
    let report = match merge::remove_leftovers(parent) {
        Ok(report) => report,
        Err(e) => {
            tracing::debug!(dir = %parent.display(), error = %e, "cannot look for leftover spill directories");
            return;
        }
    };
    for leftover in report {
        match leftover {
            merge::Leftover::Removed { dir, files } => {
                tracing::info!(dir = %dir.display(), files, "removed the spill directory of a pgvia that is gone");
            }
            merge::Leftover::ForeignKept { dir, files, foreign } => {
                tracing::warn!(
                    dir = %dir.display(),
                    files,
                    foreign = ?foreign,
                    "removed the spill files of a pgvia that is gone; kept the directory, which holds files pgvia did not make"
                );
            }
            merge::Leftover::Failed { dir, error } => {
                tracing::warn!(dir = %dir.display(), %error, "cannot remove the spill directory of a pgvia that is gone");
            }
        }
    }
}
