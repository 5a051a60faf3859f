//! Runs one profile's plugins at each extension point with upstream's semantics
//! (`pkg/scheduler/framework/runtime/framework.go`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde_json::Value;

use super::batch::{OpportunisticBatch, batchable_plugins};
use super::events::{QueueingHintMap, unroll_wildcard_resource};
use super::extender::EXTENDER_NAME;
use prometheus_client::metrics::counter::Counter;

use super::interface::{
    Code, CycleState, FrameworkHandle, MAX_NODE_SCORE, MAX_PERMIT_TIMEOUT, MIN_NODE_SCORE,
    NodeScore, NodeToStatus, Plugin, PodGroupPlacement, PodGroupPostFilterResult, PostFilterResult,
    PreFilterExtensions, PreFilterResult, Status,
};
use super::metrics::{
    ByStatus, ExtensionPointLabels, FrameworkMetrics, PluginEvaluationLabels, PluginLabels, Point,
    Running, Sampler,
};
use super::registry::{Handle, PluginError, Registry, RegistryEntry};
use super::types::{AssignedPod, NodeInfo, PodInfo, QueuedPodInfo, Snapshot};
use super::waiting_pods::{WaitingPod, WaitingPods};
use crate::config::{ExtensionPoint, PluginCatalog};

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

impl Entry {
    /// Times one call at `point` when the cycle is `sampled` (and metrics are recorded).
    fn timer(&self, point: Point, sampled: bool) -> Timer<'_> {
        Timer(
            sampled
                .then(|| self.metrics.as_ref()?.durations_at(point))
                .flatten()
                .map(|d| (d, Instant::now())),
        )
    }

    /// For the per-node loops: records the call that ends now, begun at `since` (the previous
    /// call's end), and returns now, so each call costs one clock read. `None` (a cycle not
    /// sampled) stays `None`.
    fn lap(&self, point: Point, code: Code, since: Option<Instant>) -> Option<Instant> {
        let since = since?;
        let now = Instant::now();
        if let Some(d) = self.metrics.as_ref().and_then(|m| m.durations_at(point)) {
            d.observe(code, (now - since).as_secs_f64());
        }
        Some(now)
    }

    /// Counts one evaluation (PreFilter, Filter, PreScore and Score plugins, as upstream).
    fn evaluated(&self) {
        if let Some(c) = self.metrics.as_ref().and_then(|m| m.evaluations.as_ref()) {
            c.inc();
        }
    }
}

/// A plugin's metric handles at one extension point (upstream's instrumented plugins), created
/// with the framework so that per-node calls build no label set.
struct PluginMetrics {
    /// `scheduler_plugin_evaluation_total` (PreFilter, Filter, PreScore, Score only).
    evaluations: Option<Counter>,
    /// `scheduler_plugin_execution_duration_seconds` at the point and at its extensions
    /// (PreFilter's AddPod and RemovePod, Score's NormalizeScore, Reserve's Unreserve,
    /// PreBind's PreBindPreFlight).
    durations: Vec<(Point, ByStatus<PluginLabels>)>,
}

impl PluginMetrics {
    fn new(m: &FrameworkMetrics, profile: &str, plugin: &str, ep: ExtensionPoint) -> Self {
        let (points, evaluated): (&[Point], bool) = match ep {
            ExtensionPoint::PreEnqueue => (&[Point::PreEnqueue], false),
            ExtensionPoint::QueueSort => (&[], false),
            ExtensionPoint::PreFilter => (
                &[
                    Point::PreFilter,
                    Point::PreFilterExtensionAddPod,
                    Point::PreFilterExtensionRemovePod,
                ],
                true,
            ),
            ExtensionPoint::Filter => (&[Point::Filter], true),
            ExtensionPoint::PostFilter => (&[Point::PostFilter], false),
            ExtensionPoint::PreScore => (&[Point::PreScore], true),
            ExtensionPoint::Score => (&[Point::Score, Point::ScoreExtensionNormalize], true),
            ExtensionPoint::Reserve => (&[Point::Reserve, Point::Unreserve], false),
            ExtensionPoint::Permit => (&[Point::Permit], false),
            ExtensionPoint::PreBind => (&[Point::PreBind, Point::PreBindPreFlight], false),
            ExtensionPoint::Bind => (&[Point::Bind], false),
            ExtensionPoint::PostBind => (&[Point::PostBind], false),
        };
        let evaluations = evaluated.then(|| {
            m.plugin_evaluation
                .get_or_create_owned(&PluginEvaluationLabels {
                    plugin: plugin.into(),
                    extension_point: points[0].as_str().into(),
                    profile: profile.into(),
                })
        });
        let durations = points
            .iter()
            .map(|p| {
                let labels = PluginLabels {
                    plugin: plugin.into(),
                    extension_point: p.as_str().into(),
                    status: String::new(),
                };
                (*p, ByStatus::new(&m.plugin_execution_duration, labels))
            })
            .collect();
        PluginMetrics {
            evaluations,
            durations,
        }
    }

    fn durations_at(&self, point: Point) -> Option<&ByStatus<PluginLabels>> {
        self.durations
            .iter()
            .find(|(p, _)| *p == point)
            .map(|(_, d)| d)
    }
}

/// A plugin call being timed (nothing in cycles that are not sampled).
struct Timer<'a>(Option<(&'a ByStatus<PluginLabels>, Instant)>);

impl Timer<'_> {
    fn stop(self, code: Code) {
        if let Some((d, since)) = self.0 {
            d.observe_since(code, since);
        }
    }
}

/// The framework's own metric handles: the process's families, and the extension points' series
/// of this profile.
struct Instruments {
    shared: Arc<FrameworkMetrics>,
    /// `scheduler_framework_extension_point_duration_seconds`, by [`Point`].
    points: Vec<ByStatus<ExtensionPointLabels>>,
    /// Which PreEnqueue runs time their plugins (upstream samples them apart from cycles).
    pre_enqueue: Sampler,
}

impl Instruments {
    fn new(shared: &Arc<FrameworkMetrics>, profile: &str) -> Self {
        let points = Point::ALL
            .iter()
            .map(|p| {
                let labels = ExtensionPointLabels {
                    extension_point: p.as_str().into(),
                    status: String::new(),
                    profile: profile.into(),
                };
                ByStatus::new(&shared.extension_point_duration, labels)
            })
            .collect();
        Instruments {
            shared: shared.clone(),
            points,
            pre_enqueue: Sampler::default(),
        }
    }
}

/// Every node's weighted score from every Score plugin, and the totals; one flat table (no
/// allocation per node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeScores {
    /// The scored nodes, in the order given.
    pub nodes: Vec<Arc<str>>,
    /// The Score plugins that ran, in order.
    pub plugins: Vec<Arc<str>>,
    /// `weighted[node * plugins.len() + plugin]`: normalized score times weight.
    weighted: Vec<i64>,
    /// The sum per node.
    pub totals: Vec<i64>,
    /// Tie-breakers: upstream draws a random one for each node an extender scored, 0 for others
    /// (empty: all 0).
    pub randomizers: Vec<u64>,
}

impl NodeScores {
    /// Every node with the same total (no Score plugins: upstream gives each node 1).
    pub fn uniform(nodes: &[Arc<NodeInfo>], total: i64) -> NodeScores {
        NodeScores {
            nodes: nodes.iter().map(|n| n.name_arc().clone()).collect(),
            plugins: Vec::new(),
            weighted: Vec::new(),
            totals: vec![total; nodes.len()],
            randomizers: Vec::new(),
        }
    }

    /// Adds the extenders' scores (by node name); each node that got one gets a random
    /// tie-breaker, as upstream gives it.
    pub fn add_extender_scores(&mut self, scores: &BTreeMap<String, i64>) {
        if scores.is_empty() {
            return;
        }
        self.randomizers.resize(self.nodes.len(), 0);
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(s) = scores.get(&**node) {
                self.totals[i] += s;
                self.randomizers[i] = fastrand::u64(..);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `(plugin, weighted score)` for node `i`.
    pub fn plugin_scores(&self, i: usize) -> impl Iterator<Item = (&str, i64)> {
        let k = self.plugins.len();
        self.plugins
            .iter()
            .enumerate()
            .map(move |(p, name)| (&**name, self.weighted[i * k + p]))
    }
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
    }
}

/// The events of the plugins that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve,
/// Permit): what each declares, or every event for one that declares nothing; and every event
/// for the extenders, which declare nothing (upstream's `fillEnqueueExtensions`).
fn queueing_hint_map(
    instances: &BTreeMap<String, Arc<dyn Plugin>>,
    points: &EntriesByPoint,
    handle: &Handle,
) -> QueueingHintMap {
    const REJECTING: [ExtensionPoint; 5] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
    ];
    let rejecting: BTreeSet<&str> = REJECTING
        .iter()
        .flat_map(|ep| points.get(*ep))
        .map(|e| e.name.as_ref())
        .collect();
    let mut map = QueueingHintMap::default();
    if !handle.extenders.is_empty() {
        map.register(EXTENDER_NAME, unroll_wildcard_resource());
    }
    for (name, plugin) in instances {
        if !rejecting.contains(name.as_str()) {
            continue;
        }
        let events = match plugin.as_enqueue_extensions() {
            Some(ext) => ext.events_to_register(),
            None => unroll_wildcard_resource(),
        };
        map.register(name, events);
    }
    map
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
                if ep == ExtensionPoint::Score {
                    let w = if *weight == 0 { 1 } else { i64::from(*weight) };
                    if w < 0 {
                        return Err(FrameworkError::Invalid {
                            profile,
                            message: format!("score plugin {name:?} has a negative weight {w}"),
                        });
                    }
                    score_weights.push(w);
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
        let instruments = handle
            .metrics
            .as_ref()
            .map(|m| Instruments::new(m, &profile));
        Ok(Framework {
            profile_name: profile,
            handle,
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            instances,
            points,
            score_weights,
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

    /// The number of Score plugins.
    pub fn num_score_plugins(&self) -> usize {
        self.at(ExtensionPoint::Score).len()
    }

    /// The events that may make the pods this profile's plugins rejected schedulable, with the
    /// plugins' hints (upstream's per-profile `QueueingHintMap`).
    pub fn queueing_hints(&self) -> &Arc<QueueingHintMap> {
        &self.queueing_hints
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

    /// The metric handles this framework records into, if any.
    pub fn metrics(&self) -> Option<&Arc<FrameworkMetrics>> {
        self.instruments.as_ref().map(|i| &i.shared)
    }

    /// The start of an extension point's run, when metrics are recorded.
    pub fn point_clock(&self) -> Option<Instant> {
        self.instruments.as_ref().map(|_| Instant::now())
    }

    /// Records an extension point's run that took `took`.
    pub fn observe_point_duration(&self, point: Point, code: Code, took: std::time::Duration) {
        if let Some(i) = &self.instruments {
            i.points[point as usize].observe(code, took.as_secs_f64());
        }
    }

    /// Records an extension point's run started at `since` (from [`Framework::point_clock`]).
    pub fn observe_point(&self, point: Point, code: Code, since: Option<Instant>) {
        if let (Some(i), Some(since)) = (&self.instruments, since) {
            i.points[point as usize].observe_since(code, since);
        }
    }

    /// Runs `body` (the plugins of one extension point) and records its duration with the code
    /// `code` reads from its result.
    fn at_point<R>(
        &self,
        point: Point,
        body: impl FnOnce() -> R,
        code: impl FnOnce(&R) -> Code,
    ) -> R {
        let since = self.point_clock();
        let r = body();
        self.observe_point(point, code(&r), since);
        r
    }

    /// The start of a per-node loop's first plugin call, in sampled cycles of an instrumented
    /// framework (see `Entry::lap`).
    fn plugin_clock(&self, state: &CycleState) -> Option<Instant> {
        (state.record_plugin_metrics() && self.instruments.is_some()).then(Instant::now)
    }

    /// `scheduler_goroutines{operation}` counts `workers` until the guard drops.
    pub fn running(&self, operation: &str, workers: usize) -> Option<Running> {
        self.metrics().map(|m| m.running(operation, workers))
    }

    pub fn has_filter_plugins(&self) -> bool {
        !self.at(ExtensionPoint::Filter).is_empty()
    }

    pub fn has_post_filter_plugins(&self) -> bool {
        !self.at(ExtensionPoint::PostFilter).is_empty()
    }

    /// PlacementFeasible for a pod group's cycle (upstream's `RunPlacementFeasiblePlugins`): only
    /// GangScheduling implements it (upstream takes no other), when the profile has the plugin;
    /// without it every placement is feasible.
    pub fn run_placement_feasible_plugins(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        progress: crate::framework::interface::PlacementProgress,
    ) -> Status {
        let plugin = self
            .instances
            .values()
            .find_map(|p| p.as_placement_feasible());
        let Some(plugin) = plugin else {
            return Status::success();
        };
        let status = plugin.placement_feasible(group, progress);
        let name = plugin.name().to_string();
        match status.code() {
            Code::Success => status,
            Code::Wait | Code::Unschedulable => status.with_plugin(name),
            Code::Error => Status::error(format!(
                "running PlacementFeasible plugin: {}",
                status.message()
            ))
            .with_plugin(name),
            other => Status::error(format!(
                "unexpected status from PlacementFeasible plugin: {other}"
            ))
            .with_plugin(name),
        }
    }

    /// PodGroupPostFilter for a pod group its cycle did not place (upstream's
    /// `RunPodGroupPostFilterPlugins` over its default set): DefaultPreemption's, when the
    /// profile runs it at PostFilter; without one, Unschedulable with no reason, as upstream.
    pub fn run_pod_group_post_filter_plugins(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        members: &[Arc<PodInfo>],
        snapshot: &Snapshot,
        place: &PodGroupPlacement<'_>,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let plugin = self
            .at(ExtensionPoint::PostFilter)
            .iter()
            .find_map(|e| e.plugin.as_pod_group_post_filter());
        let Some(plugin) = plugin else {
            return (None, Status::code_only(Code::Unschedulable));
        };
        let name = plugin.name().to_string();
        let (result, status) = plugin.pod_group_post_filter(self, group, members, snapshot, place);
        match status.code() {
            Code::Success | Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                (result, status.with_plugin(name))
            }
            _ => (
                None,
                Status::error(format!(
                    "error in {name:?} PodGroupPostFilter plugins: {}",
                    status.message()
                ))
                .with_plugin(name),
            ),
        }
    }

    pub fn has_score_plugins(&self) -> bool {
        !self.at(ExtensionPoint::Score).is_empty()
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
                    let w = if ep == ExtensionPoint::Score {
                        self.score_weights[i] as i32
                    } else {
                        0
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

    // ----- scheduling cycle -----

    /// PreEnqueue: the first non-success keeps the pod out of the active queue.
    pub fn run_pre_enqueue_plugins(&self, pod: &PodInfo) -> Status {
        let entries = self.at(ExtensionPoint::PreEnqueue);
        if entries.is_empty() {
            return Status::success();
        }
        let sampled = self
            .instruments
            .as_ref()
            .is_some_and(|i| i.pre_enqueue.sample());
        self.at_point(
            Point::PreEnqueue,
            || {
                for e in entries {
                    let Some(p) = e.plugin.as_pre_enqueue() else {
                        continue;
                    };
                    let timer = e.timer(Point::PreEnqueue, sampled);
                    let s = p.pre_enqueue(pod);
                    timer.stop(s.code());
                    if !s.is_success() {
                        return rejection_or_error("PreEnqueue", &e.name, s)
                            .with_plugin(e.name.clone());
                    }
                }
                Status::success()
            },
            Status::code,
        )
    }

    /// QueueSort: whether `a` goes before `b`.
    pub fn queue_sort_less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match self
            .at(ExtensionPoint::QueueSort)
            .first()
            .and_then(|e| e.plugin.as_queue_sort())
        {
            Some(p) => p.less(a, b),
            None => a.timestamp < b.timestamp,
        }
    }

    pub fn queue_sort_plugin_name(&self) -> Option<&str> {
        self.at(ExtensionPoint::QueueSort).first().map(|e| &*e.name)
    }

    /// PreFilter: results are intersected; `Skip` skips the plugin's Filter for this pod;
    /// UnschedulableAndUnresolvable stops at once, Unschedulable runs the rest first.
    /// Returns the merged result, the status and the plugins that narrowed the node set.
    pub fn run_pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        self.at_point(
            Point::PreFilter,
            || self.pre_filter_each(state, pod, snapshot),
            |r| r.1.code(),
        )
    }

    fn pre_filter_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        let sampled = state.record_plugin_metrics();
        let mut skip: BTreeSet<Arc<str>> = BTreeSet::new();
        let mut result: Option<PreFilterResult> = None;
        let mut plugins_with_nodes: BTreeSet<String> = BTreeSet::new();
        let mut return_status = Status::success();
        for e in self.at(ExtensionPoint::PreFilter) {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            let timer = e.timer(Point::PreFilter, sampled);
            let (r, s) = p.pre_filter(state, pod, snapshot);
            timer.stop(s.code());
            if s.is_skip() {
                skip.insert(e.name.clone());
                continue;
            }
            e.evaluated();
            if !s.is_success() {
                let s = s.with_plugin(e.name.clone());
                match s.code() {
                    Code::UnschedulableAndUnresolvable => {
                        self.set_skip_filter_plugins(state, skip);
                        return (None, s, BTreeSet::new());
                    }
                    Code::Unschedulable => {
                        return_status = s;
                        continue;
                    }
                    _ => {
                        self.set_skip_filter_plugins(state, skip);
                        let msg = format!("running PreFilter plugin {:?}: {}", e.name, s.message());
                        return (
                            None,
                            Status::error(msg).with_plugin(e.name.clone()),
                            BTreeSet::new(),
                        );
                    }
                }
            }
            let r = r.unwrap_or_default();
            if !r.is_all_nodes() {
                plugins_with_nodes.insert(e.name.to_string());
            }
            let merged = match result.take() {
                Some(prev) => prev.merge(r),
                None => r,
            };
            if merged.node_names.as_ref().is_some_and(BTreeSet::is_empty) {
                let list: Vec<&str> = plugins_with_nodes.iter().map(String::as_str).collect();
                let msg = if list.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", list[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        list.join(" ")
                    )
                };
                self.set_skip_filter_plugins(state, skip);
                return (Some(merged), Status::unresolvable(msg), plugins_with_nodes);
            }
            result = Some(merged);
        }
        self.set_skip_filter_plugins(state, skip);
        (result, return_status, plugins_with_nodes)
    }

    /// Records the plugins whose PreFilter skipped, with their bits over the Filter list.
    fn set_skip_filter_plugins(&self, state: &mut CycleState, skip: BTreeSet<Arc<str>>) {
        let filters = self.at(ExtensionPoint::Filter);
        let mask = (filters.len() <= 64).then(|| {
            filters
                .iter()
                .enumerate()
                .filter(|(_, e)| skip.contains(&e.name))
                .fold(0u64, |m, (i, _)| m | 1 << i)
        });
        state.set_skip_filter_plugins_masked(skip, mask);
    }

    /// Runs `call` on the PreFilter extensions of the plugins not skipped, stopping at the first
    /// failure (an Error naming the plugin and the extension `what`).
    fn run_pre_filter_extension(
        &self,
        state: &mut CycleState,
        point: Point,
        call: impl Fn(&dyn PreFilterExtensions, &mut CycleState) -> Status,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        for e in self.at(ExtensionPoint::PreFilter) {
            if state.skip_filter_plugins().contains(&e.name) {
                continue;
            }
            let Some(ext) = e
                .plugin
                .as_pre_filter()
                .and_then(|p| p.pre_filter_extensions())
            else {
                continue;
            };
            let timer = e.timer(point, sampled);
            let s = call(ext, state);
            timer.stop(s.code());
            if !s.is_success() {
                let what = match point {
                    Point::PreFilterExtensionAddPod => "AddPod",
                    _ => "RemovePod",
                };
                return Status::error(format!(
                    "running {what} on PreFilter plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        Status::success()
    }

    /// Filter on one node: plugins in order, stopping at the first non-success (which carries the
    /// plugin's name). Plugins skipped at PreFilter do not run.
    pub fn run_filter_plugins(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut clock = self.plugin_clock(state);
        let skip = state.skip_filter_plugins();
        let mask = state.skip_filter_mask();
        for (i, e) in self.at(ExtensionPoint::Filter).iter().enumerate() {
            let skipped = match mask {
                Some(m) => m & (1 << i) != 0,
                None => !skip.is_empty() && skip.contains(&e.name),
            };
            if skipped {
                continue;
            }
            let Some(p) = e.plugin.as_filter() else {
                continue;
            };
            e.evaluated();
            let s = p.filter(state, pod, node);
            clock = e.lap(Point::Filter, s.code(), clock);
            if !s.is_success() {
                if !s.is_rejected() {
                    let msg = format!("running {:?} filter plugin: {}", e.name, s.message());
                    return Status::error(msg).with_plugin(e.name.clone());
                }
                return s.with_plugin(e.name.clone());
            }
        }
        Status::success()
    }

    /// PostFilter: stops at the first Success, UnschedulableAndUnresolvable or Error; otherwise
    /// returns Unschedulable with every plugin's reasons and the last meaningful result.
    pub fn run_post_filter_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        self.at_point(
            Point::PostFilter,
            || self.post_filter_each(state, pod, snapshot, filtered),
            |r| r.1.code(),
        )
    }

    fn post_filter_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let sampled = state.record_plugin_metrics();
        let mut result = None;
        let mut reasons = Vec::new();
        let mut rejector: Option<Arc<str>> = None;
        for e in self.at(ExtensionPoint::PostFilter) {
            let Some(p) = e.plugin.as_post_filter() else {
                continue;
            };
            let timer = e.timer(Point::PostFilter, sampled);
            let (r, s) = p.post_filter_with_framework(self, state, pod, snapshot, filtered);
            timer.stop(s.code());
            if s.is_success() {
                return (r, s);
            }
            if s.code() == Code::UnschedulableAndUnresolvable {
                return (r, s.with_plugin(e.name.clone()));
            }
            if !s.is_rejected() {
                return (None, Status::error(s.message()).with_plugin(e.name.clone()));
            }
            if let Some(r) = r
                && r.nominating_info.mode != super::interface::NominatingMode::Noop
            {
                result = Some(r);
            }
            reasons.extend(s.reasons().iter().cloned());
            if rejector.is_none() {
                rejector = Some(e.name.clone());
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        if let Some(r) = rejector {
            s.set_plugin(r);
        }
        (result, s)
    }

    /// PreScore: `Skip` skips the plugin's Score for this pod; any other non-success is an error.
    pub fn run_pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        self.at_point(
            Point::PreScore,
            || self.pre_score_each(state, pod, snapshot, nodes),
            Status::code,
        )
    }

    fn pre_score_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut skip = BTreeSet::new();
        for e in self.at(ExtensionPoint::PreScore) {
            let Some(p) = e.plugin.as_pre_score() else {
                continue;
            };
            let timer = e.timer(Point::PreScore, sampled);
            let s = p.pre_score(state, pod, snapshot, nodes);
            timer.stop(s.code());
            if s.is_skip() {
                skip.insert(e.name.clone());
                continue;
            }
            e.evaluated();
            if !s.is_success() {
                state.set_skip_score_plugins(skip);
                return Status::error(format!(
                    "running PreScore plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        state.set_skip_score_plugins(skip);
        Status::success()
    }

    /// Score every node with every (non-skipped) plugin, normalize per plugin, check the range
    /// `0..=100`, weight and sum. Nodes are scored in parallel.
    pub fn run_score_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<NodeScores, Status> {
        self.run_score_plugins_reusing(state, pod, nodes, None)
    }

    /// [`Framework::run_score_plugins`], taking the raw scores `recorded` has for a node instead of
    /// running the plugins on it, and giving it those it computes (opportunistic batching).
    pub fn run_score_plugins_reusing(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        recorded: Option<&mut dyn RawScores>,
    ) -> Result<NodeScores, Status> {
        self.at_point(
            Point::Score,
            || self.score_each(state, pod, nodes, recorded),
            |r| r.as_ref().map_or_else(Status::code, |_| Code::Success),
        )
    }

    fn score_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        recorded: Option<&mut dyn RawScores>,
    ) -> Result<NodeScores, Status> {
        let sampled = state.record_plugin_metrics();
        let skip = state.skip_score_plugins();
        let plugins: Vec<(usize, &Entry)> = self
            .at(ExtensionPoint::Score)
            .iter()
            .enumerate()
            .filter(|(_, e)| !skip.contains(&e.name))
            .collect();
        let k = plugins.len();
        if k == 0 {
            return Ok(NodeScores::uniform(nodes, 0));
        }
        // raw[node * k + plugin]
        let mut raw = vec![0i64; nodes.len() * k];
        let score_row = |node: &NodeInfo, row: &mut [i64]| -> Result<(), Status> {
            let mut clock = self.plugin_clock(state);
            for ((_, e), slot) in plugins.iter().zip(row.iter_mut()) {
                let Some(p) = e.plugin.as_score() else {
                    continue;
                };
                e.evaluated();
                let score = p.score(state, pod, node);
                let code = score.as_ref().map_or_else(Status::code, |_| Code::Success);
                clock = e.lap(Point::Score, code, clock);
                *slot = score.map_err(|s| {
                    Status::error(format!(
                        "running Score plugins: plugin {:?} failed with: {}",
                        e.name,
                        s.message()
                    ))
                })?;
            }
            Ok(())
        };
        let parallel = |n: usize| {
            (n >= PARALLEL_THRESHOLD)
                .then(|| self.running("Score", rayon::current_num_threads().min(n)))
        };
        match recorded {
            None => match parallel(nodes.len()) {
                Some(_running) => nodes
                    .par_iter()
                    .zip(raw.par_chunks_mut(k))
                    .try_for_each(|(n, row)| score_row(n, row))?,
                None => nodes
                    .iter()
                    .zip(raw.chunks_mut(k))
                    .try_for_each(|(n, row)| score_row(n, row))?,
            },
            Some(recorded) => {
                let mut missing = Vec::new();
                for (i, row) in raw.chunks_mut(k).enumerate() {
                    match recorded.get(i, k) {
                        Some(r) => row.copy_from_slice(r),
                        None => missing.push(i),
                    }
                }
                let mut computed = vec![0i64; missing.len() * k];
                match parallel(missing.len()) {
                    Some(_running) => missing
                        .par_iter()
                        .zip(computed.par_chunks_mut(k))
                        .try_for_each(|(&i, row)| score_row(&nodes[i], row))?,
                    None => missing
                        .iter()
                        .zip(computed.chunks_mut(k))
                        .try_for_each(|(&i, row)| score_row(&nodes[i], row))?,
                }
                for (&i, row) in missing.iter().zip(computed.chunks(k)) {
                    raw[i * k..(i + 1) * k].copy_from_slice(row);
                    recorded.put(i, row);
                }
            }
        }
        for (pi, (_, e)) in plugins.iter().enumerate() {
            let Some(p) = e.plugin.as_score() else {
                continue;
            };
            if !p.has_normalize_score() {
                continue;
            }
            let mut list: Vec<NodeScore> = nodes
                .iter()
                .enumerate()
                .map(|(ni, n)| NodeScore {
                    name: n.name_arc().clone(),
                    score: raw[ni * k + pi],
                })
                .collect();
            let timer = e.timer(Point::ScoreExtensionNormalize, sampled);
            let s = p.normalize_score(state, pod, &mut list);
            timer.stop(s.code());
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    e.name,
                    s.message()
                )));
            }
            for (ni, ns) in list.iter().enumerate() {
                raw[ni * k + pi] = ns.score;
            }
        }
        let mut totals = vec![0i64; nodes.len()];
        for (ni, total) in totals.iter_mut().enumerate() {
            for (pi, (wi, e)) in plugins.iter().enumerate() {
                let score = raw[ni * k + pi];
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.name
                    )));
                }
                let weighted = score * self.score_weights[*wi];
                raw[ni * k + pi] = weighted;
                *total += weighted;
            }
        }
        Ok(NodeScores {
            nodes: nodes.iter().map(|n| n.name_arc().clone()).collect(),
            plugins: plugins.iter().map(|(_, e)| e.name.clone()).collect(),
            weighted: raw,
            totals,
            randomizers: Vec::new(),
        })
    }

    /// Reserve in order; on a failure the caller runs [`Framework::run_reserve_plugins_unreserve`].
    pub fn run_reserve_plugins_reserve(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        self.at_point(
            Point::Reserve,
            || {
                for e in self.at(ExtensionPoint::Reserve) {
                    let Some(p) = e.plugin.as_reserve() else {
                        continue;
                    };
                    let timer = e.timer(Point::Reserve, sampled);
                    let s = p.reserve(state, pod, node_name);
                    timer.stop(s.code());
                    if !s.is_success() {
                        return rejection_or_error("Reserve", &e.name, s)
                            .with_plugin(e.name.clone());
                    }
                }
                Status::success()
            },
            Status::code,
        )
    }

    /// Unreserve in reverse order.
    pub fn run_reserve_plugins_unreserve(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) {
        let sampled = state.record_plugin_metrics();
        let since = self.point_clock();
        for e in self.at(ExtensionPoint::Reserve).iter().rev() {
            if let Some(p) = e.plugin.as_reserve() {
                let timer = e.timer(Point::Unreserve, sampled);
                p.unreserve(state, pod, node_name);
                timer.stop(Code::Success);
            }
        }
        self.observe_point(Point::Unreserve, Code::Success, since);
    }

    /// Permit: a rejection stops at once; `Wait` from any plugin registers the pod as waiting (each
    /// plugin's timeout capped at 15 minutes) and returns Wait.
    pub fn run_permit_plugins(
        &self,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node_name: &str,
    ) -> Status {
        self.at_point(
            Point::Permit,
            || self.permit_each(state, pod, node_name),
            Status::code,
        )
    }

    fn permit_each(&self, state: &mut CycleState, pod: &Arc<PodInfo>, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut waits: HashMap<String, Duration> = HashMap::new();
        for e in self.at(ExtensionPoint::Permit) {
            let Some(p) = e.plugin.as_permit() else {
                continue;
            };
            let timer = e.timer(Point::Permit, sampled);
            let (s, timeout) = p.permit(state, pod, node_name);
            timer.stop(s.code());
            if s.is_success() {
                continue;
            }
            if s.is_wait() {
                waits.insert(e.name.to_string(), timeout.min(MAX_PERMIT_TIMEOUT));
                continue;
            }
            return rejection_or_error("Permit", &e.name, s).with_plugin(e.name.clone());
        }
        if !waits.is_empty() {
            self.handle
                .waiting_pods
                .add(Arc::new(WaitingPod::new(pod.clone(), waits)));
            return Status::new(
                Code::Wait,
                format!(
                    "one or more plugins asked to wait and no plugin rejected pod {:?}",
                    pod.name()
                ),
            );
        }
        Status::success()
    }

    /// Whether the pod waits at Permit.
    pub fn will_wait_on_permit(&self, pod: &PodInfo) -> bool {
        self.handle.waiting_pods.get(pod.uid()).is_some()
    }

    /// Waits until a waiting pod is allowed or rejected (or times out); success when it was not
    /// waiting. The pod leaves the waiting map.
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let Some(wp) = self.handle.waiting_pods.get(pod.uid()) else {
            return Status::success();
        };
        let since = Instant::now();
        let s = wp.wait().await;
        if let Some(m) = self.metrics() {
            m.permit_wait_duration
                .get_or_create(&super::metrics::ResultLabels {
                    result: s.code().as_str().into(),
                })
                .observe(since.elapsed().as_secs_f64());
        }
        self.handle.waiting_pods.remove(pod.uid());
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let mut out = Status::error(format!("waiting on permit for pod: {}", s.message()));
        if let Some(p) = s.plugin() {
            out.set_plugin(p);
        }
        out
    }

    /// Upstream's RunPreBindPreFlights: Success when some PreBind plugin will act, Skip when none
    /// will, Error when one failed or answered anything else. Plugins that skip are recorded in
    /// `state` so PreBind passes them over.
    pub fn run_pre_bind_pre_flights(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        self.at_point(
            Point::PreBindPreFlight,
            || self.pre_bind_pre_flight_each(state, pod, node_name),
            Status::code,
        )
    }

    fn pre_bind_pre_flight_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut skip = BTreeSet::new();
        let mut out = Status::skip();
        for e in self.at(ExtensionPoint::PreBind) {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            let timer = e.timer(Point::PreBindPreFlight, sampled);
            let s = p.pre_bind_pre_flight(state, pod, node_name);
            timer.stop(s.code());
            match s.code() {
                Code::Success => out = Status::success(),
                Code::Skip => {
                    skip.insert(e.name.clone());
                }
                Code::Error => {
                    return Status::error(format!(
                        "running PreBindPreFlight {:?}: {}",
                        e.name.as_ref(),
                        s.message()
                    ));
                }
                other => {
                    return Status::error(format!(
                        "PreBindPreFlight {} returned {other:?}, which is unsupported. It is supposed to return Success, Skip, or Error status",
                        e.name
                    ));
                }
            }
        }
        state.set_skip_pre_bind_plugins(skip);
        out
    }

    /// PreBind in order (those whose PreBindPreFlight skipped are passed over); the first failure
    /// stops.
    pub async fn run_pre_bind_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let since = self.point_clock();
        let s = self.pre_bind_each(state, pod, node_name).await;
        self.observe_point(Point::PreBind, s.code(), since);
        s
    }

    async fn pre_bind_each(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        for e in self.at(ExtensionPoint::PreBind) {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            if state.skip_pre_bind_plugins().contains(&e.name) {
                continue;
            }
            let timer = e.timer(Point::PreBind, sampled);
            let s = p.pre_bind(state, pod, node_name).await;
            timer.stop(s.code());
            if !s.is_success() {
                return rejection_or_error("PreBind", &e.name, s);
            }
        }
        Status::success()
    }

    /// Bind: the first plugin that does not return Skip decides.
    pub async fn run_bind_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let since = self.point_clock();
        let s = self.bind_each(state, pod, node_name).await;
        self.observe_point(Point::Bind, s.code(), since);
        s
    }

    async fn bind_each(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut last = Status::skip();
        for e in self.at(ExtensionPoint::Bind) {
            let Some(p) = e.plugin.as_bind() else {
                continue;
            };
            let timer = e.timer(Point::Bind, sampled);
            let s = p.bind(state, pod, node_name).await;
            timer.stop(s.code());
            if s.is_skip() {
                last = s;
                continue;
            }
            if !s.is_success() {
                return rejection_or_error("Bind", &e.name, s);
            }
            return s;
        }
        last
    }

    /// PostBind (informational).
    pub async fn run_post_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node_name: &str) {
        let sampled = state.record_plugin_metrics();
        let since = self.point_clock();
        for e in self.at(ExtensionPoint::PostBind) {
            if let Some(p) = e.plugin.as_post_bind() {
                let timer = e.timer(Point::PostBind, sampled);
                p.post_bind(state, pod, node_name).await;
                timer.stop(Code::Success);
            }
        }
        self.observe_point(Point::PostBind, Code::Success, since);
    }
}

impl FrameworkHandle for Framework {
    /// PreFilter extensions' AddPod, for plugins not skipped.
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        self.run_pre_filter_extension(state, Point::PreFilterExtensionAddPod, |ext, state| {
            ext.add_pod(state, pod_to_schedule, pod_to_add, node)
        })
    }

    /// PreFilter extensions' RemovePod, for plugins not skipped.
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        self.run_pre_filter_extension(state, Point::PreFilterExtensionRemovePod, |ext, state| {
            ext.remove_pod(state, pod_to_schedule, pod_to_remove, node)
        })
    }

    /// Filter with the pods nominated to this node at equal or higher priority counted as running
    /// (first pass), and, if that passes, without them (second pass) — upstream's
    /// `RunFilterPluginsWithNominatedPods`. Without a nominator this is `run_filter_plugins`.
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let nominated = match &self.handle.nominator {
            Some(n) => n.nominated_pods_for_node(node.name()),
            None => Vec::new(),
        };
        let to_add: Vec<&Arc<PodInfo>> = nominated
            .iter()
            .filter(|p| p.priority() >= pod.priority() && p.uid() != pod.uid())
            .collect();
        if to_add.is_empty() {
            return self.run_filter_plugins(state, pod, node);
        }
        let mut state_out = state.clone();
        let mut node_out = node.clone();
        for p in to_add {
            let p = Arc::new(AssignedPod::from_pod_info(p));
            node_out.add_pod(p.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_out, pod, &p, &node_out);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_plugins(&state_out, pod, &node_out);
        if !s.is_success() {
            return s;
        }
        self.run_filter_plugins(state, pod, node)
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

/// Raw (not yet normalized) scores kept for nodes across cycles, by the node's index in the list
/// being scored: opportunistic batching's record of the Score plugins' per-node results.
pub trait RawScores {
    /// The `len` raw scores recorded for node `i`, if they are still valid.
    fn get(&mut self, i: usize, len: usize) -> Option<&[i64]>;
    /// Records node `i`'s raw scores.
    fn put(&mut self, i: usize, row: &[i64]);
}

/// Below this many nodes, Filter/Score run on the calling thread (parallelism costs more).
pub(crate) const PARALLEL_THRESHOLD: usize = 64;

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
    use crate::framework::testing::{
        Fake, NodeBuilder, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use ExtensionPoint::*;

    fn log() -> Arc<Mutex<Vec<String>>> {
        Arc::new(Mutex::new(Vec::new()))
    }

    /// The profile's events are those its rejecting plugins declare; a plugin that declares none
    /// (here an out-of-tree fake) gets every event; score-only plugins register nothing.
    #[test]
    fn queueing_hints_come_from_the_rejecting_plugins() {
        use crate::framework::events::EVENT_NODE_ADD;
        use crate::framework::types::{ActionType, ClusterEvent, EventResource};
        let l = log();
        let (reg, _) = registry_with(vec![Fake::new("Mine", &l)]);
        let spec = profile(&[
            (Filter, &["NodeAffinity", "Mine"]),
            (Score, &["ImageLocality"]),
        ]);
        let fwk = Framework::new(&spec, &reg, handle().0).expect("framework");
        let hints = fwk.queueing_hints();
        assert_eq!(
            hints.plugins().into_iter().collect::<Vec<_>>(),
            ["Mine", "NodeAffinity"]
        );
        let pv_added = ClusterEvent::new(EventResource::PersistentVolume, ActionType::ADD);
        let plugins = |e: &ClusterEvent| {
            let mut p: Vec<String> = hints.hints_for(e).map(|f| f.plugin.to_string()).collect();
            p.sort();
            p
        };
        assert_eq!(plugins(&pv_added), ["Mine"]);
        assert_eq!(plugins(&EVENT_NODE_ADD), ["Mine", "NodeAffinity"]);
        let annotation = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ANNOTATION);
        assert_eq!(plugins(&annotation), ["Mine"]);
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

    fn fwk_with(fakes: Vec<Fake>, points: &[(ExtensionPoint, &[&str])]) -> Framework {
        let (reg, _) = registry_with(fakes);
        let (h, _) = handle();
        Framework::new(&profile(points), &reg, h).expect("framework")
    }

    /// A fake's PreFilter answer: `None` a plain success, else the result's nodes and the code.
    type PreFilterAnswer = Option<(Option<&'static [&'static str]>, Code)>;

    /// PreFilter with one fake per answer, named A, B, ...: the status and the call log.
    fn pre_filter_answers(answers: &[PreFilterAnswer]) -> (Status, Vec<String>) {
        let l = log();
        let names = ["A", "B", "C"];
        let fakes = answers
            .iter()
            .zip(names)
            .map(|(answer, name)| {
                let mut f = Fake::new(name, &l);
                f.pre_filter = answer.map(|(nodes, code)| {
                    (
                        nodes.map(|n| n.iter().map(|n| n.to_string()).collect()),
                        code,
                    )
                });
                f
            })
            .collect();
        let fwk = fwk_with(fakes, &[(PreFilter, &names[..answers.len()])]);
        let (_, s, _) = fwk.run_pre_filter_plugins(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &snapshot_of(&[]),
        );
        (s, l.lock().clone())
    }

    #[test]
    fn pre_filter_results_intersect_and_skip() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.pre_filter = Some((Some(vec!["n1".into(), "n2".into()]), Code::Success));
        let mut b = Fake::new("B", &l);
        b.pre_filter = Some((Some(vec!["n2".into(), "n3".into()]), Code::Success));
        let mut c = Fake::new("C", &l);
        c.pre_filter = Some((None, Code::Skip));
        let fwk = fwk_with(vec![a, b, c], &[(PreFilter, &["A", "B", "C"])]);
        let mut state = CycleState::new();
        let pod = PodBuilder::new("p").info();
        let (r, s, with_nodes) = fwk.run_pre_filter_plugins(&mut state, &pod, &snapshot_of(&[]));
        assert!(s.is_success());
        assert_eq!(r, Some(PreFilterResult::nodes(["n2".to_string()])));
        assert_eq!(with_nodes.into_iter().collect::<Vec<_>>(), ["A", "B"]);
        assert!(state.skip_filter_plugins().contains("C"));
    }

    #[test]
    fn pre_filter_disjoint_results_are_unresolvable() {
        let (s, _) = pre_filter_answers(&[
            Some((Some(&["n1"]), Code::Success)),
            Some((Some(&["n2"]), Code::Success)),
        ]);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "node(s) didn't satisfy plugin(s) [A B] simultaneously"
        );

        let (s, _) = pre_filter_answers(&[Some((Some(&[]), Code::Success))]);
        assert_eq!(s.message(), "node(s) didn't satisfy plugin A");
    }

    #[test]
    fn pre_filter_unschedulable_runs_the_rest_unresolvable_stops() {
        let (s, log) = pre_filter_answers(&[Some((None, Code::Unschedulable)), None]);
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("A")));
        assert_eq!(log, ["A.PreFilter", "B.PreFilter"]);

        let (s, log) =
            pre_filter_answers(&[Some((None, Code::UnschedulableAndUnresolvable)), None]);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(log, ["A.PreFilter"]);
    }

    #[test]
    fn filter_stops_at_first_failure_and_skips() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.filter
            .insert("n1".into(), (Code::Unschedulable, "A says no".into()));
        let mut b = Fake::new("B", &l);
        b.filter
            .insert("n1".into(), (Code::Unschedulable, "B says no".into()));
        b.filter.insert("n2".into(), (Code::Error, "boom".into()));
        let fwk = fwk_with(vec![a, b], &[(Filter, &["A", "B"])]);
        let pod = PodBuilder::new("p").info();
        let n1 = NodeBuilder::new("n1").info(vec![]);
        let n2 = NodeBuilder::new("n2").info(vec![]);
        let mut state = CycleState::new();
        let s = fwk.run_filter_plugins(&state, &pod, &n1);
        assert_eq!(
            (s.message(), s.plugin()),
            ("A says no".to_string(), Some("A"))
        );
        let s = fwk.run_filter_plugins(&state, &pod, &n2);
        assert_eq!(s.code(), Code::Error);
        assert_eq!(s.message(), "running \"B\" filter plugin: boom");
        state.set_skip_filter_plugins([Arc::from("A")].into());
        let s = fwk.run_filter_plugins(&state, &pod, &n1);
        assert_eq!(s.plugin(), Some("B"));
    }

    #[test]
    fn filter_skips_what_pre_filter_skipped_by_position_in_the_filter_list() {
        let l = log();
        // Filter runs A, B, C, in that order; PreFilter lists them otherwise and B skips. Each
        // rejects the node named after it.
        let fakes = ["A", "B", "C"].map(|name| {
            let mut f = Fake::new(name, &l);
            let pre_filter = if name == "B" {
                Code::Skip
            } else {
                Code::Success
            };
            f.pre_filter = Some((None, pre_filter));
            f.filter.insert(
                format!("n{name}"),
                (Code::Unschedulable, format!("{name} says no")),
            );
            f
        });
        let fwk = fwk_with(
            fakes.into(),
            &[(PreFilter, &["C", "B", "A"]), (Filter, &["A", "B", "C"])],
        );
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        let (_, s, _) = fwk.run_pre_filter_plugins(&mut state, &pod, &snapshot_of(&[]));
        assert!(s.is_success());
        assert_eq!(state.skip_filter_mask(), Some(0b010));
        let rejected_by = |state: &CycleState, node: &str| {
            let s = fwk.run_filter_plugins(state, &pod, &NodeBuilder::new(node).info(vec![]));
            s.plugin().map(str::to_string)
        };
        for state in [state.clone(), state] {
            assert_eq!(rejected_by(&state, "nA").as_deref(), Some("A"));
            assert_eq!(rejected_by(&state, "nB"), None);
            assert_eq!(rejected_by(&state, "nC").as_deref(), Some("C"));
        }
    }

    #[test]
    fn score_normalize_weight_and_range() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.score = [("n1".to_string(), 10), ("n2".to_string(), 20)].into();
        a.normalize_factor = Some(2);
        let mut b = Fake::new("B", &l);
        b.score = [("n1".to_string(), 5)].into();
        let (reg, _) = registry_with(vec![a, b]);
        let (h, _) = handle();
        let mut spec = profile(&[]);
        spec.plugins
            .insert(Score, vec![("A".into(), 3), ("B".into(), 0)]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let snap = snapshot_of(&["n1", "n2"]);
        let pod = PodBuilder::new("p").info();
        let scores = fwk
            .run_score_plugins(&CycleState::new(), &pod, snap.nodes())
            .expect("scores");
        // n1: 10*2*3 + 5*1 = 65; n2: 20*2*3 + 0 = 120
        assert_eq!(scores.totals, [65, 120]);
        assert_eq!(&*scores.nodes[1], "n2");
        assert_eq!(
            scores.plugin_scores(0).collect::<Vec<_>>(),
            [("A", 60), ("B", 5)]
        );

        let mut state = CycleState::new();
        state.set_skip_score_plugins([Arc::from("A")].into());
        let scores = fwk
            .run_score_plugins(&state, &pod, snap.nodes())
            .expect("scores");
        assert_eq!(scores.plugin_scores(0).count(), 1);

        let mut c = Fake::new("C", &l);
        c.score = [("n1".to_string(), 101)].into();
        let fwk = fwk_with(vec![c], &[(Score, &["C"])]);
        let e = fwk
            .run_score_plugins(&CycleState::new(), &pod, snap.nodes())
            .expect_err("out of range");
        assert!(
            e.message().contains("returns an invalid score 101"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn reserve_then_unreserve_in_reverse() {
        let l = log();
        let a = Fake::new("A", &l);
        let mut b = Fake::new("B", &l);
        b.reserve = Some(Code::Unschedulable);
        let c = Fake::new("C", &l);
        let fwk = fwk_with(vec![a, b, c], &[(Reserve, &["A", "B", "C"])]);
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        let s = fwk.run_reserve_plugins_reserve(&mut state, &pod, "n1");
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("B")));
        fwk.run_reserve_plugins_unreserve(&mut state, &pod, "n1");
        assert_eq!(
            l.lock().clone(),
            [
                "A.Reserve",
                "B.Reserve",
                "C.Unreserve",
                "B.Unreserve",
                "A.Unreserve"
            ]
        );
    }

    #[tokio::test]
    async fn permit_wait_allow_and_reject() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.permit = Some((Code::Wait, Duration::from_secs(60)));
        let mut b = Fake::new("B", &l);
        b.permit = Some((Code::Wait, Duration::from_secs(3600)));
        let fwk = fwk_with(vec![a, b], &[(Permit, &["A", "B"])]);
        let pod = PodBuilder::new("p").arc_info();
        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!(s.code(), Code::Wait);
        assert!(fwk.will_wait_on_permit(&pod));
        let wp = fwk.waiting_pods().get("p").expect("waiting");
        wp.allow("A");
        wp.allow("B");
        assert!(fwk.wait_on_permit(&pod).await.is_success());
        assert!(!fwk.will_wait_on_permit(&pod));

        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!(s.code(), Code::Wait);
        fwk.waiting_pods()
            .get("p")
            .expect("waiting")
            .reject("A", "gang incomplete");
        let s = fwk.wait_on_permit(&pod).await;
        assert_eq!(
            (s.code(), s.message(), s.plugin()),
            (Code::Unschedulable, "gang incomplete".into(), Some("A"))
        );

        let mut c = Fake::new("C", &l);
        c.permit = Some((Code::Unschedulable, Duration::ZERO));
        let fwk = fwk_with(vec![c], &[(Permit, &["C"])]);
        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("C")));
    }

    #[tokio::test]
    async fn bind_first_non_skip_wins() {
        let l = log();
        let a = Fake::new("A", &l); // Skip
        let mut b = Fake::new("B", &l);
        b.bind = Some(Code::Success);
        let c = Fake::new("C", &l);
        let (reg, _) = registry_with(vec![a, b, c]);
        let (h, api) = handle();
        let mut spec = profile(&[(PreBind, &["A"]), (PostBind, &["C"])]);
        spec.plugins.insert(
            Bind,
            vec![
                ("A".into(), 0),
                ("B".into(), 0),
                ("DefaultBinder".into(), 0),
            ],
        );
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let pod = PodBuilder::new("p").info();
        let state = CycleState::new();
        assert!(
            fwk.run_pre_bind_plugins(&state, &pod, "n1")
                .await
                .is_success()
        );
        assert!(fwk.run_bind_plugins(&state, &pod, "n1").await.is_success());
        fwk.run_post_bind_plugins(&state, &pod, "n1").await;
        assert_eq!(
            l.lock().clone(),
            ["A.PreBind", "A.Bind", "B.Bind", "C.PostBind"]
        );
        assert!(
            api.requests().is_empty(),
            "DefaultBinder must not run after B bound"
        );
    }

    #[tokio::test]
    async fn pre_bind_pre_flights_as_upstream() {
        let run = |codes: &[Code]| {
            let l = log();
            let names = ["A", "B", "C"];
            let fakes: Vec<Fake> = codes
                .iter()
                .zip(names)
                .map(|(c, n)| {
                    let mut f = Fake::new(n, &l);
                    f.pre_bind_pre_flight = Some(*c);
                    f
                })
                .collect();
            let fwk = fwk_with(fakes, &[(PreBind, &names[..codes.len()])]);
            let mut state = CycleState::new();
            let s = fwk.run_pre_bind_pre_flights(&mut state, &PodBuilder::new("p").info(), "n1");
            (fwk, state, s, l)
        };
        // Any Success: PreBind will act; the plugins that skipped are passed over at PreBind.
        let (fwk, state, s, l) = run(&[Code::Skip, Code::Success, Code::Skip]);
        assert!(s.is_success());
        let pod = PodBuilder::new("p").info();
        assert!(
            fwk.run_pre_bind_plugins(&state, &pod, "n1")
                .await
                .is_success()
        );
        assert_eq!(
            l.lock().clone(),
            [
                "A.PreBindPreFlight",
                "B.PreBindPreFlight",
                "C.PreBindPreFlight",
                "B.PreBind"
            ]
        );
        // All Skip: nothing will happen at PreBind.
        assert!(run(&[Code::Skip, Code::Skip]).2.is_skip());
        // Error stops; any other code is an error too.
        let (_, _, s, _) = run(&[Code::Error, Code::Success]);
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message().starts_with("running PreBindPreFlight \"A\""),
            "{}",
            s.message()
        );
        let (_, _, s, _) = run(&[Code::Unschedulable]);
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message()
                .contains("supposed to return Success, Skip, or Error")
        );
    }

    struct Nominated(Vec<Arc<PodInfo>>);

    impl crate::framework::registry::PodNominator for Nominated {
        fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
            self.0
                .iter()
                .filter(|p| p.nominated_node_name() == node_name)
                .cloned()
                .collect()
        }
    }

    #[test]
    fn nominated_pods_of_equal_or_higher_priority_count_as_running() {
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let preemptor = PodBuilder::new("preemptor")
            .priority(100)
            .nominated_node("n1")
            .container(&[("cpu", "3")])
            .arc_info();
        let h = h.with_nominator(Arc::new(Nominated(vec![preemptor])));
        let fwk = Framework::new(&profile(&[(Filter, &["NodeResourcesFit"])]), &reg, h)
            .expect("framework");
        let node = NodeBuilder::new("n1")
            .allocatable(&[("cpu", "4"), ("memory", "1Gi"), ("pods", "10")])
            .info(vec![]);
        let state = CycleState::new();
        let low = PodBuilder::new("low")
            .priority(10)
            .container(&[("cpu", "2")])
            .info();
        let s = fwk.run_filter_plugins_with_nominated_pods(&state, &low, &node);
        assert_eq!(s.reasons(), ["Insufficient cpu"]);
        let high = PodBuilder::new("high")
            .priority(1000)
            .container(&[("cpu", "2")])
            .info();
        assert!(
            fwk.run_filter_plugins_with_nominated_pods(&state, &high, &node)
                .is_success()
        );
    }

    #[test]
    fn pre_enqueue_and_queue_sort() {
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let fwk = Framework::new(&profile(&[(PreEnqueue, &["SchedulingGates"])]), &reg, h)
            .expect("framework");
        let gated = PodBuilder::new("p").scheduling_gate("g").info();
        let s = fwk.run_pre_enqueue_plugins(&gated);
        assert_eq!(s.plugin(), Some("SchedulingGates"));
        assert!(
            fwk.run_pre_enqueue_plugins(&PodBuilder::new("q").info())
                .is_success()
        );
        let now = std::time::Instant::now();
        let hi = QueuedPodInfo::new(PodBuilder::new("a").priority(10).arc_info(), now);
        let lo = QueuedPodInfo::new(PodBuilder::new("b").priority(1).arc_info(), now);
        assert!(fwk.queue_sort_less(&hi, &lo));
        assert_eq!(fwk.queue_sort_plugin_name(), Some("PrioritySort"));
    }

    /// A framework over fakes A (rejects n1 at Filter) and B, recording into `metrics`.
    fn instrumented(metrics: &Arc<FrameworkMetrics>) -> Framework {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.filter
            .insert("n1".into(), (Code::Unschedulable, "A says no".into()));
        a.pre_score = Some(Code::Skip);
        let mut b = Fake::new("B", &l);
        b.normalize_factor = Some(1);
        let (reg, _) = registry_with(vec![a, b]);
        let (mut h, _) = handle();
        h.metrics = Some(metrics.clone());
        let spec = profile(&[
            (PreFilter, &["A"]),
            (Filter, &["A", "B"]),
            (PreScore, &["A", "B"]),
            (Score, &["B"]),
        ]);
        Framework::new(&spec, &reg, h).expect("framework")
    }

    /// The value of the sample `line` (name and labels) of `text`.
    fn sample(text: &str, line: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
    }

    fn exposition(m: &FrameworkMetrics) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("ep", "", m.extension_point_duration.clone());
        registry.register("plugin", "", m.plugin_execution_duration.clone());
        registry.register("eval", "", m.plugin_evaluation.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn extension_points_and_evaluations_are_recorded_every_cycle_plugins_in_sampled_ones() {
        let metrics = Arc::new(FrameworkMetrics::default());
        let fwk = instrumented(&metrics);
        let pod = PodBuilder::new("p").info();
        let snap = snapshot_of(&["n1", "n2"]);
        let cycle = |sampled: bool| {
            let mut state = CycleState::new();
            state.set_record_plugin_metrics(sampled);
            let (_, s, _) = fwk.run_pre_filter_plugins(&mut state, &pod, &snap);
            assert!(s.is_success());
            for node in snap.nodes() {
                fwk.run_filter_plugins(&state, &pod, node);
            }
            let nodes = &snap.nodes()[1..];
            assert!(
                fwk.run_pre_score_plugins(&mut state, &pod, &snap, nodes)
                    .is_success()
            );
            fwk.run_score_plugins(&state, &pod, nodes).expect("scores");
        };
        cycle(false);
        let text = exposition(&metrics);
        assert_eq!(
            sample(
                &text,
                r#"ep_count{extension_point="PreFilter",status="Success",profile="test"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                r#"ep_count{extension_point="Score",status="Success",profile="test"}"#
            ),
            Some(1.0)
        );
        // Filter's extension point is timed over all nodes by the algorithm, not per node here.
        assert!(
            !text.contains(r#"extension_point="Filter",status"#),
            "{text}"
        );
        // A ran on both nodes, B only where A let the pod through; A skipped PreScore.
        for (line, n) in [
            (
                r#"eval_total{plugin="A",extension_point="PreFilter",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="Filter",profile="test"}"#,
                2.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="Filter",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="PreScore",profile="test"}"#,
                0.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="PreScore",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="Score",profile="test"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, line), Some(n), "{line}:\n{text}");
        }
        // Not sampled: no plugin was timed.
        assert!(!text.contains("plugin_count"), "{text}");

        cycle(true);
        let text = exposition(&metrics);
        for (line, n) in [
            (
                r#"plugin_count{plugin="A",extension_point="Filter",status="Unschedulable"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="A",extension_point="Filter",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="Filter",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="A",extension_point="PreScore",status="Skip"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="Score",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="ScoreExtensionNormalize",status="Success"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="Filter",profile="test"}"#,
                4.0,
            ),
        ] {
            assert_eq!(sample(&text, line), Some(n), "{line}:\n{text}");
        }
    }

    #[tokio::test]
    async fn binding_points_and_permit_waits_are_recorded() {
        let metrics = Arc::new(FrameworkMetrics::default());
        let l = log();
        let mut a = Fake::new("A", &l);
        a.permit = Some((Code::Wait, Duration::from_secs(10)));
        a.reserve = Some(Code::Success);
        a.bind = Some(Code::Success);
        let (reg, _) = registry_with(vec![a]);
        let (mut h, _) = handle();
        h.metrics = Some(metrics.clone());
        let spec = profile(&[(Reserve, &["A"]), (Permit, &["A"]), (Bind, &["A"])]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let pod = PodBuilder::new("p").arc_info();
        let mut state = CycleState::new();
        state.set_record_plugin_metrics(true);
        assert!(
            fwk.run_reserve_plugins_reserve(&mut state, &pod, "n1")
                .is_success()
        );
        assert!(fwk.run_permit_plugins(&mut state, &pod, "n1").is_wait());
        fwk.waiting_pods()
            .get(pod.uid())
            .expect("waiting")
            .allow("A");
        assert!(fwk.wait_on_permit(&pod).await.is_success());
        assert!(fwk.run_bind_plugins(&state, &pod, "n1").await.is_success());
        fwk.run_reserve_plugins_unreserve(&mut state, &pod, "n1");
        let mut text = exposition(&metrics);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("wait", "", metrics.permit_wait_duration.clone());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"ep_count{extension_point="Reserve",status="Success",profile="test"}"#,
            r#"ep_count{extension_point="Permit",status="Wait",profile="test"}"#,
            r#"ep_count{extension_point="Bind",status="Success",profile="test"}"#,
            r#"ep_count{extension_point="Unreserve",status="Success",profile="test"}"#,
            r#"plugin_count{plugin="A",extension_point="Permit",status="Wait"}"#,
            r#"plugin_count{plugin="A",extension_point="Unreserve",status="Success"}"#,
            r#"wait_count{result="Success"}"#,
        ] {
            assert_eq!(sample(&text, line), Some(1.0), "{line}:\n{text}");
        }
    }
}
