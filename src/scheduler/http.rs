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
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use super::metrics::Metrics;
use crate::serving;

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
    #[error(transparent)]
    Bind(#[from] serving::BindError),
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
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HttpError> {
    let acceptor = tls_acceptor(tls)?;
    let (listener, local) = serving::bind(addr).await?;
    info!(address = %local, "serving securely on {local}");
    let handler: serving::Handler = Arc::new(move |req| route(&state, req));
    Ok((
        local,
        serving::spawn(listener, Some(acceptor), handler, shutdown),
    ))
}

fn route(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" | "/livez" => serving::text(StatusCode::OK, "ok"),
        "/readyz" => {
            if state.ready.load(Ordering::Acquire) {
                serving::text(StatusCode::OK, "ok")
            } else {
                serving::text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "[-]sched-handler-sync failed: caches not synced yet\nreadyz check failed",
                )
            }
        }
        "/metrics" => serving::metrics(&state.metrics.encode()),
        "/configz" => serving::typed(&state.configz, "application/json"),
        _ => serving::not_found(),
    }
}
