//! Which pods a request schedules: pending pods of the profiles, running pods made pending
//! again, one pod or one PodGroup's members; each given to a profile's scheduler name and
//! trimmed as the scheduler's informer trims it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{Request, SimulateError};
use crate::framework::listers::{BySchedulingGroup, GroupOf, WORKLOAD_POD_GROUPS};
use crate::framework::types::PodInfo;
use crate::scheduler::trim::trim_pod;
use crate::simulate::snapshot::{ClusterState, is_finished, pod_key};

pub(super) fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(crate::operator::DEFAULT_SCHEDULER)
}

pub(super) fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Pods the scheduler would try: not bound, not finished, not being deleted.
fn is_pending(pod: &Pod) -> bool {
    node_name(pod).is_empty() && !is_finished(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// A static pod's mirror: the kubelet runs it where it is, no scheduler places it.
fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Hand-written snapshots may leave UIDs out; the cache and Permit tell pods apart by UID.
pub(super) fn give_uids(pods: &mut [Pod]) {
    for pod in pods {
        if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
            pod.metadata.uid = Some(format!("simulated-{}", pod_key(pod)));
        }
    }
}

/// Makes `pod` pending again for `scheduler` (rescheduling it from scratch).
fn unbind(pod: &mut Pod, scheduler: &str) {
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
        spec.scheduler_name = Some(scheduler.to_string());
    }
    if let Some(status) = pod.status.as_mut() {
        status.nominated_node_name = None;
    }
}

/// Prepares `state` for `request` and returns the pods to schedule, sorted by key (the order a
/// freshly started scheduler lists them in, which breaks QueueSort ties).
pub(in crate::simulate) fn select(
    state: &mut ClusterState,
    request: &Request,
    profiles: &[String],
    first: &str,
) -> Result<Vec<Arc<PodInfo>>, SimulateError> {
    let mut chosen: Vec<Pod> = Vec::new();
    match request {
        Request::Pending { all } => {
            for pod in &mut state.pods {
                if !is_pending(pod) {
                    continue;
                }
                let ours = profiles.iter().any(|p| p == scheduler_name(pod));
                if !ours && !all {
                    continue;
                }
                if !ours {
                    unbind(pod, first);
                }
                chosen.push(pod.clone());
            }
        }
        Request::Reschedule { namespace } => {
            for pod in &mut state.pods {
                let in_scope = namespace
                    .as_deref()
                    .is_none_or(|ns| pod.metadata.namespace.as_deref() == Some(ns));
                if !in_scope
                    || node_name(pod).is_empty()
                    || is_finished(pod)
                    || pod.metadata.deletion_timestamp.is_some()
                    || is_mirror(pod)
                {
                    continue;
                }
                unbind(pod, first);
                chosen.push(pod.clone());
            }
        }
        Request::ExplainGroup { group } => {
            let (namespace, name) = group.split_once('/').unwrap_or(("default", group));
            let known = state
                .listers
                .store(&WORKLOAD_POD_GROUPS)
                .get(namespace, name)
                .is_some();
            for pod in &mut state.pods {
                let member = pod.metadata.namespace.as_deref() == Some(namespace)
                    && BySchedulingGroup::group(pod) == Some(name);
                if !member || !is_pending(pod) {
                    continue;
                }
                if !profiles.iter().any(|p| p == scheduler_name(pod)) {
                    unbind(pod, first);
                }
                chosen.push(pod.clone());
            }
            if !known || chosen.is_empty() {
                return Err(SimulateError::PodGroupNotFound(format!(
                    "{namespace}/{name}"
                )));
            }
        }
        Request::Explain { pod: key, .. } => {
            let key = if key.contains('/') {
                key.clone()
            } else {
                format!("default/{key}")
            };
            let pod = state
                .pods
                .iter_mut()
                .find(|p| pod_key(p) == key && !is_finished(p))
                .ok_or_else(|| SimulateError::PodNotFound(key.clone()))?;
            let ours = profiles.iter().any(|p| p == scheduler_name(pod));
            if !node_name(pod).is_empty() || !ours {
                unbind(pod, first);
            }
            chosen.push(pod.clone());
        }
    }
    chosen.sort_by_key(pod_key);
    Ok(chosen
        .into_iter()
        .map(|mut p| {
            trim_pod(&mut p);
            Arc::new(PodInfo::new(Arc::new(p)))
        })
        .collect())
}
