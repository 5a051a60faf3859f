//! Plugin names, as upstream, Kosmos and scheduler-plugins spell them.

pub const PRIORITY_SORT: &str = "PrioritySort";
pub const SCHEDULING_GATES: &str = "SchedulingGates";
pub const NODE_NAME: &str = "NodeName";
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
pub const DEFAULT_BINDER: &str = "DefaultBinder";
pub const TAINT_TOLERATION: &str = "TaintToleration";
pub const NODE_AFFINITY: &str = "NodeAffinity";
pub const NODE_PORTS: &str = "NodePorts";
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
pub const IMAGE_LOCALITY: &str = "ImageLocality";
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
pub const VOLUME_BINDING: &str = "VolumeBinding";
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
pub const VOLUME_ZONE: &str = "VolumeZone";
pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
pub const DYNAMIC_RESOURCES: &str = "DynamicResources";
pub const NODE_DECLARED_FEATURES: &str = "NodeDeclaredFeatures";
pub const GANG_SCHEDULING: &str = "GangScheduling";
pub const LEAF_NODE_TAINT_TOLERATION: &str = "LeafNodeTaintToleration";
pub const LEAF_NODE_VOLUME_BINDING: &str = "LeafNodeVolumeBinding";
pub const LEAF_NODE_DISTRIBUTION: &str = "LeafNodeDistribution";
pub const COSCHEDULING: &str = "Coscheduling";
pub const NETWORK_TRAFFIC: &str = "NetworkTraffic";
