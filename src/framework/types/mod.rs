//! The data the framework schedules against: [`PodInfo`], [`NodeInfo`], [`Resource`] arithmetic
//! and the [`Snapshot`] of all nodes a scheduling cycle sees.
//!
//! Resource requests are computed once per pod ([`PodInfo::new`]) as upstream's
//! `resourcehelper.PodRequests` does; a `NodeInfo` keeps running sums so Filter and Score never
//! re-walk a node's pods. The snapshot is updated incrementally by the scheduler's cache: only
//! `NodeInfo`s whose generation changed are replaced ([`Snapshot::update_from`]).
//!
//! One module per type, as upstream's `k8s.io/kube-scheduler/framework` has them; this module
//! re-exports them so `framework::types::X` names any of them.

pub mod affinity_terms;
pub mod assigned_pod;
pub mod cluster_event;
pub mod host_ports;
pub mod label_matcher;
pub mod node_info;
pub mod pod_info;
pub mod pod_view;
pub mod queued_entity;
pub mod queued_pod_info;
pub mod resource;
pub mod snapshot;

pub use assigned_pod::{AssignedPod, DISRUPTION_TARGET};
pub use cluster_event::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodObject, QueueingHint,
    objects,
};
pub use host_ports::{DEFAULT_BIND_ALL_HOST_IP, HostPort, HostPortInfo, pod_host_ports};
pub use label_matcher::LabelMatcher;
pub use node_info::{ImageStateSummary, ImageStates, NodeInfo, PodNotFound, next_generation};
pub use pod_info::PodInfo;
pub use pod_view::PodView;
pub use queued_entity::{QueuedEntity, QueuedPodGroup};
pub use queued_pod_info::{GroupBackoff, QueuedPodInfo};
pub use resource::{
    DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_MEMORY, RESOURCE_PODS, Resource, calculate_pod_resource, fit_scoring_requests,
    is_scalar_resource_name,
};
pub use snapshot::{NodeChange, Snapshot};
