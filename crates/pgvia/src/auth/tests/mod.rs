#![allow(clippy::unwrap_used)]

mod client;
mod server;

use bytes::BytesMut;
use wire::{Frame, FrameDecoder};

use super::*;

/// Takes every whole frame out of `buf`.
fn frames(buf: &mut BytesMut) -> Vec<Frame> {
    let decoder = FrameDecoder::default();
    let mut out = Vec::new();
    while let Some(f) = decoder.decode(buf).unwrap() {
        out.push(f);
    }
    assert!(buf.is_empty(), "partial frame left over");
    out
}

/// The body of the one frame `build` writes.
fn body_of(build: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    build(&mut buf);
    let mut fs = frames(&mut buf);
    assert_eq!(fs.len(), 1);
    fs.pop().unwrap().body().to_vec()
}

/// The single Authentication ('R') frame in `buf`, split into request code and the rest.
fn auth_request(buf: &mut BytesMut) -> (i32, Vec<u8>) {
    let mut fs = frames(buf);
    assert_eq!(fs.len(), 1, "expected one frame");
    let f = fs.pop().unwrap();
    assert_eq!(f.tag(), b'R');
    let body = f.body();
    (i32::from_be_bytes(body[..4].try_into().unwrap()), body[4..].to_vec())
}

/// Secrets for "alice" with the password "pencil" in all three forms.
fn alice_secrets() -> [Secret; 3] {
    [
        Secret::parse("pencil").unwrap(),
        Secret::parse(&wire::md5::md5_hash("alice", "pencil")).unwrap(),
        // Written by PostgreSQL 15 for the password "pencil".
        Secret::parse(
            "SCRAM-SHA-256$4096:gfDkXUR1QyVAmXkQN4Xvbg==$fyLCMVEAm7/nE+E/s8gCaGXLvgkPTb55T1bkwYyePNY=:\
             inNclIXIfUeEqnwu3Dkkwx9YHfw4lvR5I8Uf2kY7E84=",
        )
        .unwrap(),
    ]
}

#[test]
fn secret_formats() {
    let [plain, md5, scram] = alice_secrets();
    assert!(matches!(&plain, Secret::Plain(p) if p.password() == "pencil"));
    assert!(matches!(md5, Secret::Md5(_)));
    assert!(matches!(scram, Secret::Scram(_)));
    // An MD5 hash needs exactly 32 lowercase hex digits; anything else is a password.
    assert!(matches!(Secret::parse("md5ABCDEF0123456789ABCDEF0123456789").unwrap(), Secret::Plain(_)));
    assert!(matches!(Secret::parse("md5").unwrap(), Secret::Plain(_)));
    assert!(matches!(Secret::parse("").unwrap(), Secret::Plain(_)));
    assert!(matches!(Secret::parse("SCRAM-SHA-256$4096:zz"), Err(SecretError::Scram(_))));
    // The plaintext's verifier is derived once, with a random salt.
    let v = plain.scram().unwrap();
    assert!(v.verify_plaintext("pencil"));
    assert_eq!((v.iterations, v.salt.len()), (4096, 16));
    assert_ne!(Secret::parse("pencil").unwrap().scram().unwrap().salt, v.salt);
}

#[test]
fn secrets_do_not_leak_through_debug() {
    for s in alice_secrets() {
        let shown = format!("{s:?}");
        assert!(!shown.contains("pencil") && !shown.contains("md5") && !shown.contains("fyLC"), "{shown}");
    }
}

#[test]
fn secret_method_compatibility() {
    let [plain, md5, scram] = alice_secrets();
    for m in [AuthMethod::Trust, AuthMethod::Cleartext, AuthMethod::Md5, AuthMethod::ScramSha256] {
        assert!(plain.supports(m) && scram.supports(m));
        assert_eq!(md5.supports(m), m != AuthMethod::ScramSha256);
    }
}

#[test]
fn auth_method_names() {
    #[derive(serde::Deserialize)]
    struct C {
        m: Vec<AuthMethod>,
    }
    let c: C = toml::from_str(r#"m = ["trust", "cleartext", "md5", "scram-sha-256"]"#).unwrap();
    assert_eq!(c.m, [AuthMethod::Trust, AuthMethod::Cleartext, AuthMethod::Md5, AuthMethod::ScramSha256]);
    for m in c.m {
        assert_eq!(toml::from_str::<C>(&format!("m = [\"{m}\"]")).unwrap().m, [m]);
    }
    assert!(toml::from_str::<C>(r#"m = ["scram-sha256"]"#).is_err());
}
