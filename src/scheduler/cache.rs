//! The scheduler's view of the cluster: one `NodeInfo` per node with the pods assigned to it,
//! including pods *assumed* on a node while their binding is in flight. The scheduling cycle takes
//! an incrementally updated snapshot: only the NodeInfos that changed since the last cycle are
//! handed over (an `Arc` each), nothing is copied wholesale.
//!
//! Assumed pods are confirmed when the informer sees the pod bound, forgotten when binding fails,
//! and expire `assumed_ttl` after their binding finished if the informer never confirms them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use tracing::warn;

use crate::framework::types::{AssignedPod, ImageStates, NodeChange, NodeInfo, PodInfo, Snapshot};

/// A pod the cache had, as it was: what it kept of the pod, its node, and whether it was only
/// assumed there (its binding not yet confirmed by the informer).
#[derive(Debug, Clone)]
pub(crate) struct CachedPod {
    pub pod: Arc<AssignedPod>,
    pub node: String,
    pub assumed: bool,
}

/// How long an assumed pod whose binding finished may wait for the informer to confirm it.
pub(crate) const DEFAULT_ASSUMED_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum CacheError {
    #[error("pod {0} is already in the cache")]
    AlreadyPresent(String),
    #[error("pod {0} is not assumed")]
    NotAssumed(String),
}

struct PodEntry {
    info: Arc<AssignedPod>,
    node: String,
    assumed: bool,
    /// Set when binding finished: the assumed pod expires then, unless confirmed.
    deadline: Option<Instant>,
}

impl PodEntry {
    fn into_cached(self) -> CachedPod {
        CachedPod {
            pod: self.info,
            node: self.node,
            assumed: self.assumed,
        }
    }
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// Nodes changed since the last snapshot update.
    dirty: HashSet<String>,
    /// When each node object arrived (a counter): new nodes join the snapshot in this order, as
    /// upstream's node tree appends them in event order (the order decides ties between equal
    /// nodes, so it must not depend on hashing).
    node_added: HashMap<String, u64>,
    next_added: u64,
    pods: HashMap<String, PodEntry>,
    /// How many of `pods` are assumed.
    assumed: usize,
    images: ImageStates,
}

/// What the cache holds (upstream's `scheduler_cache_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheSizes {
    /// Nodes, including those only known from the pods bound to them.
    pub nodes: usize,
    /// Pods, assumed ones included.
    pub pods: usize,
    pub assumed_pods: usize,
}

pub(crate) struct Cache {
    inner: Mutex<Inner>,
    assumed_ttl: Duration,
}

impl Default for Cache {
    fn default() -> Self {
        Self::new(DEFAULT_ASSUMED_TTL)
    }
}

impl Cache {
    pub(crate) fn new(assumed_ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            assumed_ttl,
        }
    }

    pub(crate) fn add_node(&self, node: Arc<Node>) {
        let mut inner = self.inner.lock();
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(old) = inner.nodes.get(&name).and_then(|n| n.node_arc().cloned()) {
            inner.images.remove_node(&old);
        }
        let images = inner.images.add_node(&node);
        if !inner.node_added.contains_key(&name) {
            let seq = inner.next_added;
            inner.next_added += 1;
            inner.node_added.insert(name.clone(), seq);
        }
        let info = inner.node_mut(&name);
        info.set_node(node);
        info.set_image_states(images);
    }

    pub(crate) fn remove_node(&self, name: &str) {
        let mut inner = self.inner.lock();
        inner.node_added.remove(name);
        if let Some(old) = inner.nodes.get(name).and_then(|n| n.node_arc().cloned()) {
            inner.images.remove_node(&old);
        }
        let has_pods = inner.nodes.get(name).is_some_and(|n| !n.pods.is_empty());
        if has_pods {
            // Pods keep their accounting until they are deleted too; the node leaves the snapshot.
            inner.node_mut(name).remove_node();
        } else {
            inner.nodes.remove(name);
            inner.dirty.insert(name.to_string());
        }
    }

    /// A pod the informer sees assigned to `node`: confirms an assumed pod, else adds or updates
    /// it. Returns the pod as the cache had it.
    pub(crate) fn add_or_update_pod(
        &self,
        node: &str,
        info: Arc<AssignedPod>,
    ) -> Option<CachedPod> {
        let key = info.key();
        let node = node.to_string();
        let mut inner = self.inner.lock();
        let old = inner.take_pod(&key);
        if let Some(old) = &old {
            inner.remove_from_node(&old.node, &old.info);
        }
        inner.node_mut(&node).add_pod(info.clone());
        inner.insert_pod(
            key,
            PodEntry {
                info,
                node,
                assumed: false,
                deadline: None,
            },
        );
        old.map(PodEntry::into_cached)
    }

    /// A pod deleted, or finished (Succeeded/Failed): its resources are free. Returns it.
    pub(crate) fn remove_pod(&self, key: &str) -> Option<CachedPod> {
        let mut inner = self.inner.lock();
        let old = inner.take_pod(key)?;
        inner.remove_from_node(&old.node, &old.info);
        Some(old.into_cached())
    }

    /// Accounts `pod` (whose `spec.nodeName` is set to the chosen node) before it is bound.
    pub(crate) fn assume_pod(&self, pod: &PodInfo) -> Result<(), CacheError> {
        let key = pod.key();
        let mut inner = self.inner.lock();
        if inner.pods.contains_key(&key) {
            return Err(CacheError::AlreadyPresent(key));
        }
        let node = pod.node_name().to_string();
        let info = Arc::new(AssignedPod::from_pod_info(pod));
        inner.node_mut(&node).add_pod(info.clone());
        inner.insert_pod(
            key,
            PodEntry {
                info,
                node,
                assumed: true,
                deadline: None,
            },
        );
        Ok(())
    }

    /// Binding went through: start the assumed pod's expiry clock.
    pub(crate) fn finish_binding(&self, key: &str) {
        let mut inner = self.inner.lock();
        if let Some(entry) = inner.pods.get_mut(key)
            && entry.assumed
        {
            entry.deadline = Some(Instant::now() + self.assumed_ttl);
        }
    }

    /// Binding failed or was rejected: drop the assumed pod.
    pub(crate) fn forget_pod(&self, key: &str) -> Result<(), CacheError> {
        let mut inner = self.inner.lock();
        match inner.pods.get(key) {
            Some(entry) if entry.assumed => {}
            _ => return Err(CacheError::NotAssumed(key.to_string())),
        }
        if let Some(old) = inner.take_pod(key) {
            inner.remove_from_node(&old.node, &old.info);
        }
        Ok(())
    }

    pub(crate) fn is_assumed(&self, key: &str) -> bool {
        self.inner.lock().pods.get(key).is_some_and(|e| e.assumed)
    }

    /// The node an assumed pod is on; `None` when the pod is not assumed.
    pub(crate) fn assumed_node(&self, key: &str) -> Option<String> {
        let inner = self.inner.lock();
        let entry = inner.pods.get(key)?;
        entry.assumed.then(|| entry.node.clone())
    }

    /// Drops assumed pods whose binding finished more than the TTL ago without confirmation;
    /// returns them.
    pub(crate) fn cleanup_expired_assumed(&self, now: Instant) -> Vec<CachedPod> {
        let mut inner = self.inner.lock();
        let expired: Vec<String> = inner
            .pods
            .iter()
            .filter(|(_, e)| e.assumed && e.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        let mut removed = Vec::with_capacity(expired.len());
        for key in &expired {
            warn!(pod = %key, "assumed pod expired: its binding was never confirmed");
            if let Some(old) = inner.take_pod(key) {
                inner.remove_from_node(&old.node, &old.info);
                removed.push(old.into_cached());
            }
        }
        removed
    }

    /// Hands the NodeInfos that changed since the last call to `snapshot`.
    pub(crate) fn update_snapshot(&self, snapshot: &mut Snapshot) {
        let mut inner = self.inner.lock();
        if inner.dirty.is_empty() {
            return;
        }
        let mut dirty: Vec<String> = inner.dirty.drain().collect();
        dirty.sort_by_cached_key(|n| {
            (
                inner.node_added.get(n).copied().unwrap_or(u64::MAX),
                n.clone(),
            )
        });
        let changes: Vec<NodeChange> = dirty
            .into_iter()
            .map(|name| match inner.nodes.get(&name) {
                Some(info) if info.node().is_some() => NodeChange::Upsert(info.clone()),
                _ => NodeChange::Remove(name),
            })
            .collect();
        drop(inner);
        snapshot.update_from(changes);
    }

    #[cfg(test)]
    pub(crate) fn pod_count(&self) -> usize {
        self.inner.lock().pods.len()
    }

    pub(crate) fn sizes(&self) -> CacheSizes {
        let inner = self.inner.lock();
        CacheSizes {
            nodes: inner.nodes.len(),
            pods: inner.pods.len(),
            assumed_pods: inner.assumed,
        }
    }
}

impl Inner {
    fn insert_pod(&mut self, key: String, entry: PodEntry) {
        self.assumed += usize::from(entry.assumed);
        if let Some(old) = self.pods.insert(key, entry) {
            self.assumed -= usize::from(old.assumed);
        }
    }

    fn take_pod(&mut self, key: &str) -> Option<PodEntry> {
        let old = self.pods.remove(key)?;
        self.assumed -= usize::from(old.assumed);
        Some(old)
    }

    /// The node's NodeInfo for writing (copied first if a snapshot still holds it), marked dirty.
    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        self.dirty.insert(name.to_string());
        let entry = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(NodeInfo::new()));
        Arc::make_mut(entry)
    }

    fn remove_from_node(&mut self, node: &str, pod: &AssignedPod) {
        if !self.nodes.contains_key(node) {
            return;
        }
        let info = self.node_mut(node);
        if let Err(err) = info.remove_pod(pod) {
            warn!(%err, "cache out of sync");
        }
        if info.node().is_none() && info.pods.is_empty() {
            self.nodes.remove(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            NodeBuilder::new(name)
                .allocatable(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")])
                .build(),
        )
    }

    fn assumed(name: &str, node: &str, cpu: &str) -> PodInfo {
        PodBuilder::new(name)
            .container(&[("cpu", cpu)])
            .node(node)
            .info()
    }

    fn requested_cpu(snapshot: &Snapshot, node: &str) -> i64 {
        snapshot
            .get(node)
            .map(|n| n.requested.milli_cpu)
            .unwrap_or(-1)
    }

    #[test]
    fn nodes_join_the_snapshot_in_arrival_order() {
        // Equal nodes tie; upstream's node tree keeps them in event order, whatever the hashing.
        let names = ["n3", "a9", "n1", "z0", "m5", "b2", "n0", "q7"];
        let cache = Cache::default();
        // A pod seen before its node must not move the node forward.
        cache.add_or_update_pod(
            "q7",
            Arc::new(AssignedPod::new(
                PodBuilder::new("early").node("q7").build(),
            )),
        );
        for n in names {
            cache.add_node(node(n));
        }
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        let order: Vec<&str> = snap.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(order, names);
        cache.remove_node("n1");
        cache.add_node(node("n1"));
        cache.add_node(node("c4"));
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.nodes().last().map(|n| n.name()), Some("c4"));
    }

    #[test]
    fn snapshot_sees_nodes_and_assumed_pods_incrementally() {
        let cache = Cache::default();
        cache.add_node(node("n1"));
        cache.add_node(node("n2"));
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 2);
        let n2_before = snap.get("n2").cloned().expect("n2");

        cache
            .assume_pod(&assumed("p", "n1", "500m"))
            .expect("assume");
        cache.update_snapshot(&mut snap);
        assert_eq!(requested_cpu(&snap, "n1"), 500);
        // n2 did not change: the snapshot still holds the very same NodeInfo.
        assert!(Arc::ptr_eq(&n2_before, snap.get("n2").expect("n2")));
    }

    #[test]
    fn forget_releases_an_assumed_pod_and_confirm_keeps_it() {
        let cache = Cache::default();
        cache.add_node(node("n1"));
        cache
            .assume_pod(&assumed("a", "n1", "1"))
            .expect("assume a");
        cache
            .assume_pod(&assumed("b", "n1", "1"))
            .expect("assume b");
        assert_eq!(
            cache.assume_pod(&assumed("a", "n1", "1")),
            Err(CacheError::AlreadyPresent("default/a".into()))
        );
        cache.forget_pod("default/a").expect("forget");
        cache.add_or_update_pod(
            "n1",
            Arc::new(
                PodBuilder::new("b")
                    .container(&[("cpu", "1")])
                    .node("n1")
                    .assigned(),
            ),
        );
        assert!(!cache.is_assumed("default/b"), "the informer confirmed b");
        let sizes = |nodes, pods, assumed_pods| CacheSizes {
            nodes,
            pods,
            assumed_pods,
        };
        assert_eq!(cache.sizes(), sizes(1, 1, 0));
        cache
            .assume_pod(&assumed("c", "n1", "1"))
            .expect("assume c");
        // A pod on a node the cache has not seen yet makes a placeholder node, as upstream.
        cache.add_or_update_pod(
            "n9",
            Arc::new(AssignedPod::new(PodBuilder::new("d").node("n9").build())),
        );
        assert_eq!(cache.sizes(), sizes(2, 3, 1));
        cache.remove_pod("default/c");
        assert_eq!(cache.sizes(), sizes(2, 2, 0));
        assert_eq!(
            cache.forget_pod("default/b"),
            Err(CacheError::NotAssumed("default/b".into()))
        );
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        assert_eq!(requested_cpu(&snap, "n1"), 1000);
    }

    #[test]
    fn assumed_pods_expire_only_after_binding_finished_and_ttl() {
        let cache = Cache::new(Duration::from_secs(30));
        cache.add_node(node("n1"));
        cache.assume_pod(&assumed("p", "n1", "1")).expect("assume");
        let now = Instant::now();
        assert!(
            cache
                .cleanup_expired_assumed(now + Duration::from_secs(3600))
                .is_empty(),
            "binding still in flight"
        );
        cache.finish_binding("default/p");
        assert!(cache.cleanup_expired_assumed(now).is_empty());
        let expired: Vec<String> = cache
            .cleanup_expired_assumed(now + Duration::from_secs(31))
            .iter()
            .map(|c| format!("{}@{}", c.pod.key(), c.node))
            .collect();
        assert_eq!(expired, ["default/p@n1"]);
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        assert_eq!(requested_cpu(&snap, "n1"), 0);
    }

    #[test]
    fn removed_node_leaves_the_snapshot() {
        let cache = Cache::default();
        cache.add_node(node("n1"));
        cache.add_or_update_pod("n1", Arc::new(PodBuilder::new("p").node("n1").assigned()));
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        cache.remove_node("n1");
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 0);
        cache.remove_pod("default/p");
        assert_eq!(cache.pod_count(), 0);
    }

    #[test]
    fn pods_moving_between_nodes_are_accounted_once() {
        let cache = Cache::default();
        cache.add_node(node("n1"));
        cache.add_node(node("n2"));
        cache.add_or_update_pod(
            "n1",
            Arc::new(
                PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .node("n1")
                    .assigned(),
            ),
        );
        cache.add_or_update_pod(
            "n2",
            Arc::new(
                PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .node("n2")
                    .assigned(),
            ),
        );
        let mut snap = Snapshot::new();
        cache.update_snapshot(&mut snap);
        assert_eq!(
            (requested_cpu(&snap, "n1"), requested_cpu(&snap, "n2")),
            (0, 1000)
        );
    }
}
