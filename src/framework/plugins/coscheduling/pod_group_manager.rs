//! The PodGroup bookkeeping of Coscheduling (scheduler-plugins' `pkg/coscheduling/core/core.go`
//! and `pkg/util`): a pod's group, the group's members (from the scheduler's index of the pods
//! carrying the pod-group label, never from the API), whether the cluster has room for its
//! `minResources`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

use crate::api::PodGroup;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::framework::listers::{POD_GROUP_MEMBERS, POD_GROUPS};
use crate::framework::registry::Handle;
use crate::framework::types::{NodeInfo, PodView, QueuedPodInfo, Resource, Snapshot};

/// The PodGroup name a pod's label names (empty when none).
pub(crate) fn pod_group_label(pod: &impl PodView) -> &str {
    pod.labels()
        .and_then(|l| l.get(POD_GROUP_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

/// `namespace/group` of the pod's PodGroup (empty when the pod has none).
pub(crate) fn pod_group_full_name(pod: &impl PodView) -> String {
    match pod_group_label(pod) {
        "" => String::new(),
        pg => format!("{}/{pg}", pod.namespace()),
    }
}

pub(super) fn min_member(pg: &PodGroup) -> usize {
    usize::try_from(pg.spec.min_member.unwrap_or(1)).unwrap_or(0)
}

pub(super) fn is_terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub(super) fn count_assigned(snapshot: &Snapshot, pg_name: &str, namespace: &str) -> usize {
    snapshot
        .nodes()
        .iter()
        .flat_map(|n| n.pods.iter())
        .filter(|p| pod_group_label(*p) == pg_name && p.namespace() == namespace)
        .count()
}

/// Upstream's CheckClusterResource: whether the nodes' free resources (not counting the group's own
/// pods) add up to `request`; the gap otherwise.
pub(super) fn check_cluster_resource(
    nodes: &[Arc<NodeInfo>],
    request: &BTreeMap<String, i64>,
    full_name: &str,
) -> Result<(), String> {
    let mut left: BTreeMap<String, i64> = request.clone();
    for info in nodes {
        if info.node().is_none() {
            continue;
        }
        let mut requested = info.requested.clone();
        let mut pods = info.pods.len() as i64;
        for p in &info.pods {
            if pod_group_full_name(p) == full_name {
                requested.sub(&p.requests);
                pods -= 1;
            }
        }
        let mut free = Resource::default();
        for name in left.keys() {
            let v = if name == "pods" {
                info.allocatable.allowed_pod_number - pods
            } else {
                info.allocatable.get(name) - requested.get(name)
            };
            free.set_named(name, v);
        }
        left = left
            .into_iter()
            .filter_map(|(name, q)| {
                let rest = q - free.get(&name);
                (rest > 0).then_some((name, rest))
            })
            .collect();
        if left.is_empty() {
            return Ok(());
        }
    }
    let gap: Vec<String> = left
        .iter()
        .map(|(k, v)| {
            if k == "cpu" {
                format!("{k}:{v}m")
            } else {
                format!("{k}:{v}")
            }
        })
        .collect();
    Err(format!("resource gap: map[{}]", gap.join(" ")))
}

/// The PodGroup bookkeeping the plugin decides with (scheduler-plugins' `PodGroupManager`): a
/// pod's group, its members, the groups that failed recently (backoff) and those whose
/// `minResources` check passed.
pub(super) struct PodGroupManager {
    handle: Handle,
    /// permitWaitingTimeSeconds: how long a passed `minResources` check holds.
    schedule_timeout: Duration,
    /// Groups that failed recently, until when (upstream's `backedOffPG`).
    pub(super) backed_off: Mutex<HashMap<String, Instant>>,
    /// Groups whose minResources check passed, until when (upstream's `permittedPG`).
    permitted: Mutex<HashMap<String, Instant>>,
}

impl PodGroupManager {
    pub(super) fn new(handle: Handle, schedule_timeout: Duration) -> PodGroupManager {
        PodGroupManager {
            handle,
            schedule_timeout,
            backed_off: Mutex::new(HashMap::new()),
            permitted: Mutex::new(HashMap::new()),
        }
    }

    /// The pod's PodGroup full name and the PodGroup (None when the label names a missing group).
    pub(super) fn pod_group(&self, pod: &Pod) -> (String, Option<Arc<PodGroup>>) {
        let name = pod_group_label(pod);
        if name.is_empty() {
            return (String::new(), None);
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        (
            format!("{ns}/{name}"),
            self.handle.listers.store(&POD_GROUPS).get(ns, name),
        )
    }

    /// The group's pods that have a node in the snapshot (assumed or bound).
    pub(super) fn calculate_assigned_pods(&self, pg_name: &str, namespace: &str) -> usize {
        let snapshot = self.handle.snapshot.load();
        count_assigned(&snapshot, pg_name, namespace)
    }

    /// The group's pods, in every phase, from the member index the scheduler's informer keeps
    /// (upstream lists them from its pod lister).
    pub(super) fn group_pods(&self, namespace: &str, group: &str) -> Vec<Arc<Pod>> {
        self.handle
            .listers
            .store(&POD_GROUP_MEMBERS)
            .members(namespace, group)
    }

    /// How many of the group's pods are not finished.
    pub(super) fn live_members(&self, namespace: &str, group: &str) -> usize {
        self.group_pods(namespace, group)
            .iter()
            .filter(|p| !is_terminal(p))
            .count()
    }

    /// Whether the group failed recently (upstream's backedOffPG).
    pub(super) fn is_backed_off(&self, full: &str) -> bool {
        unexpired(&self.backed_off, full)
    }

    /// Denies the group for `backoff` (upstream's `BackoffPodGroup`).
    pub(super) fn backoff_pod_group(&self, full: &str, backoff: Duration) {
        self.backed_off
            .lock()
            .insert(full.to_string(), Instant::now() + backoff);
    }

    /// Whether the group's `minResources` check passed lately (upstream's permittedPG).
    pub(super) fn is_permitted(&self, full: &str) -> bool {
        unexpired(&self.permitted, full)
    }

    /// Remembers that the group's `minResources` check passed, for `permitWaitingTimeSeconds`.
    pub(super) fn permit(&self, full: &str) {
        self.permitted
            .lock()
            .insert(full.to_string(), Instant::now() + self.schedule_timeout);
    }

    /// Forgets the group's passed `minResources` check (upstream's `DeletePermittedPodGroup`).
    pub(super) fn delete_permitted(&self, full: &str) {
        self.permitted.lock().remove(full);
    }

    /// The group's creation time, or the pod's own when it has no group (upstream's
    /// `GetCreationTimestamp`).
    pub(super) fn creation_time(&self, q: &QueuedPodInfo) -> Option<Timestamp> {
        let pod = &q.pod_info.pod;
        let (_, pg) = self.pod_group(pod);
        pg.and_then(|pg| pg.metadata.creation_timestamp.clone())
            .or_else(|| pod.metadata.creation_timestamp.clone())
            .map(|t| t.0)
    }
}

/// Whether `map` holds `key` until a time not yet reached; an expired entry is dropped.
fn unexpired(map: &Mutex<HashMap<String, Instant>>, key: &str) -> bool {
    let mut map = map.lock();
    match map.get(key) {
        Some(until) if *until > Instant::now() => true,
        Some(_) => {
            map.remove(key);
            false
        }
        None => false,
    }
}
