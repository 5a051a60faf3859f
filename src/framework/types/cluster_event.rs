//! [`ClusterEvent`]: a change in the cluster that may make pods schedulable, as upstream's
//! `k8s.io/kube-scheduler/framework` (types.go) has it: an [`EventResource`] and an [`ActionType`]
//! (including the fine-grained node and pod updates), the [`QueueingHint`] a plugin answers for
//! it, and the objects the event carries ([`EventObject`], [`PodObject`]).

use std::any::Any;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Affinity, Volume};

use super::assigned_pod::AssignedPod;
use super::host_ports::HostPort;
use super::pod_info::PodInfo;
use super::pod_view::PodView;
use super::resource::Resource;

/// One kind of change, or a union of them (a bit set, as upstream's `ActionType`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ActionType(u32);

impl ActionType {
    pub const NONE: ActionType = ActionType(0);
    pub const ADD: ActionType = ActionType(1);
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// Node events only: `status.allocatable` changed.
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// The node's taints changed, or `spec.unschedulable` became false.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    /// A condition's status changed (heartbeats are not a change).
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    pub const UPDATE_NODE_DECLARED_FEATURE: ActionType = ActionType(1 << 7);
    /// Pod events only: labels changed.
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 8);
    /// A resource request was reduced or removed.
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 9);
    /// A toleration was added (the API allows no other change to tolerations).
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 10);
    /// The last scheduling gate was removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 11);
    /// The ResourceClaims generated for the pod changed.
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 12);
    pub const ALL: ActionType = ActionType((1 << 13) - 1);
    /// Any update: use it when the specific kind does not matter.
    pub const UPDATE: ActionType = ActionType(Self::ALL.0 & !(Self::ADD.0 | Self::DELETE.0));

    /// Whether the two share a kind of change.
    pub fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }

    /// Upstream's `ActionType.String()`: the name of a single kind, `All` or `Update`; "" for
    /// other unions.
    pub fn name(self) -> &'static str {
        match self {
            Self::ADD => "Add",
            Self::DELETE => "Delete",
            Self::UPDATE_NODE_ALLOCATABLE => "UpdateNodeAllocatable",
            Self::UPDATE_NODE_LABEL => "UpdateNodeLabel",
            Self::UPDATE_NODE_TAINT => "UpdateNodeTaint",
            Self::UPDATE_NODE_CONDITION => "UpdateNodeCondition",
            Self::UPDATE_NODE_ANNOTATION => "UpdateNodeAnnotation",
            Self::UPDATE_NODE_DECLARED_FEATURE => "UpdateNodeDeclaredFeature",
            Self::UPDATE_POD_LABEL => "UpdatePodLabel",
            Self::UPDATE_POD_SCALE_DOWN => "UpdatePodScaleDown",
            Self::UPDATE_POD_TOLERATION => "UpdatePodToleration",
            Self::UPDATE_POD_SCHEDULING_GATES_ELIMINATED => "UpdatePodSchedulingGatesEliminated",
            Self::UPDATE_POD_GENERATED_RESOURCE_CLAIM => "UpdatePodGeneratedResourceClaim",
            Self::ALL => "All",
            Self::UPDATE => "Update",
            _ => "",
        }
    }
}

impl BitOr for ActionType {
    type Output = ActionType;

    fn bitor(self, rhs: ActionType) -> ActionType {
        ActionType(self.0 | rhs.0)
    }
}

impl fmt::Debug for ActionType {
    /// The name, or the names of a union's kinds joined with `|`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.name().is_empty() || self.0 == 0 {
            return f.write_str(if self.0 == 0 { "None" } else { self.name() });
        }
        let names: Vec<&str> = (0..13)
            .map(|bit| ActionType(1 << bit))
            .filter(|a| self.intersects(*a))
            .map(ActionType::name)
            .collect();
        f.write_str(&names.join("|"))
    }
}

/// The kind of object an event is about (upstream's `EventResource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventResource {
    /// Any pod: what plugins register; it matches [`EventResource::AssignedPod`] and
    /// [`EventResource::UnscheduledPod`], the resources incoming pod events carry.
    Pod,
    /// A pod bound (or assumed) to a node.
    AssignedPod,
    /// A pod waiting for a node (upstream's internal `UnschedulablePod`).
    UnscheduledPod,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    CSINode,
    CSIDriver,
    VolumeAttachment,
    CSIStorageCapacity,
    StorageClass,
    ResourceClaim,
    ResourceSlice,
    DeviceClass,
    /// `scheduling.x-k8s.io` PodGroups (Coscheduling's).
    PodGroup,
    /// `scheduling.k8s.io` PodGroups (workload-aware scheduling's, GangScheduling's).
    WorkloadPodGroup,
    /// A kind an out-of-tree plugin watches (`Kind::events`), by its upstream-style name
    /// (`example.com/NodeWeights`).
    Custom(&'static str),
    /// Every resource: `{WildCard, All}` matches every event.
    WildCard,
}

impl EventResource {
    /// Upstream's spelling (event labels in logs and metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::AssignedPod => "AssignedPod",
            Self::UnscheduledPod => "UnschedulablePod",
            Self::Node => "Node",
            Self::PersistentVolume => "PersistentVolume",
            Self::PersistentVolumeClaim => "PersistentVolumeClaim",
            Self::CSINode => "storage.k8s.io/CSINode",
            Self::CSIDriver => "storage.k8s.io/CSIDriver",
            Self::VolumeAttachment => "storage.k8s.io/VolumeAttachment",
            Self::CSIStorageCapacity => "storage.k8s.io/CSIStorageCapacity",
            Self::StorageClass => "storage.k8s.io/StorageClass",
            Self::ResourceClaim => "resource.k8s.io/ResourceClaim",
            Self::ResourceSlice => "resource.k8s.io/ResourceSlice",
            Self::DeviceClass => "resource.k8s.io/DeviceClass",
            Self::PodGroup => "scheduling.x-k8s.io/PodGroup",
            Self::WorkloadPodGroup => "scheduling.k8s.io/PodGroup",
            Self::Custom(name) => name,
            Self::WildCard => "*",
        }
    }

    /// Whether a registration for `self` covers an incoming event about `incoming`.
    fn covers(self, incoming: EventResource) -> bool {
        self == EventResource::WildCard
            || self == incoming
            || (self == EventResource::Pod
                && matches!(
                    incoming,
                    EventResource::AssignedPod | EventResource::UnscheduledPod
                ))
    }
}

/// A change of one resource (upstream's `ClusterEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterEvent {
    pub resource: EventResource,
    pub action_type: ActionType,
    /// Replaces the label (`UnschedulableTimeout`, `ForceActivate`).
    pub custom_label: Option<&'static str>,
}

impl ClusterEvent {
    pub const fn new(resource: EventResource, action_type: ActionType) -> ClusterEvent {
        ClusterEvent {
            resource,
            action_type,
            custom_label: None,
        }
    }

    /// The event in logs and metrics: `NodeAdd`, `AssignedPodDelete`, `UnschedulableTimeout`.
    pub fn label(&self) -> Cow<'static, str> {
        match self.custom_label {
            Some(label) => Cow::Borrowed(label),
            None => Cow::Owned(format!(
                "{}{}",
                self.resource.as_str(),
                self.action_type.name()
            )),
        }
    }

    /// `{WildCard, All}`: matches every event; an incoming wildcard event moves every pod.
    pub fn is_wildcard(&self) -> bool {
        self.resource == EventResource::WildCard && self.action_type == ActionType::ALL
    }

    /// Upstream's `MatchClusterEvents(self, incoming)`: whether a registration for `self` covers
    /// `incoming`, which is the same or more specific (a registration for Node/Update covers an
    /// incoming Node/UpdateNodeLabel; one for Node/UpdateNodeLabel does not cover Node/Update).
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        self.is_wildcard()
            || (self.resource.covers(incoming.resource)
                && self.action_type.intersects(incoming.action_type)
                && incoming.action_type <= self.action_type)
    }
}

impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// What a plugin answers for a pod it rejected when an event arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueingHint {
    /// The event cannot make the pod schedulable.
    QueueSkip,
    /// The pod may be schedulable now.
    Queue,
}

impl QueueingHint {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueingHint::QueueSkip => "QueueSkip",
            QueueingHint::Queue => "Queue",
        }
    }
}

/// The old or new object of an event: a `Node`, a [`PodObject`], or the watched kind itself
/// (`PersistentVolumeClaim`, `StorageClass`, `ResourceClaim`, `PodGroup`, ...). Hints read it
/// with [`EventObject::get`] or [`objects`].
#[derive(Clone)]
pub struct EventObject(Arc<dyn Any + Send + Sync>);

impl EventObject {
    pub fn new<T: Any + Send + Sync>(object: Arc<T>) -> EventObject {
        EventObject(object)
    }

    /// The object as a `T`, if it is one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl fmt::Debug for EventObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventObject")
    }
}

/// A queueing hint could not read the event's objects (upstream treats the event as Queue).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HintError(pub String);

/// The event's old and new objects as `T` (upstream's `util.As`): `None` where the event has
/// none (no old object for an add, no new one for a delete), an error where an object is of
/// another type.
pub fn objects<'a, T: Any>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a T>, Option<&'a T>), HintError> {
    let cast = |o: Option<&'a EventObject>| match o {
        None => Ok(None),
        Some(o) => o.get::<T>().map(Some).ok_or_else(|| {
            HintError(format!(
                "the event's object is not a {}",
                std::any::type_name::<T>()
            ))
        }),
    };
    Ok((cast(old)?, cast(new)?))
}

/// A pod as pod events carry it: one waiting for a node (its [`PodInfo`]), or one assigned to a
/// node (what the cache keeps of it).
#[derive(Debug, Clone)]
pub enum PodObject {
    Unscheduled(Arc<PodInfo>),
    Assigned {
        pod: Arc<AssignedPod>,
        node_name: Arc<str>,
    },
}

impl PodObject {
    pub fn assigned(pod: Arc<AssignedPod>, node_name: &str) -> PodObject {
        PodObject::Assigned {
            pod,
            node_name: Arc::from(node_name),
        }
    }

    /// The pod as an event object.
    pub fn into_event_object(self) -> EventObject {
        EventObject::new(Arc::new(self))
    }

    /// `spec.nodeName`: empty for a pod waiting for a node.
    pub fn node_name(&self) -> &str {
        match self {
            PodObject::Unscheduled(p) => p.node_name(),
            PodObject::Assigned { node_name, .. } => node_name,
        }
    }

    /// `status.nominatedNodeName` (an assigned pod has none that counts).
    pub fn nominated_node_name(&self) -> &str {
        match self {
            PodObject::Unscheduled(p) => p.nominated_node_name(),
            PodObject::Assigned { .. } => "",
        }
    }

    /// Whether the pod holds or is about to hold a node's resources: assigned, or nominated
    /// by preemption (upstream's `NodeName != "" || NominatedNodeName != ""`).
    pub fn on_or_nominated_to_node(&self) -> bool {
        !self.node_name().is_empty() || !self.nominated_node_name().is_empty()
    }

    pub fn requests(&self) -> &Resource {
        match self {
            PodObject::Unscheduled(p) => &p.requests,
            PodObject::Assigned { pod, .. } => &pod.requests,
        }
    }

    pub fn host_ports(&self) -> &[HostPort] {
        match self {
            PodObject::Unscheduled(p) => &p.host_ports,
            PodObject::Assigned { pod, .. } => &pod.host_ports,
        }
    }

    pub fn affinity(&self) -> Option<&Affinity> {
        match self {
            PodObject::Unscheduled(p) => p.affinity(),
            PodObject::Assigned { pod, .. } => pod.affinity(),
        }
    }

    /// The whole pod, for a pod waiting for a node.
    pub fn pod_info(&self) -> Option<&PodInfo> {
        match self {
            PodObject::Unscheduled(p) => Some(p),
            PodObject::Assigned { .. } => None,
        }
    }
}

impl PodView for PodObject {
    fn name(&self) -> &str {
        match self {
            PodObject::Unscheduled(p) => p.name(),
            PodObject::Assigned { pod, .. } => pod.name(),
        }
    }

    fn namespace(&self) -> &str {
        match self {
            PodObject::Unscheduled(p) => p.namespace(),
            PodObject::Assigned { pod, .. } => pod.namespace(),
        }
    }

    fn uid(&self) -> &str {
        match self {
            PodObject::Unscheduled(p) => p.uid(),
            PodObject::Assigned { pod, .. } => pod.uid(),
        }
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        match self {
            PodObject::Unscheduled(p) => p.labels(),
            PodObject::Assigned { pod, .. } => PodView::labels(pod.as_ref()),
        }
    }

    fn volumes(&self) -> &[Volume] {
        match self {
            PodObject::Unscheduled(p) => p.volumes(),
            PodObject::Assigned { pod, .. } => PodView::volumes(pod.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(resource: EventResource, action: ActionType) -> ClusterEvent {
        ClusterEvent::new(resource, action)
    }

    #[test]
    fn labels_are_upstreams() {
        assert_eq!(ev(EventResource::Node, ActionType::ADD).label(), "NodeAdd");
        assert_eq!(
            ev(EventResource::AssignedPod, ActionType::DELETE).label(),
            "AssignedPodDelete"
        );
        assert_eq!(
            ev(EventResource::UnscheduledPod, ActionType::UPDATE).label(),
            "UnschedulablePodUpdate"
        );
        assert_eq!(
            ev(EventResource::Node, ActionType::UPDATE_NODE_LABEL).label(),
            "NodeUpdateNodeLabel"
        );
        assert_eq!(
            ev(EventResource::PersistentVolumeClaim, ActionType::ADD).label(),
            "PersistentVolumeClaimAdd"
        );
        let timeout = ClusterEvent {
            custom_label: Some("UnschedulableTimeout"),
            ..ev(EventResource::WildCard, ActionType::ALL)
        };
        assert_eq!(timeout.label(), "UnschedulableTimeout");
    }

    #[test]
    fn update_is_every_update_kind() {
        for a in [
            ActionType::UPDATE_NODE_ALLOCATABLE,
            ActionType::UPDATE_NODE_DECLARED_FEATURE,
            ActionType::UPDATE_POD_LABEL,
            ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
        ] {
            assert!(ActionType::UPDATE.intersects(a), "{a:?}");
        }
        assert!(!ActionType::UPDATE.intersects(ActionType::ADD | ActionType::DELETE));
        assert_eq!(
            ActionType::ADD | ActionType::DELETE | ActionType::UPDATE,
            ActionType::ALL
        );
    }

    #[test]
    fn matching_follows_upstream() {
        use ActionType as A;
        use EventResource as R;
        let cases = [
            // (registered, incoming, matches)
            (
                ev(R::Node, A::UPDATE),
                ev(R::Node, A::UPDATE_NODE_LABEL),
                true,
            ),
            (
                ev(R::Node, A::UPDATE_NODE_LABEL),
                ev(R::Node, A::UPDATE),
                false,
            ),
            (
                ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                ev(R::Node, A::UPDATE_NODE_TAINT),
                false,
            ),
            (
                ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                ev(R::Node, A::UPDATE_NODE_LABEL),
                true,
            ),
            (ev(R::Pod, A::DELETE), ev(R::AssignedPod, A::DELETE), true),
            (ev(R::Pod, A::ADD), ev(R::UnscheduledPod, A::ADD), true),
            (ev(R::AssignedPod, A::ADD), ev(R::Pod, A::ADD), false),
            (ev(R::Pod, A::ALL), ev(R::Node, A::ADD), false),
            (ev(R::WildCard, A::ALL), ev(R::Node, A::ADD), true),
            (
                ev(R::Pod, A::ADD | A::UPDATE_POD_LABEL | A::DELETE),
                ev(R::AssignedPod, A::UPDATE),
                false,
            ),
            (ev(R::Pod, A::ALL), ev(R::AssignedPod, A::UPDATE), true),
        ];
        for (registered, incoming, want) in cases {
            assert_eq!(
                registered.matches(&incoming),
                want,
                "{registered} registered, {incoming} incoming"
            );
        }
    }

    #[test]
    fn objects_are_read_by_type() {
        let node = EventObject::new(Arc::new(k8s_openapi::api::core::v1::Node::default()));
        let (old, new) =
            objects::<k8s_openapi::api::core::v1::Node>(None, Some(&node)).expect("a node");
        assert!(old.is_none() && new.is_some());
        assert!(objects::<PodObject>(Some(&node), None).is_err());
    }
}
