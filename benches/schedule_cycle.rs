//! One scheduling cycle of the default profile over an in-memory snapshot of 5000 nodes (each with a
//! few pods), for regressions: `cargo bench --bench schedule_cycle`. The same cycle recording
//! kube-scheduler's metrics as `ksched scheduler` does (each plugin timed in one cycle of ten),
//! and with every cycle's plugins timed, shows what the metrics cost. These schedule the same pod
//! over the same snapshot each time, so they run with opportunistic batching off (it would reuse
//! every result): they measure a full cycle. One more cycle has every pod prefer its peers (the
//! large preset's SchedulingPreferredPodAffinity): InterPodAffinity's PreScore over 5000 pods.
//!
//! Then opportunistic batching: a stream of identical pods, each assumed on its node before the
//! next as the scheduler's cache does, with batching off and on (the ratio is what batching saves
//! per pod; both include the assume).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use ksched::framework::api_calls::RecordingApi;
use ksched::framework::interface::CycleState;
use ksched::framework::metrics::FrameworkMetrics;
use ksched::framework::registry::{Handle, Registry};
use ksched::framework::runtime::{Framework, ProfileSpec};
use ksched::framework::schedule::Algorithm;
use ksched::framework::types::{AssignedPod, NodeChange, NodeInfo, PodInfo, Snapshot};
use serde_json::json;

const NODES: usize = 5000;

fn node(i: usize) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i}"), "labels": {"kubernetes.io/hostname": format!("node-{i}"), "topology.kubernetes.io/zone": format!("zone{}", i % 3)}},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .expect("node"),
    )
}

fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}
        }))
        .expect("pod"),
    )
}

/// `pod` as scheduler_perf's SchedulingPreferredPodAffinity makes it: labelled `color: red` and
/// preferring nodes that run `color: red` pods.
fn red_pod(name: &str, node: Option<&str>) -> Arc<Pod> {
    let mut p = Pod::clone(&pod(name, node));
    p.metadata.labels = Some([("color".to_string(), "red".to_string())].into());
    p.spec.get_or_insert_with(Default::default).affinity = Some(
        serde_json::from_value(
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": "red"}},
             "topologyKey": "kubernetes.io/hostname", "namespaces": ["default"]}}]}}),
        )
        .expect("affinity"),
    );
    Arc::new(p)
}

fn bench_cycle(c: &mut Criterion) {
    let registry = Registry::in_tree();
    let yaml = b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n";
    let loaded = ksched::config::load(yaml, &registry).expect("default config");
    let spec = ksched::scheduler::run::profile_spec(&loaded.config.profiles[0], &registry);
    let spec: ProfileSpec = spec;
    let framework = |metrics: Option<Arc<FrameworkMetrics>>| {
        let mut handle = Handle::new(Arc::new(RecordingApi::default()));
        handle.metrics = metrics;
        Framework::new(&spec, &registry, handle).expect("framework")
    };
    let nodes: Vec<Arc<Node>> = (0..NODES).map(node).collect();
    let pods: Vec<Arc<Pod>> = (0..NODES * 4)
        .map(|i| {
            pod(
                &format!("existing-{i}"),
                Some(&format!("node-{}", i % NODES)),
            )
        })
        .collect();
    let snapshot = Snapshot::from_objects(&nodes, &pods);
    let incoming = PodInfo::new(pod("incoming", None));
    let mut algorithm = Algorithm::new(0).with_opportunistic_batching(false);
    let metrics = Arc::new(FrameworkMetrics::default());
    // (name, metrics recorded, which cycles time each plugin)
    let variants: [(&str, bool, Sampling); 3] = [
        ("schedule_pod default profile 5000 nodes", false, |_| false),
        (
            "schedule_pod default profile 5000 nodes, metrics (plugins timed 1 cycle in 10)",
            true,
            |m| m.sampler.sample(),
        ),
        (
            "schedule_pod default profile 5000 nodes, metrics (plugins timed every cycle)",
            true,
            |_| true,
        ),
    ];
    for (name, recorded, sampled) in variants {
        let fwk = framework(recorded.then(|| metrics.clone()));
        c.bench_function(name, |b| {
            b.iter(|| {
                let mut state = CycleState::new();
                state.set_record_plugin_metrics(sampled(&metrics));
                algorithm
                    .schedule_pod(&fwk, &mut state, &incoming, &snapshot)
                    .expect("fits")
            })
        });
    }

    // SchedulingPreferredPodAffinity at the large preset's size: every pod scores every other.
    let red_pods: Vec<Arc<Pod>> = (0..NODES)
        .map(|i| red_pod(&format!("red-{i}"), Some(&format!("node-{i}"))))
        .collect();
    let red_snapshot = Snapshot::from_objects(&nodes, &red_pods);
    let red_incoming = PodInfo::new(red_pod("red-incoming", None));
    let fwk = framework(None);
    c.bench_function(
        "schedule_pod default profile 5000 nodes, 5000 pods with preferred pod affinity",
        |b| {
            b.iter(|| {
                algorithm
                    .schedule_pod(&fwk, &mut CycleState::new(), &red_incoming, &red_snapshot)
                    .expect("fits")
            })
        },
    );

    let template = pod("stream", None);
    for (name, batching) in [
        (
            "schedule_pod default profile 5000 nodes, identical pods, batching off",
            false,
        ),
        (
            "schedule_pod default profile 5000 nodes, identical pods, batching on",
            true,
        ),
    ] {
        let fwk = framework(None);
        let mut algorithm = Algorithm::new(0).with_opportunistic_batching(batching);
        let mut snapshot = Snapshot::from_objects(&nodes, &pods);
        let mut n = 0u64;
        c.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                let mut p = Pod::clone(&template);
                p.metadata.name = Some(format!("stream-{n}"));
                p.metadata.uid = p.metadata.name.clone();
                let info = PodInfo::new(Arc::new(p.clone()));
                let host = algorithm
                    .schedule_pod(&fwk, &mut CycleState::new(), &info, &snapshot)
                    .expect("fits")
                    .suggested_host;
                assume(&mut snapshot, p, &host);
            })
        });
    }
}

/// `pod` bound to `node` in `snapshot`, as the scheduler's cache assumes it.
fn assume(snapshot: &mut Snapshot, mut pod: Pod, node: &str) {
    let mut info = NodeInfo::clone(snapshot.get(node).expect("chosen node"));
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    info.add_pod(Arc::new(AssignedPod::new(pod)));
    snapshot.update_from([NodeChange::Upsert(Arc::new(info))]);
}

/// Whether a cycle times each plugin.
type Sampling = fn(&FrameworkMetrics) -> bool;

criterion_group!(benches, bench_cycle);
criterion_main!(benches);
