//! The kubelet's part for the operator Deployment's pods (kwok runs no containers): one `ksched
//! operator` process per Running pod of `<namespace>/ksched-operator`, named like the pod and with
//! the operator ServiceAccount's permissions (a kubeconfig impersonating it); SIGTERM when its pod
//! is deleted, SIGKILL when it still runs the pod's grace period later. So a rollout, a drain or an
//! uninstall reaches the operator as it would in a cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::operator::{OPERATOR_SA, http_get};
use super::process::LoggedChild;
use super::scheduler::ksched_bin;
use super::wait::{poll, tail};
use super::{ControlPlane, free_port, path_str};

/// The operator pods' labels (the chart's selector).
const SELECTOR: &str = "app.kubernetes.io/name=ksched,app.kubernetes.io/component=operator";
/// The chart's `terminationGracePeriodSeconds`.
const GRACE: Duration = Duration::from_secs(60);

struct Running {
    child: LoggedChild,
    http: SocketAddr,
    terminated: Option<Instant>,
}

/// How one pod's process ended.
#[derive(Debug, Clone)]
pub struct Exited {
    pub pod: String,
    pub status: ExitStatus,
    /// SIGTERM was sent (the pod was deleted), not SIGKILL only.
    pub terminated: bool,
    /// SIGKILL after the grace period.
    pub killed: bool,
    pub log: String,
}

#[derive(Default)]
struct State {
    running: BTreeMap<String, Running>,
    exited: Vec<Exited>,
    /// Pods whose process was started once: never started again (no container restarts).
    started: Vec<String>,
    /// false: the operator is "gone" (its pods cannot run): nothing is started any more.
    starting: bool,
}

/// The processes standing for the operator's pods; killed when dropped.
pub struct OperatorPods {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
}

impl Drop for OperatorPods {
    fn drop(&mut self) {
        self.task.abort();
        // LoggedChild kills on drop.
        self.lock().running.clear();
    }
}

impl OperatorPods {
    /// Starts playing the kubelet for the operator pods in `namespace`.
    pub fn start(cp: &'static ControlPlane, client: Client, namespace: &str) -> OperatorPods {
        let kubeconfig = impersonating_kubeconfig(cp);
        let state = Arc::new(Mutex::new(State {
            starting: true,
            ..State::default()
        }));
        let task = {
            let state = state.clone();
            let namespace = namespace.to_string();
            let pods: Api<Pod> = Api::namespaced(client, &namespace);
            tokio::spawn(async move {
                loop {
                    if let Ok(list) = pods.list(&ListParams::default().labels(SELECTOR)).await {
                        sync(&state, &list.items, cp, &kubeconfig, &namespace);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        OperatorPods {
            state,
            task,
            dir: cp.dir.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until one of the processes holds the operator Lease and serves `/readyz`; its pod.
    pub async fn wait_leader(&self, client: &Client, namespace: &str) -> String {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        poll(
            "an operator pod leads",
            Duration::from_secs(120),
            || self.logs(),
            async || {
                let holder = leases
                    .get_opt(ksched::operator::LEASE_NAME)
                    .await
                    .ok()
                    .flatten()?
                    .spec?
                    .holder_identity?;
                let (pod, http) = {
                    let state = self.lock();
                    state
                        .running
                        .iter()
                        .find(|(pod, _)| holder.starts_with(&format!("{pod}_")))
                        .map(|(pod, r)| (pod.clone(), r.http))?
                };
                let ready = tokio::net::TcpStream::connect(http).await.is_ok()
                    && http_get(http, "/readyz").await.0 == 200;
                ready.then_some(pod)
            },
        )
        .await
    }

    /// The HTTP endpoint (`/healthz`, `/readyz`, `/metrics`) of `pod`'s process.
    pub fn http(&self, pod: &str) -> Option<SocketAddr> {
        self.lock().running.get(pod).map(|r| r.http)
    }

    /// The operator is gone: every process is SIGKILLed and none is started again (as when its
    /// pods cannot run).
    pub fn kill_all(&self) {
        let mut state = self.lock();
        state.starting = false;
        let pods: Vec<String> = state.running.keys().cloned().collect();
        for pod in pods {
            kill(&mut state, &pod);
        }
    }

    /// SIGKILLs the process of `pod` (its pod stays, as with a node that died).
    pub fn kill(&self, pod: &str) {
        kill(&mut self.lock(), pod);
    }

    /// Waits until every running process has logged `needle`.
    pub async fn wait_logged(&self, needle: &str) {
        poll(
            &format!("every operator pod logged {needle:?}"),
            Duration::from_secs(60),
            || self.logs(),
            async || {
                let state = self.lock();
                state
                    .running
                    .values()
                    .all(|r| r.child.logs().contains(needle))
                    .then_some(())
            },
        )
        .await
    }

    /// Waits until no process runs (each pod deleted and its process ended); how they ended.
    pub async fn wait_all_exited(&self, within: Duration) -> Vec<Exited> {
        poll(
            "every operator process ended",
            within,
            || self.logs(),
            async || {
                let state = self.lock();
                state.running.is_empty().then(|| state.exited.clone())
            },
        )
        .await
    }

    /// The tail of every process's log.
    pub fn logs(&self) -> String {
        let state = self.lock();
        let running = state
            .running
            .iter()
            .map(|(pod, r)| (pod.clone(), r.child.logs()));
        let exited = state.exited.iter().map(|e| (e.pod.clone(), e.log.clone()));
        running
            .chain(exited)
            .map(|(pod, log)| format!("--- operator pod {pod} ---\n{}", tail(&log, 40)))
            .collect::<Vec<_>>()
            .join("\n")
            + &format!("\n(logs in {})", self.dir.display())
    }
}

fn kill(state: &mut State, pod: &str) {
    if let Some(mut r) = state.running.remove(pod) {
        r.child.kill();
        let status = r.child.child.wait().ok();
        state.exited.push(Exited {
            pod: pod.to_string(),
            status: status.unwrap_or_default(),
            terminated: false,
            killed: true,
            log: r.child.logs(),
        });
    }
}

/// One step of the kubelet: start a process for each new Running pod, SIGTERM the process of each
/// deleted pod, SIGKILL it after the grace period, reap what ended.
fn sync(
    state: &Mutex<State>,
    pods: &[Pod],
    cp: &ControlPlane,
    kubeconfig: &std::path::Path,
    namespace: &str,
) {
    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
    let live: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    let new: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .map(|p| p.name_any())
        .filter(|p| !state.started.contains(p))
        .collect();
    if state.starting {
        for pod in new {
            let http = ([127, 0, 0, 1], free_port()).into();
            let child = operator_process(cp, kubeconfig, namespace, &pod, http);
            state.started.push(pod.clone());
            state.running.insert(
                pod,
                Running {
                    child,
                    http,
                    terminated: None,
                },
            );
        }
    }
    let mut ended = Vec::new();
    for (pod, r) in state.running.iter_mut() {
        if !live.contains(pod) && r.terminated.is_none() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(r.child.pid(), libc::SIGTERM) };
            r.terminated = Some(Instant::now());
        }
        let overdue = r.terminated.is_some_and(|t| t.elapsed() > GRACE);
        if overdue {
            r.child.kill();
        }
        if let Ok(Some(status)) = r.child.child.try_wait() {
            ended.push((pod.clone(), status, overdue));
        }
    }
    for (pod, status, killed) in ended {
        if let Some(r) = state.running.remove(&pod) {
            state.exited.push(Exited {
                pod,
                status,
                terminated: r.terminated.is_some(),
                killed,
                log: r.child.logs(),
            });
        }
    }
}

fn operator_process(
    cp: &ControlPlane,
    kubeconfig: &std::path::Path,
    namespace: &str,
    pod: &str,
    http: SocketAddr,
) -> LoggedChild {
    let mut cmd = Command::new(ksched_bin());
    cmd.args([
        "operator".to_string(),
        format!("--kubeconfig={}", path_str(kubeconfig)),
        format!("--namespace={namespace}"),
        "--image=ksched:e2e".into(),
        format!("--bind-address={}", http.ip()),
        format!("--http-port={}", http.port()),
    ])
    .env("HOSTNAME", pod)
    .env("POD_NAME", pod)
    .env("RUST_LOG", "info,ksched=debug,kube_runtime=warn");
    LoggedChild::spawn(cmd, cp.dir.join(format!("operator-{pod}.log")))
}

/// The control plane's admin kubeconfig, impersonating the operator's ServiceAccount: the process
/// gets exactly the install's RBAC.
fn impersonating_kubeconfig(cp: &ControlPlane) -> PathBuf {
    let path = cp.dir.join("operator-kubeconfig");
    let admin = std::fs::read_to_string(&cp.kubeconfig).expect("kubeconfig");
    let mut out = String::new();
    for line in admin.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim_start().starts_with("client-key:") {
            out.push_str(&format!("    as: {OPERATOR_SA}\n"));
        }
    }
    assert!(
        out.contains("as: "),
        "no user in {}",
        cp.kubeconfig.display()
    );
    std::fs::write(&path, out).expect("write the operator kubeconfig");
    path
}
