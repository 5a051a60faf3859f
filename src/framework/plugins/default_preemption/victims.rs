//! Preemption's victims as units (upstream 1.37's `Victim` in `framework/preemption/types.go`):
//! a pod, or, with workload-aware scheduling (GenericWorkload), every running pod of a PodGroup
//! whose `disruptionMode` is `all`, which go together wherever they run. A PodGroup's pods weigh
//! with the group's priority. Both preemptions use them: a pod's on one node (the units touching
//! that node) and a pod group's across the cluster.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::jiff::Timestamp;

use crate::emulation::GENERIC_WORKLOAD;
use crate::framework::listers::{SCHEDULING_GROUP_MEMBERS, WORKLOAD_POD_GROUPS};
use crate::framework::registry::Handle;
use crate::framework::types::{AssignedPod, NodeInfo, PodView, Snapshot};

/// The group's priority (upstream's `PodGroupPriority`: unset is 0).
pub(crate) fn pod_group_priority(group: &PodGroup) -> i32 {
    group.spec.priority.unwrap_or(0)
}

/// What a pod's dry run needs of the cluster beyond the node it tries: the PDBs, the running
/// pods' groups, and the other nodes (a whole group's pods elsewhere).
pub(crate) struct VictimCluster<'a> {
    pub(super) pdbs: &'a [Arc<PodDisruptionBudget>],
    pub(super) index: &'a VictimIndex,
    pub(super) snapshot: &'a Snapshot,
}

/// The PodGroup a running pod belongs to, as preemption weighs it.
struct VictimGroup {
    /// `namespace/name`.
    key: String,
    priority: i32,
    /// `disruptionMode: all`: its pods go together.
    all: bool,
}

/// What can be evicted as one (upstream's `Victim`): a pod, or all running pods of a group
/// with `disruptionMode: all`.
pub(super) struct Victim {
    /// Each pod with its node.
    pub(super) pods: Vec<(String, Arc<AssignedPod>)>,
    /// The group's priority for a group's pods, else the pod's.
    pub(super) priority: i32,
    /// Its pods belong to a PodGroup (upstream's `PodGroupKeyType`, which also marks one pod of
    /// a group with `disruptionMode: single`): ranked above plain pods, and counted as a
    /// workload disruption.
    pub(super) grouped: bool,
}

impl Victim {
    /// The earliest start among its pods (a pod not started counts as starting now).
    fn earliest_start(&self, now: Timestamp) -> Timestamp {
        self.pods
            .iter()
            .map(|(_, p)| p.start_time().map_or(now, |t| t.0))
            .min()
            .unwrap_or(now)
    }
}

/// Upstream's `MoreImportantVictim` as an ordering (most important first): higher priority,
/// then a group's pods before plain pods, then more pods, then started earlier.
pub(super) fn more_important(a: &Victim, b: &Victim, now: Timestamp) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| b.grouped.cmp(&a.grouped))
        .then_with(|| b.pods.len().cmp(&a.pods.len()))
        .then_with(|| a.earliest_start(now).cmp(&b.earliest_start(now)))
}

/// The running pods' PodGroups, read once per preemption; empty without GenericWorkload (every
/// pod is then a unit of its own with its own priority, as upstream).
#[derive(Default)]
pub(crate) struct VictimIndex {
    /// The known PodGroup of each running pod, by pod UID.
    groups: HashMap<String, Arc<VictimGroup>>,
    /// The running pods of each group with `disruptionMode: all`, with their nodes, by group.
    whole: HashMap<String, Vec<(String, Arc<AssignedPod>)>>,
}

impl VictimIndex {
    pub(super) fn new(handle: &Handle, snapshot: &Snapshot) -> VictimIndex {
        if !handle.emulation.enabled(GENERIC_WORKLOAD) {
            return VictimIndex::default();
        }
        let members = handle.listers.store(&SCHEDULING_GROUP_MEMBERS);
        let mut groups = HashMap::new();
        for group in handle.listers.store(&WORKLOAD_POD_GROUPS).list() {
            let namespace = group.metadata.namespace.as_deref().unwrap_or_default();
            let name = group.metadata.name.as_deref().unwrap_or_default();
            let all = group
                .spec
                .disruption_mode
                .as_ref()
                .is_some_and(|m| m.all.is_some());
            let victim_group = Arc::new(VictimGroup {
                key: format!("{namespace}/{name}"),
                priority: pod_group_priority(&group),
                all,
            });
            for pod in members.members(namespace, name) {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                groups.insert(uid, victim_group.clone());
            }
        }
        let mut whole: HashMap<String, Vec<(String, Arc<AssignedPod>)>> = HashMap::new();
        for node in snapshot.nodes() {
            for pod in &node.pods {
                if let Some(g) = groups.get(pod.uid()).filter(|g| g.all) {
                    let placed = (node.name().to_string(), pod.clone());
                    whole.entry(g.key.clone()).or_default().push(placed);
                }
            }
        }
        VictimIndex { groups, whole }
    }

    /// The priority `pod` weighs with as a victim (upstream's `GetPodPriority`).
    pub(super) fn priority_of(&self, pod: &AssignedPod) -> i32 {
        self.groups
            .get(pod.uid())
            .map_or(pod.priority(), |g| g.priority)
    }

    /// The units of the pods on `nodes`, in the order the nodes list them (upstream's
    /// `getCrossNodesVictims`): a group with `disruptionMode: all` once, with its pods on every
    /// node.
    pub(super) fn units<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeInfo>) -> Vec<Victim> {
        let mut victims = Vec::new();
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for node in nodes {
            for pod in &node.pods {
                match self.groups.get(pod.uid()) {
                    Some(g) if g.all => {
                        if seen.insert(&g.key, ()).is_none() {
                            victims.push(Victim {
                                pods: self.whole.get(&g.key).cloned().unwrap_or_default(),
                                priority: g.priority,
                                grouped: true,
                            });
                        }
                    }
                    group => victims.push(Victim {
                        pods: vec![(node.name().to_string(), pod.clone())],
                        priority: group.map_or(pod.priority(), |g| g.priority),
                        grouped: group.is_some(),
                    }),
                }
            }
        }
        victims
    }
}
