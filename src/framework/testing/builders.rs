//! Builders for the objects unit tests schedule: Pods, Nodes, volumes, selectors and affinity
//! terms, snapshots.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerImage, ContainerPort, Namespace, Node, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, Pod,
    PodAffinityTerm, PodAntiAffinity, PodSchedulingGate, PodSpec, PreferredSchedulingTerm,
    ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::framework::types::{AssignedPod, NodeInfo, PodInfo};

/// A map of `pairs` (labels, annotations, selectors).
pub fn string_map<M: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> M {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Sets `k=v` in an optional map (labels, annotations).
fn set_entry(map: &mut Option<BTreeMap<String, String>>, k: &str, v: &str) {
    map.get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
}

/// Metadata of a cluster-scoped object.
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// Metadata of a namespaced object: `name` in "default", its uid the name too.
fn namespaced_meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some("default".to_string()),
        uid: Some(name.to_string()),
        ..meta(name)
    }
}

/// A Namespace with `labels` and the `kubernetes.io/metadata.name` label the API server adds.
pub fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let mut labels: BTreeMap<String, String> = string_map(labels);
    labels.insert("kubernetes.io/metadata.name".into(), name.into());
    Namespace {
        metadata: ObjectMeta {
            labels: Some(labels),
            ..meta(name)
        },
        ..Default::default()
    }
}

/// Listers holding the namespaces `(name, labels)`.
pub fn listers_with_namespaces(
    namespaces: &[(&str, &[(&str, &str)])],
) -> crate::framework::listers::Listers {
    let listers = crate::framework::listers::Listers::default();
    for (name, labels) in namespaces {
        listers.store(&NAMESPACES).apply(namespace(name, labels));
    }
    listers
}

fn quantities(list: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    pub fn new(name: &str) -> PodBuilder {
        PodBuilder {
            pod: Pod {
                metadata: namespaced_meta(name),
                spec: Some(PodSpec::default()),
                status: None,
            },
        }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.to_string());
        self
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.to_string());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        set_entry(&mut self.pod.metadata.labels, k, v);
        self
    }

    /// Adds a container requesting `requests` (an empty slice: no requests at all).
    pub fn container(mut self, requests: &[(&str, &str)]) -> Self {
        let n = self.spec().containers.len();
        let resources = (!requests.is_empty()).then(|| ResourceRequirements {
            requests: Some(quantities(requests)),
            ..Default::default()
        });
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            resources,
            ..Default::default()
        });
        self
    }

    pub fn init_container(mut self, requests: &[(&str, &str)], restartable: bool) -> Self {
        let inits = self.spec().init_containers.get_or_insert_with(Vec::new);
        let n = inits.len();
        inits.push(Container {
            name: format!("i{n}"),
            resources: Some(ResourceRequirements {
                requests: Some(quantities(requests)),
                ..Default::default()
            }),
            restart_policy: restartable.then(|| "Always".to_string()),
            ..Default::default()
        });
        self
    }

    /// Adds a container running `image`.
    pub fn image(mut self, image: &str) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            image: Some(image.to_string()),
            ..Default::default()
        });
        self
    }

    pub fn overhead(mut self, list: &[(&str, &str)]) -> Self {
        self.spec().overhead = Some(quantities(list));
        self
    }

    pub fn pod_level_requests(mut self, list: &[(&str, &str)]) -> Self {
        self.spec().resources = Some(ResourceRequirements {
            requests: Some(quantities(list)),
            ..Default::default()
        });
        self
    }

    /// Adds a container with one TCP host port on all addresses.
    pub fn host_port(self, port: i32) -> Self {
        self.host_port_full("", "", port)
    }

    pub fn host_port_full(mut self, ip: &str, protocol: &str, port: i32) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            ports: Some(vec![ContainerPort {
                container_port: port,
                host_port: Some(port),
                host_ip: (!ip.is_empty()).then(|| ip.to_string()),
                protocol: (!protocol.is_empty()).then(|| protocol.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.to_string());
        self
    }

    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    pub fn scheduler_name(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.to_string());
        self
    }

    pub fn nominated_node(mut self, node: &str) -> Self {
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some(node.to_string());
        self
    }

    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        let t = Toleration {
            key: (!key.is_empty()).then(|| key.to_string()),
            operator: (!operator.is_empty()).then(|| operator.to_string()),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: (!effect.is_empty()).then(|| effect.to_string()),
            toleration_seconds: None,
        };
        self.spec().tolerations.get_or_insert_with(Vec::new).push(t);
        self
    }

    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        self
    }

    fn node_affinity(&mut self) -> &mut NodeAffinity {
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
    }

    /// Adds a required node selector term.
    pub fn required_term(mut self, term: NodeSelectorTerm) -> Self {
        self.node_affinity()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(term);
        self
    }

    pub fn preferred_term(mut self, weight: i32, preference: NodeSelectorTerm) -> Self {
        self.node_affinity()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm { weight, preference });
        self
    }

    pub fn pod_anti_affinity_required(mut self, key: &str, value: &str) -> Self {
        let term = PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some([(key.to_string(), value.to_string())].into()),
                ..Default::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        };
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .pod_anti_affinity = Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..Default::default()
        });
        self
    }

    pub fn scheduling_gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(PodSchedulingGate {
                name: name.to_string(),
            });
        self
    }

    /// A member of the `scheduling.k8s.io` PodGroup `group` (`spec.schedulingGroup`).
    pub fn scheduling_group(mut self, group: &str) -> Self {
        self.spec().scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(group.to_string()),
        });
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    pub fn info(self) -> PodInfo {
        PodInfo::from_pod(self.pod)
    }

    /// The pod as a node keeps it.
    pub fn assigned(self) -> AssignedPod {
        AssignedPod::new(self.pod)
    }

    pub fn arc_info(self) -> Arc<PodInfo> {
        Arc::new(self.info())
    }
}

/// A node selector term from `(key, operator, values)` expressions and `(field, operator, values)`
/// field expressions.
pub fn term(exprs: &[(&str, &str, &[&str])], fields: &[(&str, &str, &[&str])]) -> NodeSelectorTerm {
    let req = |(k, op, vals): &(&str, &str, &[&str])| NodeSelectorRequirement {
        key: k.to_string(),
        operator: op.to_string(),
        values: (!vals.is_empty()).then(|| vals.iter().map(|v| v.to_string()).collect()),
    };
    NodeSelectorTerm {
        match_expressions: (!exprs.is_empty()).then(|| exprs.iter().map(req).collect()),
        match_fields: (!fields.is_empty()).then(|| fields.iter().map(req).collect()),
    }
}

pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    pub fn new(name: &str) -> NodeBuilder {
        NodeBuilder {
            node: Node {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
                    ..Default::default()
                },
                spec: Some(NodeSpec::default()),
                status: Some(NodeStatus::default()),
            },
        }
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        set_entry(&mut self.node.metadata.labels, k, v);
        self
    }

    pub fn allocatable(mut self, list: &[(&str, &str)]) -> Self {
        self.node
            .status
            .get_or_insert_with(Default::default)
            .allocatable = Some(quantities(list));
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let t = Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.to_string(),
            time_added: None,
        };
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(t);
        self
    }

    pub fn unschedulable(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    pub fn image(mut self, names: &[&str], size: i64) -> Self {
        self.node
            .status
            .get_or_insert_with(Default::default)
            .images
            .get_or_insert_with(Vec::new)
            .push(ContainerImage {
                names: Some(names.iter().map(|s| s.to_string()).collect()),
                size_bytes: Some(size),
            });
        self
    }

    pub fn build(self) -> Node {
        self.node
    }

    /// A NodeInfo for this node holding `pods`.
    pub fn info(self, pods: Vec<Pod>) -> NodeInfo {
        NodeInfo::with_node(
            Arc::new(self.node),
            pods.into_iter().map(|p| Arc::new(AssignedPod::new(p))),
        )
    }
}

// ----- volumes: PersistentVolumes, claims, StorageClasses, CSINodes -----

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, PersistentVolumeStatus, Volume, VolumeNodeAffinity,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, StorageClass, VolumeNodeResources,
};

/// The annotation the PV controller sets on a claim once binding completed.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

impl PodBuilder {
    /// Adds a volume using the claim `claim`.
    pub fn pvc(mut self, claim: &str) -> Self {
        let n = self.spec().volumes.as_ref().map_or(0, Vec::len);
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(Volume {
                name: format!("v{n}"),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.to_string(),
                    read_only: None,
                }),
                ..Default::default()
            });
        self
    }

    /// Adds a volume of any other source.
    pub fn volume(mut self, volume: Volume) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(volume);
        self
    }
}

/// A PersistentVolume, `Available` unless told otherwise.
pub struct PvBuilder {
    pv: PersistentVolume,
}

impl PvBuilder {
    pub fn new(name: &str) -> PvBuilder {
        PvBuilder {
            pv: PersistentVolume {
                metadata: meta(name),
                spec: Some(PersistentVolumeSpec::default()),
                status: Some(PersistentVolumeStatus {
                    phase: Some("Available".into()),
                    ..Default::default()
                }),
            },
        }
    }

    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.pv.spec.get_or_insert_with(Default::default)
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        self.pv.metadata.resource_version = Some(rv.to_string());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        set_entry(&mut self.pv.metadata.labels, k, v);
        self
    }

    pub fn capacity(mut self, q: &str) -> Self {
        self.spec().capacity = Some(quantities(&[("storage", q)]));
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.to_string());
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    /// Pre-bound (or bound) to the claim `namespace/name` (empty uid: any claim of that name).
    pub fn claim_ref(mut self, namespace: &str, name: &str, uid: &str) -> Self {
        self.spec().claim_ref = Some(ObjectReference {
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        });
        self
    }

    /// Adds a required node affinity term.
    pub fn node_affinity(mut self, term: NodeSelectorTerm) -> Self {
        self.spec()
            .node_affinity
            .get_or_insert_with(VolumeNodeAffinity::default)
            .required
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(term);
        self
    }

    pub fn csi(mut self, driver: &str, handle: &str) -> Self {
        self.spec().csi = Some(CSIPersistentVolumeSource {
            driver: driver.to_string(),
            volume_handle: handle.to_string(),
            ..Default::default()
        });
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.pv.status.get_or_insert_with(Default::default).phase = Some(phase.to_string());
        self
    }

    pub fn build(self) -> PersistentVolume {
        self.pv
    }
}

/// A PersistentVolumeClaim in namespace `default` (uid = name).
pub struct PvcBuilder {
    pvc: PersistentVolumeClaim,
}

impl PvcBuilder {
    pub fn new(name: &str) -> PvcBuilder {
        PvcBuilder {
            pvc: PersistentVolumeClaim {
                metadata: namespaced_meta(name),
                spec: Some(PersistentVolumeClaimSpec::default()),
                status: Some(PersistentVolumeClaimStatus {
                    phase: Some("Pending".into()),
                    ..Default::default()
                }),
            },
        }
    }

    fn spec(&mut self) -> &mut PersistentVolumeClaimSpec {
        self.pvc.spec.get_or_insert_with(Default::default)
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.pvc.metadata.namespace = Some(ns.to_string());
        self
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        self.pvc.metadata.resource_version = Some(rv.to_string());
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        set_entry(&mut self.pvc.metadata.annotations, k, v);
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.to_string());
        self
    }

    pub fn request(mut self, q: &str) -> Self {
        self.spec().resources = Some(VolumeResourceRequirements {
            requests: Some(quantities(&[("storage", q)])),
            ..Default::default()
        });
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    /// Names a volume without the bind-completed annotation (pre-bound, not yet bound).
    pub fn volume_name(mut self, pv: &str) -> Self {
        self.spec().volume_name = Some(pv.to_string());
        self
    }

    /// Fully bound to `pv`, as the PV controller leaves a claim.
    pub fn bound(self, pv: &str) -> Self {
        self.volume_name(pv)
            .annotation(ANN_BIND_COMPLETED, "yes")
            .phase("Bound")
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.pvc.status.get_or_insert_with(Default::default).phase = Some(phase.to_string());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.pvc.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        self
    }

    pub fn build(self) -> PersistentVolumeClaim {
        self.pvc
    }
}

/// A StorageClass; `mode` is its `volumeBindingMode` (None: unset).
pub fn storage_class(name: &str, provisioner: &str, mode: Option<&str>) -> StorageClass {
    StorageClass {
        metadata: meta(name),
        provisioner: provisioner.to_string(),
        volume_binding_mode: mode.map(str::to_string),
        ..Default::default()
    }
}

/// A CSINode with `(driver, allocatable count)` drivers.
pub fn csi_node(name: &str, drivers: &[(&str, Option<i32>)]) -> CSINode {
    CSINode {
        metadata: meta(name),
        spec: CSINodeSpec {
            drivers: drivers
                .iter()
                .map(|(d, count)| CSINodeDriver {
                    name: d.to_string(),
                    node_id: name.to_string(),
                    allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
                    topology_keys: None,
                })
                .collect(),
        },
        status: None,
    }
}

// ----- snapshots -----

use crate::framework::types::Snapshot;

/// A snapshot of plain nodes named `names`.
pub fn snapshot_of(names: &[&str]) -> Snapshot {
    snapshot_with(names.iter().map(|n| NodeBuilder::new(n).build()), [])
}

/// A snapshot of `nodes` and `pods`.
pub fn snapshot_with(
    nodes: impl IntoIterator<Item = Node>,
    pods: impl IntoIterator<Item = Pod>,
) -> Snapshot {
    let nodes: Vec<Arc<Node>> = nodes.into_iter().map(Arc::new).collect();
    let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
    Snapshot::from_objects(&nodes, &pods)
}

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// n1 and n2 in zone a, n3 in zone b, n4 without a zone label.
pub fn zone_nodes() -> Vec<Node> {
    vec![
        NodeBuilder::new("n1").label(ZONE, "a").build(),
        NodeBuilder::new("n2").label(ZONE, "a").build(),
        NodeBuilder::new("n3").label(ZONE, "b").build(),
        NodeBuilder::new("n4").build(),
    ]
}

// ----- pod affinity terms and topology spread constraints -----

use crate::framework::listers::NAMESPACES;
use k8s_openapi::api::core::v1::{PodAffinity, TopologySpreadConstraint, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, OwnerReference};

/// A label selector with `matchLabels` and `(key, operator, values)` expressions.
pub fn label_selector(
    match_labels: &[(&str, &str)],
    exprs: &[(&str, &str, &[&str])],
) -> LabelSelector {
    LabelSelector {
        match_labels: (!match_labels.is_empty()).then(|| string_map(match_labels)),
        match_expressions: (!exprs.is_empty()).then(|| {
            exprs
                .iter()
                .map(|(k, op, vals)| LabelSelectorRequirement {
                    key: k.to_string(),
                    operator: op.to_string(),
                    values: (!vals.is_empty())
                        .then(|| vals.iter().map(|v| v.to_string()).collect()),
                })
                .collect()
        }),
    }
}

/// A pod affinity term selecting `match_labels` in the pod's own namespace over `topology_key`.
pub fn pod_term(match_labels: &[(&str, &str)], topology_key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(label_selector(match_labels, &[])),
        topology_key: topology_key.to_string(),
        ..Default::default()
    }
}

/// A topology spread constraint selecting `match_labels` (`None`: no selector at all).
pub fn spread_constraint(
    max_skew: i32,
    topology_key: &str,
    when_unsatisfiable: &str,
    match_labels: Option<&[(&str, &str)]>,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: topology_key.to_string(),
        when_unsatisfiable: when_unsatisfiable.to_string(),
        label_selector: match_labels.map(|l| label_selector(l, &[])),
        ..Default::default()
    }
}

impl PodBuilder {
    fn pod_affinity_spec(&mut self) -> &mut PodAffinity {
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
    }

    fn pod_anti_affinity_spec(&mut self) -> &mut PodAntiAffinity {
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
    }

    /// Adds a required pod affinity term.
    pub fn required_pod_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod_affinity_spec()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    /// Adds a required pod anti-affinity term.
    pub fn required_pod_anti_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod_anti_affinity_spec()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    /// Adds a preferred pod affinity term.
    pub fn preferred_pod_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod_affinity_spec()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term,
            });
        self
    }

    /// Adds a preferred pod anti-affinity term.
    pub fn preferred_pod_anti_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod_anti_affinity_spec()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term,
            });
        self
    }

    /// Adds a topology spread constraint.
    pub fn spread(mut self, c: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(c);
        self
    }

    /// Sets the controlling owner (`apps/v1 ReplicaSet`, `v1 ReplicationController`...).
    pub fn controller(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        self.pod
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(OwnerReference {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                name: name.to_string(),
                uid: format!("{name}-uid"),
                controller: Some(true),
                ..Default::default()
            });
        self
    }

    /// Marks the pod as being deleted.
    pub fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        self
    }
}
