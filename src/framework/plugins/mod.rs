//! The in-tree plugins, one module each (args, logic and table tests together), and the in-tree
//! registry: which plugins ksched ships (upstream's `plugins.NewInTreeRegistry`).

pub(crate) mod coscheduling;
pub(crate) mod default_binder;
pub(crate) mod default_preemption;
pub(crate) mod dynamic_resources;
pub(crate) mod gang_scheduling;
pub(crate) mod helper;
pub(crate) mod image_locality;
pub(crate) mod inter_pod_affinity;
pub mod leaf;
pub mod names;
pub mod network_traffic;
pub(crate) mod node_affinity;
pub(crate) mod node_declared_features;
pub(crate) mod node_name;
pub(crate) mod node_ports;
pub(crate) mod node_resources;
pub(crate) mod node_unschedulable;
pub(crate) mod node_volume_limits;
pub(crate) mod pod_group_pods_count;
pub(crate) mod pod_topology_spread;
pub(crate) mod priority_sort;
pub(crate) mod scheduling_gates;
pub(crate) mod taint_toleration;
pub(crate) mod topology_placement;
pub(crate) mod volume_binding;
pub(crate) mod volume_restrictions;
pub(crate) mod volume_zone;

use crate::framework::registry::{PluginRegistration, Registry};

impl Registry {
    /// Every plugin ksched ships.
    pub fn in_tree() -> Registry {
        let mut r = Registry::new();
        register_in_tree(&mut r);
        r
    }
}

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
        (names::GANG_SCHEDULING, gang_scheduling::registration()),
        (
            names::TOPOLOGY_PLACEMENT_GENERATOR,
            topology_placement::registration(),
        ),
        (
            names::POD_GROUP_PODS_COUNT,
            pod_group_pods_count::registration(),
        ),
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::config::{ExtensionPoint, PluginAvailability, PluginCatalog};

    #[test]
    fn in_tree_catalog() {
        let r = Registry::in_tree();
        let names_list = r.plugin_names();
        let mut sorted = names_list.clone();
        sorted.sort();
        assert_eq!(names_list, sorted);
        for n in [
            names::PRIORITY_SORT,
            names::NODE_NAME,
            names::DEFAULT_BINDER,
            names::TAINT_TOLERATION,
        ] {
            assert!(
                matches!(r.availability(n), PluginAvailability::Built(_)),
                "{n}"
            );
        }
        for n in [names::INTER_POD_AFFINITY, names::POD_TOPOLOGY_SPREAD] {
            match r.availability(n) {
                PluginAvailability::Built(eps) => assert!(eps.contains(&ExtensionPoint::Filter)),
                other => panic!("{n}: {other:?}"),
            }
        }
        // Upstream 1.36's extension points for its two newest default plugins.
        use ExtensionPoint::*;
        assert_eq!(
            r.availability(names::DYNAMIC_RESOURCES),
            PluginAvailability::Built(vec![
                PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve, PreBind
            ])
        );
        assert_eq!(
            r.availability(names::NODE_DECLARED_FEATURES),
            PluginAvailability::Built(vec![PreFilter, Filter])
        );
        assert_eq!(r.availability("NoSuchPlugin"), PluginAvailability::Unknown);
        let e = crate::emulation::Emulation::default();
        assert!(r.decode_args("NoSuchPlugin", None, &e).is_err());
        assert_eq!(r.decode_args(names::NODE_NAME, None, &e), Ok(Value::Null));
        assert!(
            r.decode_args(names::NODE_NAME, Some(&json!({"x": 1})), &e)
                .is_err()
        );
    }
}
