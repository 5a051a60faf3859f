//! The operator's endpoints: plain HTTP on `--http-port` (default 8080) with `/healthz` and
//! `/livez` (the process serves), `/readyz` (its caches have synced) and `/metrics`; and, with
//! `--secure-port`, HTTPS with the scheduler's delegated authentication and authorization
//! ([`crate::infra::serving::auth`]), where `/metrics` (and `/debug/pprof/profile`, `/heap` with
//! `--profiling`) move: the plain port then answers the probes only.
//!
//! Plain HTTP stays the default, as operators built on kube-rs and controller-runtime without
//! `--metrics-secure` serve: the operator's metrics carry no secret (counts, durations, profile
//! names), and the chart's ServiceMonitor scrapes them without a token. A cluster that wants them
//! protected sets `--secure-port` and grants its scraper `ksched:metrics-reader`.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::sync::watch;

use super::health::OperatorHealth;
use crate::infra::serving::auth::{AuthenticationArgs, AuthorizationArgs};
use crate::infra::serving::tls::TlsArgs;
use crate::infra::serving::{self, Serving};

/// Default port of the operator's plain endpoint.
pub const DEFAULT_PORT: u16 = 8080;

#[derive(Debug, thiserror::Error)]
pub enum OperatorHttpError {
    #[error(transparent)]
    Bind(#[from] serving::BindError),
    #[error(transparent)]
    Tls(#[from] serving::tls::TlsError),
    #[error(transparent)]
    Auth(#[from] serving::auth::AuthSetupError),
}

/// What the plain port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainRoutes {
    /// Probes and `/metrics`.
    All,
    /// Probes only (`/metrics` is on the secure port).
    ProbesOnly,
}

/// Binds `addr` and serves plain HTTP until `shutdown` changes; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<OperatorHealth>,
    routes: PlainRoutes,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), serving::BindError> {
    let (listener, local) = serving::bind(addr).await?;
    tracing::info!(address = %local, "serving /healthz, /readyz{} on http://{local}", if routes == PlainRoutes::All { " and /metrics" } else { "" });
    let handler = serving::sync_handler(move |req| match req.uri().path() {
        "/metrics" if routes == PlainRoutes::ProbesOnly => serving::not_found(),
        _ => route(&health, req),
    });
    Ok((
        local,
        serving::spawn(listener, Serving::default(), handler, shutdown),
    ))
}

/// The secure endpoint's settings.
#[derive(Debug, Clone)]
pub struct SecureEndpoint {
    pub addr: SocketAddr,
    pub tls: TlsArgs,
    pub authentication: AuthenticationArgs,
    pub authorization: AuthorizationArgs,
    pub profiling: bool,
}

/// Binds the secure endpoint and serves HTTPS with delegated authentication and authorization.
pub async fn serve_secure(
    endpoint: &SecureEndpoint,
    health: Arc<OperatorHealth>,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), OperatorHttpError> {
    let acceptor = serving::tls::acceptor(&endpoint.tls, "ksched-operator")?;
    let (guard, refresher) =
        serving::auth::guard(&endpoint.authentication, &endpoint.authorization).await?;
    if let Some(task) = refresher {
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = stop.wait_for(|s| *s).await;
            task.abort();
        });
    }
    let (listener, local) = serving::bind_with(
        endpoint.addr,
        endpoint.tls.permit_port_sharing,
        endpoint.tls.permit_address_sharing,
    )
    .await?;
    tracing::info!(address = %local, "serving securely on {local}");
    let profiling = endpoint.profiling;
    let handler: serving::Handler = Arc::new(move |req: Request<Incoming>| {
        let health = health.clone();
        Box::pin(async move {
            let path = req.uri().path();
            if profiling && (path.starts_with("/debug/pprof") || path.starts_with("/debug/flags")) {
                return crate::scheduler::http::debugging(req).await;
            }
            route(&health, &req)
        })
    });
    let serving = Serving {
        tls: Some(acceptor),
        http2: endpoint.tls.http2(),
        guard: Some(Arc::new(guard)),
    };
    Ok((local, serving::spawn(listener, serving, handler, shutdown)))
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
