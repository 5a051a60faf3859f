//! The workloads of `make bench`, after upstream's scheduler_perf at 1.36.3
//! (`test/integration/scheduler_perf/{misc,affinity,topology_spreading,volumes,dra}/performance-config.yaml`
//! and `templates/`): their nodes, their pod templates and their counts per preset.
//!
//! Where the bench differs from upstream's harness, the reason is beside the difference. The one
//! that applies everywhere: nodes are plain Node objects (no kubelet, no kwok), as upstream's
//! `createNodes`, so bound pods stay Pending and a deleted pod is gone at once
//! (terminationGracePeriodSeconds 0).

use serde_json::{Value, json};

/// The scheduler name every contender serves.
pub const SCHEDULER_NAME: &str = "bench-scheduler";
/// The node every pod of SchedulingDaemonset targets and the only node of SchedulingGatedPods
/// (upstream's `node-with-name.yaml`: pods capacity 90000).
pub const NAMED_NODE: &str = "scheduler-perf-node";
/// Label of every node the bench creates for a workload (and only those).
pub const NODE_LABEL: &str = "ksched.io/bench";
/// Coscheduling's pod label naming the pod's PodGroup (scheduler-plugins' `scheduling.x-k8s.io/pod-group`).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The node label whose values are the domains of the topology-aware gangs (upstream's
/// `podgroup/tas` suite: `rack-<index / 100>`).
pub const RACK_LABEL: &str = "topology.kubernetes.io/rack";
/// Nodes per rack (and per zone) in the topology-aware gang workloads.
pub const NODES_PER_RACK: usize = 100;
/// The CSI driver of SchedulingCSIPVs and its attach limit per node (upstream's
/// `nodeAllocatableStrategy`: `attachable-volumes-csi-ebs.csi.aws.com: 39`, CSINode count 39).
pub const CSI_DRIVER: &str = "ebs.csi.aws.com";
pub const CSI_VOLUMES_PER_NODE: usize = 39;
/// The WaitForFirstConsumer StorageClass of SchedulingCSIPVs.
pub const CSI_STORAGE_CLASS: &str = "bench-csi-wffc";
/// The DRA driver, class and devices per node of SchedulingWithResourceClaimTemplate.
pub const DRA_DRIVER: &str = "bench.ksched.io";
pub const DRA_CLASS: &str = "bench-gpu";
pub const DEVICES_PER_NODE: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// For development: a tenth of `default`.
    Small,
    /// Upstream's 500-node cases; fits 2 cores.
    Default,
    /// Upstream's 5000-node performance cases.
    Large,
    /// 15000 nodes, SchedulingBasic and SchedulingDaemonset only (upstream's
    /// SchedulingDaemonset/15000Nodes).
    XLarge,
}

impl Preset {
    pub fn parse(s: &str) -> Result<Preset, String> {
        match s {
            "small" => Ok(Preset::Small),
            "default" => Ok(Preset::Default),
            "large" => Ok(Preset::Large),
            "xlarge" => Ok(Preset::XLarge),
            other => Err(format!(
                "unknown preset {other:?}: use one of small, default, large, xlarge"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Default => "default",
            Preset::Large => "large",
            Preset::XLarge => "xlarge",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    SchedulingBasic,
    SchedulingPodAntiAffinity,
    TopologySpreading,
    SchedulingNodeAffinity,
    PreemptionBasic,
    ResourceClaimTemplate,
    PreferredPodAffinity,
    PreferredPodAntiAffinity,
    PreferredTopologySpreading,
    AntiAffinityWithNsSelector,
    Unschedulable,
    MixedChurn,
    CsiPvs,
    GatedPods,
    Daemonset,
    PreemptionAsync,
    /// Coscheduling gangs of this many pods (minMember = size).
    Gangs(usize),
    /// Upstream's `podgroup/tas` TopologyAwareScheduling: gangs of this many pods, each confined
    /// to one rack (`schedulingConstraints.topology`), on racks of 100 nodes. From 1.37.
    TopologyGangs(usize),
}

impl Kind {
    pub const ALL: [Kind; 20] = [
        Kind::SchedulingBasic,
        Kind::SchedulingPodAntiAffinity,
        Kind::TopologySpreading,
        Kind::SchedulingNodeAffinity,
        Kind::PreemptionBasic,
        Kind::ResourceClaimTemplate,
        Kind::PreferredPodAffinity,
        Kind::PreferredPodAntiAffinity,
        Kind::PreferredTopologySpreading,
        Kind::AntiAffinityWithNsSelector,
        Kind::Unschedulable,
        Kind::MixedChurn,
        Kind::CsiPvs,
        Kind::GatedPods,
        Kind::Daemonset,
        Kind::PreemptionAsync,
        Kind::Gangs(3),
        Kind::Gangs(100),
        Kind::TopologyGangs(4),
        Kind::TopologyGangs(1000),
    ];

    /// Upstream's test case name (ours for the gangs, which upstream's suite does not have).
    pub fn name(self) -> &'static str {
        match self {
            Kind::SchedulingBasic => "SchedulingBasic",
            Kind::SchedulingPodAntiAffinity => "SchedulingPodAntiAffinity",
            Kind::TopologySpreading => "TopologySpreading",
            Kind::SchedulingNodeAffinity => "SchedulingNodeAffinity",
            Kind::PreemptionBasic => "PreemptionBasic",
            Kind::ResourceClaimTemplate => "SchedulingWithResourceClaimTemplate",
            Kind::PreferredPodAffinity => "SchedulingPreferredPodAffinity",
            Kind::PreferredPodAntiAffinity => "SchedulingPreferredPodAntiAffinity",
            Kind::PreferredTopologySpreading => "PreferredTopologySpreading",
            Kind::AntiAffinityWithNsSelector => "SchedulingRequiredPodAntiAffinityWithNSSelector",
            Kind::Unschedulable => "Unschedulable",
            Kind::MixedChurn => "SchedulingWithMixedChurn",
            Kind::CsiPvs => "SchedulingCSIPVs",
            Kind::GatedPods => "SchedulingGatedPods",
            Kind::Daemonset => "SchedulingDaemonset",
            Kind::PreemptionAsync => "PreemptionAsync",
            Kind::Gangs(3) => "SchedulingGangsOf3",
            Kind::Gangs(100) => "SchedulingGangsOf100",
            Kind::Gangs(_) => "SchedulingGangs",
            Kind::TopologyGangs(4) => "TopologyAwareSchedulingGangsOf4",
            Kind::TopologyGangs(1000) => "TopologyAwareSchedulingGangsOf1000",
            Kind::TopologyGangs(_) => "TopologyAwareScheduling",
        }
    }

    /// The gang size of a gang workload.
    pub fn gang_size(self) -> Option<usize> {
        match self {
            Kind::Gangs(n) | Kind::TopologyGangs(n) => Some(n),
            _ => None,
        }
    }

    /// The node label a gang of the workload must stay within (one value for all its pods).
    pub fn topology_key(self) -> Option<&'static str> {
        matches!(self, Kind::TopologyGangs(_)).then_some(RACK_LABEL)
    }

    /// The throughput ksched is held to against upstream: 1.5x, and 3x for topology-aware
    /// placement (issue 34).
    pub fn pps_target(self) -> f64 {
        match self {
            Kind::TopologyGangs(_) => 3.0,
            _ => 1.5,
        }
    }

    /// The zone labels of the workload's nodes, round robin: upstream labels nodes only where
    /// the workload's `labelNodePrepareStrategy` says so.
    fn zones(self) -> &'static [&'static str] {
        match self {
            Kind::TopologySpreading | Kind::PreferredTopologySpreading => {
                &["moon-1", "moon-2", "moon-3"]
            }
            Kind::SchedulingNodeAffinity => &["zone1"],
            _ => &[],
        }
    }
}

/// One workload: its nodes (`bench-node-<i>`, plus the named node where the workload has one),
/// the pods created before the measurement (not measured) and the measured pods.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub kind: Kind,
    pub nodes: usize,
    pub init_pods: usize,
    pub measure_pods: usize,
}

impl Workload {
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// SchedulingGatedPods: pods that stay gated the whole run (upstream's `gatedPods`, half of
    /// `measurePods` in its 10000-gated-pods case).
    pub fn gated_pods(&self) -> usize {
        if self.kind == Kind::GatedPods {
            self.measure_pods / 2
        } else {
            0
        }
    }

    /// SchedulingRequiredPodAntiAffinityWithNSSelector: the labelled namespaces the init pods
    /// spread over (upstream's `initNamespaces`).
    pub fn init_namespaces(&self) -> usize {
        if self.kind == Kind::AntiAffinityWithNsSelector {
            (self.init_pods / 20).clamp(1, 100)
        } else {
            0
        }
    }
}

/// The workloads of a preset, in the order they run.
pub fn workloads(preset: Preset) -> Vec<Workload> {
    Kind::ALL
        .iter()
        // Topology-aware placement exists from 1.37 (see `GangApi::topology_gate`).
        .filter(|kind| {
            kind.topology_key().is_none() || super::contenders::gang_api().topology_gate.is_some()
        })
        .filter_map(|&kind| {
            let (nodes, init_pods, measure_pods) = counts(kind, preset)?;
            Some(Workload {
                kind,
                nodes,
                init_pods,
                measure_pods,
            })
        })
        .collect()
}

/// (nodes, init pods, measured pods). `default` is upstream's 500Nodes case and `large` its
/// 5000-node performance case, except where a comment says otherwise.
fn counts(kind: Kind, preset: Preset) -> Option<(usize, usize, usize)> {
    let default = match kind {
        Kind::SchedulingBasic => (500, 500, 1000),
        Kind::SchedulingPodAntiAffinity => (500, 100, 400),
        // Upstream's 500Nodes has 1000 init pods; one a node here, to fit the preset's time.
        Kind::TopologySpreading => (500, 500, 1000),
        Kind::SchedulingNodeAffinity => (500, 500, 1000),
        // Upstream has 1000Nodes: 4 low-priority pods a node and as many preemptors as nodes.
        // On 500 nodes, preemptors for half of them: preemption is slow in both schedulers and
        // the default preset has to fit 45 minutes.
        Kind::PreemptionBasic => (500, 2000, 250),
        // One device per pod, 8 per node: the devices of 500 nodes outnumber the claims. Half
        // the pods of the others: each claim costs the bench two requests to free again.
        Kind::ResourceClaimTemplate => (500, 250, 500),
        Kind::PreferredPodAffinity | Kind::PreferredPodAntiAffinity => (500, 500, 1000),
        Kind::PreferredTopologySpreading => (500, 500, 1000),
        // Upstream's 500Nodes measures only 100 pods (too short to time on a shared machine);
        // 10 namespaces of 20 init pods and 300 measured pods keep one pod per node at most.
        Kind::AntiAffinityWithNsSelector => (500, 200, 300),
        Kind::Unschedulable => (500, 10, 1000),
        // Upstream's 1000Nodes case, on the 500 nodes of the others.
        Kind::MixedChurn => (500, 0, 1000),
        Kind::CsiPvs => (500, 500, 1000),
        // One node; upstream's 10000-gated-pods case scaled by a tenth and halved: 500 gated pods,
        // 1000 pods deleted at 50/s while 1000 pods are measured.
        Kind::GatedPods => (0, 1000, 1000),
        // Upstream has only 15000Nodes/30000 pods: two pods per node, on 500 nodes.
        Kind::Daemonset => (500, 0, 1000),
        Kind::PreemptionAsync => (500, 2000, 500),
        Kind::Gangs(n) => (500, 0, 1000 / n * n),
        // Five racks of 100 nodes: 250 gangs of 4, or three gangs of 1000 (upstream's
        // smallest 1000PerGroup case, on a tenth of its nodes).
        Kind::TopologyGangs(n) => (500, 0, 1000.max(3 * n) / n * n),
    };
    match preset {
        Preset::Default => Some(default),
        Preset::Small => {
            let (nodes, init, measure) = default;
            let measure = match kind {
                Kind::Gangs(n) | Kind::TopologyGangs(n) => (measure / 10 / n).max(1) * n,
                _ => measure / 10,
            };
            Some((nodes / 10, init / 10, measure))
        }
        Preset::Large => Some(match kind {
            Kind::SchedulingBasic => (5000, 1000, 10000),
            Kind::SchedulingPodAntiAffinity => (5000, 1000, 2000),
            Kind::TopologySpreading => (5000, 5000, 5000),
            Kind::SchedulingNodeAffinity => (5000, 5000, 10000),
            // Upstream's performance case is 1000Nodes: its 5000Nodes case is disabled
            // (kubernetes#108308, "always seems to fail").
            Kind::PreemptionBasic => (1000, 4000, 1000),
            Kind::ResourceClaimTemplate => (5000, 5000, 10000),
            Kind::PreferredPodAffinity | Kind::PreferredPodAntiAffinity => (5000, 5000, 5000),
            Kind::PreferredTopologySpreading => (5000, 5000, 5000),
            Kind::AntiAffinityWithNsSelector => (5000, 4000, 1000),
            Kind::Unschedulable => (5000, 100, 10000),
            Kind::MixedChurn => (5000, 0, 10000),
            Kind::CsiPvs => (5000, 5000, 5000),
            Kind::GatedPods => (0, 20000, 20000),
            Kind::Daemonset => (5000, 0, 10000),
            Kind::PreemptionAsync => (5000, 20000, 5000),
            Kind::Gangs(n) => (5000, 0, 10000 / n * n),
            // Upstream's 5000Nodes_1500Gangs_6000Pods and 5000Nodes_6Gangs_6000Pods_1000PerGroup.
            Kind::TopologyGangs(n) => (5000, 0, 6000 / n * n),
        }),
        Preset::XLarge => match kind {
            Kind::SchedulingBasic => Some((15000, 3000, 30000)),
            Kind::Daemonset => Some((15000, 0, 30000)),
            _ => None,
        },
    }
}

/// A node after upstream's `node-default.yaml` (4 CPUs, 32Gi, 110 pods), with the usual
/// `kubernetes.io/hostname` label (upstream's `createNodes` adds it) and the workload's zone.
pub fn node(kind: Kind, name: &str, index: usize) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": name, NODE_LABEL: "true"});
    let zones = kind.zones();
    if !zones.is_empty() {
        labels["topology.kubernetes.io/zone"] = json!(zones[index % zones.len()]);
    }
    // Upstream's `podgroup/tas/templates/node.yaml`: zone and rack both `<index / 100>`.
    if let Some(key) = kind.topology_key() {
        let rack = index / NODES_PER_RACK;
        labels["topology.kubernetes.io/zone"] = json!(format!("zone-{rack}"));
        labels[key] = json!(format!("rack-{rack}"));
    }
    let mut resources = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
    if kind == Kind::CsiPvs {
        resources[format!("attachable-volumes-csi-{CSI_DRIVER}")] =
            json!(CSI_VOLUMES_PER_NODE.to_string());
    }
    json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    })
}

/// Upstream's `node-with-name.yaml`: one node for 90000 pods.
pub fn named_node() -> Value {
    let resources = json!({"pods": "90000", "cpu": "4", "memory": "32Gi"});
    json!({
        "metadata": {"name": NAMED_NODE, "labels": {"kubernetes.io/hostname": NAMED_NODE, NODE_LABEL: "true"}},
        "status": {"capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    })
}

/// Whether the workload has upstream's named node.
pub fn has_named_node(kind: Kind) -> bool {
    matches!(kind, Kind::Daemonset | Kind::GatedPods)
}

/// Which pod of a run a template is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The pod whose binding says the contender is ready (upstream's template for every workload).
    Warmup,
    /// Created (and bound) before the measurement.
    Init,
    Measured,
    /// SchedulingGatedPods: gated the whole run.
    Gated,
    /// Created by a churn while the measured pods come.
    Churn,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Warmup => "warmup",
            Role::Init => "init",
            Role::Measured => "measure",
            Role::Gated => "gated",
            Role::Churn => "churn",
        }
    }
}

/// Upstream's `pod-default.yaml` resources (100m, 500Mi; limits as requests).
pub fn container(cpu: &str) -> Value {
    json!([{"name": "pause", "image": "registry.k8s.io/pause:3.10.2", "ports": [{"containerPort": 80}],
        "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}, "limits": {"cpu": cpu, "memory": "500Mi"}}}])
}

/// Upstream's light pods (`light-pod.yaml`, `daemonset-pod.yaml`, `gated-pod.yaml`): no requests.
fn light_container() -> Value {
    json!([{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}])
}

/// The name of the `index`th pod of `role`: `init-3`, `measure-12`, ...
pub fn pod_name(role: Role, index: usize) -> String {
    format!("{}-{index}", role.label())
}

/// The `index`th pod of `role` in namespace `ns` (the run's namespace is `run`), from the
/// workload's template. Every pod carries `bench=<role>` and `bench-run=<run>`.
pub fn pod(kind: Kind, role: Role, run: &str, ns: &str, index: usize) -> Value {
    let name = pod_name(role, index);
    let mut labels = json!({"bench": role.label(), "bench-run": run});
    let mut spec = json!({"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
        "containers": container("100m")});
    let preferred_term = |color: &str| {
        json!([{"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": color}},
            "topologyKey": "kubernetes.io/hostname", "namespaces": [run]}}])
    };
    match (kind, role) {
        (_, Role::Warmup) => {}
        (Kind::SchedulingPodAntiAffinity, _) => {
            labels["color"] = json!("green");
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": [run]}]}});
        }
        // Upstream's init pods are `pod-default.yaml`; the measured ones spread.
        (Kind::TopologySpreading | Kind::PreferredTopologySpreading, Role::Measured) => {
            let when = if kind == Kind::TopologySpreading {
                "DoNotSchedule"
            } else {
                "ScheduleAnyway"
            };
            labels["color"] = json!("blue");
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        (Kind::SchedulingNodeAffinity, _) => {
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone1", "zone2"]}]}]}}});
        }
        (Kind::ResourceClaimTemplate, Role::Init | Role::Measured) => {
            // The claim the pod's template stands for, created by the bench beforehand.
            spec["resourceClaims"] =
                json!([{"name": "gpu", "resourceClaimName": format!("{name}-gpu")}]);
            spec["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
        }
        // `pod-low-priority.yaml` fills the nodes; `pod-high-priority.yaml` (3 CPUs) preempts.
        (Kind::PreemptionBasic | Kind::PreemptionAsync, Role::Init) => {
            spec["priorityClassName"] = json!("bench-low");
            spec["containers"] = container("900m");
        }
        (Kind::PreemptionBasic, Role::Measured) | (Kind::PreemptionAsync, Role::Churn) => {
            spec["priorityClassName"] = json!("bench-high");
            spec["containers"] = container("3000m");
        }
        // `pod-high-priority-large-cpu.yaml`: 9 CPUs never fit a 4-CPU node (requests only).
        (Kind::Unschedulable | Kind::MixedChurn, Role::Churn) => {
            spec["priorityClassName"] = json!("bench-high");
            spec["containers"] = json!([{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                "ports": [{"containerPort": 80}], "resources": {"requests": {"cpu": "9", "memory": "500Mi"}}}]);
        }
        (Kind::PreferredPodAffinity, _) => {
            labels["color"] = json!("red");
            spec["affinity"] = json!({"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": preferred_term("red")}});
        }
        (Kind::PreferredPodAntiAffinity, _) => {
            labels["color"] = json!("yellow");
            spec["affinity"] = json!({"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": preferred_term("yellow")}});
        }
        (Kind::AntiAffinityWithNsSelector, _) => {
            labels["color"] = json!("green");
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname",
                 "namespaceSelector": {"matchLabels": {"team": "devops"}}}]}});
        }
        (Kind::CsiPvs, Role::Init | Role::Measured) => {
            spec["volumes"] = json!([{"name": "vol",
                "persistentVolumeClaim": {"claimName": format!("{name}-pvc")}}]);
        }
        (Kind::GatedPods, Role::Gated) => {
            spec["containers"] = light_container();
            spec["schedulingGates"] = json!([{"name": "test.k8s.io/hold"}]);
        }
        (Kind::GatedPods, _) => spec["containers"] = light_container(),
        // What the DaemonSet controller writes: required node affinity on the node's name.
        (Kind::Daemonset, Role::Measured) => {
            spec["containers"] = light_container();
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NAMED_NODE]}]}]}}});
        }
        (Kind::Gangs(size), Role::Measured) => {
            let gang = gang_name(index / size);
            // Coscheduling (ksched) reads the label; upstream's own gang scheduling (1.35+,
            // alpha: GenericWorkload, GangScheduling) reads the pod's scheduling group.
            labels[POD_GROUP_LABEL] = json!(gang);
            spec["schedulingGroup"] = json!({"podGroupName": gang});
        }
        // `podgroup/tas/templates/gang-pod.yaml`: 100m and 100Mi, no limits, no ports.
        (Kind::TopologyGangs(size), Role::Measured) => {
            let gang = gang_name(index / size);
            labels[POD_GROUP_LABEL] = json!(gang);
            spec["schedulingGroup"] = json!({"podGroupName": gang});
            spec["containers"] = json!([{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]);
        }
        _ => {}
    }
    json!({"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec})
}

/// The `index`th gang (PodGroup) of a gang workload.
pub fn gang_name(index: usize) -> String {
    format!("gang-{index}")
}
