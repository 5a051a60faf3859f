//! Defaults as upstream's `SetDefaults_KubeSchedulerConfiguration`, the default plugin set of
//! `pkg/scheduler/apis/config/v1/default_plugins.go` per emulated minor (tags v1.36.3 and
//! v1.37.2, with the feature gates the scheduler runs with) and its `mergePlugins` rules.

use super::catalog::{ExtensionPoint, PluginAvailability, PluginCatalog};
use super::duration::GoDuration;
use super::types::{
    ALL_PLUGINS, ClientConnection, ClientConnectionConfiguration, DEFAULT_SCHEDULER_NAME,
    KubeSchedulerConfiguration, KubeSchedulerProfile, LeaderElection, LeaderElectionConfiguration,
    Plugin, PluginSet, Plugins,
};
use crate::emulation::{Emulation, GENERIC_WORKLOAD, Minor, TOPOLOGY_AWARE_WORKLOAD_SCHEDULING};

pub(crate) const DEFAULT_PARALLELISM: i32 = 16;
/// `config.DefaultPercentageOfNodesToScore`: 0 means adaptive.
pub(crate) const DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE: i32 = 0;
pub(crate) const DEFAULT_POD_INITIAL_BACKOFF_SECONDS: i64 = 1;
pub(crate) const DEFAULT_POD_MAX_BACKOFF_SECONDS: i64 = 10;
pub(crate) const DEFAULT_LEASE_DURATION: GoDuration = GoDuration::from_secs(15);
pub(crate) const DEFAULT_RENEW_DEADLINE: GoDuration = GoDuration::from_secs(10);
pub(crate) const DEFAULT_RETRY_PERIOD: GoDuration = GoDuration::from_secs(2);
pub(crate) const DEFAULT_RESOURCE_LOCK: &str = "leases";
pub(crate) const DEFAULT_RESOURCE_NAME: &str = "kube-scheduler";
pub(crate) const DEFAULT_RESOURCE_NAMESPACE: &str = "kube-system";
pub(crate) const DEFAULT_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub(crate) const DEFAULT_QPS: f32 = 50.0;
pub(crate) const DEFAULT_BURST: i32 = 100;

/// A default plugin: name, weight (used at score only), and the feature gate that must be on for
/// upstream's `applyFeatureGates` to add it (`None`: always there).
type DefaultPlugin = (&'static str, Option<i32>, Option<&'static str>);

/// Upstream's default plugins at 1.36, all in `multiPoint`, in order. DynamicResourceAllocation
/// (GA, locked on) inserts DynamicResources (weight 2) before DefaultPreemption;
/// NodeDeclaredFeatures (beta, on) appends NodeDeclaredFeatures; GangScheduling and
/// TopologyAwareWorkloadScheduling (alpha, off) would append plugins ksched does not have.
const DEFAULT_MULTI_POINT: &[DefaultPlugin] = &[
    ("SchedulingGates", None, None),
    ("PrioritySort", None, None),
    ("NodeUnschedulable", None, None),
    ("NodeName", None, None),
    ("TaintToleration", Some(3), None),
    ("NodeAffinity", Some(2), None),
    ("NodePorts", None, None),
    ("NodeResourcesFit", Some(1), None),
    ("VolumeRestrictions", None, None),
    ("NodeVolumeLimits", None, None),
    ("VolumeBinding", None, None),
    ("VolumeZone", None, None),
    ("PodTopologySpread", Some(2), None),
    ("InterPodAffinity", Some(2), None),
    ("DynamicResources", Some(2), None),
    ("DefaultPreemption", None, None),
    ("NodeResourcesBalancedAllocation", Some(1), None),
    ("ImageLocality", Some(1), None),
    ("DefaultBinder", None, None),
    ("NodeDeclaredFeatures", None, Some("NodeDeclaredFeatures")),
];

/// A change of the default list at a minor.
enum DefaultsChange {
    /// The first plugin moves to just before the second.
    MoveBefore(&'static str, &'static str),
    /// The plugin (with its weight) is appended when the gate is on.
    AppendWhen(&'static str, Option<i32>, &'static str),
}

/// What changed in the default plugins at which minor. 1.37: NodeName runs before
/// NodeUnschedulable (a pod bound to a node by name fails on NodeName first), `GenericWorkload`
/// (beta, off by default) appends GangScheduling, and `TopologyAwareWorkloadScheduling` (alpha)
/// TopologyPlacementGenerator and PodGroupPodsCount. 1.37's other gated addition
/// (DeferredPodScheduling: InPlacePodVerticalScalingSchedulerPreemption, alpha) is not a ksched
/// plugin; neither are 1.36's GangScheduling and placement plugins (alpha, reading the v1alpha2
/// Workload API).
const DEFAULTS_CHANGES: &[(Minor, DefaultsChange)] = &[
    (
        Minor::V1_37,
        DefaultsChange::MoveBefore("NodeName", "NodeUnschedulable"),
    ),
    (
        Minor::V1_37,
        DefaultsChange::AppendWhen("GangScheduling", None, GENERIC_WORKLOAD),
    ),
    (
        Minor::V1_37,
        DefaultsChange::AppendWhen(
            "TopologyPlacementGenerator",
            None,
            TOPOLOGY_AWARE_WORKLOAD_SCHEDULING,
        ),
    ),
    (
        Minor::V1_37,
        DefaultsChange::AppendWhen(
            "PodGroupPodsCount",
            Some(1),
            TOPOLOGY_AWARE_WORKLOAD_SCHEDULING,
        ),
    ),
];

/// Upstream's default `multiPoint` plugins at `emulation`'s minor, with its gates: name and weight,
/// in order.
pub(crate) fn default_multi_point(emulation: &Emulation) -> Vec<(&'static str, Option<i32>)> {
    let mut list: Vec<DefaultPlugin> = DEFAULT_MULTI_POINT.to_vec();
    for (since, change) in DEFAULTS_CHANGES {
        if emulation.minor() < *since {
            continue;
        }
        match change {
            DefaultsChange::MoveBefore(moved, before) => {
                if let Some(from) = list.iter().position(|p| p.0 == *moved) {
                    let entry = list.remove(from);
                    let to = list
                        .iter()
                        .position(|p| p.0 == *before)
                        .unwrap_or(list.len());
                    list.insert(to, entry);
                }
            }
            DefaultsChange::AppendWhen(name, weight, gate) => {
                list.push((name, *weight, Some(gate)))
            }
        }
    }
    list.into_iter()
        .filter(|(_, _, gate)| gate.is_none_or(|g| emulation.enabled(g)))
        .map(|(name, weight, _)| (name, weight))
        .collect()
}

/// Whether `name` is a default plugin of some supported minor.
pub(crate) fn is_default_plugin(name: &str) -> bool {
    DEFAULT_MULTI_POINT.iter().any(|(n, _, _)| *n == name)
        || DEFAULTS_CHANGES
            .iter()
            .any(|(_, c)| matches!(c, DefaultsChange::AppendWhen(n, _, _) if *n == name))
}

/// The default `plugins` of a profile (`getDefaultPlugins`) at `emulation`, leaving out plugins this
/// binary cannot run: unknown to the catalog (logged) or known but not built (reported by
/// [`left_out_defaults`]).
pub(crate) fn default_plugins(catalog: &dyn PluginCatalog, emulation: &Emulation) -> Plugins {
    let mut plugins = Plugins::default();
    for (name, weight) in default_multi_point(emulation) {
        match catalog.availability(name) {
            PluginAvailability::Built(_) => {}
            PluginAvailability::NotBuiltYet { .. } => continue,
            PluginAvailability::Unknown => {
                tracing::warn!(
                    plugin = name,
                    "default plugin unknown to the plugin catalog; left out of the defaults"
                );
                continue;
            }
        }
        plugins.multi_point.enabled.push(Plugin {
            name: name.to_string(),
            weight,
        });
    }
    plugins
}

/// `mergePluginSet`: the user's `disabled` removes defaults (`"*"` all of them); a default the user
/// enables again keeps its place and takes the user's entry (weight); other user plugins are appended.
pub(crate) fn merge_plugin_set(defaults: &PluginSet, custom: &PluginSet) -> PluginSet {
    let mut disabled: Vec<Plugin> = custom
        .disabled
        .iter()
        .map(|p| Plugin::named(p.name.clone()))
        .collect();
    disabled.extend(
        defaults
            .disabled
            .iter()
            .map(|p| Plugin::named(p.name.clone())),
    );
    let is_disabled = |name: &str| disabled.iter().any(|p| p.name == name);
    let mut replaced = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !is_disabled(ALL_PLUGINS) {
        for default in &defaults.enabled {
            if is_disabled(&default.name) {
                continue;
            }
            // Like upstream's map from name to entry, the last user entry of a name wins.
            match custom.enabled.iter().rposition(|p| p.name == default.name) {
                Some(index) => {
                    replaced[index] = true;
                    enabled.push(custom.enabled[index].clone());
                }
                None => enabled.push(default.clone()),
            }
        }
    }
    enabled.extend(
        custom
            .enabled
            .iter()
            .zip(&replaced)
            .filter(|(_, replaced)| !**replaced)
            .map(|(p, _)| p.clone()),
    );
    PluginSet { enabled, disabled }
}

/// `mergePlugins` for every extension point and `multiPoint`.
pub(crate) fn merge_plugins(defaults: &Plugins, custom: Option<&Plugins>) -> Plugins {
    let Some(custom) = custom else {
        return defaults.clone();
    };
    let mut merged = Plugins {
        multi_point: merge_plugin_set(&defaults.multi_point, &custom.multi_point),
        ..Plugins::default()
    };
    for point in ExtensionPoint::ALL {
        *merged.get_mut(point) = merge_plugin_set(defaults.get(point), custom.get(point));
    }
    merged
}

/// When there is no profile, one; a single profile without a name is `default-scheduler`.
pub(crate) fn default_profiles(doc: &mut KubeSchedulerConfiguration) {
    if doc.profiles.is_empty() {
        doc.profiles.push(KubeSchedulerProfile::default());
    }
    if doc.profiles.len() == 1 && doc.profiles[0].scheduler_name.is_none() {
        doc.profiles[0].scheduler_name = Some(DEFAULT_SCHEDULER_NAME.to_string());
    }
}

fn non_empty(s: &Option<String>, default: &str) -> String {
    match s {
        Some(s) if !s.is_empty() => s.clone(),
        _ => default.to_string(),
    }
}

fn non_zero(d: Option<GoDuration>, default: GoDuration) -> GoDuration {
    match d {
        Some(d) if !d.is_zero() => d,
        _ => default,
    }
}

/// Leader election with upstream's defaults (an empty or zero value takes the default, as in Go).
pub(crate) fn leader_election(le: &LeaderElectionConfiguration) -> LeaderElection {
    LeaderElection {
        leader_elect: le.leader_elect.unwrap_or(true),
        lease_duration: non_zero(le.lease_duration, DEFAULT_LEASE_DURATION),
        renew_deadline: non_zero(le.renew_deadline, DEFAULT_RENEW_DEADLINE),
        retry_period: non_zero(le.retry_period, DEFAULT_RETRY_PERIOD),
        resource_lock: non_empty(&le.resource_lock, DEFAULT_RESOURCE_LOCK),
        resource_name: non_empty(&le.resource_name, DEFAULT_RESOURCE_NAME),
        resource_namespace: non_empty(&le.resource_namespace, DEFAULT_RESOURCE_NAMESPACE),
    }
}

/// Client connection with the scheduler's own defaults (QPS 50, burst 100, protobuf).
pub(crate) fn client_connection(cc: &ClientConnectionConfiguration) -> ClientConnection {
    ClientConnection {
        kubeconfig: cc.kubeconfig.clone().unwrap_or_default(),
        accept_content_types: cc.accept_content_types.clone().unwrap_or_default(),
        content_type: non_empty(&cc.content_type, DEFAULT_CONTENT_TYPE),
        qps: match cc.qps {
            Some(q) if q != 0.0 => q,
            _ => DEFAULT_QPS,
        },
        burst: match cc.burst {
            Some(b) if b != 0 => b,
            _ => DEFAULT_BURST,
        },
    }
}

/// One warning per upstream default plugin this ksched knows but cannot run yet: it is left out of
/// every profile's defaults (enabling it explicitly is an error).
pub(crate) fn left_out_defaults(catalog: &dyn PluginCatalog, emulation: &Emulation) -> Vec<String> {
    default_multi_point(emulation)
        .into_iter()
        .filter_map(|(name, _)| match catalog.availability(name) {
            PluginAvailability::NotBuiltYet { reason, .. } => Some(format!(
                "default plugin {name} is left out of the default profile: not supported by this ksched yet ({reason})"
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &PluginSet) -> Vec<(&str, Option<i32>)> {
        set.enabled
            .iter()
            .map(|p| (p.name.as_str(), p.weight))
            .collect()
    }

    fn set(enabled: &[(&str, Option<i32>)], disabled: &[&str]) -> PluginSet {
        PluginSet {
            enabled: enabled
                .iter()
                .map(|(n, w)| Plugin {
                    name: n.to_string(),
                    weight: *w,
                })
                .collect(),
            disabled: disabled.iter().map(|n| Plugin::named(*n)).collect(),
        }
    }

    #[test]
    fn default_plugins_per_minor() {
        let names = |e: &Emulation| -> Vec<&str> {
            default_multi_point(e).into_iter().map(|(n, _)| n).collect()
        };
        let old = names(&Emulation::of(Minor::V1_36));
        let new = names(&Emulation::of(Minor::V1_37));
        assert_eq!(old.len(), 20);
        assert_eq!(
            old[..5],
            [
                "SchedulingGates",
                "PrioritySort",
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration"
            ]
        );
        // 1.37 (default_plugins.go at v1.37.2): NodeName before NodeUnschedulable, the rest alike.
        assert_eq!(
            new[..5],
            [
                "SchedulingGates",
                "PrioritySort",
                "NodeName",
                "NodeUnschedulable",
                "TaintToleration"
            ]
        );
        assert_eq!(old[4..], new[4..]);
        assert_eq!(new.last(), Some(&"NodeDeclaredFeatures"));
        // The gate can be turned off at 1.36 (beta); 1.37 locks it on (GA).
        let gate_off = Emulation::with_gates(Minor::V1_36, &["NodeDeclaredFeatures=false".into()])
            .expect("known gate");
        assert!(!names(&gate_off).contains(&"NodeDeclaredFeatures"));
        assert!(is_default_plugin("ImageLocality") && !is_default_plugin("Coscheduling"));
        // GenericWorkload (1.37, beta, off) appends GangScheduling, as applyFeatureGates does.
        assert!(!new.contains(&"GangScheduling"));
        let gangs = Emulation::with_gates(Minor::V1_37, &["GenericWorkload=true".into()])
            .expect("known gate");
        assert_eq!(names(&gangs).last(), Some(&"GangScheduling"));
        assert!(is_default_plugin("GangScheduling"));
    }

    #[test]
    fn merge_disabled_removes_defaults() {
        let defaults = set(&[("A", None), ("B", None), ("C", None)], &[]);
        let merged = merge_plugin_set(&defaults, &set(&[], &["B"]));
        assert_eq!(names(&merged), vec![("A", None), ("C", None)]);
        assert_eq!(merged.disabled, vec![Plugin::named("B")]);
    }

    #[test]
    fn merge_star_disables_all_defaults() {
        let defaults = set(&[("A", None), ("B", None)], &[]);
        let merged = merge_plugin_set(&defaults, &set(&[("X", Some(2))], &["*"]));
        assert_eq!(names(&merged), vec![("X", Some(2))]);
    }

    #[test]
    fn merge_reenabled_default_keeps_place_and_takes_weight() {
        let defaults = set(&[("A", Some(1)), ("B", Some(1)), ("C", Some(1))], &[]);
        let merged = merge_plugin_set(&defaults, &set(&[("Custom", None), ("B", Some(5))], &[]));
        assert_eq!(
            names(&merged),
            vec![
                ("A", Some(1)),
                ("B", Some(5)),
                ("C", Some(1)),
                ("Custom", None)
            ]
        );
    }

    #[test]
    fn merge_custom_plugins_appended_in_order() {
        let defaults = set(&[("A", None)], &[]);
        let merged = merge_plugin_set(&defaults, &set(&[("Y", None), ("X", None)], &[]));
        assert_eq!(names(&merged), vec![("A", None), ("Y", None), ("X", None)]);
    }

    #[test]
    fn defaults_like_upstream() {
        let le = leader_election(&LeaderElectionConfiguration::default());
        assert_eq!(
            le,
            LeaderElection {
                leader_elect: true,
                lease_duration: GoDuration::from_secs(15),
                renew_deadline: GoDuration::from_secs(10),
                retry_period: GoDuration::from_secs(2),
                resource_lock: "leases".to_string(),
                resource_name: "kube-scheduler".to_string(),
                resource_namespace: "kube-system".to_string(),
            }
        );
        let cc = client_connection(&ClientConnectionConfiguration {
            qps: Some(0.0),
            ..Default::default()
        });
        assert_eq!(cc.qps, 50.0);
        assert_eq!(cc.burst, 100);
        assert_eq!(cc.content_type, "application/vnd.kubernetes.protobuf");
        let mut doc = KubeSchedulerConfiguration::default();
        default_profiles(&mut doc);
        assert_eq!(doc.profiles.len(), 1);
        assert_eq!(
            doc.profiles[0].scheduler_name.as_deref(),
            Some("default-scheduler")
        );
    }
}
