//! The metrics registry every process shares: registering and encoding families, merging and
//! filtering expositions, and the families of the process itself (`process_*`, as client_golang's
//! process collector) and of its API clients (client-go's `rest_client_*`, recorded by
//! [`super::client`]).

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A family of histograms built with the family's buckets.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every family [`register`]ed in this process, by name, with its type (`counter`, `gauge`,
/// `histogram`): an exposition leaves out a family without samples, this list does not.
static DECLARED: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::BTreeMap<String, String>>,
> = std::sync::LazyLock::new(Default::default);

/// Registers `metric` as `name` (prometheus-client appends `_total` to counters) and returns it:
/// the caller keeps a handle sharing its values.
pub(crate) fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    DECLARED
        .lock()
        .insert(name.to_string(), metric.metric_type().as_str().to_string());
    registry.register(name, help, metric.clone());
    metric
}

/// The families [`register`]ed so far in this process: name -> type.
pub(crate) fn declared_families() -> std::collections::BTreeMap<String, String> {
    DECLARED.lock().clone()
}

/// The Prometheus text exposition of every metric in `registry`.
pub(crate) fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// The family a sample or metadata line belongs to (`name` for `name_bucket{...} 1`).
fn line_family(line: &str) -> Option<&str> {
    let name = match line.strip_prefix("# ") {
        Some(meta) => meta.split_whitespace().nth(1)?,
        None => line.split(['{', ' ']).next()?,
    };
    (!name.is_empty()).then_some(name)
}

/// Whether `metric` (a line's name) belongs to the family `family` (as `--disabled-metrics` names
/// it, with its `_total` for counters).
fn in_family(metric: &str, family: &str) -> bool {
    let base = family.strip_suffix("_total").unwrap_or(family);
    metric == family
        || metric == base
        || ["_total", "_bucket", "_sum", "_count", "_created", "_info"]
            .iter()
            .any(|suffix| metric.strip_prefix(base) == Some(suffix))
}

/// `exposition` without the families of `disabled` (`--disabled-metrics`).
pub(crate) fn without_families(exposition: &str, disabled: &[String]) -> String {
    if disabled.is_empty() {
        return exposition.to_string();
    }
    let mut out = String::with_capacity(exposition.len());
    for line in exposition.lines() {
        let drop = line != "# EOF"
            && line_family(line).is_some_and(|m| disabled.iter().any(|d| in_family(m, d)));
        if !drop {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Several expositions as one: each family's metadata once and all its samples, one `# EOF`.
/// Samples of a part with a label get it added (`profile="P"` for an Embedded scheduler's) unless
/// they carry that label already.
pub(crate) fn merge_expositions(parts: &[(Option<(&str, &str)>, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (Vec<String>, Vec<String>)> =
        std::collections::HashMap::new();
    for (label, text) in parts {
        let mut current = String::new();
        for line in text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix("# ") {
                let mut words = meta.split_whitespace();
                let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                current = name.to_string();
                let entry = families.entry(current.clone()).or_insert_with(|| {
                    order.push(current.clone());
                    (Vec::new(), Vec::new())
                });
                if !entry.0.iter().any(|m| m.starts_with(&format!("# {kind} "))) {
                    entry.0.push(line.to_string());
                }
                continue;
            }
            let sample = match label {
                Some((key, value)) => with_label(line, key, value),
                None => line.to_string(),
            };
            let entry = families.entry(current.clone()).or_insert_with(|| {
                order.push(current.clone());
                (Vec::new(), Vec::new())
            });
            entry.1.push(sample);
        }
    }
    let mut out = String::new();
    for name in order {
        if let Some((meta, samples)) = families.get(&name) {
            for l in meta.iter().chain(samples) {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// `line` (a sample) with `key="value"` added unless it has `key` already.
fn with_label(line: &str, key: &str, value: &str) -> String {
    let pair = format!("{key}=\"{value}\"");
    match line.split_once('{') {
        Some((name, rest)) => {
            if rest.starts_with(&format!("{key}=")) || rest.contains(&format!(",{key}=")) {
                line.to_string()
            } else if rest.starts_with('}') {
                format!("{name}{{{pair}{rest}")
            } else {
                format!("{name}{{{pair},{rest}")
            }
        }
        None => match line.split_once(' ') {
            Some((name, rest)) => format!("{name}{{{pair}}} {rest}"),
            None => line.to_string(),
        },
    }
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
    /// `/proc/self/net/dev`: bytes received and sent on every interface of the process's network
    /// namespace (client_golang sums them the same way).
    pub network_receive_bytes: f64,
    pub network_transmit_bytes: f64,
}

/// The received and transmitted byte totals of `/proc/<pid>/net/dev` (two header lines, then
/// `iface: rx_bytes rx_packets ... (8 receive columns) tx_bytes ...`).
pub(crate) fn parse_net_dev(net_dev: &str) -> (f64, f64) {
    let mut totals = (0.0, 0.0);
    for line in net_dev.lines().skip(2) {
        let Some((_, counters)) = line.split_once(':') else {
            continue;
        };
        let columns: Vec<f64> = counters
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        if columns.len() >= 9 {
            totals.0 += columns[0];
            totals.1 += columns[8];
        }
    }
    totals
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
    let net_dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    (stats.network_receive_bytes, stats.network_transmit_bytes) = parse_net_dev(&net_dev);
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
        for (name, help, bytes) in [
            (
                "process_network_receive_bytes",
                "Number of bytes received by the process over the network.",
                s.network_receive_bytes,
            ),
            (
                "process_network_transmit_bytes",
                "Number of bytes sent by the process over the network.",
                s.network_transmit_bytes,
            ),
        ] {
            let counter = ConstCounter::new(bytes);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
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

/// An informer's labels, as client-go's (`name` is the component's: `kube-scheduler`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct InformerLabels {
    pub group: String,
    pub name: String,
    pub resource: String,
    pub version: String,
}

/// client-go's informer families (exported by kube-scheduler from 1.37): how long handling an
/// event took, the events waiting (ksched's watches hand each event over as it comes: 0), and
/// the last resource version the store holds.
#[derive(Clone, Debug)]
pub(crate) struct InformerMetrics {
    pub processing_latency: Histograms<InformerLabels>,
    pub queued_items: Family<InformerLabels, Gauge>,
    pub store_resource_version: Family<InformerLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

fn informer_latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl InformerMetrics {
    fn new() -> Self {
        InformerMetrics {
            processing_latency: Family::new_with_constructor(informer_latency_histogram),
            queued_items: Family::default(),
            store_resource_version: Family::default(),
        }
    }

    /// Registers the families in `r` (a registry that exports them: the scheduler's, from 1.37).
    pub(crate) fn register(&self, r: &mut Registry) {
        register(
            r,
            "informer_processing_latency_seconds",
            "Time taken to process events after popping from the queue.",
            self.processing_latency.clone(),
        );
        register(
            r,
            "informer_queued_items",
            "Number of items currently queued in the FIFO.",
            self.queued_items.clone(),
        );
        register(
            r,
            "informer_store_resource_version",
            "The 15 least significant digits of the resource version of the store.",
            self.store_resource_version.clone(),
        );
    }
}

static INFORMERS: OnceLock<InformerMetrics> = OnceLock::new();

/// The process's informer metrics (recorded by [`super::informer`]).
pub(crate) fn informer_metrics() -> &'static InformerMetrics {
    INFORMERS.get_or_init(InformerMetrics::new)
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

    const A: &str = "# HELP scheduler_schedule_attempts Number.\n# TYPE scheduler_schedule_attempts counter\nscheduler_schedule_attempts_total{result=\"scheduled\",profile=\"a\"} 1\n# HELP scheduler_pending_pods Pending.\n# TYPE scheduler_pending_pods gauge\nscheduler_pending_pods{queue=\"active\"} 2\n# EOF\n";

    #[test]
    fn expositions_merge_into_one_family_each() {
        let b = A.replace("profile=\"a\"", "profile=\"b\"");
        let merged = merge_expositions(&[
            (Some(("profile", "a")), A.to_string()),
            (Some(("profile", "b")), b),
        ]);
        assert_eq!(
            merged
                .matches("# TYPE scheduler_schedule_attempts counter")
                .count(),
            1
        );
        assert_eq!(merged.matches("# EOF").count(), 1);
        assert!(merged.ends_with("# EOF\n"));
        assert!(
            merged.contains(
                "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"b\"} 1"
            )
        );
        assert!(merged.contains("scheduler_pending_pods{profile=\"a\",queue=\"active\"} 2"));
        assert!(merged.contains("scheduler_pending_pods{profile=\"b\",queue=\"active\"} 2"));
        assert_eq!(with_label("up 1", "profile", "p"), "up{profile=\"p\"} 1");
        assert_eq!(with_label("up{} 1", "profile", "p"), "up{profile=\"p\"} 1");
    }

    #[test]
    fn disabled_metrics_are_left_out() {
        let out = without_families(A, &["scheduler_schedule_attempts_total".to_string()]);
        assert!(!out.contains("scheduler_schedule_attempts"), "{out}");
        assert!(out.contains("scheduler_pending_pods{queue=\"active\"} 2"));
        assert!(out.contains("# EOF"));
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
        let net_dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:  1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  eth0:  2500      20    0    0    0     0          0         0      700       7    0    0    0     0       0          0\n";
        assert_eq!(parse_net_dev(net_dev), (3500.0, 1700.0));
    }

    #[test]
    fn rest_client_requests_have_client_gos_names_and_labels() {
        let m = RestClientMetrics::new();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.observe("GET", "200", Duration::from_millis(30), (None, Some(1000)));
        m.observe_rate_limiter("GET", Duration::from_millis(1));
        let text = encode(&registry);
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
