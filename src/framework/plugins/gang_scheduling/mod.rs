//! GangScheduling (upstream 1.37's `gangscheduling`, gate `GenericWorkload`): pods naming a
//! `scheduling.k8s.io/v1beta1` PodGroup in `spec.schedulingGroup.podGroupName` whose policy is
//! `gang` are scheduled all or nothing.
//!
//! - PreEnqueue keeps a member out of the active queue until its PodGroup exists and the
//!   scheduler knows `minCount` of its pods (the gang's members appear one by one).
//! - Permit holds each assumed member until `minCount` of the gang are assumed or bound, then
//!   allows every waiting member at once; a member left waiting past the timeout (5 minutes, as
//!   upstream) is rejected, so a gang that cannot reach `minCount` binds none of its pods.
//! - A member added, the PodGroup created, or its `minCount` lowered tries the gang's pods again.
//!
//! - PlacementFeasible tells the group cycle (`scheduler::cycle::group`) whether `minCount` can
//!   still be met as its members are tried.
//!
//! The group cycle places a gang whole or not at all; this plugin's Permit stays the
//! all-or-nothing guard, as upstream's does. Groups without a `gang` policy (`basic`) are not
//! held.

mod events;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use tracing::debug;

use super::helper::impl_plugin;
use super::names;
use crate::framework::interface::{
    Code, CycleState, PLACEMENT_PROGRESS, PermitPlugin, PlacementFeasiblePlugin, PlacementProgress,
    PreEnqueuePlugin, Status,
};
use crate::framework::listers::{
    BySchedulingGroup, GroupOf, Informer, Listers, PodGroupMembers, SCHEDULING_GROUP_MEMBERS,
    WORKLOAD_POD_GROUPS,
};
use crate::framework::registry::{Handle, PluginRegistration, policy_rule};
use crate::framework::types::{PodInfo, PodView, Snapshot};

/// How long an assumed member waits at Permit for the rest of its gang (upstream's
/// `permitTimeoutDuration`).
const PERMIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The kinds it reads: the PodGroups and the pods by the group they name.
const INFORMERS: &[Informer] = &[&WORKLOAD_POD_GROUPS, &SCHEDULING_GROUP_MEMBERS];

pub(crate) struct GangScheduling {
    handle: Handle,
}

impl_plugin!(
    GangScheduling,
    names::GANG_SCHEDULING,
    [PreEnqueue, Permit],
    EnqueueExtensions,
    PlacementFeasible
);

/// The gang's `minCount`; `None` for a group whose policy is not `gang`.
fn min_count(group: &PodGroup) -> Option<usize> {
    group
        .spec
        .scheduling_policy
        .gang
        .as_ref()
        .map(|g| usize::try_from(g.min_count).unwrap_or(0))
}

impl GangScheduling {
    pub(crate) fn new(handle: Handle) -> GangScheduling {
        GangScheduling { handle }
    }

    fn listers(&self) -> &Listers {
        &self.handle.listers
    }

    fn members(&self) -> &PodGroupMembers<BySchedulingGroup> {
        self.listers().store(&SCHEDULING_GROUP_MEMBERS)
    }

    fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.listers()
            .store(&WORKLOAD_POD_GROUPS)
            .get(namespace, name)
    }

    /// The gang's members assumed or bound: those on a node of `snapshot` (assumed pods are
    /// there) or bound since, and `pod` (being assumed now; the snapshot may not show it yet).
    fn scheduled(&self, pod: &PodInfo, group: &str, snapshot: &Snapshot) -> usize {
        let namespace = pod.namespace();
        let members = self.members().members(namespace, group);
        let bound = members
            .iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .filter_map(|p| p.metadata.name.as_deref());
        let mut scheduled: HashSet<&str> = bound.collect();
        scheduled.insert(pod.name());
        let names: HashSet<&str> = members
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        for node in snapshot.nodes() {
            for p in node.pods.iter() {
                if p.namespace() == namespace && names.contains(p.name()) {
                    scheduled.insert(p.name());
                }
            }
        }
        scheduled.len()
    }
}

impl PreEnqueuePlugin for GangScheduling {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let Some(group) = BySchedulingGroup::group(&pod.pod) else {
            return Status::success();
        };
        let Some(pg) = self.pod_group(pod.namespace(), group) else {
            return Status::unresolvable(format!(
                "waiting for pods's pod group \"{group}\" to appear in scheduling queue"
            ));
        };
        let Some(min) = min_count(&pg) else {
            return Status::success();
        };
        let known = self.members().live_count(pod.namespace(), group);
        if known < min {
            debug!(pod = %pod.key(), group, known, min, "gang members not all seen yet");
            return Status::unresolvable(
                "waiting for minCount pods from a gang to appear in scheduling queue",
            );
        }
        Status::success()
    }
}

impl PermitPlugin for GangScheduling {
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let Some(group) = BySchedulingGroup::group(&pod.pod) else {
            return (Status::success(), Duration::ZERO);
        };
        let namespace = pod.namespace();
        let Some(pg) = self.pod_group(namespace, group) else {
            return (
                Status::error(format!(
                    "failed to get podGroup {namespace}/{group}: podgroup.scheduling.k8s.io \"{group}\" not found"
                )),
                Duration::ZERO,
            );
        };
        let Some(min) = min_count(&pg) else {
            return (Status::success(), Duration::ZERO);
        };
        // In a group cycle the cycle knows how many are placed; otherwise count them.
        let scheduled = match state.read::<PlacementProgress>(PLACEMENT_PROGRESS) {
            Some(progress) => progress.scheduled,
            None => self.scheduled(pod, group, &self.handle.snapshot.load()),
        };
        if scheduled < min {
            debug!(pod = %pod.key(), group, scheduled, min,
                "quorum is not met for a gang; waiting for another pod to allow");
            return (
                Status::new(
                    Code::Wait,
                    "waiting for minCount pods from a gang to be scheduled",
                ),
                PERMIT_TIMEOUT,
            );
        }
        for waiting in self.handle.waiting_pods.list() {
            let member = &waiting.pod().pod;
            if member.metadata.namespace.as_deref() == Some(namespace)
                && BySchedulingGroup::group(member) == Some(group)
            {
                waiting.allow(names::GANG_SCHEDULING);
            }
        }
        debug!(pod = %pod.key(), group, "quorum is met for a gang; allowing its waiting pods");
        (Status::success(), Duration::ZERO)
    }
}

impl PlacementFeasiblePlugin for GangScheduling {
    /// Upstream's messages: the cycle stops once `minCount` can no longer be met.
    fn placement_feasible(&self, group: &PodGroup, progress: PlacementProgress) -> Status {
        let min = min_count(group).unwrap_or(1);
        let PlacementProgress {
            remaining,
            scheduled,
        } = progress;
        if remaining + scheduled < min {
            return Status::unschedulable(format!(
                "minCount ({min}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
            ));
        }
        if scheduled < min {
            return Status::new(
                Code::Wait,
                format!(
                    "minCount ({min}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining"
                ),
            );
        }
        Status::success()
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        GangScheduling::EXTENSION_POINTS,
        crate::framework::args::no_args,
        |_, handle| {
            Ok(Arc::new(GangScheduling::new(handle.clone()))
                as Arc<dyn crate::framework::interface::Plugin>)
        },
    )
    .with_informers(INFORMERS)
    .with_rbac_rules(vec![
        policy_rule(
            &["scheduling.k8s.io"],
            &["podgroups", "workloads"],
            &["get", "list", "watch"],
        ),
        // The group cycle writes the PodGroupInitiallyScheduled condition.
        policy_rule(&["scheduling.k8s.io"], &["podgroups/status"], &["patch"]),
    ])
}
