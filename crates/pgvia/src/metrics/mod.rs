//! The HTTP side door: `/metrics` (Prometheus/OpenMetrics text) and `/health`.
//!
//! Off unless `general.metrics_listen` is set. Nothing here is on the hot path: a scrape
//! reads the pools' atomics and sums the clients' own counters (see `stats.rs`).

mod encode;
mod family;
mod health;
mod hosts;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::app::App;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves HTTP on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, app: Arc<App>) {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| respond(app.clone(), req));
            if let Err(e) =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await
            {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
}

async fn respond(app: Arc<App>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n".into()));
    }
    Ok(match req.uri().path() {
        "/metrics" => match encode::encode(&app) {
            Ok(text) => reply(StatusCode::OK, OPENMETRICS, text),
            Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", "encoding failed\n".into()),
        },
        "/health" => {
            let (ok, text) = health::check(&app).await;
            let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
            reply(status, "text/plain; charset=utf-8", text)
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "try /metrics or /health\n".into()),
    })
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    response
}
