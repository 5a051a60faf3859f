//! The scheduler's HTTPS endpoint (default port 10259): `/healthz`, `/livez`, `/readyz` (ready once
//! the informer caches have synced), `/metrics` and `/configz`. Without a certificate it serves a
//! self-signed one, as kube-scheduler does.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::metrics::Metrics;

/// What the endpoints report.
pub struct HttpState {
    /// Set once the informer caches have synced.
    pub ready: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// `/configz` body: the effective configuration as JSON.
    pub configz: String,
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("reading TLS certificate/key: {0}")]
    Pem(String),
    #[error("generating a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, HttpError> {
    let (certs, key) = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| HttpError::Pem(format!("{}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| HttpError::Pem(format!("{}: {e}", key.display())))?;
            (certs, key)
        }
        _ => {
            let generated = rcgen::generate_simple_self_signed(vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
            ])?;
            let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
                .map_err(|e| HttpError::Pem(e.to_string()))?;
            (vec![generated.cert.der().clone()], key)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds `addr` and serves until `shutdown` fires. Returns the bound address (useful with port 0).
pub async fn serve(
    addr: SocketAddr,
    tls: &TlsFiles,
    state: Arc<HttpState>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HttpError> {
    let acceptor = tls_acceptor(tls)?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    info!(address = %local, "serving securely on {local}");
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(err) => { warn!(%err, "accept failed"); continue; }
                },
                _ = shutdown.changed() => return,
            };
            let acceptor = acceptor.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(tls) => tls,
                    Err(err) => {
                        debug!(%peer, %err, "TLS handshake failed");
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, std::convert::Infallible>(route(&state, &req)) }
                });
                if let Err(err) = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await
                {
                    debug!(%peer, %err, "connection ended with an error");
                }
            });
        }
    });
    Ok((local, task))
}

fn route(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok"),
        "/readyz" => {
            if state.ready.load(Ordering::Acquire) {
                text(StatusCode::OK, "ok")
            } else {
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "[-]sched-handler-sync failed: caches not synced yet\nreadyz check failed",
                )
            }
        }
        "/metrics" => {
            let mut resp = text(StatusCode::OK, &state.metrics.encode());
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        "/configz" => {
            let mut resp = text(StatusCode::OK, &state.configz);
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp
}
