//! DefaultPreemption's PodGroupPostFilter (upstream 1.37's `PodGroupEvaluator`, workload-aware
//! preemption): a pod group its cycle did not place may preempt lower-priority pods across the
//! cluster to make room for the whole group.
//!
//! So far ksched answers the cases where no preemption can happen exactly as upstream (a group
//! that may not preempt, or no lower-priority pod in the cluster); choosing and evicting victims
//! for a group is not built yet, and says so.

use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::plugin::{DefaultPreemption, NOT_ELIGIBLE_NEVER};
use crate::framework::interface::{PodGroupPostFilterPlugin, Status};
use crate::framework::types::{PodInfo, Snapshot};

/// No pod in the cluster has a lower priority than the group.
const NO_GROUP_VICTIMS: &str = "No preemption victims found for incoming preemptor";

/// What upstream prefixes every message of the group's preemption with.
const PREFIX: &str = "pod group preemption: ";

/// The group's priority (upstream's `PodGroupPriority`: unset is 0).
pub(crate) fn pod_group_priority(group: &PodGroup) -> i32 {
    group.spec.priority.unwrap_or(0)
}

impl PodGroupPostFilterPlugin for DefaultPreemption {
    fn pod_group_post_filter(
        &self,
        group: &PodGroup,
        members: &[Arc<PodInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        // Without PodGroupPreemptionPolicy (alpha, off) the members' policy is the group's.
        let never = members
            .first()
            .and_then(|m| m.spec())
            .and_then(|s| s.preemption_policy.as_deref())
            == Some("Never");
        if never {
            return Status::unschedulable(format!("{PREFIX}{NOT_ELIGIBLE_NEVER}"));
        }
        let priority = pod_group_priority(group);
        let any_victim = snapshot
            .nodes()
            .iter()
            .any(|n| n.pods.iter().any(|p| p.priority() < priority));
        if !any_victim {
            return Status::unresolvable(format!("{PREFIX}{NO_GROUP_VICTIMS}"));
        }
        Status::unschedulable(format!(
            "{PREFIX}ksched does not preempt for pod groups yet (lower-priority pods are running)"
        ))
    }
}
