//! The frame decoder and both directions' message views.
//!
//! Input: one byte choosing the decoder's maximum frame length and the chunk size of the
//! incremental pass, then a byte stream as a socket would deliver it. Every frame cut is parsed
//! and walked (lazy parts included) and printed with `Debug`. Invariants: cutting the stream
//! as it arrives in chunks gives the same frames and the same verdict as cutting it whole; a
//! frame is its declared length plus the tag; a parsed Bind's or FunctionCall's values are
//! all there (they were checked at parse time).

use bytes::BytesMut;
use wire::backend::BackendMessage;
use wire::frontend::FrontendMessage;
use wire::{Frame, FrameDecoder, WireError};

pub fn frontend(data: &[u8]) {
    for frame in frames(data) {
        if let Ok(m) = FrontendMessage::parse(&frame) {
            walk_frontend(&m);
        }
        // What the relay does before it looks further: is the tag one it knows.
        let _ = wire::frontend::is_known_tag(frame.tag());
    }
}

pub fn backend(data: &[u8]) {
    for frame in frames(data) {
        if let Ok(m) = BackendMessage::parse(&frame) {
            walk_backend(&m);
        }
        // What the reply tracker asks of every error, parsed or not.
        let _ = pgvia::server::tracker::is_fatal(frame.body());
    }
}

/// The frames of `data` after its first byte, checked against an incremental decode.
fn frames(data: &[u8]) -> Vec<Frame> {
    let Some((&knob, stream)) = data.split_first() else { return Vec::new() };
    // Small maxima reach the too-long path with short inputs; 0 is the real default.
    let max = match knob & 0x0f {
        0 => wire::frame::DEFAULT_MAX_FRAME,
        n => usize::from(n) * 32,
    };
    let chunk = usize::from(knob >> 4) + 1;
    let decoder = FrameDecoder::new(max);

    let (whole, whole_end) = decode_all(&decoder, &mut BytesMut::from(stream));
    let mut incremental = Vec::new();
    let mut buf = BytesMut::new();
    let mut end = Ok(());
    'feed: for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(f)) => incremental.push(f),
                Ok(None) => break,
                Err(e) => {
                    end = Err(e);
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(whole, incremental, "whole and incremental decoding cut different frames");
    assert_eq!(whole_end, end, "whole and incremental decoding disagree on the error");
    for f in &whole {
        assert_eq!(f.len(), 5 + f.body().len());
        let declared =
            i32::from_be_bytes([f.as_bytes()[1], f.as_bytes()[2], f.as_bytes()[3], f.as_bytes()[4]]);
        assert_eq!(usize::try_from(declared).ok(), Some(f.len() - 1), "declared length");
        assert!(f.len() <= max);
        let _ = format!("{f:?}");
    }
    whole
}

fn decode_all(decoder: &FrameDecoder, buf: &mut BytesMut) -> (Vec<Frame>, Result<(), WireError>) {
    let mut frames = Vec::new();
    loop {
        match decoder.decode(buf) {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, Ok(())),
            Err(e) => return (frames, Err(e)),
        }
    }
}

fn walk_frontend(m: &FrontendMessage<'_>) {
    match m {
        FrontendMessage::Bind(b) => {
            assert_eq!(b.params.iter().count(), b.params.len(), "Bind values were checked at parse");
            b.param_formats.iter().for_each(drop);
            b.result_formats.iter().for_each(drop);
        }
        FrontendMessage::FunctionCall(f) => {
            assert_eq!(f.args.iter().count(), f.args.len(), "FunctionCall values were checked at parse");
            f.arg_formats.iter().for_each(drop);
        }
        FrontendMessage::Parse(p) => p.param_types.iter().for_each(drop),
        _ => {}
    }
    let _ = format!("{m:?}");
}

fn walk_backend(m: &BackendMessage<'_>) {
    use wire::backend::Authentication;
    match m {
        BackendMessage::DataRow(r) => {
            assert!(r.values().count() <= r.len());
        }
        BackendMessage::RowDescription(r) => {
            assert!(r.columns().count() <= r.len());
        }
        BackendMessage::ErrorResponse(f) | BackendMessage::NoticeResponse(f) => {
            f.iter().for_each(drop);
            let _ = (f.code(), f.message(), f.severity(), f.get_bytes(b'D'));
        }
        BackendMessage::ParameterDescription(o) => o.iter().for_each(drop),
        BackendMessage::CopyInResponse(c)
        | BackendMessage::CopyOutResponse(c)
        | BackendMessage::CopyBothResponse(c) => c.column_formats.iter().for_each(drop),
        BackendMessage::NegotiateProtocolVersion { unrecognized, .. } => unrecognized.iter().for_each(drop),
        BackendMessage::Authentication(Authentication::Sasl(names)) => names.iter().for_each(drop),
        _ => {}
    }
    let _ = format!("{m:?}");
}
