//! The metrics the framework records while it runs a profile's plugins, as upstream's
//! `framework/runtime/framework.go`, `instrumented_plugins.go` and the preemption executor record
//! them: per extension point, per plugin (in sampled cycles only), plugin evaluations, Permit waits,
//! parallel workers, preemption. The framework holds the handles only; `scheduler::metrics`
//! registers them with upstream's names and help texts. Without handles (`Handle::metrics` unset:
//! offline simulation, unit tests) nothing is measured.
//!
//! The hot paths (Filter and Score run per node) never build a label set: each plugin's handles
//! are created with the framework, and a histogram per status code at its first use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::interface::Code;

/// Upstream's `pluginMetricsSamplePercent`: per-plugin durations are measured in this share of
/// scheduling cycles (and of PreEnqueue runs).
pub const PLUGIN_METRICS_SAMPLE_PERCENT: u64 = 10;

pub type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtensionPointLabels {
    pub extension_point: String,
    pub status: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
    pub extension_point: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginEvaluationLabels {
    pub plugin: String,
    pub extension_point: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// What preempted: `pod` or `podgroup`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptorLabels {
    pub preemptor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchAttemptLabels {
    pub profile: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchFlushLabels {
    pub profile: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeHintLabels {
    pub hinted: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

/// Go's `prometheus.ExponentialBuckets`: each bound the previous one times `factor`, so the bounds
/// are bit for bit upstream's (a power per bound would round differently).
pub fn go_exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut bound = start;
    let mut buckets = Vec::with_capacity(count);
    for _ in 0..count {
        buckets.push(bound);
        bound *= factor;
    }
    buckets
}

/// Latencies from 1 ms (attempts, algorithm, Permit waits): upstream's `(0.001, 2, 15)`.
pub fn latency_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(0.001, 2.0, 15))
}

/// Extension points, from 0.1 ms: upstream's `(0.0001, 2, 12)`.
pub fn extension_point_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(0.0001, 2.0, 12))
}

/// Plugins, from 0.01 ms: upstream's `(0.00001, 1.5, 20)`.
pub fn plugin_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(0.00001, 1.5, 20))
}

/// End-to-end and background work, from 10 ms: upstream's `(0.01, 2, 20)`.
pub fn long_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(0.01, 2.0, 20))
}

/// Opportunistic batching's look-ups and stores, from 0.01 ms: upstream's `(0.00001, 2, 12)`.
pub fn batch_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(0.00001, 2.0, 12))
}

/// Victims per preemption: upstream's `(1, 2, 7)`.
pub fn victims_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(1.0, 2.0, 7))
}

/// Victims per workload preemption: upstream's `(1, 2, 11)`.
pub fn workload_victims_histogram() -> Histogram {
    Histogram::new(go_exponential_buckets(1.0, 2.0, 11))
}

/// The values of the `extension_point` label (upstream's `metrics.ExtensionPoints`, and the
/// queue's PreEnqueue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    PreEnqueue,
    /// Signing a pod for opportunistic batching.
    Sign,
    PreFilter,
    PreFilterExtensionAddPod,
    PreFilterExtensionRemovePod,
    Filter,
    PostFilter,
    PreScore,
    Score,
    ScoreExtensionNormalize,
    Reserve,
    Unreserve,
    Permit,
    PreBindPreFlight,
    PreBind,
    Bind,
    PostBind,
    /// A pod group's points (upstream 1.37).
    PlacementGenerate,
    PlacementFeasible,
    PlacementScore,
    PlacementScoreExtensionNormalize,
    PodGroupPostFilter,
}

impl Point {
    pub const ALL: [Point; 22] = [
        Point::PreEnqueue,
        Point::Sign,
        Point::PreFilter,
        Point::PreFilterExtensionAddPod,
        Point::PreFilterExtensionRemovePod,
        Point::Filter,
        Point::PostFilter,
        Point::PreScore,
        Point::Score,
        Point::ScoreExtensionNormalize,
        Point::Reserve,
        Point::Unreserve,
        Point::Permit,
        Point::PreBindPreFlight,
        Point::PreBind,
        Point::Bind,
        Point::PostBind,
        Point::PlacementGenerate,
        Point::PlacementFeasible,
        Point::PlacementScore,
        Point::PlacementScoreExtensionNormalize,
        Point::PodGroupPostFilter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Point::PreEnqueue => "PreEnqueue",
            Point::Sign => "Sign",
            Point::PreFilter => "PreFilter",
            Point::PreFilterExtensionAddPod => "PreFilterExtensionAddPod",
            Point::PreFilterExtensionRemovePod => "PreFilterExtensionRemovePod",
            Point::Filter => "Filter",
            Point::PostFilter => "PostFilter",
            Point::PreScore => "PreScore",
            Point::Score => "Score",
            Point::ScoreExtensionNormalize => "ScoreExtensionNormalize",
            Point::Reserve => "Reserve",
            Point::Unreserve => "Unreserve",
            Point::Permit => "Permit",
            Point::PreBindPreFlight => "PreBindPreFlight",
            Point::PreBind => "PreBind",
            Point::Bind => "Bind",
            Point::PostBind => "PostBind",
            Point::PlacementGenerate => "PlacementGenerate",
            Point::PlacementFeasible => "PlacementFeasible",
            Point::PlacementScore => "PlacementScore",
            Point::PlacementScoreExtensionNormalize => "PlacementScoreExtensionNormalize",
            Point::PodGroupPostFilter => "PodGroupPostFilter",
        }
    }
}

/// Status codes, for the histograms kept per code.
const CODES: usize = Code::Pending as usize + 1;

/// Label sets that differ by their `status` only.
pub trait StatusLabel: Clone + std::hash::Hash + Eq + Send + Sync {
    fn with_status(&self, code: Code) -> Self;
}

impl StatusLabel for ExtensionPointLabels {
    fn with_status(&self, code: Code) -> Self {
        ExtensionPointLabels {
            status: code.as_str().into(),
            ..self.clone()
        }
    }
}

impl StatusLabel for PluginLabels {
    fn with_status(&self, code: Code) -> Self {
        PluginLabels {
            status: code.as_str().into(),
            ..self.clone()
        }
    }
}

/// One series per status code of a histogram family, each looked up once, at its first use.
pub struct ByStatus<L: StatusLabel> {
    family: Histograms<L>,
    labels: L,
    series: [OnceLock<Histogram>; CODES],
}

impl<L: StatusLabel + EncodeLabelSet + std::fmt::Debug + 'static> ByStatus<L> {
    pub fn new(family: &Histograms<L>, labels: L) -> Self {
        ByStatus {
            family: family.clone(),
            labels,
            series: Default::default(),
        }
    }

    pub fn observe(&self, code: Code, seconds: f64) {
        self.series[code as usize]
            .get_or_init(|| {
                self.family
                    .get_or_create_owned(&self.labels.with_status(code))
            })
            .observe(seconds);
    }

    pub fn observe_since(&self, code: Code, since: Instant) {
        self.observe(code, since.elapsed().as_secs_f64());
    }
}

/// Every `n`th call says yes, starting with the first: a fixed share of cycles, without a random
/// draw (upstream draws `rand.Intn(100) < 10`; counting gives the same share, and measures a
/// process's first cycle, so a quiet cluster has samples too).
#[derive(Debug, Default)]
pub struct Sampler(AtomicU64);

impl Sampler {
    pub fn sample(&self) -> bool {
        let every = 100 / PLUGIN_METRICS_SAMPLE_PERCENT;
        self.0.fetch_add(1, Ordering::Relaxed).is_multiple_of(every)
    }
}

/// The handles of every family the framework records (one set per scheduler process, or per
/// Embedded scheduler; unregistered until `scheduler::metrics` registers them).
#[derive(Clone, Debug)]
pub struct FrameworkMetrics {
    pub extension_point_duration: Histograms<ExtensionPointLabels>,
    pub plugin_execution_duration: Histograms<PluginLabels>,
    pub plugin_evaluation: Family<PluginEvaluationLabels, Counter>,
    pub permit_wait_duration: Histograms<ResultLabels>,
    pub goroutines: Family<OperationLabels, Gauge>,
    pub preemption_attempts: Counter,
    pub preemption_victims: Histogram,
    pub preemption_goroutines_duration: Histograms<ResultLabels>,
    pub preemption_goroutines_execution: Family<ResultLabels, Counter>,
    /// Pod groups' preemption attempts by the status code they ended with.
    pub workload_preemption_attempts: Family<ResultLabels, Counter>,
    pub workload_preemption_victims: Histogram,
    /// Victims that are a pod group's pod, or a whole group with `disruptionMode: all`.
    pub preemption_workload_disruptions: Histograms<PreemptorLabels>,
    pub preemption_pdb_violations: Family<PreemptorLabels, Counter>,
    pub batch_attempts: Family<BatchAttemptLabels, Counter>,
    pub batch_cache_flushed: Family<BatchFlushLabels, Counter>,
    pub get_node_hint_duration: Histograms<NodeHintLabels>,
    pub store_schedule_results_duration: Histograms<ProfileLabels>,
    /// Decides which scheduling cycles measure each plugin.
    pub sampler: Arc<Sampler>,
}

impl Default for FrameworkMetrics {
    fn default() -> Self {
        FrameworkMetrics {
            extension_point_duration: Family::new_with_constructor(extension_point_histogram),
            plugin_execution_duration: Family::new_with_constructor(plugin_histogram),
            plugin_evaluation: Family::default(),
            permit_wait_duration: Family::new_with_constructor(latency_histogram),
            goroutines: Family::default(),
            preemption_attempts: Counter::default(),
            preemption_victims: victims_histogram(),
            preemption_goroutines_duration: Family::new_with_constructor(long_histogram),
            preemption_goroutines_execution: Family::default(),
            workload_preemption_attempts: Family::default(),
            workload_preemption_victims: workload_victims_histogram(),
            preemption_workload_disruptions: Family::new_with_constructor(
                workload_victims_histogram,
            ),
            preemption_pdb_violations: Family::default(),
            batch_attempts: Family::default(),
            batch_cache_flushed: Family::default(),
            get_node_hint_duration: Family::new_with_constructor(batch_histogram),
            store_schedule_results_duration: Family::new_with_constructor(batch_histogram),
            sampler: Arc::default(),
        }
    }
}

/// `operation` values of `scheduler_goroutines` (upstream's: the binding cycle, the parallel
/// Filter and Score, and a plugin's name for its own parallel work).
pub const OPERATION_BINDING: &str = "binding";

impl FrameworkMetrics {
    /// `scheduler_goroutines{operation}` counts `workers` while the returned guard lives.
    pub fn running(&self, operation: &str, workers: usize) -> Running {
        let gauge = self.goroutines.get_or_create_owned(&OperationLabels {
            operation: operation.to_string(),
        });
        let workers = i64::try_from(workers).unwrap_or(i64::MAX);
        gauge.inc_by(workers);
        Running { gauge, workers }
    }

    /// The end of one background preemption (upstream's async preemption goroutine): its
    /// duration and count by result, `success` or `error`.
    pub fn preemption_finished(&self, succeeded: bool, started: Instant) {
        let labels = ResultLabels {
            result: if succeeded { "success" } else { "error" }.into(),
        };
        self.preemption_goroutines_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.preemption_goroutines_execution
            .get_or_create(&labels)
            .inc();
    }
}

/// Work counted in `scheduler_goroutines` until dropped.
#[derive(Debug)]
pub struct Running {
    gauge: Gauge,
    workers: i64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.gauge.dec_by(self.workers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_gos_bit_for_bit() {
        // Go: 1e-05, 1.5e-05, 2.25e-05, 3.375e-05, ... each the previous times 1.5.
        let b = go_exponential_buckets(0.00001, 1.5, 20);
        assert_eq!(b.len(), 20);
        assert_eq!(b[0], 0.00001);
        assert_eq!(b[1], 0.00001 * 1.5);
        assert_eq!(b[19], b[18] * 1.5);
        assert_eq!(
            go_exponential_buckets(1.0, 2.0, 7),
            [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
        );
    }

    #[test]
    fn one_cycle_in_ten_is_sampled_starting_with_the_first() {
        let s = Sampler::default();
        let picks: Vec<bool> = (0..30).map(|_| s.sample()).collect();
        assert_eq!(picks.iter().filter(|p| **p).count(), 3);
        assert!(picks[0] && picks[10] && picks[20]);
    }

    /// The text exposition of one family registered as `x`.
    fn exposition(metric: impl prometheus_client::registry::Metric) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("x", "", metric);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn by_status_keeps_one_series_per_code() {
        let m = FrameworkMetrics::default();
        let labels = PluginLabels {
            plugin: "A".into(),
            extension_point: "Filter".into(),
            status: String::new(),
        };
        let h = ByStatus::new(&m.plugin_execution_duration, labels);
        h.observe(Code::Success, 0.001);
        h.observe(Code::Success, 0.002);
        h.observe(Code::Unschedulable, 0.003);
        let text = exposition(m.plugin_execution_duration.clone());
        for line in [
            r#"x_count{plugin="A",extension_point="Filter",status="Success"} 2"#,
            r#"x_count{plugin="A",extension_point="Filter",status="Unschedulable"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(!text.contains("Error"), "{text}");
    }

    #[test]
    fn running_work_is_counted_until_it_ends() {
        let m = FrameworkMetrics::default();
        let gauge = |op: &str| {
            m.goroutines
                .get(&OperationLabels {
                    operation: op.into(),
                })
                .map(|g| g.get())
        };
        assert_eq!(gauge("Filter"), None);
        let a = m.running("Filter", 2);
        let b = m.running("Filter", 1);
        assert_eq!(gauge("Filter"), Some(3));
        drop(a);
        drop(b);
        assert_eq!(gauge("Filter"), Some(0));
    }
}
