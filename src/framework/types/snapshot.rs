//! The [`Snapshot`] of all nodes a scheduling cycle sees, updated incrementally by the
//! scheduler's cache: only `NodeInfo`s whose generation changed are replaced
//! ([`Snapshot::update_from`]).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use super::assigned_pod::AssignedPod;
use super::node_info::{ImageStates, NodeInfo, PodNotFound, next_generation};

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
    /// Changes (to a new process-wide generation) when a node is added or removed or its node
    /// object changes: what a node's labels, taints and images are may matter to other nodes'
    /// results (topology domains, image spread).
    nodes_generation: u64,
    /// Changes when pods with affinity terms come, go or change anywhere: their terms reach the
    /// nodes of their whole topology domain.
    affinity_generation: u64,
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
        let mut node_objects_changed = false;
        let mut affinity_pods_changed = false;
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
                            node_objects_changed |= !same_node_object(old, &info);
                            affinity_pods_changed |= !same_affinity_pods(old, &info);
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
        // Nodes added or removed change the order; their affinity pods come or go with them.
        if order_dirty || node_objects_changed {
            self.nodes_generation = next_generation();
        }
        if order_dirty || affinity_pods_changed {
            self.affinity_generation = next_generation();
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
    /// Puts `pod` on `node` in this snapshot only (simulations: a group's placement, preemption);
    /// false when the node is not in it.
    pub fn add_pod(&mut self, node: &str, pod: Arc<AssignedPod>) -> bool {
        let Some(info) = self.get(node) else {
            return false;
        };
        let mut info = NodeInfo::clone(info);
        info.add_pod(pod);
        self.update_from([NodeChange::Upsert(Arc::new(info))]);
        true
    }

    /// Takes `pod` off `node` in this snapshot only.
    pub fn remove_pod(&mut self, node: &str, pod: &AssignedPod) -> Result<(), PodNotFound> {
        let not_found = || PodNotFound {
            pod: pod.key(),
            node: node.to_string(),
        };
        let mut info = NodeInfo::clone(self.get(node).ok_or_else(not_found)?);
        info.remove_pod(pod)?;
        self.update_from([NodeChange::Upsert(Arc::new(info))]);
        Ok(())
    }

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

    /// A value that changes whenever the set of nodes or any node object changes (see the field).
    pub fn nodes_generation(&self) -> u64 {
        self.nodes_generation
    }

    /// A value that changes whenever the pods with affinity terms change anywhere.
    pub fn affinity_generation(&self) -> u64 {
        self.affinity_generation
    }
}

fn same_node_object(old: &NodeInfo, new: &NodeInfo) -> bool {
    match (old.node_arc(), new.node_arc()) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The same pods with affinity terms (by identity) on both versions of a node.
fn same_affinity_pods(old: &NodeInfo, new: &NodeInfo) -> bool {
    let same = |a: &[Arc<AssignedPod>], b: &[Arc<AssignedPod>]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
    };
    same(&old.pods_with_affinity, &new.pods_with_affinity)
        && same(
            &old.pods_with_required_anti_affinity,
            &new.pods_with_required_anti_affinity,
        )
}

fn affinity_flags(n: &NodeInfo) -> (bool, bool) {
    (
        !n.pods_with_affinity.is_empty(),
        !n.pods_with_required_anti_affinity.is_empty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

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
        let mut stale = NodeInfo::clone(&mk("b1", "b"));
        stale.generation = 0;
        let stale = Arc::new(stale);
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
}
