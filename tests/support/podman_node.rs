//! A node of the test control plane whose pods really run: a small agent standing in for a
//! kubelet, which cannot run on these hosts (cgroup v1; the kubelet refuses it since 1.35). kwok
//! only pretends to run pods; the pods bound to this node run under podman (root, runc, vfs, the
//! ksched image `make image` builds, no outside registry), so a Deployment the operator renders
//! runs exactly as rendered: its command line, its ConfigMap volume, in-cluster configuration
//! with a ServiceAccount token from TokenRequest, its probes.
//!
//! What it does of a kubelet's work, for each pod bound to the node:
//! - volumes: ConfigMap, Secret, emptyDir, and projected (ServiceAccount token from TokenRequest,
//!   bound to the pod; ConfigMap, e.g. `kube-root-ca.crt`; downward API) written to a directory
//!   per pod and mounted (read-only where the mount says so); other kinds fail the pod's start
//!   with a message in its status;
//! - containers: `podman create` with the pod's image and pull policy (an HTTP registry on
//!   loopback works: TLS is not verified), command and args, environment (values, field
//!   references, ConfigMap and Secret keys, and `KUBERNETES_SERVICE_HOST/PORT`), user and group,
//!   read-only root filesystem, dropped capabilities, no new privileges, hostname = pod name,
//!   `--ulimit nofile=1024:1024 --ulimit nproc=1000:1000` (these hosts' limits);
//! - network: each pod has a network namespace of its own with only loopback (as a pod has its
//!   own, so two schedulers can both listen on 10259); the API server, which listens on the
//!   host's loopback, is reached at `127.0.0.1:<its port>` inside the pod through a relay this
//!   agent listens with in the pod's namespace (`KUBERNETES_SERVICE_HOST=127.0.0.1`);
//! - status: phase Running, container statuses (restarts, exit codes), and `Ready` /
//!   `ContainersReady` from the readiness probe (HTTP(S) GET or TCP, run in the pod's network
//!   namespace); a failing liveness probe or an exited container restarts the pod's containers,
//!   unless restartPolicy says it stays exited (Never; OnFailure after exit 0): then its state is
//!   terminated and, once every container is, the phase Succeeded or Failed (a Job's pod);
//! - deletion: SIGTERM, the pod's grace period, SIGKILL, then the pod object is removed.
//!
//! Not done: resource limits (cgroups), init containers, image pull secrets, token refresh (tests
//! are shorter than a token's hour), node heartbeats (the test control plane runs no node
//! lifecycle controller). The node carries the label and the `NoSchedule` taint
//! `ksched.io/podman-node=true`, so only pods that ask for it (nodeSelector and toleration) land
//! here and a workload's pods stay on kwok's nodes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, KeyToPath, Node, Pod, Probe, Secret, ServiceAccount, Volume,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::podman::Podman;
use super::{ControlPlane, path_str};

/// The node's label and taint key.
pub const NODE_KEY: &str = "ksched.io/podman-node";
/// The label selecting containers this agent started (for cleanup).
const CONTAINER_LABEL: &str = "io.ksched.podman-node";

/// What a pod needs to land on the node: `nodeSelector` and `tolerations`, as JSON.
pub fn placement() -> (Value, Value) {
    (
        json!({ NODE_KEY: "true" }),
        json!([{"key": NODE_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
    )
}

/// The running agent; stops every container it started when dropped (and at exit).
pub struct PodmanNode {
    pub name: String,
    podman: Arc<Podman>,
    pods: Arc<Mutex<HashMap<String, PodHandle>>>,
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
}

struct PodHandle {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The log files of the pod's containers (podman's k8s-file format), newest last.
    logs: Logs,
}

type Logs = Arc<Mutex<Vec<PathBuf>>>;

impl PodmanNode {
    /// Registers node `name` (Ready, tainted) and starts running the pods bound to it, with the
    /// image archive `images` loaded into its podman storage first. Err: podman cannot run here.
    pub async fn start(
        cp: &'static ControlPlane,
        client: Client,
        name: &str,
        images: &[&Path],
    ) -> Result<PodmanNode, String> {
        // Short: podman refuses a run root longer than 50 characters.
        let dir = cp.dir.join("pnode");
        std::fs::create_dir_all(dir.join("pods")).map_err(|e| e.to_string())?;
        let podman = Arc::new(Podman::new(dir.join("p")));
        podman.usable()?;
        for image in images {
            podman.ok(&["load", "--input", path_str(image)]);
        }
        {
            // Containers outlive this process unless removed: at exit too, not only on drop.
            let podman = podman.clone();
            super::process::at_exit(Box::new(move || remove_all(&podman)));
        }
        register_node(&client, name).await;
        let api_port: u16 = cp
            .server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the API server's port");
        let pods: Arc<Mutex<HashMap<String, PodHandle>>> = Arc::default();
        let ctx = Arc::new(Context {
            client: client.clone(),
            podman: podman.clone(),
            node: name.to_string(),
            api_port,
            dir: dir.clone(),
        });
        let task = tokio::spawn(sync_loop(ctx, pods.clone()));
        Ok(PodmanNode {
            name: name.to_string(),
            podman,
            pods,
            task,
            dir,
        })
    }

    /// The names of the containers this node runs (or ran and has not removed yet).
    pub fn containers(&self) -> Vec<String> {
        let out = self.podman.run(&[
            "ps",
            "--all",
            "--filter",
            &format!("label={CONTAINER_LABEL}"),
            "--format",
            "{{.Names}}",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The tails of the logs of every pod's containers, for a failing test's message.
    pub fn logs(&self) -> String {
        let pods = lock(&self.pods);
        let mut out = String::new();
        for (key, pod) in pods.iter() {
            for path in lock(&pod.logs).iter() {
                let log = std::fs::read_to_string(path).unwrap_or_default();
                out.push_str(&format!(
                    "--- pod {key} (podman node), {} ---\n{}\n",
                    path.display(),
                    super::wait::tail(&log, 30)
                ));
            }
        }
        out + &format!("(pod logs in {})", self.dir.display())
    }
}

impl Drop for PodmanNode {
    fn drop(&mut self) {
        self.task.abort();
        for (_, pod) in lock(&self.pods).drain() {
            pod.task.abort();
        }
        remove_all(&self.podman);
    }
}

fn remove_all(podman: &Podman) {
    let _ = podman.run(&[
        "rm",
        "--force",
        "--time=0",
        "--filter",
        &format!("label={CONTAINER_LABEL}"),
    ]);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Creates the Node object and marks it Ready (nothing marks it otherwise: no node lifecycle
/// controller runs).
async fn register_node(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
                NODE_KEY: "true",
            },
        },
        "spec": {"taints": [{"key": NODE_KEY, "value": "true", "effect": "NoSchedule"}]},
    }))
    .expect("node literal");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating node {name}: {e}"),
    }
    let now = jiff_now();
    let resources =
        json!({"cpu": "8", "memory": "16Gi", "pods": "30", "ephemeral-storage": "20Gi"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "PodmanNodeReady",
            "message": "the test support's podman agent runs this node's pods",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "podman-node",
            "containerRuntimeVersion": "podman", "kubeProxyVersion": "", "osImage": "", "kernelVersion": "",
            "bootID": "", "machineID": "", "systemUUID": "",
        },
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("marking node {name} Ready: {e}"));
}

/// Now, as the API writes times.
fn jiff_now() -> String {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::to_value(now)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

struct Context {
    client: Client,
    podman: Arc<Podman>,
    node: String,
    api_port: u16,
    dir: PathBuf,
}

/// Lists the node's pods twice a second: starts a task for each new one, tells the task of each
/// deleted one to stop.
async fn sync_loop(ctx: Arc<Context>, pods: Arc<Mutex<HashMap<String, PodHandle>>>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={}", ctx.node));
    loop {
        if let Ok(list) = api.list(&params).await {
            let mut known = lock(&pods);
            let mut live = Vec::new();
            for pod in list.items {
                let key = format!(
                    "{}/{}/{}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    pod.uid().unwrap_or_default()
                );
                live.push(key.clone());
                let deleting = pod.metadata.deletion_timestamp.is_some();
                if let Some(handle) = known.get(&key) {
                    if deleting {
                        let _ = handle.stop.send(true);
                    }
                    continue;
                }
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                if matches!(phase, Some("Succeeded" | "Failed")) {
                    continue;
                }
                let (stop, stopped) = tokio::sync::watch::channel(deleting);
                let logs = Logs::default();
                let task = tokio::spawn(run_pod(ctx.clone(), pod, stopped, logs.clone()));
                known.insert(key, PodHandle { stop, task, logs });
            }
            // A pod removed without a graceful deletion (grace period 0): stop at once.
            for (key, handle) in known.iter() {
                if !live.contains(key) {
                    let _ = handle.stop.send(true);
                }
            }
            known.retain(|key, handle| live.contains(key) || !handle.task.is_finished());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One container of a pod as it runs.
struct Running {
    name: String,
    spec: Container,
    podman_name: String,
    pid: i32,
    restarts: i32,
    started_at: String,
    ready: bool,
    last_exit: Option<(i32, String)>,
    /// Exited for good (restartPolicy Never, or OnFailure with exit 0): (exit code, when).
    terminated: Option<(i32, String)>,
    readiness_failures: i32,
    liveness_failures: i32,
    started: Instant,
    last_readiness: Option<Instant>,
    last_liveness: Option<Instant>,
}

/// Why a pod could not start yet; said in its status, retried.
struct NotStarted {
    reason: &'static str,
    message: String,
}

async fn run_pod(
    ctx: Arc<Context>,
    pod: Pod,
    mut stop: tokio::sync::watch::Receiver<bool>,
    logs: Logs,
) {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let pod_dir = ctx.dir.join("pods").join(format!(
        "{}_{name}_{uid}",
        pod.namespace().unwrap_or_default()
    ));
    let mut relay: Option<tokio::task::JoinHandle<()>> = None;
    // Start: volumes, then the containers; retried (with the reason in the status) until it works
    // or the pod is deleted.
    let mut containers = loop {
        if *stop.borrow() {
            finish(&ctx, &pods, &pod, &[]).await;
            return;
        }
        match start_pod(&ctx, &pod, &pod_dir, &mut relay, &logs).await {
            Ok(c) => break c,
            Err(why) => {
                report_waiting(&pods, &pod, &why).await;
                let _ = tokio::time::timeout(Duration::from_secs(2), stop.changed()).await;
            }
        }
    };
    report(&pods, &pod, &containers).await;
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(1), stop.changed()).await;
        if *stop.borrow() {
            break;
        }
        let mut changed = false;
        let mut restart = false;
        for c in containers.iter_mut() {
            if c.terminated.is_some() {
                continue;
            }
            if let Some(code) = exited(&ctx.podman, c) {
                if runs_to_completion(&pod, code) {
                    c.terminated = Some((code, jiff_now()));
                    changed = true;
                } else {
                    c.last_exit = Some((code, jiff_now()));
                    restart = true;
                }
                continue;
            }
            if let Some(probe) = &c.spec.readiness_probe
                && due(probe, c.started, c.last_readiness)
            {
                c.last_readiness = Some(Instant::now());
                let ok = run_probe(&ctx.podman, c, probe).await;
                let threshold = probe.failure_threshold.unwrap_or(3);
                c.readiness_failures = if ok { 0 } else { c.readiness_failures + 1 };
                let ready = ok || (c.ready && c.readiness_failures < threshold);
                if ready != c.ready {
                    c.ready = ready;
                    changed = true;
                }
            }
            if let Some(probe) = &c.spec.liveness_probe
                && due(probe, c.started, c.last_liveness)
            {
                c.last_liveness = Some(Instant::now());
                let ok = run_probe(&ctx.podman, c, probe).await;
                c.liveness_failures = if ok { 0 } else { c.liveness_failures + 1 };
                if c.liveness_failures >= probe.failure_threshold.unwrap_or(3) {
                    let grace = pod_grace(&pod);
                    let _ = ctx
                        .podman
                        .run_async(&["stop", &format!("--time={grace}"), &c.podman_name])
                        .await;
                    c.last_exit = Some((137, jiff_now()));
                    restart = true;
                }
            }
        }
        if restart {
            // The pod's network namespace is its first container's: a restart starts them all
            // again in a new one (rare in tests: a container that crashed or failed liveness).
            let restarts = containers.iter().map(|c| c.restarts).max().unwrap_or(0) + 1;
            let exits: Vec<_> = containers.iter().map(|c| c.last_exit.clone()).collect();
            for c in &containers {
                let _ = ctx
                    .podman
                    .run_async(&["rm", "--force", "--time=0", &c.podman_name])
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            match start_containers(&ctx, &pod, &pod_dir, &mut relay, &logs, restarts).await {
                Ok(mut again) => {
                    for (c, exit) in again.iter_mut().zip(exits) {
                        c.last_exit = exit;
                    }
                    containers = again;
                }
                Err(why) => report_waiting(&pods, &pod, &why).await,
            }
            changed = true;
        }
        if changed {
            report(&pods, &pod, &containers).await;
        }
    }
    finish(&ctx, &pods, &pod, &containers).await;
    if let Some(r) = relay {
        r.abort();
    }
}

/// Whether a container of `pod` that exited with `code` stays exited (the kubelet's
/// restartPolicy: Never, or OnFailure after a success) rather than being restarted.
fn runs_to_completion(pod: &Pod, code: i32) -> bool {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => true,
        Some("OnFailure") => code == 0,
        _ => false,
    }
}

/// Whether a probe is due: after its initial delay, once per period.
fn due(probe: &Probe, started: Instant, last: Option<Instant>) -> bool {
    let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    started.elapsed() >= delay && last.is_none_or(|l| l.elapsed() >= period)
}

fn pod_grace(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
}

/// Stops the containers (SIGTERM, the grace period, SIGKILL), removes the pod object as the
/// kubelet does once its containers are gone. Their logs stay in the pod's directory.
async fn finish(ctx: &Context, pods: &Api<Pod>, pod: &Pod, containers: &[Running]) {
    let grace = match pods.get_opt(&pod.name_any()).await {
        Ok(Some(current)) => pod_grace(&current),
        _ => 0,
    };
    for c in containers.iter() {
        let _ = ctx
            .podman
            .run_async(&["stop", &format!("--time={grace}"), &c.podman_name])
            .await;
        let _ = ctx
            .podman
            .run_async(&["rm", "--force", "--time=0", &c.podman_name])
            .await;
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let _ = pods.delete(&pod.name_any(), &params).await;
}

/// The container's exit code once its process is gone (checked without podman while it runs:
/// a podman call per container per second would cost these 2 cores more than the pods).
fn exited(podman: &Podman, c: &Running) -> Option<i32> {
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(c.pid, 0) } == 0
        && std::fs::read_to_string(format!("/proc/{}/stat", c.pid)).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        });
    if alive {
        return None;
    }
    let out = podman.run(&[
        "inspect",
        "--format",
        "{{.State.Status}} {{.State.ExitCode}}",
        &c.podman_name,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    match (words.next(), words.next()) {
        (Some("exited" | "stopped"), Some(code)) => code.parse().ok(),
        _ => None,
    }
}

async fn start_pod(
    ctx: &Context,
    pod: &Pod,
    pod_dir: &Path,
    relay: &mut Option<tokio::task::JoinHandle<()>>,
    logs: &Logs,
) -> Result<Vec<Running>, NotStarted> {
    let spec = pod.spec.as_ref().ok_or_else(|| NotStarted {
        reason: "CreateContainerConfigError",
        message: "the pod has no spec".into(),
    })?;
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(NotStarted {
            reason: "CreateContainerConfigError",
            message: "init containers are not supported by the test support's podman node".into(),
        });
    }
    write_volumes(ctx, pod, pod_dir).await?;
    start_containers(ctx, pod, pod_dir, relay, logs, 0).await
}

/// Creates the pod's containers (the first one's network namespace is the pod's), relays the API
/// server into that namespace, starts them.
async fn start_containers(
    ctx: &Context,
    pod: &Pod,
    pod_dir: &Path,
    relay: &mut Option<tokio::task::JoinHandle<()>>,
    logs: &Logs,
    restarts: i32,
) -> Result<Vec<Running>, NotStarted> {
    let spec = pod.spec.as_ref().expect("checked by start_pod");
    let mut created: Vec<Running> = Vec::new();
    let mut network = "none".to_string();
    for container in &spec.containers {
        let podman_name = format!(
            "k8s_{}_{}_{}_{}_{restarts}",
            container.name,
            pod.name_any(),
            pod.namespace().unwrap_or_default(),
            &pod.uid().unwrap_or_default()[..8.min(pod.uid().unwrap_or_default().len())]
        );
        let _ = ctx
            .podman
            .run_async(&["rm", "--force", "--time=0", &podman_name])
            .await;
        let log = pod_dir.join(format!("{}-{restarts}.log", container.name));
        let mut args = create_args(ctx, pod, container, pod_dir, &podman_name, &network).await?;
        args.insert(1, format!("--log-opt=path={}", log.display()));
        // A pull can take a while: not on the runtime's threads.
        let mut command = ctx.podman.command();
        command.args(&args);
        let out = tokio::process::Command::from(command)
            .output()
            .await
            .map_err(|e| e.to_string());
        let failed = match &out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Some(e.clone()),
        };
        if let Some(message) = failed {
            for c in &created {
                let _ = ctx
                    .podman
                    .run_async(&["rm", "--force", "--time=0", &c.podman_name])
                    .await;
            }
            let reason = if message.contains("pull") || message.contains("manifest") {
                "ErrImagePull"
            } else {
                "CreateContainerError"
            };
            return Err(NotStarted { reason, message });
        }
        // Created, not started: its network namespace exists, the process does not run yet.
        let init = ctx.podman.run_async(&["init", &podman_name]).await;
        if !init.status.success() {
            return Err(NotStarted {
                reason: "CreateContainerError",
                message: String::from_utf8_lossy(&init.stderr).trim().to_string(),
            });
        }
        let inspect = ctx
            .podman
            .run_async(&["inspect", "--format", "{{.State.Pid}}", &podman_name])
            .await;
        let pid = String::from_utf8_lossy(&inspect.stdout)
            .trim()
            .parse::<i32>()
            .unwrap_or(0);
        if created.is_empty() {
            if let Some(old) = relay.take() {
                old.abort();
            }
            *relay = Some(relay_api_server(pid, ctx.api_port).map_err(|e| NotStarted {
                reason: "CreateContainerError",
                message: format!("relaying the API server into the pod's network: {e}"),
            })?);
            network = format!("container:{podman_name}");
        }
        lock(logs).push(log);
        created.push(Running {
            name: container.name.clone(),
            spec: container.clone(),
            podman_name,
            pid,
            restarts,
            started_at: jiff_now(),
            ready: container.readiness_probe.is_none(),
            last_exit: None,
            terminated: None,
            readiness_failures: 0,
            liveness_failures: 0,
            started: Instant::now(),
            last_readiness: None,
            last_liveness: None,
        });
    }
    for c in &created {
        let out = ctx.podman.run_async(&["start", &c.podman_name]).await;
        if !out.status.success() {
            return Err(NotStarted {
                reason: "RunContainerError",
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(created)
}

/// `podman create` for one container of the pod.
async fn create_args(
    ctx: &Context,
    pod: &Pod,
    c: &Container,
    pod_dir: &Path,
    podman_name: &str,
    network: &str,
) -> Result<Vec<String>, NotStarted> {
    let spec = pod.spec.as_ref().expect("a spec");
    let config_error = |message: String| NotStarted {
        reason: "CreateContainerConfigError",
        message,
    };
    let image = c
        .image
        .clone()
        .ok_or_else(|| config_error(format!("container {} has no image", c.name)))?;
    let pull = match c.image_pull_policy.as_deref() {
        Some("Always") => "always",
        Some("Never") => "never",
        Some("IfNotPresent") => "missing",
        // The API server defaults it: Always for :latest, IfNotPresent otherwise.
        _ => "missing",
    };
    let mut args = vec![
        "create".to_string(),
        format!("--name={podman_name}"),
        format!("--label={CONTAINER_LABEL}={}", ctx.node),
        format!("--network={network}"),
        format!("--pull={pull}"),
        // A registry on loopback speaks plain HTTP.
        "--tls-verify=false".into(),
        format!("--hostname={}", pod.name_any()),
        "--ulimit=nofile=1024:1024".into(),
        "--ulimit=nproc=1000:1000".into(),
        "--log-driver=k8s-file".into(),
    ];
    let pod_security = spec.security_context.as_ref();
    let security = c.security_context.as_ref();
    let user = security
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_security.and_then(|s| s.run_as_user));
    let group = security
        .and_then(|s| s.run_as_group)
        .or_else(|| pod_security.and_then(|s| s.run_as_group));
    match (user, group) {
        (Some(u), Some(g)) => args.push(format!("--user={u}:{g}")),
        (Some(u), None) => args.push(format!("--user={u}")),
        _ => {}
    }
    if let Some(s) = security {
        if s.read_only_root_filesystem == Some(true) {
            args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if s.allow_privilege_escalation == Some(false) {
            args.push("--security-opt=no-new-privileges".into());
        }
        if let Some(caps) = &s.capabilities {
            for cap in caps.drop.iter().flatten() {
                args.push(format!("--cap-drop={cap}"));
            }
            for cap in caps.add.iter().flatten() {
                args.push(format!("--cap-add={cap}"));
            }
        }
    }
    if let Some(dir) = &c.working_dir {
        args.push(format!("--workdir={dir}"));
    }
    for (name, value) in environment(ctx, pod, c).await? {
        args.push(format!("--env={name}={value}"));
    }
    for mount in c.volume_mounts.iter().flatten() {
        let mut host = pod_dir.join("volumes").join(&mount.name);
        if !host.exists() {
            return Err(config_error(format!(
                "container {} mounts volume {:?}, which the pod does not have",
                c.name, mount.name
            )));
        }
        if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            host = host.join(sub);
        }
        let ro = if mount.read_only == Some(true) {
            ":ro"
        } else {
            ""
        };
        args.push(format!(
            "--volume={}:{}{ro}",
            host.display(),
            mount.mount_path
        ));
    }
    if let Some(command) = &c.command {
        args.push(format!(
            "--entrypoint={}",
            serde_json::to_string(command).expect("strings")
        ));
    }
    args.push(image);
    args.extend(c.args.iter().flatten().cloned());
    Ok(args)
}

/// The container's environment, as the kubelet builds it: the API server's address first, then
/// the container's own variables in order.
async fn environment(
    ctx: &Context,
    pod: &Pod,
    c: &Container,
) -> Result<Vec<(String, String)>, NotStarted> {
    let ns = pod.namespace().unwrap_or_default();
    let port = ctx.api_port.to_string();
    let mut env = vec![
        (
            "KUBERNETES_SERVICE_HOST".to_string(),
            "127.0.0.1".to_string(),
        ),
        ("KUBERNETES_SERVICE_PORT".to_string(), port.clone()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".to_string(), port.clone()),
        (
            "KUBERNETES_PORT".to_string(),
            format!("tcp://127.0.0.1:{port}"),
        ),
    ];
    let missing = |what: String| NotStarted {
        reason: "CreateContainerConfigError",
        message: what,
    };
    for var in c.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    field_value(pod, &field.field_path).ok_or_else(|| {
                        missing(format!(
                            "env {}: field {} is not supported by the podman node",
                            var.name, field.field_path
                        ))
                    })?
                } else if let Some(key) = &from.config_map_key_ref {
                    let map = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
                        .get_opt(&key.name)
                        .await
                        .ok()
                        .flatten();
                    match map.and_then(|m| m.data?.get(&key.key).cloned()) {
                        Some(v) => v,
                        None if key.optional == Some(true) => continue,
                        None => {
                            return Err(missing(format!(
                                "env {}: configmap {:?} key {:?} not found",
                                var.name, key.name, key.key
                            )));
                        }
                    }
                } else if let Some(key) = &from.secret_key_ref {
                    let secret = Api::<Secret>::namespaced(ctx.client.clone(), &ns)
                        .get_opt(&key.name)
                        .await
                        .ok()
                        .flatten();
                    match secret.and_then(|s| s.data?.get(&key.key).cloned()) {
                        Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                        None if key.optional == Some(true) => continue,
                        None => {
                            return Err(missing(format!(
                                "env {}: secret {:?} key {:?} not found",
                                var.name, key.name, key.key
                            )));
                        }
                    }
                } else {
                    return Err(missing(format!(
                        "env {}: this kind of valueFrom is not supported by the podman node",
                        var.name
                    )));
                }
            }
            (None, None) => String::new(),
        };
        env.push((var.name.clone(), value));
    }
    Ok(env)
}

/// A downward API field of the pod.
fn field_value(pod: &Pod, path: &str) -> Option<String> {
    let spec = pod.spec.as_ref();
    Some(match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "spec.nodeName" => spec?.node_name.clone().unwrap_or_default(),
        "spec.serviceAccountName" => spec?.service_account_name.clone().unwrap_or_default(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
        _ => {
            let label = path
                .strip_prefix("metadata.labels['")
                .and_then(|r| r.strip_suffix("']"))?;
            pod.labels().get(label).cloned().unwrap_or_default()
        }
    })
}

/// Writes every volume of the pod into `<pod_dir>/volumes/<name>/`.
async fn write_volumes(ctx: &Context, pod: &Pod, pod_dir: &Path) -> Result<(), NotStarted> {
    let ns = pod.namespace().unwrap_or_default();
    let spec = pod.spec.as_ref().expect("a spec");
    for volume in spec.volumes.iter().flatten() {
        let dir = pod_dir.join("volumes").join(&volume.name);
        std::fs::create_dir_all(&dir).map_err(|e| NotStarted {
            reason: "CreateContainerConfigError",
            message: format!("{}: {e}", dir.display()),
        })?;
        set_mode(&dir, 0o755);
        let files = volume_files(ctx, pod, &ns, volume).await?;
        if volume.empty_dir.is_some() {
            // As the kubelet's: writable by whatever user the container runs as.
            set_mode(&dir, 0o777);
        }
        for (path, bytes) in files {
            let file = dir.join(&path);
            if let Some(parent) = file.parent() {
                let _ = std::fs::create_dir_all(parent);
                set_mode(parent, 0o755);
            }
            std::fs::write(&file, bytes).map_err(|e| NotStarted {
                reason: "CreateContainerConfigError",
                message: format!("{}: {e}", file.display()),
            })?;
            set_mode(&file, 0o644);
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// The files of one volume (path in the volume, contents).
async fn volume_files(
    ctx: &Context,
    pod: &Pod,
    ns: &str,
    volume: &Volume,
) -> Result<Vec<(String, Vec<u8>)>, NotStarted> {
    let waiting = |message: String| NotStarted {
        reason: "ContainerCreating",
        message,
    };
    if volume.empty_dir.is_some() {
        return Ok(Vec::new());
    }
    // The keys of a ConfigMap or Secret as files, when it is there or optional.
    let object_files = |data: Option<BTreeMap<String, Vec<u8>>>,
                        optional: Option<bool>,
                        items: Option<&[KeyToPath]>,
                        kind: &str,
                        name: &str| match data {
        Some(data) => Ok(keys(data, items)),
        None if optional == Some(true) => Ok(Vec::new()),
        None => Err(waiting(format!(
            "MountVolume.SetUp failed for volume {:?}: {kind} {name:?} not found",
            volume.name
        ))),
    };
    if let Some(source) = &volume.config_map {
        let data = config_map_data(ctx, ns, &source.name).await;
        let items = source.items.as_deref();
        return object_files(data, source.optional, items, "configmap", &source.name);
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.clone().unwrap_or_default();
        let data = secret_data(ctx, ns, &name).await;
        return object_files(
            data,
            source.optional,
            source.items.as_deref(),
            "secret",
            &name,
        );
    }
    if let Some(projected) = &volume.projected {
        let mut files = Vec::new();
        for source in projected.sources.iter().flatten() {
            if let Some(token) = &source.service_account_token {
                let value = service_account_token(
                    ctx,
                    pod,
                    token.audience.as_deref(),
                    token.expiration_seconds,
                )
                .await
                .map_err(|e| waiting(format!("TokenRequest for volume {:?}: {e}", volume.name)))?;
                files.push((token.path.clone(), value.into_bytes()));
            } else if let Some(cm) = &source.config_map {
                let data = config_map_data(ctx, ns, &cm.name).await;
                let items = cm.items.as_deref();
                files.extend(object_files(
                    data,
                    cm.optional,
                    items,
                    "configmap",
                    &cm.name,
                )?);
            } else if let Some(secret) = &source.secret {
                let data = secret_data(ctx, ns, &secret.name).await;
                let items = secret.items.as_deref();
                files.extend(object_files(
                    data,
                    secret.optional,
                    items,
                    "secret",
                    &secret.name,
                )?);
            } else if let Some(downward) = &source.downward_api {
                for item in downward.items.iter().flatten() {
                    let field = item.field_ref.as_ref().map(|f| f.field_path.as_str());
                    let value = field.and_then(|f| field_value(pod, f)).ok_or_else(|| NotStarted {
                        reason: "CreateContainerConfigError",
                        message: format!(
                            "volume {:?}: downward API item {:?} is not supported by the podman node",
                            volume.name, item.path
                        ),
                    })?;
                    files.push((item.path.clone(), value.into_bytes()));
                }
            } else {
                return Err(NotStarted {
                    reason: "CreateContainerConfigError",
                    message: format!(
                        "volume {:?}: a projected source the podman node does not support",
                        volume.name
                    ),
                });
            }
        }
        return Ok(files);
    }
    Err(NotStarted {
        reason: "CreateContainerConfigError",
        message: format!(
            "volume {:?}: only configMap, secret, emptyDir and projected volumes run on the podman node",
            volume.name
        ),
    })
}

/// The keys of a ConfigMap or Secret as files: every key, or the listed items at their paths.
fn keys(data: BTreeMap<String, Vec<u8>>, items: Option<&[KeyToPath]>) -> Vec<(String, Vec<u8>)> {
    match items {
        None => data.into_iter().collect(),
        Some(items) => items
            .iter()
            .filter_map(|i| Some((i.path.clone(), data.get(&i.key)?.clone())))
            .collect(),
    }
}

async fn config_map_data(ctx: &Context, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let map = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let mut out: BTreeMap<String, Vec<u8>> = map
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    out.extend(
        map.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    Some(out)
}

async fn secret_data(ctx: &Context, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    Some(
        secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
    )
}

/// A token of the pod's ServiceAccount from TokenRequest, bound to the pod (as the kubelet asks
/// for a projected token).
async fn service_account_token(
    ctx: &Context,
    pod: &Pod,
    audience: Option<&str>,
    expiration: Option<i64>,
) -> Result<String, String> {
    let ns = pod.namespace().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {
            "audiences": audience.map(|a| vec![a]).unwrap_or_default(),
            "expirationSeconds": expiration.unwrap_or(3607),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.name_any(), "uid": pod.uid()},
        }
    }))
    .map_err(|e| e.to_string())?;
    let answer: TokenRequest = Api::<ServiceAccount>::namespaced(ctx.client.clone(), &ns)
        .create_subresource("token", &account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("serviceaccount {ns}/{account}: {e}"))?;
    answer
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| "TokenRequest answered no token".into())
}

/// Listens on `127.0.0.1:<port>` inside the network namespace of process `pid` and relays every
/// connection to the API server on the host's `127.0.0.1:<port>`.
fn relay_api_server(pid: i32, port: u16) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = in_netns(pid, move || {
        let l = std::net::TcpListener::bind(("127.0.0.1", port))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    Ok(tokio::spawn(async move {
        while let Ok((mut inside, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut api) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inside, &mut api).await;
                }
            });
        }
    }))
}

/// Runs `f` on a thread that joined the network namespace of process `pid` (sockets it creates
/// stay in that namespace).
fn in_netns<T: Send>(
    pid: i32,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = File::open(format!("/proc/{pid}/ns/net"))?;
            // SAFETY: setns on this thread only, with a namespace file we hold open.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("namespace thread panicked")))
    })
}

/// Runs a probe in the pod's network namespace (HTTP(S) GET with curl, not verifying TLS as the
/// kubelet does not; TCP connect; exec in the container).
async fn run_probe(podman: &Podman, c: &Running, probe: &Probe) -> bool {
    let timeout = probe.timeout_seconds.unwrap_or(1).max(1);
    if let Some(http) = &probe.http_get {
        let Some(port) = resolve_port(&c.spec, &http.port) else {
            return false;
        };
        let scheme = http.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let url = format!(
            "{scheme}://127.0.0.1:{port}{}",
            http.path.as_deref().unwrap_or("/")
        );
        let pid = c.pid.to_string();
        let out = tokio::process::Command::new("nsenter")
            .args([
                "--target",
                &pid,
                "--net",
                "--",
                "curl",
                "--silent",
                "--insecure",
            ])
            .args(["--max-time", &timeout.to_string()])
            .args(["--output", "/dev/null", "--write-out", "%{http_code}", &url])
            .output()
            .await;
        return out.is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u16>()
                .is_ok_and(|code| (200..400).contains(&code))
        });
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = resolve_port(&c.spec, &tcp.port) else {
            return false;
        };
        return in_netns(c.pid, move || {
            std::net::TcpStream::connect_timeout(
                &([127, 0, 0, 1], port).into(),
                Duration::from_secs(timeout as u64),
            )
        })
        .is_ok();
    }
    if let Some(exec) = &probe.exec {
        let mut args = vec!["exec".to_string(), c.podman_name.clone()];
        args.extend(exec.command.iter().flatten().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        return podman.run(&args).status.success();
    }
    false
}

/// A probe's port: a number, or the name of one of the container's ports.
fn resolve_port(c: &Container, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// The pod's status as the kubelet writes it: Running, its containers, Ready from them.
async fn report(pods: &Api<Pod>, pod: &Pod, containers: &[Running]) {
    let now = jiff_now();
    let ready = containers.iter().all(|c| c.ready && c.terminated.is_none());
    // All containers exited for good: the pod succeeded if each exited 0 (a Job's pod).
    let phase = if containers.iter().all(|c| c.terminated.is_some()) {
        if containers
            .iter()
            .all(|c| matches!(c.terminated, Some((0, _))))
        {
            "Succeeded"
        } else {
            "Failed"
        }
    } else {
        "Running"
    };
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let mut status = json!({
                "name": c.name,
                "image": c.spec.image,
                "imageID": "",
                "containerID": format!("podman://{}", c.podman_name),
                "ready": c.ready,
                "started": true,
                "restartCount": c.restarts,
                "state": {"running": {"startedAt": c.started_at}},
            });
            if let Some((code, at)) = &c.terminated {
                let reason = if *code == 0 { "Completed" } else { "Error" };
                status["ready"] = json!(false);
                status["started"] = json!(false);
                status["state"] = json!({"terminated": {
                    "exitCode": code, "reason": reason, "startedAt": c.started_at, "finishedAt": at,
                }});
            }
            if let Some((code, at)) = &c.last_exit {
                status["lastState"] =
                    json!({"terminated": {"exitCode": code, "finishedAt": at, "reason": "Error"}});
            }
            status
        })
        .collect();
    let condition = |type_: &str, ok: bool| json!({"type": type_, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": pod.metadata.creation_timestamp,
        "containerStatuses": statuses,
        "conditions": [
            condition("PodReadyToStartContainers", true),
            condition("Initialized", true),
            condition("ContainersReady", ready),
            condition("Ready", ready),
        ],
    }});
    let _ = pods
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&status),
        )
        .await;
}

/// The pod waits: its containers' state says why (`kubectl get pods` shows the reason).
async fn report_waiting(pods: &Api<Pod>, pod: &Pod, why: &NotStarted) {
    let statuses: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({
                "name": c.name, "image": c.image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": why.reason, "message": why.message}},
            })
        })
        .collect();
    let status = json!({"status": {"phase": "Pending", "hostIP": "127.0.0.1", "containerStatuses": statuses}});
    let _ = pods
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&status),
        )
        .await;
}
