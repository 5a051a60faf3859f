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
