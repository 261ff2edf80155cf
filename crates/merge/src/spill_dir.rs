//! The directory a process's spill files live in, and the removal of those a dead process left.
//!
//! Each pgvia process spills into `<spill dir>/pgvia-spill-<pid>-<stamp>/`, holding an
//! exclusive `flock` on the `lock` file inside for as long as the directory is in use. The
//! kernel drops that lock when the process dies however it dies (SIGKILL, a crash), so at
//! its next start pgvia can tell a leftover from a directory another live pgvia is using
//! by trying the lock, not by guessing from a pid that may have been reused. Only names
//! pgvia makes are touched: directories named as above, and inside them the `lock` file
//! and `pgvia-merge-*.spill` files; anything else is left where it is.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PREFIX: &str = "pgvia-spill-";
const LOCK: &str = "lock";
const FILE_PREFIX: &str = "pgvia-merge-";
const FILE_SUFFIX: &str = ".spill";

/// A directory with no `lock` file is a process that died between making the directory and
/// its lock (a few microseconds) only once it is this old; younger, it may be one starting.
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

/// This process's spill directory, locked while the value lives; removed (with its lock
/// file) when dropped, once every spill file in it is gone.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    parent: PathBuf,
    /// Holds the `flock` that tells other processes this directory is in use.
    _lock: File,
}

impl SpillDir {
    /// Makes `<parent>/pgvia-spill-<pid>-<stamp>` (mode 0700) and locks its `lock` file.
    pub fn create(parent: &Path) -> io::Result<SpillDir> {
        let pid = std::process::id();
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        for attempt in 0..64u128 {
            let path = parent.join(format!("{PREFIX}{pid}-{}", stamp + attempt));
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            let locked = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path.join(LOCK))
                .and_then(|f| f.try_lock().map(|()| f).map_err(io::Error::from));
            return match locked {
                Ok(lock) => Ok(SpillDir { path, parent: parent.to_owned(), _lock: lock }),
                Err(e) => {
                    let _ = std::fs::remove_file(path.join(LOCK));
                    let _ = std::fs::remove_dir(&path);
                    Err(e)
                }
            };
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free spill directory name"))
    }

    /// The directory the spill files go in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configured directory this one was made in.
    pub fn parent(&self) -> &Path {
        &self.parent
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        // Best effort: the files are gone by now (each store holds this directory alive).
        let _ = std::fs::remove_file(self.path.join(LOCK));
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A spill file name as [`crate::DirStore`] makes them.
pub(crate) fn file_name(store: u64, n: u64) -> String {
    format!("{FILE_PREFIX}{store}-{n}{FILE_SUFFIX}")
}

/// What [`remove_leftovers`] did with one directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Its process is gone: its spill files (this many) and the directory were removed.
    Removed { dir: PathBuf, files: usize },
    /// Its process is gone, but the directory holds files pgvia did not make: pgvia's own
    /// (this many) were removed, the directory and the others kept.
    ForeignKept { dir: PathBuf, files: usize, foreign: Vec<PathBuf> },
    /// Could not be looked at or removed; why.
    Failed { dir: PathBuf, error: String },
}

/// Whether `name` is `pgvia-spill-<digits>-<digits>`.
fn is_spill_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PREFIX) else { return false };
    let Some((pid, stamp)) = rest.split_once('-') else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(pid) && digits(stamp)
}

fn is_spill_file_name(name: &str) -> bool {
    name.starts_with(FILE_PREFIX) && name.ends_with(FILE_SUFFIX)
}

/// Whether no live process holds `dir`: its `lock` file can be locked (returned, held until
/// dropped), or it has no lock file and is older than [`UNLOCKED_GRACE`].
enum Owner {
    Alive,
    Gone(Option<File>),
}

fn owner(dir: &Path) -> io::Result<Owner> {
    match OpenOptions::new().write(true).open(dir.join(LOCK)) {
        Ok(file) => match file.try_lock() {
            Ok(()) => Ok(Owner::Gone(Some(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(Owner::Alive),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let age = std::fs::symlink_metadata(dir)?.modified()?.elapsed().unwrap_or_default();
            Ok(if age >= UNLOCKED_GRACE { Owner::Gone(None) } else { Owner::Alive })
        }
        Err(e) => Err(e),
    }
}

/// Removes the spill directories under `parent` whose process is gone (see the module's
/// comment), and reports each one it touched. Directories in use are not reported.
pub fn remove_leftovers(parent: &Path) -> io::Result<Vec<Leftover>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(parent)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Not following links: a link named like ours is not ours.
        if !is_spill_dir_name(name) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        match remove_one(&dir) {
            Ok(Some(done)) => out.push(done),
            Ok(None) => {}
            Err(e) => out.push(Leftover::Failed { dir, error: e.to_string() }),
        }
    }
    Ok(out)
}

fn remove_one(dir: &Path) -> io::Result<Option<Leftover>> {
    let Owner::Gone(_held) = owner(dir)? else { return Ok(None) };
    let (mut files, mut foreign) = (0, Vec::new());
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ours = entry.file_type()?.is_file() && entry.file_name().to_str().is_some_and(is_spill_file_name);
        if ours {
            std::fs::remove_file(entry.path())?;
            files += 1;
        } else if entry.file_name() != LOCK {
            foreign.push(entry.path());
        }
    }
    if !foreign.is_empty() {
        return Ok(Some(Leftover::ForeignKept { dir: dir.to_owned(), files, foreign }));
    }
    // The lock file goes last, while still locked, so no other cleaner judges the directory
    // half way.
    match std::fs::remove_file(dir.join(LOCK)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::remove_dir(dir)?;
    Ok(Some(Leftover::Removed { dir: dir.to_owned(), files }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("merge-spill-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn names() {
        assert!(is_spill_dir_name("pgvia-spill-12-345"));
        for bad in ["pgvia-spill-12", "pgvia-spill--3", "pgvia-spill-a-1", "pgvia-spill-1-2-3", "x"] {
            assert!(!is_spill_dir_name(bad), "{bad}");
        }
        assert!(is_spill_file_name(&file_name(3, 4)));
        assert!(!is_spill_file_name("pgvia-merge-3-4.spill.bak"));
    }

    #[test]
    fn a_live_directory_is_kept_a_dead_one_removed_and_foreign_files_stay() {
        let parent = scratch("live-dead");
        let live = SpillDir::create(&parent).expect("create");
        std::fs::write(live.path().join(file_name(0, 0)), b"x").expect("write");
        // A dead process's: a lock file nobody holds and two spill files.
        let dead = parent.join("pgvia-spill-4000000-1");
        std::fs::create_dir(&dead).expect("mkdir");
        for f in [LOCK.to_owned(), file_name(0, 0), file_name(0, 1)] {
            std::fs::write(dead.join(f), b"x").expect("plant");
        }
        // A dead one with something pgvia did not make: only pgvia's file goes.
        let mixed = parent.join("pgvia-spill-4000000-2");
        std::fs::create_dir(&mixed).expect("mkdir");
        std::fs::write(mixed.join(LOCK), b"").expect("plant");
        std::fs::write(mixed.join(file_name(1, 0)), b"x").expect("plant");
        std::fs::write(mixed.join("notes.txt"), b"mine").expect("plant");
        // Not ours at all.
        std::fs::create_dir(parent.join("pgvia-spill-other")).expect("mkdir");
        std::fs::write(parent.join("pgvia-merge-0-0.spill"), b"x").expect("plant");

        let mut report = remove_leftovers(&parent).expect("clean");
        report.sort_by_key(|l| format!("{l:?}"));
        assert_eq!(report.len(), 2, "{report:?}");
        assert!(report.contains(&Leftover::Removed { dir: dead.clone(), files: 2 }), "{report:?}");
        assert!(report.contains(&Leftover::ForeignKept {
            dir: mixed.clone(),
            files: 1,
            foreign: vec![mixed.join("notes.txt")]
        }));
        assert!(!dead.exists());
        assert!(mixed.join("notes.txt").exists() && mixed.join(LOCK).exists());
        assert!(live.path().join(file_name(0, 0)).exists(), "the live directory is untouched");
        assert!(parent.join("pgvia-spill-other").exists() && parent.join("pgvia-merge-0-0.spill").exists());

        std::fs::remove_file(live.path().join(file_name(0, 0))).expect("rm");
        let path = live.path().to_owned();
        drop(live);
        assert!(!path.exists(), "dropped: removed");
        let _ = std::fs::remove_dir_all(&parent);
    }
}
