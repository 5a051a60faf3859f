//! The nominator: pods nominated to a node by preemption (upstream's `nominator.go`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::registry::PodNominator;
use crate::framework::types::PodInfo;

/// Pods nominated to a node by preemption, until they are bound or deleted (upstream's
/// `nominator`): from the pods' `status.nominatedNodeName` and from the scheduler's own PostFilter
/// result (recorded before the status patch lands). Filters count the nominated pods of equal or
/// higher priority on their node.
#[derive(Debug, Default)]
pub struct Nominator {
    inner: parking_lot::RwLock<NominatorInner>,
}

#[derive(Debug, Default)]
struct NominatorInner {
    /// node -> nominated pods.
    by_node: HashMap<String, Vec<Arc<PodInfo>>>,
    /// pod key -> (node, the pod as last seen).
    node_of: HashMap<String, (String, Arc<PodInfo>)>,
    /// Nominations made or dropped so far (for opportunistic batching).
    changes: u64,
    /// Pods of other schedulers (their keys) whose nomination is respected.
    foreign: std::collections::HashSet<String>,
    /// Foreign pods seen bound (key -> node), whose nomination still counts until a snapshot
    /// holds them: a cycle's snapshot predates the binding, its Filter reads nominations live.
    bound: HashMap<String, String>,
}

impl NominatorInner {
    fn delete(&mut self, key: &str) {
        self.foreign.remove(key);
        self.bound.remove(key);
        let Some((node, _)) = self.node_of.remove(key) else {
            return;
        };
        self.changes += 1;
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| p.key() != key);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    fn add(&mut self, pod: Arc<PodInfo>, node: &str) {
        let key = pod.key();
        self.delete(&key);
        if node.is_empty() || !pod.node_name().is_empty() {
            return;
        }
        self.node_of.insert(key, (node.to_string(), pod.clone()));
        self.by_node.entry(node.to_string()).or_default().push(pod);
        self.changes += 1;
    }
}

impl Nominator {
    pub fn new() -> Nominator {
        Nominator::default()
    }

    /// Nominates `pod` to `node` (PostFilter's result; an empty node clears the nomination).
    pub fn add_nominated_pod(&self, pod: Arc<PodInfo>, node: &str) {
        self.inner.write().add(pod, node);
    }

    /// A pod as the API shows it: its `status.nominatedNodeName` counts, except that a nomination
    /// the scheduler made is kept while neither the old nor the new object carries one yet (the
    /// status patch has not landed).
    pub fn update(&self, pod: Arc<PodInfo>) {
        let key = pod.key();
        let mut inner = self.inner.write();
        let kept = inner
            .node_of
            .get(&key)
            .filter(|(_, old)| {
                old.nominated_node_name().is_empty() && pod.nominated_node_name().is_empty()
            })
            .map(|(node, _)| node.clone());
        let node = kept.unwrap_or_else(|| pod.nominated_node_name().to_string());
        inner.add(pod, &node);
    }

    /// A pending pod of another scheduler as the API shows it: its `status.nominatedNodeName`
    /// counts as one of ours does (the room it was promised is kept for it in Filter), so
    /// schedulers running side by side do not fill the room one preempted for its pod. (Upstream
    /// respects its own profiles' nominations only.)
    pub fn update_foreign(&self, pod: Arc<PodInfo>) {
        let key = pod.key();
        let node = pod.nominated_node_name().to_string();
        let mut inner = self.inner.write();
        inner.add(pod, &node);
        if inner.node_of.contains_key(&key) {
            inner.foreign.insert(key);
        }
    }

    /// Another scheduler's nominated pod `key` was seen bound to `node`, so the cache holds it
    /// now. Its nomination is kept until [`Self::retire_bound`] finds it in a snapshot: a cycle
    /// whose snapshot was taken before the binding would otherwise see neither, and fill the
    /// room it took.
    pub fn foreign_bound(&self, key: &str, node: &str) {
        let mut inner = self.inner.write();
        if inner.foreign.contains(key) {
            inner.bound.insert(key.to_string(), node.to_string());
        }
    }

    /// Drops the nominations of bound foreign pods that `holds(node, uid)` says the newest
    /// snapshot has on their node (every later snapshot has them too).
    pub fn retire_bound(&self, holds: impl Fn(&str, &str) -> bool) {
        if self.inner.read().bound.is_empty() {
            return;
        }
        let mut inner = self.inner.write();
        let retired: Vec<String> = inner
            .bound
            .iter()
            .filter(|(key, node)| {
                inner
                    .node_of
                    .get(*key)
                    .is_some_and(|(_, pod)| holds(node, pod.uid()))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in retired {
            inner.delete(&key);
        }
    }

    /// The pod was bound, assumed or deleted.
    pub fn delete(&self, key: &str) {
        self.inner.write().delete(key);
    }

    /// The node `key` is nominated to.
    pub fn nominated_node(&self, key: &str) -> Option<String> {
        self.inner.read().node_of.get(key).map(|(n, _)| n.clone())
    }
}

impl PodNominator for Nominator {
    fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
        self.inner
            .read()
            .by_node
            .get(node_name)
            .cloned()
            .unwrap_or_default()
    }

    fn is_foreign(&self, key: &str) -> bool {
        self.inner.read().foreign.contains(key)
    }

    fn batching_generation(&self) -> Option<u64> {
        let inner = self.inner.read();
        inner.by_node.is_empty().then_some(inner.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    /// Another scheduler's nominated pod counts on its node (Filter respects it) and is marked
    /// foreign (its nomination is never cleared); it goes when its nomination does.
    #[test]
    fn another_schedulers_nomination_is_respected_and_marked_foreign() {
        let nominator = Nominator::new();
        let theirs = PodBuilder::new("theirs").nominated_node("n1").info();
        nominator.update_foreign(Arc::new(theirs.clone()));
        let on_n1: Vec<String> = nominator
            .nominated_pods_for_node("n1")
            .iter()
            .map(|p| p.key())
            .collect();
        assert_eq!(on_n1, [theirs.key()]);
        assert!(nominator.is_foreign(&theirs.key()));
        assert_eq!(nominator.batching_generation(), None);
        // Its nomination cleared: nothing kept for it.
        nominator.update_foreign(Arc::new(PodBuilder::new("theirs").info()));
        assert!(nominator.nominated_pods_for_node("n1").is_empty());
        assert!(!nominator.is_foreign(&theirs.key()));
        // Ours are not foreign.
        nominator.add_nominated_pod(Arc::new(PodBuilder::new("ours").info()), "n2");
        assert!(!nominator.is_foreign(&PodBuilder::new("ours").info().key()));
    }

    /// Another scheduler's nominated pod seen bound keeps its nomination until a snapshot holds
    /// it on the node it was bound to; ours are not kept that way.
    #[test]
    fn a_bound_foreign_pods_nomination_lasts_until_a_snapshot_holds_it() {
        let nominator = Nominator::new();
        let theirs = Arc::new(PodBuilder::new("theirs").nominated_node("n1").info());
        nominator.update_foreign(theirs.clone());
        nominator.foreign_bound(&theirs.key(), "n1");
        nominator.retire_bound(|_, _| false);
        assert_eq!(nominator.nominated_pods_for_node("n1").len(), 1);
        nominator.retire_bound(|node, uid| node == "n1" && uid == theirs.uid());
        assert!(nominator.nominated_pods_for_node("n1").is_empty());
        assert!(nominator.batching_generation().is_some());

        let ours = Arc::new(PodBuilder::new("ours").info());
        nominator.add_nominated_pod(ours.clone(), "n2");
        nominator.foreign_bound(&ours.key(), "n2");
        nominator.retire_bound(|_, _| true);
        assert_eq!(nominator.nominated_pods_for_node("n2").len(), 1);
    }
}
