//! The three contenders (ksched, upstream kube-scheduler, the null binder), each a process of its
//! own with the same client QPS/burst; their CPU time and memory from /proc, their metrics over
//! HTTPS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status as ApiStatus};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;

use super::support::{self, ControlPlane};
use super::workloads::{Kind, NODE_LABEL, SCHEDULER_NAME};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// ksched on its default allocator.
    Ksched,
    /// The same binary with `KSCHED_ALLOCATOR=jemalloc`.
    KschedJemalloc,
    /// The same binary with `KSCHED_ALLOCATOR=glibc`.
    KschedGlibc,
    /// Another ksched build, at `KSCHED_BASE_BIN` (e.g. of the commit before a change): before and
    /// after in one run.
    KschedBase,
    Upstream,
    /// The null binder: binds every pending pod round robin, no scheduling logic: what the API
    /// server allows.
    Ceiling,
}

impl Contender {
    /// The contenders of a run that names none.
    pub const ALL: [Contender; 3] = [Contender::Ksched, Contender::Upstream, Contender::Ceiling];
    /// Every contender `--contenders` can name.
    const NAMED: [Contender; 6] = [
        Contender::Ksched,
        Contender::KschedJemalloc,
        Contender::KschedGlibc,
        Contender::KschedBase,
        Contender::Upstream,
        Contender::Ceiling,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Contender::Ksched => "ksched",
            Contender::KschedJemalloc => "ksched-jemalloc",
            Contender::KschedGlibc => "ksched-glibc",
            Contender::KschedBase => "ksched-base",
            Contender::Upstream => "upstream",
            Contender::Ceiling => "ceiling",
        }
    }

    pub fn parse(s: &str) -> Result<Contender, String> {
        Contender::NAMED
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown contender {s:?}: use {}",
                    Contender::NAMED.map(Contender::name).join(", ")
                )
            })
    }

    /// Whether it is a ksched build (any allocator).
    pub fn is_ksched(self) -> bool {
        matches!(
            self,
            Contender::Ksched
                | Contender::KschedJemalloc
                | Contender::KschedGlibc
                | Contender::KschedBase
        )
    }

    /// The `KSCHED_ALLOCATOR` it runs with; `None` for ksched's default or another scheduler.
    fn allocator(self) -> Option<&'static str> {
        match self {
            Contender::KschedJemalloc => Some("jemalloc"),
            Contender::KschedGlibc => Some("glibc"),
            _ => None,
        }
    }

    /// Whether it is a scheduler (serves /metrics, honours constraints).
    pub fn schedules(self) -> bool {
        self != Contender::Ceiling
    }
}

/// The bench's client (the admin's, or the null binder's): a long read timeout, since removing a
/// run's pods can take minutes.
pub async fn client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    config.read_timeout = Some(std::time::Duration::from_secs(300));
    kube::Client::try_from(config).expect("client")
}

/// A running contender; killed when dropped.
pub struct Running {
    child: Child,
    /// The HTTPS port of /metrics (schedulers only).
    pub port: u16,
    pub log: PathBuf,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The contender's KubeSchedulerConfiguration: one profile, the bench's scheduler name, QPS
/// 5000/burst 5000, no leader election. The gang workloads run, from 1.37, both schedulers' own
/// workload-aware scheduling through the same feature gate (see `start`); at 1.36, where ksched
/// has no GangScheduling, ksched gets seed 002's Coscheduling plugins (the same extension points
/// and args, as v1).
fn config(cp: &ControlPlane, contender: Contender, kind: Kind) -> String {
    let mut config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {SCHEDULER_NAME}\n",
        cp.kubeconfig.display()
    );
    if contender.is_ksched() && kind.gang_size().is_some() && !gang_api().ksched_has_it {
        config.push_str(
            "  plugins:
    queueSort:
      enabled: [{name: Coscheduling}]
      disabled: [{name: \"*\"}]
    preFilter: {enabled: [{name: Coscheduling}]}
    postFilter: {enabled: [{name: Coscheduling}]}
    permit: {enabled: [{name: Coscheduling}]}
    reserve: {enabled: [{name: Coscheduling}]}
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 10, deniedPGExpirationTimeSeconds: 3}
",
        );
    }
    config
}

/// Upstream's own gang scheduling at the testenv's minor (`K8S_VERSION`): the PodGroup API the
/// API server serves, and the gates kube-scheduler needs for it.
pub struct GangApi {
    pub version: &'static str,
    /// kube-apiserver's flags: the API and its gate (and more delete workers: removing a run's
    /// pods between contenders with one takes seconds).
    pub apiserver_args: &'static [&'static str],
    pub scheduler_gates: &'static str,
    /// Whether ksched schedules these gangs itself (GangScheduling with GenericWorkload, from
    /// 1.37); else it runs Coscheduling over scheduling.x-k8s.io PodGroups.
    pub ksched_has_it: bool,
    /// The gate of topology-aware placement both schedulers get for the topology-aware gangs
    /// (the API server has it too, or it drops `schedulingConstraints`); none: that minor has
    /// no such workloads.
    pub topology_gate: Option<&'static str>,
}

impl GangApi {
    /// The `--feature-gates` of a scheduler running workload `kind`, if any.
    pub fn scheduler_gates_for(&self, kind: Kind) -> Option<String> {
        kind.gang_size()?;
        match (kind.topology_key(), self.topology_gate) {
            (Some(_), Some(gate)) => Some(format!("{},{gate}=true", self.scheduler_gates)),
            _ => Some(self.scheduler_gates.to_string()),
        }
    }
}

/// 1.37: `scheduling.k8s.io/v1beta1`, gate GenericWorkload (beta); 1.36: `v1alpha2`, gates
/// GenericWorkload and GangScheduling (alpha).
pub fn gang_api() -> GangApi {
    let minor_36 = std::env::var("K8S_VERSION").is_ok_and(|v| v.starts_with("1.36."));
    if minor_36 {
        GangApi {
            version: "v1alpha2",
            apiserver_args: &[
                "--feature-gates=GenericWorkload=true",
                "--runtime-config=scheduling.k8s.io/v1alpha2=true",
                "--delete-collection-workers=16",
            ],
            scheduler_gates: "GenericWorkload=true,GangScheduling=true",
            ksched_has_it: false,
            topology_gate: None,
        }
    } else {
        GangApi {
            version: "v1beta1",
            apiserver_args: &[
                "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
                "--runtime-config=scheduling.k8s.io/v1beta1=true",
                "--delete-collection-workers=16",
            ],
            scheduler_gates: "GenericWorkload=true",
            ksched_has_it: true,
            topology_gate: Some("TopologyAwareWorkloadScheduling"),
        }
    }
}

/// Starts `contender` for a run of workload `kind`, its output to `log`. Must be called on the
/// main thread: the contender is killed when the thread that started it exits
/// (PR_SET_PDEATHSIG), and the main thread lives as long as the bench.
pub fn start(cp: &ControlPlane, contender: Contender, kind: Kind, log: &Path) -> Running {
    let out = std::fs::File::create(log).expect("contender log");
    let err = out.try_clone().expect("contender log");
    let port = support::free_port();
    let kubeconfig = cp.kubeconfig.display().to_string();
    let config_path = cp.dir.join(format!("bench-{}.yaml", contender.name()));
    std::fs::write(&config_path, config(cp, contender, kind)).expect("write bench config");
    // Both schedulers serve with the API server's certificate, so the bench reads their
    // /metrics verifying it against the test CA.
    let tls = [
        format!("--tls-cert-file={}", cp.dir.join("apiserver.crt").display()),
        format!(
            "--tls-private-key-file={}",
            cp.dir.join("apiserver.key").display()
        ),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
    ];
    // Both authenticate and authorize as deployed, with /metrics open to the bench (and
    // upstream's /debug/pprof/heap?gc=1, which runs a garbage collection before the footprint's
    // samples).
    let auth = [
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/heap"
            .into(),
        "--v=1".into(),
    ];
    let mut cmd = match contender {
        Contender::Ksched
        | Contender::KschedJemalloc
        | Contender::KschedGlibc
        | Contender::KschedBase => {
            let bin = if contender == Contender::KschedBase {
                std::env::var_os("KSCHED_BASE_BIN")
                    .map(PathBuf::from)
                    .expect("ksched-base runs the ksched binary KSCHED_BASE_BIN names: set it")
            } else {
                support::scheduler::ksched_bin()
            };
            let mut c = Command::new(bin);
            c.args(["scheduler", "--config", support::path_str(&config_path)])
                .args(["--kubeconfig", &kubeconfig])
                .args(&auth)
                .args(&tls);
            if let Some(gates) = gang_api().scheduler_gates_for(kind)
                && gang_api().ksched_has_it
            {
                c.arg(format!("--feature-gates={gates}"));
            }
            // One binary, both allocators (src/allocator.rs).
            match contender.allocator() {
                Some(allocator) => c.env("KSCHED_ALLOCATOR", allocator),
                None => c.env_remove("KSCHED_ALLOCATOR"),
            };
            c
        }
        Contender::Upstream => {
            let mut c = Command::new(cp.bin_dir.join("kube-scheduler"));
            c.arg(format!("--config={}", config_path.display()))
                .args(&auth)
                .args(&tls);
            if let Some(gates) = gang_api().scheduler_gates_for(kind) {
                c.arg(format!("--feature-gates={gates}"));
            }
            c
        }
        Contender::Ceiling => {
            let mut c = Command::new(std::env::current_exe().expect("bench exe"));
            c.args(["--null-binder", "--kubeconfig", &kubeconfig]);
            c
        }
    };
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    support::process::killed_with_parent(&mut cmd);
    Running {
        child: cmd.spawn().expect("start contender"),
        port,
        log: log.to_path_buf(),
    }
}

/// CPU seconds and memory of a process, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// utime + stime.
    pub cpu_seconds: f64,
    /// VmHWM: the largest resident set so far.
    pub peak_rss_mb: f64,
    /// VmRSS.
    pub rss_mb: f64,
    /// RssAnon: resident private anonymous memory (heap, stacks; not the binary's code).
    pub anon_mb: f64,
}

pub fn usage(pid: u32) -> Usage {
    let ticks = 100.0; // CLK_TCK on Linux
    let cpu_seconds = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let utime: f64 = after.get(11)?.parse().ok()?;
            let stime: f64 = after.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mb = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    Usage {
        cpu_seconds,
        peak_rss_mb: mb("VmHWM:"),
        rss_mb: mb("VmRSS:"),
        anon_mb: mb("RssAnon:"),
    }
}

/// The scheduler's /metrics text.
pub async fn metrics(cp: &ControlPlane, running: &Running) -> Result<String, String> {
    match support::https::get(&cp.dir.join("ca.crt"), running.port, "/metrics").await {
        Ok((200, body)) => Ok(body),
        Ok((status, body)) => Err(format!("/metrics: HTTP {status}: {body:.200}")),
        Err(e) => Err(format!("/metrics: {e}")),
    }
}

/// The sum of the samples of metric `name` whose labels include `labels`, from Prometheus text.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => continue,
        };
        let (metric, series_labels) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name
            || !labels
                .iter()
                .all(|(k, v)| series_labels.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Pods this scheduler scheduled (`scheduler_schedule_attempts_total{result="scheduled"}`, the
/// same metric in both schedulers).
pub fn scheduled(text: &str) -> f64 {
    sample(
        text,
        "scheduler_schedule_attempts_total",
        &[("result", "scheduled"), ("profile", SCHEDULER_NAME)],
    )
    .unwrap_or(0.0)
}

/// The API server's write requests so far (`apiserver_request_total` of every verb that
/// changes an object), from its /metrics; `None` when it could not be read.
pub async fn api_writes(admin: &kube::Client) -> Option<f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = admin.request_text(request).await.ok()?;
    let writes = [
        "POST",
        "PUT",
        "PATCH",
        "APPLY",
        "DELETE",
        "DELETECOLLECTION",
    ]
    .iter()
    .filter_map(|verb| sample(&text, "apiserver_request_total", &[("verb", verb)]))
    .sum();
    Some(writes)
}

/// Upstream's Go heap in use (`go_memstats_heap_inuse_bytes`), in MB.
pub fn go_heap_mb(text: &str) -> Option<f64> {
    sample(text, "go_memstats_heap_inuse_bytes", &[]).map(|b| b / 1_048_576.0)
}

/// The ceiling: binds every pending pod of the bench scheduler name to the bench nodes round
/// robin, 64 bindings in flight. Runs as `--null-binder` in a process of its own.
pub async fn null_binder(kubeconfig: &Path) {
    let client = client(kubeconfig).await;
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{NODE_LABEL}=true")))
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
    let next = std::sync::atomic::AtomicUsize::new(0);
    watcher::watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|p| async move { p.ok() })
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
