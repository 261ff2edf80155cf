//! Where a merge past its memory budget puts rows: a [`SpillStore`] hands out append-then-read
//! [`SpillFile`]s. The engine only sees these traits (files on disk in production,
//! [`crate::DirStore`]; memory in tests, [`MemStore`]), and writes length-prefixed records.

use std::hash::{Hash, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::MergeError;

/// Hands out empty spill files; what they hold is gone when they are dropped.
pub trait SpillStore: Send + Sync {
    fn create(&mut self) -> io::Result<Box<dyn SpillFile>>;
}

/// One spill file: appended to, then (after [`SpillFile::rewind`]) read from the start.
pub trait SpillFile: Send + Sync {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Ends writing; reads start at the beginning.
    fn rewind(&mut self) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes; 0 at the end.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
}

/// Spill files in memory, for tests of the spilling paths; `files` counts the files made.
#[derive(Default, Clone)]
pub struct MemStore {
    pub files: Arc<AtomicU64>,
}

impl SpillStore for MemStore {
    fn create(&mut self) -> io::Result<Box<dyn SpillFile>> {
        self.files.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(MemFile { data: Vec::new(), at: 0 }))
    }
}

struct MemFile {
    data: Vec<u8>,
    at: usize,
}

impl SpillFile for MemFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.data.extend_from_slice(bytes);
        Ok(())
    }
    fn rewind(&mut self) -> io::Result<()> {
        self.at = 0;
        Ok(())
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

pub(crate) fn io_error(e: io::Error) -> MergeError {
    MergeError::Spill(e.to_string())
}

/// Partitions a grouping or DISTINCT spills into, per level.
pub(crate) const FANOUT: usize = 16;

/// Most levels of re-partitioning before a partition that still does not fit is an error
/// (all its rows share one key, say: a single group's state past the budget).
pub(crate) const MAX_LEVEL: u32 = 5;

/// The partition of `key` at `level` (each level hashes differently, so a partition that
/// overflows splits again).
pub(crate) fn partition(key: &[u8], level: u32) -> usize {
    let mut h = std::hash::DefaultHasher::new();
    level.hash(&mut h);
    key.hash(&mut h);
    (h.finish() % FANOUT as u64) as usize
}

/// Appends one record, `cells` then `more` in DataRow layout, to `file` ([`read_cells`]
/// reads it back); returns the bytes written.
pub(crate) fn write_cells(
    file: &mut dyn SpillFile,
    cells: &[Option<Bytes>],
    more: &[Option<Bytes>],
) -> Result<usize, MergeError> {
    let mut buf = BytesMut::new();
    buf.put_u32(0);
    buf.put_u16((cells.len() + more.len()) as u16);
    for c in cells.iter().chain(more) {
        match c {
            Some(v) => {
                buf.put_i32(v.len() as i32);
                buf.put_slice(v);
            }
            None => buf.put_i32(-1),
        }
    }
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    file.append(&buf).map_err(io_error)?;
    Ok(buf.len())
}

fn read_full(file: &mut dyn SpillFile, buf: &mut [u8]) -> Result<bool, MergeError> {
    let mut at = 0;
    while at < buf.len() {
        let n = file.read(&mut buf[at..]).map_err(io_error)?;
        if n == 0 {
            if at == 0 {
                return Ok(false);
            }
            return Err(MergeError::Spill("spill file ends inside a record".into()));
        }
        at += n;
    }
    Ok(true)
}

/// The next record's cells (slices of one buffer), `None` at the end.
pub(crate) fn read_cells(file: &mut dyn SpillFile) -> Result<Option<Vec<Option<Bytes>>>, MergeError> {
    let mut len = [0u8; 4];
    if !read_full(file, &mut len)? {
        return Ok(None);
    }
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    if !read_full(file, &mut body)? && !body.is_empty() {
        return Err(MergeError::Spill("spill file ends inside a record".into()));
    }
    parse_cells(Bytes::from(body)).map(Some)
}

/// A DataRow body's cells, as slices of it.
pub(crate) fn parse_cells(bytes: Bytes) -> Result<Vec<Option<Bytes>>, MergeError> {
    let msg = wire::backend::BackendMessage::parse_body(b'D', &bytes)
        .map_err(|e| MergeError::Protocol(e.to_string()))?;
    let wire::backend::BackendMessage::DataRow(dr) = msg else {
        return Err(MergeError::Protocol("not a DataRow".into()));
    };
    let mut cells = Vec::with_capacity(dr.len());
    for v in dr.values() {
        let v = v.map_err(|e| MergeError::Protocol(e.to_string()))?;
        cells.push(v.map(|s| bytes.slice_ref(s)));
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut store = MemStore::default();
        let mut f = store.create().unwrap();
        write_cells(f.as_mut(), &[Some(Bytes::from_static(b"ab")), None], &[Some(Bytes::new())]).unwrap();
        write_cells(f.as_mut(), &[Some(Bytes::from_static(b"x"))], &[]).unwrap();
        f.rewind().unwrap();
        let a = read_cells(f.as_mut()).unwrap().unwrap();
        assert_eq!(a, vec![Some(Bytes::from_static(b"ab")), None, Some(Bytes::new())]);
        let b = read_cells(f.as_mut()).unwrap().unwrap();
        assert_eq!(b, vec![Some(Bytes::from_static(b"x"))]);
        assert!(read_cells(f.as_mut()).unwrap().is_none());
    }
}
