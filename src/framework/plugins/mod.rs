//! The in-tree plugins, one module each (args, logic and table tests together), and their
//! registration.

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod leaf;
pub mod names;
pub mod network_traffic;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use crate::framework::registry::{PluginRegistration, Registry};

/// Registers every in-tree plugin into `r`.
pub fn register_in_tree(r: &mut Registry) {
    let built: Vec<(&str, PluginRegistration)> = vec![
        (names::PRIORITY_SORT, priority_sort::registration()),
        (names::SCHEDULING_GATES, scheduling_gates::registration()),
        (names::NODE_NAME, node_name::registration()),
        (
            names::NODE_UNSCHEDULABLE,
            node_unschedulable::registration(),
        ),
        (names::DEFAULT_BINDER, default_binder::registration()),
        (names::TAINT_TOLERATION, taint_toleration::registration()),
        (names::NODE_AFFINITY, node_affinity::registration()),
        (names::NODE_PORTS, node_ports::registration()),
        (
            names::NODE_RESOURCES_FIT,
            node_resources::fit::registration(),
        ),
        (
            names::NODE_RESOURCES_BALANCED_ALLOCATION,
            node_resources::balanced_allocation::registration(),
        ),
        (names::IMAGE_LOCALITY, image_locality::registration()),
        (names::VOLUME_BINDING, volume_binding::registration()),
        (
            names::VOLUME_RESTRICTIONS,
            volume_restrictions::registration(),
        ),
        (names::VOLUME_ZONE, volume_zone::registration()),
        (
            names::NODE_VOLUME_LIMITS,
            node_volume_limits::registration(),
        ),
        (names::COSCHEDULING, coscheduling::registration()),
        (names::NETWORK_TRAFFIC, network_traffic::registration()),
        (
            names::DEFAULT_PREEMPTION,
            default_preemption::registration(),
        ),
        (
            names::LEAF_NODE_TAINT_TOLERATION,
            leaf::taint_toleration::registration(),
        ),
        (
            names::LEAF_NODE_DISTRIBUTION,
            leaf::distribution::registration(),
        ),
        (
            names::LEAF_NODE_VOLUME_BINDING,
            leaf::volume_binding::registration(),
        ),
        (
            names::INTER_POD_AFFINITY,
            inter_pod_affinity::registration(),
        ),
        (
            names::POD_TOPOLOGY_SPREAD,
            pod_topology_spread::registration(),
        ),
        (names::DYNAMIC_RESOURCES, dynamic_resources::registration()),
        (
            names::NODE_DECLARED_FEATURES,
            node_declared_features::registration(),
        ),
    ];
    for (name, reg) in built {
        if let Err(e) = r.register(name, reg) {
            tracing::error!(error = %e, "registering in-tree plugin");
        }
    }
}
