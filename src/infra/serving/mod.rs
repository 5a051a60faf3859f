//! Serving the small HTTP(S) endpoints of both processes (the scheduler's `/healthz`, `/livez`,
//! `/readyz`, `/metrics`, `/configz`, `/debug/pprof` over HTTPS; the operator's over HTTP, or
//! HTTPS with `--secure-port`): the accept loop, TLS ([`tls`]), delegated authentication and
//! authorization ([`auth`]), health checks ([`healthz`]), CPU profiles ([`pprof`]) and the
//! response helpers they share. Each process has its own routes.

pub(crate) mod auth;
pub(crate) mod healthz;
pub(crate) mod pprof;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use auth::{Guard, Refusal, RequestInfo};
use tls::Http2Options;

/// Answers one request (authorized already, when the endpoint has a guard).
pub(crate) type Handler =
    Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, Response<Full<Bytes>>> + Send + Sync>;

/// A handler that answers from in-memory state, without awaiting anything.
pub(crate) fn sync_handler<F>(f: F) -> Handler
where
    F: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    Arc::new(move |req| {
        let resp = f(&req);
        Box::pin(async move { resp })
    })
}

/// How an endpoint serves: TLS (with its HTTP/2 settings) and the guard in front of its routes.
#[derive(Clone, Default)]
pub(crate) struct Serving {
    pub tls: Option<TlsAcceptor>,
    pub http2: Http2Options,
    pub guard: Option<Arc<Guard>>,
}

#[derive(Debug, thiserror::Error)]
#[error("binding {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr`; returns the listener and the bound address (useful with port 0).
pub(crate) async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    bind_with(addr, false, false).await
}

/// [`bind`] with `SO_REUSEPORT` (`--permit-port-sharing`) and `SO_REUSEADDR`
/// (`--permit-address-sharing`).
pub(crate) async fn bind_with(
    addr: SocketAddr,
    reuse_port: bool,
    reuse_address: bool,
) -> Result<(TcpListener, SocketAddr), BindError> {
    let err = |source| BindError { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    if reuse_address {
        socket.set_reuseaddr(true).map_err(err)?;
    }
    if reuse_port {
        socket.set_reuseport(true).map_err(err)?;
    }
    socket.bind(addr).map_err(err)?;
    let listener = socket.listen(1024).map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}

/// Serves `handler` on `listener` as `serving` says until `shutdown` changes.
pub(crate) fn spawn(
    listener: TcpListener,
    serving: Serving,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(err) => { warn!(%err, "accept failed"); continue; }
                },
                _ = shutdown.changed() => return,
            };
            let serving = serving.clone();
            let handler = handler.clone();
            tokio::spawn(async move {
                match &serving.tls {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(stream) => {
                            let certs: Arc<[CertificateDer<'static>]> = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                                .unwrap_or_default();
                            serve_connection(stream, &serving, certs, handler, peer).await
                        }
                        Err(err) => debug!(%peer, %err, "TLS handshake failed"),
                    },
                    None => serve_connection(stream, &serving, Arc::from([]), handler, peer).await,
                }
            });
        }
    })
}

async fn serve_connection<S>(
    stream: S,
    serving: &Serving,
    peer_certs: Arc<[CertificateDer<'static>]>,
    handler: Handler,
    peer: SocketAddr,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let guard = serving.guard.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        let guard = guard.clone();
        let peer_certs = peer_certs.clone();
        async move {
            if let Some(guard) = guard {
                let info = RequestInfo {
                    method: req.method().as_str(),
                    path: req.uri().path(),
                    headers: Some(req.headers()),
                    peer_certs: &peer_certs,
                };
                if let Err(refusal) = guard.check(&info).await {
                    return Ok::<_, std::convert::Infallible>(refused(&refusal));
                }
            }
            Ok(handler(req).await)
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if serving.http2.disabled {
        builder = builder.http1_only();
    } else if serving.http2.max_streams > 0 {
        builder
            .http2()
            .max_concurrent_streams(serving.http2.max_streams);
    }
    if let Err(err) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!(%peer, %err, "connection ended with an error");
    }
}

/// The `Status` kube-apiserver's libraries answer a refused request with.
pub(crate) fn refused(refusal: &Refusal) -> Response<Full<Bytes>> {
    let (code, reason, message) = match refusal {
        Refusal::Unauthorized(why) => {
            debug!(%why, "unauthorized request");
            (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized".to_string(),
            )
        }
        Refusal::Forbidden { reason, .. } => (
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("forbidden: {reason}"),
        ),
        Refusal::Error(e) => {
            warn!(error = %e, "authorizing a request failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("Internal error occurred: {e}"),
            )
        }
    };
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code.as_u16(),
    });
    let mut resp = typed(&status.to_string(), "application/json");
    *resp.status_mut() = code;
    resp
}

/// A plain-text response.
pub(crate) fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp
}

/// A response of `content_type`.
pub(crate) fn typed(body: &str, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::OK, body);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

/// The exposition `body` (OpenMetrics text, what prometheus-client writes: counter families are
/// named without `_total`, and it ends with `# EOF`).
pub(crate) fn metrics(body: &str) -> Response<Full<Bytes>> {
    typed(
        body,
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    )
}

/// `404 page not found`, as the Go servers answer.
pub(crate) fn not_found() -> Response<Full<Bytes>> {
    text(StatusCode::NOT_FOUND, "404 page not found")
}

/// Registers `metric` as `name` (prometheus-client appends `_total` to counters) and returns it:
/// the caller keeps a handle sharing its values.
pub(crate) fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// The Prometheus text exposition of every metric in `registry`.
pub(crate) fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// The family a sample or metadata line belongs to (`name` for `name_bucket{...} 1`).
fn line_family(line: &str) -> Option<&str> {
    let name = match line.strip_prefix("# ") {
        Some(meta) => meta.split_whitespace().nth(1)?,
        None => line.split(['{', ' ']).next()?,
    };
    (!name.is_empty()).then_some(name)
}

/// Whether `metric` (a line's name) belongs to the family `family` (as `--disabled-metrics` names
/// it, with its `_total` for counters).
fn in_family(metric: &str, family: &str) -> bool {
    let base = family.strip_suffix("_total").unwrap_or(family);
    metric == family
        || metric == base
        || ["_total", "_bucket", "_sum", "_count", "_created", "_info"]
            .iter()
            .any(|suffix| metric.strip_prefix(base) == Some(suffix))
}

/// `exposition` without the families of `disabled` (`--disabled-metrics`).
pub(crate) fn without_families(exposition: &str, disabled: &[String]) -> String {
    if disabled.is_empty() {
        return exposition.to_string();
    }
    let mut out = String::with_capacity(exposition.len());
    for line in exposition.lines() {
        let drop = line != "# EOF"
            && line_family(line).is_some_and(|m| disabled.iter().any(|d| in_family(m, d)));
        if !drop {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Several expositions as one: each family's metadata once and all its samples, one `# EOF`.
/// Samples of a part with a label get it added (`profile="P"` for an Embedded scheduler's) unless
/// they carry that label already.
pub(crate) fn merge_expositions(parts: &[(Option<(&str, &str)>, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (Vec<String>, Vec<String>)> =
        std::collections::HashMap::new();
    for (label, text) in parts {
        let mut current = String::new();
        for line in text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix("# ") {
                let mut words = meta.split_whitespace();
                let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                current = name.to_string();
                let entry = families.entry(current.clone()).or_insert_with(|| {
                    order.push(current.clone());
                    (Vec::new(), Vec::new())
                });
                if !entry.0.iter().any(|m| m.starts_with(&format!("# {kind} "))) {
                    entry.0.push(line.to_string());
                }
                continue;
            }
            let sample = match label {
                Some((key, value)) => with_label(line, key, value),
                None => line.to_string(),
            };
            let entry = families.entry(current.clone()).or_insert_with(|| {
                order.push(current.clone());
                (Vec::new(), Vec::new())
            });
            entry.1.push(sample);
        }
    }
    let mut out = String::new();
    for name in order {
        if let Some((meta, samples)) = families.get(&name) {
            for l in meta.iter().chain(samples) {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// `line` (a sample) with `key="value"` added unless it has `key` already.
fn with_label(line: &str, key: &str, value: &str) -> String {
    let pair = format!("{key}=\"{value}\"");
    match line.split_once('{') {
        Some((name, rest)) => {
            if rest.starts_with(&format!("{key}=")) || rest.contains(&format!(",{key}=")) {
                line.to_string()
            } else if rest.starts_with('}') {
                format!("{name}{{{pair}{rest}")
            } else {
                format!("{name}{{{pair},{rest}")
            }
        }
        None => match line.split_once(' ') {
            Some((name, rest)) => format!("{name}{{{pair}}} {rest}"),
            None => line.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "# HELP scheduler_schedule_attempts Number.\n# TYPE scheduler_schedule_attempts counter\nscheduler_schedule_attempts_total{result=\"scheduled\",profile=\"a\"} 1\n# HELP scheduler_pending_pods Pending.\n# TYPE scheduler_pending_pods gauge\nscheduler_pending_pods{queue=\"active\"} 2\n# EOF\n";

    #[test]
    fn expositions_merge_into_one_family_each() {
        let b = A.replace("profile=\"a\"", "profile=\"b\"");
        let merged = merge_expositions(&[
            (Some(("profile", "a")), A.to_string()),
            (Some(("profile", "b")), b),
        ]);
        assert_eq!(
            merged
                .matches("# TYPE scheduler_schedule_attempts counter")
                .count(),
            1
        );
        assert_eq!(merged.matches("# EOF").count(), 1);
        assert!(merged.ends_with("# EOF\n"));
        assert!(
            merged.contains(
                "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"b\"} 1"
            )
        );
        assert!(merged.contains("scheduler_pending_pods{profile=\"a\",queue=\"active\"} 2"));
        assert!(merged.contains("scheduler_pending_pods{profile=\"b\",queue=\"active\"} 2"));
        assert_eq!(with_label("up 1", "profile", "p"), "up{profile=\"p\"} 1");
        assert_eq!(with_label("up{} 1", "profile", "p"), "up{profile=\"p\"} 1");
    }

    #[test]
    fn disabled_metrics_are_left_out() {
        let out = without_families(A, &["scheduler_schedule_attempts_total".to_string()]);
        assert!(!out.contains("scheduler_schedule_attempts"), "{out}");
        assert!(out.contains("scheduler_pending_pods{queue=\"active\"} 2"));
        assert!(out.contains("# EOF"));
    }
}
