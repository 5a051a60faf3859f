//! Prometheus metrics under upstream kube-scheduler's names, labels and buckets, so existing
//! dashboards and alerts work; `ksched_*` for our own. Besides the scheduler's families: the
//! process's (`process_*`, as client_golang's process collector), the API clients' (client-go's
//! `rest_client_*`, recorded by `scheduler::client`) and leader election's.
//!
//! Where they are recorded follows upstream: the scheduling loop's in `scheduler/run.rs`
//! (`schedule_one.go`), the cache's size by its housekeeping, the framework's (per extension
//! point, per plugin, Permit waits, preemption) by `framework/runtime.rs` and the plugins, into
//! the handles of [`FrameworkMetrics`], registered here. Families marked "queue" are defined but
//! recorded by the queue (issue 18 part 1): until then they expose no samples.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::RwLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::framework::metrics::{
    FrameworkMetrics, Histograms, go_exponential_buckets, latency_histogram, long_histogram,
    plugin_histogram,
};
use crate::framework::registry::{PluginMetric, PluginMetrics};
use crate::serving::register;

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
        }
    }
}

impl QueueMetrics {
    fn register(&self, r: &mut Registry) {
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
    /// The metrics of a `ksched scheduler` process: the scheduler's, the process's and the API
    /// clients'.
    pub fn new() -> Self {
        let mut metrics = Self::scheduler_only();
        register_process_metrics(&mut metrics.registry);
        metrics
    }

    /// The scheduler's own families only: an Embedded scheduler inside the operator, whose
    /// process and client metrics the operator exports once.
    pub fn scheduler_only() -> Self {
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
                let queue = QueueMetrics::default();
                queue.register(r);
                queue
            },
            plugins: {
                let slot = PluginMetricsSlot::default();
                r.register_collector(Box::new(slot.clone()));
                slot
            },
            framework,
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
        crate::serving::encode(&self.registry)
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

/// Registers the process's metrics (`process_*`) and the API clients' (`rest_client_*`) in
/// `registry`: once per process (the scheduler's registry, or the operator's).
pub(crate) fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
    rest_client_metrics().register(registry);
}

/// client_golang's process collector, read from `/proc/self` at each scrape.
#[derive(Debug)]
struct ProcessCollector;

/// What `/proc/self` says about this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
    pub start_time_seconds: f64,
    pub open_fds: i64,
    pub max_fds: i64,
    pub virtual_max_bytes: f64,
    pub threads: i64,
}

/// Parses `/proc/self/stat` (`stat`), with the clock tick and page size, and the boot time.
pub(crate) fn parse_stat(
    stat: &str,
    ticks: f64,
    page: i64,
    boot_time: f64,
) -> Option<ProcessStats> {
    // Fields after the command name, which is in parentheses and may hold anything.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<f64>().ok();
    // Field numbers of proc(5) minus 3: state is field 3, at index 0.
    let utime = num(11)?;
    let stime = num(12)?;
    let threads = num(17)?;
    let start = num(19)?;
    let vsize = num(20)?;
    let rss = num(21)?;
    Some(ProcessStats {
        cpu_seconds: (utime + stime) / ticks,
        resident_bytes: rss as i64 * page,
        virtual_bytes: vsize as i64,
        start_time_seconds: boot_time + start / ticks,
        threads: threads as i64,
        ..ProcessStats::default()
    })
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `Max open files` and `Max address space` of `/proc/self/limits` (the soft limits).
pub(crate) fn parse_limits(limits: &str) -> (i64, f64) {
    let soft = |prefix: &str| {
        limits
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l[prefix.len()..].split_whitespace().next())
            .map(|v| {
                if v == "unlimited" {
                    -1.0
                } else {
                    v.parse().unwrap_or(-1.0)
                }
            })
            .unwrap_or(-1.0)
    };
    (soft("Max open files") as i64, soft("Max address space"))
}

fn process_stats() -> Option<ProcessStats> {
    // SAFETY: sysconf has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as i64,
        )
    };
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut stats = parse_stat(&stat, ticks.max(1.0), page, boot_time().unwrap_or(0.0))?;
    stats.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as i64)
        .unwrap_or(0);
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    (stats.max_fds, stats.virtual_max_bytes) = parse_limits(&limits);
    Some(stats)
}

fn encode_gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = process_stats() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        let metric = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?;
        cpu.encode(metric)?;
        let e = &mut encoder;
        encode_gauge(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            s.resident_bytes,
        )?;
        encode_gauge(
            e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            s.virtual_bytes,
        )?;
        encode_gauge(
            e,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            s.virtual_max_bytes,
        )?;
        encode_gauge(
            e,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )?;
        encode_gauge(
            e,
            "process_open_fds",
            "Number of open file descriptors.",
            s.open_fds,
        )?;
        encode_gauge(
            e,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            s.max_fds,
        )?;
        encode_gauge(
            e,
            "ksched_process_threads",
            "OS threads of the process (kube-scheduler's go_threads).",
            s.threads,
        )?;
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub code: String,
    pub method: String,
    pub host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VerbHostLabels {
    pub verb: String,
    pub host: String,
}

fn request_latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ])
}

fn size_histogram() -> Histogram {
    Histogram::new([
        64.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
        16777216.0,
    ])
}

/// client-go's request metrics, for every API client of the process (client-go registers them
/// once per process too).
#[derive(Clone, Debug)]
pub(crate) struct RestClientMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Histograms<VerbHostLabels>,
    pub rate_limiter_duration: Histograms<VerbHostLabels>,
    pub request_size: Histograms<VerbHostLabels>,
    pub response_size: Histograms<VerbHostLabels>,
}

impl RestClientMetrics {
    fn new() -> Self {
        Self {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_latency_histogram),
            rate_limiter_duration: Family::new_with_constructor(request_latency_histogram),
            request_size: Family::new_with_constructor(size_histogram),
            response_size: Family::new_with_constructor(size_histogram),
        }
    }

    fn register(&self, r: &mut Registry) {
        register(
            r,
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            self.requests.clone(),
        );
        register(
            r,
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            self.request_duration.clone(),
        );
        register(
            r,
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            self.rate_limiter_duration.clone(),
        );
        register(
            r,
            "rest_client_request_size_bytes",
            "Request size in bytes. Broken down by verb and host.",
            self.request_size.clone(),
        );
        register(
            r,
            "rest_client_response_size_bytes",
            "Response size in bytes. Broken down by verb and host.",
            self.response_size.clone(),
        );
    }

    /// Records one request that got an answer with `code` (or `<error>`) after `took`.
    pub(crate) fn observe(
        &self,
        method: &str,
        code: &str,
        took: Duration,
        sizes: (Option<u64>, Option<u64>),
    ) {
        let host = api_host().to_string();
        let verb = VerbHostLabels {
            verb: method.to_string(),
            host: host.clone(),
        };
        self.requests
            .get_or_create(&RequestLabels {
                code: code.to_string(),
                method: method.to_string(),
                host,
            })
            .inc();
        self.request_duration
            .get_or_create(&verb)
            .observe(took.as_secs_f64());
        if let Some(size) = sizes.0 {
            self.request_size.get_or_create(&verb).observe(size as f64);
        }
        if let Some(size) = sizes.1 {
            self.response_size.get_or_create(&verb).observe(size as f64);
        }
    }

    pub(crate) fn observe_rate_limiter(&self, method: &str, waited: Duration) {
        let verb = VerbHostLabels {
            verb: method.to_string(),
            host: api_host().to_string(),
        };
        self.rate_limiter_duration
            .get_or_create(&verb)
            .observe(waited.as_secs_f64());
    }
}

static REST_CLIENT: OnceLock<RestClientMetrics> = OnceLock::new();
static API_HOST: OnceLock<String> = OnceLock::new();

/// The process's API client metrics.
pub(crate) fn rest_client_metrics() -> &'static RestClientMetrics {
    REST_CLIENT.get_or_init(RestClientMetrics::new)
}

/// Records the API server's `host:port` for the `host` label (set once, where the client is
/// built from its kubeconfig).
pub(crate) fn set_api_host(url: &http::Uri) {
    let host = url.authority().map(|a| a.to_string()).unwrap_or_default();
    let _ = API_HOST.set(host);
}

fn api_host() -> &'static str {
    API_HOST.get().map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::metrics::ExtensionPointLabels;
    use crate::framework::plugins::network_traffic::refresher::{
        Latest, Measurements, Refresher, RefresherMetrics,
    };
    use crate::framework::plugins::network_traffic::{self, MetricsSource, Sample};

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
        ] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(family) && !l.starts_with('#')),
                "{family} missing:\n{text}"
            );
        }
        // An Embedded scheduler's metrics leave them to the operator.
        assert!(
            !Metrics::scheduler_only()
                .encode()
                .contains("process_cpu_seconds")
        );
    }

    #[test]
    fn proc_stat_fields_are_read_after_the_command_name() {
        let stat = "12 (a (weird) name) S 1 12 12 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 7 0 1000 4096000 300 18446744073709551615";
        let s = parse_stat(stat, 100.0, 4096, 1_700_000_000.0).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 7);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 4_096_000);
        assert_eq!(s.resident_bytes, 300 * 4096);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\nMax address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_limits(limits), (1024, -1.0));
    }

    #[test]
    fn rest_client_requests_have_client_gos_names_and_labels() {
        let m = RestClientMetrics::new();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.observe("GET", "200", Duration::from_millis(30), (None, Some(1000)));
        m.observe_rate_limiter("GET", Duration::from_millis(1));
        let text = crate::serving::encode(&registry);
        for line in [
            r#"rest_client_requests_total{code="200",method="GET",host=""} 1"#,
            r#"rest_client_request_duration_seconds_bucket{le="0.1",verb="GET",host=""} 1"#,
            r#"rest_client_response_size_bytes_bucket{le="1024.0",verb="GET",host=""} 1"#,
            r#"rest_client_rate_limiter_duration_seconds_count{verb="GET",host=""} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
