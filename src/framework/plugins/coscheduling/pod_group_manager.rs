//! The PodGroup bookkeeping of Coscheduling (scheduler-plugins' `pkg/coscheduling/core/core.go`
//! and `pkg/util`): a pod's group, the group's members, whether the cluster has room for its
//! `minResources`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::api::PodGroup;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::framework::types::{NodeInfo, PodView, Resource, Snapshot};

/// The longest PreFilter/PostFilter wait for the API when they count a group's pods.
pub(super) const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// The PodGroup name a pod's label names (empty when none).
pub fn pod_group_label(pod: &impl PodView) -> &str {
    pod.labels()
        .and_then(|l| l.get(POD_GROUP_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

/// `namespace/group` of the pod's PodGroup (empty when the pod has none).
pub fn pod_group_full_name(pod: &impl PodView) -> String {
    match pod_group_label(pod) {
        "" => String::new(),
        pg => format!("{}/{pg}", pod.namespace()),
    }
}

pub(super) fn min_member(pg: &PodGroup) -> usize {
    usize::try_from(pg.spec.min_member.unwrap_or(1)).unwrap_or(0)
}

/// Runs `f` to completion from a synchronous extension point (they run on a blocking-capable
/// worker of the multi-threaded runtime); `None` on a current-thread runtime or on timeout.
/// Without any runtime (`ksched simulate`, whose API answers from memory) it runs here.
pub(super) fn block_on<F: Future>(f: F) -> Option<F::Output> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Some(futures::executor::block_on(f));
    };
    if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return None;
    }
    tokio::task::block_in_place(|| rt.block_on(tokio::time::timeout(LIST_TIMEOUT, f)).ok())
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
