//! `make bench`: ksched against upstream kube-scheduler and a null binder (the API server's
//! ceiling), one after another on the same real control plane, with the same nodes, the same pods and
//! the same client QPS/burst (5000/5000), on workloads after upstream's scheduler_perf.
//!
//! Options (after `--`): `--preset default|large|small`, `--workloads A,B`, `--contenders ksched,upstream,ceiling`,
//! `--rounds N` (default 3; also BENCH_PRESET, BENCH_WORKLOADS, BENCH_CONTENDERS, BENCH_ROUNDS).
//! Each round runs the contenders one after another (interleaved, so a slow phase of the machine hits
//! all of them; the order rotates from round to round); a figure is the median over the rounds, since single runs on a small shared machine
//! vary by tens of percent.
//! Output: one `BENCH ...` line per workload and target/bench/report.md (medians, then every round).
//!
//! The same binary also runs the null binder (`--null-binder`), so the ceiling is a process of its
//! own like the two schedulers.

#[path = "../tests/support/mod.rs"]
mod support;
#[path = "scheduler_perf/workloads.rs"]
mod workloads;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status as ApiStatus};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config};
use parking_lot::Mutex;
use serde_json::{Value, json};
use support::{Components, ControlPlane, control_plane};

const SCHEDULER_NAME: &str = "bench-scheduler";
/// The DRA workload (after scheduler_perf's `dra/` SchedulingWithResourceClaimTemplate): every pod
/// has its own claim for one device of the class; every node publishes `DEVICES_PER_NODE`.
const DRA_WORKLOAD: &str = "SchedulingWithResourceClaimTemplate";
const DRA_DRIVER: &str = "bench.ksched.io";
const DRA_CLASS: &str = "bench-gpu";
const DEVICES_PER_NODE: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Ksched,
    Upstream,
    Ceiling,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Ksched => "ksched",
            Contender::Upstream => "upstream",
            Contender::Ceiling => "ceiling",
        }
    }
}

/// One workload after scheduler_perf: nodes, pods created first (not measured), measured pods.
struct Workload {
    name: &'static str,
    nodes: usize,
    init_pods: usize,
    measure_pods: usize,
}

fn workloads(preset: &str) -> Vec<Workload> {
    let (nodes, pods) = match preset {
        "large" => (5000, 10000),
        "small" => (50, 200),
        _ => (500, 2000),
    };
    vec![
        Workload {
            name: "SchedulingBasic",
            nodes,
            init_pods: pods / 4,
            measure_pods: pods,
        },
        // One pod per node at most: measured pods stay below the node count.
        Workload {
            name: "SchedulingPodAntiAffinity",
            nodes,
            init_pods: nodes / 5,
            measure_pods: nodes * 3 / 5,
        },
        Workload {
            name: "TopologySpreading",
            nodes,
            init_pods: pods / 4,
            measure_pods: pods,
        },
        Workload {
            name: "SchedulingNodeAffinity",
            nodes,
            init_pods: pods / 4,
            measure_pods: pods,
        },
        // Low-priority pods fill the nodes (4 x 900m of 4 CPUs), each high-priority pod (3 CPUs) preempts.
        Workload {
            name: "PreemptionBasic",
            nodes,
            init_pods: nodes * 4,
            measure_pods: nodes / 2,
        },
        // One device per pod, 8 per node: a quarter of the devices are left when all pods run.
        Workload {
            name: DRA_WORKLOAD,
            nodes,
            init_pods: nodes,
            measure_pods: pods,
        },
        Workload {
            name: workloads::PREFERRED_POD_AFFINITY,
            nodes,
            init_pods: nodes,
            measure_pods: pods / 2,
        },
        Workload {
            name: workloads::PREFERRED_POD_ANTI_AFFINITY,
            nodes,
            init_pods: nodes,
            measure_pods: pods / 2,
        },
        Workload {
            name: workloads::PREFERRED_TOPOLOGY_SPREADING,
            nodes,
            init_pods: nodes,
            measure_pods: pods / 2,
        },
        // Init pods in nodes/50 labelled namespaces; one pod per node at most in all.
        Workload {
            name: workloads::ANTI_AFFINITY_NS_SELECTOR,
            nodes,
            init_pods: nodes * 2 / 5,
            measure_pods: nodes / 5,
        },
        // A 9-CPU pod that never fits every 200 ms while the measured pods come.
        Workload {
            name: workloads::UNSCHEDULABLE,
            nodes,
            init_pods: 10,
            measure_pods: pods / 2,
        },
        // Every second a node (no pod room), a 9-CPU pod and a service are replaced.
        Workload {
            name: workloads::MIXED_CHURN,
            nodes,
            init_pods: 0,
            measure_pods: pods / 2,
        },
        // One bound CSI volume per pod, 39 attachable per node.
        Workload {
            name: workloads::CSI_PVS,
            nodes,
            init_pods: nodes,
            measure_pods: pods / 2,
        },
        // One large node; `pods` gated pods wait throughout; the init pods are deleted at 50/s
        // while the measured pods come (upstream's SchedulingWhileGated).
        Workload {
            name: workloads::GATED_PODS,
            nodes: 0,
            init_pods: pods,
            measure_pods: pods,
        },
        // Every pod requires the one named node by metadata.name, as DaemonSet pods do.
        Workload {
            name: workloads::DAEMONSET,
            nodes,
            init_pods: 0,
            measure_pods: pods,
        },
        // Low-priority pods fill the nodes; a 3-CPU high-priority pod every 200 ms preempts while
        // the measured default pods come.
        Workload {
            name: workloads::PREEMPTION_ASYNC,
            nodes,
            init_pods: nodes * 4,
            measure_pods: pods / 4,
        },
    ]
}

fn container(cpu: &str) -> Value {
    json!([{"name": "pause", "image": "registry.k8s.io/pause:3.10.2", "ports": [{"containerPort": 80}],
        "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}, "limits": {"cpu": cpu, "memory": "500Mi"}}}])
}

/// The pod template of a workload (`measure`: a measured pod, else an init pod).
fn pod(workload: &str, ns: &str, name: &str, measure: bool) -> Pod {
    let mut labels = json!({"bench": if measure { "measure" } else { "init" }, "bench-run": ns});
    let mut spec = json!({"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 0, "containers": container("100m")});
    match workload {
        "SchedulingPodAntiAffinity" => {
            labels["color"] = json!("green");
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": [ns]}]}});
        }
        "TopologySpreading" => {
            labels["color"] = json!("blue");
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        "SchedulingNodeAffinity" => {
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone1", "zone2"]}]}]}}});
        }
        DRA_WORKLOAD => {
            // The claim the pod's template stands for, created by the bench (see `dra_claims`).
            spec["resourceClaims"] =
                json!([{"name": "gpu", "resourceClaimName": format!("{name}-gpu")}]);
            spec["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
        }
        "PreemptionBasic" => {
            if measure {
                spec["priorityClassName"] = json!("bench-high");
                spec["containers"] = container("3000m");
            } else {
                spec["priorityClassName"] = json!("bench-low");
                spec["containers"] = container("900m");
            }
        }
        other => workloads::customize_pod(other, name, ns, measure, &mut labels, &mut spec),
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}),
    )
    .expect("pod template")
}

/// Figures of one contender on one workload.
#[derive(Debug, Clone, Default)]
struct Figures {
    pods_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_seconds: f64,
    peak_rss_mb: f64,
}

/// utime+stime in seconds and VmHWM in MB of `pid`.
fn proc_usage(pid: u32) -> (f64, f64) {
    let ticks = 100.0; // CLK_TCK on Linux
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let utime: f64 = after.get(11)?.parse().ok()?;
            let stime: f64 = after.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0);
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0);
    (cpu, rss)
}

struct ContenderProcess {
    child: Child,
}

impl Drop for ContenderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(cp: &ControlPlane, name: &str) -> PathBuf {
    let path = cp.dir.join(format!("bench-{name}.yaml"));
    let config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {SCHEDULER_NAME}\n",
        cp.kubeconfig.display()
    );
    std::fs::write(&path, config).expect("write bench config");
    path
}

fn start(cp: &ControlPlane, contender: Contender, log: &Path) -> ContenderProcess {
    let out = std::fs::File::create(log).expect("contender log");
    let err = out.try_clone().expect("contender log");
    let port = support::free_port();
    let kubeconfig = cp.kubeconfig.display().to_string();
    let mut cmd = match contender {
        Contender::Ksched => {
            let mut c = Command::new(support::scheduler::ksched_bin());
            c.args([
                "scheduler",
                "--config",
                support::path_str(&write_config(cp, "ksched")),
                "--kubeconfig",
                &kubeconfig,
            ])
            .args(["--bind-address=127.0.0.1", &format!("--secure-port={port}")]);
            c
        }
        Contender::Upstream => {
            let mut c = Command::new(cp.bin_dir.join("kube-scheduler"));
            c.args([
                format!("--config={}", write_config(cp, "upstream").display()),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                "--v=1".into(),
            ]);
            c
        }
        Contender::Ceiling => {
            let mut c = Command::new(std::env::current_exe().expect("bench exe"));
            c.args(["--null-binder", "--kubeconfig", &kubeconfig]);
            c
        }
    };
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // An interrupted bench (Ctrl-C, SIGTERM) takes its contender with it: `start` runs on the
    // main thread, which lives as long as the bench.
    support::process::killed_with_parent(&mut cmd);
    ContenderProcess {
        child: cmd.spawn().expect("start contender"),
    }
}

async fn client(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    config.read_timeout = Some(Duration::from_secs(300));
    Client::try_from(config).expect("client")
}

/// Creates `pods` with up to 64 requests in flight; returns when each create returned.
async fn create_pods(api: &Api<Pod>, pods: Vec<Pod>) -> HashMap<String, Instant> {
    futures::stream::iter(pods)
        .map(|p| async move {
            let name = p.metadata.name.clone().unwrap_or_default();
            loop {
                match api.create(&PostParams::default(), &p).await {
                    Ok(_) => return (name, Instant::now()),
                    Err(e) => {
                        eprintln!("create {name}: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
        .buffer_unordered(64)
        .collect()
        .await
}

/// Watches the run's pods (label `bench-run`, whatever their namespace) and records when each was
/// first seen bound.
fn track_bindings(
    admin: &Client,
    run: &str,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let bound = Arc::new(Mutex::new(HashMap::new()));
    let b = bound.clone();
    let api: Api<Pod> = Api::all(admin.clone());
    let config = watcher::Config::default().labels(&format!("bench-run={run}"));
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Ok(Some(ev)) = stream.try_next().await {
            if let Event::Apply(p) | Event::InitApply(p) = ev
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            {
                let name = p.metadata.name.unwrap_or_default();
                b.lock().entry(name).or_insert_with(Instant::now);
            }
        }
    });
    (bound, task)
}

async fn wait_all_bound(
    bound: &Mutex<HashMap<String, Instant>>,
    names: &[String],
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let done = {
            let b = bound.lock();
            names.iter().all(|n| b.contains_key(n))
        };
        if done {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Figures {
    /// Each figure's median over `rounds` (taken separately per figure).
    fn median(rounds: &[Figures]) -> Figures {
        let med = |f: fn(&Figures) -> f64| {
            let mut v: Vec<f64> = rounds.iter().map(f).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        Figures {
            pods_per_second: med(|f| f.pods_per_second),
            p50_ms: med(|f| f.p50_ms),
            p99_ms: med(|f| f.p99_ms),
            cpu_seconds: med(|f| f.cpu_seconds),
            peak_rss_mb: med(|f| f.peak_rss_mb),
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn run_one(
    cp: &ControlPlane,
    admin: &Client,
    w: &Workload,
    contender: Contender,
    round: usize,
) -> Option<Figures> {
    let ns = cp
        // Names and the `bench-run` label value are limited to 63 characters.
        .namespace(
            admin,
            &format!("bench-{:.16}-{round}", w.name.to_lowercase()),
        )
        .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let log = cp
        .dir
        .join(format!("bench-{}-{}.log", w.name, contender.name()));
    let process = start(cp, contender, &log);
    let pid = process.child.id();
    let (bound, watch_task) = track_bindings(admin, &ns);

    // Warm-up: the contender is ready once it binds a pod.
    let warmup = vec![pod("SchedulingBasic", &ns, "warmup", false)];
    create_pods(&pods, warmup).await;
    if !wait_all_bound(&bound, &["warmup".to_string()], Duration::from_secs(120)).await {
        eprintln!(
            "{} did not become ready; log: {}",
            contender.name(),
            log.display()
        );
        watch_task.abort();
        return None;
    }
    // Init pods, in the run's namespace or spread over labelled namespaces of their own.
    let mut namespaces = vec![ns.clone()];
    let extra = workloads::init_namespaces(w.name, w.nodes);
    let init_namespaces = if extra > 0 {
        let labelled = workloads::labelled_namespaces(admin, &ns, extra).await;
        namespaces.extend(labelled.iter().cloned());
        labelled
    } else {
        vec![ns.clone()]
    };
    let init: Vec<Pod> = (0..w.init_pods)
        .map(|i| pod(w.name, &ns, &format!("init-{i}"), false))
        .collect();
    let init_names = names_of(&init);
    before_creating(admin, w, &ns, &init_names).await;
    for (k, target) in init_namespaces.iter().enumerate() {
        let share: Vec<Pod> = init
            .iter()
            .skip(k)
            .step_by(init_namespaces.len())
            .cloned()
            .map(|mut p| {
                p.metadata.namespace = Some(target.clone());
                p
            })
            .collect();
        create_pods(&Api::namespaced(admin.clone(), target), share).await;
    }
    if !wait_all_bound(&bound, &init_names, Duration::from_secs(600)).await {
        eprintln!(
            "{}: init pods not all bound; log: {}",
            contender.name(),
            log.display()
        );
    }
    if w.name == workloads::GATED_PODS {
        create_pods(&pods, workloads::gated_pods(&ns, w.measure_pods)).await;
    }

    let (cpu_before, _) = proc_usage(pid);
    let measured: Vec<Pod> = (0..w.measure_pods)
        .map(|i| pod(w.name, &ns, &format!("measure-{i}"), true))
        .collect();
    let names = names_of(&measured);
    before_creating(admin, w, &ns, &names).await;
    let churn = workloads::churn(w.name).map(|c| {
        tokio::spawn(workloads::run_churn(
            admin.clone(),
            ns.clone(),
            c,
            init_names.clone(),
        ))
    });
    let first_created = Instant::now();
    let created = create_pods(&pods, measured).await;
    let all = wait_all_bound(&bound, &names, Duration::from_secs(900)).await;
    let (cpu_after, peak_rss) = proc_usage(pid);
    if let Some(task) = churn {
        task.abort();
    }
    drop(process);
    watch_task.abort();
    let bound = bound.lock().clone();
    let mut latencies: Vec<f64> = names
        .iter()
        .filter_map(|n| Some(bound.get(n)?.duration_since(*created.get(n)?).as_secs_f64() * 1000.0))
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let last_bound = names
        .iter()
        .filter_map(|n| bound.get(n))
        .max()
        .copied()
        .unwrap_or(first_created);
    let elapsed = last_bound
        .duration_since(first_created)
        .as_secs_f64()
        .max(1e-6);
    if !all {
        eprintln!(
            "{}: only {}/{} measured pods bound; log: {}",
            contender.name(),
            latencies.len(),
            names.len(),
            log.display()
        );
    }
    // Free the nodes for the next contender.
    for namespace in &namespaces {
        let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
        let _ = pods
            .delete_collection(
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
                &ListParams::default(),
            )
            .await;
        wait_namespace_empty(&pods).await;
    }
    workloads::clean_churn(admin, &ns).await;
    if w.name == DRA_WORKLOAD {
        free_claims(admin, &ns).await;
    }
    if workloads::uses_csi_volumes(w.name) {
        workloads::delete_csi_volumes(admin, &ns).await;
    }
    Some(Figures {
        pods_per_second: latencies.len() as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        cpu_seconds: cpu_after - cpu_before,
        peak_rss_mb: peak_rss,
    })
}

fn names_of(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// What must exist before the pods `names` are created: their DRA claims or CSI volumes.
async fn before_creating(admin: &Client, w: &Workload, ns: &str, names: &[String]) {
    if w.name == DRA_WORKLOAD {
        dra_claims(admin, ns, names).await;
    }
    if workloads::uses_csi_volumes(w.name) {
        workloads::csi_volumes(admin, ns, names).await;
    }
}

async fn wait_namespace_empty(pods: &Api<Pod>) {
    for _ in 0..600 {
        match pods.list(&ListParams::default().limit(1)).await {
            Ok(list) if list.items.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Replaces the bench nodes with the workload's: `bench-node-<i>` in three zones, the named node
/// when the workload targets it, and CSINodes when its pods have CSI volumes.
async fn create_nodes(admin: &Client, w: &Workload) {
    let api: Api<Node> = Api::all(admin.clone());
    let _ = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("ksched.io/bench=true"),
        )
        .await;
    workloads::delete_csi_nodes(admin).await;
    let nodes = (0..w.nodes)
        .map(|i| workloads::node(&format!("bench-node-{i}"), i % 3 + 1, "110"))
        .chain(workloads::extra_nodes(w.name));
    workloads::for_each_concurrently(nodes, |n| {
        let api = api.clone();
        async move {
            let _ = api.create(&PostParams::default(), &n).await;
        }
    })
    .await;
    workloads::csi_nodes(admin, w.name, w.nodes).await;
}

/// The claims of `pods` (`<pod>-gpu`), as kube-controller-manager's resourceclaim controller would
/// create them from the pods' template (the bench runs no controller manager): one device of the
/// bench class each. Not measured.
async fn dra_claims(admin: &Client, ns: &str, pods: &[String]) {
    let api: Api<ResourceClaim> = Api::namespaced(admin.clone(), ns);
    futures::stream::iter(pods)
        .map(|pod| {
            let api = api.clone();
            async move {
                let claim: ResourceClaim = serde_json::from_value(json!({
                    "metadata": {"name": format!("{pod}-gpu")},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_CLASS}}]}}
                }))
                .expect("claim template");
                let _ = api.create(&PostParams::default(), &claim).await;
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

/// Deletes the run's claims; nothing else removes the scheduler's finalizer here, so the bench
/// does, and the devices are free for the next contender.
async fn free_claims(admin: &Client, ns: &str) {
    workloads::delete_all(Api::<ResourceClaim>::namespaced(admin.clone(), ns), "").await;
}

/// The bench DeviceClass and one ResourceSlice per bench node with `DEVICES_PER_NODE` devices.
async fn dra_devices(admin: &Client, nodes: usize) {
    let classes: Api<DeviceClass> = Api::all(admin.clone());
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": DRA_CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}}]}
    }))
    .expect("class template");
    let _ = classes.create(&PostParams::default(), &class).await;
    let slices: Api<ResourceSlice> = Api::all(admin.clone());
    let _ = slices
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("ksched.io/bench=true"),
        )
        .await;
    futures::stream::iter(0..nodes)
        .map(|i| {
            let slices = slices.clone();
            async move {
                let node = format!("bench-node-{i}");
                let devices: Vec<Value> = (0..DEVICES_PER_NODE)
                    .map(|d| json!({"name": format!("gpu-{d}"), "attributes": {"model": {"string": "bench"}}}))
                    .collect();
                let slice: ResourceSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{node}-{DRA_DRIVER}"), "labels": {"ksched.io/bench": "true"}},
                    "spec": {"driver": DRA_DRIVER, "nodeName": node, "devices": devices,
                             "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
                }))
                .expect("slice template");
                let _ = slices.create(&PostParams::default(), &slice).await;
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

fn priority_classes(cp: &ControlPlane) {
    let doc = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: bench-low}\nvalue: 1\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: bench-high}\nvalue: 10\n";
    let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], doc);
    assert!(ok, "priority classes: {err}");
}

/// The ceiling: binds every pending pod of the bench scheduler name to nodes round robin, with no
/// scheduling logic.
async fn null_binder(kubeconfig: &Path) {
    let client = client(kubeconfig).await;
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("ksched.io/bench=true"))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    if nodes.is_empty() {
        eprintln!("null binder: no nodes");
        return;
    }
    let api: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!(
        "spec.schedulerName={SCHEDULER_NAME},spec.nodeName="
    ));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Pod>();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Ok(Some(ev)) = stream.try_next().await {
            if let Event::Apply(p) | Event::InitApply(p) = ev {
                let _ = tx.send(p);
            }
        }
    });
    let next = std::sync::atomic::AtomicUsize::new(0);
    tokio_stream_from(rx)
        .for_each_concurrent(64, |p| {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let node = nodes[i % nodes.len()].clone();
            let client = client.clone();
            async move {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let name = p.metadata.name.clone().unwrap_or_default();
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        uid: p.metadata.uid.clone(),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        kind: Some("Node".into()),
                        name: Some(node),
                        ..Default::default()
                    },
                };
                let pods: Api<Pod> = Api::namespaced(client, &ns);
                let _ = pods
                    .create_subresource::<Binding, ApiStatus>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await;
            }
        })
        .await;
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Ctrl-C or SIGTERM ends the bench through `exit`, whose exit hook stops the control plane and
/// removes its directory (a signal's default action would skip it and leave ~100 MB in /tmp).
fn exit_on_signal(runtime: &tokio::runtime::Runtime) {
    use tokio::signal::unix::{SignalKind, signal};
    runtime.spawn(async {
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("interrupted: stopping the control plane");
        std::process::exit(130);
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if args.iter().any(|a| a == "--null-binder") {
        let kubeconfig = PathBuf::from(arg(&args, "--kubeconfig").expect("--kubeconfig"));
        runtime.block_on(null_binder(&kubeconfig));
        return;
    }
    let preset = arg(&args, "--preset")
        .or_else(|| std::env::var("BENCH_PRESET").ok())
        .unwrap_or_else(|| "default".into());
    let only: Option<Vec<String>> = arg(&args, "--workloads")
        .or_else(|| std::env::var("BENCH_WORKLOADS").ok())
        .map(|s| s.split(',').map(str::to_string).collect());
    let contenders: Vec<Contender> = arg(&args, "--contenders")
        .or_else(|| std::env::var("BENCH_CONTENDERS").ok())
        .map(|s| {
            s.split(',')
                .filter_map(|c| match c {
                    "ksched" => Some(Contender::Ksched),
                    "upstream" => Some(Contender::Upstream),
                    "ceiling" => Some(Contender::Ceiling),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_else(|| vec![Contender::Ksched, Contender::Upstream, Contender::Ceiling]);
    let rounds: usize = arg(&args, "--rounds")
        .or_else(|| std::env::var("BENCH_ROUNDS").ok())
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);

    let cp = control_plane(Components::API_ONLY);
    exit_on_signal(&runtime);
    priority_classes(cp);
    let mut report = format!(
        "Medians of {rounds} rounds (preset {preset}).\n\n| workload | nodes | pods | contender | pods/s | p50 ms | p99 ms | CPU s | peak RSS MB |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut every_round = String::from(
        "| workload | round | contender | pods/s | p50 ms | p99 ms | CPU s | peak RSS MB |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut lines = Vec::new();
    runtime.block_on(async {
        let admin = client(&cp.kubeconfig).await;
        for (index, w) in workloads(&preset).iter().enumerate() {
            if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == w.name)) {
                continue;
            }
            create_nodes(&admin, w).await;
            if w.name == DRA_WORKLOAD {
                dra_devices(&admin, w.nodes).await;
            }
            let mut runs: HashMap<&str, Vec<Figures>> = HashMap::new();
            for round in 0..rounds {
                // Each round starts with the next contender: the first run after the nodes are created
                // meets a colder API server and etcd.
                let mut order: Vec<(usize, &Contender)> = contenders.iter().enumerate().collect();
                order.rotate_left(round % contenders.len().max(1));
                for (i, c) in order {
                    eprintln!(
                        "== {} / {} round {}/{rounds} ({} nodes, {} measured pods)",
                        w.name, c.name(), round + 1, w.nodes, w.measure_pods
                    );
                    let id = (index * rounds + round) * 10 + i;
                    if let Some(f) = run_one(cp, &admin, w, *c, id).await {
                        let _ = writeln!(
                            every_round,
                            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} |",
                            w.name, round + 1, c.name(), f.pods_per_second, f.p50_ms, f.p99_ms, f.cpu_seconds, f.peak_rss_mb
                        );
                        runs.entry(c.name()).or_default().push(f);
                    }
                }
            }
            let figures: HashMap<&str, Figures> =
                runs.iter().map(|(c, r)| (*c, Figures::median(r))).collect();
            for c in &contenders {
                if let Some(f) = figures.get(c.name()) {
                    let _ = writeln!(
                        report,
                        "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} |",
                        w.name, w.nodes, w.measure_pods, c.name(), f.pods_per_second, f.p50_ms, f.p99_ms, f.cpu_seconds, f.peak_rss_mb
                    );
                }
            }
            let get = |c: &str| figures.get(c).cloned().unwrap_or_default();
            let (k, u, c) = (get("ksched"), get("upstream"), get("ceiling"));
            let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
            let line = format!(
                "BENCH workload={} nodes={} pods={} ksched_pps={:.1} upstream_pps={:.1} ceiling_pps={:.1} ratio_upstream={:.2} ratio_ceiling={:.2} ksched_rss_mb={:.1} upstream_rss_mb={:.1} ksched_cpu_s={:.2} upstream_cpu_s={:.2}",
                w.name, w.nodes, w.measure_pods, k.pods_per_second, u.pods_per_second, c.pods_per_second,
                ratio(k.pods_per_second, u.pods_per_second), ratio(k.pods_per_second, c.pods_per_second),
                k.peak_rss_mb, u.peak_rss_mb, k.cpu_seconds, u.cpu_seconds
            );
            println!("{line}");
            lines.push(line);
        }
    });
    report.push('\n');
    for l in &lines {
        report.push_str(&format!("    {l}\n"));
    }
    report.push_str("\nEvery round:\n\n");
    report.push_str(&every_round);
    let dir = support::repo_root().join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("report.md"), &report);
    println!("\n{report}");
}
