//! Coscheduling's cluster events and queueing hints. scheduler-plugins registers Pod/Add and
//! PodGroup/Add|Update without hints; ksched narrows them to the pod's own group, and adds what
//! frees room for a gang that did not fit (an assigned pod deleted, a node added or grown).

use crate::api::PodGroup;
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodObject, PodView,
    QueueingHint, objects,
};

use super::plugin::Coscheduling;
use super::pod_group_manager::pod_group_label;

impl EnqueueExtensions for Coscheduling {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            // A member added (created, or bound): the group may reach minMember.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::ADD),
                is_schedulable_after_member_added,
            ),
            // Room freed for a gang that did not fit.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
            )),
            // The pod's PodGroup created or changed (minMember, minResources).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PodGroup,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                is_schedulable_after_pod_group_change,
            ),
        ]
    }
}

/// Whether `other` is in `pod`'s group.
fn same_group(pod: &PodInfo, other: &impl PodView) -> bool {
    let group = pod_group_label(pod);
    !group.is_empty() && other.namespace() == pod.namespace() && pod_group_label(other) == group
}

fn is_schedulable_after_member_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, added) = objects::<PodObject>(old, new)?;
    Ok(queue_if(added.is_some_and(|p| same_group(pod, p))))
}

fn is_schedulable_after_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (deleted, _) = objects::<PodObject>(old, new)?;
    Ok(queue_if(deleted.is_some_and(|d| {
        d.on_or_nominated_to_node() && !pod_group_label(pod).is_empty()
    })))
}

fn is_schedulable_after_pod_group_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, group) = objects::<PodGroup>(old, new)?;
    Ok(queue_if(group.is_some_and(|g| {
        g.metadata.namespace.as_deref() == Some(pod.namespace())
            && g.metadata.name.as_deref() == Some(pod_group_label(pod))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::POD_GROUP_LABEL;
    use crate::framework::testing::PodBuilder;
    use crate::framework::testing::hints::{assigned_obj, obj, pod_obj};
    use QueueingHint::{Queue, QueueSkip};

    fn member(name: &str, ns: &str, group: &str) -> PodBuilder {
        PodBuilder::new(name)
            .namespace(ns)
            .label(POD_GROUP_LABEL, group)
    }

    #[test]
    fn hints() {
        let pod = member("p", "ns", "g").info();
        let added = |p: PodBuilder| {
            let new = pod_obj(p.build());
            is_schedulable_after_member_added(&pod, None, Some(&new))
        };
        assert_eq!(added(member("q", "ns", "g")), Ok(Queue));
        assert_eq!(added(member("q", "ns", "other")), Ok(QueueSkip));
        assert_eq!(added(member("q", "other", "g")), Ok(QueueSkip));
        assert_eq!(added(PodBuilder::new("q").namespace("ns")), Ok(QueueSkip));
        let bound = assigned_obj(member("q", "ns", "g").node("n").build());
        assert_eq!(
            is_schedulable_after_member_added(&pod, None, Some(&bound)),
            Ok(Queue)
        );
        let deleted = assigned_obj(PodBuilder::new("d").node("n").build());
        assert_eq!(
            is_schedulable_after_pod_deleted(&pod, Some(&deleted), None),
            Ok(Queue)
        );
        let loner = PodBuilder::new("l").info();
        assert_eq!(
            is_schedulable_after_pod_deleted(&loner, Some(&deleted), None),
            Ok(QueueSkip)
        );
        let group = |ns: &str, name: &str| {
            let mut g = PodGroup::default();
            g.metadata.namespace = Some(ns.into());
            g.metadata.name = Some(name.into());
            obj(g)
        };
        assert_eq!(
            is_schedulable_after_pod_group_change(&pod, None, Some(&group("ns", "g"))),
            Ok(Queue)
        );
        assert_eq!(
            is_schedulable_after_pod_group_change(&pod, None, Some(&group("ns", "h"))),
            Ok(QueueSkip)
        );
    }
}
