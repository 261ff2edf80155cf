//! The production [`SpillStore`]: files in the process's spill directory
//! ([`crate::spill_dir`]), each removed when dropped, so a merge's files go when the merge
//! does (it ended, failed, or its client left).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::spill::{SpillFile, SpillStore};
use crate::spill_dir::{file_name, SpillDir};

/// Numbers the stores of this process, so two merges never share a file name.
static STORES: AtomicU64 = AtomicU64::new(0);

/// Spill files named `pgvia-merge-<store>-<file>.spill` in a process's [`SpillDir`], which
/// the store keeps alive; or, when that directory could not be made, the reason, given
/// to the merge as the error of its first spill (58030), so it fails only if it must spill.
pub struct DirStore {
    place: Place,
    store: u64,
    next: u64,
}

enum Place {
    Dir(Arc<SpillDir>),
    Unavailable { kind: io::ErrorKind, message: String },
}

impl DirStore {
    pub fn new(dir: Arc<SpillDir>) -> DirStore {
        DirStore { place: Place::Dir(dir), store: STORES.fetch_add(1, Ordering::Relaxed), next: 0 }
    }

    /// A store whose every file fails with `error` (the spill directory could not be made).
    pub fn unavailable(error: &io::Error) -> DirStore {
        let place = Place::Unavailable { kind: error.kind(), message: error.to_string() };
        DirStore { place, store: 0, next: 0 }
    }
}

impl SpillStore for DirStore {
    fn create(&mut self) -> io::Result<Box<dyn SpillFile>> {
        let dir = match &self.place {
            Place::Dir(dir) => dir.clone(),
            Place::Unavailable { kind, message } => {
                return Err(io::Error::new(*kind, format!("cannot make the spill directory: {message}")))
            }
        };
        let path = dir.path().join(file_name(self.store, self.next));
        self.next += 1;
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let state = FileState::Writing(BufWriter::with_capacity(64 << 10, file));
        Ok(Box::new(DirFile { path, state, _dir: dir }))
    }
}

enum FileState {
    Writing(BufWriter<File>),
    Reading(BufReader<File>),
    /// A rewind failed half way; every later call fails.
    Broken,
}

struct DirFile {
    path: PathBuf,
    state: FileState,
    /// The directory outlives its files.
    _dir: Arc<SpillDir>,
}

fn broken() -> io::Error {
    io::Error::other("spill file unusable after an earlier error")
}

impl SpillFile for DirFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.state {
            FileState::Writing(w) => w.write_all(bytes),
            FileState::Reading(_) => Err(io::Error::other("spill file appended to after rewind")),
            FileState::Broken => Err(broken()),
        }
    }

    fn rewind(&mut self) -> io::Result<()> {
        let mut file = match std::mem::replace(&mut self.state, FileState::Broken) {
            FileState::Writing(w) => w.into_inner().map_err(|e| e.into_error())?,
            FileState::Reading(r) => r.into_inner(),
            FileState::Broken => return Err(broken()),
        };
        file.seek(SeekFrom::Start(0))?;
        self.state = FileState::Reading(BufReader::with_capacity(64 << 10, file));
        Ok(())
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.state {
            FileState::Reading(r) => r.read(buf),
            FileState::Writing(_) => Err(io::Error::other("spill file read before rewind")),
            FileState::Broken => Err(broken()),
        }
    }
}

impl Drop for DirFile {
    fn drop(&mut self) {
        // Best effort: the directory may be gone; nothing else can be done about it here.
        let _ = std::fs::remove_file(&self.path);
    }
}
