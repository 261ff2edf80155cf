//! The HTTP gateway: `POST /sql` in Neon's format (rows as JSON, streamed) and the wire
//! protocol over WebSocket (`/v2`), on `gateway.listen`.
//!
//! Every request is served by an ordinary pgvia session: the gateway checks the request's
//! credentials against pgvia's users (`credentials`), then talks the wire protocol to a
//! session over an in-memory pipe (`tunnel`), so pooling modes, prepared statements and
//! routing apply as for any client. `request` reads what is asked, `run` drives the
//! exchange, `document`/`results`/`json` write the answer straight from the server's
//! DataRow bytes, `sink` streams it to hyper; `websocket` carries wire sessions.

pub mod credentials;
pub mod document;
pub mod json;
pub mod request;
pub mod results;
pub mod run;
pub mod sink;
pub mod tunnel;
mod websocket;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::app::App;
use crate::net::{Carrier, ClientPeer};
use credentials::Verifier;
use request::{Format, Work};
use sink::{GatewayBody, Sink};

/// What the gateway's connections share.
pub struct Gateway {
    app: Arc<App>,
    verifier: Verifier,
    connections: AtomicUsize,
    tls: Option<TlsAcceptor>,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway TLS: {0}")]
    Tls(#[from] crate::net::tls::TlsError),
    #[error("gateway TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

impl Gateway {
    /// The gateway's shared state; with `gateway.tls`, an HTTPS acceptor for the wire
    /// listener's certificate (ALPN `http/1.1`).
    pub fn new(app: Arc<App>) -> Result<Arc<Self>, GatewayError> {
        let tls = {
            let config = app.config();
            match (&config.general.tls_cert_file, &config.general.tls_key_file) {
                (Some(cert), Some(key)) if config.gateway.tls => Some(https_acceptor(cert, key)?),
                _ => None,
            }
        };
        Ok(Arc::new(Gateway { app, verifier: Verifier::default(), connections: AtomicUsize::new(0), tls }))
    }
}

fn https_acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, GatewayError> {
    let chain = crate::net::pem::read_certs(cert)?;
    let key = crate::net::pem::read_key(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 35\r\nconnection: close\r\n\r\ntoo many connections to the gateway";

/// Serves HTTP on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, gw: Arc<Gateway>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "gateway: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (cap, header_timeout) = {
            let config = gw.app.config();
            (config.gateway.max_connections as usize, config.gateway.header_timeout)
        };
        if gw.connections.fetch_add(1, Ordering::AcqRel) >= cap {
            gw.connections.fetch_sub(1, Ordering::AcqRel);
            let _ = tcp.try_write(BUSY);
            continue;
        }
        crate::net::stream::tune(&tcp);
        let gw = gw.clone();
        tokio::spawn(async move {
            match gw.tls.clone() {
                Some(acceptor) => match tokio::time::timeout(header_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => connection(gw.clone(), TokioIo::new(tls), peer, Carrier::Tls).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "gateway: TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "gateway: TLS handshake timed out"),
                },
                None => connection(gw.clone(), TokioIo::new(tcp), peer, Carrier::Plain).await,
            }
            gw.connections.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn connection<I>(gw: Arc<Gateway>, io: I, peer: SocketAddr, carrier: Carrier)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let header_timeout = gw.app.config().gateway.header_timeout;
    let service = hyper::service::service_fn(move |req| handle(gw.clone(), peer, carrier, req));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "gateway connection ended with an error");
    }
}

type Answer = Response<GatewayBody>;

async fn handle(
    gw: Arc<Gateway>,
    peer: SocketAddr,
    carrier: Carrier,
    req: Request<Incoming>,
) -> Result<Answer, Infallible> {
    let origin = match origin_verdict(&gw.app, req.headers()) {
        Origin::Allowed(o) => Some(o),
        Origin::None => None,
        // A web page of another origin: refused before anything runs. CORS alone would only
        // hide the answer from the page, after its SQL had run as whoever the browser can be
        // (a `trust` user, cached Basic credentials); a WebSocket is not bound by CORS at all.
        Origin::Refused => {
            tracing::info!(%peer, path = req.uri().path(), "gateway: request from an origin not in cors_allowed_origins refused");
            return Ok(error(
                StatusCode::FORBIDDEN,
                "28000",
                "this origin may not use pgvia's gateway (gateway.cors_allowed_origins)",
            ));
        }
    };
    let mut answer = match (req.method(), req.uri().path()) {
        (&Method::OPTIONS, _) => preflight(),
        (&Method::POST, "/sql") => sql(&gw, peer, carrier, req).await,
        (&Method::GET, "/v2") => websocket::upgrade(&gw, peer, carrier, req),
        (_, "/sql") => error(StatusCode::METHOD_NOT_ALLOWED, "08P01", "use POST for /sql"),
        _ => error(
            StatusCode::NOT_FOUND,
            "08P01",
            "not found: pgvia's gateway serves POST /sql and WebSocket /v2",
        ),
    };
    if let Some(origin) = origin {
        let h = answer.headers_mut();
        h.insert("access-control-allow-origin", origin);
        h.insert("vary", HeaderValue::from_static("Origin"));
    }
    Ok(answer)
}

/// What a request's `Origin` allows.
enum Origin {
    /// Allowed: answer with this `Access-Control-Allow-Origin`.
    Allowed(HeaderValue),
    /// No `Origin` and no `"*"`: not a browser's cross-origin request; no CORS headers.
    None,
    /// A web origin not in `cors_allowed_origins`.
    Refused,
}

fn origin_verdict(app: &App, headers: &HeaderMap) -> Origin {
    let config = app.config();
    let allowed = &config.gateway.cors_allowed_origins;
    if allowed.iter().any(|o| o == "*") {
        return Origin::Allowed(HeaderValue::from_static("*"));
    }
    match headers.get(ORIGIN) {
        None => Origin::None,
        Some(o) if allowed.iter().any(|a| a.as_bytes() == o.as_bytes()) => Origin::Allowed(o.clone()),
        Some(_) => Origin::Refused,
    }
}

/// The answer to a CORS preflight: the methods and headers Neon's clients send.
fn preflight() -> Answer {
    let mut r = Response::new(GatewayBody::full(Bytes::new()));
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert("access-control-allow-methods", HeaderValue::from_static("OPTIONS, POST"));
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(
            "Authorization, Content-Type, Accept, Neon-Connection-String, Neon-Raw-Text-Output, Neon-Array-Mode, \
             Neon-Pool-Opt-In, Neon-Batch-Read-Only, Neon-Batch-Isolation-Level, Neon-Batch-Deferrable, Pgvia-Database",
        ),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    r
}

/// The startup settings of a `/sql` session: its `application_name` and the gateway's
/// `statement_timeout`.
fn session_settings(app: &App, creds: &credentials::Credentials) -> Vec<(String, String)> {
    let mut settings = vec![(
        "application_name".to_owned(),
        creds.application_name.clone().unwrap_or_else(|| "pgvia-gateway".to_owned()),
    )];
    let timeout = app.config().gateway.statement_timeout;
    if !timeout.is_zero() {
        settings.push(("statement_timeout".to_owned(), timeout.as_millis().to_string()));
    }
    settings
}

/// An answer pgvia writes itself: `{"message":..,"severity":"ERROR","code":..}`.
fn error(status: StatusCode, code: &str, message: &str) -> Answer {
    let mut body = BytesMut::new();
    results::own_error_into(&mut body, code, message);
    json_answer(status, body.freeze())
}

fn json_answer(status: StatusCode, body: Bytes) -> Answer {
    let mut r = Response::new(GatewayBody::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A login the TLS rules refuse: 403, with the SQLSTATE and words a wire client would get.
fn refused(e: &crate::session::SessionError) -> Answer {
    let (code, message) = e.client_error().unwrap_or_else(|| ("28000".into(), e.to_string()));
    error(StatusCode::FORBIDDEN, &code, &message)
}

fn unauthorized() -> Answer {
    let mut r = error(StatusCode::UNAUTHORIZED, "28P01", "authentication failed");
    r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"pgvia\""));
    r
}

async fn sql(gw: &Arc<Gateway>, peer: SocketAddr, carrier: Carrier, req: Request<Incoming>) -> Answer {
    let app = &gw.app;
    // First, as a wire client without TLS is refused at its StartupMessage, whoever it claims to be.
    let transport = crate::session::transport::Transport::http(carrier);
    if let Err(e) = crate::session::transport::check_transport(&app.config().general, &transport) {
        tracing::info!(%peer, error = %e, "gateway: request refused");
        return refused(&e);
    }
    let creds = match credentials::from_headers(req.headers(), app) {
        Ok(c) => c,
        Err(why) => {
            tracing::debug!(%peer, reason = why.0, "gateway: request refused (401)");
            return unauthorized();
        }
    };
    // Before the credentials are checked: it says nothing about who exists, and a name that
    // could not be a startup parameter never reaches a session.
    let startup = match tunnel::startup(&creds.user, &creds.database, session_settings(app, &creds)) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, "08P01", &format!("invalid startup packet: {e}")),
    };
    match gw.verifier.check(app, &creds, carrier).await {
        Ok(()) => {}
        Err(credentials::Refused::Unauthenticated(why)) => {
            tracing::info!(%peer, user = %creds.user, reason = why.0, "gateway: authentication failed");
            return unauthorized();
        }
        Err(credentials::Refused::Transport(e)) => {
            tracing::info!(%peer, user = %creds.user, error = %e, "gateway: request refused");
            return refused(&e);
        }
    }
    let (cap, gwc) = {
        let config = app.config();
        (config.gateway.max_body_bytes as usize, config.gateway.clone())
    };
    let too_large =
        || error(StatusCode::PAYLOAD_TOO_LARGE, "54000", &format!("request body over {cap} bytes"));
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        return too_large();
    }
    let headers = req.headers().clone();
    let body = match Limited::new(req.into_body(), cap).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => {
            return error(StatusCode::BAD_REQUEST, "08P01", &format!("could not read the request body: {e}"))
        }
    };
    let format = request::format(&headers);
    let parsed = (|| {
        let text = request::value_text(&headers)?;
        let row_as = request::default_row_as(&headers)?;
        let work = request::work(&body, row_as, || request::begin_statement(&headers))?;
        Ok::<_, request::BadRequest>((text, work))
    })();
    let (text, work) = match parsed {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, "08P01", &e.0),
    };
    if format == Format::Ndjson && matches!(work, Work::Batch { .. }) {
        return error(
            StatusCode::BAD_REQUEST,
            "08P01",
            "NDJSON carries one query's rows; send a batch as JSON or application/vnd.neon.sql.v1+json",
        );
    }
    let pending = match app.admission.admit(peer.ip(), &app.config().limits) {
        Ok(p) => p,
        Err(refusal) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, refusal.sqlstate().code(), &refusal.message());
        }
    };
    let tunnel = tunnel::Tunnel::start(app, ClientPeer::Tcp(peer), carrier, startup, pending);
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    let hold = usize::try_from(gwc.json_buffer_bytes).unwrap_or(usize::MAX);
    let sink = Sink::new(head_tx, format.content_type(), gwc.flush_bytes as usize, gwc.flush_interval, hold);
    let job =
        run::Job { work, format, text, max_rows: gwc.max_response_rows, max_bytes: gwc.max_response_bytes };
    tokio::spawn(run::run(app.clone(), tunnel, job, sink));
    match head_rx.await {
        Ok(head) => {
            let mut r = Response::new(head.body);
            *r.status_mut() = head.status;
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(head.content_type));
            r
        }
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "XX000", "the request ended without an answer"),
    }
}
