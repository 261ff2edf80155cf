//! ServerAuthenticator against our own ClientAuthenticator, and against scripted servers.

use bytes::{BufMut, BytesMut};
use wire::build;

use super::*;

#[derive(Debug)]
enum LoopbackError {
    Client(AuthError),
    Server(ServerAuthError),
}

/// pgvia logging in to pgvia: the bodies each side writes are fed to the other.
fn loopback(
    method: AuthMethod,
    secret: Option<&Secret>,
    password: Option<&str>,
) -> Result<(), LoopbackError> {
    let credential = password.map_or(ServerCredential::None, |p| ServerCredential::Password(p.to_owned()));
    loopback_with(method, secret, &credential).map(drop)
}

/// As [`loopback`], with any credential; returns the ClientKey the checking side recovered.
fn loopback_with(
    method: AuthMethod,
    secret: Option<&Secret>,
    credential: &ServerCredential,
) -> Result<Option<[u8; 32]>, LoopbackError> {
    let mut to_server = BytesMut::new();
    let mut to_client = BytesMut::new();
    let mut client = ClientAuthenticator::start(method, secret, "alice", None, &mut to_server);
    let mut server = ServerAuthenticator::new("alice", credential, ServerAuthPolicy::default());
    for _ in 0..10 {
        if client.is_done() {
            build::authentication_ok(&mut to_server);
        }
        for f in frames(&mut to_server) {
            assert_eq!(f.tag(), b'R');
            let step = server.on_auth_request(f.body(), &mut to_client).map_err(LoopbackError::Server)?;
            if step == ServerAuthStep::Ok {
                assert!(client.is_done());
                return Ok(client.scram_client_key());
            }
        }
        for f in frames(&mut to_client) {
            assert_eq!(f.tag(), b'p');
            client.on_password_message(f.body(), &mut to_server).map_err(LoopbackError::Client)?;
        }
    }
    panic!("exchange did not finish");
}

#[test]
fn logs_in_with_every_method_and_secret() {
    for method in [AuthMethod::Trust, AuthMethod::Cleartext, AuthMethod::Md5, AuthMethod::ScramSha256] {
        for secret in alice_secrets() {
            if !secret.supports(method) {
                continue;
            }
            loopback(method, Some(&secret), Some("pencil")).unwrap();
        }
    }
}

#[test]
fn wrong_password_is_refused_by_the_other_side() {
    for method in [AuthMethod::Cleartext, AuthMethod::Md5, AuthMethod::ScramSha256] {
        for secret in alice_secrets() {
            if !secret.supports(method) {
                continue;
            }
            let e = loopback(method, Some(&secret), Some("pencil?")).unwrap_err();
            assert!(matches!(e, LoopbackError::Client(AuthError::Failed)), "{method} {secret:?}: {e:?}");
        }
        let e = loopback(method, None, Some("pencil")).unwrap_err();
        assert!(matches!(e, LoopbackError::Client(AuthError::Failed)), "{e:?}");
    }
}

#[test]
fn no_password_configured() {
    let [plain, ..] = alice_secrets();
    for (method, name) in [
        (AuthMethod::Cleartext, "cleartext"),
        (AuthMethod::Md5, "MD5"),
        (AuthMethod::ScramSha256, "SCRAM-SHA-256"),
    ] {
        let e = loopback(method, Some(&plain), None).unwrap_err();
        assert!(
            matches!(e, LoopbackError::Server(ServerAuthError::NoPassword { method: m }) if m == name),
            "{e:?}"
        );
    }
    loopback(AuthMethod::Trust, None, None).unwrap();
}

fn pencil() -> ServerCredential {
    ServerCredential::Password("pencil".to_owned())
}

#[test]
fn scram_pass_through_with_a_recovered_client_key() {
    let verifier = wire::scram::ScramVerifier::from_password("pencil", b"0123456789abcdef", 64);
    let stored = Secret::Scram(verifier.clone());
    let keys = ClientKeys::default();
    let credential =
        ServerCredential::ScramPassThrough { verifier: verifier.clone(), slot: keys.slot("alice") };
    // Before any client logged in, pgvia cannot answer the server.
    let e = loopback_with(AuthMethod::ScramSha256, Some(&stored), &credential).unwrap_err();
    assert!(matches!(e, LoopbackError::Server(ServerAuthError::NoClientKeyYet)), "{e:?}");
    // A client with the password logs in to pgvia, which keeps the key from its proof...
    let key = loopback(AuthMethod::ScramSha256, Some(&stored), Some("pencil"))
        .and_then(|()| loopback_with(AuthMethod::ScramSha256, Some(&stored), &pencil()));
    keys.learn("alice", key.unwrap().unwrap());
    // ...and with it pgvia logs in to a server holding the same verifier.
    loopback_with(AuthMethod::ScramSha256, Some(&stored), &credential).unwrap();
    // A server with another salt for the same password: named as such.
    let resalted =
        Secret::Scram(wire::scram::ScramVerifier::from_password("pencil", b"fedcba9876543210", 64));
    let e = loopback_with(AuthMethod::ScramSha256, Some(&resalted), &credential).unwrap_err();
    assert!(e_text(&e).contains("salt differs"), "{e:?}");
    // Only SCRAM can be answered with a verifier.
    let plain = PlainSecret::new("pencil");
    let e = loopback_with(AuthMethod::Md5, Some(&Secret::Plain(plain)), &credential).unwrap_err();
    assert!(e_text(&e).contains("which only a SCRAM verifier cannot answer"), "{e:?}");
}

#[test]
fn md5_pass_through_answers_with_the_stored_hash() {
    let hash = wire::md5::md5_hash("alice", "pencil");
    let credential = ServerCredential::Md5Hash(hash.clone());
    let stored = Secret::Md5(hash);
    loopback_with(AuthMethod::Md5, Some(&stored), &credential).unwrap();
    let e =
        loopback_with(AuthMethod::ScramSha256, Some(&Secret::Plain(PlainSecret::new("pencil"))), &credential)
            .unwrap_err();
    assert!(e_text(&e).contains("only an MD5 hash cannot answer"), "{e:?}");
    let other = ServerCredential::Md5Hash(wire::md5::md5_hash("alice", "pencil?"));
    assert!(loopback_with(AuthMethod::Md5, Some(&stored), &other).is_err());
}

fn e_text(e: &LoopbackError) -> String {
    match e {
        LoopbackError::Client(e) => e.to_string(),
        LoopbackError::Server(e) => e.to_string(),
    }
}

fn request(code: i32, rest: &[u8]) -> Vec<u8> {
    let mut b = code.to_be_bytes().to_vec();
    b.extend_from_slice(rest);
    b
}

fn first_error(steps: &[Vec<u8>]) -> ServerAuthError {
    let mut auth = ServerAuthenticator::new("alice", &pencil(), ServerAuthPolicy::default());
    let mut out = BytesMut::new();
    for s in steps {
        if let Err(e) = auth.on_auth_request(s, &mut out) {
            // Nothing more is accepted after an error.
            assert!(auth.on_auth_request(&request(0, b""), &mut out).is_err());
            return e;
        }
    }
    panic!("no error");
}

#[test]
fn refuses_what_it_cannot_do() {
    use ServerAuthError as E;
    assert!(matches!(first_error(&[request(7, b"")]), E::Unsupported { code: 7, name: "GSSAPI" }));
    assert!(matches!(first_error(&[request(9, b"")]), E::Unsupported { code: 9, name: "SSPI" }));
    assert!(matches!(first_error(&[request(42, b"")]), E::Unsupported { code: 42, .. }));
    assert!(matches!(first_error(&[request(10, b"SCRAM-SHA-256-PLUS\0\0")]), E::NoSupportedMechanism));
    assert!(matches!(first_error(&[request(10, b"SCRAM-SHA-256\0")]), E::Malformed(_)));
    assert!(matches!(first_error(&[vec![0, 0]]), E::Malformed(_)));
    assert!(matches!(first_error(&[request(5, b"abc")]), E::Malformed(_)));
    assert!(matches!(first_error(&[request(0, b"x")]), E::Malformed(_)));
    assert!(matches!(first_error(&[request(11, b"r=x")]), E::Unexpected { code: 11 }));
    assert!(matches!(first_error(&[request(3, b""), request(3, b"")]), E::Unexpected { code: 3 }));
    assert!(matches!(first_error(&[request(0, b""), request(0, b"")]), E::Unexpected { code: 0 }));
}

#[test]
fn ok_in_the_middle_of_scram_is_refused() {
    // A server that skips SCRAM's final step never proves it knows the password.
    let sasl = request(10, b"SCRAM-SHA-256\0\0");
    assert!(matches!(first_error(&[sasl.clone(), request(0, b"")]), ServerAuthError::Unexpected { code: 0 }));
}

/// A server holding the verifier of another password: its first message is fine, but it
/// cannot produce the right signature, however it tries.
#[test]
fn server_signature_is_verified() {
    let mut auth = ServerAuthenticator::new("alice", &pencil(), ServerAuthPolicy::default());
    let mut out = BytesMut::new();
    auth.on_auth_request(&request(10, b"SCRAM-SHA-256\0\0"), &mut out).unwrap();
    let initial = frames(&mut out).pop().unwrap();
    let mut r = wire::reader::Reader::new(initial.body(), "test");
    r.cstr().unwrap();
    let client_first = r.nullable_bytes().unwrap().unwrap();
    let nonce = &client_first[client_first.iter().position(|&b| b == b'r').unwrap() + 2..];
    let mut server_first = b"r=".to_vec();
    server_first.extend_from_slice(nonce);
    server_first.extend_from_slice(b"SERVERPART,s=c2FsdHNhbHQ=,i=4096");
    auth.on_auth_request(&request(11, &server_first), &mut out).unwrap();
    let mut forged = BytesMut::new();
    forged.put_slice(b"v=");
    forged.put_slice(b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    let e = auth.on_auth_request(&request(12, &forged), &mut out).unwrap_err();
    assert!(matches!(e, ServerAuthError::ServerSignatureMismatch), "{e:?}");
}

#[test]
fn malformed_scram_replies() {
    let sasl = request(10, b"SCRAM-SHA-256\0\0");
    let e = first_error(&[sasl.clone(), request(11, b"nonsense")]);
    assert!(matches!(e, ServerAuthError::ScramServerFirst(_)), "{e:?}");
    let e = first_error(&[sasl.clone(), request(12, b"v=AAAA")]);
    assert!(matches!(e, ServerAuthError::Unexpected { code: 12 }), "{e:?}");
}

#[test]
fn server_final_errors_and_garbage() {
    for (fin, want) in [(&b"e=invalid-proof"[..], "e"), (b"v=AAAA", "m"), (b"x", "m")] {
        let mut to_server = BytesMut::new();
        let [plain, ..] = alice_secrets();
        let mut client =
            ClientAuthenticator::start(AuthMethod::ScramSha256, Some(&plain), "alice", None, &mut to_server);
        let mut server = ServerAuthenticator::new("alice", &pencil(), ServerAuthPolicy::default());
        let mut to_client = BytesMut::new();
        for _ in 0..2 {
            for f in frames(&mut to_server) {
                server.on_auth_request(f.body(), &mut to_client).unwrap();
            }
            for f in frames(&mut to_client) {
                client.on_password_message(f.body(), &mut to_server).unwrap();
            }
        }
        frames(&mut to_server);
        let e = server.on_auth_request(&request(12, fin), &mut to_client).unwrap_err();
        match want {
            "e" => {
                assert!(matches!(&e, ServerAuthError::ScramServerError(m) if m == "invalid-proof"), "{e:?}")
            }
            _ => assert!(matches!(e, ServerAuthError::ScramServerFinal), "{e:?}"),
        }
    }
}

#[test]
fn plain_passwords_are_refused_when_the_policy_says_so() {
    let policy = ServerAuthPolicy { plain_passwords: PlainPasswords::Refused, ..ServerAuthPolicy::default() };
    for (req, method) in [(request(3, b""), "cleartext"), (request(5, b"salt"), "MD5")] {
        let mut auth = ServerAuthenticator::new("alice", &pencil(), policy);
        let mut out = BytesMut::new();
        let e = auth.on_auth_request(&req, &mut out).unwrap_err();
        assert!(matches!(e, ServerAuthError::PlainRefused { method: m } if m == method), "{e:?}");
        assert!(out.is_empty(), "nothing of the password is sent");
    }
    // SCRAM is still answered.
    let mut auth = ServerAuthenticator::new("alice", &pencil(), policy);
    let mut out = BytesMut::new();
    auth.on_auth_request(&request(10, b"SCRAM-SHA-256\0\0"), &mut out).unwrap();
    assert!(!out.is_empty());
}

#[test]
fn scram_iteration_count_is_bounded() {
    let run = |count: &str, max: u32| {
        let policy = ServerAuthPolicy { max_scram_iterations: max, ..ServerAuthPolicy::default() };
        let mut auth = ServerAuthenticator::new("alice", &pencil(), policy);
        let mut out = BytesMut::new();
        auth.on_auth_request(&request(10, b"SCRAM-SHA-256\0\0"), &mut out).unwrap();
        let initial = frames(&mut out).pop().unwrap();
        let mut r = wire::reader::Reader::new(initial.body(), "test");
        r.cstr().unwrap();
        let client_first = r.nullable_bytes().unwrap().unwrap();
        let nonce = &client_first[client_first.iter().position(|&b| b == b'r').unwrap() + 2..];
        let mut server_first = b"r=".to_vec();
        server_first.extend_from_slice(nonce);
        server_first.extend_from_slice(format!("XYZ,s=c2FsdHNhbHQ=,i={count}").as_bytes());
        auth.on_auth_request(&request(11, &server_first), &mut out)
    };
    assert!(run("4096", 4096).is_ok());
    let e = run("4097", 4096).unwrap_err();
    assert!(matches!(e, ServerAuthError::TooManyIterations { count: 4097, max: 4096 }), "{e:?}");
    let e = run("99999999999999999999999", 100_000).unwrap_err();
    assert!(matches!(e, ServerAuthError::TooManyIterations { count: u64::MAX, .. }), "{e:?}");
}
