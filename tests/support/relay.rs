//! A relay between one scheduler process and the test API server, which the test controls, to
//! inject faults on the path:
//! - [`Relay::cut`]: a partition. Connections stay open and new ones are accepted, requests are
//!   read (and logged) but nothing is forwarded or answered, responses under way stop. When the cut
//!   ends, every connection that lived through it is dropped: what it held is never delivered.
//! - [`Relay::down`]: the API server is gone. Connections are closed and new ones refused, until
//!   [`Relay::restore`].
//!
//! It terminates TLS with the API server's own certificate (the scheduler's kubeconfig trusts the
//! test CA) so that it can log every request: method, path, when it arrived, and when and with what
//! status it was answered. That is how a test sees what a scheduler *sent*, also while cut off.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::{ControlPlane, free_port};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type RelayBody = UnsyncBoxBody<Bytes, BoxError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Through,
    Cut,
    Down,
}

/// One request the scheduler sent through the relay.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub arrived: Instant,
    /// When the response headers were passed back, and their status; `None` when never answered.
    pub answered: Option<(Instant, u16)>,
}

impl Logged {
    pub fn is_bind(&self) -> bool {
        self.method == "POST"
            && self
                .path
                .split('?')
                .next()
                .unwrap_or("")
                .ends_with("/binding")
    }

    /// A successful write of the Lease `name` (create or update): the lease is ours from then on.
    pub fn wrote_lease(&self, name: &str) -> bool {
        let path = self.path.split('?').next().unwrap_or("");
        let lease = path.contains("/apis/coordination.k8s.io/v1/")
            && (path.ends_with(&format!("/leases/{name}"))
                || (self.method == "POST" && path.ends_with("/leases")));
        lease
            && matches!(self.method.as_str(), "PUT" | "POST")
            && matches!(self.answered, Some((_, 200 | 201)))
    }
}

struct Shared {
    mode: watch::Sender<Mode>,
    /// How many cuts and outages began; a connection that saw the count change is held.
    faults: AtomicU64,
    log: Mutex<Vec<Logged>>,
    upstream: kube::Client,
    tls: TlsAcceptor,
    port: u16,
}

/// A relay on `127.0.0.1:port`, with a kubeconfig that points at it; stopped when dropped.
pub struct Relay {
    pub port: u16,
    pub kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Starts a relay named `name` (its kubeconfig is `<dir>/<name>-kubeconfig`), passing through.
    pub async fn start(cp: &ControlPlane, name: &str) -> Relay {
        let port = free_port();
        let kubeconfig = cp.dir.join(format!("{name}-kubeconfig"));
        let admin = std::fs::read_to_string(&cp.kubeconfig).expect("read kubeconfig");
        let relayed = admin.replace(&cp.server, &format!("https://127.0.0.1:{port}"));
        assert_ne!(admin, relayed, "the kubeconfig names {}", cp.server);
        std::fs::write(&kubeconfig, relayed).expect("write relay kubeconfig");
        let shared = Arc::new(Shared {
            mode: watch::channel(Mode::Through).0,
            faults: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            upstream: cp.client().await,
            tls: acceptor(cp),
            port,
        });
        let listener = listen(port).await;
        let task = tokio::spawn(accept_loop(shared.clone(), listener));
        Relay {
            port,
            kubeconfig,
            shared,
            task,
        }
    }

    fn set(&self, mode: Mode) {
        if mode != Mode::Through {
            self.shared.faults.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.mode.send_replace(mode);
    }

    /// Partitions the scheduler from the API server (see the module's doc).
    pub fn cut(&self) {
        self.set(Mode::Cut);
    }

    /// Takes the API server away: connections closed, new ones refused.
    pub fn down(&self) {
        self.set(Mode::Down);
    }

    /// Passes through again.
    pub fn restore(&self) {
        self.set(Mode::Through);
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Logged> {
        self.shared.log.lock().expect("relay log").clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.mode.send_replace(Mode::Down);
        self.task.abort();
    }
}

fn acceptor(cp: &ControlPlane) -> TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cp.dir.join("apiserver.crt"))
            .expect("read apiserver.crt")
            .collect::<Result<_, _>>()
            .expect("parse apiserver.crt");
    let key = PrivateKeyDer::from_pem_file(cp.dir.join("apiserver.key")).expect("apiserver.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("serving certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// Binds `port`, retrying while the previous listener's socket is going away.
async fn listen(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => return listener,
            Err(err) if Instant::now() > deadline => panic!("relay port {port}: {err}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Accepts while not down; closes the listener while down, so connections are refused.
async fn accept_loop(shared: Arc<Shared>, mut listener: TcpListener) {
    let mut mode = shared.mode.subscribe();
    loop {
        let down = tokio::select! {
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    tokio::spawn(serve(shared.clone(), tcp));
                }
                false
            }
            changed = mode.wait_for(|m| *m == Mode::Down) => match changed {
                Ok(_) => true,
                Err(_) => return,
            },
        };
        if down {
            drop(listener);
            if mode.wait_for(|m| *m != Mode::Down).await.is_err() {
                return;
            }
            listener = listen(shared.port).await;
        }
    }
}

impl Shared {
    /// Whether a connection opened at fault count `epoch` may not pass anything now.
    fn held(&self, epoch: u64) -> bool {
        *self.mode.borrow() != Mode::Through || self.faults.load(Ordering::SeqCst) != epoch
    }

    /// Resolves when a connection opened at `epoch` must close: the API server went down, or a cut
    /// it lived through ended.
    async fn closed(&self, epoch: u64) {
        let mut mode = self.mode.subscribe();
        loop {
            let now = *mode.borrow_and_update();
            let faulted = self.faults.load(Ordering::SeqCst) != epoch;
            if now == Mode::Down || (now == Mode::Through && faulted) {
                return;
            }
            if mode.changed().await.is_err() {
                return;
            }
        }
    }

    /// Resolves while the connection may pass; never when it is held (it closes instead).
    async fn passing(&self, epoch: u64) {
        if self.held(epoch) {
            std::future::pending::<()>().await;
        }
    }
}

async fn serve(shared: Arc<Shared>, tcp: TcpStream) {
    let epoch = shared.faults.load(Ordering::SeqCst);
    let closed = shared.closed(epoch);
    tokio::pin!(closed);
    let tls = tokio::select! {
        tls = shared.tls.accept(tcp) => match tls {
            Ok(tls) => tls,
            Err(_) => return,
        },
        _ = &mut closed => return,
    };
    let handler = shared.clone();
    let service = service_fn(move |req| {
        let shared = handler.clone();
        async move { Ok::<_, Infallible>(relay(shared, epoch, req).await) }
    });
    let conn = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::select! {
        _ = conn => {}
        _ = &mut closed => {}
    }
}

/// Logs `req`; forwards it and passes the answer back unless the connection is held.
async fn relay(shared: Arc<Shared>, epoch: u64, req: Request<Incoming>) -> Response<RelayBody> {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let index = {
        let mut log = shared.log.lock().expect("relay log");
        log.push(Logged {
            method: req.method().to_string(),
            path: path.clone(),
            arrived: Instant::now(),
            answered: None,
        });
        log.len() - 1
    };
    shared.passing(epoch).await;
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return text(400, "unreadable request body");
    };
    let mut upstream = Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "connection" | "content-length" | "transfer-encoding"
        ) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(body)) else {
        return text(400, "bad request");
    };
    let response = shared.upstream.send(upstream).await;
    shared.passing(epoch).await;
    let response = match response {
        Ok(r) => r,
        Err(err) => return text(502, &format!("relay: {err}")),
    };
    shared.log.lock().expect("relay log")[index].answered =
        Some((Instant::now(), response.status().as_u16()));
    let (parts, body) = response.into_parts();
    // Each frame waits until the connection may pass: a cut stops a watch mid-stream.
    let frames = futures::stream::unfold(Some(body), move |body| {
        let shared = shared.clone();
        async move {
            let mut body = body?;
            let frame = body.frame().await?;
            shared.passing(epoch).await;
            let frame: Result<Frame<Bytes>, BoxError> = frame.map_err(Into::into);
            Some((frame, Some(body)))
        }
    });
    Response::from_parts(parts, UnsyncBoxBody::new(StreamBody::new(frames.boxed())))
}

fn text(status: u16, message: &str) -> Response<RelayBody> {
    let body = Full::new(Bytes::from(message.to_string()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    response
}
