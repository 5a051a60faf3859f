//! Builders for the objects a case creates, as JSON: every object carries the fidelity label so a
//! run can wipe what the last one left.

use serde_json::{Map, Value, json};

use crate::cases::{FIDELITY_LABEL, SCHEDULER_NAME};

pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// When existing pods started (preemption prefers nodes whose victims started last).
const START_BASE: &str = "2025-01-01T00:";

fn meta(name: &str, ns: Option<&str>, labels: &Map<String, Value>) -> Value {
    let mut labels = labels.clone();
    labels.insert(FIDELITY_LABEL.into(), json!("case"));
    let mut m = json!({"name": name, "labels": labels});
    if let Some(ns) = ns {
        m["namespace"] = json!(ns);
    }
    m
}

/// A node: 4 CPUs, 8Gi, 110 pods unless changed; `kubernetes.io/hostname` set.
#[derive(Debug, Clone)]
pub struct NodeB {
    name: String,
    labels: Map<String, Value>,
    alloc: Map<String, Value>,
    taints: Vec<Value>,
    images: Vec<Value>,
    unschedulable: bool,
    declared_features: Vec<String>,
}

pub fn node(name: &str) -> NodeB {
    let mut labels = Map::new();
    labels.insert("kubernetes.io/hostname".into(), json!(name));
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    let mut alloc = Map::new();
    alloc.insert("cpu".into(), json!("4"));
    alloc.insert("memory".into(), json!("8Gi"));
    alloc.insert("pods".into(), json!("110"));
    NodeB {
        name: name.into(),
        labels,
        alloc,
        taints: Vec::new(),
        images: Vec::new(),
        unschedulable: false,
        declared_features: Vec::new(),
    }
}

impl NodeB {
    pub fn cpu(mut self, cpu: &str) -> Self {
        self.alloc.insert("cpu".into(), json!(cpu));
        self
    }
    pub fn memory(mut self, m: &str) -> Self {
        self.alloc.insert("memory".into(), json!(m));
        self
    }
    pub fn pods(mut self, n: u32) -> Self {
        self.alloc.insert("pods".into(), json!(n.to_string()));
        self
    }
    pub fn alloc(mut self, name: &str, q: &str) -> Self {
        self.alloc.insert(name.into(), json!(q));
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), json!(v));
        self
    }
    pub fn zone(self, z: &str) -> Self {
        self.label("topology.kubernetes.io/zone", z)
    }
    /// Adds a taint; one with the same key and effect is replaced (the API allows one).
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints
            .retain(|t| !(t["key"] == key && t["effect"] == effect));
        let mut t = json!({"key": key, "effect": effect});
        if !value.is_empty() {
            t["value"] = json!(value);
        }
        self.taints.push(t);
        self
    }
    pub fn image(mut self, name: &str, bytes: i64) -> Self {
        self.images
            .push(json!({"names": [name], "sizeBytes": bytes}));
        self
    }
    pub fn unschedulable(mut self) -> Self {
        self.unschedulable = true;
        self
    }
    /// Declares `feature` in `status.declaredFeatures` (which the API server wants sorted).
    pub fn declared_feature(mut self, feature: &str) -> Self {
        self.declared_features.push(feature.into());
        self.declared_features.sort();
        self.declared_features.dedup();
        self
    }
    pub fn build(&self) -> Value {
        let mut spec = json!({});
        if !self.taints.is_empty() {
            spec["taints"] = json!(self.taints);
        }
        if self.unschedulable {
            spec["unschedulable"] = json!(true);
        }
        let mut status = json!({
            "allocatable": self.alloc,
            "capacity": self.alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "fidelity"}],
            "phase": "Running",
        });
        if !self.images.is_empty() {
            status["images"] = json!(self.images);
        }
        if !self.declared_features.is_empty() {
            status["declaredFeatures"] = json!(self.declared_features);
        }
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": meta(&self.name, None, &self.labels),
            "spec": spec, "status": status})
    }
}

/// A pod with one container; existing pods get `on(node)` and a start time.
#[derive(Debug, Clone)]
pub struct PodB {
    name: String,
    ns: String,
    labels: Map<String, Value>,
    spec: Value,
    start_minute: Option<u32>,
}

pub fn pod(name: &str) -> PodB {
    PodB {
        name: name.into(),
        ns: "fid-a".into(),
        labels: Map::new(),
        spec: json!({
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": PAUSE_IMAGE}],
        }),
        start_minute: None,
    }
}

impl PodB {
    pub fn ns(mut self, ns: &str) -> Self {
        self.ns = ns.into();
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), json!(v));
        self
    }
    /// Bound to `node` (an existing pod), started at minute `start` of the base hour.
    pub fn on(mut self, node: &str, start: u32) -> Self {
        self.spec["nodeName"] = json!(node);
        self.start_minute = Some(start);
        self
    }
    /// Requests of the first container (`cpu`, `memory` may be empty for none).
    pub fn req(self, cpu: &str, memory: &str) -> Self {
        let mut r = Map::new();
        if !cpu.is_empty() {
            r.insert("cpu".into(), json!(cpu));
        }
        if !memory.is_empty() {
            r.insert("memory".into(), json!(memory));
        }
        self.requests(Value::Object(r))
    }
    pub fn requests(mut self, r: Value) -> Self {
        self.spec["containers"][0]["resources"] = json!({"requests": r});
        self
    }
    /// Sets `spec[field]`.
    pub fn set(mut self, field: &str, v: Value) -> Self {
        self.spec[field] = v;
        self
    }
    /// Sets `containers[0][field]`.
    pub fn container(mut self, field: &str, v: Value) -> Self {
        self.spec["containers"][0][field] = v;
        self
    }
    /// A member of the PodGroup `group` (in the pod's namespace).
    pub fn group(self, group: &str) -> Self {
        self.set("schedulingGroup", json!({"podGroupName": group}))
    }
    pub fn priority(self, class: &str) -> Self {
        self.set("priorityClassName", json!(class))
    }
    pub fn build(&self) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": meta(&self.name, Some(&self.ns), &self.labels),
            "spec": self.spec});
        if let Some(m) = self.start_minute {
            p["status"] = json!({"phase": "Running",
                "startTime": format!("{START_BASE}{:02}:00Z", m % 60)});
        }
        p
    }
}

/// A `scheduling.k8s.io/v1beta1` PodGroup: a gang of `min_count`, or a basic group (`None`).
pub fn pod_group(
    name: &str,
    ns: &str,
    min_count: Option<i32>,
    disruption_all: bool,
    priority_class: Option<&str>,
) -> Value {
    let policy = match min_count {
        Some(m) => json!({"gang": {"minCount": m}}),
        None => json!({"basic": {}}),
    };
    let mut spec = json!({"schedulingPolicy": policy});
    if disruption_all {
        spec["disruptionMode"] = json!({"all": {}});
    }
    if let Some(class) = priority_class {
        spec["priorityClassName"] = json!(class);
    }
    json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": meta(name, Some(ns), &Map::new()), "spec": spec})
}

/// `group` (a PodGroup) with its members confined to one domain of the node label `key`
/// (`schedulingConstraints.topology`, TopologyAwareWorkloadScheduling).
pub fn topology_constrained(mut group: Value, key: &str) -> Value {
    group["spec"]["schedulingConstraints"] = json!({"topology": [{"key": key}]});
    group
}

pub fn priority_class(name: &str, value: i32, never: bool) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": meta(name, None, &Map::new()), "value": value,
        "preemptionPolicy": if never { "Never" } else { "PreemptLowerPriority" }})
}

/// A PDB over pods labelled `app=<app>` in `ns`, allowing `allowed` disruptions.
pub fn pdb(name: &str, ns: &str, app: &str, allowed: i32) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(name, Some(ns), &Map::new()),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1, "observedGeneration": 1}})
}

pub fn storage_class(name: &str, provisioner: &str, wait_for_consumer: bool) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": meta(name, None, &Map::new()), "provisioner": provisioner,
        "volumeBindingMode": if wait_for_consumer { "WaitForFirstConsumer" } else { "Immediate" }})
}

/// A PV of `class` (empty: none) with `size`, `modes`, optionally a node affinity (one term,
/// `key In values`) and zone labels; `claim` pre-binds it to `ns/name`.
pub fn pv(
    name: &str,
    class: &str,
    size: &str,
    modes: &[&str],
    affinity: Option<(&str, &[&str])>,
    labels: &[(&str, &str)],
    claim: Option<(&str, &str)>,
) -> Value {
    let l: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut spec = json!({"capacity": {"storage": size}, "accessModes": modes,
        "persistentVolumeReclaimPolicy": "Retain",
        "csi": {"driver": "fidelity.csi.example.com", "volumeHandle": name}});
    if !class.is_empty() {
        spec["storageClassName"] = json!(class);
    }
    if let Some((key, values)) = affinity {
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}});
    }
    let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": meta(name, None, &l), "spec": spec});
    if let Some((ns, c)) = claim {
        v["spec"]["claimRef"] = json!({"namespace": ns, "name": c});
        v["status"] = json!({"phase": "Bound"});
    } else {
        v["status"] = json!({"phase": "Available"});
    }
    v
}

/// A claim in `ns` of `class` for `size`; `volume` binds it (status Bound).
pub fn pvc(
    name: &str,
    ns: &str,
    class: &str,
    size: &str,
    modes: &[&str],
    volume: Option<&str>,
) -> Value {
    let mut spec = json!({"accessModes": modes, "resources": {"requests": {"storage": size}},
        "storageClassName": class});
    let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": meta(name, Some(ns), &Map::new())});
    if let Some(pvname) = volume {
        spec["volumeName"] = json!(pvname);
        v["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
        v["status"] = json!({"phase": "Bound", "accessModes": modes,
            "capacity": {"storage": size}});
    }
    v["spec"] = spec;
    v
}

pub fn csi_node(node: &str, driver: &str, limit: Option<i32>) -> Value {
    csi_node_drivers(node, &[(driver, limit)])
}

/// The CSINode of `node` listing `drivers` (none: a node without any CSI driver installed), each
/// with its attach limit if given.
pub fn csi_node_drivers(node: &str, drivers: &[(&str, Option<i32>)]) -> Value {
    let drivers: Vec<Value> = drivers
        .iter()
        .map(|(driver, limit)| {
            let mut d = json!({"name": driver, "nodeID": node, "topologyKeys": null});
            if let Some(l) = limit {
                d["allocatable"] = json!({"count": l});
            }
            d
        })
        .collect();
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": meta(node, None, &Map::new()), "spec": {"drivers": drivers}})
}

pub fn csi_driver(name: &str) -> Value {
    csi_driver_with(name, &[])
}

/// A CSIDriver with `fields` set in its spec besides the attach defaults (`storageCapacity`,
/// `preventPodSchedulingIfMissing`).
pub fn csi_driver_with(name: &str, fields: &[(&str, bool)]) -> Value {
    let mut spec = json!({"attachRequired": true, "podInfoOnMount": false});
    for (field, value) in fields {
        spec[*field] = json!(value);
    }
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": meta(name, None, &Map::new()), "spec": spec})
}

/// A CSIStorageCapacity in `fid-a`: `capacity` of `class` on the nodes labelled `key=value`, and
/// the largest volume it can make if given (what the filter compares a claim with).
pub fn storage_capacity(
    name: &str,
    class: &str,
    (key, value): (&str, &str),
    capacity: &str,
    maximum_volume_size: Option<&str>,
) -> Value {
    let mut c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": meta(name, Some("fid-a"), &Map::new()), "storageClassName": class,
        "nodeTopology": {"matchLabels": {key: value}}, "capacity": capacity});
    if let Some(max) = maximum_volume_size {
        c["maximumVolumeSize"] = json!(max);
    }
    c
}

/// The DRA driver of the `dra` family's devices.
pub const DRA_DRIVER: &str = "gpu.example.com";

/// A DeviceClass selecting `DRA_DRIVER`'s devices, and those matching `selector` (CEL) if given.
pub fn device_class(name: &str, selector: Option<&str>) -> Value {
    let mut selectors =
        vec![json!({"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}})];
    if let Some(s) = selector {
        selectors.push(json!({"cel": {"expression": s}}));
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": meta(name, None, &Map::new()), "spec": {"selectors": selectors}})
}

/// The ResourceSlice publishing `devices` (name, model, memory in Gi) of `node`, one pool per node.
pub fn resource_slice(node: &str, devices: &[(String, &str, u32)]) -> Value {
    let devices: Vec<Value> = devices
        .iter()
        .map(|(name, model, gi)| {
            json!({"name": name,
                "attributes": {"model": {"string": model}},
                "capacity": {"memory": {"value": format!("{gi}Gi")}}})
        })
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": meta(&format!("{node}-gpus"), None, &Map::new()),
        "spec": {"driver": DRA_DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices}})
}

/// A ResourceClaim in `fid-a` with one request `gpu` of `class`: `count` devices (None: All),
/// and those matching `selector` (CEL) if given.
pub fn resource_claim(
    name: &str,
    class: &str,
    count: Option<u32>,
    selector: Option<&str>,
) -> Value {
    let mut exactly = json!({"deviceClassName": class});
    match count {
        Some(n) => {
            exactly["allocationMode"] = json!("ExactCount");
            exactly["count"] = json!(n);
        }
        None => exactly["allocationMode"] = json!("All"),
    }
    if let Some(s) = selector {
        exactly["selectors"] = json!([{"cel": {"expression": s}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": meta(name, Some("fid-a"), &Map::new()),
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
}

impl PodB {
    /// Uses ResourceClaim `claim` (in the pod's namespace) in its first container.
    pub fn claim(self, claim: &str) -> Self {
        self.set(
            "resourceClaims",
            json!([{"name": "gpu", "resourceClaimName": claim}]),
        )
        .container("resources", json!({"claims": [{"name": "gpu"}]}))
    }
}

fn slice_object(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": meta(name, None, &Map::new()), "spec": spec})
}

/// A partitionable pool of `node` (two slices): a counter set of `total_gi` of memory, and
/// `parts` (name, Gi) that each consume their memory from it.
pub fn partitioned_slices(node: &str, total_gi: u32, parts: &[(String, u32)]) -> Vec<Value> {
    let pool = json!({"name": format!("{node}-parts"), "generation": 1, "resourceSliceCount": 2});
    let devices: Vec<Value> = parts
        .iter()
        .map(|(name, gi)| {
            json!({"name": name, "attributes": {"model": {"string": "a100"}},
                "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": format!("{gi}Gi")}}}]})
        })
        .collect();
    vec![
        slice_object(
            &format!("{node}-counters"),
            json!({"driver": DRA_DRIVER, "nodeName": node, "pool": pool,
                "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": format!("{total_gi}Gi")}}}]}),
        ),
        slice_object(
            &format!("{node}-parts"),
            json!({"driver": DRA_DRIVER, "nodeName": node, "pool": pool, "devices": devices}),
        ),
    ]
}

/// One device of `node` that claims share: `gi` of memory, taken in steps of `step_gi`.
pub fn shared_slice(node: &str, gi: u32, step_gi: u32) -> Value {
    slice_object(
        &format!("{node}-shared"),
        json!({"driver": DRA_DRIVER, "nodeName": node,
            "pool": {"name": format!("{node}-shared"), "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "shared", "attributes": {"model": {"string": "a100"}},
                "allowMultipleAllocations": true,
                "capacity": {"memory": {"value": format!("{gi}Gi"), "requestPolicy": {
                    "default": format!("{step_gi}Gi"),
                    "validRange": {"min": format!("{step_gi}Gi"), "step": format!("{step_gi}Gi")}}}}}]}),
    )
}

/// A ResourceClaim in `fid-a` for one device of `class` taking `gi` of its memory.
pub fn capacity_claim(name: &str, class: &str, gi: u32) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": meta(name, Some("fid-a"), &Map::new()),
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class,
            "capacity": {"requests": {"memory": format!("{gi}Gi")}}}}]}}})
}
