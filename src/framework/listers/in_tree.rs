//! The kinds ksched's own plugins read, each declared once (the order is a saved snapshot's).

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as WorkloadPodGroup;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};

use super::Informer;
use super::kind::Kind;
use super::members::{BySchedulingGroup, PodGroupMembers};
use crate::api::PodGroup;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::emulation::Minor;
use crate::framework::types::{ActionType, EventResource};

pub static PERSISTENT_VOLUMES: Kind<PersistentVolume> = Kind::new("PersistentVolumes")
    .events(EventResource::PersistentVolume)
    .read_by_filter_or_score()
    .in_snapshot("pv", true);

pub static PERSISTENT_VOLUME_CLAIMS: Kind<PersistentVolumeClaim> =
    Kind::new("PersistentVolumeClaims")
        .events(EventResource::PersistentVolumeClaim)
        .read_by_filter_or_score()
        .in_snapshot("pvc", true);

pub static STORAGE_CLASSES: Kind<StorageClass> = Kind::new("StorageClasses")
    .events(EventResource::StorageClass)
    .read_by_filter_or_score()
    .in_snapshot("storageclasses", true);

pub static CSI_NODES: Kind<CSINode> = Kind::new("CSINodes")
    .events(EventResource::CSINode)
    .read_by_filter_or_score()
    .in_snapshot("csinodes", true);

pub static CSI_DRIVERS: Kind<CSIDriver> = Kind::new("CSIDrivers")
    .events(EventResource::CSIDriver)
    .read_by_filter_or_score()
    .in_snapshot("csidrivers", false);

pub static CSI_STORAGE_CAPACITIES: Kind<CSIStorageCapacity> = Kind::new("CSIStorageCapacities")
    .events(EventResource::CSIStorageCapacity)
    .read_by_filter_or_score()
    .in_snapshot("csistoragecapacities", false);

/// Preemption's: read when choosing victims, never by Filter or Score.
pub static POD_DISRUPTION_BUDGETS: Kind<PodDisruptionBudget> =
    Kind::new("PodDisruptionBudgets").in_snapshot("pdb", true);

/// No plugin reads it: `ksched simulate` gives a pod without `spec.priority` its class's value.
pub static PRIORITY_CLASSES: Kind<PriorityClass> =
    Kind::new("PriorityClasses").in_snapshot("priorityclasses", true);

/// `scheduling.x-k8s.io` PodGroups (Coscheduling's, read at PreFilter and Permit).
pub static POD_GROUPS: Kind<PodGroup> = Kind::new("PodGroups")
    .events(EventResource::PodGroup)
    .in_snapshot("podgroups", true);

/// resource.k8s.io: what DynamicResources allocates from and to.
pub static RESOURCE_CLAIMS: Kind<ResourceClaim> = Kind::new("ResourceClaims")
    .events(EventResource::ResourceClaim)
    .read_by_filter_or_score()
    .in_snapshot("resourceclaims", true);

pub static RESOURCE_SLICES: Kind<ResourceSlice> = Kind::new("ResourceSlices")
    .events(EventResource::ResourceSlice)
    .read_by_filter_or_score()
    .in_snapshot("resourceslices", true);

pub static DEVICE_CLASSES: Kind<DeviceClass> = Kind::new("DeviceClasses")
    .events(EventResource::DeviceClass)
    .read_by_filter_or_score()
    .in_snapshot("deviceclasses", true);

/// resource.k8s.io/v1 DeviceTaintRules (GA in 1.37): their taints apply to the devices they
/// select, so a change is an update of those devices' ResourceSlices, as upstream's slice tracker
/// reports it.
pub static DEVICE_TAINT_RULES: Kind<DeviceTaintRule> = Kind::new("DeviceTaintRules")
    .events_as(EventResource::ResourceSlice, ActionType::UPDATE)
    .served_from(Minor::V1_37)
    .read_by_filter_or_score()
    .in_snapshot("devicetaintrules", false);

/// The leaf plugins' namespace selectors and InterPodAffinity's namespace selectors.
pub static NAMESPACES: Kind<Namespace> = Kind::new("Namespaces")
    .read_by_filter_or_score()
    .in_snapshot("namespaces", false);

/// Services, ReplicationControllers, ReplicaSets and StatefulSets: the owners PodTopologySpread's
/// default constraints derive a pod's selector from (at PreFilter).
pub static SERVICES: Kind<Service> = Kind::new("Services").in_snapshot("services", false);

pub static REPLICATION_CONTROLLERS: Kind<ReplicationController> =
    Kind::new("ReplicationControllers").in_snapshot("replicationcontrollers", false);

pub static REPLICA_SETS: Kind<ReplicaSet> =
    Kind::new("ReplicaSets").in_snapshot("replicasets", false);

pub static STATEFUL_SETS: Kind<StatefulSet> =
    Kind::new("StatefulSets").in_snapshot("statefulsets", false);

/// Pods that carry the `scheduling.x-k8s.io/pod-group` label, in every phase, indexed by group
/// (Coscheduling counts a group's members and their Running/Succeeded/Failed numbers). A pending
/// pod joining a group is an unscheduled pod added once more when the index holds it (see
/// [`PodGroupMembers`]).
pub static POD_GROUP_MEMBERS: Kind<Pod, PodGroupMembers> = Kind::new("PodGroupMembers")
    .events(EventResource::UnscheduledPod)
    .selected_by(POD_GROUP_LABEL);

/// `scheduling.k8s.io/v1beta1` PodGroups (1.37's workload-aware scheduling, beta, served when the
/// API server's `GenericWorkload` gate and runtime config are on): GangScheduling's gangs.
pub static WORKLOAD_POD_GROUPS: Kind<WorkloadPodGroup> = Kind::new("WorkloadPodGroups")
    .events(EventResource::WorkloadPodGroup)
    .served_from(Minor::V1_37)
    .in_snapshot("podgroups.scheduling.k8s.io", false);

/// Every pod, indexed by the PodGroup its `spec.schedulingGroup` names (GangScheduling counts a
/// gang's members). Filled by the scheduler's pod informer, as upstream's pod group states are:
/// a gang's PreEnqueue counts exactly the members the queue has seen.
pub static SCHEDULING_GROUP_MEMBERS: Kind<Pod, PodGroupMembers<BySchedulingGroup>> =
    Kind::new("SchedulingGroupMembers")
        .served_from(Minor::V1_37)
        .fed_by_pod_informer();

/// Every in-tree kind, in a saved snapshot's order.
pub static IN_TREE: [Informer; 21] = [
    &PERSISTENT_VOLUMES,
    &PERSISTENT_VOLUME_CLAIMS,
    &STORAGE_CLASSES,
    &CSI_NODES,
    &CSI_DRIVERS,
    &CSI_STORAGE_CAPACITIES,
    &POD_DISRUPTION_BUDGETS,
    &PRIORITY_CLASSES,
    &POD_GROUPS,
    &RESOURCE_CLAIMS,
    &RESOURCE_SLICES,
    &DEVICE_CLASSES,
    &NAMESPACES,
    &SERVICES,
    &REPLICATION_CONTROLLERS,
    &REPLICA_SETS,
    &STATEFUL_SETS,
    &POD_GROUP_MEMBERS,
    &DEVICE_TAINT_RULES,
    &WORKLOAD_POD_GROUPS,
    &SCHEDULING_GROUP_MEMBERS,
];
