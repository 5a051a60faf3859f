//! Bytes per node and per pod of ksched and upstream: a contender started on a cluster of one
//! node is sampled idle, again once it has `nodes` more nodes in its cache, and again once it has
//! bound `pods` pods; the differences divided by the counts. Each sample is taken after the
//! contender idled (`IDLE`); upstream's Go heap after a forced garbage collection
//! (`/debug/pprof/heap?gc=1`), so it counts live objects only.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use serde_json::json;

use super::contenders::{self, Contender, Running};
use super::setup::{self, create_all};
use super::support::{self, ControlPlane};
use super::workloads::{self, Kind, Preset, Role, Workload};
use super::{Tracker, create_pods, wait_bound};

/// How long a contender idles before a steady sample.
pub const IDLE: Duration = Duration::from_secs(2);

/// (nodes, pods) of the footprint per preset.
pub fn sizes(preset: Preset) -> (usize, usize) {
    match preset {
        Preset::Small => (100, 400),
        Preset::Default => (1000, 2000),
        Preset::Large => (5000, 10000),
        Preset::XLarge => (15000, 30000),
    }
}

/// One round's footprint of a contender.
#[derive(Clone, Copy, Debug, Default)]
pub struct Footprint {
    /// Anonymous RSS (RssAnon) per node and per pod, in bytes.
    pub anon_per_node: f64,
    pub anon_per_pod: f64,
    /// RSS (VmRSS) per node and per pod.
    pub rss_per_node: f64,
    pub rss_per_pod: f64,
    /// Upstream: live Go heap (after a GC) per node and per pod.
    pub heap_per_node: Option<f64>,
    pub heap_per_pod: Option<f64>,
    /// The idle RSS on one node, in MB.
    pub base_rss_mb: f64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    rss: f64,
    anon: f64,
    heap: Option<f64>,
}

async fn sample(cp: &ControlPlane, running: &Running, contender: Contender) -> Sample {
    tokio::time::sleep(IDLE).await;
    let heap = if contender == Contender::Upstream {
        let ca = cp.dir.join("ca.crt");
        let _ = support::https::get(&ca, running.port, "/debug/pprof/heap?gc=1").await;
        contenders::metrics(cp, running)
            .await
            .ok()
            .and_then(|m| contenders::go_heap_mb(&m))
    } else {
        None
    };
    let usage = contenders::usage(running.pid());
    Sample {
        rss: usage.rss_mb,
        anon: usage.anon_mb,
        heap,
    }
}

/// The footprint workload: only its node `bench-node-0` exists when a round starts.
pub fn workload(preset: Preset) -> Workload {
    Workload {
        kind: Kind::SchedulingBasic,
        nodes: 1,
        init_pods: 0,
        measure_pods: sizes(preset).1,
    }
}

/// Measures one round of `contender`'s footprint in namespace `ns`, tracked by `tracker`.
pub async fn measure(
    cp: &ControlPlane,
    admin: &Client,
    running: &Running,
    contender: Contender,
    preset: Preset,
    ns: &str,
    tracker: &Tracker,
) -> Result<Footprint, String> {
    let (nodes, pods) = sizes(preset);
    let empty = sample(cp, running, contender).await;

    // Nodes, then a last node whose pod's binding says the contender has seen them all (the
    // watch delivers them in order).
    let api: Api<Node> = Api::all(admin.clone());
    create_all(
        &api,
        (1..=nodes).map(|i| workloads::node(Kind::SchedulingBasic, &setup::node_name(i), i)),
    )
    .await;
    let last = setup::node_name(nodes + 1);
    create_all(
        &api,
        [workloads::node(Kind::SchedulingBasic, &last, nodes + 1)],
    )
    .await;
    let mut probe = workloads::pod(Kind::SchedulingBasic, Role::Warmup, ns, ns, 1);
    probe["metadata"]["name"] = json!("footprint-probe");
    probe["spec"]["nodeName"] = serde_json::Value::Null;
    probe["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [last]}]}]}}});
    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    create_pods(&pods_api, vec![setup::object(probe)]).await;
    wait_bound(tracker, &["footprint-probe".to_string()]).await?;
    let with_nodes = sample(cp, running, contender).await;

    let measured: Vec<Pod> = (0..pods)
        .map(|i| {
            setup::object(workloads::pod(
                Kind::SchedulingBasic,
                Role::Measured,
                ns,
                ns,
                i,
            ))
        })
        .collect();
    let names: Vec<String> = (0..pods)
        .map(|i| workloads::pod_name(Role::Measured, i))
        .collect();
    create_pods(&pods_api, measured).await;
    wait_bound(tracker, &names).await?;
    let with_pods = sample(cp, running, contender).await;

    let mb = 1_048_576.0;
    let per = |a: f64, b: f64, n: usize| (b - a) * mb / n as f64;
    Ok(Footprint {
        anon_per_node: per(empty.anon, with_nodes.anon, nodes),
        anon_per_pod: per(with_nodes.anon, with_pods.anon, pods),
        rss_per_node: per(empty.rss, with_nodes.rss, nodes),
        rss_per_pod: per(with_nodes.rss, with_pods.rss, pods),
        heap_per_node: empty
            .heap
            .zip(with_nodes.heap)
            .map(|(a, b)| per(a, b, nodes)),
        heap_per_pod: with_nodes
            .heap
            .zip(with_pods.heap)
            .map(|(a, b)| per(a, b, pods)),
        base_rss_mb: empty.rss,
    })
}
