//! The kubelet's part for the operator Deployment's pods (kwok runs no containers): one `ksched
//! operator` process per Running pod of `<namespace>/ksched-operator`, named like the pod, with the
//! pod's own arguments (ports moved to free local ones, the test CA's serving certificate) and the
//! operator ServiceAccount's permissions (a kubeconfig impersonating it); SIGTERM when its pod
//! is deleted, SIGKILL when it still runs the pod's grace period later. So a rollout, a drain or an
//! uninstall reaches the operator as it would in a cluster. [`HookPods`] does the same for the
//! chart's uninstall hook: its Job's pod runs `ksched uninstall` with the hook's identity, and the
//! pod's phase follows the process's exit.

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

use super::https::{As, get_as};
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
    endpoint: Endpoint,
    terminated: Option<Instant>,
}

/// Where one operator process serves `/healthz`, `/readyz` and `/metrics`.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// Plain HTTP (`--http-port`).
    Http(SocketAddr),
    /// HTTPS (`--secure-port`) with the test CA's serving certificate.
    Https { port: u16, ca: PathBuf },
}

impl Endpoint {
    /// GETs `path` as `who` (plain HTTP is anonymous); (status, body), `None` when nothing
    /// answers.
    pub async fn get(&self, path: &str, who: As<'_>) -> Option<(u16, String)> {
        match self {
            Endpoint::Http(addr) => {
                tokio::net::TcpStream::connect(addr).await.ok()?;
                Some(http_get(*addr, path).await)
            }
            Endpoint::Https { port, ca } => get_as(ca, *port, path, who).await.ok(),
        }
    }
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
        let kubeconfig = impersonating_kubeconfig(cp, OPERATOR_SA, "operator-kubeconfig");
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
                let (pod, endpoint) = {
                    let state = self.lock();
                    state
                        .running
                        .iter()
                        .find(|(pod, _)| holder.starts_with(&format!("{pod}_")))
                        .map(|(pod, r)| (pod.clone(), r.endpoint.clone()))?
                };
                let ready = endpoint.get("/readyz", As::Anonymous).await?.0 == 200;
                ready.then_some(pod)
            },
        )
        .await
    }

    /// The endpoint (`/healthz`, `/readyz`, `/metrics`) of `pod`'s process.
    pub fn endpoint(&self, pod: &str) -> Option<Endpoint> {
        self.lock().running.get(pod).map(|r| r.endpoint.clone())
    }

    /// The pods whose process runs.
    pub fn running(&self) -> Vec<String> {
        self.lock().running.keys().cloned().collect()
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
    let new: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && !state.started.contains(&p.name_any())
        })
        .collect();
    if state.starting {
        for pod in new {
            let (child, endpoint) = operator_process(cp, kubeconfig, namespace, pod);
            state.started.push(pod.name_any());
            state.running.insert(
                pod.name_any(),
                Running {
                    child,
                    endpoint,
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

/// The container arguments of `pod`'s first container.
fn pod_args(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// `ksched` with `pod`'s arguments as its process: the operator's endpoint on free local ports
/// (HTTPS with the test CA's serving certificate when the pod serves `--secure-port`, whose
/// delegated authentication and authorization go through `kubeconfig`), the cluster reached
/// through `kubeconfig`.
fn operator_process(
    cp: &ControlPlane,
    kubeconfig: &std::path::Path,
    namespace: &str,
    pod: &Pod,
) -> (LoggedChild, Endpoint) {
    let name = pod.name_any();
    let replaced = [
        "--http-port=",
        "--secure-port=",
        "--bind-address=",
        "--tls-cert-file=",
        "--tls-private-key-file=",
    ];
    let original = pod_args(pod);
    let secure = original
        .iter()
        .any(|a| a.starts_with("--secure-port=") && a != "--secure-port=0");
    let mut args: Vec<String> = original
        .into_iter()
        .filter(|a| !replaced.iter().any(|r| a.starts_with(r)))
        .collect();
    let kubeconfig = path_str(kubeconfig);
    let port = free_port();
    args.extend([
        format!("--kubeconfig={kubeconfig}"),
        format!("--namespace={namespace}"),
        "--image=ksched:e2e".into(),
        "--bind-address=127.0.0.1".into(),
    ]);
    let endpoint = if secure {
        args.extend([
            format!("--secure-port={port}"),
            "--http-port=0".into(),
            format!(
                "--tls-cert-file={}",
                path_str(&cp.dir.join("apiserver.crt"))
            ),
            format!(
                "--tls-private-key-file={}",
                path_str(&cp.dir.join("apiserver.key"))
            ),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
        ]);
        Endpoint::Https {
            port,
            ca: cp.dir.join("ca.crt"),
        }
    } else {
        args.push(format!("--http-port={port}"));
        Endpoint::Http(([127, 0, 0, 1], port).into())
    };
    let mut cmd = Command::new(ksched_bin());
    cmd.args(args)
        .env("HOSTNAME", &name)
        .env("POD_NAME", &name)
        .env("RUST_LOG", "info,ksched=debug,kube_runtime=warn");
    let child = LoggedChild::spawn(cmd, cp.dir.join(format!("operator-{name}.log")));
    (child, endpoint)
}

/// The control plane's admin kubeconfig, impersonating `user`, written to `<dir>/<file>`: a
/// process with it gets exactly `user`'s RBAC.
pub fn impersonating_kubeconfig(cp: &ControlPlane, user: &str, file: &str) -> PathBuf {
    let path = cp.dir.join(file);
    let admin = std::fs::read_to_string(&cp.kubeconfig).expect("kubeconfig");
    let mut out = String::new();
    for line in admin.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim_start().starts_with("client-key:") {
            out.push_str(&format!("    as: {user}\n"));
        }
    }
    assert!(
        out.contains("as: "),
        "no user in {}",
        cp.kubeconfig.display()
    );
    std::fs::write(&path, out).expect("write the impersonating kubeconfig");
    path
}

/// The uninstall hook's pods (the chart's pre-delete Job, `app.kubernetes.io/component=uninstall`):
/// each bound pod runs its container's arguments (`ksched uninstall ...`) as a process with the
/// hook ServiceAccount's permissions, and its phase becomes Succeeded or Failed with the process's
/// exit. The pod must carry `kwok.x-k8s.io/status: custom` (the chart's
/// `uninstallHook.podAnnotations`), or kwok completes it without running anything.
pub struct HookPods {
    runs: Arc<Mutex<Vec<HookRun>>>,
    task: tokio::task::JoinHandle<()>,
}

/// One run of the hook.
#[derive(Debug, Clone)]
pub struct HookRun {
    pub pod: String,
    pub args: Vec<String>,
    /// Its exit, once it ended.
    pub status: Option<ExitStatus>,
    pub log: String,
}

impl Drop for HookPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HookPods {
    /// Starts playing the kubelet for the hook pods in `namespace`.
    pub fn start(cp: &'static ControlPlane, client: Client, namespace: &str) -> HookPods {
        let hook_sa = format!("system:serviceaccount:{namespace}:ksched-operator-uninstall");
        let kubeconfig = impersonating_kubeconfig(cp, &hook_sa, "uninstall-hook-kubeconfig");
        let runs: Arc<Mutex<Vec<HookRun>>> = Arc::default();
        let task = {
            let runs = runs.clone();
            let pods: Api<Pod> = Api::namespaced(client, namespace);
            tokio::spawn(async move {
                let selector =
                    "app.kubernetes.io/name=ksched,app.kubernetes.io/component=uninstall";
                loop {
                    let list = pods
                        .list(&ListParams::default().labels(selector))
                        .await
                        .map(|l| l.items)
                        .unwrap_or_default();
                    for pod in list {
                        let name = pod.name_any();
                        let bound = pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some();
                        let seen = runs
                            .lock()
                            .map(|r| r.iter().any(|h| h.pod == name))
                            .unwrap_or(true);
                        if !bound || seen || pod.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let run = run_hook(cp, &kubeconfig, &pods, &pod).await;
                        if let Ok(mut r) = runs.lock() {
                            r.push(run);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        HookPods { runs, task }
    }

    /// The runs so far.
    pub fn runs(&self) -> Vec<HookRun> {
        self.runs.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The tail of every run's log.
    pub fn logs(&self) -> String {
        self.runs()
            .iter()
            .map(|r| {
                format!(
                    "--- uninstall hook {} ({:?}) ---\n{}",
                    r.pod,
                    r.status,
                    tail(&r.log, 40)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs the hook pod `pod` to its end and sets its phase.
async fn run_hook(
    cp: &ControlPlane,
    kubeconfig: &std::path::Path,
    pods: &Api<Pod>,
    pod: &Pod,
) -> HookRun {
    let name = pod.name_any();
    let mut args = pod_args(pod);
    args.push(format!("--kubeconfig={}", path_str(kubeconfig)));
    let mut cmd = tokio::process::Command::new(ksched_bin());
    cmd.args(&args)
        .env("RUST_LOG", "info,ksched=debug,kube_runtime=warn")
        .kill_on_drop(true);
    let (status, log) = match cmd.output().await {
        Ok(out) => (
            Some(out.status),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (None, format!("starting {}: {e}", ksched_bin().display())),
    };
    let _ = std::fs::write(cp.dir.join(format!("uninstall-hook-{name}.log")), &log);
    let succeeded = status.is_some_and(|s| s.success());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"status": {
        "phase": if succeeded { "Succeeded" } else { "Failed" },
        "containerStatuses": [{
            "name": "uninstall",
            "image": "ksched:e2e",
            "imageID": "",
            "ready": false,
            "restartCount": 0,
            "state": {"terminated": {
                "exitCode": status.and_then(|s| s.code()).unwrap_or(1),
                "reason": if succeeded { "Completed" } else { "Error" },
                "startedAt": now,
                "finishedAt": now,
            }},
        }],
    }});
    let _ = pods
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await;
    HookRun {
        pod: name,
        args,
        status,
        log,
    }
}
