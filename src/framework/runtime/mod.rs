//! Runs one profile's plugins at each extension point with upstream's semantics
//! (`pkg/scheduler/framework/runtime/framework.go`).
//!
//! This module holds the [`Framework`] itself: the profile it is built from, its construction
//! and checks, the plugin lists per extension point and the accessors. The `Run*Plugins` methods
//! are grouped by extension point, as upstream's `framework.go` groups them:
//!
//! - `queue`: PreEnqueue, QueueSort and the profile's queueing hints.
//! - `filter`: PreFilter (and its AddPod/RemovePod extensions), Filter, and Filter with the
//!   nominated pods (the `FrameworkHandle` the framework offers its plugins).
//! - `post_filter`: PostFilter, and a pod group's PlacementFeasible and PodGroupPostFilter.
//! - `score`: PreScore, Score and NormalizeScore, and [`NodeScores`].
//! - `permit`: Reserve, Unreserve, Permit and waiting on Permit.
//! - `bind`: PreBindPreFlight, PreBind, Bind and PostBind.
//! - `instruments`: the metric handles the runs record into.

mod bind;
mod filter;
mod instruments;
mod permit;
mod placement;
mod post_filter;
mod queue;
mod score;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::batch::{OpportunisticBatch, batchable_plugins};
use super::events::QueueingHintMap;
use super::interface::{MAX_NODE_SCORE, Plugin, Status};
use super::registry::{Handle, PluginError, Registry, RegistryEntry};
use super::waiting_pods::WaitingPods;
use crate::config::{ExtensionPoint, PluginCatalog};
use instruments::{Instruments, PluginMetrics};
use queue::queueing_hint_map;

pub use placement::GeneratedPlacements;
pub use score::{NodeScores, RawScores};

/// One profile as the framework needs it: enabled plugins per extension point (name, weight) and
/// each plugin's normalized args. The configuration's effective profile converts into this.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileSpec {
    pub scheduler_name: String,
    pub plugins: BTreeMap<ExtensionPoint, Vec<(String, i32)>>,
    pub args: BTreeMap<String, Value>,
    pub percentage_of_nodes_to_score: Option<i32>,
}

impl From<&crate::config::EffectiveProfile> for ProfileSpec {
    /// The configuration's effective profile, as the framework takes it.
    fn from(p: &crate::config::EffectiveProfile) -> ProfileSpec {
        ProfileSpec {
            scheduler_name: p.scheduler_name.clone(),
            plugins: p
                .plugins
                .iter()
                .map(|(ep, list)| {
                    (
                        *ep,
                        list.iter().map(|x| (x.name.clone(), x.weight)).collect(),
                    )
                })
                .collect(),
            args: p.plugin_args.clone(),
            percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
        }
    }
}

/// Why a profile's framework cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameworkError {
    #[error("profile {profile:?}: plugin {plugin:?} does not exist")]
    UnknownPlugin { profile: String, plugin: String },
    #[error("profile {profile:?}: plugin {plugin:?} cannot run: {reason}")]
    NotBuiltYet {
        profile: String,
        plugin: String,
        reason: String,
    },
    #[error("profile {profile:?}: plugin {plugin:?} does not extend {extension_point}")]
    DoesNotExtend {
        profile: String,
        plugin: String,
        extension_point: String,
    },
    #[error("profile {profile:?}: plugin {plugin:?} already registered as {extension_point}")]
    Duplicate {
        profile: String,
        plugin: String,
        extension_point: String,
    },
    #[error("profile {profile:?}: initializing plugin {plugin:?}: {source}")]
    Factory {
        profile: String,
        plugin: String,
        source: PluginError,
    },
    #[error("profile {profile:?}: {message}")]
    Invalid { profile: String, message: String },
}

#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    plugin: Arc<dyn Plugin>,
    /// Set when the framework records metrics.
    metrics: Option<Arc<PluginMetrics>>,
}

/// A profile's plugin entries at each extension point, indexed by the point: the filter and score
/// loops look their list up once per node, so no hashing.
#[derive(Default)]
struct EntriesByPoint([Vec<Entry>; ExtensionPoint::ALL.len()]);

impl EntriesByPoint {
    fn get(&self, ep: ExtensionPoint) -> &[Entry] {
        &self.0[ep as usize]
    }

    fn set(&mut self, ep: ExtensionPoint, entries: Vec<Entry>) {
        self.0[ep as usize] = entries;
    }
}

/// The plugins of one profile, instantiated once each, per extension point.
pub struct Framework {
    profile_name: String,
    handle: Handle,
    percentage_of_nodes_to_score: Option<i32>,
    instances: BTreeMap<String, Arc<dyn Plugin>>,
    points: EntriesByPoint,
    score_weights: Vec<i64>,
    /// The weights of the PlacementScore plugins, in their order.
    placement_score_weights: Vec<i64>,
    /// The plugins that sign pods for opportunistic batching; `None`: the profile never batches.
    signers: Option<Vec<Arc<dyn Plugin>>>,
    batch: parking_lot::Mutex<OpportunisticBatch>,
    queueing_hints: Arc<QueueingHintMap>,
    instruments: Option<Instruments>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field("profile", &self.profile_name)
            .field("plugins", &self.list_plugins())
            .finish()
    }
}

fn extends(p: &dyn Plugin, ep: ExtensionPoint) -> bool {
    match ep {
        ExtensionPoint::PreEnqueue => p.as_pre_enqueue().is_some(),
        ExtensionPoint::QueueSort => p.as_queue_sort().is_some(),
        ExtensionPoint::PreFilter => p.as_pre_filter().is_some(),
        ExtensionPoint::Filter => p.as_filter().is_some(),
        ExtensionPoint::PostFilter => p.as_post_filter().is_some(),
        ExtensionPoint::PreScore => p.as_pre_score().is_some(),
        ExtensionPoint::Score => p.as_score().is_some(),
        ExtensionPoint::Reserve => p.as_reserve().is_some(),
        ExtensionPoint::Permit => p.as_permit().is_some(),
        ExtensionPoint::PreBind => p.as_pre_bind().is_some(),
        ExtensionPoint::Bind => p.as_bind().is_some(),
        ExtensionPoint::PostBind => p.as_post_bind().is_some(),
        ExtensionPoint::PlacementGenerate => p.as_placement_generate().is_some(),
        ExtensionPoint::PlacementScore => p.as_placement_score().is_some(),
        ExtensionPoint::PodGroupPostFilter => p.as_pod_group_post_filter().is_some(),
    }
}

impl Framework {
    /// Instantiates every enabled plugin once (shared across the extension points it appears at)
    /// and checks the profile as upstream's `NewFramework` does: exactly one QueueSort plugin, at
    /// least one Bind plugin, each plugin implements the points it is enabled at, no duplicates.
    pub fn new(
        spec: &ProfileSpec,
        registry: &Registry,
        mut handle: Handle,
    ) -> Result<Framework, FrameworkError> {
        let profile = spec.scheduler_name.clone();
        handle.profile_name = Arc::from(profile.as_str());
        let mut instances: BTreeMap<String, Arc<dyn Plugin>> = BTreeMap::new();
        let mut points = EntriesByPoint::default();
        let mut score_weights = Vec::new();
        let mut placement_score_weights = Vec::new();
        for ep in ExtensionPoint::ALL {
            let enabled = spec.plugins.get(&ep).map(Vec::as_slice).unwrap_or(&[]);
            let mut seen = BTreeSet::new();
            let mut list = Vec::with_capacity(enabled.len());
            for (name, weight) in enabled {
                if !seen.insert(name.as_str()) {
                    return Err(FrameworkError::Duplicate {
                        profile,
                        plugin: name.clone(),
                        extension_point: ep.field_name().to_string(),
                    });
                }
                let plugin = match instances.get(name) {
                    Some(p) => p.clone(),
                    None => {
                        let p =
                            instantiate(&profile, name, spec.args.get(name), registry, &handle)?;
                        instances.insert(name.clone(), p.clone());
                        p
                    }
                };
                let declared = registry
                    .get(name)
                    .is_some_and(|e| e.extension_points().contains(&ep));
                if !declared || !extends(plugin.as_ref(), ep) {
                    return Err(FrameworkError::DoesNotExtend {
                        profile,
                        plugin: name.clone(),
                        extension_point: ep.field_name().to_string(),
                    });
                }
                if ep.is_weighted() {
                    let w = if *weight == 0 { 1 } else { i64::from(*weight) };
                    if w < 0 {
                        return Err(FrameworkError::Invalid {
                            profile,
                            message: format!("score plugin {name:?} has a negative weight {w}"),
                        });
                    }
                    if ep == ExtensionPoint::Score {
                        score_weights.push(w);
                    } else {
                        placement_score_weights.push(w);
                    }
                }
                let metrics = handle
                    .metrics
                    .as_ref()
                    .map(|m| Arc::new(PluginMetrics::new(m, &profile, name, ep)));
                list.push(Entry {
                    name: Arc::from(name.as_str()),
                    plugin,
                    metrics,
                });
            }
            points.set(ep, list);
        }
        let n_sort = points.get(ExtensionPoint::QueueSort).len();
        if n_sort == 0 {
            return Err(FrameworkError::Invalid {
                profile,
                message: "no queue sort plugin is enabled".into(),
            });
        }
        if n_sort > 1 {
            return Err(FrameworkError::Invalid {
                profile,
                message: "only one queue sort plugin can be enabled".into(),
            });
        }
        if points.get(ExtensionPoint::Bind).is_empty() {
            return Err(FrameworkError::Invalid {
                profile,
                message: "at least one bind plugin is needed".into(),
            });
        }
        // The total score must fit in an i64 (upstream checks weight * MaxNodeScore overflow).
        let total: i128 = score_weights
            .iter()
            .map(|w| i128::from(*w) * i128::from(MAX_NODE_SCORE))
            .sum();
        if total > i128::from(i64::MAX) {
            return Err(FrameworkError::Invalid {
                profile,
                message: "total score of Score plugins could overflow".into(),
            });
        }
        let signers = signers(&profile, &points, &handle);
        let queueing_hints = Arc::new(queueing_hint_map(&instances, &points, &handle));
        let placement_feasible = instances
            .iter()
            .find(|(_, p)| p.as_placement_feasible().is_some())
            .map(|(name, _)| name.as_str());
        let instruments = handle
            .metrics
            .as_ref()
            .map(|m| Instruments::new(m, &profile, placement_feasible));
        Ok(Framework {
            profile_name: profile,
            handle,
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            instances,
            points,
            score_weights,
            placement_score_weights,
            signers,
            batch: parking_lot::Mutex::new(OpportunisticBatch::default()),
            queueing_hints,
            instruments,
        })
    }

    /// The plugins that sign this profile's pods; `None` when it does not batch (upstream's
    /// `enableSignatures`).
    pub fn signers(&self) -> Option<&[Arc<dyn Plugin>]> {
        self.signers.as_deref()
    }

    /// The profile's opportunistic batch (the scheduling cycle locks it; cycles are one at a time).
    pub fn batch(&self) -> &parking_lot::Mutex<OpportunisticBatch> {
        &self.batch
    }

    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    pub fn waiting_pods(&self) -> &Arc<WaitingPods> {
        &self.handle.waiting_pods
    }

    pub fn percentage_of_nodes_to_score(&self) -> Option<i32> {
        self.percentage_of_nodes_to_score
    }

    /// The plugin instance named `name`, if enabled anywhere in this profile.
    pub fn plugin(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.instances.get(name)
    }

    fn at(&self, ep: ExtensionPoint) -> &[Entry] {
        self.points.get(ep)
    }

    /// The enabled plugins per extension point with their weights (score weights as used).
    pub fn list_plugins(&self) -> BTreeMap<ExtensionPoint, Vec<(String, i32)>> {
        let mut out = BTreeMap::new();
        for ep in ExtensionPoint::ALL {
            let list: Vec<(String, i32)> = self
                .at(ep)
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let w = match ep {
                        ExtensionPoint::Score => self.score_weights[i] as i32,
                        ExtensionPoint::PlacementScore => self.placement_score_weights[i] as i32,
                        _ => 0,
                    };
                    (e.name.to_string(), w)
                })
                .collect();
            if !list.is_empty() {
                out.insert(ep, list);
            }
        }
        out
    }
}

/// The plugins that sign `profile`'s pods: those at PreFilter, Filter, PreScore and Score, when
/// every one of them can and there are no extenders (upstream's `computeBatchablePlugins`).
fn signers(
    profile: &str,
    points: &EntriesByPoint,
    handle: &Handle,
) -> Option<Vec<Arc<dyn Plugin>>> {
    if !handle.extenders.is_empty() {
        tracing::info!(
            profile,
            "Disabling signatures for profile because it has extenders configured."
        );
        return None;
    }
    let candidates = [
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
    ]
    .into_iter()
    .flat_map(|ep| points.get(ep).iter().map(|e| &e.plugin));
    match batchable_plugins(candidates) {
        Ok(signers) => Some(signers),
        Err(plugins) => {
            tracing::info!(
                profile,
                ?plugins,
                "Disabling signatures for profile because plugins do not support it."
            );
            None
        }
    }
}

/// A non-success status from plugin `name` at `point`: a rejection as it is, tagged with the
/// plugin; anything else the error "running {point} plugin {name:?}: {message}".
fn rejection_or_error(point: &str, name: &Arc<str>, s: Status) -> Status {
    if s.is_rejected() {
        return s.with_plugin(name.clone());
    }
    Status::error(format!("running {point} plugin {name:?}: {}", s.message()))
}

fn instantiate(
    profile: &str,
    name: &str,
    args: Option<&Value>,
    registry: &Registry,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FrameworkError> {
    let reg = match registry.get(name) {
        None => {
            return Err(FrameworkError::UnknownPlugin {
                profile: profile.into(),
                plugin: name.into(),
            });
        }
        Some(RegistryEntry::NotBuiltYet { reason, .. }) => {
            return Err(FrameworkError::NotBuiltYet {
                profile: profile.into(),
                plugin: name.into(),
                reason: reason.clone(),
            });
        }
        Some(RegistryEntry::Built(reg)) => reg,
    };
    // Args from the configuration are already normalized; without them, decode the defaults.
    let args = match args {
        Some(a) => a.clone(),
        None => registry
            .decode_args(name, None, &handle.emulation)
            .map_err(|errs| FrameworkError::Factory {
                profile: profile.into(),
                plugin: name.into(),
                source: PluginError::Args(
                    errs.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
            })?,
    };
    // The plugin's metrics exist before its factory asks the handle for them.
    handle.plugin_metrics.declare(&reg.metrics);
    (reg.factory)(&args, handle).map_err(|source| FrameworkError::Factory {
        profile: profile.into(),
        plugin: name.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use parking_lot::Mutex;

    use super::*;
    use crate::framework::testing::{Fake, handle, profile, registry_with};
    use ExtensionPoint::*;

    pub(super) fn log() -> Arc<Mutex<Vec<String>>> {
        Arc::new(Mutex::new(Vec::new()))
    }

    /// A factory's typed error reaches the profile's error with its message unchanged: serde's
    /// for args that do not read back, the plugin's own otherwise.
    #[test]
    fn a_factory_error_names_the_profile_and_plugin() {
        #[derive(Debug, Default, serde::Deserialize)]
        struct Args {
            #[allow(dead_code)]
            n: u32,
        }
        use crate::framework::registry::PluginRegistration;
        let mut reg = Registry::in_tree();
        reg.register(
            "Typed",
            PluginRegistration::new(
                &[Filter],
                |a| Ok(a.cloned().unwrap_or_default()),
                |a, _| {
                    crate::framework::args::typed::<Args>(a)?;
                    Err(PluginError::Init("a plugin's own reason".into()))
                },
            ),
        )
        .expect("register");
        let mut spec = profile(&[(Filter, &["Typed"])]);
        let build = |spec: &ProfileSpec| {
            Framework::new(spec, &reg, handle().0).expect_err("the factory fails")
        };
        spec.args
            .insert("Typed".into(), serde_json::json!({"n": "x"}));
        let err = build(&spec);
        assert_eq!(
            err,
            FrameworkError::Factory {
                profile: "test".into(),
                plugin: "Typed".into(),
                source: PluginError::Args("invalid type: string \"x\", expected u32".into()),
            }
        );
        assert_eq!(
            err.to_string(),
            "profile \"test\": initializing plugin \"Typed\": invalid type: string \"x\", expected u32"
        );
        spec.args
            .insert("Typed".into(), serde_json::json!({"n": 1}));
        assert_eq!(
            build(&spec).to_string(),
            "profile \"test\": initializing plugin \"Typed\": a plugin's own reason"
        );
    }

    #[test]
    fn new_checks_the_profile() {
        let l = log();
        let (mut reg, calls) = registry_with(vec![Fake::new("A", &l)]);
        reg.register_not_built(
            "Later",
            &[Filter],
            "Later is not supported yet by ksched; disable it",
            crate::framework::args::no_args,
        )
        .expect("register");
        let (h, _) = handle();
        // One instance shared by every extension point it is enabled at.
        let spec = profile(&[(PreFilter, &["A"]), (Filter, &["A"]), (Score, &["A"])]);
        let fwk = Framework::new(&spec, &reg, h.clone()).expect("framework");
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(fwk.list_plugins()[&Score], vec![("A".to_string(), 1)]);

        let err = |spec: &ProfileSpec| {
            Framework::new(spec, &reg, h.clone())
                .expect_err("must fail")
                .to_string()
        };
        assert_eq!(
            err(&profile(&[(Filter, &["Nope"])])),
            "profile \"test\": plugin \"Nope\" does not exist"
        );
        assert_eq!(
            err(&profile(&[(Filter, &["Later"])])),
            "profile \"test\": plugin \"Later\" cannot run: Later is not supported yet by ksched; disable it"
        );
        assert_eq!(
            err(&profile(&[(Score, &["NodeName"])])),
            "profile \"test\": plugin \"NodeName\" does not extend score"
        );
        assert_eq!(
            err(&profile(&[(Filter, &["A", "A"])])),
            "profile \"test\": plugin \"A\" already registered as filter"
        );
        let mut no_sort = profile(&[]);
        no_sort.plugins.remove(&QueueSort);
        assert_eq!(
            err(&no_sort),
            "profile \"test\": no queue sort plugin is enabled"
        );
        let two_sorts = profile(&[(QueueSort, &["PrioritySort", "A"])]);
        assert_eq!(
            err(&two_sorts),
            "profile \"test\": only one queue sort plugin can be enabled"
        );
        let mut no_bind = profile(&[]);
        no_bind.plugins.remove(&Bind);
        assert_eq!(
            err(&no_bind),
            "profile \"test\": at least one bind plugin is needed"
        );
    }

    pub(super) fn fwk_with(fakes: Vec<Fake>, points: &[(ExtensionPoint, &[&str])]) -> Framework {
        let (reg, _) = registry_with(fakes);
        let (h, _) = handle();
        Framework::new(&profile(points), &reg, h).expect("framework")
    }
}
