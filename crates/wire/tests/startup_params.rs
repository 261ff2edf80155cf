//! The StartupMessage builder every server login goes through (issue 33): whatever byte
//! strings it is given as names and values, what it writes parses back as exactly the
//! parameters it was given, in order, and nothing else; or it refuses and writes nothing.
//! `StartupMessage::new` (the gateway's sessions) accepts exactly what the builder writes.

use bytes::BytesMut;
use proptest::prelude::*;
use wire::build;
use wire::frame::{decode_untagged, MAX_STARTUP_FRAME};
use wire::startup::{StartupMessage, StartupPacket};

/// Text with the characters that matter here over-represented: NUL, quotes, `=`, spaces.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => Just('\0'),
            2 => Just('\''),
            2 => Just('='),
            2 => Just(' '),
            1 => Just('é'),
            10 => proptest::char::range('a', 'z'),
        ],
        0..12,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn written_is_exactly_what_was_given(user in text(), database in text(), key in text(), value in text()) {
        let params = [("user", user.as_str()), ("database", database.as_str()), (key.as_str(), value.as_str())];
        let mut buf = BytesMut::from(&b"before"[..]);
        let clean = params.iter().all(|(k, v)| !k.is_empty() && !k.contains('\0') && !v.contains('\0'));
        let written = build::startup_message(&mut buf, params);
        prop_assert_eq!(written.is_ok(), clean);
        let owned: Vec<(String, String)> = params.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        prop_assert_eq!(StartupMessage::new(3, 0, owned.clone()).is_ok(), clean);
        if !clean {
            prop_assert_eq!(&buf[..], b"before");
            return Ok(());
        }
        let mut rest = buf.split_off(6);
        let payload = decode_untagged(&mut rest, MAX_STARTUP_FRAME).expect("a whole packet").expect("framed");
        prop_assert!(rest.is_empty());
        let StartupPacket::Startup(m) = StartupPacket::parse(&payload).expect("parses") else {
            panic!("not a StartupMessage");
        };
        prop_assert_eq!(m.params, owned);
    }
}
