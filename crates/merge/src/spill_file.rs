//! The production [`SpillStore`]: files in a directory, each removed when dropped, so a
//! merge's files go when the merge does (it ended, failed, or its client left).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::spill::{SpillFile, SpillStore};

/// Numbers the stores of this process, so two merges never share a file name.
static STORES: AtomicU64 = AtomicU64::new(0);

/// Spill files in `dir`, named `pgvia-merge-<pid>-<store>-<file>.spill`.
pub struct DirStore {
    dir: PathBuf,
    store: u64,
    next: u64,
}

impl DirStore {
    pub fn new(dir: &Path) -> DirStore {
        DirStore { dir: dir.to_owned(), store: STORES.fetch_add(1, Ordering::Relaxed), next: 0 }
    }
}

impl SpillStore for DirStore {
    fn create(&mut self) -> io::Result<Box<dyn SpillFile>> {
        let name = format!("pgvia-merge-{}-{}-{}.spill", std::process::id(), self.store, self.next);
        self.next += 1;
        let path = self.dir.join(name);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        Ok(Box::new(DirFile { path, state: FileState::Writing(BufWriter::with_capacity(64 << 10, file)) }))
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
