//! The SCRAM-SHA-256 exchange both ways: pgvia checking a client, and pgvia logging in to a
//! server.
//!
//! `server` input: a mode byte, then messages split at [`crate::split::SEPARATOR`]. Mode 0
//! drives `wire::scram::ServerExchange` with a fixed verifier and server nonce, so a recorded
//! exchange replays and the fuzzer can reach the proof check and success; modes 1-3 drive
//! pgvia's `ClientAuthenticator` (SCRAM for a known user, SCRAM for an unknown one, MD5) with
//! each message as a PasswordMessage body. Invariants: success leaves a ClientKey whose
//! SHA-256 is the verifier's StoredKey and a server-final-message that parses; any error ends
//! the exchange (every later message is refused).
//!
//! `client` input: messages split the same way, each the body of an Authentication ('R')
//! message to pgvia's `ServerAuthenticator`. The text `{N}` in a message stands for the nonce
//! pgvia sent in its client-first-message, so the server-first check can pass. Invariants:
//! after an error every later message is refused; once a SCRAM exchange started,
//! AuthenticationOk is never accepted without the server's proof (which the fuzzer cannot
//! forge without the password's keys).

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::BytesMut;
use pgvia::auth::{
    AuthMethod, AuthStep, ClientAuthenticator, Secret, ServerAuthPolicy, ServerAuthStep, ServerAuthenticator,
    ServerCredential,
};
use wire::scram::{parse_server_final, ScramVerifier, ServerExchange, ServerFinal, SERVER_NONCE_LEN};

use crate::split::messages;

pub const PASSWORD: &str = "pencil";
const SALT: &[u8; 16] = b"pgvia-fuzz-salt!";
pub const SERVER_NONCE: &[u8; SERVER_NONCE_LEN] = b"fixed-server-nonce";
/// Above this a server-first-message is not tried: pgvia would hash for as long as the server
/// asks (servers are configured and trusted; see `fuzz/README.md`).
const MAX_CLIENT_ITERATIONS: u64 = 10_000;

pub fn verifier() -> &'static ScramVerifier {
    static V: OnceLock<ScramVerifier> = OnceLock::new();
    V.get_or_init(|| ScramVerifier::from_password(PASSWORD, SALT, 4096))
}

pub fn server(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let msgs = messages(rest, 4);
    match mode % 4 {
        0 => exchange(&msgs),
        1 => authenticator(AuthMethod::ScramSha256, Some(Secret::Scram(verifier().clone())), &msgs),
        2 => authenticator(AuthMethod::ScramSha256, None, &msgs),
        _ => authenticator(AuthMethod::Md5, Secret::parse("md5a3556571e93b0d20722ba62be61e8c2d").ok(), &msgs),
    }
}

fn exchange(msgs: &[&[u8]]) {
    let mut ex = ServerExchange::new(verifier().clone(), SERVER_NONCE);
    let mut failed = false;
    for (i, m) in msgs.iter().enumerate() {
        let result = if i == 0 { ex.client_first(m) } else { ex.client_final(m) };
        if failed {
            assert!(result.is_err(), "a failed exchange accepted message {i}");
            continue;
        }
        match (i, result) {
            (0, Ok(server_first)) => {
                assert!(server_first.starts_with(b"r="));
            }
            (1, Ok(server_final)) => {
                let key = ex.client_key().expect("a successful exchange yields the ClientKey");
                let stored: [u8; 32] = sha256(&key);
                let expected = stored_key(verifier());
                assert_eq!(stored, expected, "ClientKey does not hash to StoredKey");
                assert!(matches!(parse_server_final(&server_final), Some(ServerFinal::Verifier(_))));
            }
            (_, Ok(_)) => panic!("message {i} accepted after the exchange ended"),
            (_, Err(_)) => {
                assert!(ex.client_key().is_none() || i > 1);
                failed = true;
            }
        }
    }
}

fn authenticator(method: AuthMethod, secret: Option<Secret>, msgs: &[&[u8]]) {
    let mut out = BytesMut::new();
    // An odd number of messages also covers SCRAM-SHA-256-PLUS (a TLS client's offer).
    let binding = (msgs.len() % 2 == 1).then_some(&[7u8; 32][..]);
    let mut auth = ClientAuthenticator::start(method, secret.as_ref(), "fuzz", binding, &mut out);
    let mut ended = false;
    for m in msgs {
        out.clear();
        let result = auth.on_password_message(m, &mut out);
        if ended {
            assert!(result.is_err(), "a finished exchange accepted another message");
            continue;
        }
        match result {
            Ok(AuthStep::Continue) => assert!(!out.is_empty(), "Continue without a challenge"),
            Ok(AuthStep::Done) => {
                assert!(auth.is_done());
                ended = true;
            }
            Err(e) => {
                assert!(out.is_empty(), "a reply was written for a refused message");
                let _ = (e.sqlstate(), e.client_message("fuzz"));
                ended = true;
            }
        }
    }
}

pub fn client(data: &[u8]) {
    let mut auth = ServerAuthenticator::new(
        "fuzz",
        &ServerCredential::Password(PASSWORD.to_owned()),
        ServerAuthPolicy::default(),
    );
    let mut out = BytesMut::new();
    let mut nonce = Vec::new();
    let mut ended = false;
    let mut scram_started = false;
    for m in messages(data, 6) {
        let body = substitute_nonce(m, &nonce);
        if server_first_too_costly(&body) {
            return;
        }
        out.clear();
        let result = auth.on_auth_request(&body, &mut out);
        if ended {
            assert!(result.is_err(), "a finished login accepted another message");
            continue;
        }
        match result {
            Ok(ServerAuthStep::Continue) => {
                assert!(!out.is_empty());
                if let Some(n) = client_nonce(&out) {
                    scram_started = true;
                    nonce = n;
                }
            }
            Ok(ServerAuthStep::Ok) => {
                assert!(!scram_started, "AuthenticationOk accepted without the server's SCRAM proof");
                ended = true;
            }
            Err(e) => {
                let _ = e.to_string();
                ended = true;
            }
        }
    }
}

/// The `r=` nonce of the client-first-message in a SASLInitialResponse frame.
fn client_nonce(frame: &[u8]) -> Option<Vec<u8>> {
    if frame.first() != Some(&b'p') {
        return None;
    }
    let at = frame.windows(3).position(|w| w == b",r=")?;
    Some(frame[at + 3..].to_vec())
}

fn substitute_nonce(m: &[u8], nonce: &[u8]) -> Vec<u8> {
    match m.windows(3).position(|w| w == b"{N}") {
        Some(at) => [&m[..at], nonce, &m[at + 3..]].concat(),
        None => m.to_vec(),
    }
}

fn server_first_too_costly(body: &[u8]) -> bool {
    let Some(at) = body.windows(3).position(|w| w == b",i=") else { return false };
    let digits: Vec<u8> = body[at + 3..].iter().take_while(|b| b.is_ascii_digit()).copied().collect();
    digits.len() > 5
        || std::str::from_utf8(&digits).ok().and_then(|d| d.parse::<u64>().ok()).unwrap_or(0)
            > MAX_CLIENT_ITERATIONS
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

/// A full, valid exchange for mode 0, recorded from postgres-protocol's client.
pub fn recorded_exchange() -> Vec<u8> {
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
    let mut client = ScramSha256::new(PASSWORD.as_bytes(), ChannelBinding::unsupported());
    let mut server = ServerExchange::new(verifier().clone(), SERVER_NONCE);
    let first = client.message().to_vec();
    let server_first = server.client_first(&first).expect("a real client-first-message");
    client.update(&server_first).expect("our server-first-message");
    let fin = client.message().to_vec();
    let server_final = server.client_final(&fin).expect("a real proof");
    client.finish(&server_final).expect("our signature");
    let mut input = vec![0u8];
    input.extend(crate::split::join(&[&first, &fin]));
    input
}

fn stored_key(v: &ScramVerifier) -> [u8; 32] {
    // The verifier's text form is PostgreSQL's: `SCRAM-SHA-256$i:salt$StoredKey:ServerKey`.
    let text = v.to_string();
    let keys = text.rsplit('$').next().unwrap_or_default();
    let stored = keys.split(':').next().unwrap_or_default();
    STANDARD.decode(stored).ok().and_then(|k| k.try_into().ok()).unwrap_or([0; 32])
}
