//! `ksched simulate` at scale: 5000 nodes and 20000 pending pods (plus one running pod per node)
//! under the default profile, timed once end to end: the snapshot read from its YAML (as
//! `--snapshot` reads it), then the simulation. `cargo bench --bench simulate`
//! (`SIM_NODES`/`SIM_PODS` change the size).
//!
//! The pods mix what the default plugins decide on: plain requests, a zone nodeSelector, a
//! zone spread constraint, a preferred anti-affinity, and a few that fit nowhere (their
//! PostFilter looks for preemption victims on every node).

use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod};
use ksched::framework::registry::Registry;
use ksched::simulate::engine::{Request, offline_registry, simulate};
use ksched::simulate::profile;
use ksched::simulate::snapshot::ClusterState;
use serde_json::{Value, json};

const ZONES: usize = 3;

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn node(i: usize) -> Node {
    let name = format!("node-{i:05}");
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % ZONES)}},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"}}
    }))
    .expect("node")
}

fn pod(name: &str, cpu: &str, labels: Value, extra: Value) -> Pod {
    let mut spec = json!({"schedulerName": "default-scheduler", "priority": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": labels},
        "spec": spec
    }))
    .expect("pod")
}

/// The `i`th pending pod: one in 20 spread over zones, one in 20 avoiding its app's pods, one
/// in 10 pinned to a zone, one in 200 too big for any node, the rest plain.
fn pending(i: usize) -> Pod {
    let name = format!("pending-{i:05}");
    let app = format!("app-{}", i % 50);
    let labels = json!({"app": app});
    match i % 200 {
        0 => pod(&name, "64", labels, json!({})),
        n if n % 20 == 1 => pod(
            &name,
            "250m",
            labels,
            json!({"topologySpreadConstraints": [{"maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}}}]}),
        ),
        n if n % 20 == 2 => pod(
            &name,
            "250m",
            labels,
            json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": app}}}}]}}}),
        ),
        n if n % 10 == 3 => pod(
            &name,
            "500m",
            labels,
            json!({"nodeSelector": {"topology.kubernetes.io/zone": format!("zone-{}", i % ZONES)}}),
        ),
        _ => pod(&name, "500m", labels, json!({})),
    }
}

fn main() {
    let nodes = size("SIM_NODES", 5000);
    let pods = size("SIM_PODS", 20000);
    let mut state = ClusterState {
        nodes: (0..nodes).map(node).collect(),
        ..ClusterState::default()
    };
    for i in 0..nodes {
        let name = format!("running-{i:05}");
        let on = json!({"nodeName": format!("node-{i:05}")});
        state
            .pods
            .push(pod(&name, "1", json!({"app": "running"}), on));
    }
    state.pods.extend((0..pods).map(pending));
    let yaml = serde_saphyr::to_string(&state.to_list().expect("snapshot list")).expect("YAML");

    let start = Instant::now();
    let state = ClusterState::parse("bench.yaml", &yaml).expect("snapshot parses");
    let parsed = start.elapsed();

    let registry = offline_registry(Registry::in_tree());
    let profile = profile::load(None, &[], &registry, &[]).expect("default profile");
    let start = Instant::now();
    let report = simulate(
        state,
        &profile,
        &registry,
        &Request::Pending { all: false },
        &mut |_, _| {},
    )
    .expect("simulate");
    let simulated = start.elapsed();
    let s = &report.summary;
    assert_eq!(s.pods, pods, "every pending pod is in the report");
    assert_eq!(
        s.unschedulable,
        pods.div_ceil(200),
        "only the too-big pods stay pending"
    );
    println!(
        "BENCH simulate nodes={nodes} pods={pods} snapshot_mb={:.1} parse_s={:.2} simulate_s={:.2} pods_per_s={:.0} scheduled={} unschedulable={}",
        yaml.len() as f64 / 1e6,
        parsed.as_secs_f64(),
        simulated.as_secs_f64(),
        pods as f64 / simulated.as_secs_f64(),
        s.scheduled,
        s.unschedulable,
    );
}
