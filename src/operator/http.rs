//! The operator's HTTP endpoint (default port 8080, its own): `/healthz` and `/livez` (the process
//! serves), `/readyz` (its caches have synced) and `/metrics`. Plain HTTP, as operators serve
//! probes and metrics: nothing secret is on it.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::sync::watch;

use super::health::OperatorHealth;
use crate::serving;

/// Default port of the operator's endpoint.
pub const DEFAULT_PORT: u16 = 8080;

/// Binds `addr` and serves until `shutdown` changes; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<OperatorHealth>,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), serving::BindError> {
    let (listener, local) = serving::bind(addr).await?;
    tracing::info!(address = %local, "serving /healthz, /readyz and /metrics on http://{local}");
    let handler: serving::Handler = Arc::new(move |req| route(&health, req));
    Ok((local, serving::spawn(listener, None, handler, shutdown)))
}

fn route(health: &OperatorHealth, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" | "/livez" => serving::text(StatusCode::OK, "ok"),
        "/readyz" => match health.readiness() {
            Ok(()) => serving::text(StatusCode::OK, "ok"),
            Err(why) => serving::text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("[-]informer-sync failed: {why}\nreadyz check failed"),
            ),
        },
        "/metrics" => serving::metrics(&health.metrics.encode()),
        _ => serving::not_found(),
    }
}
