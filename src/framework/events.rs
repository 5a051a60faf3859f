//! The cluster events the scheduler derives from what its informers see, and the
//! [`QueueingHintMap`] of a profile, after upstream's `pkg/scheduler/framework/events.go`,
//! `types.go` and `scheduler.go` (`buildQueueingHintMap`).
//!
//! An update is interpreted as specifically as possible: a node whose labels changed is a
//! `Node/UpdateNodeLabel` event, a pod whose last scheduling gate was removed an
//! `UnschedulablePod/UpdatePodSchedulingGatesEliminated` event; a change that fits no specific
//! kind is a plain `Update`, which only registrations for `Update` (or `All`) cover.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::interface::{ClusterEventWithHint, QueueingHintFn};
use super::types::{ActionType, AssignedPod, ClusterEvent, EventResource, PodView, Resource};

/// A pod failed its scheduling attempt (the event label of its return to the queue).
pub const SCHEDULE_ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// A pod finished its backoff.
pub const BACKOFF_COMPLETE: &str = "BackoffComplete";
/// A pod was popped from backoff because the active queue was empty.
pub const POP_FROM_BACKOFF_Q: &str = "PopFromBackoffQ";
/// A pod stayed in the unschedulable pool longer than `--pod-max-in-unschedulable-pods-duration`.
pub const UNSCHEDULABLE_TIMEOUT: &str = "UnschedulableTimeout";
/// A plugin asked the queue to retry a pod now.
pub const FORCE_ACTIVATE: &str = "ForceActivate";

/// The wildcard event of the unschedulable pool's periodic flush: moves every pod.
pub const EVENT_UNSCHEDULABLE_TIMEOUT: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action_type: ActionType::ALL,
    custom_label: Some(UNSCHEDULABLE_TIMEOUT),
};
/// The wildcard event a plugin's activation sends.
pub const EVENT_FORCE_ACTIVATE: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action_type: ActionType::ALL,
    custom_label: Some(FORCE_ACTIVATE),
};
pub const EVENT_ASSIGNED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD);
pub const EVENT_ASSIGNED_POD_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
pub const EVENT_UNSCHEDULED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::ADD);
pub const EVENT_UNSCHEDULED_POD_UPDATE: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE);
pub const EVENT_UNSCHEDULED_POD_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::DELETE);
pub const EVENT_NODE_ADD: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::ADD);
pub const EVENT_NODE_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::Node, ActionType::DELETE);

/// The events a node update is (upstream's `NodeSchedulingPropertiesChange`); none for a change
/// no plugin can care about (a heartbeat, a resourceVersion bump).
pub fn node_scheduling_properties_change(old: &Node, new: &Node) -> Vec<ClusterEvent> {
    let spec_unschedulable = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    };
    let taints = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    fn allocatable(n: &Node) -> Option<&BTreeMap<String, Quantity>> {
        n.status.as_ref()?.allocatable.as_ref()
    }
    fn features(n: &Node) -> Option<&Vec<String>> {
        n.status.as_ref()?.declared_features.as_ref()
    }
    let conditions = |n: &Node| -> BTreeMap<String, String> {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[])
            .iter()
            .map(|c: &NodeCondition| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    let mut kinds = Vec::new();
    // Becoming schedulable is a taint change to the plugins (upstream has no kind of its own).
    if spec_unschedulable(old) && !spec_unschedulable(new) {
        kinds.push(ActionType::UPDATE_NODE_TAINT);
    }
    if allocatable(old) != allocatable(new) {
        kinds.push(ActionType::UPDATE_NODE_ALLOCATABLE);
    }
    if label_map(old.metadata.labels.as_ref()) != label_map(new.metadata.labels.as_ref()) {
        kinds.push(ActionType::UPDATE_NODE_LABEL);
    }
    if taints(old) != taints(new) && !kinds.contains(&ActionType::UPDATE_NODE_TAINT) {
        kinds.push(ActionType::UPDATE_NODE_TAINT);
    }
    if conditions(old) != conditions(new) {
        kinds.push(ActionType::UPDATE_NODE_CONDITION);
    }
    if label_map(old.metadata.annotations.as_ref()) != label_map(new.metadata.annotations.as_ref())
    {
        kinds.push(ActionType::UPDATE_NODE_ANNOTATION);
    }
    if features(old) != features(new) {
        kinds.push(ActionType::UPDATE_NODE_DECLARED_FEATURE);
    }
    kinds
        .into_iter()
        .map(|a| ClusterEvent::new(EventResource::Node, a))
        .collect()
}

/// An absent map and an empty one are the same (upstream's semantic equality).
fn label_map(m: Option<&BTreeMap<String, String>>) -> Option<&BTreeMap<String, String>> {
    m.filter(|m| !m.is_empty())
}

/// The events an update of a pod waiting for a node is (upstream's
/// `PodSchedulingPropertiesChange`): each specific kind of change, or a plain `Update`.
pub fn pod_scheduling_properties_change(
    old: &Pod,
    new: &Pod,
    old_requests: &Resource,
    new_requests: &Resource,
) -> Vec<ClusterEvent> {
    let spec = |p: &Pod| p.spec.clone().unwrap_or_default();
    let (old_spec, new_spec) = (spec(old), spec(new));
    let gates =
        |s: &k8s_openapi::api::core::v1::PodSpec| s.scheduling_gates.as_ref().map_or(0, Vec::len);
    let tolerations =
        |s: &k8s_openapi::api::core::v1::PodSpec| s.tolerations.as_ref().map_or(0, Vec::len);
    let claims = |p: &Pod| {
        let status = p.status.as_ref();
        (
            status
                .and_then(|s| s.resource_claim_statuses.clone())
                .unwrap_or_default(),
            status.and_then(|s| s.extended_resource_claim_status.clone()),
        )
    };
    let mut kinds = Vec::new();
    if label_map(old.metadata.labels.as_ref()) != label_map(new.metadata.labels.as_ref()) {
        kinds.push(ActionType::UPDATE_POD_LABEL);
    }
    if scaled_down(old_requests, new_requests) {
        kinds.push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    if gates(&old_spec) != 0 && gates(&new_spec) == 0 {
        kinds.push(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    // Tolerations can only be added: a different length is a new toleration.
    if tolerations(&old_spec) != tolerations(&new_spec) {
        kinds.push(ActionType::UPDATE_POD_TOLERATION);
    }
    if claims(old) != claims(new) {
        kinds.push(ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM);
    }
    events_or_update(EventResource::UnscheduledPod, kinds)
}

/// The events an update of an assigned pod is: its labels, a request scaled down (in-place
/// resize), else a plain `Update`. (Toleration, gate and claim changes only ever matter to the
/// pod being scheduled itself.)
pub fn assigned_pod_scheduling_properties_change(
    old: &AssignedPod,
    new: &AssignedPod,
) -> Vec<ClusterEvent> {
    let mut kinds = Vec::new();
    if label_map(old.labels()) != label_map(new.labels()) {
        kinds.push(ActionType::UPDATE_POD_LABEL);
    }
    if scaled_down(&old.requests, &new.requests) {
        kinds.push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    events_or_update(EventResource::AssignedPod, kinds)
}

fn events_or_update(resource: EventResource, kinds: Vec<ActionType>) -> Vec<ClusterEvent> {
    if kinds.is_empty() {
        return vec![ClusterEvent::new(resource, ActionType::UPDATE)];
    }
    kinds
        .into_iter()
        .map(|a| ClusterEvent::new(resource, a))
        .collect()
}

/// Whether some request of `old` is lower, or gone, in `new` (upstream's `extractPodScaleDown`).
fn scaled_down(old: &Resource, new: &Resource) -> bool {
    old.milli_cpu > new.milli_cpu
        || old.memory > new.memory
        || old.ephemeral_storage > new.ephemeral_storage
        || old
            .scalar_resources
            .iter()
            .any(|(name, v)| new.scalar_resources.get(name).is_none_or(|n| v > n))
}

/// What a plugin that declares no events registers (upstream's `UnrollWildCardResource`): every
/// kind of change to every resource, always worth a retry.
pub fn unroll_wildcard_resource() -> Vec<ClusterEventWithHint> {
    [
        EventResource::Pod,
        EventResource::Node,
        EventResource::PersistentVolume,
        EventResource::PersistentVolumeClaim,
        EventResource::CSINode,
        EventResource::CSIDriver,
        EventResource::CSIStorageCapacity,
        EventResource::StorageClass,
        EventResource::ResourceClaim,
        EventResource::DeviceClass,
        EventResource::PodGroup,
    ]
    .into_iter()
    .map(|r| ClusterEventWithHint::new(ClusterEvent::new(r, ActionType::ALL)))
    .collect()
}

/// One plugin's hint for a registered event.
#[derive(Clone)]
pub struct QueueingHintFunction {
    pub plugin: Arc<str>,
    /// `None`: always Queue.
    pub hint: Option<QueueingHintFn>,
}

/// A profile's registered events, each with the hints of the plugins that registered it
/// (upstream's `QueueingHintMap`).
#[derive(Clone, Default)]
pub struct QueueingHintMap {
    entries: Vec<(ClusterEvent, Vec<QueueingHintFunction>)>,
}

impl std::fmt::Debug for QueueingHintMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (event, fns) in &self.entries {
            let plugins: Vec<&str> = fns.iter().map(|f| f.plugin.as_ref()).collect();
            m.entry(&event.label(), &plugins);
        }
        m.finish()
    }
}

impl QueueingHintMap {
    /// Adds `plugin`'s registrations.
    pub fn register(&mut self, plugin: &str, events: Vec<ClusterEventWithHint>) {
        let plugin: Arc<str> = Arc::from(plugin);
        let node = |e: &ClusterEvent, a: ActionType| {
            e.resource == EventResource::Node && e.action_type.intersects(a)
        };
        let node_added = events.iter().any(|e| node(&e.event, ActionType::ADD));
        let taint_updated = events
            .iter()
            .any(|e| node(&e.event, ActionType::UPDATE_NODE_TAINT));
        for e in events {
            self.push(e.event, plugin.clone(), e.hint);
        }
        // As upstream (kubernetes#109437): a plugin registering Node/Add also gets
        // Node/UpdateNodeTaint, always Queue, so a node that becomes usable by losing a taint is
        // never missed.
        if node_added && !taint_updated {
            let taint = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_TAINT);
            self.push(taint, plugin, None);
        }
    }

    fn push(&mut self, event: ClusterEvent, plugin: Arc<str>, hint: Option<QueueingHintFn>) {
        let f = QueueingHintFunction { plugin, hint };
        match self.entries.iter_mut().find(|(e, _)| *e == event) {
            Some((_, fns)) => fns.push(f),
            None => self.entries.push((event, vec![f])),
        }
    }

    /// Whether any plugin registered an event covering `event` (upstream's `isEventOfInterest`;
    /// a wildcard event always is).
    pub fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard() || self.entries.iter().any(|(e, _)| e.matches(event))
    }

    /// The hints registered for events covering `event`.
    pub fn hints_for<'a>(
        &'a self,
        event: &'a ClusterEvent,
    ) -> impl Iterator<Item = &'a QueueingHintFunction> + 'a {
        self.entries
            .iter()
            .filter(move |(e, _)| e.matches(event))
            .flat_map(|(_, fns)| fns.iter())
    }

    /// Whether `plugin` registered an event covering `event` (the events that may lift a gate
    /// `plugin` put on a pod).
    pub fn plugin_registered(&self, plugin: &str, event: &ClusterEvent) -> bool {
        self.hints_for(event).any(|f| f.plugin.as_ref() == plugin)
    }

    /// The plugins that registered any event.
    pub fn plugins(&self) -> std::collections::BTreeSet<&str> {
        self.entries
            .iter()
            .flat_map(|(_, fns)| fns.iter().map(|f| f.plugin.as_ref()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, Taint};

    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use crate::framework::types::PodInfo;

    fn kinds(events: &[ClusterEvent]) -> Vec<ActionType> {
        events.iter().map(|e| e.action_type).collect()
    }

    #[test]
    fn node_updates_are_interpreted_specifically() {
        let base = NodeBuilder::new("n").label("zone", "a").build();
        let mut heartbeat = base.clone();
        heartbeat
            .status
            .get_or_insert_with(NodeStatus::default)
            .conditions = Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_heartbeat_time: None,
            ..NodeCondition::default()
        }]);
        let mut beat_again = heartbeat.clone();
        if let Some(c) = beat_again
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
        {
            c[0].message = Some("kubelet is posting ready status".into());
        }
        assert!(node_scheduling_properties_change(&heartbeat, &beat_again).is_empty());
        assert_eq!(
            kinds(&node_scheduling_properties_change(&base, &heartbeat)),
            [ActionType::UPDATE_NODE_CONDITION]
        );
        let relabeled = NodeBuilder::new("n").label("zone", "b").build();
        assert_eq!(
            kinds(&node_scheduling_properties_change(&base, &relabeled)),
            [ActionType::UPDATE_NODE_LABEL]
        );
        let mut annotated = base.clone();
        annotated.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert_eq!(
            kinds(&node_scheduling_properties_change(&base, &annotated)),
            [ActionType::UPDATE_NODE_ANNOTATION]
        );
        let mut tainted = base.clone();
        tainted.spec.get_or_insert_with(NodeSpec::default).taints = Some(vec![Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        assert_eq!(
            kinds(&node_scheduling_properties_change(&base, &tainted)),
            [ActionType::UPDATE_NODE_TAINT]
        );
        let mut cordoned = base.clone();
        cordoned
            .spec
            .get_or_insert_with(NodeSpec::default)
            .unschedulable = Some(true);
        assert!(node_scheduling_properties_change(&base, &cordoned).is_empty());
        assert_eq!(
            kinds(&node_scheduling_properties_change(&cordoned, &base)),
            [ActionType::UPDATE_NODE_TAINT]
        );
        let bigger = NodeBuilder::new("n")
            .label("zone", "a")
            .allocatable(&[("cpu", "64")])
            .build();
        assert!(
            kinds(&node_scheduling_properties_change(&base, &bigger))
                .contains(&ActionType::UPDATE_NODE_ALLOCATABLE)
        );
    }

    fn info(pod: Pod) -> PodInfo {
        PodInfo::from_pod(pod)
    }

    fn pod_events(old: Pod, new: Pod) -> Vec<ActionType> {
        let (o, n) = (info(old), info(new));
        kinds(&pod_scheduling_properties_change(
            &o.pod,
            &n.pod,
            &o.requests,
            &n.requests,
        ))
    }

    #[test]
    fn pod_updates_are_interpreted_specifically() {
        let base = PodBuilder::new("p").container(&[("cpu", "2")]).build();
        assert_eq!(
            pod_events(
                base.clone(),
                PodBuilder::new("p")
                    .container(&[("cpu", "2")])
                    .label("a", "b")
                    .build()
            ),
            [ActionType::UPDATE_POD_LABEL]
        );
        assert_eq!(
            pod_events(
                base.clone(),
                PodBuilder::new("p").container(&[("cpu", "1")]).build()
            ),
            [ActionType::UPDATE_POD_SCALE_DOWN]
        );
        assert_eq!(
            pod_events(
                PodBuilder::new("p")
                    .container(&[("cpu", "2")])
                    .scheduling_gate("g")
                    .build(),
                base.clone()
            ),
            [ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED]
        );
        assert_eq!(
            pod_events(
                base.clone(),
                PodBuilder::new("p")
                    .container(&[("cpu", "2")])
                    .toleration("k", "Equal", "v", "NoSchedule")
                    .build()
            ),
            [ActionType::UPDATE_POD_TOLERATION]
        );
        let mut annotated = base.clone();
        annotated.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        let events = {
            let (o, n) = (info(base.clone()), info(annotated));
            pod_scheduling_properties_change(&o.pod, &n.pod, &o.requests, &n.requests)
        };
        assert_eq!(events, [EVENT_UNSCHEDULED_POD_UPDATE]);
    }

    #[test]
    fn assigned_pod_updates() {
        let a = |labels: &[(&str, &str)], cpu: &str| {
            let mut b = PodBuilder::new("p").container(&[("cpu", cpu)]).node("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            AssignedPod::new(b.build())
        };
        assert_eq!(
            kinds(&assigned_pod_scheduling_properties_change(
                &a(&[], "2"),
                &a(&[("x", "y")], "1")
            )),
            [
                ActionType::UPDATE_POD_LABEL,
                ActionType::UPDATE_POD_SCALE_DOWN
            ]
        );
        let same = assigned_pod_scheduling_properties_change(&a(&[], "2"), &a(&[], "3"));
        assert_eq!(
            same,
            [ClusterEvent::new(
                EventResource::AssignedPod,
                ActionType::UPDATE
            )]
        );
    }

    #[test]
    fn node_add_registrations_also_get_taint_updates() {
        let mut m = QueueingHintMap::default();
        m.register(
            "NodeAffinity",
            vec![ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ))],
        );
        m.register(
            "TaintToleration",
            vec![ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
            ))],
        );
        let taint = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_TAINT);
        let mut plugins: Vec<&str> = m.hints_for(&taint).map(|f| f.plugin.as_ref()).collect();
        plugins.sort();
        assert_eq!(plugins, ["NodeAffinity", "TaintToleration"]);
        let annotation = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ANNOTATION);
        assert!(!m.is_event_of_interest(&annotation));
        assert!(m.is_event_of_interest(&EVENT_UNSCHEDULABLE_TIMEOUT));
        assert!(m.plugin_registered("NodeAffinity", &EVENT_NODE_ADD));
        assert!(!m.plugin_registered("NodeAffinity", &EVENT_NODE_DELETE));
    }
}
