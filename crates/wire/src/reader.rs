//! A bounds-checked cursor over a message body; the one place that turns bytes into fields.

use crate::WireError;

/// Reads fields from a message body. Every method checks bounds and reports the message name
/// in its error, so views built on it cannot panic on hostile input.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    message: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], message: &'static str) -> Self {
        Self { buf, message }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated { message: self.message, needed: n - self.buf.len() });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn i16(&mut self) -> Result<i16, WireError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, WireError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count field (parameters, formats, columns): PostgreSQL reads these as unsigned
    /// 16-bit (`pq_getmsgint(msg, 2)`), so up to 65,535, never negative.
    pub fn count16(&mut self) -> Result<usize, WireError> {
        self.u16().map(usize::from)
    }

    /// A NUL-terminated string, returned without its terminator.
    pub fn cstr_bytes(&mut self) -> Result<&'a [u8], WireError> {
        let Some(nul) = memchr::memchr(0, self.buf) else {
            return Err(WireError::MissingNul { message: self.message });
        };
        let s = &self.buf[..nul];
        self.buf = &self.buf[nul + 1..];
        Ok(s)
    }

    /// A NUL-terminated string that must be UTF-8.
    pub fn cstr(&mut self) -> Result<&'a str, WireError> {
        let b = self.cstr_bytes()?;
        std::str::from_utf8(b).map_err(|_| WireError::InvalidUtf8 { message: self.message })
    }

    /// A length-prefixed (i32) value where -1 means NULL.
    pub fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len)
            .map_err(|_| WireError::Invalid { message: self.message, detail: "negative value length" })?;
        self.bytes(len).map(Some)
    }

    /// Fails when bytes remain: fixed-layout messages must be consumed exactly.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes { message: self.message, extra: self.buf.len() })
        }
    }
}

/// An integer stored big-endian in a fixed number of bytes.
pub trait BeInt: Copy + 'static {
    const SIZE: usize;
    /// `b` is exactly `SIZE` bytes long.
    fn from_be(b: &[u8]) -> Self;
}

impl BeInt for i16 {
    const SIZE: usize = 2;
    fn from_be(b: &[u8]) -> Self {
        i16::from_be_bytes([b[0], b[1]])
    }
}

impl BeInt for u32 {
    const SIZE: usize = 4;
    fn from_be(b: &[u8]) -> Self {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// A borrowed array of big-endian integers (type OIDs, format codes), decoded on iteration.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BeArray<'a, T> {
    bytes: &'a [u8],
    _item: std::marker::PhantomData<T>,
}

impl<'a, T: BeInt> BeArray<'a, T> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, _item: std::marker::PhantomData }
    }

    /// Reads a count of `T`s (already parsed) from `r`.
    pub fn read(r: &mut Reader<'a>, count: usize) -> Result<Self, WireError> {
        Ok(Self::new(r.bytes(count * T::SIZE)?))
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / T::SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        self.bytes.chunks_exact(T::SIZE).map(T::from_be)
    }
}

impl<T: BeInt + std::fmt::Debug> std::fmt::Debug for BeArray<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Type OIDs (ParameterDescription, Parse).
pub type Oids<'a> = BeArray<'a, u32>;
/// Format codes (Bind, FunctionCall, COPY responses).
pub type Formats<'a> = BeArray<'a, i16>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cstr_requires_nul_and_utf8() {
        let mut r = Reader::new(b"abc\0de", "Test");
        assert_eq!(r.cstr().unwrap(), "abc");
        assert_eq!(r.cstr(), Err(WireError::MissingNul { message: "Test" }));
        let mut r = Reader::new(b"\xff\0", "Test");
        assert_eq!(r.cstr(), Err(WireError::InvalidUtf8 { message: "Test" }));
    }

    #[test]
    fn truncation_is_an_error() {
        let mut r = Reader::new(&[0, 1], "Test");
        assert!(matches!(r.i32(), Err(WireError::Truncated { needed: 2, .. })));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfe], "Test");
        assert!(matches!(r.nullable_bytes(), Err(WireError::Invalid { .. })));
    }
}
