//! `--feature-gates` as kube-scheduler reads it at the emulated minor (`Name=true|false,...`,
//! optionally prefixed `kube:`): a gate the minor does not know is refused (`unrecognized feature
//! gate: X`), a gate locked to its default cannot be changed, and every gate given is either
//! honoured or named in one warning.
//!
//! Each minor's gates come from upstream's own feature-gate registry, one generated table per
//! minor (`v1_36.rs`, `v1_37.rs`: `hack/testenv/feature-gates.sh`), with whether the scheduler
//! reads the gate. Honoured either way: `NodeDeclaredFeatures=false` (the plugin is left out of the
//! default profile, as upstream's defaults do) and `OpportunisticBatching` (on by default: pods
//! with the same scheduling signature share Filter and Score work; off: every pod runs them in
//! full), and from 1.37 `GenericWorkload` (on: GangScheduling joins the default profile). The
//! other scheduling gates are implemented at their default for the minor, so setting
//! one to its default is honoured trivially and setting it otherwise is warned about, as are gates
//! of other components.

mod v1_36;
mod v1_37;

use std::collections::BTreeMap;

use super::Minor;

/// Pods with the same scheduling signature share Filter and Score work (`framework::batch`).
pub const OPPORTUNISTIC_BATCHING: &str = "OpportunisticBatching";

/// The gates ksched acts on either way, from the minor given on.
const HONOURED: &[(&str, Minor)] = &[
    ("NodeDeclaredFeatures", Minor::V1_36),
    (OPPORTUNISTIC_BATCHING, Minor::V1_36),
    (GENERIC_WORKLOAD, GENERIC_WORKLOAD_SINCE),
    (TOPOLOGY_AWARE_WORKLOAD_SCHEDULING, GENERIC_WORKLOAD_SINCE),
];

/// 1.37's workload-aware scheduling (beta, off by default): on, the default profile gets
/// GangScheduling.
pub const GENERIC_WORKLOAD: &str = "GenericWorkload";

/// 1.37's topology-aware workload scheduling (alpha, off by default): on, a PodGroup's
/// `schedulingConstraints.topology` places it in one domain, and the default profile gets
/// TopologyPlacementGenerator and PodGroupPodsCount.
pub const TOPOLOGY_AWARE_WORKLOAD_SCHEDULING: &str = "TopologyAwareWorkloadScheduling";

/// The first minor whose `GenericWorkload` ksched honours: 1.36 has the gate too, but its gang
/// scheduling reads the v1alpha2 API, which ksched does not.
pub const GENERIC_WORKLOAD_SINCE: Minor = Minor::V1_37;

/// A gate's maturity at a minor (upstream's `featuregate.prerelease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

impl Stage {
    /// As `kubernetes_feature_enabled{stage}` spells it (GA: empty).
    pub fn label(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

/// A gate kube-scheduler knows at a minor: its default there, whether it is locked to it,
/// whether the scheduler itself reads it, and its stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gate {
    name: &'static str,
    default: bool,
    locked: bool,
    scheduler: bool,
    stage: Stage,
}

impl Gate {
    pub(super) const fn new(
        name: &'static str,
        default: bool,
        locked: bool,
        scheduler: bool,
        stage: Stage,
    ) -> Gate {
        Gate {
            name,
            default,
            locked,
            scheduler,
            stage,
        }
    }
}

/// The gates of `minor` (a supported one; an unsupported minor has the newest minor's).
fn known(minor: Minor) -> &'static [Gate] {
    match minor {
        Minor::V1_36 => v1_36::GATES,
        _ => v1_37::GATES,
    }
}

fn find(minor: Minor, name: &str) -> Option<&'static Gate> {
    let gates = known(minor);
    gates
        .binary_search_by(|g| g.name.cmp(name))
        .ok()
        .map(|i| &gates[i])
}

/// The gates of one emulated minor: its defaults, and what the command line set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGates {
    minor: Minor,
    set: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("--feature-gates: missing bool value for {0}")]
    MissingValue(String),
    #[error(
        "--feature-gates: invalid value of {0}={1}, err: strconv.ParseBool: parsing {1:?}: invalid syntax"
    )]
    Value(String, String),
    #[error("--feature-gates: unrecognized feature gate: {0}")]
    Unrecognized(String),
    #[error("--feature-gates: cannot set feature gate {0} to {1}, feature is locked to {2}")]
    Locked(String, bool, bool),
}

/// Go's `strconv.ParseBool`, which `--feature-gates` values go through.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// `minor`'s defaults, nothing set.
    pub fn defaults(minor: Minor) -> FeatureGates {
        FeatureGates {
            minor,
            set: BTreeMap::new(),
        }
    }

    /// Parses every `--feature-gates` value (comma-separated pairs; `kube:` prefixes allowed)
    /// against `minor`'s gates, with upstream's errors: the first unknown gate stops parsing.
    pub fn parse(minor: Minor, values: &[String]) -> Result<FeatureGates, FeatureGateError> {
        let mut set = BTreeMap::new();
        for pair in values
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let pair = pair.strip_prefix("kube:").unwrap_or(pair);
            let Some((name, value)) = pair.split_once('=') else {
                return Err(FeatureGateError::MissingValue(pair.trim().to_string()));
            };
            let (name, value) = (name.trim(), value.trim());
            let value = parse_bool(value)
                .ok_or_else(|| FeatureGateError::Value(name.into(), value.into()))?;
            let gate = find(minor, name)
                .ok_or_else(|| FeatureGateError::Unrecognized(name.to_string()))?;
            if gate.locked && value != gate.default {
                return Err(FeatureGateError::Locked(name.into(), value, gate.default));
            }
            set.insert(name.to_string(), value);
        }
        Ok(FeatureGates { minor, set })
    }

    pub fn minor(&self) -> Minor {
        self.minor
    }

    /// Whether `name` is on: as set, else the minor's default (off for a gate it does not know).
    pub fn enabled(&self, name: &str) -> bool {
        self.set
            .get(name)
            .copied()
            .unwrap_or_else(|| find(self.minor, name).is_some_and(|g| g.default))
    }

    /// Every gate of the minor with its stage and whether it is on, sorted by name (what
    /// `kubernetes_feature_enabled` exports).
    pub fn all(&self) -> impl Iterator<Item = (&'static str, Stage, bool)> + '_ {
        known(self.minor)
            .iter()
            .map(|g| (g.name, g.stage, self.enabled(g.name)))
    }

    /// Gates given that ksched does not act on: a scheduling gate set away from the default ksched
    /// implements, or a gate the scheduler does not read (another component's).
    pub fn not_honoured(&self) -> Vec<String> {
        self.set
            .iter()
            .filter(|(name, value)| match find(self.minor, name) {
                Some(_)
                    if HONOURED
                        .iter()
                        .any(|(h, since)| h == name && self.minor >= *since) =>
                {
                    false
                }
                Some(g) if g.scheduler => **value != g.default,
                _ => true,
            })
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(minor: Minor, s: &str) -> Result<FeatureGates, FeatureGateError> {
        FeatureGates::parse(minor, &[s.to_string()])
    }

    #[test]
    fn the_tables_are_sorted_and_know_the_scheduling_gates() {
        for minor in crate::emulation::SUPPORTED {
            let gates = known(*minor);
            assert!(
                gates.windows(2).all(|w| w[0].name < w[1].name),
                "{minor}: the table must be sorted by name (binary search)"
            );
            for name in ["NodeDeclaredFeatures", OPPORTUNISTIC_BATCHING] {
                assert!(
                    find(*minor, name).is_some_and(|g| g.scheduler),
                    "{minor}: {name}"
                );
            }
        }
    }

    #[test]
    fn every_gate_is_listed_with_its_stage_and_state() {
        let g = parse(Minor::V1_37, "OpportunisticBatching=false").unwrap();
        let all: Vec<_> = g.all().collect();
        assert_eq!(all.len(), known(Minor::V1_37).len());
        assert!(all.contains(&("StorageCapacityScoring", Stage::Beta, true)));
        assert!(all.contains(&("NodeDeclaredFeatures", Stage::Ga, true)));
        assert!(all.contains(&(OPPORTUNISTIC_BATCHING, Stage::Beta, false)));
        let old: Vec<_> = FeatureGates::defaults(Minor::V1_36).all().collect();
        assert!(old.contains(&("StorageCapacityScoring", Stage::Alpha, false)));
        assert_eq!(Stage::Ga.label(), "");
    }

    #[test]
    fn pairs_with_or_without_the_component() {
        let g = parse(
            Minor::V1_36,
            "NodeDeclaredFeatures=false,kube:GangScheduling=true",
        )
        .unwrap();
        assert!(!g.enabled("NodeDeclaredFeatures"));
        assert!(g.enabled("GangScheduling"));
        assert!(g.enabled("PodLevelResources"), "default on");
        assert!(!g.enabled("StorageCapacityScoring"), "default off in 1.36");
    }

    #[test]
    fn defaults_follow_the_minor() {
        let (old, new) = (
            FeatureGates::defaults(Minor::V1_36),
            FeatureGates::defaults(Minor::V1_37),
        );
        // Beta and on in 1.37 (alpha, off, in 1.36).
        for gate in ["StorageCapacityScoring", "VolumeLimitScaling"] {
            assert!(!old.enabled(gate) && new.enabled(gate), "{gate}");
        }
        assert!(old.enabled("NodeDeclaredFeatures") && new.enabled("NodeDeclaredFeatures"));
        // GA in 1.37: locked on.
        assert!(FeatureGates::parse(Minor::V1_36, &["NodeDeclaredFeatures=false".into()]).is_ok());
        assert_eq!(
            FeatureGates::parse(Minor::V1_37, &["NodeDeclaredFeatures=false".into()]),
            Err(FeatureGateError::Locked(
                "NodeDeclaredFeatures".into(),
                false,
                true
            ))
        );
    }

    #[test]
    fn an_unknown_gate_is_refused_as_kube_scheduler_refuses_it() {
        let err = parse(Minor::V1_37, "NodeDeclaredFeatures=true,NoSuchGate=true").unwrap_err();
        assert_eq!(err, FeatureGateError::Unrecognized("NoSuchGate".into()));
        assert_eq!(
            err.to_string(),
            "--feature-gates: unrecognized feature gate: NoSuchGate"
        );
        // A gate 1.37 removed (merged into GenericWorkload) is unknown there, known in 1.36.
        assert!(parse(Minor::V1_36, "GangScheduling=true").is_ok());
        assert_eq!(
            parse(Minor::V1_37, "GangScheduling=true"),
            Err(FeatureGateError::Unrecognized("GangScheduling".into()))
        );
    }

    #[test]
    fn locked_gates_cannot_change_and_values_are_go_bools() {
        assert_eq!(
            parse(Minor::V1_37, "DynamicResourceAllocation=false"),
            Err(FeatureGateError::Locked(
                "DynamicResourceAllocation".into(),
                false,
                true
            ))
        );
        assert!(parse(Minor::V1_37, "DynamicResourceAllocation=true").is_ok());
        assert!(parse(Minor::V1_37, "OpportunisticBatching=F").is_ok());
        assert_eq!(
            parse(Minor::V1_37, "Foo"),
            Err(FeatureGateError::MissingValue("Foo".into()))
        );
        assert!(matches!(
            parse(Minor::V1_37, "OpportunisticBatching=maybe"),
            Err(FeatureGateError::Value(..))
        ));
    }

    #[test]
    fn opportunistic_batching_is_on_by_default_and_honoured_off() {
        assert!(
            parse(Minor::V1_37, "")
                .unwrap()
                .enabled(OPPORTUNISTIC_BATCHING)
        );
        let off = parse(Minor::V1_37, "OpportunisticBatching=false").unwrap();
        assert!(!off.enabled(OPPORTUNISTIC_BATCHING));
        assert!(off.not_honoured().is_empty());
    }

    #[test]
    fn generic_workload_is_honoured_from_1_37() {
        let on = parse(Minor::V1_37, "GenericWorkload=true").unwrap();
        assert!(on.enabled(GENERIC_WORKLOAD));
        assert!(on.not_honoured().is_empty());
        // 1.36's gang scheduling reads the v1alpha2 API, which ksched does not.
        let old = parse(Minor::V1_36, "GenericWorkload=true").unwrap();
        assert_eq!(old.not_honoured(), vec!["GenericWorkload=true"]);
    }

    #[test]
    fn gates_not_acted_on_are_named() {
        let g = parse(
            Minor::V1_36,
            "NodeDeclaredFeatures=false,PodLevelResources=true,SchedulerAsyncPreemption=false,APIServingWithRoutine=true",
        )
        .unwrap();
        assert_eq!(
            g.not_honoured(),
            vec![
                "APIServingWithRoutine=true",
                "SchedulerAsyncPreemption=false"
            ]
        );
        // A gate removed upstream is unknown, as kube-scheduler 1.36.3 says.
        assert_eq!(
            parse(Minor::V1_36, "APIListChunking=true"),
            Err(FeatureGateError::Unrecognized("APIListChunking".into()))
        );
    }
}
