//! [`PodGroupMembers`]: the pods of pod groups, indexed by group: those that carry the
//! pod-group label, as Coscheduling reads them (the store of the
//! [`POD_GROUP_MEMBERS`](super::POD_GROUP_MEMBERS) kind), and those naming a
//! `scheduling.k8s.io` PodGroup in `spec.schedulingGroup`, as GangScheduling reads them
//! ([`SCHEDULING_GROUP_MEMBERS`](super::SCHEDULING_GROUP_MEMBERS)).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::RwLock;
use tokio::sync::watch;

use super::store::{Changes, Store, StoreChange};
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::framework::types::{EventObject, PodInfo, PodObject};

/// How a pod names its group.
pub trait GroupOf: Send + Sync + 'static {
    fn group(pod: &Pod) -> Option<&str>;
}

/// Coscheduling's: the label `scheduling.x-k8s.io/pod-group`.
pub struct ByPodGroupLabel;

impl GroupOf for ByPodGroupLabel {
    fn group(pod: &Pod) -> Option<&str> {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_GROUP_LABEL))
            .map(String::as_str)
    }
}

/// Workload-aware scheduling's: `spec.schedulingGroup.podGroupName`.
pub struct BySchedulingGroup;

impl GroupOf for BySchedulingGroup {
    fn group(pod: &Pod) -> Option<&str> {
        pod.spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref())
    }
}

/// The pods of groups (as `G` says which), by group (`namespace/group`), kept as much of each as
/// the gang plugins read: name, uid, labels, owners, deletion, node, scheduler name, scheduling
/// group and phase.
pub struct PodGroupMembers<G = ByPodGroupLabel> {
    inner: RwLock<Members<G>>,
    changes: Changes,
}

impl<G> Default for PodGroupMembers<G> {
    fn default() -> Self {
        PodGroupMembers {
            inner: RwLock::new(Members::default()),
            changes: Changes::default(),
        }
    }
}

struct Members<G> {
    /// `namespace/group` -> pod name -> pod.
    by_group: HashMap<String, HashMap<String, Arc<Pod>>>,
    /// `namespace/name` -> its group key.
    group_of: HashMap<String, String>,
    /// `namespace/group` -> how many of its pods are live (see [`is_live`]): kept up to date so
    /// PreEnqueue's count, asked for every gated member each time another arrives, is a lookup.
    live: HashMap<String, usize>,
    grouped_by: PhantomData<fn() -> G>,
}

impl<G> Default for Members<G> {
    fn default() -> Self {
        Members {
            by_group: HashMap::new(),
            group_of: HashMap::new(),
            live: HashMap::new(),
            grouped_by: PhantomData,
        }
    }
}

/// Whether a member still counts as one of its group's: not finished, not being deleted.
pub(crate) fn is_live(pod: &Pod) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !finished && pod.metadata.deletion_timestamp.is_none()
}

impl<G: GroupOf> Members<G> {
    fn remove(&mut self, pod_key: &str) -> bool {
        let Some(group) = self.group_of.remove(pod_key) else {
            return false;
        };
        let name = pod_key.split_once('/').map_or(pod_key, |(_, n)| n);
        if let Some(pods) = self.by_group.get_mut(&group) {
            let was_live = pods.remove(name).is_some_and(|p| is_live(&p));
            if pods.is_empty() {
                self.by_group.remove(&group);
            }
            if was_live && let Some(n) = self.live.get_mut(&group) {
                *n -= 1;
                if *n == 0 {
                    self.live.remove(&group);
                }
            }
        }
        true
    }

    /// Whether the pod joined a group (it was not a member of that group before).
    fn insert(&mut self, pod: Pod) -> bool {
        let (key, group) = member_keys::<G>(&pod);
        let joined = self.group_of.get(&key) != group.as_ref();
        self.remove(&key);
        let Some(group) = group else {
            return false;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        if is_live(&pod) {
            *self.live.entry(group.clone()).or_default() += 1;
        }
        self.group_of.insert(key, group.clone());
        self.by_group
            .entry(group)
            .or_default()
            .insert(name, Arc::new(member(&pod)));
        joined
    }
}

/// `namespace/name` of a pod, and `namespace/group` of its group (if it has one).
fn member_keys<G: GroupOf>(pod: &Pod) -> (String, Option<String>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let group = G::group(pod)
        .filter(|g| !g.is_empty())
        .map(|g| format!("{ns}/{g}"));
    (format!("{ns}/{name}"), group)
}

/// What of a member pod is kept (copied from it: the rest is never cloned).
fn member(pod: &Pod) -> Pod {
    let metadata = &pod.metadata;
    Pod {
        metadata: ObjectMeta {
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            labels: metadata.labels.clone(),
            owner_references: metadata.owner_references.clone(),
            deletion_timestamp: metadata.deletion_timestamp.clone(),
            creation_timestamp: metadata.creation_timestamp.clone(),
            ..Default::default()
        },
        spec: pod.spec.as_ref().map(|s| PodSpec {
            node_name: s.node_name.clone(),
            scheduler_name: s.scheduler_name.clone(),
            scheduling_group: s.scheduling_group.as_ref().map(|g| PodSchedulingGroup {
                pod_group_name: g.pod_group_name.clone(),
            }),
            ..Default::default()
        }),
        status: pod.status.as_ref().map(|s| PodStatus {
            phase: s.phase.clone(),
            ..Default::default()
        }),
    }
}

impl<G: GroupOf> PodGroupMembers<G> {
    /// Adds or updates a pod (one without a group leaves its group); whether it joined a group.
    pub fn apply(&self, pod: Pod) -> bool {
        let joined = self.inner.write().insert(pod);
        self.changes.bump();
        joined
    }

    /// Removes the pod `namespace/name`; whether it was a member.
    pub fn delete(&self, pod_key: &str) -> bool {
        let removed = self.inner.write().remove(pod_key);
        self.changes.bump();
        removed
    }

    /// Replaces every member (after a re-list).
    pub fn replace(&self, pods: impl IntoIterator<Item = Pod>) {
        let mut fresh = Members::<G>::default();
        for pod in pods {
            fresh.insert(pod);
        }
        *self.inner.write() = fresh;
        self.changes.bump();
    }

    /// The pods of group `group` in `namespace`, in every phase.
    pub fn members(&self, namespace: &str, group: &str) -> Vec<Arc<Pod>> {
        self.inner
            .read()
            .by_group
            .get(&format!("{namespace}/{group}"))
            .map(|pods| pods.values().cloned().collect())
            .unwrap_or_default()
    }

    /// How many pods of group `group` in `namespace` are live ([`is_live`]), without looking at
    /// them: PreEnqueue asks for every gated member each time another arrives, so a group of
    /// 1000 would cost some 300 million visits by the time it is complete.
    pub fn live_count(&self, namespace: &str, group: &str) -> usize {
        self.inner
            .read()
            .live
            .get(&format!("{namespace}/{group}"))
            .copied()
            .unwrap_or(0)
    }

    /// Whether the pod `name` of `namespace` is a member of group `group`, without copying the
    /// group (a queueing hint asks for every gated pod each time a pod is bound).
    pub fn is_member(&self, namespace: &str, group: &str, name: &str) -> bool {
        self.inner
            .read()
            .by_group
            .get(&format!("{namespace}/{group}"))
            .is_some_and(|pods| pods.contains_key(name))
    }

    /// Changes with every write to the store.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn len(&self) -> usize {
        self.inner.read().group_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Member pods. Coscheduling's index is filled by a watch of its own and may catch up after the
/// pod informer told the queue: a gang member rejected because its siblings were not counted yet
/// would then wait for an unrelated event. So a pending pod joining a group is an unscheduled pod
/// added once more, when the index holds it. (GangScheduling's index is filled by the pod
/// informer itself, which drops these changes: its own events come first.)
impl<G: GroupOf> Store<Pod> for PodGroupMembers<G> {
    fn apply(&self, pod: Pod) -> Option<StoreChange<Pod>> {
        let pending = pod.spec.as_ref().is_none_or(|s| s.node_name.is_none());
        let added = pending.then(|| Arc::new(pod.clone()));
        let joined = PodGroupMembers::apply(self, pod);
        added.filter(|_| joined).map(|pod| (None, Some(pod)))
    }

    /// Copies only the kept part of the pod (the pod informer hands every pod of the cluster).
    fn apply_borrowed(&self, pod: &Pod) -> Option<StoreChange<Pod>> {
        Store::apply(self, member(pod))
    }

    fn event_object(&self, pod: Arc<Pod>) -> EventObject {
        PodObject::Unscheduled(Arc::new(PodInfo::new(pod))).into_event_object()
    }

    fn delete(&self, pod: Pod) -> Option<StoreChange<Pod>> {
        let (key, _) = member_keys::<G>(&pod);
        PodGroupMembers::delete(self, &key);
        None
    }

    fn replace(&self, pods: Vec<Pod>) -> Vec<StoreChange<Pod>> {
        PodGroupMembers::replace(self, pods);
        Vec::new()
    }

    fn objects(&self) -> Vec<Arc<Pod>> {
        let inner = self.inner.read();
        inner
            .by_group
            .values()
            .flat_map(|pods| pods.values().cloned())
            .collect()
    }

    fn generation(&self) -> u64 {
        self.changes.count()
    }

    fn len(&self) -> usize {
        PodGroupMembers::len(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;
    use crate::framework::types::objects;

    fn pod(name: &str, group: Option<&str>, phase: &str) -> Pod {
        let labels = group.map(|g| serde_json::json!({ POD_GROUP_LABEL: g }));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "annotations": {"big": "dropped"}},
            "spec": {"nodeName": "n1", "schedulerName": "s",
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "podIP": "10.0.0.1"},
        }))
        .expect("pod")
    }

    #[test]
    fn the_live_count_follows_phases_deletions_and_moves() {
        let members = PodGroupMembers::<ByPodGroupLabel>::default();
        members.apply(pod("a", Some("g"), "Pending"));
        members.apply(pod("b", Some("g"), "Running"));
        members.apply(pod("c", Some("g"), "Succeeded"));
        assert_eq!(members.live_count("ns", "g"), 2);
        // Updates: one finishes, one is being deleted, the finished one is listed again.
        members.apply(pod("a", Some("g"), "Failed"));
        let mut leaving = serde_json::to_value(pod("b", Some("g"), "Running")).expect("pod");
        leaving["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-28T00:00:00Z");
        members.apply(serde_json::from_value(leaving).expect("pod"));
        members.apply(pod("c", Some("g"), "Succeeded"));
        assert_eq!(members.live_count("ns", "g"), 0);
        // A live pod moving to another group counts there only; a removed one nowhere.
        members.apply(pod("d", Some("g"), "Pending"));
        members.apply(pod("d", Some("other"), "Pending"));
        assert_eq!(
            (
                members.live_count("ns", "g"),
                members.live_count("ns", "other")
            ),
            (0, 1)
        );
        members.delete("ns/d");
        assert_eq!(members.live_count("ns", "other"), 0);
        members.replace([
            pod("e", Some("g"), "Pending"),
            pod("f", Some("g"), "Pending"),
        ]);
        assert_eq!(members.live_count("ns", "g"), 2);
        assert_eq!(members.live_count("elsewhere", "g"), 0);
        assert!(members.is_member("ns", "g", "e"));
        assert!(!members.is_member("ns", "g", "d"));
        assert!(!members.is_member("elsewhere", "g", "e"));
    }

    #[test]
    fn members_by_group_follow_their_label() {
        let members = PodGroupMembers::<ByPodGroupLabel>::default();
        let mut changes = members.subscribe();
        assert!(members.apply(pod("a", Some("g"), "Pending")));
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        // An update in the same group is not a new member, but still a change.
        assert!(!members.apply(pod("a", Some("g"), "Running")));
        assert!(changes.has_changed().unwrap_or(false));
        assert!(members.apply(pod("b", Some("g"), "Succeeded")));
        assert!(members.apply(pod("c", Some("other"), "Pending")));
        let mut names: Vec<String> = members
            .members("ns", "g")
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        // Kept: what Coscheduling reads; dropped: the rest.
        let a = members
            .members("ns", "g")
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some("a"))
            .unwrap();
        assert_eq!(
            a.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        assert_eq!(
            a.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("n1")
        );
        assert!(a.metadata.annotations.is_none());
        assert!(a.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
        // Relabelled: moves to its new group; unlabelled: leaves.
        assert!(members.apply(pod("a", Some("other"), "Running")));
        assert_eq!(members.members("ns", "g").len(), 1);
        assert!(!members.apply(pod("a", None, "Running")));
        assert_eq!(members.members("ns", "other").len(), 1);
        assert!(members.delete("ns/b"));
        assert!(!members.delete("ns/b"));
        assert!(members.members("ns", "g").is_empty());
        members.replace([pod("x", Some("g"), "Pending")]);
        assert_eq!(members.len(), 1);
        assert!(members.members("ns", "other").is_empty());
    }

    fn labelled(name: &str) -> PodBuilder {
        PodBuilder::new(name)
            .namespace("ns")
            .label(POD_GROUP_LABEL, "g")
    }

    /// The members index raises an unscheduled-pod add for a pending pod the first time it holds
    /// it, so a sibling rejected before the index caught up is requeued (Coscheduling's hint
    /// matches the group); updates, bound members and pods outside a group raise nothing.
    #[test]
    fn a_pending_pod_joining_a_group_is_an_unscheduled_pod_added() {
        let members = PodGroupMembers::<ByPodGroupLabel>::default();
        let (old, new) = Store::apply(&members, labelled("a").build()).expect("an event");
        assert!(old.is_none());
        let object = members.event_object(new.expect("the new member"));
        let (_, added) = objects::<PodObject>(None, Some(&object)).expect("a PodObject");
        assert!(matches!(added, Some(PodObject::Unscheduled(p)) if p.name() == "a"));

        assert!(Store::apply(&members, labelled("a").build()).is_none());
        assert!(Store::apply(&members, labelled("b").node("n1").build()).is_none());
        assert!(Store::apply(&members, PodBuilder::new("c").namespace("ns").build()).is_none());
        assert_eq!(members.members("ns", "g").len(), 2);
    }

    #[test]
    fn members_by_scheduling_group_follow_their_spec() {
        let members = PodGroupMembers::<BySchedulingGroup>::default();
        let pod = |name: &str, group: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"schedulingGroup": {"podGroupName": group},
                         "containers": [{"name": "c", "image": "i"}]},
            }))
            .expect("pod")
        };
        assert!(members.apply(pod("a", "g")));
        assert!(members.apply(pod("b", "h")));
        assert!(!members.apply(pod("no-group", "")));
        let g = members.members("ns", "g");
        assert_eq!(g.len(), 1);
        // Kept: the group it names, which the gang plugins read back.
        assert_eq!(
            BySchedulingGroup::group(&g[0]),
            Some("g"),
            "the scheduling group survives trimming"
        );
    }
}
