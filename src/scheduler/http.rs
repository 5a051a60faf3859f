//! The scheduler's HTTPS endpoint (default port 10259), as kube-scheduler's: `/healthz`
//! (`leaderElection` check with leader election on), `/livez`, `/readyz` (`leaderElection`,
//! `shutdown`, `sched-handler-sync`: ready once the informer caches have synced), `/metrics`,
//! `/configz`, and `/debug/pprof/profile` and `/debug/pprof/heap` when `enableProfiling` is
//! true. Every request is authenticated and authorized as upstream's
//! ([`crate::infra::serving::auth`]); the health paths are always allowed by default. Without a
//! certificate it serves a self-signed one, as upstream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::sync::watch;
use tracing::info;

use super::leader_election::LeaderHealth;
use super::metrics::Metrics;
use crate::infra::serving::auth::{AuthSetupError, AuthenticationArgs, AuthorizationArgs};
use crate::infra::serving::healthz::{CheckFn, HealthChecks};
use crate::infra::serving::tls::{TlsArgs, TlsError};
use crate::infra::serving::{self, Serving, pprof};

/// What the endpoints report.
pub(crate) struct HttpState {
    /// Set once the informer caches have synced.
    pub ready: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// `/configz` body: the effective configuration as JSON.
    pub configz: String,
    /// The elector's health, with leader election on.
    pub leader: Option<LeaderHealth>,
    /// Turns true when the process starts shutting down (`/readyz`'s `shutdown` check).
    pub shutdown: watch::Receiver<bool>,
    /// `enableProfiling`: `/debug/pprof/profile` and `/heap` are served.
    pub profiling: bool,
}

impl HttpState {
    pub(crate) fn new(
        metrics: Arc<Metrics>,
        configz: String,
        leader: Option<LeaderHealth>,
        shutdown: watch::Receiver<bool>,
        profiling: bool,
    ) -> Self {
        Self {
            ready: AtomicBool::new(false),
            metrics,
            configz,
            leader,
            shutdown,
            profiling,
        }
    }
}

/// How the endpoint serves: TLS, and who may ask what.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    pub tls: TlsArgs,
    /// Delegated authentication and authorization; `None` serves every request (tests only).
    pub auth: Option<(AuthenticationArgs, AuthorizationArgs)>,
    /// `--disabled-metrics`.
    pub disabled_metrics: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(transparent)]
    Bind(#[from] serving::BindError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
}

/// Binds `addr` and serves until `shutdown` fires. Returns the bound address (useful with port 0).
pub(crate) async fn serve(
    addr: SocketAddr,
    endpoint: &Endpoint,
    state: Arc<HttpState>,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HttpError> {
    let acceptor = serving::tls::acceptor(&endpoint.tls, "kube-scheduler")?;
    let guard = match &endpoint.auth {
        Some((authn, authz)) => {
            let (guard, refresher) = serving::auth::guard(authn, authz).await?;
            if let Some(task) = refresher {
                let mut stop = shutdown.clone();
                tokio::spawn(async move {
                    let _ = stop.wait_for(|s| *s).await;
                    task.abort();
                });
            }
            Some(Arc::new(guard))
        }
        None => None,
    };
    let (listener, local) = serving::bind_with(
        addr,
        endpoint.tls.permit_port_sharing,
        endpoint.tls.permit_address_sharing,
    )
    .await?;
    info!(address = %local, "serving securely on {local}");
    let routes = Arc::new(Routes::new(state, endpoint.disabled_metrics.clone()));
    let handler: serving::Handler = Arc::new(move |req| {
        let routes = routes.clone();
        Box::pin(async move { routes.answer(req).await })
    });
    let serving = Serving {
        tls: Some(acceptor),
        http2: endpoint.tls.http2(),
        guard,
    };
    Ok((local, serving::spawn(listener, serving, handler, shutdown)))
}

struct Routes {
    state: Arc<HttpState>,
    healthz: HealthChecks,
    livez: HealthChecks,
    readyz: HealthChecks,
    disabled_metrics: Vec<String>,
}

impl Routes {
    fn new(state: Arc<HttpState>, disabled_metrics: Vec<String>) -> Self {
        let leader: Option<(&'static str, CheckFn)> = state.leader.clone().map(|health| {
            let check: CheckFn = Arc::new(move || health.check(Instant::now()));
            ("leaderElection", check)
        });
        let shutdown_rx = state.shutdown.clone();
        let shutdown: CheckFn = Arc::new(move || {
            if *shutdown_rx.borrow() {
                Err("process is shutting down".into())
            } else {
                Ok(())
            }
        });
        let synced_state = state.clone();
        let synced: CheckFn = Arc::new(move || {
            if synced_state.ready.load(Ordering::Acquire) {
                Ok(())
            } else {
                Err("handlers are not fully synchronized".into())
            }
        });
        let mut ready_checks: Vec<(&'static str, CheckFn)> = leader.clone().into_iter().collect();
        ready_checks.push(("shutdown", shutdown));
        ready_checks.push(("sched-handler-sync", synced));
        Self {
            healthz: HealthChecks::new("healthz", leader.into_iter().collect()),
            livez: HealthChecks::new("livez", Vec::new()),
            readyz: HealthChecks::new("readyz", ready_checks),
            state,
            disabled_metrics,
        }
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        let query = req.uri().query();
        for checks in [&self.healthz, &self.livez, &self.readyz] {
            if let Some(resp) = checks.answer(path, query) {
                return resp;
            }
        }
        match path {
            "/metrics" => serving::metrics(&crate::infra::metrics::without_families(
                &self.state.metrics.encode(),
                &self.disabled_metrics,
            )),
            "/configz" => serving::typed(&self.state.configz, "application/json"),
            _ if self.state.profiling => debugging(req).await,
            _ => serving::not_found(),
        }
    }
}

/// What kube-scheduler serves when profiling is on: `/debug/pprof/...`, and `/debug/flags/v`
/// to change the log verbosity of the running process.
pub(crate) async fn debugging(req: Request<Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/debug/flags" | "/debug/flags/" => serving::text(
            StatusCode::OK,
            "/debug/flags/\n\nv: the log verbosity (-v); PUT a number to change it.\n",
        ),
        "/debug/flags/v" => set_verbosity(req).await,
        path => {
            let path = path.to_string();
            profiling(&path, req.uri().query()).await
        }
    }
}

/// `PUT /debug/flags/v` with the new level as the body (component-base's
/// `StringFlagPutHandler`): 200 and what was set, 400 for a bad level, 406 for another method.
async fn set_verbosity(req: Request<Incoming>) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    if req.method() != hyper::Method::PUT {
        return serving::text(StatusCode::NOT_ACCEPTABLE, "unsupported http method");
    }
    // A level is a few digits; a larger body is not one.
    let body = match http_body_util::Limited::new(req.into_body(), 64)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return serving::text(
                StatusCode::BAD_REQUEST,
                &format!("error reading request body: {e}"),
            );
        }
    };
    match crate::infra::logging::set_verbosity(&String::from_utf8_lossy(&body)) {
        Ok(answer) => {
            tracing::info!(verbosity = %String::from_utf8_lossy(&body).trim(), "log verbosity set through /debug/flags/v");
            serving::text(StatusCode::OK, &answer)
        }
        Err(e) => serving::text(StatusCode::BAD_REQUEST, &e),
    }
}

/// `/debug/pprof/...` (profiling on).
async fn profiling(path: &str, query: Option<&str>) -> Response<Full<Bytes>> {
    match path {
        "/debug/pprof" | "/debug/pprof/" => serving::text(
            StatusCode::OK,
            "/debug/pprof/\n\nprofile: CPU profile (pprof protobuf). Add ?seconds=N (default 30).\n\
             heap: the live heap, sampled every 512 KiB allocated (gzipped pprof protobuf; needs \
             KSCHED_ALLOCATOR=jemalloc, the default).\n",
        ),
        "/debug/pprof/heap" => match pprof::heap_profile().await {
            Ok(profile) => profile_response(profile, "heap"),
            Err(e) => serving::text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        "/debug/pprof/profile" => {
            let seconds = match pprof::seconds(query) {
                Ok(s) => s,
                Err(e) => return serving::text(StatusCode::BAD_REQUEST, &e),
            };
            match pprof::cpu_profile(Duration::from_secs(seconds)).await {
                Ok(profile) => profile_response(profile, "profile"),
                Err(e) => serving::text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        _ => serving::not_found(),
    }
}

/// A profile as Go's net/http/pprof sends it: an attachment named `name`.
fn profile_response(profile: Vec<u8>, name: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(profile)));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/octet-stream"),
    );
    let disposition = format!("attachment; filename=\"{name}\"");
    if let Ok(value) = hyper::header::HeaderValue::from_str(&disposition) {
        resp.headers_mut()
            .insert(hyper::header::CONTENT_DISPOSITION, value);
    }
    resp
}
