//! Cutting frames out of a byte stream.
//!
//! A [`Frame`] owns its bytes (header included) as a reference-counted [`Bytes`] split off the
//! read buffer, so forwarding it unchanged is a copy of a pointer, and views borrow from it.

use bytes::{Buf, Bytes, BytesMut};

use crate::WireError;

/// Default ceiling for a regular message; PostgreSQL itself accepts up to 1 GiB, but a proxy
/// should not buffer that much for one peer. Configurable per decoder.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;
/// PostgreSQL's own limit for a startup packet (MAX_STARTUP_PACKET_LENGTH).
pub const MAX_STARTUP_FRAME: usize = 10_000;

/// One tagged protocol message: the tag byte, the 4-byte length and the body.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    bytes: Bytes,
}

impl Frame {
    /// Wraps bytes already known to be one whole tagged frame (tag + length + body).
    /// Used by decoders and builders; the length field is trusted to match.
    pub fn from_bytes_unchecked(bytes: Bytes) -> Self {
        debug_assert!(bytes.len() >= 5);
        Self { bytes }
    }

    pub fn tag(&self) -> u8 {
        self.bytes[0]
    }

    /// The body after the tag and length.
    pub fn body(&self) -> &[u8] {
        &self.bytes[5..]
    }

    /// The frame exactly as received, ready to forward.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = self.tag();
        let shown = if tag.is_ascii_graphic() { tag as char } else { '?' };
        write!(f, "Frame({shown:?}, {} bytes)", self.bytes.len() - 5)
    }
}

/// Cuts tagged frames from a buffer, refusing any longer than `max_len` (header included).
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_len: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl FrameDecoder {
    pub fn new(max_len: usize) -> Self {
        Self { max_len: max_len.max(5) }
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Length of the complete frame at the start of `buf`, `Ok(None)` if more bytes are needed.
    /// Does not consume anything: the relay uses this to find how many whole frames it can
    /// forward in one write.
    pub fn peek_len(&self, buf: &[u8]) -> Result<Option<usize>, WireError> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let declared = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if declared < 4 {
            return Err(WireError::LengthTooSmall(i64::from(declared)));
        }
        // declared >= 4 was just checked, so the cast is exact.
        let total = declared as usize + 1;
        if total > self.max_len {
            return Err(WireError::TooLong { len: total, max: self.max_len });
        }
        Ok((buf.len() >= total).then_some(total))
    }

    /// Splits the next complete frame off `buf`, or returns `Ok(None)` when it is not all there.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        match self.peek_len(buf)? {
            Some(total) => Ok(Some(Frame { bytes: buf.split_to(total).freeze() })),
            None => {
                // Make room for the whole frame once instead of growing step by step.
                if buf.len() >= 5 {
                    let declared = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
                    let total = declared as usize + 1;
                    buf.reserve(total.saturating_sub(buf.len()));
                }
                Ok(None)
            }
        }
    }
}

/// Builds one whole frame from a tag and body, for the view modules' tests.
#[cfg(test)]
pub(crate) fn test_frame(tag: u8, body: &[u8]) -> Frame {
    let mut b = BytesMut::new();
    crate::build::frame(&mut b, tag, |b| b.extend_from_slice(body));
    Frame { bytes: b.freeze() }
}

/// Cuts an untagged startup-phase packet (length + payload) from `buf`, returning the payload
/// after the length field. Limited to [`MAX_STARTUP_FRAME`] or less.
pub fn decode_untagged(buf: &mut BytesMut, max_len: usize) -> Result<Option<Bytes>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let declared = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if declared < 8 {
        // A startup packet carries at least a 4-byte code after its length.
        return Err(WireError::LengthTooSmall(i64::from(declared)));
    }
    let total = declared as usize;
    if total > max_len {
        return Err(WireError::TooLong { len: total, max: max_len });
    }
    if buf.len() < total {
        return Ok(None);
    }
    let mut packet = buf.split_to(total);
    packet.advance(4);
    Ok(Some(packet.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_frames_and_waits_for_more() {
        let mut buf = BytesMut::from(&b"Q\0\0\0\x09abcd\0S\0\0\0\x04Z\0\0"[..]);
        let d = FrameDecoder::default();
        let f = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(f.tag(), b'Q');
        assert_eq!(f.body(), b"abcd\0");
        let f = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(f.tag(), b'S');
        assert!(f.body().is_empty());
        assert_eq!(d.decode(&mut buf).unwrap(), None);
        assert_eq!(buf.len(), 3);
    }

    #[test]
    fn rejects_short_and_long_lengths() {
        let d = FrameDecoder::new(100);
        let mut buf = BytesMut::from(&b"Q\0\0\0\x03"[..]);
        assert_eq!(d.decode(&mut buf), Err(WireError::LengthTooSmall(3)));
        let mut buf = BytesMut::from(&b"Q\x7f\xff\xff\xff"[..]);
        assert!(matches!(d.decode(&mut buf), Err(WireError::TooLong { .. })));
        let mut buf = BytesMut::from(&b"Q\xff\xff\xff\xff"[..]);
        assert_eq!(d.decode(&mut buf), Err(WireError::LengthTooSmall(-1)));
    }

    /// A peer declaring a large frame and sending it one byte at a time costs linear work:
    /// the buffer is reserved once for the declared length and never regrown or copied per
    /// byte, even while an earlier frame still shares the allocation (as when the relay holds
    /// it). Counted in reallocations and bytes they copied, not in time, so it is exact.
    #[test]
    fn large_frame_fed_byte_by_byte_is_linear() {
        const LEN: usize = 8 * 1024 * 1024;
        let mut stream = b"S\0\0\0\x04d".to_vec();
        stream.extend_from_slice(&i32::try_from(LEN - 1).unwrap().to_be_bytes());
        stream.resize(5 + LEN, b'x');
        let d = FrameDecoder::default();
        let mut buf = BytesMut::new();
        let (mut frames, mut moves, mut copied) = (Vec::new(), 0, 0);
        for byte in &stream {
            let before = (buf.as_ptr(), buf.len());
            buf.extend_from_slice(std::slice::from_ref(byte));
            if buf.as_ptr() != before.0 {
                moves += 1;
                copied += before.1;
            }
            let before = buf.as_ptr();
            match d.decode(&mut buf).unwrap() {
                Some(f) => frames.push(f),
                None if buf.as_ptr() != before => {
                    moves += 1;
                    copied += buf.len();
                }
                None => {}
            }
        }
        assert_eq!(frames.iter().map(Frame::len).collect::<Vec<_>>(), [5, LEN]);
        assert!(buf.is_empty());
        // The first bytes land in small allocations; then one reserve for the whole frame.
        assert!(moves <= 4, "{moves} reallocations");
        assert!(copied <= 64, "{copied} bytes copied by reallocations");
    }

    #[test]
    fn untagged_packets() {
        let mut buf = BytesMut::from(&b"\0\0\0\x08\x04\xd2\x16\x2fextra"[..]);
        let p = decode_untagged(&mut buf, MAX_STARTUP_FRAME).unwrap().unwrap();
        assert_eq!(&p[..], b"\x04\xd2\x16\x2f");
        assert_eq!(&buf[..], b"extra");
        let mut buf = BytesMut::from(&b"\0\0\0\x04"[..]);
        assert!(decode_untagged(&mut buf, MAX_STARTUP_FRAME).is_err());
        let mut buf = BytesMut::from(&b"\0\x01\0\0"[..]);
        assert!(matches!(decode_untagged(&mut buf, MAX_STARTUP_FRAME), Err(WireError::TooLong { .. })));
    }
}
