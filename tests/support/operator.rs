//! The operator in e2e tests: run in-process with the permissions of a ServiceAccount (admin
//! credentials impersonating it, so the RBAC under test is what it gets), its HTTP endpoint on a
//! free port; and waiting for a profile's status.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use ksched::api::SchedulerProfile;
use ksched::framework::registry::Registry;
use ksched::operator::{EmbeddedSchedulers, OperatorOptions};

use super::ControlPlane;
use super::wait::poll;

/// The operator's ServiceAccount as manifests/install and the chart name it, in `ksched-system`.
pub const OPERATOR_SA: &str = "system:serviceaccount:ksched-system:ksched-operator";

/// The configuration of a client with `user`'s permissions (admin credentials, impersonating it).
pub async fn config_as(cp: &ControlPlane, user: &str) -> kube::Config {
    let kc = Kubeconfig::read_from(&cp.kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    config.auth_info.impersonate = Some(user.into());
    config
}

/// A kubeconfig file with `user`'s permissions (admin credentials, impersonating it), for an
/// operator run as a process.
pub fn kubeconfig_as(cp: &ControlPlane, user: &str) -> PathBuf {
    let admin = std::fs::read_to_string(&cp.kubeconfig).expect("kubeconfig");
    assert!(admin.contains("\n  user:\n"), "{admin}");
    let path = cp
        .dir
        .join(format!("kubeconfig-as-{}", user.replace(':', "-")));
    std::fs::write(
        &path,
        admin.replacen("\n  user:\n", &format!("\n  user:\n    as: {user}\n"), 1),
    )
    .expect("write kubeconfig");
    path
}

/// A client with `user`'s permissions (admin credentials, impersonating it).
pub async fn client_as(cp: &ControlPlane, user: &str) -> Client {
    Client::try_from(config_as(cp, user).await).expect("client")
}

/// `ksched::operator::run` on a thread of its own, as `user`, with `embedded` running Embedded
/// profiles, its log in `<control plane dir>/operator.log`; stopped (gracefully) when dropped.
pub struct InProcessOperator {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where its `/healthz`, `/readyz` and `/metrics` are served.
    pub http: SocketAddr,
    pub log: PathBuf,
}

impl InProcessOperator {
    pub fn start(
        cp: &'static ControlPlane,
        namespace: &str,
        user: &str,
        embedded: Arc<dyn EmbeddedSchedulers>,
    ) -> InProcessOperator {
        Self::start_with(cp, namespace, user, embedded, |_, _| {})
    }

    /// As [`Self::start`], with `configure` given the operator's client and options before it runs.
    pub fn start_with(
        cp: &'static ControlPlane,
        namespace: &str,
        user: &str,
        embedded: Arc<dyn EmbeddedSchedulers>,
        configure: impl FnOnce(&Client, &mut OperatorOptions) + Send + 'static,
    ) -> InProcessOperator {
        let log = cp.dir.join("operator.log");
        // Appended to: tracing's subscriber is global, so every operator of a test binary logs
        // into the file of the first.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("operator log");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (namespace, user) = (namespace.to_string(), user.to_string());
        let thread = std::thread::Builder::new()
            .name("operator".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("operator runtime");
                let _ = tracing_subscriber::fmt()
                    .with_env_filter("info,ksched=debug,kube_runtime=warn")
                    .with_writer(Mutex::new(file))
                    .with_ansi(false)
                    .try_init();
                rt.block_on(async move {
                    let config = config_as(cp, &user).await;
                    let client = Client::try_from(config.clone()).expect("client");
                    let mut opts = OperatorOptions::new(
                        namespace,
                        "ksched:e2e",
                        Arc::new(Registry::in_tree()),
                    );
                    opts.resync = Duration::from_secs(3);
                    opts.instance = "e2e".into();
                    // As `ksched operator` does: an installed operator prepares its uninstall.
                    opts.client_config = Some(config);
                    configure(&client, &mut opts);
                    let (_stop_http, http_stopped) = tokio::sync::watch::channel(false);
                    let (addr, _) = ksched::operator::http::serve(
                        ([127, 0, 0, 1], 0).into(),
                        opts.health.clone(),
                        ksched::operator::http::PlainRoutes::All,
                        http_stopped,
                    )
                    .await
                    .expect("operator HTTP endpoint");
                    addr_tx.send(addr).expect("send address");
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    ksched::operator::run(client, opts, embedded, shutdown)
                        .await
                        .expect("operator");
                });
            })
            .expect("operator thread");
        let http = addr_rx.recv().expect("operator HTTP address");
        InProcessOperator {
            stop: Some(stop),
            thread: Some(thread),
            http,
            log,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GETs `path` from its HTTP endpoint; (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        http_get(self.http, path).await
    }
}

impl InProcessOperator {
    /// Asks it to stop and waits up to `within` for `ksched::operator::run` to return.
    pub fn stop_within(&mut self, within: Duration) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let deadline = std::time::Instant::now() + within;
        while self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            if std::time::Instant::now() > deadline {
                return Err(format!("the operator did not stop within {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .map_err(|_| "the operator thread panicked".to_string())?;
        }
        Ok(())
    }
}

impl Drop for InProcessOperator {
    fn drop(&mut self) {
        if let Err(e) = self.stop_within(Duration::from_secs(60)) {
            eprintln!("{e}; leaving its thread behind");
        }
    }
}

/// A plain HTTP/1.1 GET of `http://<addr><path>`; (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read response");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of the Prometheus sample whose line starts with `series` (name and labels).
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

/// The condition `type_` of a profile.
pub fn condition<'a>(p: &'a SchedulerProfile, type_: &str) -> Option<&'a Condition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// Polls profile `name` until its status has observed its generation and says Ready=True.
pub async fn wait_profile_ready(
    client: &Client,
    name: &str,
    diagnostics: impl Fn() -> String,
) -> SchedulerProfile {
    wait_profile_condition(client, name, "Ready=True", diagnostics, |c| {
        c.type_ == "Ready" && c.status == "True"
    })
    .await
}

/// Polls profile `name` until its status has observed its generation and has a condition that
/// `accept`s (`what` names it in a failure).
pub async fn wait_profile_condition(
    client: &Client,
    name: &str,
    what: &str,
    diagnostics: impl Fn() -> String,
    accept: impl Fn(&Condition) -> bool,
) -> SchedulerProfile {
    let api: Api<SchedulerProfile> = Api::all(client.clone());
    poll(
        &format!("profile {name} {what}"),
        Duration::from_secs(180),
        diagnostics,
        async || {
            let p = api.get_opt(name).await.ok().flatten()?;
            let status = p.status.as_ref()?;
            let accepted = status.conditions.iter().any(&accept);
            (status.observed_generation == p.metadata.generation && accepted).then_some(p)
        },
    )
    .await
}
