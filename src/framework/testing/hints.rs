//! Running a plugin's queueing hints in table tests: the event objects the informers build, and
//! what a plugin answers for an event.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::interface::EnqueueExtensions;
use crate::framework::types::{
    ActionType, AssignedPod, ClusterEvent, EventObject, EventResource, PodInfo, PodObject,
    QueueingHint,
};

/// A node as node events carry it.
pub fn node_obj(node: Node) -> EventObject {
    EventObject::new(Arc::new(node))
}

/// A pod waiting for a node, as pod events carry it.
pub fn pod_obj(pod: Pod) -> EventObject {
    PodObject::Unscheduled(Arc::new(PodInfo::from_pod(pod))).into_event_object()
}

/// A pod bound to its `spec.nodeName`, as pod events carry it.
pub fn assigned_obj(pod: Pod) -> EventObject {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    PodObject::assigned(Arc::new(AssignedPod::new(pod)), &node).into_event_object()
}

/// Any other watched object (a PVC, a StorageClass, a PodGroup...).
pub fn obj<T: Send + Sync + 'static>(object: T) -> EventObject {
    EventObject::new(Arc::new(object))
}

pub fn event(resource: EventResource, action: ActionType) -> ClusterEvent {
    ClusterEvent::new(resource, action)
}

/// What `plugin` answers for `pod` when `incoming` arrives with `old` and `new`: the hint of its
/// first registration covering the event (Queue for one without a hint, or when the hint
/// fails, as the queue takes it); `None` when it registered no event covering `incoming`.
pub fn hint(
    plugin: &dyn EnqueueExtensions,
    incoming: ClusterEvent,
    pod: &PodInfo,
    old: Option<EventObject>,
    new: Option<EventObject>,
) -> Option<QueueingHint> {
    plugin
        .events_to_register()
        .into_iter()
        .find(|e| e.event.matches(&incoming))
        .map(|e| e.hint_for(pod, old.as_ref(), new.as_ref()))
}

/// The events `plugin` registers, one per registration: `Node/Add|UpdateNodeTaint`.
pub fn registered(plugin: &dyn EnqueueExtensions) -> Vec<String> {
    plugin
        .events_to_register()
        .iter()
        .map(|e| format!("{}/{:?}", e.event.resource.as_str(), e.event.action_type))
        .collect()
}
