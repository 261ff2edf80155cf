//! The HTTP side door: `/metrics` (Prometheus/OpenMetrics text) and `/health`.
//!
//! Off unless `general.metrics_listen` is set. Nothing here is on the hot path: a scrape
//! reads the pools' atomics and sums the clients' own counters (see `stats.rs`).

mod encode;
mod family;
mod health;
mod hosts;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::app::App;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the listener's connections share: the app, the connection count and the last
/// `/health` answer.
struct Side {
    app: Arc<App>,
    connections: AtomicUsize,
    /// `/health` probes servers; concurrent requests wait for one probe and share it, and its
    /// answer is reused for `limits.health_cache`, so a scraper cannot make pgvia open a
    /// connection to each server per request.
    health: tokio::sync::Mutex<Option<(Instant, bool, String)>>,
}

/// Serves HTTP on `listener` until the task is dropped. Each connection must send its
/// headers within `limits.metrics_header_timeout`; past `limits.metrics_max_connections`
/// open at once, a new one gets `503` and is closed.
pub async fn serve(listener: TcpListener, app: Arc<App>) {
    let side =
        Arc::new(Side { app, connections: AtomicUsize::new(0), health: tokio::sync::Mutex::new(None) });
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (cap, header_timeout) = {
            let config = side.app.config();
            (config.limits.metrics_max_connections as usize, config.limits.metrics_header_timeout)
        };
        if side.connections.fetch_add(1, Ordering::AcqRel) >= cap {
            side.connections.fetch_sub(1, Ordering::AcqRel);
            // A fresh socket's send buffer takes this whole; the client is not waited for.
            let _ = tcp.try_write(BUSY);
            tracing::debug!(%peer, "metrics listener: connection refused (limits.metrics_max_connections = {cap})");
            continue;
        }
        let side = side.clone();
        tokio::spawn(async move {
            let inner = side.clone();
            let service = hyper::service::service_fn(move |req| respond(inner.clone(), req));
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(tcp), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "metrics connection ended with an error");
            }
            side.connections.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 45\r\nconnection: close\r\n\r\ntoo many connections to the metrics listener\n";

async fn respond(side: Arc<Side>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n".into()));
    }
    if !authorized(&side.app, &req) {
        let mut r = reply(StatusCode::UNAUTHORIZED, "text/plain", "a bearer token is required\n".into());
        r.headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
        return Ok(r);
    }
    let app = &side.app;
    Ok(match req.uri().path() {
        "/metrics" => match encode::encode(app) {
            Ok(text) => reply(StatusCode::OK, OPENMETRICS, text),
            Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", "encoding failed\n".into()),
        },
        "/health" => {
            let (ok, text) = cached_health(&side).await;
            let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
            reply(status, "text/plain; charset=utf-8", text)
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "try /metrics or /health\n".into()),
    })
}

/// With `general.metrics_auth_token` set, a request must carry `Authorization: Bearer
/// <token>` (compared in constant time).
fn authorized(app: &App, req: &Request<Incoming>) -> bool {
    let config = app.config();
    let Some(token) = config.general.metrics_auth_token.as_deref() else { return true };
    let Some(given) = req.headers().get(hyper::header::AUTHORIZATION) else { return false };
    let Some(given) = given.as_bytes().strip_prefix(b"Bearer ") else { return false };
    bool::from(given.ct_eq(token.as_bytes()))
}

/// The last `/health` answer if it is younger than `limits.health_cache`, else a new one.
async fn cached_health(side: &Side) -> (bool, String) {
    let fresh_for = side.app.config().limits.health_cache;
    let mut last = side.health.lock().await;
    if let Some((at, ok, text)) = last.as_ref() {
        if at.elapsed() < fresh_for {
            return (*ok, text.clone());
        }
    }
    let (ok, text) = health::check(&side.app).await;
    *last = Some((Instant::now(), ok, text.clone()));
    (ok, text)
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    response
}
