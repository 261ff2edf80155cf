//! Untagged startup-phase packets: the length-prefixed cut and the packet parser.
//!
//! Input: a byte stream as a client sends before logging in. Packets are cut with the real
//! limit; each is parsed, its parameters read the way login does (`options` split into
//! settings, protocol options listed). Invariant: a packet is never longer than the limit.

use bytes::BytesMut;
use wire::frame::{decode_untagged, MAX_STARTUP_FRAME};
use wire::startup::{parse_options, StartupPacket};

pub fn startup(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(payload)) = decode_untagged(&mut buf, MAX_STARTUP_FRAME) {
        assert!(payload.len() + 4 <= MAX_STARTUP_FRAME);
        let Ok(packet) = StartupPacket::parse(&payload) else { continue };
        if let StartupPacket::Startup(m) = &packet {
            for name in ["user", "database", "application_name", "replication"] {
                let _ = m.param(name);
            }
            m.protocol_options().for_each(drop);
            if let Some(options) = m.param("options") {
                let _ = parse_options(options);
            }
        }
        let _ = format!("{packet:?}");
    }
}
