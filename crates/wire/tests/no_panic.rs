//! Random bytes through every decoder and view: errors are fine, panics are not.

use bytes::BytesMut;
use proptest::prelude::*;
use wire::backend::BackendMessage;
use wire::frontend::FrontendMessage;
use wire::startup::{parse_options, StartupPacket};
use wire::FrameDecoder;

fn walk_backend(m: &BackendMessage<'_>) {
    match m {
        BackendMessage::DataRow(r) => r.values().for_each(drop),
        BackendMessage::RowDescription(r) => r.columns().for_each(drop),
        BackendMessage::ErrorResponse(f) | BackendMessage::NoticeResponse(f) => f.iter().for_each(drop),
        BackendMessage::ParameterDescription(o) => o.iter().for_each(drop),
        BackendMessage::CopyInResponse(c) | BackendMessage::CopyOutResponse(c) => {
            c.column_formats.iter().for_each(drop)
        }
        _ => {}
    }
    let _ = format!("{m:?}");
}

fn walk_frontend(m: &FrontendMessage<'_>) {
    if let FrontendMessage::Bind(b) = m {
        b.params.iter().for_each(drop);
        b.param_formats.iter().for_each(drop);
    }
    let _ = format!("{m:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn stream_of_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let d = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(f)) = d.decode(&mut buf) {
            let _ = format!("{f:?}");
            if let Ok(m) = BackendMessage::parse(&f) { walk_backend(&m) }
            if let Ok(m) = FrontendMessage::parse(&f) { walk_frontend(&m) }
        }
    }

    #[test]
    fn every_tag_with_random_body(tag in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(m) = BackendMessage::parse_body(tag, &body) { walk_backend(&m) }
        if let Ok(m) = FrontendMessage::parse_body(tag, &body) { walk_frontend(&m) }
    }

    #[test]
    fn startup_payloads(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = StartupPacket::parse(&body);
        let mut framed = BytesMut::from(&body[..]);
        let _ = wire::frame::decode_untagged(&mut framed, 100);
    }

    #[test]
    fn option_strings(s in ".{0,64}") {
        let _ = parse_options(&s);
    }
}
