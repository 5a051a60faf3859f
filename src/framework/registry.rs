//! Plugin name -> factory, and the [`Handle`] plugins receive.
//!
//! Every plugin registers its name, the extension points it implements, a strict args decoder and
//! a factory. The registry knows no plugin itself: the in-tree list lives with the plugins
//! (`plugins::register_in_tree`, which also provides `Registry::in_tree`). A user's own binary adds
//! out-of-tree plugins with [`Registry::register`] — the Rust form of `app.WithPlugin`; a plugin
//! known but not runnable yet is registered with [`Registry::register_not_built`], so
//! configurations naming it validate.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use k8s_openapi::api::rbac::v1::PolicyRule;
use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
pub use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;

use super::api_calls::ApiClient;
use super::args::{PluginArgs, decode_at};
use super::background::{ApiDispatcher, BackgroundTasks};
use super::interface::Plugin;
use super::listers::{IN_TREE, Informer, Listers};
use super::metrics::FrameworkMetrics;
use super::types::{PodInfo, Snapshot};
use super::waiting_pods::WaitingPods;
use crate::config::{ExtensionPoint, FieldError, PluginAvailability, PluginCatalog};
use crate::emulation::Emulation;

/// Pods nominated to run on a node (preemptors); the scheduler's queue implements it.
pub trait PodNominator: Send + Sync {
    fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>>;

    /// Whether the nominated pod `key` is another scheduler's (its nomination is respected, never
    /// changed).
    fn is_foreign(&self, _key: &str) -> bool {
        false
    }

    /// While no pod is nominated anywhere: a number that changes with every nomination made or
    /// dropped. `None` while some pod is nominated, or when the nominator cannot tell (then
    /// opportunistic batching stays off: nominated pods count on their node in Filter).
    fn batching_generation(&self) -> Option<u64> {
        None
    }
}

/// The latest snapshot, shared between the scheduler (which publishes it each cycle) and plugins
/// that need it outside the calls that receive it directly.
#[derive(Debug, Default)]
pub struct SharedSnapshot {
    inner: RwLock<Arc<Snapshot>>,
}

impl SharedSnapshot {
    pub fn new(snapshot: Snapshot) -> SharedSnapshot {
        SharedSnapshot {
            inner: RwLock::new(Arc::new(snapshot)),
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.inner.read().clone()
    }

    pub fn store(&self, snapshot: Arc<Snapshot>) {
        *self.inner.write() = snapshot;
    }

    /// Updates the snapshot in place when nobody else holds it (no copy), else on a copy, and
    /// publishes the result.
    pub fn update<R>(&self, f: impl FnOnce(&mut Snapshot) -> R) -> R {
        let mut guard = self.inner.write();
        f(Arc::make_mut(&mut guard))
    }
}

/// What a plugin gets from the framework: the API, the waiting pods, the snapshot, nominated pods,
/// and where it hands over work that must not run in the scheduling cycle.
#[derive(Clone)]
pub struct Handle {
    /// For PreBind, Bind and PostBind (its calls are async: a scheduling-cycle extension point
    /// cannot await them).
    pub api: Arc<dyn ApiClient>,
    pub waiting_pods: Arc<WaitingPods>,
    pub snapshot: Arc<SharedSnapshot>,
    pub nominator: Option<Arc<dyn PodNominator>>,
    /// Caches of the extra object kinds plugins declared (see [`Informer`]).
    pub listers: Arc<Listers>,
    /// The configuration's extenders (DefaultPreemption asks them about its candidates).
    pub extenders: Vec<Arc<dyn crate::framework::extender::Extender>>,
    /// Where the framework and its plugins record metrics; `None` records nothing.
    pub metrics: Option<Arc<FrameworkMetrics>>,
    /// The metrics the enabled plugins declared; a plugin updates its profile's series through
    /// [`Handle::counter`] and [`Handle::gauge`], the scheduler exports them.
    pub plugin_metrics: Arc<PluginMetrics>,
    /// The profile whose plugins hold this handle (upstream's `ProfileName()`; set by
    /// `Framework::new`).
    pub profile_name: Arc<str>,
    /// The background tasks plugins registered; the scheduler starts them.
    pub tasks: Arc<BackgroundTasks>,
    /// Runs the API calls the scheduling cycle hands over (a background task itself).
    pub dispatcher: Arc<ApiDispatcher>,
    /// The Kubernetes minor the scheduler emulates and its feature gates: what a plugin's
    /// behaviour per minor is read from (its table, `emulation::at`).
    pub emulation: Arc<Emulation>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("waiting_pods", &self.waiting_pods.len())
            .finish()
    }
}

impl Handle {
    pub fn new(api: Arc<dyn ApiClient>) -> Handle {
        let tasks = Arc::new(BackgroundTasks::default());
        let dispatcher = Arc::new(ApiDispatcher::default());
        tasks.register(dispatcher.clone());
        Handle {
            api,
            waiting_pods: Arc::new(WaitingPods::new()),
            snapshot: Arc::new(SharedSnapshot::default()),
            nominator: None,
            listers: Arc::new(Listers::default()),
            extenders: Vec::new(),
            metrics: None,
            plugin_metrics: Arc::new(PluginMetrics::default()),
            profile_name: Arc::from(""),
            tasks,
            dispatcher,
            emulation: Arc::new(Emulation::default()),
        }
    }

    /// The handle of a scheduler emulating `emulation`.
    pub fn with_emulation(mut self, emulation: Arc<Emulation>) -> Handle {
        self.emulation = emulation;
        self
    }

    pub fn with_nominator(mut self, nominator: Arc<dyn PodNominator>) -> Handle {
        self.nominator = Some(nominator);
        self
    }

    /// This profile's series of the counter `name` its plugin declared (`with_metrics`).
    pub fn counter(&self, name: &str) -> Counter {
        self.plugin_metrics.counter(name, &self.profile_name)
    }

    /// This profile's series of the gauge `name` its plugin declared (`with_metrics`).
    pub fn gauge(&self, name: &str) -> FloatGauge {
        self.plugin_metrics.gauge(name, &self.profile_name)
    }
}

/// Decodes, defaults and validates a plugin's args (see [`super::args`]) at the emulated minor.
pub type ArgsDecoder =
    Arc<dyn Fn(Option<&Value>, &Emulation) -> Result<Value, Vec<FieldError>> + Send + Sync>;

/// An args decoder that does not depend on the emulated minor, as an [`ArgsDecoder`].
fn unversioned(
    decode_args: impl Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync + 'static,
) -> ArgsDecoder {
    Arc::new(move |args, _| decode_args(args))
}

/// Builds a plugin instance from its normalized args.
pub type PluginFactory =
    Arc<dyn Fn(&Value, &Handle) -> Result<Arc<dyn Plugin>, PluginError> + Send + Sync>;

/// Why a plugin's factory could not build the plugin (upstream's factories return an `error`).
/// The message is the plugin's own; the framework prefixes the profile and the plugin's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// The args do not decode as the plugin's args type.
    #[error("{0}")]
    Args(String),
    /// The args are valid but the plugin cannot be built from them (a selector that does not
    /// parse, an address it cannot reach, ...).
    #[error("{0}")]
    Init(String),
}

impl From<serde_json::Error> for PluginError {
    /// What [`super::args::typed`] fails with: the normalized args do not read back.
    fn from(e: serde_json::Error) -> PluginError {
        PluginError::Args(e.to_string())
    }
}

impl From<String> for PluginError {
    fn from(message: String) -> PluginError {
        PluginError::Init(message)
    }
}

impl From<&str> for PluginError {
    fn from(message: &str) -> PluginError {
        PluginError::Init(message.to_string())
    }
}

/// A metric family a plugin declares: the scheduler exports it (on `/metrics`, beside its own)
/// when the plugin is enabled, with a `profile` label, and the plugin updates its profile's
/// series through [`Handle::counter`] and [`Handle::gauge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDeclaration {
    /// The family's name (a counter's without `_total`, which the exposition adds).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    /// A floating-point gauge (ages, ratios; `+Inf` is a value).
    Gauge,
}

/// The label every plugin metric carries: the profile whose plugin updates the series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

/// A plugin's gauge: a float.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// One declared family's series, by profile.
#[derive(Debug, Clone)]
pub enum PluginMetric {
    Counter(Family<ProfileLabels, Counter>),
    Gauge(Family<ProfileLabels, FloatGauge>),
}

/// The metrics the enabled plugins declared, by name.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    families: RwLock<BTreeMap<&'static str, (MetricDeclaration, PluginMetric)>>,
}

impl PluginMetrics {
    /// Creates the declared families that do not exist yet (two profiles share one).
    pub fn declare(&self, declarations: &[MetricDeclaration]) {
        let mut families = self.families.write();
        for d in declarations {
            families.entry(d.name).or_insert_with(|| {
                let metric = match d.kind {
                    MetricKind::Counter => PluginMetric::Counter(Family::default()),
                    MetricKind::Gauge => PluginMetric::Gauge(Family::default()),
                };
                (*d, metric)
            });
        }
    }

    /// `profile`'s series of the declared counter `name`; one nobody exports when it was not
    /// declared as a counter (the plugin's registration forgot it), so the plugin still runs.
    pub fn counter(&self, name: &str, profile: &str) -> Counter {
        match self.families.read().get(name) {
            Some((_, PluginMetric::Counter(family))) => {
                family.get_or_create(&profile_labels(profile)).clone()
            }
            _ => {
                tracing::warn!(
                    metric = name,
                    "counter not declared by its plugin; not exported"
                );
                Counter::default()
            }
        }
    }

    /// `profile`'s series of the declared gauge `name` (see [`PluginMetrics::counter`]).
    pub fn gauge(&self, name: &str, profile: &str) -> FloatGauge {
        match self.families.read().get(name) {
            Some((_, PluginMetric::Gauge(family))) => {
                family.get_or_create(&profile_labels(profile)).clone()
            }
            _ => {
                tracing::warn!(
                    metric = name,
                    "gauge not declared by its plugin; not exported"
                );
                FloatGauge::default()
            }
        }
    }

    /// Every declared family with its series, by name.
    pub fn families(&self) -> Vec<(MetricDeclaration, PluginMetric)> {
        self.families.read().values().cloned().collect()
    }
}

fn profile_labels(profile: &str) -> ProfileLabels {
    ProfileLabels {
        profile: profile.to_string(),
    }
}

/// Whether `rule` grants everything `needed` asks (its groups, resources and verbs).
pub fn grants(rule: &PolicyRule, needed: &PolicyRule) -> bool {
    let covers = |have: &Option<Vec<String>>, want: &Option<Vec<String>>| {
        let have = have.as_deref().unwrap_or_default();
        want.as_deref()
            .unwrap_or_default()
            .iter()
            .all(|w| have.iter().any(|h| h == w || h == "*"))
    };
    rule.resource_names.is_none()
        && covers(&rule.api_groups, &needed.api_groups)
        && covers(&rule.resources, &needed.resources)
        && needed
            .verbs
            .iter()
            .all(|v| rule.verbs.iter().any(|h| h == v || h == "*"))
}

/// An RBAC rule (`apiGroups`, `resources`, `verbs`), for the rules a registration declares.
pub fn policy_rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

/// What a built plugin registers: beside its logic, everything the rest of the system needs to
/// know about it. (The cluster events that requeue the pods it rejected are the plugin's own
/// [`EnqueueExtensions`](super::interface::EnqueueExtensions), since their hints read its args.)
#[derive(Clone)]
pub struct PluginRegistration {
    pub extension_points: Vec<ExtensionPoint>,
    pub decode_args: ArgsDecoder,
    pub factory: PluginFactory,
    /// Object kinds the plugin reads through `Handle::listers` (watched only when it is enabled).
    pub informers: Vec<Informer>,
    /// The RBAC rules the plugin needs beyond every scheduler's (pods, bindings, events, nodes):
    /// the operator grants them in the profile's ClusterRole when the plugin is enabled.
    pub rbac_rules: Vec<PolicyRule>,
    /// The metric families the plugin updates.
    pub metrics: Vec<MetricDeclaration>,
}

impl PluginRegistration {
    pub fn new(
        extension_points: &[ExtensionPoint],
        decode_args: impl Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync + 'static,
        factory: impl Fn(&Value, &Handle) -> Result<Arc<dyn Plugin>, PluginError>
        + Send
        + Sync
        + 'static,
    ) -> PluginRegistration {
        PluginRegistration {
            extension_points: extension_points.to_vec(),
            decode_args: unversioned(decode_args),
            factory: Arc::new(factory),
            informers: Vec::new(),
            rbac_rules: Vec::new(),
            metrics: Vec::new(),
        }
    }

    /// Decodes the plugin's args with the emulated minor's defaults and validation
    /// ([`PluginArgs::set_defaults_at`], [`PluginArgs::validate_at`]), in place of the decoder
    /// given to [`new`](Self::new).
    pub fn with_emulated_args<T: PluginArgs + 'static>(mut self) -> PluginRegistration {
        self.decode_args = Arc::new(decode_at::<T>);
        self
    }

    /// Declares the object kinds the plugin reads.
    pub fn with_informers(mut self, informers: &[Informer]) -> PluginRegistration {
        self.informers = informers.to_vec();
        self
    }

    /// Declares the RBAC rules the plugin needs (see [`policy_rule`]).
    pub fn with_rbac_rules(mut self, rules: Vec<PolicyRule>) -> PluginRegistration {
        self.rbac_rules = rules;
        self
    }

    /// Declares the metric families the plugin updates.
    pub fn with_metrics(mut self, metrics: &[MetricDeclaration]) -> PluginRegistration {
        self.metrics = metrics.to_vec();
        self
    }
}

/// A registry entry.
#[derive(Clone)]
pub enum RegistryEntry {
    Built(PluginRegistration),
    /// Known (args decode, extension points known) but not runnable yet.
    NotBuiltYet {
        extension_points: Vec<ExtensionPoint>,
        reason: String,
        decode_args: ArgsDecoder,
    },
}

impl RegistryEntry {
    pub fn extension_points(&self) -> &[ExtensionPoint] {
        match self {
            RegistryEntry::Built(r) => &r.extension_points,
            RegistryEntry::NotBuiltYet {
                extension_points, ..
            } => extension_points,
        }
    }

    fn decoder(&self) -> &ArgsDecoder {
        match self {
            RegistryEntry::Built(r) => &r.decode_args,
            RegistryEntry::NotBuiltYet { decode_args, .. } => decode_args,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a plugin named {0:?} already exists in the registry")]
    Duplicate(String),
}

/// Plugin name -> entry.
#[derive(Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, RegistryEntry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a built plugin (in-tree or out-of-tree); names are unique.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        registration: PluginRegistration,
    ) -> Result<(), RegistryError> {
        self.insert(name.into(), RegistryEntry::Built(registration))
    }

    /// Adds a plugin that is known but not built yet.
    pub fn register_not_built(
        &mut self,
        name: impl Into<String>,
        extension_points: &[ExtensionPoint],
        reason: impl Into<String>,
        decode_args: impl Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync + 'static,
    ) -> Result<(), RegistryError> {
        self.insert(
            name.into(),
            RegistryEntry::NotBuiltYet {
                extension_points: extension_points.to_vec(),
                reason: reason.into(),
                decode_args: unversioned(decode_args),
            },
        )
    }

    fn insert(&mut self, name: String, entry: RegistryEntry) -> Result<(), RegistryError> {
        if self.entries.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.entries.insert(name, entry);
        Ok(())
    }

    /// Swaps the registration of the built plugin `name` (same name, args and extension points,
    /// another factory: `ksched simulate` runs NetworkTraffic without Prometheus). False when no
    /// built plugin has that name.
    pub fn replace(&mut self, name: &str, registration: PluginRegistration) -> bool {
        match self.entries.get_mut(name) {
            Some(entry @ RegistryEntry::Built(_)) => {
                *entry = RegistryEntry::Built(registration);
                true
            }
            _ => false,
        }
    }

    /// Replaces or removes nothing: merges `other`'s entries, failing on a duplicate name.
    pub fn merge(&mut self, other: Registry) -> Result<(), RegistryError> {
        for (name, entry) in other.entries {
            self.insert(name, entry)?;
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&RegistryEntry> {
        self.entries.get(name)
    }

    /// The object kinds the named plugins read (unknown and not-built plugins need none).
    pub fn informers_for<'a>(
        &self,
        plugins: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::BTreeSet<Informer> {
        plugins
            .into_iter()
            .filter_map(|name| match self.entries.get(name) {
                Some(RegistryEntry::Built(r)) => Some(r.informers.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Every kind a plugin of this registry may read: the in-tree kinds (in a saved snapshot's
    /// order), then those only out-of-tree plugins declare.
    pub fn watched_kinds(&self) -> Vec<Informer> {
        let mut kinds: Vec<Informer> = IN_TREE.to_vec();
        for entry in self.entries.values() {
            if let RegistryEntry::Built(r) = entry {
                for kind in &r.informers {
                    if !kinds.contains(kind) {
                        kinds.push(*kind);
                    }
                }
            }
        }
        kinds
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}

impl PluginCatalog for Registry {
    fn plugin_names(&self) -> Vec<String> {
        // Every name a configuration may use (BTreeMap keys: sorted).
        self.entries.keys().cloned().collect()
    }

    fn availability(&self, name: &str) -> PluginAvailability {
        match self.entries.get(name) {
            Some(RegistryEntry::Built(r)) => PluginAvailability::Built(r.extension_points.clone()),
            Some(RegistryEntry::NotBuiltYet {
                extension_points,
                reason,
                ..
            }) => PluginAvailability::NotBuiltYet {
                extension_points: extension_points.clone(),
                reason: reason.clone(),
            },
            None => PluginAvailability::Unknown,
        }
    }

    fn decode_args(
        &self,
        name: &str,
        args: Option<&Value>,
        emulation: &Emulation,
    ) -> Result<Value, Vec<FieldError>> {
        match self.entries.get(name) {
            Some(e) => (e.decoder())(args, emulation),
            None => Err(vec![FieldError::new(
                "",
                format!("Invalid value: {name:?}: unknown plugin"),
            )]),
        }
    }

    /// The rules the plugin declared, and `list`/`watch` on each kind it reads that they do
    /// not grant already.
    fn policy_rules(&self, name: &str) -> Vec<PolicyRule> {
        let Some(RegistryEntry::Built(r)) = self.entries.get(name) else {
            return Vec::new();
        };
        let mut rules = r.rbac_rules.clone();
        for kind in &r.informers {
            let needed = kind.rbac_rule();
            if !rules.iter().any(|rule| grants(rule, &needed)) {
                rules.push(needed);
            }
        }
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_out_of_tree_and_duplicates() {
        struct Mine;
        impl Plugin for Mine {
            fn name(&self) -> &str {
                "Mine"
            }
        }
        let mut r = Registry::in_tree();
        let reg = PluginRegistration::new(
            &[ExtensionPoint::Filter],
            crate::framework::args::no_args,
            |_, _| Ok(Arc::new(Mine) as Arc<dyn Plugin>),
        );
        assert!(r.register("Mine", reg.clone()).is_ok());
        assert_eq!(
            r.register("Mine", reg),
            Err(RegistryError::Duplicate("Mine".into()))
        );
        assert_eq!(
            r.availability("Mine"),
            PluginAvailability::Built(vec![ExtensionPoint::Filter])
        );
    }
}
