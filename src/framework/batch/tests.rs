//! Batching decides exactly as scheduling every pod in full: streams of pods are scheduled over the
//! same cluster with batching on and off, each pod assumed on its node before the next, and every
//! pod must get the same node or the same failure message. Then what must not batch, why a batch
//! is dropped, and what signatures tell apart.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, GCEPersistentDiskVolumeSource, Node, Pod, PodResourceClaim, Service,
    ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::config::{ExtensionPoint, load};
use crate::framework::interface::CycleState;
use crate::framework::listers::{
    Listers, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, SERVICES, STORAGE_CLASSES,
};
use crate::framework::registry::Registry;
use crate::framework::runtime::{Framework, ProfileSpec};
use crate::framework::schedule::{Algorithm, PlacementNodes, ScheduleError};
use crate::framework::testing::{
    Fake, NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, handle, pod_term, profile, registry_with,
    spread_constraint, storage_class, term,
};
use crate::framework::types::{AssignedPod, NodeChange, NodeInfo};

const ZONE: &str = "topology.kubernetes.io/zone";

/// The default profile (upstream 1.36's 20 plugins).
const DEFAULT: &str = "- schedulerName: default-scheduler\n";
/// Only a fifth of the nodes searched: each pod looks at the next nodes in turn.
const SAMPLED: &str = "- schedulerName: default-scheduler\n  percentageOfNodesToScore: 20\n";
/// Bin packing, and a preferred affinity every pod gets.
const PACKING: &str = r#"- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 3}, {name: memory, weight: 1}]
  - name: NodeAffinity
    args:
      addedAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 40
          preference:
            matchExpressions: [{key: disk, operator: In, values: [ssd]}]
"#;

fn framework(profile_yaml: &str, listers: &Arc<Listers>) -> Framework {
    framework_with(profile_yaml, listers, None)
}

/// [`framework`], with the queue's nominator.
fn framework_with(
    profile_yaml: &str,
    listers: &Arc<Listers>,
    nominator: Option<Arc<dyn crate::framework::registry::PodNominator>>,
) -> Framework {
    let registry = Registry::in_tree();
    let doc = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n{profile_yaml}"
    );
    let loaded = match load(doc.as_bytes(), &registry) {
        Ok(l) => l,
        Err(e) => panic!("config: {e:?}"),
    };
    let (mut h, _) = handle();
    h.listers = listers.clone();
    h.nominator = nominator;
    Framework::new(&ProfileSpec::from(&loaded.config.profiles[0]), &registry, h).expect("framework")
}

/// A scheduler over an in-memory cluster: pods it places are assumed on their node.
struct Sim {
    fwk: Framework,
    alg: Algorithm,
    snapshot: Snapshot,
}

impl Sim {
    fn new(profile_yaml: &str, cluster: &Cluster, batching: bool) -> Sim {
        let nodes: Vec<Arc<Node>> = cluster.nodes.iter().cloned().map(Arc::new).collect();
        let pods: Vec<Arc<Pod>> = cluster.pods.iter().cloned().map(Arc::new).collect();
        Sim {
            fwk: framework(profile_yaml, &cluster.listers),
            alg: Algorithm::new(0).with_opportunistic_batching(batching),
            snapshot: Snapshot::from_objects(&nodes, &pods),
        }
    }

    /// The node the pod goes to, or why none.
    fn schedule(&mut self, pod: &Pod) -> String {
        let info = PodInfo::from_pod(pod.clone());
        let result =
            self.alg
                .schedule_pod(&self.fwk, &mut CycleState::new(), &info, &self.snapshot);
        match result {
            Ok(r) => {
                assume(&mut self.snapshot, pod, &r.suggested_host);
                r.suggested_host
            }
            Err(ScheduleError::Fit(fit)) => format!("unschedulable: {fit}"),
            Err(other) => format!("error: {other}"),
        }
    }

    fn batched(&self) -> u64 {
        self.fwk.batch().lock().batched_pods()
    }

    fn report(&self) -> BatchReport {
        self.fwk.batch().lock().take_report()
    }
}

/// `pod` bound to `node` in `snapshot`, as the cache assumes it.
fn assume(snapshot: &mut Snapshot, pod: &Pod, node: &str) {
    let mut info = NodeInfo::clone(snapshot.get(node).expect("chosen node"));
    let mut pod = pod.clone();
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    info.add_pod(Arc::new(AssignedPod::new(pod)));
    snapshot.update_from([NodeChange::Upsert(Arc::new(info))]);
}

/// Schedules `stream` with batching off and on; asserts the same outcome for every pod and the
/// same rotating start index after it; returns the outcomes and how many pods batched.
fn same_decisions(profile_yaml: &str, cluster: &Cluster, stream: &[Pod]) -> (Vec<String>, u64) {
    let mut off = Sim::new(profile_yaml, cluster, false);
    let mut on = Sim::new(profile_yaml, cluster, true);
    let mut outcomes = Vec::new();
    for (i, pod) in stream.iter().enumerate() {
        let want = off.schedule(pod);
        let got = on.schedule(pod);
        assert_eq!(
            got,
            want,
            "pod #{i} {} ({} nodes, {} batched so far)",
            pod.metadata.name.as_deref().unwrap_or(""),
            cluster.nodes.len(),
            on.batched()
        );
        outcomes.push(got);
    }
    assert_eq!(
        on.alg.next_start_node_index(),
        off.alg.next_start_node_index()
    );
    assert_eq!(off.batched(), 0);
    (outcomes, on.batched())
}

/// Nodes, pods already running, and the objects volume plugins read.
struct Cluster {
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    listers: Arc<Listers>,
}

impl Cluster {
    fn of(nodes: Vec<Node>) -> Cluster {
        Cluster {
            nodes,
            pods: Vec::new(),
            listers: Arc::new(Listers::default()),
        }
    }
}

/// `n` nodes of `cpu` CPUs and 16Gi, in three zones.
fn uniform_nodes(n: usize, cpu: &str) -> Vec<Node> {
    (0..n)
        .map(|i| {
            NodeBuilder::new(&format!("n{i:03}"))
                .label(ZONE, &format!("zone-{}", i % 3))
                .allocatable(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "110")])
                .build()
        })
        .collect()
}

/// A random cluster: sizes, zones, disks, taints, cordons, images, running pods with host ports;
/// a bound claim whose volume lives in zone-1, a bound ReadWriteOncePod claim, and one not bound
/// yet.
fn random_cluster(rng: &mut fastrand::Rng, n: usize) -> Cluster {
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let cpu = ["2", "4", "8"][rng.usize(..3)];
        let memory = ["4Gi", "8Gi", "16Gi"][rng.usize(..3)];
        let pods = ["4", "8", "110"][rng.usize(..3)];
        let mut b = NodeBuilder::new(&format!("n{i:03}"))
            .label(ZONE, &format!("zone-{}", rng.usize(..3)))
            .label("disk", if rng.bool() { "ssd" } else { "hdd" })
            .allocatable(&[("cpu", cpu), ("memory", memory), ("pods", pods)]);
        match rng.usize(..10) {
            0 => b = b.taint("dedicated", "batch", "NoSchedule"),
            1 => b = b.taint("spot", "", "PreferNoSchedule"),
            2 if n > 3 => b = b.unschedulable(),
            _ => {}
        }
        if rng.usize(..3) == 0 {
            b = b.image(&["registry.example/app:v1"], 300 * 1024 * 1024);
        }
        nodes.push(b.build());
    }
    let mut pods = Vec::new();
    for j in 0..n {
        let node = format!("n{:03}", rng.usize(..n));
        let mut p = PodBuilder::new(&format!("running-{j}"))
            .node(&node)
            .container(&[("cpu", "500m"), ("memory", "1Gi")]);
        if rng.usize(..6) == 0 {
            p = p.host_port(8080);
        }
        pods.push(p.build());
    }
    let listers = Listers::default();
    listers.store(&STORAGE_CLASSES).apply(storage_class(
        "standard",
        "example.com/disk",
        Some("WaitForFirstConsumer"),
    ));
    listers.store(&PERSISTENT_VOLUMES).apply(
        PvBuilder::new("pv-data")
            .class("standard")
            .capacity("10Gi")
            .access_modes(&["ReadWriteMany"])
            .claim_ref("default", "data", "data-uid")
            .node_affinity(term(&[(ZONE, "In", &["zone-1"])], &[]))
            .label(ZONE, "zone-1")
            .phase("Bound")
            .build(),
    );
    listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(
        PvcBuilder::new("data")
            .class("standard")
            .access_modes(&["ReadWriteMany"])
            .request("1Gi")
            .bound("pv-data")
            .build(),
    );
    apply_solo_claim(&listers);
    listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(
        PvcBuilder::new("scratch")
            .class("standard")
            .access_modes(&["ReadWriteOnce"])
            .request("1Gi")
            .build(),
    );
    Cluster {
        nodes,
        pods,
        listers: Arc::new(listers),
    }
}

/// The bound ReadWriteOncePod claim `solo`.
fn apply_solo_claim(listers: &Listers) {
    listers.store(&PERSISTENT_VOLUMES).apply(
        PvBuilder::new("pv-solo")
            .capacity("1Gi")
            .access_modes(&["ReadWriteOncePod"])
            .claim_ref("default", "solo", "solo-uid")
            .phase("Bound")
            .build(),
    );
    listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(
        PvcBuilder::new("solo")
            .access_modes(&["ReadWriteOncePod"])
            .request("1Gi")
            .bound("pv-solo")
            .build(),
    );
}

/// What the pods of one workload share.
#[derive(Debug, Clone)]
struct Template {
    cpu: Option<&'static str>,
    memory: &'static str,
    tolerates_dedicated: bool,
    requires_ssd: bool,
    prefers_zone: Option<usize>,
    selects_zone: Option<usize>,
    host_port: bool,
    image: bool,
    empty_dir: bool,
    claim: Option<&'static str>,
    priority: i32,
}

impl Template {
    fn random(rng: &mut fastrand::Rng) -> Template {
        Template {
            cpu: [
                None,
                Some("100m"),
                Some("500m"),
                Some("1"),
                Some("2"),
                Some("3"),
            ][rng.usize(..6)],
            memory: ["128Mi", "512Mi", "2Gi"][rng.usize(..3)],
            tolerates_dedicated: rng.usize(..4) == 0,
            requires_ssd: rng.usize(..4) == 0,
            prefers_zone: (rng.usize(..3) == 0).then(|| rng.usize(..3)),
            selects_zone: (rng.usize(..8) == 0).then(|| rng.usize(..3)),
            host_port: rng.usize(..6) == 0,
            image: rng.bool(),
            empty_dir: rng.usize(..4) == 0,
            claim: [
                None,
                None,
                None,
                Some("data"),
                Some("scratch"),
                Some("solo"),
            ][rng.usize(..6)],
            priority: [0, 0, 10][rng.usize(..3)],
        }
    }

    fn pod(&self, name: &str) -> Pod {
        let mut b = PodBuilder::new(name).priority(self.priority);
        b = match self.cpu {
            Some(cpu) => b.container(&[("cpu", cpu), ("memory", self.memory)]),
            None => b.container(&[]),
        };
        if self.tolerates_dedicated {
            b = b.toleration("dedicated", "Equal", "batch", "NoSchedule");
        }
        if self.requires_ssd {
            b = b.required_term(term(&[("disk", "In", &["ssd"])], &[]));
        }
        if let Some(z) = self.prefers_zone {
            b = b.preferred_term(50, term(&[(ZONE, "In", &[&format!("zone-{z}")])], &[]));
        }
        if let Some(z) = self.selects_zone {
            b = b.node_selector(ZONE, &format!("zone-{z}"));
        }
        if self.host_port {
            b = b.host_port(8080);
        }
        if self.image {
            b = b.image("registry.example/app:v1");
        }
        if self.empty_dir {
            b = b.volume(Volume {
                name: format!("scratch-{name}"),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            });
        }
        if let Some(claim) = self.claim {
            b = b.pvc(claim);
        }
        b.build()
    }
}

/// Pods of `templates`, mostly in runs of the same template, named `prefix-i`.
fn stream(rng: &mut fastrand::Rng, templates: &[Template], len: usize, prefix: &str) -> Vec<Pod> {
    let mut t = 0;
    (0..len)
        .map(|i| {
            if rng.usize(..5) == 0 {
                t = rng.usize(..templates.len());
            }
            templates[t].pod(&format!("{prefix}-{i}"))
        })
        .collect()
}

#[test]
fn random_streams_get_the_same_nodes_and_messages() {
    let mut batched = 0;
    let mut unschedulable = 0;
    for seed in 0..24u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (profile_yaml, n) = match seed % 4 {
            0 => (DEFAULT, 4 + rng.usize(..12)),
            1 => (DEFAULT, 16 + rng.usize(..40)),
            2 => (PACKING, 4 + rng.usize(..30)),
            _ => (SAMPLED, 120 + rng.usize(..80)),
        };
        let cluster = random_cluster(&mut rng, n);
        let templates: Vec<Template> = (0..1 + rng.usize(..4))
            .map(|_| Template::random(&mut rng))
            .collect();
        let pods = stream(&mut rng, &templates, 40 + n / 2, &format!("s{seed}"));
        let (outcomes, b) = same_decisions(profile_yaml, &cluster, &pods);
        batched += b;
        unschedulable += outcomes
            .iter()
            .filter(|o| o.starts_with("unschedulable"))
            .count();
    }
    // The streams exercised both paths: reuse, and nodes filling up until pods fit nowhere.
    assert!(batched > 200, "only {batched} pods batched");
    assert!(unschedulable > 20, "only {unschedulable} pods did not fit");
}

#[test]
fn one_pod_per_node_batches_every_pod_after_the_first() {
    // Upstream's case: each pod fills its node, so the next takes the runner-up.
    let cluster = Cluster::of(uniform_nodes(30, "4"));
    let pods = copies(34, |n| {
        PodBuilder::new(n).container(&[("cpu", "3"), ("memory", "1Gi")])
    });
    let (outcomes, batched) = same_decisions(DEFAULT, &cluster, &pods);
    // The pods that fit nowhere reuse every node's status too.
    assert_eq!(batched, 33);
    let mut placed: Vec<&String> = outcomes[..30].iter().collect();
    placed.sort();
    placed.dedup();
    assert_eq!(placed.len(), 30, "one pod per node");
    assert_eq!(
        outcomes[30],
        "unschedulable: 0/30 nodes are available: 30 Insufficient cpu."
    );
    assert_eq!(outcomes[33], outcomes[30]);
}

#[test]
fn pods_sharing_nodes_batch_too() {
    // Upstream drops its batch when the node just used still fits the next pod (node_not_full);
    // ksched rescores that node.
    let cluster = Cluster::of(uniform_nodes(12, "8"));
    let pods = copies(60, |n| {
        PodBuilder::new(n).container(&[("cpu", "500m"), ("memory", "256Mi")])
    });
    let (_, batched) = same_decisions(DEFAULT, &cluster, &pods);
    assert_eq!(batched, 59);
}

#[test]
fn a_groups_members_batch_within_a_placement_and_never_across() {
    // Two racks of six nodes: ten members tried in the first, ten in the second, as a group
    // cycle tries its placements; the same decisions with batching off, and only nodes of the
    // placement chosen.
    let cluster = Cluster::of(uniform_nodes(12, "4"));
    let pods = copies(20, |n| {
        PodBuilder::new(n).container(&[("cpu", "1"), ("memory", "1Gi")])
    });
    let mut off = Sim::new(DEFAULT, &cluster, false);
    let mut on = Sim::new(DEFAULT, &cluster, true);
    for (rack, members) in pods.chunks(10).enumerate() {
        let nodes = &on.snapshot.nodes()[rack * 6..rack * 6 + 6];
        let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        let placement = PlacementNodes::new(nodes);
        off.alg.set_placement(Some(placement.clone()));
        on.alg.set_placement(Some(placement));
        for pod in members {
            let got = on.schedule(pod);
            assert_eq!(got, off.schedule(pod));
            assert!(
                names.contains(&got),
                "{got} is outside rack {rack}: {names:?}"
            );
        }
        if rack == 1 {
            // The first member in the second placement could not reuse the first's results.
            assert_eq!(on.batched(), 18);
        }
    }
    assert_eq!(off.batched(), 0);
}

#[test]
fn sampled_searches_reuse_what_earlier_pods_saw() {
    // 300 nodes at 20%: every pod searches the next 100 feasible nodes.
    let cluster = Cluster::of(uniform_nodes(300, "8"));
    let pods = copies(40, |n| {
        PodBuilder::new(n).container(&[("cpu", "1"), ("memory", "1Gi")])
    });
    let (_, batched) = same_decisions(SAMPLED, &cluster, &pods);
    // The second and third pods search nodes no pod has seen yet; every later one comes round to
    // nodes seen before.
    assert_eq!(batched, 37);
}

/// Schedules `pods` twice (batching on and off) and asserts none of them batched.
fn never_batches(profile_yaml: &str, cluster: &Cluster, pods: &[Pod]) {
    let (_, batched) = same_decisions(profile_yaml, cluster, pods);
    assert_eq!(batched, 0);
}

fn copies(n: usize, pod: impl Fn(&str) -> PodBuilder) -> Vec<Pod> {
    (0..n).map(|i| pod(&format!("p{i}")).build()).collect()
}

#[test]
fn pods_with_inter_pod_affinity_or_spread_constraints_do_not_batch() {
    let cluster = Cluster::of(uniform_nodes(9, "8"));
    let web = |name: &str| {
        PodBuilder::new(name)
            .label("app", "web")
            .container(&[("cpu", "1")])
    };
    never_batches(
        DEFAULT,
        &cluster,
        &copies(8, |n| {
            web(n).preferred_pod_anti_affinity(10, pod_term(&[("app", "web")], ZONE))
        }),
    );
    never_batches(
        DEFAULT,
        &cluster,
        &copies(8, |n| {
            web(n).required_pod_affinity(pod_term(&[("app", "web")], ZONE))
        }),
    );
    never_batches(
        DEFAULT,
        &cluster,
        &copies(8, |n| {
            web(n).spread(spread_constraint(
                1,
                ZONE,
                "DoNotSchedule",
                Some(&[("app", "web")]),
            ))
        }),
    );
}

#[test]
fn default_spread_constraints_make_a_pod_unbatchable_only_when_they_apply() {
    let cluster = Cluster::of(uniform_nodes(9, "8"));
    let web = |name: &str| {
        PodBuilder::new(name)
            .label("app", "web")
            .container(&[("cpu", "1")])
    };
    // No Service or controller selects the pods: the system defaults select nothing.
    let (_, batched) = same_decisions(DEFAULT, &cluster, &copies(8, web));
    assert_eq!(batched, 7);
    // A Service selecting them: the defaults spread them, each placement matters to the next.
    cluster.listers.store(&SERVICES).apply(Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    never_batches(DEFAULT, &cluster, &copies(8, web));
}

#[test]
fn pods_with_claims_not_yet_bound_or_dra_claims_do_not_batch() {
    let mut rng = fastrand::Rng::with_seed(7);
    let cluster = random_cluster(&mut rng, 10);
    never_batches(
        DEFAULT,
        &cluster,
        &copies(6, |n| {
            PodBuilder::new(n)
                .container(&[("cpu", "100m")])
                .pvc("scratch")
        }),
    );
    let with_claim = |name: &str| {
        let mut pod = PodBuilder::new(name).container(&[("cpu", "100m")]).build();
        pod.spec
            .get_or_insert_with(Default::default)
            .resource_claims = Some(vec![PodResourceClaim {
            name: "gpu".into(),
            resource_claim_name: Some("gpu-claim".into()),
            ..Default::default()
        }]);
        pod
    };
    let pods: Vec<Pod> = (0..4).map(|i| with_claim(&format!("p{i}"))).collect();
    never_batches(DEFAULT, &cluster, &pods);
    // A bound claim: pods batch (the claim's volume pins them to zone-1).
    let (outcomes, batched) = same_decisions(
        DEFAULT,
        &cluster,
        &copies(6, |n| {
            PodBuilder::new(n).container(&[("cpu", "100m")]).pvc("data")
        }),
    );
    assert_eq!(batched, 5, "{outcomes:?}");
}

#[test]
fn pods_sharing_a_read_write_once_pod_claim_do_not_batch() {
    // Once the first pod holds the claim, the next fits nowhere: VolumeRestrictions' Filter reads
    // what PreFilter counted over the whole cluster.
    let cluster = Cluster::of(uniform_nodes(6, "8"));
    apply_solo_claim(&cluster.listers);
    // A read-only disk too, so VolumeRestrictions runs for every pod.
    let disk = Volume {
        name: "disk".into(),
        gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
            pd_name: "shared".into(),
            read_only: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pods = copies(4, |n| {
        PodBuilder::new(n)
            .container(&[("cpu", "1")])
            .pvc("solo")
            .volume(disk.clone())
    });
    let (outcomes, batched) = same_decisions(DEFAULT, &cluster, &pods);
    assert_eq!(batched, 0);
    assert!(outcomes[1].starts_with("unschedulable"), "{outcomes:?}");
}

#[test]
fn no_pod_batches_while_some_pod_is_nominated() {
    // A nominated pod counts on its node in every other pod's Filter (by priority).
    let cluster = Cluster::of(uniform_nodes(8, "4"));
    let nominator = Arc::new(crate::scheduler::queue::Nominator::new());
    let mut on = Sim::new(DEFAULT, &cluster, true);
    let mut off = Sim::new(DEFAULT, &cluster, false);
    for sim in [&mut on, &mut off] {
        sim.fwk = framework_with(DEFAULT, &cluster.listers, Some(nominator.clone()));
    }
    let preemptor = PodBuilder::new("preemptor")
        .container(&[("cpu", "3")])
        .info();
    nominator.add_nominated_pod(Arc::new(preemptor), "n003");
    let pods = copies(6, |n| PodBuilder::new(n).container(&[("cpu", "2")]));
    for pod in &pods {
        assert_eq!(on.schedule(pod), off.schedule(pod));
    }
    assert_eq!(on.batched(), 0);
    // The nomination dropped: the pods after the next batch again.
    nominator.delete("default/preemptor");
    for pod in copies(4, |n| {
        PodBuilder::new(&format!("late-{n}")).container(&[("cpu", "1")])
    }) {
        assert_eq!(on.schedule(&pod), off.schedule(&pod));
    }
    assert_eq!(on.batched(), 3);
}

#[test]
fn profiles_with_extenders_or_plugins_that_do_not_sign_never_batch() {
    use crate::framework::extender::tests::FakeExtender;
    // A Filter plugin that says nothing about signing (an out-of-tree plugin, say).
    let (reg, _) = registry_with(vec![Fake::new("Quiet", &Default::default())]);
    let (h, _) = handle();
    let spec = profile(&[
        (ExtensionPoint::Filter, &["NodeResourcesFit", "Quiet"]),
        (ExtensionPoint::Score, &["NodeResourcesFit"]),
    ]);
    let quiet = Framework::new(&spec, &reg, h).expect("framework");
    assert!(quiet.signers().is_none());
    let (h, _) = handle();
    let spec = profile(&[(ExtensionPoint::Filter, &["NodeResourcesFit"])]);
    assert!(
        Framework::new(&spec, &reg, h)
            .expect("fwk")
            .signers()
            .is_some()
    );
    // Extenders: configured on the handle, the profile does not sign; the algorithm never batches.
    let (mut h, _) = handle();
    h.extenders = vec![Arc::new(FakeExtender::new("http://ext"))];
    assert!(
        Framework::new(&spec, &reg, h)
            .expect("fwk")
            .signers()
            .is_none()
    );
    let cluster = Cluster::of(uniform_nodes(5, "8"));
    let mut sim = Sim::new(DEFAULT, &cluster, true);
    sim.alg = Algorithm::new(0).with_extenders(vec![Arc::new(FakeExtender::new("http://ext"))]);
    for pod in copies(4, |n| PodBuilder::new(n).container(&[("cpu", "1")])) {
        sim.schedule(&pod);
    }
    assert_eq!(sim.batched(), 0);
}

#[test]
fn unschedulable_pods_reuse_results_and_report_the_same_message() {
    let cluster = Cluster::of(uniform_nodes(20, "2"));
    let pods = copies(5, |n| {
        PodBuilder::new(n)
            .container(&[("cpu", "4")])
            .toleration("x", "Exists", "", "")
    });
    let (outcomes, batched) = same_decisions(DEFAULT, &cluster, &pods);
    assert_eq!(batched, 4);
    assert!(
        outcomes
            .iter()
            .all(|o| o == "unschedulable: 0/20 nodes are available: 20 Insufficient cpu."),
        "{outcomes:?}"
    );
}

#[test]
fn a_batch_is_dropped_as_upstream_and_when_the_cluster_changes() {
    let cluster = Cluster::of(uniform_nodes(6, "8"));
    let mut sim = Sim::new(DEFAULT, &cluster, true);
    let small = |n: &str| PodBuilder::new(n).container(&[("cpu", "1")]).build();
    let big = |n: &str| PodBuilder::new(n).container(&[("cpu", "2")]).build();
    sim.schedule(&small("a"));
    let first = sim.report();
    assert_eq!(first.attempt, Some(AttemptResult::NoHint));
    assert_eq!(first.hint.map(|h| h.0), Some(false));
    assert_eq!(first.sign.map(|s| s.1), Some(Code::Success));
    assert!(first.store.is_some());
    sim.schedule(&small("b"));
    let second = sim.report();
    assert_eq!(second.attempt, Some(AttemptResult::HintUsed));
    assert_eq!(second.hint.map(|h| h.0), Some(true));
    assert!(second.flushed.is_empty());

    // Another signature.
    sim.schedule(&big("c"));
    assert_eq!(sim.report().flushed, [FlushReason::PodIncompatible]);
    // A pod that cannot be signed.
    let affine = PodBuilder::new("d")
        .container(&[("cpu", "1")])
        .required_pod_anti_affinity(pod_term(&[("app", "x")], ZONE))
        .build();
    sim.schedule(&big("c2"));
    sim.schedule(&affine);
    let r = sim.report();
    assert_eq!(r.flushed, [FlushReason::PodNotBatchable]);
    assert_eq!(r.sign.map(|s| s.1), Some(Code::Unschedulable));
    // Another profile's pod in between (one algorithm, two frameworks).
    sim.schedule(&small("e"));
    let other = framework(DEFAULT, &cluster.listers);
    let pod = PodInfo::from_pod(small("f"));
    let _ = sim
        .alg
        .schedule_pod(&other, &mut CycleState::new(), &pod, &sim.snapshot);
    sim.schedule(&small("g"));
    assert_eq!(sim.report().flushed, [FlushReason::PodSkipped]);
    // A node object changes (a label), or a node joins.
    sim.schedule(&small("h"));
    let relabelled = NodeBuilder::new("n002")
        .label(ZONE, "zone-9")
        .allocatable(&[("cpu", "8"), ("memory", "16Gi"), ("pods", "110")])
        .build();
    let mut info = NodeInfo::clone(sim.snapshot.get("n002").expect("n002"));
    info.set_node(Arc::new(relabelled));
    sim.snapshot
        .update_from([NodeChange::Upsert(Arc::new(info))]);
    sim.schedule(&small("i"));
    assert_eq!(sim.report().flushed, [FlushReason::ClusterChanged]);
    // A claim changes.
    sim.schedule(&small("j"));
    cluster
        .listers
        .store(&PERSISTENT_VOLUME_CLAIMS)
        .apply(PvcBuilder::new("other").build());
    sim.schedule(&small("k"));
    assert_eq!(sim.report().flushed, [FlushReason::ClusterChanged]);
    // A pod with affinity terms lands anywhere: its terms reach its whole zone.
    sim.schedule(&small("l"));
    let anti = PodBuilder::new("anti")
        .required_pod_anti_affinity(pod_term(&[("app", "y")], ZONE))
        .build();
    assume(&mut sim.snapshot, &anti, "n005");
    sim.schedule(&small("m"));
    assert_eq!(sim.report().flushed, [FlushReason::ClusterChanged]);
    // Pods placed by the batch itself change only their nodes: the batch goes on.
    sim.schedule(&small("n"));
    assert!(sim.report().flushed.is_empty());
}

#[test]
fn decisions_stay_the_same_across_cluster_changes() {
    // The batch is dropped on each change, and the pods after it decide as unbatched ones.
    let mut rng = fastrand::Rng::with_seed(99);
    let cluster = random_cluster(&mut rng, 24);
    let mut off = Sim::new(DEFAULT, &cluster, false);
    let mut on = Sim::new(DEFAULT, &cluster, true);
    let template = Template {
        cpu: Some("500m"),
        memory: "512Mi",
        tolerates_dedicated: true,
        requires_ssd: false,
        prefers_zone: Some(1),
        selects_zone: None,
        host_port: false,
        image: true,
        empty_dir: true,
        claim: Some("data"),
        priority: 0,
    };
    for i in 0..60 {
        if i % 7 == 3 {
            // The same change in both clusters: a node gets a new label, or a pod leaves.
            let node = format!("n{:03}", rng.usize(..24));
            for sim in [&mut off, &mut on] {
                let mut info = NodeInfo::clone(sim.snapshot.get(&node).expect("node"));
                let mut n = info.node().cloned().expect("node object");
                n.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("disk".into(), "ssd".into());
                info.set_node(Arc::new(n));
                if let Some(p) = info.pods.first().cloned() {
                    let _ = info.remove_pod(&p);
                }
                sim.snapshot
                    .update_from([NodeChange::Upsert(Arc::new(info))]);
            }
        }
        let pod = template.pod(&format!("p{i}"));
        assert_eq!(on.schedule(&pod), off.schedule(&pod), "pod {i}");
    }
    assert!(on.batched() > 20, "{}", on.batched());
}

/// The signature the default profile gives `pod`.
fn signature(pod: PodBuilder) -> Option<PodSignature> {
    let fwk = framework(DEFAULT, &Arc::new(Listers::default()));
    sign_pod(&pod.info(), fwk.signers().expect("default profile signs")).ok()
}

#[test]
fn signatures_cover_what_plugins_read_and_nothing_pod_specific() {
    let base = || {
        PodBuilder::new("a")
            .container(&[("cpu", "1"), ("memory", "1Gi")])
            .toleration("a", "Exists", "", "NoSchedule")
            .toleration("b", "Exists", "", "NoSchedule")
    };
    let sig = signature(base()).expect("signable");
    // Pod names, uids, tolerations in another order, ConfigMap and Secret volumes, the names of
    // other volumes: the same signature.
    let renamed = PodBuilder::new("b")
        .container(&[("cpu", "1"), ("memory", "1Gi")])
        .toleration("b", "Exists", "", "NoSchedule")
        .toleration("a", "Exists", "", "NoSchedule")
        .volume(Volume {
            name: "config-xyz".into(),
            config_map: Some(Default::default()),
            ..Default::default()
        });
    assert_eq!(signature(renamed), Some(sig.clone()));
    let scratch = |name: &str| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    assert_eq!(
        signature(base().volume(scratch("x"))),
        signature(base().volume(scratch("y")))
    );
    // What plugins read: another signature.
    let differ = [
        ("namespace", base().namespace("other")),
        ("priority", base().priority(5)),
        ("labels", base().label("app", "web")),
        (
            "tolerations",
            base().toleration("c", "Exists", "", "NoSchedule"),
        ),
        ("requests", base().container(&[("cpu", "1")])),
        ("scoring requests", base().container(&[])),
        ("host port protocol", base().host_port_full("", "UDP", 53)),
        ("node selector", base().node_selector("disk", "ssd")),
        (
            "node affinity",
            base().preferred_term(1, term(&[("disk", "In", &["ssd"])], &[])),
        ),
        ("images", base().image("app:v1")),
        ("scheduler", base().scheduler_name("other")),
        ("volumes", base().volume(scratch("x"))),
    ];
    for (what, pod) in differ {
        let other = signature(pod).expect("signable");
        assert_ne!(other, sig, "{what}");
    }
    assert_ne!(
        signature(base().host_port_full("", "UDP", 53)),
        signature(base().host_port_full("", "TCP", 53)),
        "protocols"
    );
    assert_ne!(
        signature(base().image("app:v1").image("app:v1")),
        signature(base().image("app:v1")),
        "the same image in two containers scores twice"
    );
    // Unsignable.
    assert!(signature(base().pod_anti_affinity_required("app", "x")).is_none());
    assert!(signature(base().spread(spread_constraint(1, ZONE, "ScheduleAnyway", None))).is_none());
}
