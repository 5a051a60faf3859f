//! GangScheduling's cluster events and queueing hints (upstream's `EventsToRegister`): a pod of
//! the gang added (pending or bound), the gang's PodGroup created, or its `minCount` lowered.

use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::{GangScheduling, min_count};
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::listers::{BySchedulingGroup, GroupOf, Listers, SCHEDULING_GROUP_MEMBERS};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodObject, PodView,
    QueueingHint, objects,
};

impl EnqueueExtensions for GangScheduling {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        // spec.schedulingGroup is immutable: a pod's update never changes its gang.
        let listers = self.handle.listers.clone();
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::ADD),
                move |pod, old, new| is_schedulable_after_pod_added(&listers, pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::WorkloadPodGroup, ActionType::ADD),
                is_schedulable_after_pod_group_added,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::WorkloadPodGroup, ActionType::UPDATE),
                is_schedulable_after_pod_group_updated,
            ),
        ]
    }
}

/// Whether `group` is the PodGroup `pod` names.
fn is_pods_group(pod: &PodInfo, group: &PodGroup) -> bool {
    BySchedulingGroup::group(&pod.pod).is_some_and(|name| {
        group.metadata.name.as_deref() == Some(name)
            && group.metadata.namespace.as_deref() == Some(pod.namespace())
    })
}

/// Upstream's `isSchedulableAfterPodAdded`: the added pod (pending or bound) is in the same gang.
/// A bound pod's event carries what the node keeps of it, not its scheduling group: the gang's
/// member index says whether it is one of them.
fn is_schedulable_after_pod_added(
    listers: &Listers,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, added) = objects::<PodObject>(old, new)?;
    let (Some(group), Some(added)) = (BySchedulingGroup::group(&pod.pod), added) else {
        return Ok(QueueingHint::QueueSkip);
    };
    if added.namespace() != pod.namespace() {
        return Ok(QueueingHint::QueueSkip);
    }
    let same_gang = match added {
        PodObject::Unscheduled(info) => BySchedulingGroup::group(&info.pod) == Some(group),
        PodObject::Assigned { pod: bound, .. } => listers
            .store(&SCHEDULING_GROUP_MEMBERS)
            .is_member(pod.namespace(), group, bound.name()),
    };
    Ok(queue_if(same_gang))
}

/// Upstream's `isSchedulableAfterPodGroupAdded`: the pod's own PodGroup appeared.
fn is_schedulable_after_pod_group_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, added) = objects::<PodGroup>(old, new)?;
    Ok(queue_if(added.is_some_and(|g| is_pods_group(pod, g))))
}

/// Upstream's `isSchedulableAfterPodGroupUpdated`: the pod's gang lowered its `minCount`.
fn is_schedulable_after_pod_group_updated(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<PodGroup>(old, new)?;
    let (Some(old), Some(new)) = (old, new) else {
        return Ok(QueueingHint::QueueSkip);
    };
    if !is_pods_group(pod, new) {
        return Ok(QueueingHint::QueueSkip);
    }
    Ok(queue_if(matches!(
        (min_count(old), min_count(new)),
        (Some(before), Some(after)) if after < before
    )))
}
