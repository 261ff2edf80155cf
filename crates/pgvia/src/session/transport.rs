//! The rules that tie a login to what carries it (`tls_mode`, client certificates,
//! `allow_cleartext_without_tls`, `cert` users), written once for every entry point: wire
//! clients on TCP or the Unix socket, wire sessions over the gateway's WebSocket (`/v2`),
//! and the gateway's `/sql` requests. An entry point describes its connection as a
//! [`Transport`] and turns a refusal into its own answer (a FATAL ErrorResponse, an HTTP
//! error); none of them decides these rules for itself.

use wire::sqlstate::SqlState;

use super::error::SessionError;
use crate::auth::{AuthError, AuthMethod};
use crate::config::{General, TlsMode};
use crate::net::{Carrier, ClientStream};

/// Which kind of connection a login arrives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Tcp,
    /// Protected by the socket file's permissions; cannot carry TLS (as with PostgreSQL).
    Unix,
    /// The wire protocol over the gateway's WebSocket (`/v2`).
    WebSocket,
    /// A gateway `/sql` request.
    Http,
}

/// What a login travels over, as far as the rules below are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transport {
    pub via: Via,
    pub tls: bool,
    /// The common name of a client certificate rustls verified against `client_tls_ca_file`;
    /// only a wire TLS connection can carry one (the gateway's HTTPS asks for none).
    pub peer_name: Option<String>,
    /// Whether a verified client certificate was shown at all (one may lack a common name).
    pub client_cert: bool,
}

impl Transport {
    pub fn of(stream: &ClientStream) -> Self {
        let via = match stream {
            ClientStream::Plain(_) | ClientStream::Tls(_) => Via::Tcp,
            ClientStream::Unix(_) => Via::Unix,
            ClientStream::Memory(..) => Via::WebSocket,
        };
        Transport {
            via,
            tls: stream.is_tls(),
            peer_name: stream.peer_common_name(),
            client_cert: stream.has_peer_certificate(),
        }
    }

    /// A gateway `/sql` request carried over `carrier`.
    pub fn http(carrier: Carrier) -> Self {
        Transport { via: Via::Http, tls: carrier == Carrier::Tls, peer_name: None, client_cert: false }
    }

    /// What to tell a client to do instead, for each way in.
    fn use_tls_hint(&self) -> &'static str {
        match self.via {
            Via::Tcp | Via::Unix => "connect with sslmode=require",
            Via::WebSocket => "connect with wss:// to a gateway with gateway.tls = true",
            Via::Http => "send the request with https:// to a gateway with gateway.tls = true",
        }
    }
}

/// `tls_mode`, before the user is known: `require` and stronger refuse a login without TLS
/// (a Unix socket excepted); `verify-ca` and `verify-full` also one without a verified client
/// certificate (a wire TLS handshake already insists on one; the gateway's cannot carry one).
pub fn check_transport(general: &General, t: &Transport) -> Result<(), SessionError> {
    let mode = general.tls_mode;
    if t.via == Via::Unix || !mode.requires_tls() {
        return Ok(());
    }
    if !t.tls {
        return Err(SessionError::refused(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            format!("TLS is required by this pgvia (tls_mode = {mode}); {}", t.use_tls_hint()),
        ));
    }
    if matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyFull) && !t.client_cert {
        return Err(SessionError::refused(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            format!(
                "a client certificate is required by this pgvia (tls_mode = {mode}), and this connection cannot show one; connect with the wire protocol over TLS"
            ),
        ));
    }
    Ok(())
}

/// The rules of the user's authentication method, once the user is known: a certificate
/// naming the user for `cert` (and for everyone on TLS under `verify-full`), and TLS for a
/// `cleartext` password unless `allow_cleartext_without_tls`. `Ok(true)`: the certificate
/// was the whole proof (`cert`), nothing more to ask.
pub fn check_method(
    general: &General,
    method: AuthMethod,
    known: bool,
    user: &str,
    t: &Transport,
) -> Result<bool, SessionError> {
    // A certificate naming someone else, or none, reads the same as a user that does not
    // exist: 28000, and the name the client gave.
    let check_cert = method == AuthMethod::Cert || (general.tls_mode == TlsMode::VerifyFull && t.tls);
    if check_cert && (!known || t.peer_name.as_deref() != Some(user)) {
        return Err(SessionError::Auth { user: user.to_owned(), source: AuthError::Certificate });
    }
    if method == AuthMethod::Cert {
        return Ok(true);
    }
    if method == AuthMethod::Cleartext && !t.tls && !general.allow_cleartext_without_tls {
        return Err(SessionError::refused(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "cleartext password authentication is only allowed over TLS (allow_cleartext_without_tls = false)",
        ));
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(mode: TlsMode, cleartext: bool) -> General {
        General { tls_mode: mode, allow_cleartext_without_tls: cleartext, ..General::default() }
    }

    fn over(via: Via, tls: bool, cert: Option<&str>) -> Transport {
        Transport { via, tls, peer_name: cert.map(str::to_owned), client_cert: cert.is_some() }
    }

    #[test]
    fn tls_mode_binds_every_way_in() {
        use TlsMode::*;
        let cases = [
            // (mode, transport, allowed)
            (Require, over(Via::Tcp, false, None), false),
            (Require, over(Via::WebSocket, false, None), false),
            (Require, over(Via::Http, false, None), false),
            (Require, over(Via::Unix, false, None), true),
            (Require, over(Via::Tcp, true, None), true),
            (Require, over(Via::WebSocket, true, None), true),
            (Require, over(Via::Http, true, None), true),
            (VerifyCa, over(Via::Http, true, None), false),
            (VerifyCa, over(Via::WebSocket, true, None), false),
            (VerifyCa, over(Via::Tcp, true, Some("app")), true),
            (VerifyFull, over(Via::Http, true, None), false),
            (Allow, over(Via::Http, false, None), true),
            (Disable, over(Via::WebSocket, false, None), true),
        ];
        for (mode, t, allowed) in cases {
            let verdict = check_transport(&general(mode, false), &t);
            assert_eq!(verdict.is_ok(), allowed, "{mode} over {t:?}: {verdict:?}");
        }
    }

    #[test]
    fn method_rules_are_the_same_for_http() {
        let strict = general(TlsMode::Allow, false);
        let http = Transport::http(Carrier::Plain);
        let https = Transport::http(Carrier::Tls);
        assert!(check_method(&strict, AuthMethod::Cleartext, true, "app", &http).is_err());
        assert!(matches!(check_method(&strict, AuthMethod::Cleartext, true, "app", &https), Ok(false)));
        assert!(
            check_method(&general(TlsMode::Allow, true), AuthMethod::Cleartext, true, "app", &http).is_ok()
        );
        assert!(check_method(&strict, AuthMethod::Trust, true, "app", &http).is_ok());
        // No certificate can come over HTTP: a `cert` user is refused, as one without TLS is.
        let e = check_method(&strict, AuthMethod::Cert, true, "app", &https);
        assert!(matches!(e, Err(SessionError::Auth { source: AuthError::Certificate, .. })), "{e:?}");
        let wire = over(Via::Tcp, true, Some("app"));
        assert!(matches!(check_method(&strict, AuthMethod::Cert, true, "app", &wire), Ok(true)));
        assert!(check_method(&strict, AuthMethod::Cert, true, "bob", &wire).is_err());
    }
}
