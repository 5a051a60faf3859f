//! Prometheus metrics under upstream kube-scheduler's names, labels and buckets, so existing
//! dashboards and alerts work; `ksched_*` for our own. Besides the scheduler's families: the
//! process's (`process_*`, as client_golang's process collector), the API clients' (client-go's
//! `rest_client_*`, recorded by `infra::client`; both in `infra::metrics`) and leader election's.
//!
//! Where they are recorded follows upstream: the scheduling loop's in `scheduler/run.rs`
//! (`schedule_one.go`), the cache's size by its housekeeping, the framework's (per extension
//! point, per plugin, Permit waits, preemption) by `framework/runtime/` and the plugins, into
//! the handles of [`FrameworkMetrics`], registered here. Families marked "queue" are defined but
//! recorded by the queue (issue 18 part 1): until then they expose no samples.

use std::sync::Arc;

use parking_lot::RwLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::emulation::{self, Emulation, Minor};
use crate::framework::metrics::{
    FrameworkMetrics, Histograms, go_exponential_buckets, latency_histogram, long_histogram,
    plugin_histogram,
};
use crate::framework::registry::{PluginMetric, PluginMetrics};
use crate::infra::metrics::{encode, informer_metrics, register, register_process_metrics};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// `scheduled`, `unschedulable` or `error`.
    pub result: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `active`, `backoff`, `unschedulable` or `gated`.
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IncomingLabels {
    pub queue: String,
    pub event: String,
}

/// A queued entity's labels (1.37): `type` is `pod` (a pod that is no member of a pod group) or
/// `podgroup`; ksched queues pods only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EntityLabels {
    pub queue: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IncomingEntityLabels {
    pub queue: String,
    pub event: String,
    pub r#type: String,
}

/// The `type` of every entity ksched queues.
pub(crate) const ENTITY_POD: &str = "pod";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SliLabels {
    pub attempts: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `nodes`, `pods` or `assumed_pods`.
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

/// Every metric the scheduler exports.
pub struct Metrics {
    pub registry: Registry,
    pub schedule_attempts: Family<AttemptLabels, Counter>,
    pub scheduling_attempt_duration: Histograms<AttemptLabels>,
    pub scheduling_algorithm_duration: Histogram,
    pub leader_election_master_status: Family<LeaderLabels, Gauge>,
    /// What the framework and its plugins record.
    pub framework: Arc<FrameworkMetrics>,
    /// End to end, from a pod's first attempt to its binding, by the attempts it took.
    pub pod_scheduling_sli_duration: Histograms<SliLabels>,
    pub pod_scheduling_attempts: Histogram,
    /// Pods bound after a flush from the unschedulable pool (a hint may be missing an event).
    pub pod_scheduled_after_flush: Counter,
    pub cache_size: Family<CacheLabels, Gauge>,
    /// The scheduling queue's families (recorded by `scheduler::queue` and the informers).
    pub queue: QueueMetrics,
    /// The families the enabled plugins declared (`Handle::plugin_metrics`), once the scheduler runs.
    plugins: PluginMetricsSlot,
    /// Group cycles' families: registered, as upstream, only with GenericWorkload on.
    pub pod_group: Option<PodGroupMetrics>,
    /// The placements group cycles tried: only with TopologyAwareWorkloadScheduling on.
    pub placements: Option<PlacementMetrics>,
}

/// `scheduler_generated_placements_total` and `scheduler_placement_evaluation*`: the placements
/// group cycles generated and tried, by profile and whether the group fit.
pub struct PlacementMetrics {
    pub generated: Family<ProfileLabels, Counter>,
    pub evaluations: Family<AttemptLabels, Counter>,
    pub evaluation_duration: Histograms<AttemptLabels>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

impl PlacementMetrics {
    fn registered(r: &mut Registry) -> PlacementMetrics {
        PlacementMetrics {
            generated: register(
                r,
                "scheduler_generated_placements",
                "Number of candidate placements generated when scheduling pod groups.",
                Family::default(),
            ),
            evaluations: register(
                r,
                "scheduler_placement_evaluations",
                "Number of candidate placements evaluated when scheduling pod groups, by result. 'feasible' means the pod group fit into the placement, while 'infeasible' means it did not.",
                Family::default(),
            ),
            evaluation_duration: register(
                r,
                "scheduler_placement_evaluation_duration_seconds",
                "Latency in seconds of evaluating a single candidate placement when scheduling pod groups, by result. 'feasible' means the pod group fit into the placement, while 'infeasible' means it did not.",
                Family::new_with_constructor(|| {
                    Histogram::new(go_exponential_buckets(0.001, 2.0, 15))
                }),
            ),
        }
    }

    /// A group cycle of `profile` generated `count` placements.
    pub fn generated(&self, profile: &str, count: usize) {
        let labels = ProfileLabels {
            profile: profile.into(),
        };
        self.generated.get_or_create(&labels).inc_by(count as u64);
    }

    /// One placement tried: the group fit (`feasible`) or not, after `seconds`.
    pub fn evaluated(&self, profile: &str, feasible: bool, seconds: f64) {
        let labels = AttemptLabels {
            result: if feasible { "feasible" } else { "infeasible" }.into(),
            profile: profile.into(),
        };
        self.evaluations.get_or_create(&labels).inc();
        self.evaluation_duration
            .get_or_create(&labels)
            .observe(seconds);
    }
}

/// `scheduler_podgroup_*`: each group cycle's result and latency, by profile.
pub struct PodGroupMetrics {
    pub schedule_attempts: Family<AttemptLabels, Counter>,
    pub attempt_duration: Histograms<AttemptLabels>,
    pub algorithm_duration: Histogram,
}

impl PodGroupMetrics {
    fn registered(r: &mut Registry) -> PodGroupMetrics {
        PodGroupMetrics {
            schedule_attempts: register(
                r,
                "scheduler_podgroup_schedule_attempts",
                "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
                Family::default(),
            ),
            attempt_duration: register(
                r,
                "scheduler_podgroup_scheduling_attempt_duration_seconds",
                "Pod group scheduling attempt latency in seconds",
                Family::new_with_constructor(latency_histogram),
            ),
            algorithm_duration: register(
                r,
                "scheduler_podgroup_scheduling_algorithm_duration_seconds",
                "Pod group scheduling algorithm latency in seconds",
                latency_histogram(),
            ),
        }
    }

    /// One group cycle of `profile` ended with `result` (scheduled, unschedulable or error)
    /// after `seconds`.
    pub fn record(&self, profile: &str, result: &str, seconds: f64) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HintLabels {
    pub plugin: String,
    pub event: String,
    /// `Queue`, `QueueSkip` or `Error`.
    pub hint: String,
}

fn event_handling_histogram() -> Histogram {
    // upstream: exponential buckets from 0.1ms, factor 2, 12 buckets.
    Histogram::new(go_exponential_buckets(0.0001, 2.0, 12))
}

/// The scheduling queue's metrics, under upstream's names, labels and buckets.
#[derive(Clone)]
pub struct QueueMetrics {
    /// `scheduler_queue_incoming_pods_total{queue,event}`.
    pub incoming_pods: Family<IncomingLabels, Counter>,
    /// `scheduler_pending_pods{queue}`: active, backoff, unschedulable, gated (in-flight pods
    /// count nowhere).
    pub pending_pods: Family<QueueLabels, Gauge>,
    /// `scheduler_unschedulable_pods{plugin,profile}`: pods whose last attempt the plugin
    /// rejected, until they are tried again or deleted.
    pub unschedulable_pods: Family<UnschedulableLabels, Gauge>,
    /// `scheduler_inflight_events{event}`: events held for pods being scheduled (and
    /// `PodPopped`, the pods).
    pub inflight_events: Family<EventLabels, Gauge>,
    /// `scheduler_queueing_hint_execution_duration_seconds{plugin,event,hint}`.
    pub queueing_hint_duration: Histograms<HintLabels>,
    /// `scheduler_event_handling_duration_seconds{event}`.
    pub event_handling_duration: Histograms<EventLabels>,
    /// How the minor spells the resource of an event about a pending pod in `event` labels.
    pub pod_event_spelling: PodEventSpelling,
    /// From 1.37: `scheduler_queued_entities{queue,type}`, the pending counts by entity.
    pub queued_entities: Option<Family<EntityLabels, Gauge>>,
    /// From 1.37: `scheduler_queue_incoming_entities_total{queue,event,type}`.
    pub incoming_entities: Option<Family<IncomingEntityLabels, Counter>>,
}

/// Whether a minor's kube-scheduler has the queue's per-entity families (added in 1.37, when the
/// queue started holding pod groups as entities).
const ENTITY_FAMILIES: &[(Minor, bool)] = &[(Minor::V1_36, false), (Minor::V1_37, true)];

/// How events about pending pods are spelled in `event` labels (ksched's `ClusterEvent::label`
/// says `UnschedulablePod...`, 1.36's spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodEventSpelling {
    /// Another pending pod changed or went.
    pub unscheduled: &'static str,
    /// The pending pod itself changed (its own update requeues it).
    pub target: &'static str,
}

/// The spelling per minor: 1.37 renamed upstream's `unschedulablePod` resource `UnscheduledPod`
/// and gave the pod's own updates a resource of their own, `TargetPod`.
const POD_EVENT_SPELLING: &[(Minor, PodEventSpelling)] = &[
    (
        Minor::V1_36,
        PodEventSpelling {
            unscheduled: UNSCHEDULABLE_POD,
            target: UNSCHEDULABLE_POD,
        },
    ),
    (
        Minor::V1_37,
        PodEventSpelling {
            unscheduled: "UnscheduledPod",
            target: "TargetPod",
        },
    ),
];

/// How `ClusterEvent::label` spells an event about a pending pod.
const UNSCHEDULABLE_POD: &str = "UnschedulablePod";

impl PodEventSpelling {
    /// `label` (a `ClusterEvent` label) as the minor spells it; `target`: the event is about the
    /// pod it requeues.
    pub fn label<'a>(&self, label: &'a str, target: bool) -> std::borrow::Cow<'a, str> {
        let resource = if target {
            self.target
        } else {
            self.unscheduled
        };
        match label.strip_prefix(UNSCHEDULABLE_POD) {
            Some(action) if resource != UNSCHEDULABLE_POD => format!("{resource}{action}").into(),
            _ => label.into(),
        }
    }
}

impl Default for QueueMetrics {
    /// Families nobody exports (tests, `ksched simulate`).
    fn default() -> Self {
        QueueMetrics {
            incoming_pods: Family::default(),
            pending_pods: Family::default(),
            unschedulable_pods: Family::default(),
            inflight_events: Family::default(),
            queueing_hint_duration: Family::new_with_constructor(plugin_histogram),
            event_handling_duration: Family::new_with_constructor(event_handling_histogram),
            pod_event_spelling: *emulation::at(POD_EVENT_SPELLING, Minor::NEWEST),
            queued_entities: None,
            incoming_entities: None,
        }
    }
}

impl QueueMetrics {
    /// The families of `minor`'s kube-scheduler.
    fn at(minor: Minor) -> Self {
        let entities = *emulation::at(ENTITY_FAMILIES, minor);
        QueueMetrics {
            pod_event_spelling: *emulation::at(POD_EVENT_SPELLING, minor),
            queued_entities: entities.then(Family::default),
            incoming_entities: entities.then(Family::default),
            ..QueueMetrics::default()
        }
    }

    fn register(&self, r: &mut Registry) {
        if let Some(family) = &self.queued_entities {
            register(
                r,
                "scheduler_queued_entities",
                "Number of queued scheduling entities ('pod' or 'podgroup'; 'pod' stands for individual pods that are not members of any podgroup) by the queue type. 'active' means number of entities in activeQ; 'backoff' means number of entities in backoffQ; 'unschedulable' means number of entities in unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable entities that the scheduler never attempted to schedule because they are gated.",
                family.clone(),
            );
        }
        if let Some(family) = &self.incoming_entities {
            register(
                r,
                "scheduler_queue_incoming_entities",
                "Number of scheduling entities added to scheduling queues by event, queue type, and entity type. Entity types are either 'pod' (for individual pods that are not members of any podgroup) or 'podgroup'.",
                family.clone(),
            );
        }
        register(
            r,
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            self.incoming_pods.clone(),
        );
        register(
            r,
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            self.pending_pods.clone(),
        );
        register(
            r,
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            self.unschedulable_pods.clone(),
        );
        register(
            r,
            "scheduler_inflight_events",
            "Number of events currently tracked in the scheduling queue.",
            self.inflight_events.clone(),
        );
        register(
            r,
            "scheduler_queueing_hint_execution_duration_seconds",
            "Duration for running a queueing hint function of a plugin.",
            self.queueing_hint_duration.clone(),
        );
        register(
            r,
            "scheduler_event_handling_duration_seconds",
            "Event handling latency in seconds.",
            self.event_handling_duration.clone(),
        );
    }
}

/// Where the scheduler puts its plugins' metrics (the families their registrations declare, one
/// series per profile); encoded at each scrape.
#[derive(Clone, Debug, Default)]
struct PluginMetricsSlot(Arc<RwLock<Option<Arc<PluginMetrics>>>>);

impl Collector for PluginMetricsSlot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(plugins) = self.0.read().clone() else {
            return Ok(());
        };
        for (d, metric) in plugins.families() {
            match metric {
                PluginMetric::Counter(family) => {
                    let m =
                        encoder.encode_descriptor(d.name, d.help, None, family.metric_type())?;
                    family.encode(m)?;
                }
                PluginMetric::Gauge(family) => {
                    let m =
                        encoder.encode_descriptor(d.name, d.help, None, family.metric_type())?;
                    family.encode(m)?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnschedulableLabels {
    pub plugin: String,
    pub profile: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The metrics of a `ksched scheduler` process emulating the newest minor.
    pub fn new() -> Self {
        Self::of(&Emulation::default())
    }

    /// The metrics of a `ksched scheduler` process emulating `emulation`: the scheduler's (its
    /// minor's families), the process's, the API clients', and the component's build and
    /// feature gates (`kubernetes_build_info`, `kubernetes_feature_enabled`).
    pub fn of(emulation: &Emulation) -> Self {
        let mut metrics = Self::scheduler_only(emulation.minor());
        if emulation.enabled(crate::emulation::GENERIC_WORKLOAD) {
            metrics.pod_group = Some(PodGroupMetrics::registered(&mut metrics.registry));
            register_workload_preemption(&mut metrics.registry, &metrics.framework);
            if emulation.enabled(crate::emulation::TOPOLOGY_AWARE_WORKLOAD_SCHEDULING) {
                metrics.placements = Some(PlacementMetrics::registered(&mut metrics.registry));
            }
        }
        register_process_metrics(&mut metrics.registry);
        register_component_metrics(&mut metrics.registry, emulation);
        if *emulation::at(INFORMER_FAMILIES, emulation.minor()) {
            informer_metrics().register(&mut metrics.registry);
        }
        metrics
    }

    /// The scheduler's own families only (those of `minor`'s kube-scheduler): an Embedded
    /// scheduler inside the operator, whose process and client metrics the operator exports once.
    pub fn scheduler_only(minor: Minor) -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let framework = Arc::new(FrameworkMetrics::default());
        register_framework_metrics(r, &framework);
        Self {
            // prometheus-client appends `_total` to counters.
            schedule_attempts: register(
                r,
                "scheduler_schedule_attempts",
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
                Family::default(),
            ),
            scheduling_attempt_duration: register(
                r,
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
                Family::new_with_constructor(latency_histogram),
            ),
            scheduling_algorithm_duration: register(
                r,
                "scheduler_scheduling_algorithm_duration_seconds",
                "Scheduling algorithm latency in seconds",
                latency_histogram(),
            ),
            leader_election_master_status: register(
                r,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
                Family::default(),
            ),
            pod_scheduling_sli_duration: register(
                r,
                "scheduler_pod_scheduling_sli_duration_seconds",
                "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
                Family::new_with_constructor(long_histogram),
            ),
            pod_scheduling_attempts: register(
                r,
                "scheduler_pod_scheduling_attempts",
                "Number of attempts to successfully schedule a pod.",
                Histogram::new(go_exponential_buckets(1.0, 2.0, 5)),
            ),
            pod_scheduled_after_flush: register(
                r,
                "scheduler_pod_scheduled_after_flush",
                "Number of pods that were successfully scheduled after being flushed from unschedulablePods due to timeout. This metric helps detect potential queueing hint misconfigurations or event handling issues.",
                Counter::default(),
            ),
            cache_size: register(
                r,
                "scheduler_cache_size",
                "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
                Family::default(),
            ),
            queue: {
                let queue = QueueMetrics::at(minor);
                queue.register(r);
                queue
            },
            plugins: {
                let slot = PluginMetricsSlot::default();
                r.register_collector(Box::new(slot.clone()));
                slot
            },
            framework,
            pod_group: None,
            placements: None,
            registry,
        }
    }

    /// Exports `plugins`, the families the enabled plugins declared (replacing those of a
    /// scheduler that ran before with these metrics).
    pub fn set_plugin_metrics(&self, plugins: Arc<PluginMetrics>) {
        *self.plugins.0.write() = Some(plugins);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }
}

/// Registers what the framework records under upstream's names.
fn register_framework_metrics(r: &mut Registry, m: &FrameworkMetrics) {
    register(
        r,
        "scheduler_framework_extension_point_duration_seconds",
        "Latency for running all plugins of a specific extension point.",
        m.extension_point_duration.clone(),
    );
    register(
        r,
        "scheduler_plugin_execution_duration_seconds",
        "Duration for running a plugin at a specific extension point.",
        m.plugin_execution_duration.clone(),
    );
    register(
        r,
        "scheduler_plugin_evaluation",
        "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
        m.plugin_evaluation.clone(),
    );
    register(
        r,
        "scheduler_permit_wait_duration_seconds",
        "Duration of waiting on permit.",
        m.permit_wait_duration.clone(),
    );
    register(
        r,
        "scheduler_goroutines",
        "Number of running goroutines split by the work they do such as binding.",
        m.goroutines.clone(),
    );
    register(
        r,
        "scheduler_batch_attempts",
        "Counts of results when we attempt to use batching.",
        m.batch_attempts.clone(),
    );
    register(
        r,
        "scheduler_batch_cache_flushed",
        "Counts of cache flushes by reason.",
        m.batch_cache_flushed.clone(),
    );
    register(
        r,
        "scheduler_get_node_hint_duration_seconds",
        "Latency for getting a node hint.",
        m.get_node_hint_duration.clone(),
    );
    register(
        r,
        "scheduler_store_schedule_results_duration_seconds",
        // Upstream's help text, as it is.
        "Latency for getting a no.",
        m.store_schedule_results_duration.clone(),
    );
    register(
        r,
        "scheduler_preemption_attempts",
        "Total preemption attempts in the cluster till now",
        m.preemption_attempts.clone(),
    );
    register(
        r,
        "scheduler_preemption_victims",
        "Number of selected preemption victims",
        m.preemption_victims.clone(),
    );
    register(
        r,
        "scheduler_preemption_goroutines_duration_seconds",
        "Duration in seconds for running goroutines for the preemption.",
        m.preemption_goroutines_duration.clone(),
    );
    register(
        r,
        "scheduler_preemption_goroutines_execution",
        "Number of preemption goroutines executed.",
        m.preemption_goroutines_execution.clone(),
    );
}

/// Workload-aware preemption's families: registered, as upstream, only with GenericWorkload on.
fn register_workload_preemption(r: &mut Registry, m: &FrameworkMetrics) {
    register(
        r,
        "scheduler_workload_preemption_attempts",
        "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
        m.workload_preemption_attempts.clone(),
    );
    register(
        r,
        "scheduler_workload_preemption_victims",
        "Number of pod preemption victims caused by workload preemption.",
        m.workload_preemption_victims.clone(),
    );
    register(
        r,
        "scheduler_preemption_workload_disruptions",
        "Number of workload preemption units being preempted. A single preemption unit can be all pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of DisruptionMode=single).",
        m.preemption_workload_disruptions.clone(),
    );
    register(
        r,
        "scheduler_preemption_pdb_violations",
        "Total number of pod disruption budget violations caused by preemption.",
        m.preemption_pdb_violations.clone(),
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildInfoLabels {
    build_date: String,
    compiler: String,
    git_commit: String,
    git_tree_state: String,
    git_version: String,
    go_version: String,
    major: String,
    minor: String,
    platform: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FeatureLabels {
    name: String,
    stage: String,
}

/// What component-base registers in every Kubernetes component: `kubernetes_build_info` (ksched's
/// version; `major` and `minor` are the Kubernetes minor it emulates, what dashboards read them
/// for) and `kubernetes_feature_enabled` (every feature gate of that minor, 1 when on).
fn register_component_metrics(registry: &mut Registry, emulation: &Emulation) {
    let build: Family<BuildInfoLabels, Gauge> = Family::default();
    let minor = emulation.minor();
    build
        .get_or_create(&BuildInfoLabels {
            build_date: String::new(),
            compiler: "rustc".into(),
            git_commit: String::new(),
            git_tree_state: String::new(),
            git_version: format!("v{}", env!("CARGO_PKG_VERSION")),
            go_version: String::new(),
            major: minor.major().to_string(),
            minor: minor.minor().to_string(),
            platform: format!("{}/{}", std::env::consts::OS, go_arch()),
        })
        .set(1);
    register(
        registry,
        "kubernetes_build_info",
        "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
        build,
    );
    let features: Family<FeatureLabels, Gauge> = Family::default();
    for (name, stage, on) in emulation.gates.all() {
        features
            .get_or_create(&FeatureLabels {
                name: name.into(),
                stage: stage.label().into(),
            })
            .set(i64::from(on));
    }
    register(
        registry,
        "kubernetes_feature_enabled",
        "This metric records the data about the stage and enablement of a k8s feature.",
        features,
    );
}

/// Go's name of the architecture (`GOARCH`), as `kubernetes_build_info{platform}` writes it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Whether a minor's kube-scheduler exports client-go's informer families (from 1.37).
const INFORMER_FAMILIES: &[(Minor, bool)] = &[(Minor::V1_36, false), (Minor::V1_37, true)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::metrics::ExtensionPointLabels;
    use crate::framework::plugins::network_traffic::refresher::{
        Latest, Measurements, Refresher, RefresherMetrics,
    };
    use crate::framework::plugins::network_traffic::{self, MetricsSource, Sample};
    use std::time::Duration;

    /// A Prometheus that never answers.
    struct Unreachable;

    #[async_trait::async_trait]
    impl MetricsSource for Unreachable {
        async fn query(&self, _: &str, _: Duration) -> Result<Vec<Sample>, String> {
            Err("connection refused".into())
        }
    }

    #[tokio::test]
    async fn network_traffic_data_age_and_query_errors_per_profile() {
        let m = Metrics::new();
        let plugins = Arc::new(PluginMetrics::default());
        plugins.declare(network_traffic::METRICS);
        m.set_plugin_metrics(plugins.clone());
        // Two profiles' refreshers, with the series NetworkTraffic's factory takes.
        let refresher = |profile: &str, latest: Latest| {
            let metrics = RefresherMetrics {
                query_errors: plugins.counter(network_traffic::QUERY_ERRORS_METRIC, profile),
                data_age: plugins.gauge(network_traffic::DATA_AGE_METRIC, profile),
            };
            Refresher::new(
                Arc::new(Unreachable),
                String::new(),
                Duration::from_secs(5),
                latest,
                metrics,
            )
        };
        let ten_seconds_ago = std::time::Instant::now()
            .checked_sub(Duration::from_secs(10))
            .unwrap_or_else(std::time::Instant::now);
        let answered = Measurements {
            at: ten_seconds_ago,
            bytes: Default::default(),
        };
        let fresh = refresher("fresh", Arc::new(RwLock::new(Some(Arc::new(answered)))));
        let never = refresher("never", Latest::default());
        fresh.refresh().await;
        never.refresh().await;
        never.refresh().await;
        let text = m.encode();
        assert!(
            text.contains(r#"ksched_network_traffic_query_errors_total{profile="fresh"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ksched_network_traffic_query_errors_total{profile="never"} 2"#),
            "{text}"
        );
        // prometheus-client writes +Inf as `inf` (Prometheus reads either).
        assert!(
            text.contains(r#"ksched_network_traffic_data_age_seconds{profile="never"} inf"#),
            "{text}"
        );
        let age: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"ksched_network_traffic_data_age_seconds{profile="fresh"} "#)
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        assert!((10.0..60.0).contains(&age), "{text}");
    }

    #[test]
    fn exports_upstream_metric_names() {
        let m = Metrics::new();
        let attempt = AttemptLabels {
            result: "scheduled".into(),
            profile: "p".into(),
        };
        m.schedule_attempts.get_or_create(&attempt).inc();
        m.scheduling_attempt_duration
            .get_or_create(&attempt)
            .observe(0.002);
        let queue = QueueLabels {
            queue: "active".into(),
        };
        m.queue.pending_pods.get_or_create(&queue).set(2);
        let lease = LeaderLabels {
            name: "ksched-p".into(),
        };
        m.leader_election_master_status.get_or_create(&lease).set(1);
        let ep = ExtensionPointLabels {
            extension_point: "Bind".into(),
            status: "Success".into(),
            profile: "p".into(),
        };
        m.framework
            .extension_point_duration
            .get_or_create(&ep)
            .observe(0.0001);
        m.framework.preemption_attempts.inc();
        crate::framework::batch::BatchReport {
            hint: Some((true, Duration::from_micros(5))),
            attempt: Some(crate::framework::batch::AttemptResult::HintUsed),
            flushed: vec![crate::framework::batch::FlushReason::PodIncompatible],
            store: Some(Duration::from_micros(5)),
            ..Default::default()
        }
        .record(&m.framework, "p");
        m.pod_scheduling_attempts.observe(2.0);
        m.cache_size
            .get_or_create(&CacheLabels {
                r#type: "nodes".into(),
            })
            .set(3);
        let text = m.encode();
        for line in [
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="p"} 1"#,
            r#"scheduler_scheduling_attempt_duration_seconds_count{result="scheduled",profile="p"} 1"#,
            r#"scheduler_pending_pods{queue="active"} 2"#,
            r#"leader_election_master_status{name="ksched-p"} 1"#,
            r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",status="Success",profile="p"} 1"#,
            r#"scheduler_preemption_attempts_total 1"#,
            r#"scheduler_batch_attempts_total{profile="p",result="hint_used"} 1"#,
            r#"scheduler_batch_cache_flushed_total{profile="p",reason="pod_incompatible"} 1"#,
            r#"scheduler_get_node_hint_duration_seconds_count{hinted="hint",profile="p"} 1"#,
            r#"scheduler_store_schedule_results_duration_seconds_count{profile="p"} 1"#,
            r#"scheduler_pod_scheduling_attempts_bucket{le="2.0"} 1"#,
            r#"scheduler_cache_size{type="nodes"} 3"#,
            // Unlabelled families are there from the start, as upstream's.
            r#"scheduler_scheduling_algorithm_duration_seconds_count 0"#,
            r#"scheduler_preemption_victims_count 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn process_metrics_are_read_from_proc() {
        let text = Metrics::new().encode();
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_network_receive_bytes_total",
            "process_network_transmit_bytes_total",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(family) && !l.starts_with('#')),
                "{family} missing:\n{text}"
            );
        }
        // An Embedded scheduler's metrics leave them to the operator.
        assert!(
            !Metrics::scheduler_only(Minor::NEWEST)
                .encode()
                .contains("process_cpu_seconds")
        );
    }

    /// 1.37 renamed the resource of pending pods' events and gave a pod's own updates one.
    #[test]
    fn pod_events_are_spelled_as_the_minor_spells_them() {
        let at = |minor| *emulation::at(POD_EVENT_SPELLING, minor);
        let (old, new) = (at(Minor::V1_36), at(Minor::V1_37));
        assert_eq!(
            old.label("UnschedulablePodAdd", false),
            "UnschedulablePodAdd"
        );
        assert_eq!(
            old.label("UnschedulablePodUpdatePodLabel", true),
            "UnschedulablePodUpdatePodLabel"
        );
        assert_eq!(new.label("UnschedulablePodAdd", false), "UnscheduledPodAdd");
        assert_eq!(
            new.label("UnschedulablePodUpdatePodLabel", true),
            "TargetPodUpdatePodLabel"
        );
        assert_eq!(new.label("NodeAdd", true), "NodeAdd");
    }

    /// component-base's families: the build (the emulated minor as major and minor) and every
    /// feature gate of that minor with its stage, 1 when on.
    #[test]
    fn build_info_and_feature_gates_follow_the_emulated_minor() {
        let text = |e: Emulation| Metrics::of(&e).encode();
        let new = text(Emulation::default());
        assert!(
            new.lines().any(|l| l.starts_with("kubernetes_build_info{")
                && l.contains(r#"major="1""#)
                && l.contains(r#"minor="37""#)
                && l.ends_with(" 1")),
            "{new}"
        );
        for line in [
            r#"kubernetes_feature_enabled{name="StorageCapacityScoring",stage="BETA"} 1"#,
            r#"kubernetes_feature_enabled{name="NodeDeclaredFeatures",stage=""} 1"#,
            r#"kubernetes_feature_enabled{name="AllAlpha",stage="ALPHA"} 0"#,
        ] {
            assert!(
                new.lines().any(|l| l == line),
                "{line} missing:
{new}"
            );
        }
        let old = text(
            Emulation::with_gates(Minor::V1_36, &["StorageCapacityScoring=true".into()])
                .expect("known gate"),
        );
        for line in [
            r#"kubernetes_feature_enabled{name="StorageCapacityScoring",stage="ALPHA"} 1"#,
            r#"kubernetes_feature_enabled{name="GangScheduling",stage="ALPHA"} 0"#,
        ] {
            assert!(
                old.lines().any(|l| l == line),
                "{line} missing:
{old}"
            );
        }
        assert!(old.contains(r#"minor="36""#));
    }
}
