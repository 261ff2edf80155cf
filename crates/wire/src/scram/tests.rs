#![allow(clippy::unwrap_used)]

use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use proptest::prelude::*;

use super::*;

/// Verifiers written by PostgreSQL 15 itself (`CREATE ROLE ... PASSWORD` under
/// `password_encryption = 'scram-sha-256'`), with the passwords that made them.
const PG15_VERIFIERS: &[(&str, &str)] = &[
    (
        "pencil",
        "SCRAM-SHA-256$4096:gfDkXUR1QyVAmXkQN4Xvbg==$fyLCMVEAm7/nE+E/s8gCaGXLvgkPTb55T1bkwYyePNY=:inNclIXIfUeEqnwu3Dkkwx9YHfw4lvR5I8Uf2kY7E84=",
    ),
    (
        "päss wörd",
        "SCRAM-SHA-256$4096:nqbqHuFrz+vnedFBwz6Lsg==$ME/StpNpO+sEdI3HDacendJVfX73Z1tgXUq0KrNc9BU=:altRVmaR6gtU0v3PTL8FMzonTd5ByTH0dTUxbRuKNMo=",
    ),
    // SASLprep maps the no-break space to a space and drops the soft hyphen.
    (
        "a\u{a0}b\u{ad}c",
        "SCRAM-SHA-256$4096:oIn5MMd0+7xy80iOdt8NAg==$XBOELaHxLxXiUrRHIpdh667z+91Jq5tZoL5oylaEza0=:7VvMmy2aw5PWWMQHkw7xqgsm0LfK3bk3sh9LDc0VvPg=",
    ),
    // ASCII control characters are prohibited by SASLprep, so the raw bytes are used.
    (
        "bell\u{7}x",
        "SCRAM-SHA-256$4096:RXnNjRHF0aih+XJavbx29A==$bLCJMqlsa1wAa769XuAOLA0cvHl15IyPT5UDVSE4eWk=:U0ToGwxF9wWZdqay2DsAVYcBWN8Sna9G2rJ+vn0Lqt4=",
    ),
];

#[test]
fn matches_postgresql_verifiers() {
    for (password, text) in PG15_VERIFIERS {
        let v = ScramVerifier::parse(text).unwrap();
        assert!(v.verify_plaintext(password), "{password:?}");
        assert!(!v.verify_plaintext("pencil2"));
        let derived = ScramVerifier::from_password(password, &v.salt, v.iterations);
        assert_eq!(derived, v, "{password:?}");
        assert_eq!(derived.to_string(), *text);
    }
}

#[test]
fn matches_postgres_protocol_derivation() {
    for password in ["pencil", "", "ünïcödé", "a\u{a0}b"] {
        let text = postgres_protocol::password::scram_sha_256(password.as_bytes());
        let v: ScramVerifier = text.parse().unwrap();
        assert!(v.verify_plaintext(password));
        assert_eq!(ScramVerifier::from_password(password, &v.salt, v.iterations).to_string(), text);
    }
}

#[test]
fn rejects_bad_verifiers() {
    let good = PG15_VERIFIERS[0].1;
    assert_eq!(ScramVerifier::parse("md5abc"), Err(VerifierError::NotScram));
    assert_eq!(ScramVerifier::parse("SCRAM-SHA-256$4096:abc"), Err(VerifierError::Layout));
    for iters in ["0", "-1", "+5", "x", "", "99999999999"] {
        let bad = good.replacen("4096", iters, 1);
        assert_eq!(ScramVerifier::parse(&bad), Err(VerifierError::Iterations), "{iters}");
    }
    let bad = good.replacen("gfDk", "g!Dk", 1);
    assert_eq!(ScramVerifier::parse(&bad), Err(VerifierError::Base64 { field: "salt" }));
    let bad = good.replacen("$fyLC", "$AAAA", 1).replacen("NY=:", ":", 1);
    assert!(matches!(ScramVerifier::parse(&bad), Err(VerifierError::Base64 { .. })));
    let short = "SCRAM-SHA-256$4096:c2FsdA==$c2hvcnQ=:inNclIXIfUeEqnwu3Dkkwx9YHfw4lvR5I8Uf2kY7E84=";
    assert_eq!(ScramVerifier::parse(short), Err(VerifierError::KeyLength { field: "StoredKey" }));
}

#[test]
fn mock_verifier_is_stable_per_user_and_key() {
    let a = ScramVerifier::mock("alice", b"key one");
    assert_eq!(a, ScramVerifier::mock("alice", b"key one"));
    assert_ne!(a.salt, ScramVerifier::mock("bob", b"key one").salt);
    assert_ne!(a.salt, ScramVerifier::mock("alice", b"key two").salt);
    assert_eq!((a.salt.len(), a.iterations), (16, DEFAULT_ITERATIONS));
    assert!(!a.verify_plaintext(""));
}

#[test]
fn debug_hides_keys() {
    let v = ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap();
    let shown = format!("{v:?}");
    assert!(!shown.contains("fyLC") && !shown.contains("inNc"), "{shown}");
}

/// RFC 7677 section 3, with the server nonce forced to the RFC's.
#[test]
fn rfc7677_vector() {
    let v =
        ScramVerifier::from_password("pencil", &STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(), 4096);
    let mut ex = ServerExchange::new(v, &[0; SERVER_NONCE_LEN]);
    ex.server_nonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into();
    let first = ex.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
    assert_eq!(
        first,
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    );
    let fin = ex
        .client_final(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
              p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        )
        .unwrap();
    assert_eq!(fin, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

fn verifier(password: &str) -> ScramVerifier {
    // Few iterations keep the property tests fast in debug builds.
    ScramVerifier::from_password(password, b"0123456789abcdef", 16)
}

fn run(client: &mut ScramSha256, ex: &mut ServerExchange) -> Result<Vec<u8>, ScramError> {
    let first = ex.client_first(client.message())?;
    client.update(&first).unwrap();
    ex.client_final(client.message())
}

#[test]
fn postgres_protocol_client_logs_in() {
    for binding in [ChannelBinding::unsupported(), ChannelBinding::unrequested()] {
        let v = verifier("pencil");
        let stored_key = v.stored_key;
        let mut ex = ServerExchange::new(v, &[7; SERVER_NONCE_LEN]);
        let mut client = ScramSha256::new(b"pencil", binding);
        assert_eq!(ex.client_key(), None);
        let fin = run(&mut client, &mut ex).unwrap();
        client.finish(&fin).unwrap();
        assert_eq!(sha256(&ex.client_key().unwrap()), stored_key);
        // A finished exchange takes no more messages.
        assert_eq!(ex.client_final(b"c=biws"), Err(ScramError::OutOfOrder));
    }
}

#[test]
fn wrong_password_is_invalid_proof() {
    let mut ex = ServerExchange::new(verifier("pencil"), &[1; SERVER_NONCE_LEN]);
    let mut client = ScramSha256::new(b"pencil!", ChannelBinding::unsupported());
    let err = run(&mut client, &mut ex).unwrap_err();
    assert_eq!(err, ScramError::InvalidProof);
    assert!(err.is_invalid_proof());
    assert_eq!(ex.client_key(), None);
}

#[test]
fn channel_binding_requests_are_refused() {
    let mut ex = ServerExchange::new(verifier("pencil"), &[1; SERVER_NONCE_LEN]);
    let client = ScramSha256::new(b"pencil", ChannelBinding::tls_server_end_point(vec![1, 2, 3]));
    assert_eq!(ex.client_first(client.message()), Err(ScramError::ChannelBindingNotSupported));
}

#[test]
fn channel_binding_with_postgres_protocol_client() {
    let data = vec![9u8; 32];
    // The right data logs in; a relay's certificate gives other data and fails.
    for (client_data, ok) in [(data.clone(), true), (vec![8u8; 32], false)] {
        let mut ex = ServerExchange::new(verifier("pencil"), &[3; SERVER_NONCE_LEN]);
        ex.set_binding(Binding::Required(data.clone()));
        let mut client = ScramSha256::new(b"pencil", ChannelBinding::tls_server_end_point(client_data));
        let result = run(&mut client, &mut ex);
        if ok {
            client.finish(&result.unwrap()).unwrap();
        } else {
            assert_eq!(result, Err(ScramError::ChannelBindingMismatch));
        }
    }
}

#[test]
fn channel_binding_negotiation_errors() {
    let offered = |b: Binding| {
        let mut ex = ServerExchange::new(verifier("pencil"), &[3; SERVER_NONCE_LEN]);
        ex.set_binding(b);
        ex
    };
    // Offered, declined, and the client says it could have: the offer was stripped.
    assert_eq!(
        offered(Binding::Declined).client_first(b"y,,n=,r=abc"),
        Err(ScramError::ChannelBindingDowngrade)
    );
    assert!(offered(Binding::Declined).client_first(b"n,,n=,r=abc").is_ok());
    assert!(offered(Binding::NotOffered).client_first(b"y,,n=,r=abc").is_ok());
    let required = || Binding::Required(vec![1; 32]);
    assert!(offered(required()).client_first(b"n,,n=,r=abc").is_err());
    assert_eq!(
        offered(required()).client_first(b"p=tls-unique,,n=,r=abc"),
        Err(ScramError::UnsupportedBindingType)
    );
    assert!(offered(required()).client_first(b"p=tls-server-end-point,,n=,r=abc").is_ok());
    assert!(offered(Binding::Declined).client_first(b"p=tls-server-end-point,,n=,r=abc").is_err());
}

/// Runs a keyed client against a server exchange over `server_verifier`.
fn keyed_login(
    configured: &ScramVerifier,
    key: [u8; 32],
    server_verifier: ScramVerifier,
) -> Result<(), String> {
    let mut client = KeyedClient::new(configured, key, &[5; 18]).map_err(|e| e.to_string())?;
    let mut ex = ServerExchange::new(server_verifier, &[6; SERVER_NONCE_LEN]);
    let first = ex.client_first(&client.client_first()).map_err(|e| e.to_string())?;
    let fin = client.server_first(&first).map_err(|e| e.to_string())?;
    let server_final = ex.client_final(&fin).map_err(|e| e.to_string())?;
    client.server_final(&server_final).map_err(|e| e.to_string())
}

#[test]
fn keyed_client_logs_in_with_a_recovered_key() {
    let v = verifier("pencil");
    // The key as pgvia recovers it: from a real client's proof.
    let mut ex = ServerExchange::new(v.clone(), &[7; SERVER_NONCE_LEN]);
    let mut client = ScramSha256::new(b"pencil", ChannelBinding::unsupported());
    run(&mut client, &mut ex).unwrap();
    let key = ex.client_key().unwrap();
    keyed_login(&v, key, v.clone()).unwrap();

    // Same password, another salt or iteration count: named, before any proof is sent.
    let other_salt = ScramVerifier::from_password("pencil", b"fedcba9876543210", 16);
    assert!(keyed_login(&v, key, other_salt).unwrap_err().contains("salt differs"));
    let other_count = ScramVerifier::from_password("pencil", b"0123456789abcdef", 17);
    let err = keyed_login(&v, key, other_count).unwrap_err();
    assert!(err.contains("iteration count (17) differs from the configured verifier's (16)"), "{err}");
    // A key that is not the verifier's is refused up front.
    assert!(KeyedClient::new(&v, [0; 32], &[5; 18]).is_err());
}

#[test]
fn keyed_client_checks_the_server() {
    let v = verifier("pencil");
    let key = {
        let mut ex = ServerExchange::new(v.clone(), &[7; SERVER_NONCE_LEN]);
        let mut client = ScramSha256::new(b"pencil", ChannelBinding::unsupported());
        run(&mut client, &mut ex).unwrap();
        ex.client_key().unwrap()
    };
    let mut client = KeyedClient::new(&v, key, &[5; 18]).unwrap();
    assert_eq!(client.server_first(b"r=zzz,s=AAAA,i=16"), Err(ClientExchangeError::NonceMismatch));
    let mut client = KeyedClient::new(&v, key, &[5; 18]).unwrap();
    let mut ex = ServerExchange::new(v.clone(), &[6; SERVER_NONCE_LEN]);
    let first = ex.client_first(&client.client_first()).unwrap();
    client.server_first(&first).unwrap();
    assert_eq!(
        client.server_final(format!("v={}", STANDARD.encode([0u8; 32])).as_bytes()),
        Err(ClientExchangeError::SignatureMismatch)
    );
    assert_eq!(client.server_final(b"v=x"), Err(ClientExchangeError::OutOfOrder));
}

#[test]
fn client_first_errors() {
    let cases: &[(&[u8], ScramError)] = &[
        (b"", ScramError::Malformed("invalid gs2 channel binding flag")),
        (b"x,,n=,r=abc", ScramError::Malformed("invalid gs2 channel binding flag")),
        (b"n,a=bob,n=,r=abc", ScramError::AuthzidNotSupported),
        (b"n,,m=ext,n=,r=abc", ScramError::UnsupportedExtension),
        (b"n,,r=abc", ScramError::Malformed("expected username attribute")),
        (b"n,,n=", ScramError::Malformed("expected nonce attribute")),
        (b"n,,n=,r=", ScramError::Malformed("nonce must be non-empty printable ASCII")),
        (b"n,,n=,r=a b", ScramError::Malformed("nonce must be non-empty printable ASCII")),
        (b"n,,n=,r=abc,junk", ScramError::Malformed("invalid attribute in client-first-message")),
    ];
    for (msg, want) in cases {
        let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
        assert_eq!(ex.client_first(msg).as_ref(), Err(want), "{}", String::from_utf8_lossy(msg));
        assert_eq!(ex.client_first(b"n,,n=,r=abc"), Err(ScramError::OutOfOrder));
    }
    let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
    assert!(ex.client_first(b"n,,n=anyone,r=abc,x=extension").is_ok());
}

#[test]
fn client_final_errors() {
    let first = b"n,,n=,r=abc";
    let nonce = format!("abc{}", STANDARD.encode([0u8; SERVER_NONCE_LEN]));
    let proof = STANDARD.encode([0u8; 32]);
    let cases: Vec<(String, ScramError)> = vec![
        (format!("c=eSws,r={nonce},p={proof}"), ScramError::ChannelBindingMismatch),
        (format!("r={nonce},p={proof}"), ScramError::Malformed("expected channel binding attribute")),
        (format!("c=biws,r=abc,p={proof}"), ScramError::NonceMismatch),
        (format!("c=biws,r={nonce}"), ScramError::Malformed("missing proof attribute")),
        (
            format!("c=biws,r={nonce},p={proof},x=1"),
            ScramError::Malformed("proof must be the last attribute"),
        ),
        (format!("c=biws,r={nonce},p=AAAA"), ScramError::Malformed("proof is not 32 bytes of base64")),
        (
            format!("c=biws,r={nonce},!,p={proof}"),
            ScramError::Malformed("invalid attribute in client-final-message"),
        ),
        (format!("c=biws,r={nonce},x=ext,p={proof}"), ScramError::InvalidProof),
    ];
    for (msg, want) in cases {
        let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
        ex.client_first(first).unwrap();
        assert_eq!(ex.client_final(msg.as_bytes()), Err(want), "{msg}");
        assert_eq!(ex.client_final(msg.as_bytes()), Err(ScramError::OutOfOrder));
    }
    let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
    assert_eq!(ex.client_final(b"c=biws"), Err(ScramError::OutOfOrder));
}

#[test]
fn parses_server_final() {
    let sig = STANDARD.encode([9u8; 32]);
    assert_eq!(parse_server_final(format!("v={sig}").as_bytes()), Some(ServerFinal::Verifier([9; 32])));
    assert_eq!(parse_server_final(b"e=invalid-proof"), Some(ServerFinal::Error(b"invalid-proof")));
    assert_eq!(parse_server_final(format!("v={sig},x=1").as_bytes()), None);
    assert_eq!(parse_server_final(b"v=AAAA"), None);
    assert_eq!(parse_server_final(b"r=abc"), None);
    assert_eq!(parse_server_final(b""), None);
}

proptest! {
    #[test]
    fn keyed_client_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..200)) {
        let v = verifier("x");
        let key = [1u8; 32];
        let v = ScramVerifier { stored_key: sha256(&key), ..v };
        let mut client = KeyedClient::new(&v, key, &[0; 18]).unwrap();
        let _ = client.server_first(&msg);
        let _ = client.server_final(&msg);
    }

    #[test]
    fn client_first_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
        let _ = ex.client_first(&msg);
        let _ = ex.client_final(&msg);
    }

    #[test]
    fn client_final_never_panics(
        tail in proptest::collection::vec(any::<u8>(), 0..120),
        prefix in prop_oneof![Just(""), Just("c=biws,"), Just("c=biws,r=abcAAAAAAAAAAAAAAAAAAAAAAAA,")],
    ) {
        let mut ex = ServerExchange::new(verifier("x"), &[0; SERVER_NONCE_LEN]);
        ex.client_first(b"n,,n=,r=abc").unwrap();
        let mut msg = prefix.as_bytes().to_vec();
        msg.extend_from_slice(&tail);
        let _ = ex.client_final(&msg);
    }
}
