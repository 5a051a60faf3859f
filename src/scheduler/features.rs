//! `--feature-gates` as kube-scheduler 1.36 reads it (`Name=true|false,...`, optionally prefixed
//! `kube:` per component): a gate locked to its default cannot be changed (an error, as
//! upstream's), and every gate given is either honoured or named in one warning.
//!
//! Honoured: `NodeDeclaredFeatures=false` (the plugin is left out of every profile: upstream's
//! plugin does nothing with the gate off) and `OpportunisticBatching` (on by default: pods with
//! the same scheduling signature share Filter and Score work; off: every pod runs them in full). The scheduling gates below are known with their 1.36
//! default; ksched implements each at that default, so setting one to its default is honoured
//! trivially and setting it otherwise is warned about. Gates of other components are accepted
//! with the same warning.

use std::collections::BTreeMap;

/// Pods with the same scheduling signature share Filter and Score work (`framework::batch`).
pub(crate) const OPPORTUNISTIC_BATCHING: &str = "OpportunisticBatching";

/// The gates ksched acts on either way.
const HONOURED: &[&str] = &["NodeDeclaredFeatures", OPPORTUNISTIC_BATCHING];

/// A gate ksched knows: its 1.36 default, and whether it is locked to it.
struct Gate {
    name: &'static str,
    default: bool,
    locked: bool,
}

const fn gate(name: &'static str, default: bool, locked: bool) -> Gate {
    Gate {
        name,
        default,
        locked,
    }
}

/// The gates of `pkg/scheduler/framework/plugins/feature` and the queue's, at Kubernetes 1.36.3.
const SCHEDULER_GATES: &[Gate] = &[
    gate("DRAAdminAccess", true, true),
    gate("DRAConsumableCapacity", true, false),
    gate("DRADeviceBindingConditions", true, false),
    gate("DRADeviceTaints", true, false),
    gate("DRAExtendedResource", true, false),
    gate("DRAListTypeAttributes", false, false),
    gate("DRANodeAllocatableResources", false, false),
    gate("DRAPartitionableDevices", true, false),
    gate("DRAPrioritizedList", true, false),
    gate("DRAResourceClaimDeviceStatus", true, false),
    gate("DRASchedulerFilterTimeout", true, false),
    gate("DRAWorkloadResourceClaims", false, false),
    gate("DynamicResourceAllocation", true, true),
    gate("GangScheduling", false, false),
    gate("GenericWorkload", false, false),
    gate("InPlacePodLevelResourcesVerticalScaling", true, false),
    gate("InPlacePodVerticalScaling", true, true),
    gate("MatchLabelKeysInPodTopologySpread", true, false),
    gate("NodeDeclaredFeatures", true, false),
    gate("NodeInclusionPolicyInPodTopologySpread", true, true),
    gate("NominatedNodeNameForExpectation", true, false),
    gate("OpportunisticBatching", true, false),
    gate("PodLevelResources", true, false),
    gate("SchedulerAsyncPreemption", true, false),
    gate("SchedulerPopFromBackoffQ", true, false),
    gate("SchedulerQueueingHints", true, true),
    gate("SidecarContainers", true, true),
    gate("StorageCapacityScoring", false, false),
    gate("TaintTolerationComparisonOperators", false, false),
    gate("TopologyAwareWorkloadScheduling", false, false),
    gate("VolumeAttributesClass", true, true),
    gate("VolumeLimitScaling", false, false),
    gate("WorkloadAwarePreemption", false, false),
];

/// The gates given on the command line, and what ksched makes of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("--feature-gates: {0:?} is not of the form Name=true|false")]
    Syntax(String),
    #[error("--feature-gates: cannot set feature gate {0} to {1}, feature is locked to {2}")]
    Locked(String, bool, bool),
}

impl FeatureGates {
    /// Parses every `--feature-gates` value (comma-separated pairs; `kube:` prefixes allowed).
    pub fn parse(values: &[String]) -> Result<Self, FeatureGateError> {
        let mut set = BTreeMap::new();
        for pair in values
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let pair_without_component = pair.strip_prefix("kube:").unwrap_or(pair);
            let (name, value) = pair_without_component
                .split_once('=')
                .ok_or_else(|| FeatureGateError::Syntax(pair.to_string()))?;
            let value: bool = value
                .trim()
                .parse()
                .map_err(|_| FeatureGateError::Syntax(pair.to_string()))?;
            let name = name.trim();
            if let Some(g) = SCHEDULER_GATES.iter().find(|g| g.name == name)
                && g.locked
                && value != g.default
            {
                return Err(FeatureGateError::Locked(name.into(), value, g.default));
            }
            set.insert(name.to_string(), value);
        }
        Ok(Self { set })
    }

    /// Whether `name` is on (the 1.36 default unless set).
    pub fn enabled(&self, name: &str) -> bool {
        self.set.get(name).copied().unwrap_or_else(|| {
            SCHEDULER_GATES
                .iter()
                .find(|g| g.name == name)
                .is_some_and(|g| g.default)
        })
    }

    /// Gates given that ksched does not act on: set away from the default it implements, or
    /// unknown to its scheduler (another component's, or not a scheduling gate).
    pub fn not_honoured(&self) -> Vec<String> {
        self.set
            .iter()
            .filter(
                |(name, value)| match SCHEDULER_GATES.iter().find(|g| g.name == *name) {
                    Some(_) if HONOURED.contains(&name.as_str()) => false,
                    Some(g) => **value != g.default,
                    None => true,
                },
            )
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// Applies the honoured gates to a loaded configuration.
    pub fn apply(&self, config: &mut crate::config::Config) {
        if !self.enabled("NodeDeclaredFeatures") {
            for profile in &mut config.profiles {
                for plugins in profile.plugins.values_mut() {
                    plugins.retain(|p| p.name != "NodeDeclaredFeatures");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<FeatureGates, FeatureGateError> {
        FeatureGates::parse(&[s.to_string()])
    }

    #[test]
    fn pairs_with_or_without_the_component() {
        let g = parse("NodeDeclaredFeatures=false,kube:GangScheduling=true").unwrap();
        assert!(!g.enabled("NodeDeclaredFeatures"));
        assert!(g.enabled("GangScheduling"));
        assert!(g.enabled("PodLevelResources"), "default on");
        assert!(!g.enabled("StorageCapacityScoring"), "default off");
    }

    #[test]
    fn locked_gates_cannot_change_as_upstream() {
        assert_eq!(
            parse("DynamicResourceAllocation=false"),
            Err(FeatureGateError::Locked(
                "DynamicResourceAllocation".into(),
                false,
                true
            ))
        );
        assert!(parse("DynamicResourceAllocation=true").is_ok());
        assert!(matches!(parse("Foo"), Err(FeatureGateError::Syntax(_))));
        assert!(matches!(
            parse("Foo=maybe"),
            Err(FeatureGateError::Syntax(_))
        ));
    }

    #[test]
    fn opportunistic_batching_is_on_by_default_and_honoured_off() {
        assert!(parse("").unwrap().enabled(OPPORTUNISTIC_BATCHING));
        let off = parse("OpportunisticBatching=false").unwrap();
        assert!(!off.enabled(OPPORTUNISTIC_BATCHING));
        assert!(off.not_honoured().is_empty());
    }

    #[test]
    fn gates_not_acted_on_are_named() {
        let g = parse(
            "NodeDeclaredFeatures=false,PodLevelResources=true,SchedulerAsyncPreemption=false,APIListChunking=true",
        )
        .unwrap();
        assert_eq!(
            g.not_honoured(),
            vec!["APIListChunking=true", "SchedulerAsyncPreemption=false"]
        );
    }

    #[test]
    fn node_declared_features_off_leaves_the_plugin_out() {
        let registry = crate::framework::registry::Registry::in_tree();
        let doc = b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
        let mut config = crate::config::load(doc, &registry).unwrap().config;
        let has = |c: &crate::config::Config| {
            c.profiles[0]
                .plugins
                .values()
                .flatten()
                .any(|p| p.name == "NodeDeclaredFeatures")
        };
        assert!(has(&config));
        parse("NodeDeclaredFeatures=false")
            .unwrap()
            .apply(&mut config);
        assert!(!has(&config));
    }
}
