//! Serving the small HTTP(S) endpoints of both processes (the scheduler's `/healthz`, `/readyz`,
//! `/metrics`, `/configz` over HTTPS; the operator's `/healthz`, `/readyz`, `/metrics` over HTTP):
//! the accept loop and response helpers they share. Each process has its own routes.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

/// Answers one request from in-memory state (no I/O).
pub type Handler = Arc<dyn Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
#[error("binding {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr`; returns the listener and the bound address (useful with port 0).
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| BindError { addr, source })?;
    Ok((listener, local))
}

/// Serves `handler` on `listener` (over TLS when `tls` is given) until `shutdown` changes.
pub fn spawn(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
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
            let tls = tls.clone();
            let handler = handler.clone();
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(stream) => serve_connection(stream, handler, peer).await,
                        Err(err) => debug!(%peer, %err, "TLS handshake failed"),
                    },
                    None => serve_connection(stream, handler, peer).await,
                }
            });
        }
    })
}

async fn serve_connection<S>(stream: S, handler: Handler, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let handler = handler.clone();
        async move { Ok::<_, std::convert::Infallible>(handler(&req)) }
    });
    if let Err(err) = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!(%peer, %err, "connection ended with an error");
    }
}

/// A plain-text response.
pub fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp
}

/// A response of `content_type`.
pub fn typed(body: &str, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::OK, body);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

/// The Prometheus text exposition `body`.
pub fn metrics(body: &str) -> Response<Full<Bytes>> {
    typed(body, "text/plain; version=0.0.4; charset=utf-8")
}

/// `404 page not found`, as the Go servers answer.
pub fn not_found() -> Response<Full<Bytes>> {
    text(StatusCode::NOT_FOUND, "404 page not found")
}

/// Registers `metric` as `name` (prometheus-client appends `_total` to counters) and returns it:
/// the caller keeps a handle sharing its values.
pub fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// The Prometheus text exposition of every metric in `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}
