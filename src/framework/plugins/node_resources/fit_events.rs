//! NodeResourcesFit's cluster events and queueing hints (upstream's `Fit.EventsToRegister` and
//! `isSchedulableAfter*`): room is freed by a pod deleted or scaled down, added by a node added
//! or whose allocatable grew.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::DeviceClass;

use super::fit::{Fit, fits};
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodObject, PodView,
    QueueingHint, Resource, objects,
};

use crate::framework::plugins::dynamic_resources::claims::DEVICE_CLASS_PREFIX;

impl EnqueueExtensions for Fit {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            // In-place resize (InPlacePodVerticalScaling, on since 1.35) frees room too.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::DELETE | ActionType::UPDATE_POD_SCALE_DOWN,
                ),
                is_schedulable_after_pod_event,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
                ),
                is_schedulable_after_node_change,
            ),
            // DRAExtendedResource (on in 1.36): a class may now provide an extended resource.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::DeviceClass,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                is_schedulable_after_device_class_event,
            ),
        ]
    }
}

/// Upstream's `isSchedulableAfterPodEvent`: a pod holding resources deleted, or scaled down in
/// a resource the pod requests (or the pod itself scaled down).
fn is_schedulable_after_pod_event(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<PodObject>(old, new)?;
    match (original, modified) {
        (Some(deleted), None) => Ok(queue_if(deleted.on_or_nominated_to_node())),
        (Some(original), Some(modified)) => {
            Ok(queue_if(scale_down_may_help(pod, original, modified)))
        }
        _ => Ok(QueueingHint::QueueSkip),
    }
}

/// Upstream's `isSchedulableAfterPodScaleDown`.
fn scale_down_may_help(target: &PodInfo, original: &PodObject, modified: &PodObject) -> bool {
    if modified.uid() == target.uid() {
        return true;
    }
    if modified.node_name().is_empty() {
        return false;
    }
    let (before, after, want) = (original.requests(), modified.requests(), &target.requests);
    (want.milli_cpu > 0 && before.milli_cpu > after.milli_cpu)
        || (want.memory > 0 && before.memory > after.memory)
        || (want.ephemeral_storage > 0 && before.ephemeral_storage > after.ephemeral_storage)
        || want
            .scalar_resources
            .iter()
            .any(|(name, v)| *v > 0 && scalar(before, name) > scalar(after, name))
}

fn scalar(r: &Resource, name: &str) -> i64 {
    r.scalar_resources.get(name).copied().unwrap_or(0)
}

fn allocatable(node: &Node) -> Resource {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(Resource::from_list)
        .unwrap_or_default()
}

/// Upstream's `isSchedulableAfterNodeChange`: the node (empty) fits the pod, and was added or
/// grew in a resource the pod requests (or in pods).
fn is_schedulable_after_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<Node>(old, new)?;
    let Some(modified) = modified else {
        return Ok(QueueingHint::QueueSkip);
    };
    let after = allocatable(modified);
    let none = BTreeSet::new();
    let empty = (&Resource::default(), 0);
    if !fits(&pod.requests, &after, empty, &none, &none).is_empty() {
        return Ok(QueueingHint::QueueSkip);
    }
    let Some(original) = original else {
        return Ok(QueueingHint::Queue);
    };
    Ok(queue_if(requested_resources_increased(
        &pod.requests,
        &allocatable(original),
        &after,
    )))
}

/// Upstream's `haveAnyRequestedResourcesIncreased`.
fn requested_resources_increased(want: &Resource, before: &Resource, after: &Resource) -> bool {
    if after.allowed_pod_number > before.allowed_pod_number {
        return true;
    }
    (want.milli_cpu > 0 && after.milli_cpu > before.milli_cpu)
        || (want.memory > 0 && after.memory > before.memory)
        || (want.ephemeral_storage > 0 && after.ephemeral_storage > before.ephemeral_storage)
        || want
            .scalar_resources
            .iter()
            .any(|(name, v)| *v > 0 && scalar(after, name) > scalar(before, name))
}

/// Upstream's `isSchedulableAfterDeviceClassEvent`: a class added whose implicit extended
/// resource the pod requests, or whose extended resource name changed to one it requests.
fn is_schedulable_after_device_class_event(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<DeviceClass>(old, new)?;
    let Some(modified) = modified else {
        return Ok(QueueingHint::QueueSkip);
    };
    let extended = |c: &DeviceClass| {
        c.spec
            .as_ref()
            .and_then(|s| s.extended_resource_name.clone())
    };
    let requests = |name: &str| pod.requests.scalar_resources.contains_key(name);
    match original {
        Some(original) if extended(original) == extended(modified) => {
            return Ok(QueueingHint::QueueSkip);
        }
        Some(_) => {}
        None => {
            let class = modified.metadata.name.as_deref().unwrap_or_default();
            if requests(&format!("{DEVICE_CLASS_PREFIX}{class}")) {
                return Ok(QueueingHint::Queue);
            }
        }
    }
    Ok(queue_if(extended(modified).is_some_and(|n| requests(&n))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::{decode, typed};
    use crate::framework::plugins::node_resources::fit::NodeResourcesFitArgs;
    use crate::framework::testing::hints::{assigned_obj, event, hint, node_obj, obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use QueueingHint::{Queue, QueueSkip};

    fn plugin() -> Fit {
        let args = decode::<NodeResourcesFitArgs>(None).expect("defaults");
        Fit::new(typed(&args).expect("typed")).expect("fit")
    }

    /// Upstream's `TestEventsToRegister` and `Test_isSchedulableAfterPodEvent` cases.
    #[test]
    fn pod_hints() {
        let pl = plugin();
        let pod = PodBuilder::new("p")
            .uid("p")
            .container(&[("cpu", "1")])
            .info();
        let assigned = |cpu: &str| {
            Some(assigned_obj(
                PodBuilder::new("o")
                    .uid("o")
                    .node("n")
                    .container(&[("cpu", cpu), ("memory", "1Gi")])
                    .build(),
            ))
        };
        let delete = event(EventResource::AssignedPod, ActionType::DELETE);
        let scale_down = event(
            EventResource::AssignedPod,
            ActionType::UPDATE_POD_SCALE_DOWN,
        );
        let own_scale_down = event(
            EventResource::UnscheduledPod,
            ActionType::UPDATE_POD_SCALE_DOWN,
        );
        let memory_only = || {
            Some(assigned_obj(
                PodBuilder::new("o")
                    .uid("o")
                    .node("n")
                    .container(&[("cpu", "2"), ("memory", "512Mi")])
                    .build(),
            ))
        };
        let own = |cpu: &str| {
            Some(pod_obj(
                PodBuilder::new("p")
                    .uid("p")
                    .container(&[("cpu", cpu)])
                    .build(),
            ))
        };
        let cases = [
            (
                "assigned pod deleted",
                delete,
                assigned("2"),
                None,
                Some(Queue),
            ),
            (
                "unscheduled pod deleted",
                event(EventResource::UnscheduledPod, ActionType::DELETE),
                Some(pod_obj(PodBuilder::new("o").build())),
                None,
                Some(QueueSkip),
            ),
            (
                "nominated pod deleted",
                event(EventResource::AssignedPod, ActionType::DELETE),
                Some(pod_obj(PodBuilder::new("o").nominated_node("n").build())),
                None,
                Some(Queue),
            ),
            (
                "scaled down in cpu",
                scale_down,
                assigned("2"),
                assigned("1"),
                Some(Queue),
            ),
            (
                "scaled down in memory only",
                scale_down,
                assigned("2"),
                memory_only(),
                Some(QueueSkip),
            ),
            (
                "the pod itself scaled down",
                own_scale_down,
                own("2"),
                own("1"),
                Some(Queue),
            ),
            (
                "assigned pod relabeled",
                event(EventResource::AssignedPod, ActionType::UPDATE_POD_LABEL),
                assigned("2"),
                assigned("2"),
                None,
            ),
            (
                "assigned pod added",
                event(EventResource::AssignedPod, ActionType::ADD),
                None,
                assigned("2"),
                None,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), want, "{name}");
        }
    }

    /// Upstream's `Test_isSchedulableAfterNodeChange` cases.
    #[test]
    fn node_hints() {
        let pl = plugin();
        let pod = PodBuilder::new("p")
            .container(&[("cpu", "1"), ("memory", "2Gi")])
            .info();
        let node = |cpu: &str, memory: &str, pods: &str| {
            Some(node_obj(
                NodeBuilder::new("n")
                    .allocatable(&[("cpu", cpu), ("memory", memory), ("pods", pods)])
                    .build(),
            ))
        };
        let add = event(EventResource::Node, ActionType::ADD);
        let grew = event(EventResource::Node, ActionType::UPDATE_NODE_ALLOCATABLE);
        let cases = [
            (
                "added, fits",
                add,
                None,
                node("2", "4Gi", "10"),
                Some(Queue),
            ),
            (
                "added, too small",
                add,
                None,
                node("2", "1Gi", "10"),
                Some(QueueSkip),
            ),
            (
                "grew in cpu, fits",
                grew,
                node("1", "4Gi", "10"),
                node("2", "4Gi", "10"),
                Some(Queue),
            ),
            (
                "grew, still too small",
                grew,
                node("2", "1Gi", "10"),
                node("4", "1Gi", "10"),
                Some(QueueSkip),
            ),
            (
                "grew in pods",
                grew,
                node("2", "4Gi", "10"),
                node("2", "4Gi", "20"),
                Some(Queue),
            ),
            (
                "shrank, fits",
                grew,
                node("4", "4Gi", "10"),
                node("2", "4Gi", "10"),
                Some(QueueSkip),
            ),
            (
                "labels",
                event(EventResource::Node, ActionType::UPDATE_NODE_LABEL),
                node("1", "1Gi", "1"),
                node("4", "4Gi", "10"),
                None,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), want, "{name}");
        }
    }

    #[test]
    fn device_class_hints() {
        let pl = plugin();
        let pod = PodBuilder::new("p")
            .container(&[
                ("example.com/gpu", "1"),
                (&format!("{DEVICE_CLASS_PREFIX}gpu"), "1"),
            ])
            .info();
        let class = |name: &str, extended: Option<&str>| {
            let mut c = DeviceClass::default();
            c.metadata.name = Some(name.into());
            c.spec.get_or_insert_default().extended_resource_name = extended.map(String::from);
            Some(obj(c))
        };
        let add = event(EventResource::DeviceClass, ActionType::ADD);
        let update = event(EventResource::DeviceClass, ActionType::UPDATE);
        let cases = [
            (
                "implicit resource requested",
                add,
                None,
                class("gpu", None),
                Queue,
            ),
            (
                "explicit resource requested",
                add,
                None,
                class("x", Some("example.com/gpu")),
                Queue,
            ),
            (
                "nothing requested",
                add,
                None,
                class("x", Some("example.com/fpga")),
                QueueSkip,
            ),
            (
                "name changed to a requested one",
                update,
                class("x", None),
                class("x", Some("example.com/gpu")),
                Queue,
            ),
            (
                "name unchanged",
                update,
                class("x", Some("example.com/gpu")),
                class("x", Some("example.com/gpu")),
                QueueSkip,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), Some(want), "{name}");
        }
    }
}
