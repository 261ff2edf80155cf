//! ClientAuthenticator driven by a real SCRAM client and hand-built PasswordMessages.

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use proptest::prelude::*;
use wire::build;
use wire::sqlstate::SqlState;

use super::*;

/// Runs a SCRAM login as postgres-protocol's client; returns the salt the server showed.
fn scram_login(
    method: AuthMethod,
    secret: Option<&Secret>,
    password: &str,
) -> (Result<AuthStep, AuthError>, ClientAuthenticator, String) {
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(method, secret, "alice", None, &mut out);
    assert_eq!(auth_request(&mut out), (10, b"SCRAM-SHA-256\0\0".to_vec()));

    let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
    let initial = body_of(|b| build::sasl_initial_response(b, "SCRAM-SHA-256", client.message()));
    assert_eq!(auth.on_password_message(&initial, &mut out), Ok(AuthStep::Continue));
    let (code, server_first) = auth_request(&mut out);
    assert_eq!(code, 11);
    let salt = String::from_utf8(server_first.clone()).unwrap().split(',').nth(1).unwrap().to_owned();
    client.update(&server_first).unwrap();

    let result = auth.on_password_message(client.message(), &mut out);
    if result.is_ok() {
        let (code, server_final) = auth_request(&mut out);
        assert_eq!(code, 12);
        client.finish(&server_final).unwrap();
    } else {
        assert!(out.is_empty());
    }
    (result, auth, salt)
}

fn assert_failed(r: Result<AuthStep, AuthError>) {
    let e = r.unwrap_err();
    assert_eq!(e, AuthError::Failed);
    assert_eq!(e.sqlstate(), SqlState::INVALID_PASSWORD);
    assert_eq!(e.client_message("alice"), "password authentication failed for user \"alice\"");
}

#[test]
fn scram_with_plain_and_verifier_secrets() {
    let [plain, _, scram] = alice_secrets();
    for secret in [&plain, &scram] {
        for method in [AuthMethod::ScramSha256, AuthMethod::Md5] {
            if method == AuthMethod::Md5 && matches!(secret, Secret::Plain(_)) {
                continue;
            }
            let (r, auth, _) = scram_login(method, Some(secret), "pencil");
            assert_eq!(r, Ok(AuthStep::Done));
            assert!(auth.is_done());
            assert!(auth.scram_client_key().is_some());
            assert_failed(scram_login(method, Some(secret), "pencil!").0);
        }
    }
}

/// A PLUS login as postgres-protocol's client binds to `client_data` while pgvia binds to
/// its own certificate's data.
fn plus_login(secret: Option<&Secret>, client_data: Vec<u8>) -> Result<AuthStep, AuthError> {
    let mut out = BytesMut::new();
    let own = [4u8; 32];
    let mut auth = ClientAuthenticator::start(AuthMethod::ScramSha256, secret, "alice", Some(&own), &mut out);
    assert_eq!(auth_request(&mut out), (10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0".to_vec()));
    let mut client = ScramSha256::new(b"pencil", ChannelBinding::tls_server_end_point(client_data));
    let initial = body_of(|b| build::sasl_initial_response(b, "SCRAM-SHA-256-PLUS", client.message()));
    auth.on_password_message(&initial, &mut out)?;
    let (_, server_first) = auth_request(&mut out);
    client.update(&server_first).unwrap();
    auth.on_password_message(client.message(), &mut out)
}

#[test]
fn scram_plus_binds_to_the_certificate() {
    let [plain, _, scram] = alice_secrets();
    for secret in [&plain, &scram] {
        assert_eq!(plus_login(Some(secret), vec![4; 32]), Ok(AuthStep::Done));
        // A relay's certificate: the client's binding data differs from pgvia's.
        let e = plus_login(Some(secret), vec![5; 32]).unwrap_err();
        assert_eq!(
            e,
            AuthError::Protocol(AuthProtocolError::Scram(wire::scram::ScramError::ChannelBindingMismatch))
        );
    }
}

#[test]
fn scram_plus_is_offered_only_with_binding_data() {
    let [plain, ..] = alice_secrets();
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::ScramSha256, Some(&plain), "alice", None, &mut out);
    assert_eq!(auth_request(&mut out), (10, b"SCRAM-SHA-256\0\0".to_vec()));
    let client = ScramSha256::new(b"pencil", ChannelBinding::tls_server_end_point(vec![4; 32]));
    let initial = body_of(|b| build::sasl_initial_response(b, "SCRAM-SHA-256-PLUS", client.message()));
    assert!(matches!(
        auth.on_password_message(&initial, &mut out),
        Err(AuthError::Protocol(AuthProtocolError::UnsupportedMechanism))
    ));
}

#[test]
fn scram_unknown_user_fails_like_a_wrong_password() {
    let (r, auth, salt) = scram_login(AuthMethod::ScramSha256, None, "pencil");
    assert_failed(r);
    assert!(!auth.is_done());
    // Repeated probes see one stable, 16-byte salt, as they would for a real user.
    let (_, _, again) = scram_login(AuthMethod::ScramSha256, None, "other");
    assert_eq!(salt, again);
    assert_eq!(salt.len(), "s=".len() + 24);
}

#[test]
fn scram_with_md5_secret_is_unusable_but_looks_failed() {
    let [_, md5, _] = alice_secrets();
    let e = scram_login(AuthMethod::ScramSha256, Some(&md5), "pencil").0.unwrap_err();
    assert_eq!(e, AuthError::UnusableSecret { method: AuthMethod::ScramSha256, secret: "md5" });
    assert_eq!(e.sqlstate(), SqlState::INVALID_PASSWORD);
    assert_eq!(e.client_message("alice"), AuthError::Failed.client_message("alice"));
}

#[test]
fn scram_initial_response_may_come_later() {
    let [plain, ..] = alice_secrets();
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::ScramSha256, Some(&plain), "alice", None, &mut out);
    frames(&mut out);
    let mut client = ScramSha256::new(b"pencil", ChannelBinding::unsupported());
    let initial = b"SCRAM-SHA-256\0\xff\xff\xff\xff";
    assert_eq!(auth.on_password_message(initial, &mut out), Ok(AuthStep::Continue));
    assert_eq!(auth_request(&mut out), (11, vec![]));
    assert_eq!(auth.on_password_message(client.message(), &mut out), Ok(AuthStep::Continue));
    client.update(&auth_request(&mut out).1).unwrap();
    assert_eq!(auth.on_password_message(client.message(), &mut out), Ok(AuthStep::Done));
    client.finish(&auth_request(&mut out).1).unwrap();
}

fn md5_login(secret: Option<&Secret>, password: &str) -> Result<AuthStep, AuthError> {
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::Md5, secret, "alice", None, &mut out);
    let (code, salt) = auth_request(&mut out);
    assert_eq!(code, 5);
    let salt: [u8; 4] = salt.try_into().unwrap();
    let response = postgres_protocol::authentication::md5_hash(b"alice", password.as_bytes(), salt);
    let r = auth.on_password_message(&body_of(|b| build::password_message(b, response.as_bytes())), &mut out);
    assert!(out.is_empty());
    r
}

#[test]
fn md5_logins() {
    let [plain, md5, _] = alice_secrets();
    for secret in [&plain, &md5] {
        assert_eq!(md5_login(Some(secret), "pencil"), Ok(AuthStep::Done));
        assert_failed(md5_login(Some(secret), "Pencil"));
    }
    assert_failed(md5_login(None, "pencil"));
}

fn cleartext_login(secret: Option<&Secret>, password: &[u8]) -> Result<AuthStep, AuthError> {
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::Cleartext, secret, "alice", None, &mut out);
    assert_eq!(auth_request(&mut out), (3, vec![]));
    auth.on_password_message(&body_of(|b| build::password_message(b, password)), &mut out)
}

#[test]
fn cleartext_logins() {
    for secret in alice_secrets() {
        assert_eq!(cleartext_login(Some(&secret), b"pencil"), Ok(AuthStep::Done), "{secret:?}");
        for wrong in [&b"pencil "[..], b"", b"\xff"] {
            assert_failed(cleartext_login(Some(&secret), wrong));
        }
    }
    assert_failed(cleartext_login(None, b"pencil"));
    assert_failed(cleartext_login(Some(&Secret::parse("").unwrap()), b""));
}

#[test]
fn trust_needs_nothing() {
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::Trust, None, "alice", None, &mut out);
    assert!(out.is_empty() && auth.is_done());
    let e = auth.on_password_message(b"pencil\0", &mut out).unwrap_err();
    assert_eq!(e, AuthError::Protocol(AuthProtocolError::Unexpected));
}

fn protocol_error(method: AuthMethod, messages: &[&[u8]]) -> AuthProtocolError {
    let [plain, ..] = alice_secrets();
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(method, Some(&plain), "alice", None, &mut out);
    let (last, init) = messages.split_last().unwrap();
    for m in init {
        auth.on_password_message(m, &mut out).unwrap();
    }
    out.clear();
    match auth.on_password_message(last, &mut out) {
        Err(e @ AuthError::Protocol(_)) => {
            assert_eq!(e.sqlstate(), SqlState::PROTOCOL_VIOLATION);
            assert!(out.is_empty());
            // Nothing is accepted after an error.
            assert!(auth.on_password_message(b"pencil\0", &mut out).is_err());
            let AuthError::Protocol(p) = e else { unreachable!() };
            p
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn malformed_messages_are_protocol_violations() {
    use AuthMethod::*;
    use AuthProtocolError as P;
    assert!(matches!(protocol_error(Cleartext, &[b"pencil"]), P::Wire(_)));
    assert!(matches!(protocol_error(Cleartext, &[b"pencil\0x"]), P::Wire(_)));
    assert!(matches!(protocol_error(Md5, &[b""]), P::Wire(_)));
    assert!(matches!(protocol_error(ScramSha256, &[b"SCRAM-SHA-256"]), P::Wire(_)));
    assert!(matches!(protocol_error(ScramSha256, &[b"SCRAM-SHA-256\0\0\0\0\x01nn"]), P::Wire(_)));
    assert_eq!(protocol_error(ScramSha256, &[b"SCRAM-SHA-256-PLUS\0\0\0\0\0"]), P::UnsupportedMechanism);
    assert!(matches!(protocol_error(ScramSha256, &[b"SCRAM-SHA-256\0\0\0\0\x03x,,"]), P::Scram(_)));
    let first: &[u8] = b"SCRAM-SHA-256\0\0\0\0\x09n,,n=,r=x";
    assert!(matches!(protocol_error(ScramSha256, &[first, b"c=biws,r=x,p=AAAA"]), P::Scram(_)));
    assert_eq!(
        protocol_error(Cleartext, &[b"pencil\0", b"x\0"]).to_string(),
        "password message received when none was expected"
    );
}

#[test]
fn unknown_user_reports_malformed_messages_the_same_way() {
    let mut out = BytesMut::new();
    let mut auth = ClientAuthenticator::start(AuthMethod::ScramSha256, None, "ghost", None, &mut out);
    auth.on_password_message(b"SCRAM-SHA-256\0\0\0\0\x09n,,n=,r=x", &mut out).unwrap();
    let e = auth.on_password_message(b"c=biws,r=x,p=AAAA", &mut out).unwrap_err();
    assert!(matches!(e, AuthError::Protocol(AuthProtocolError::Scram(_))));
}

proptest! {
    #[test]
    fn random_messages_never_panic(
        method in prop_oneof![Just(AuthMethod::Cleartext), Just(AuthMethod::Md5), Just(AuthMethod::ScramSha256)],
        secret in 0..3u8,
        prefix in prop_oneof![Just(&b""[..]), Just(&b"SCRAM-SHA-256\0"[..]), Just(&b"SCRAM-SHA-256\0\0\0\0\x09n,,n=,r=x"[..])],
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..4),
    ) {
        let secret = match secret {
            0 => None,
            1 => Some(Secret::Md5(wire::md5::md5_hash("alice", "pencil"))),
            _ => Some(Secret::Scram(wire::scram::ScramVerifier::from_password("pencil", b"salt", 2))),
        };
        let mut out = BytesMut::new();
        let mut auth = ClientAuthenticator::start(method, secret.as_ref(), "alice", None, &mut out);
        for (i, m) in messages.iter().enumerate() {
            let mut body = if i == 0 { prefix.to_vec() } else { Vec::new() };
            body.extend_from_slice(m);
            let _ = auth.on_password_message(&body, &mut out);
        }
    }
}
