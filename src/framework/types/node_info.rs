//! [`NodeInfo`]: a node with the pods on it and running sums of what they request, so Filter and
//! Score never re-walk a node's pods; and the image bookkeeping shared across nodes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{Node, Taint};

use super::assigned_pod::AssignedPod;
use super::host_ports::HostPortInfo;
use super::pod_view::PodView;
use super::resource::Resource;

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A process-wide increasing generation number (upstream's `nextGeneration`).
pub fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed) + 1
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

    /// Whether the pod with `uid` is on the node.
    pub fn holds(&self, uid: &str) -> bool {
        self.pods.iter().any(|p| p.uid() == uid)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use crate::framework::types::host_ports::HostPort;
    use crate::framework::types::resource::DEFAULT_MEMORY_REQUEST;

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
