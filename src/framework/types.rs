//! The data the framework schedules against: [`PodInfo`], [`NodeInfo`], [`Resource`] arithmetic
//! and the [`Snapshot`] of all nodes a scheduling cycle sees.
//!
//! Resource requests are computed once per pod ([`PodInfo::new`]) as upstream's
//! `resourcehelper.PodRequests` does; a `NodeInfo` keeps running sums so Filter and Score never
//! re-walk a node's pods. The snapshot is updated incrementally by the scheduler's cache: only
//! `NodeInfo`s whose generation changed are replaced ([`Snapshot::update_from`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerStatus, Node, NodeSelectorTerm, Pod, PodSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use super::assigned_pod::{AssignedPod, PodView};
use super::assigned_pod::{has_pod_affinity, has_required_anti_affinity};
use crate::quantity;

/// The CPU request assumed for scoring a container that requests none (upstream's
/// `DefaultMilliCPURequest`, 0.1 core).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory request assumed for scoring a container that requests none (upstream's
/// `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const RESOURCE_PODS: &str = "pods";

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A process-wide increasing generation number (upstream's `nextGeneration`).
pub fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed) + 1
}

/// Whether a resource is kept in [`Resource::scalar_resources`]: extended resources
/// (`example.com/gpu`), `hugepages-*`, `attachable-volumes-*` and prefixed native resources
/// (`kubernetes.io/...`) — upstream's `IsScalarResourceName`.
pub fn is_scalar_resource_name(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("requests."))
}

/// An amount of compute resources in the units the scheduler computes with: millicores, bytes,
/// counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar_resources: BTreeMap<String, i64>,
}

impl Resource {
    /// Sums a resource list (`requests`, `allocatable`...). Unparseable quantities (the API server
    /// never lets one through) are logged and count as zero.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resource {
        let mut r = Resource::default();
        r.add_list(list);
        r
    }

    pub fn add_list(&mut self, list: &BTreeMap<String, Quantity>) {
        for (name, q) in list {
            self.add_named(name, parse_or_zero(name, q));
        }
    }

    /// Adds `v` (millicores for cpu, else units) to resource `name`.
    pub fn add_named(&mut self, name: &str, v: i64) {
        match name {
            RESOURCE_CPU => self.milli_cpu += v,
            RESOURCE_MEMORY => self.memory += v,
            RESOURCE_PODS => self.allowed_pod_number += v,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage += v,
            _ if is_scalar_resource_name(name) => {
                *self.scalar_resources.entry(name.to_string()).or_insert(0) += v;
            }
            _ => {}
        }
    }

    /// Sets resource `name` to `v` (a present entry, even zero, is kept).
    pub fn set_named(&mut self, name: &str, v: i64) {
        match name {
            RESOURCE_CPU => self.milli_cpu = v,
            RESOURCE_MEMORY => self.memory = v,
            RESOURCE_PODS => self.allowed_pod_number = v,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            _ if is_scalar_resource_name(name) => {
                self.scalar_resources.insert(name.to_string(), v);
            }
            _ => {}
        }
    }

    /// The amount of resource `name` (millicores for cpu).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            RESOURCE_CPU => self.milli_cpu,
            RESOURCE_MEMORY => self.memory,
            RESOURCE_PODS => self.allowed_pod_number,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self.scalar_resources.get(name).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (k, v) in &other.scalar_resources {
            *self.scalar_resources.entry(k.clone()).or_insert(0) += v;
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (k, v) in &other.scalar_resources {
            *self.scalar_resources.entry(k.clone()).or_insert(0) -= v;
        }
    }

    /// Per-resource maximum of the two.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let e = self.scalar_resources.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar_resources.values().all(|v| *v == 0)
    }
}

fn parse_or_zero(name: &str, q: &Quantity) -> i64 {
    match quantity::resource_value(name, q) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(resource = name, quantity = %q.0, error = %e, "ignoring unparseable quantity");
            0
        }
    }
}

/// A resource list in computing units, remembering which names were present (upstream's
/// non-missing logic distinguishes "absent" from "zero").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ResList {
    values: BTreeMap<String, i64>,
}

impl ResList {
    fn from_quantities(list: Option<&BTreeMap<String, Quantity>>) -> ResList {
        let mut values = BTreeMap::new();
        if let Some(list) = list {
            for (name, q) in list {
                values.insert(name.clone(), parse_or_zero(name, q));
            }
        }
        ResList { values }
    }

    fn add(&mut self, other: &ResList) {
        for (k, v) in &other.values {
            *self.values.entry(k.clone()).or_insert(0) += v;
        }
    }

    fn max(&mut self, other: &ResList) {
        for (k, v) in &other.values {
            let e = self.values.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    }

    fn with_defaults(mut self, defaults: &[(&str, i64)]) -> ResList {
        for (k, v) in defaults {
            self.values.entry((*k).to_string()).or_insert(*v);
        }
        self
    }

    fn to_resource(&self) -> Resource {
        let mut r = Resource::default();
        for (k, v) in &self.values {
            r.add_named(k, *v);
        }
        r
    }
}

fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn is_supported_pod_level_resource(name: &str) -> bool {
    name == RESOURCE_CPU || name == RESOURCE_MEMORY || name.starts_with("hugepages-")
}

fn is_pod_resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
}

fn find_container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)
}

#[derive(Clone, Copy)]
enum RequestSource {
    Spec,
    Allocated,
    Actuated,
}

/// The requests one container contributes, from the spec or its status (in-place resize).
fn container_requests(
    c: &Container,
    status: Option<&ContainerStatus>,
    source: RequestSource,
    resize_infeasible: bool,
) -> Option<ResList> {
    let spec = || c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let list = match source {
        RequestSource::Spec => spec(),
        RequestSource::Allocated => match status.and_then(|s| s.allocated_resources.as_ref()) {
            Some(a) => Some(a),
            None if resize_infeasible => return None,
            None => spec(),
        },
        RequestSource::Actuated => {
            if let Some(r) = status
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
            {
                Some(r)
            } else if let Some(a) = status.and_then(|s| s.allocated_resources.as_ref()) {
                Some(a)
            } else if resize_infeasible {
                return None;
            } else {
                spec()
            }
        }
    };
    Some(ResList::from_quantities(list))
}

/// Upstream's `aggregateContainerResourcesByFn`: containers summed, restartable init containers
/// (sidecars) summed into both the total and every later init container, then the max with the
/// largest init container.
fn aggregate_containers(
    pod: &Pod,
    spec: &PodSpec,
    source: RequestSource,
    non_missing: &[(&str, i64)],
) -> ResList {
    let resize_infeasible = is_pod_resize_infeasible(pod);
    let use_status = !matches!(source, RequestSource::Spec);
    let get = |c: &Container| -> ResList {
        let status = if use_status {
            find_container_status(pod, &c.name)
        } else {
            None
        };
        let list = container_requests(c, status, source, resize_infeasible).unwrap_or_default();
        if non_missing.is_empty() {
            list
        } else {
            list.with_defaults(non_missing)
        }
    };
    let mut result = ResList::default();
    for c in &spec.containers {
        result.add(&get(c));
    }
    let mut restartable = ResList::default();
    let mut init_max = ResList::default();
    for c in spec.init_containers.iter().flatten() {
        let r = get(c);
        let effective = if is_restartable_init_container(c) {
            result.add(&r);
            restartable.add(&r);
            restartable.clone()
        } else {
            let mut combined = r;
            combined.add(&restartable);
            combined
        };
        init_max.max(&effective);
    }
    result.max(&init_max);
    result
}

/// Upstream's `resourcehelper.PodRequests` with in-place resize (status resources) and pod-level
/// resources on, as in Kubernetes 1.36: max(spec, allocated, actuated) per container aggregate,
/// pod-level requests for cpu/memory/hugepages, plus overhead.
fn pod_requests(pod: &Pod, non_missing: &[(&str, i64)]) -> ResList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResList::default();
    };
    let spec_reqs = aggregate_containers(pod, spec, RequestSource::Spec, non_missing);
    let allocated = aggregate_containers(pod, spec, RequestSource::Allocated, non_missing);
    let actuated = aggregate_containers(pod, spec, RequestSource::Actuated, non_missing);
    let mut reqs = if is_pod_resize_infeasible(pod) {
        let mut r = actuated;
        r.max(&allocated);
        r
    } else {
        let mut r = spec_reqs;
        r.max(&actuated);
        r.max(&allocated);
        r
    };
    if let Some(pod_level) = pod_level_requests(spec) {
        for (name, q) in pod_level {
            if is_supported_pod_level_resource(name) {
                reqs.values.insert(name.clone(), parse_or_zero(name, q));
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&ResList::from_quantities(Some(overhead)));
    }
    reqs
}

/// The pod-level requests when at least one supported resource is set there.
fn pod_level_requests(spec: &PodSpec) -> Option<&BTreeMap<String, Quantity>> {
    let reqs = spec.resources.as_ref()?.requests.as_ref()?;
    reqs.keys()
        .any(|k| is_supported_pod_level_resource(k))
        .then_some(reqs)
}

/// The pod's requests as upstream 1.36 scores them for NodeResourcesFit: its containers' (missing
/// cpu/memory count as the non-zero defaults) plus overhead, without pod-level resources or
/// in-place resize status. Upstream builds that plugin's scorer without those features (unlike
/// its filter and NodeResourcesBalancedAllocation), so a pod-level request does not move its score.
pub fn fit_scoring_requests(pod: &Pod) -> Resource {
    let Some(spec) = pod.spec.as_ref() else {
        return Resource::default();
    };
    let non_missing = [
        (RESOURCE_CPU, DEFAULT_MILLI_CPU_REQUEST),
        (RESOURCE_MEMORY, DEFAULT_MEMORY_REQUEST),
    ];
    let mut reqs = aggregate_containers(pod, spec, RequestSource::Spec, &non_missing);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&ResList::from_quantities(Some(overhead)));
    }
    reqs.to_resource()
}

/// Computes (requests, non-zero cpu, non-zero memory) as upstream's `PodInfo.CalculateResource`.
pub fn calculate_pod_resource(pod: &Pod) -> (Resource, i64, i64) {
    let requests = pod_requests(pod, &[]);
    let pod_level_set = pod.spec.as_ref().and_then(pod_level_requests).is_some();
    let mut non_missing: Vec<(&str, i64)> = Vec::with_capacity(2);
    if !pod_level_set || !requests.values.contains_key(RESOURCE_CPU) {
        non_missing.push((RESOURCE_CPU, DEFAULT_MILLI_CPU_REQUEST));
    }
    if !pod_level_set || !requests.values.contains_key(RESOURCE_MEMORY) {
        non_missing.push((RESOURCE_MEMORY, DEFAULT_MEMORY_REQUEST));
    }
    let non_zero = if non_missing.is_empty() {
        requests.clone()
    } else {
        pod_requests(pod, &non_missing)
    };
    let non0_cpu = non_zero.values.get(RESOURCE_CPU).copied().unwrap_or(0);
    let non0_mem = non_zero.values.get(RESOURCE_MEMORY).copied().unwrap_or(0);
    (requests.to_resource(), non0_cpu, non0_mem)
}

/// One host port a pod uses, sanitized: empty IP is `0.0.0.0`, empty protocol is `TCP`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

pub const DEFAULT_BIND_ALL_HOST_IP: &str = "0.0.0.0";

impl HostPort {
    pub fn new(ip: &str, protocol: &str, port: i32) -> HostPort {
        HostPort {
            ip: if ip.is_empty() {
                DEFAULT_BIND_ALL_HOST_IP.to_string()
            } else {
                ip.to_string()
            },
            protocol: if protocol.is_empty() {
                "TCP".to_string()
            } else {
                protocol.to_string()
            },
            port,
        }
    }
}

/// The host ports of a pod's containers and restartable init containers (upstream's
/// `GetHostPorts`), only those with `hostPort > 0`.
pub fn pod_host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let hp = p.host_port.unwrap_or(0);
            (hp > 0).then(|| {
                HostPort::new(
                    p.host_ip.as_deref().unwrap_or(""),
                    p.protocol.as_deref().unwrap_or(""),
                    hp,
                )
            })
        })
        .collect()
}

/// The host ports in use on a node, with upstream's conflict rules (`HostPortInfo`): `0.0.0.0`
/// conflicts with the same protocol/port on any IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPortInfo {
    // (ip, protocol, port) -> number of users; nodes use few host ports, a small map is enough.
    used: HashMap<HostPort, u32>,
}

impl HostPortInfo {
    pub fn add(&mut self, p: &HostPort) {
        if p.port <= 0 {
            return;
        }
        *self.used.entry(p.clone()).or_insert(0) += 1;
    }

    pub fn remove(&mut self, p: &HostPort) {
        if let Some(n) = self.used.get_mut(p) {
            *n -= 1;
            if *n == 0 {
                self.used.remove(p);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.used.len()
    }

    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    /// Whether `p` conflicts with a port in use.
    pub fn check_conflict(&self, p: &HostPort) -> bool {
        if p.port <= 0 {
            return false;
        }
        if p.ip == DEFAULT_BIND_ALL_HOST_IP {
            return self
                .used
                .keys()
                .any(|u| u.protocol == p.protocol && u.port == p.port);
        }
        self.used.keys().any(|u| {
            u.protocol == p.protocol
                && u.port == p.port
                && (u.ip == p.ip || u.ip == DEFAULT_BIND_ALL_HOST_IP)
        })
    }
}

/// A pod with what the scheduler computes from it once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// Requests as upstream's `PodRequests` computes them (containers, sidecars, init containers,
    /// pod-level resources, overhead).
    pub requests: Resource,
    /// CPU request for scoring: containers that request none count as 100m.
    pub non_zero_cpu: i64,
    /// Memory request for scoring: containers that request none count as 200Mi.
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    has_affinity: bool,
    has_required_anti_affinity: bool,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let (requests, non_zero_cpu, non_zero_memory) = calculate_pod_resource(&pod);
        let host_ports = pod_host_ports(&pod);
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let has_affinity = has_pod_affinity(affinity);
        let has_required_anti_affinity = has_required_anti_affinity(affinity);
        PodInfo {
            pod,
            requests,
            non_zero_cpu,
            non_zero_memory,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
        }
    }

    pub fn from_pod(pod: Pod) -> PodInfo {
        PodInfo::new(Arc::new(pod))
    }

    pub fn name(&self) -> &str {
        self.pod.name()
    }

    pub fn namespace(&self) -> &str {
        self.pod.namespace()
    }

    pub fn uid(&self) -> &str {
        self.pod.uid()
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    pub fn spec(&self) -> Option<&PodSpec> {
        self.pod.spec.as_ref()
    }

    /// `.spec.priority`, 0 when unset (upstream's `PodPriority`).
    pub fn priority(&self) -> i32 {
        self.spec().and_then(|s| s.priority).unwrap_or(0)
    }

    pub fn node_name(&self) -> &str {
        self.spec()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    pub fn scheduler_name(&self) -> &str {
        self.spec()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("")
    }

    pub fn nominated_node_name(&self) -> &str {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .unwrap_or("")
    }

    pub fn tolerations(&self) -> &[Toleration] {
        self.spec()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[])
    }

    pub fn affinity(&self) -> Option<&Affinity> {
        self.spec().and_then(|s| s.affinity.as_ref())
    }

    /// The required node affinity terms (`requiredDuringSchedulingIgnoredDuringExecution`).
    pub fn required_node_affinity_terms(&self) -> Option<&[NodeSelectorTerm]> {
        self.affinity()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|s| s.node_selector_terms.as_slice())
    }

    pub fn node_selector(&self) -> Option<&BTreeMap<String, String>> {
        self.spec().and_then(|s| s.node_selector.as_ref())
    }

    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.pod.labels()
    }

    /// Whether the pod has pod affinity or anti-affinity.
    pub fn has_affinity(&self) -> bool {
        self.has_affinity
    }

    pub fn has_required_anti_affinity(&self) -> bool {
        self.has_required_anti_affinity
    }

    /// The container images (containers and init containers).
    pub fn images(&self) -> impl Iterator<Item = &str> {
        self.spec()
            .into_iter()
            .flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
            })
            .filter_map(|c| c.image.as_deref())
    }
}

/// The size of an image and the number of nodes that have it, shared between the scheduler's
/// cache and every `NodeInfo` holding the image (upstream shares the same pointer).
#[derive(Debug, Default)]
pub struct ImageStateSummary {
    pub size: i64,
    num_nodes: AtomicUsize,
}

impl ImageStateSummary {
    pub fn new(size: i64, num_nodes: usize) -> ImageStateSummary {
        ImageStateSummary {
            size,
            num_nodes: AtomicUsize::new(num_nodes),
        }
    }

    /// How many nodes have this image.
    pub fn num_nodes(&self) -> usize {
        self.num_nodes.load(Ordering::Relaxed)
    }
}

/// The image bookkeeping the cache keeps across nodes (upstream's `cache.imageStates`).
#[derive(Debug, Default)]
pub struct ImageStates {
    images: HashMap<String, (Arc<ImageStateSummary>, HashSet<String>)>,
}

impl ImageStates {
    /// Records `node`'s images and returns its per-node image map.
    pub fn add_node(&mut self, node: &Node) -> HashMap<String, Arc<ImageStateSummary>> {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let mut out = HashMap::new();
        let images = node.status.as_ref().and_then(|s| s.images.as_ref());
        for image in images.into_iter().flatten() {
            let size = image.size_bytes.unwrap_or(0);
            for name in image.names.iter().flatten() {
                let (summary, nodes) = self
                    .images
                    .entry(name.clone())
                    .or_insert_with(|| (Arc::new(ImageStateSummary::new(size, 0)), HashSet::new()));
                if nodes.insert(node_name.clone()) {
                    summary.num_nodes.fetch_add(1, Ordering::Relaxed);
                }
                out.entry(name.clone()).or_insert_with(|| summary.clone());
            }
        }
        out
    }

    /// Forgets `node`'s images.
    pub fn remove_node(&mut self, node: &Node) {
        let node_name = node.metadata.name.as_deref().unwrap_or("");
        let images = node.status.as_ref().and_then(|s| s.images.as_ref());
        for image in images.into_iter().flatten() {
            for name in image.names.iter().flatten() {
                let mut empty = false;
                if let Some((summary, nodes)) = self.images.get_mut(name) {
                    if nodes.remove(node_name) {
                        summary.num_nodes.fetch_sub(1, Ordering::Relaxed);
                    }
                    empty = nodes.is_empty();
                }
                if empty {
                    self.images.remove(name);
                }
            }
        }
    }
}

/// A node with the pods on it and running sums of what they request.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    node: Option<Arc<Node>>,
    name: Arc<str>,
    pub pods: Vec<Arc<AssignedPod>>,
    pub pods_with_affinity: Vec<Arc<AssignedPod>>,
    pub pods_with_required_anti_affinity: Vec<Arc<AssignedPod>>,
    pub used_ports: HostPortInfo,
    /// Sum of the pods' requests.
    pub requested: Resource,
    /// Sum of the pods' requests with the 100m/200Mi defaults for containers requesting none
    /// (only cpu and memory are set).
    pub non_zero_requested: Resource,
    pub allocatable: Resource,
    /// Images on the node by name, with their size and how many nodes have them.
    pub image_states: HashMap<String, Arc<ImageStateSummary>>,
    /// PVC `namespace/name` -> number of pods on the node using it.
    pub pvc_ref_counts: HashMap<String, u32>,
    pub generation: u64,
}

impl Default for NodeInfo {
    fn default() -> Self {
        NodeInfo {
            node: None,
            name: Arc::from(""),
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            used_ports: HostPortInfo::default(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            allocatable: Resource::default(),
            image_states: HashMap::new(),
            pvc_ref_counts: HashMap::new(),
            generation: next_generation(),
        }
    }
}

/// Why a pod could not be removed from a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no corresponding pod {pod} in pods of node {node}")]
pub struct PodNotFound {
    pub pod: String,
    pub node: String,
}

impl NodeInfo {
    pub fn new() -> NodeInfo {
        NodeInfo::default()
    }

    /// A NodeInfo for `node` with `pods` (images not tracked across nodes; see [`ImageStates`]).
    pub fn with_node(
        node: Arc<Node>,
        pods: impl IntoIterator<Item = Arc<AssignedPod>>,
    ) -> NodeInfo {
        let mut ni = NodeInfo::new();
        ni.set_node(node);
        for p in pods {
            ni.add_pod(p);
        }
        ni
    }

    /// The node object; `None` while the cache knows pods on a node it has not seen yet.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }

    pub fn node_arc(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node name as a shared string (cheap to clone into scores and statuses).
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.node.as_ref().and_then(|n| n.metadata.labels.as_ref())
    }

    pub fn taints(&self) -> &[Taint] {
        self.node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(Resource::from_list)
            .unwrap_or_default();
        self.name = Arc::from(node.metadata.name.as_deref().unwrap_or(""));
        self.node = Some(node);
        self.generation = next_generation();
    }

    pub fn remove_node(&mut self) {
        self.node = None;
        self.generation = next_generation();
    }

    pub fn set_image_states(&mut self, images: HashMap<String, Arc<ImageStateSummary>>) {
        self.image_states = images;
        self.generation = next_generation();
    }

    pub fn add_pod(&mut self, pod: Arc<AssignedPod>) {
        self.update(&pod, 1);
        if pod.has_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `pod`'s UID.
    pub fn remove_pod(&mut self, pod: &AssignedPod) -> Result<Arc<AssignedPod>, PodNotFound> {
        let uid = pod.uid();
        let Some(i) = self.pods.iter().position(|p| p.uid() == uid) else {
            return Err(PodNotFound {
                pod: pod.key(),
                node: self.name.to_string(),
            });
        };
        let removed = self.pods.swap_remove(i);
        self.pods_with_affinity.retain(|p| p.uid() != uid);
        self.pods_with_required_anti_affinity
            .retain(|p| p.uid() != uid);
        self.update(&removed, -1);
        Ok(removed)
    }

    fn update(&mut self, pod: &AssignedPod, sign: i64) {
        let r = &pod.requests;
        self.requested.milli_cpu += sign * r.milli_cpu;
        self.requested.memory += sign * r.memory;
        self.requested.ephemeral_storage += sign * r.ephemeral_storage;
        for (k, v) in &r.scalar_resources {
            *self
                .requested
                .scalar_resources
                .entry(k.clone())
                .or_insert(0) += sign * v;
        }
        self.non_zero_requested.milli_cpu += sign * pod.non_zero_cpu;
        self.non_zero_requested.memory += sign * pod.non_zero_memory;
        for p in &pod.host_ports {
            if sign > 0 {
                self.used_ports.add(p);
            } else {
                self.used_ports.remove(p);
            }
        }
        let ns = pod.namespace();
        for claim in pod
            .volumes()
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let key = format!("{ns}/{}", claim.claim_name);
            if sign > 0 {
                *self.pvc_ref_counts.entry(key).or_insert(0) += 1;
            } else if let Some(n) = self.pvc_ref_counts.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.pvc_ref_counts.remove(&key);
                }
            }
        }
        self.generation = next_generation();
    }
}

/// The zone key upstream's node tree groups nodes by (region and zone labels).
fn zone_key(node: &NodeInfo) -> String {
    let labels = node.labels();
    let get = |a: &str, b: &str| -> String {
        labels
            .and_then(|l| l.get(a).or_else(|| l.get(b)))
            .cloned()
            .unwrap_or_default()
    };
    let region = get(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    let zone = get(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\x00:{zone}")
}

/// One node's change for [`Snapshot::update_from`].
#[derive(Debug, Clone)]
pub enum NodeChange {
    /// The node was added or its `NodeInfo` changed (pods, node object, images).
    Upsert(Arc<NodeInfo>),
    /// The node is gone.
    Remove(String),
}

/// The nodes a scheduling cycle sees: an immutable view between two updates.
///
/// Nodes are listed zone by zone, round robin (as upstream's node tree does), so that a cycle that
/// stops after `percentageOfNodesToScore` still sees every zone.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    node_infos: Vec<Arc<NodeInfo>>,
    index: HashMap<Arc<str>, usize>,
    // Zone bookkeeping for the order: zones in order of first appearance, nodes per zone in order
    // of addition.
    zones: Vec<(String, Vec<Arc<str>>)>,
    have_pods_with_affinity: Vec<usize>,
    have_pods_with_required_anti_affinity: Vec<usize>,
    generation: u64,
}

impl Snapshot {
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// A snapshot of these NodeInfos (those without a node object are left out).
    pub fn from_node_infos(infos: impl IntoIterator<Item = Arc<NodeInfo>>) -> Snapshot {
        let mut s = Snapshot::new();
        s.update_from(infos.into_iter().map(NodeChange::Upsert));
        s
    }

    /// A snapshot built from API objects: pods are placed on the node named by `.spec.nodeName`
    /// (others are ignored), image states are shared across nodes. For tests and `simulate`.
    pub fn from_objects(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Snapshot {
        let mut images = ImageStates::default();
        let mut infos: Vec<NodeInfo> = Vec::with_capacity(nodes.len());
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for node in nodes {
            let mut ni = NodeInfo::new();
            ni.set_node(node.clone());
            ni.set_image_states(images.add_node(node));
            by_name.insert(node.metadata.name.as_deref().unwrap_or(""), infos.len());
            infos.push(ni);
        }
        for pod in pods {
            let node_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("");
            if let Some(&i) = by_name.get(node_name) {
                infos[i].add_pod(Arc::new(AssignedPod::new(Pod::clone(pod))));
            }
        }
        Snapshot::from_node_infos(infos.into_iter().map(Arc::new))
    }

    /// Applies the cache's changes. An upsert whose generation is not newer than the NodeInfo
    /// already held is ignored, so the cache may pass every node it suspects changed; only
    /// changed entries are replaced (an `Arc` swap), nothing is copied.
    pub fn update_from(&mut self, changes: impl IntoIterator<Item = NodeChange>) {
        let mut order_dirty = false;
        let mut affinity_dirty = false;
        for change in changes {
            match change {
                NodeChange::Upsert(info) => {
                    if info.node().is_none() {
                        let name = info.name().to_string();
                        order_dirty |= self.remove(&name, &mut affinity_dirty);
                        continue;
                    }
                    self.generation = self.generation.max(info.generation);
                    match self.index.get(info.name()).copied() {
                        Some(i) => {
                            let old = &self.node_infos[i];
                            if old.generation >= info.generation && !Arc::ptr_eq(old, &info) {
                                continue;
                            }
                            affinity_dirty |= affinity_flags(old) != affinity_flags(&info);
                            if zone_key(old) != zone_key(&info) {
                                let name = info.name_arc().clone();
                                self.remove_from_zones(&name);
                                self.add_to_zones(zone_key(&info), name);
                                order_dirty = true;
                            }
                            self.node_infos[i] = info;
                        }
                        None => {
                            affinity_dirty |= affinity_flags(&info) != (false, false);
                            self.add_to_zones(zone_key(&info), info.name_arc().clone());
                            self.index
                                .insert(info.name_arc().clone(), self.node_infos.len());
                            self.node_infos.push(info);
                            order_dirty = true;
                        }
                    }
                }
                NodeChange::Remove(name) => {
                    order_dirty |= self.remove(&name, &mut affinity_dirty);
                }
            }
        }
        if order_dirty {
            self.rebuild_order();
            affinity_dirty = true;
        }
        if affinity_dirty {
            self.rebuild_affinity_lists();
        }
    }

    /// Drops `name` from the index and zones (the list is rebuilt by the caller).
    fn remove(&mut self, name: &str, affinity_dirty: &mut bool) -> bool {
        let Some(i) = self.index.remove(name) else {
            return false;
        };
        *affinity_dirty |= affinity_flags(&self.node_infos[i]) != (false, false);
        let arc_name = self.node_infos[i].name_arc().clone();
        self.remove_from_zones(&arc_name);
        // Keep the vector consistent until the rebuild: swap-remove and fix the moved index.
        self.node_infos.swap_remove(i);
        if let Some(moved) = self.node_infos.get(i) {
            self.index.insert(moved.name_arc().clone(), i);
        }
        true
    }

    fn add_to_zones(&mut self, zone: String, name: Arc<str>) {
        match self.zones.iter_mut().find(|(z, _)| *z == zone) {
            Some((_, names)) => names.push(name),
            None => self.zones.push((zone, vec![name])),
        }
    }

    fn remove_from_zones(&mut self, name: &Arc<str>) {
        for (_, names) in &mut self.zones {
            names.retain(|n| n != name);
        }
        self.zones.retain(|(_, names)| !names.is_empty());
    }

    /// Lists nodes zone by zone, round robin.
    fn rebuild_order(&mut self) {
        let mut by_name: HashMap<Arc<str>, Arc<NodeInfo>> = self
            .node_infos
            .drain(..)
            .map(|n| (n.name_arc().clone(), n))
            .collect();
        let longest = self.zones.iter().map(|(_, n)| n.len()).max().unwrap_or(0);
        self.index.clear();
        for round in 0..longest {
            for (_, names) in &self.zones {
                if let Some(name) = names.get(round)
                    && let Some(info) = by_name.remove(name)
                {
                    self.index.insert(name.clone(), self.node_infos.len());
                    self.node_infos.push(info);
                }
            }
        }
    }

    fn rebuild_affinity_lists(&mut self) {
        self.have_pods_with_affinity.clear();
        self.have_pods_with_required_anti_affinity.clear();
        for (i, n) in self.node_infos.iter().enumerate() {
            if !n.pods_with_affinity.is_empty() {
                self.have_pods_with_affinity.push(i);
            }
            if !n.pods_with_required_anti_affinity.is_empty() {
                self.have_pods_with_required_anti_affinity.push(i);
            }
        }
    }

    /// All nodes, in scheduling order.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.node_infos
    }

    pub fn num_nodes(&self) -> usize {
        self.node_infos.len()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.node_infos[i])
    }

    /// Nodes with at least one pod that has pod affinity or anti-affinity.
    pub fn have_pods_with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_affinity
            .iter()
            .map(|&i| &self.node_infos[i])
    }

    /// Nodes with at least one pod that has required pod anti-affinity.
    pub fn have_pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_required_anti_affinity
            .iter()
            .map(|&i| &self.node_infos[i])
    }

    /// The highest NodeInfo generation this snapshot has seen: the cache sends what changed since.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

fn affinity_flags(n: &NodeInfo) -> (bool, bool) {
    (
        !n.pods_with_affinity.is_empty(),
        !n.pods_with_required_anti_affinity.is_empty(),
    )
}

/// A pod in the scheduling queue, with what the queue and QueueSort plugins need.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    pub pod_info: Arc<PodInfo>,
    /// When the pod was added to the queue (or last moved back to it).
    pub timestamp: Instant,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the pod was first tried; `None` before the first attempt.
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt (events for them requeue it).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending in the last attempt.
    pub pending_plugins: BTreeSet<String>,
    /// Whether a PreEnqueue plugin keeps the pod out of the active queue.
    pub gated: bool,
}

impl QueuedPodInfo {
    pub fn new(pod_info: Arc<PodInfo>, timestamp: Instant) -> QueuedPodInfo {
        QueuedPodInfo {
            pod_info,
            timestamp,
            attempts: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            gated: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn scalar_resource_names() {
        for (name, want) in [
            ("example.com/gpu", true),
            ("nvidia.com/gpu", true),
            ("hugepages-2Mi", true),
            ("attachable-volumes-aws-ebs", true),
            ("kubernetes.io/batch-cpu", true),
            ("requests.example.com/gpu", false),
            ("cpu", false),
            ("foo", false),
        ] {
            assert_eq!(is_scalar_resource_name(name), want, "{name}");
        }
    }

    #[test]
    fn pod_requests_as_upstream() {
        struct Case {
            name: &'static str,
            pod: Pod,
            cpu: i64,
            mem: i64,
            non0_cpu: i64,
            non0_mem: i64,
        }
        let mi = 1024 * 1024;
        let cases = vec![
            Case {
                name: "no requests: non-zero defaults for scoring",
                pod: PodBuilder::new("p").container(&[]).build(),
                cpu: 0,
                mem: 0,
                non0_cpu: 100,
                non0_mem: 200 * mi,
            },
            Case {
                name: "containers summed",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1"), ("memory", "1Gi")])
                    .container(&[("cpu", "500m")])
                    .build(),
                cpu: 1500,
                mem: 1024 * mi,
                non0_cpu: 1500,
                non0_mem: 1024 * mi + 200 * mi,
            },
            Case {
                name: "explicit zero is not missing",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "0"), ("memory", "0")])
                    .build(),
                cpu: 0,
                mem: 0,
                non0_cpu: 0,
                non0_mem: 0,
            },
            Case {
                name: "init container larger than containers",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "2")], false)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2000,
                mem: 0,
                non0_cpu: 2000,
                non0_mem: 200 * mi,
            },
            Case {
                // sidecar 1 + containers 1 = 2; init after sidecar: 1 + 1.5 = 2.5 -> 2.5
                name: "sidecars count in both the sum and later init containers",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "1")], true)
                    .init_container(&[("cpu", "1500m")], false)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2500,
                mem: 0,
                non0_cpu: 2500,
                // the sidecar's 200Mi default counts in the sum too
                non0_mem: 400 * mi,
            },
            Case {
                name: "init container before the sidecar does not include it",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "1500m")], false)
                    .init_container(&[("cpu", "1")], true)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2000,
                mem: 0,
                non0_cpu: 2000,
                non0_mem: 400 * mi,
            },
            Case {
                name: "overhead added",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .overhead(&[("cpu", "250m"), ("memory", "10Mi")])
                    .build(),
                cpu: 1250,
                mem: 10 * mi,
                non0_cpu: 1250,
                non0_mem: 210 * mi,
            },
            Case {
                name: "pod-level requests override cpu/memory",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .pod_level_requests(&[("cpu", "3")])
                    .build(),
                cpu: 3000,
                mem: 0,
                non0_cpu: 3000,
                non0_mem: 200 * mi,
            },
        ];
        for c in cases {
            let (r, n0c, n0m) = calculate_pod_resource(&c.pod);
            assert_eq!(
                (r.milli_cpu, r.memory, n0c, n0m),
                (c.cpu, c.mem, c.non0_cpu, c.non0_mem),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn extended_resources_and_ephemeral_storage() {
        let pod = PodBuilder::new("p")
            .container(&[
                ("example.com/gpu", "2"),
                ("ephemeral-storage", "1Gi"),
                ("hugepages-2Mi", "4Mi"),
            ])
            .build();
        let (r, _, _) = calculate_pod_resource(&pod);
        assert_eq!(r.get("example.com/gpu"), 2);
        assert_eq!(r.ephemeral_storage, 1 << 30);
        assert_eq!(r.get("hugepages-2Mi"), 4 << 20);
    }

    #[test]
    fn resized_pod_uses_max_of_spec_and_allocated() {
        let mut pod = PodBuilder::new("p").container(&[("cpu", "1")]).build();
        let status = k8s_openapi::api::core::v1::PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "c0".into(),
                allocated_resources: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        pod.status = Some(status);
        let (r, _, _) = calculate_pod_resource(&pod);
        assert_eq!(r.milli_cpu, 2000);
    }

    #[test]
    fn host_port_conflicts() {
        let mut used = HostPortInfo::default();
        used.add(&HostPort::new("127.0.0.1", "TCP", 80));
        used.add(&HostPort::new("", "", 8080));
        let cases = [
            (HostPort::new("127.0.0.1", "TCP", 80), true),
            (HostPort::new("127.0.0.2", "TCP", 80), false),
            (HostPort::new("0.0.0.0", "TCP", 80), true),
            (HostPort::new("127.0.0.1", "UDP", 80), false),
            (HostPort::new("10.0.0.1", "TCP", 8080), true),
            (HostPort::new("10.0.0.1", "UDP", 8080), false),
            (HostPort::new("", "", 0), false),
        ];
        for (p, want) in cases {
            assert_eq!(used.check_conflict(&p), want, "{p:?}");
        }
        used.remove(&HostPort::new("0.0.0.0", "TCP", 8080));
        assert!(!used.check_conflict(&HostPort::new("10.0.0.1", "TCP", 8080)));
    }

    #[test]
    fn node_info_add_remove() {
        let node = Arc::new(
            NodeBuilder::new("n1")
                .allocatable(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")])
                .build(),
        );
        let mut ni = NodeInfo::with_node(node, []);
        assert_eq!(ni.allocatable.milli_cpu, 4000);
        assert_eq!(ni.allocatable.allowed_pod_number, 110);
        let p = Arc::new(AssignedPod::new(
            PodBuilder::new("a")
                .uid("ua")
                .container(&[("cpu", "1")])
                .host_port(80)
                .build(),
        ));
        let g0 = ni.generation;
        ni.add_pod(p.clone());
        assert!(ni.generation > g0);
        assert_eq!(ni.requested.milli_cpu, 1000);
        // Two containers without a memory request: 2 x 200Mi for scoring.
        assert_eq!(ni.non_zero_requested.memory, 2 * DEFAULT_MEMORY_REQUEST);
        assert!(ni.used_ports.check_conflict(&HostPort::new("", "TCP", 80)));
        assert!(ni.remove_pod(&p).is_ok());
        assert_eq!(ni.requested.milli_cpu, 0);
        assert!(ni.used_ports.is_empty());
        assert!(ni.remove_pod(&p).is_err());
    }

    #[test]
    fn snapshot_incremental_updates_and_zone_order() {
        let mk = |name: &str, zone: &str| {
            let n = NodeBuilder::new(name)
                .label("topology.kubernetes.io/zone", zone)
                .build();
            Arc::new(NodeInfo::with_node(Arc::new(n), []))
        };
        let mut s =
            Snapshot::from_node_infos([mk("a1", "a"), mk("a2", "a"), mk("b1", "b"), mk("c1", "c")]);
        let names: Vec<&str> = s.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, ["a1", "b1", "c1", "a2"]);

        // Replace one node's info: same position, new Arc.
        let mut changed = (*s.get("b1").cloned().expect("b1")).clone();
        changed.add_pod(Arc::new(PodBuilder::new("x").uid("x").assigned()));
        let changed = Arc::new(changed);
        s.update_from([NodeChange::Upsert(changed.clone())]);
        assert!(Arc::ptr_eq(s.get("b1").expect("b1"), &changed));
        assert_eq!(s.generation(), changed.generation);

        // A stale upsert is ignored.
        let stale = mk("b1", "b");
        let stale = Arc::new(NodeInfo {
            generation: 0,
            ..(*stale).clone()
        });
        s.update_from([NodeChange::Upsert(stale)]);
        assert!(Arc::ptr_eq(s.get("b1").expect("b1"), &changed));

        s.update_from([NodeChange::Remove("a1".into())]);
        let names: Vec<&str> = s.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, ["a2", "b1", "c1"]);
        assert!(s.get("a1").is_none());
        assert_eq!(s.num_nodes(), 3);
    }

    #[test]
    fn snapshot_affinity_lists() {
        let node = NodeBuilder::new("n1").build();
        let pod = PodBuilder::new("p")
            .node("n1")
            .pod_anti_affinity_required("app", "web")
            .build();
        let s = Snapshot::from_objects(
            &[Arc::new(node), Arc::new(NodeBuilder::new("n2").build())],
            &[Arc::new(pod)],
        );
        assert_eq!(s.have_pods_with_affinity().count(), 1);
        assert_eq!(s.have_pods_with_required_anti_affinity().count(), 1);
    }

    #[test]
    fn image_states_shared_across_nodes() {
        let n1 = NodeBuilder::new("n1").image(&["nginx:1.25"], 100).build();
        let n2 = NodeBuilder::new("n2")
            .image(&["nginx:1.25", "redis:7"], 100)
            .build();
        let mut images = ImageStates::default();
        let s1 = images.add_node(&n1);
        let s2 = images.add_node(&n2);
        assert_eq!(s1["nginx:1.25"].num_nodes(), 2);
        assert_eq!(s2["redis:7"].num_nodes(), 1);
        images.remove_node(&n2);
        assert_eq!(s1["nginx:1.25"].num_nodes(), 1);
    }
}
