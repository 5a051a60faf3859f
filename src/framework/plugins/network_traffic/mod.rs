//! NetworkTraffic, the Prometheus-scored plugin of seed 003: nodes that received fewer bytes on
//! `deviceName` over the last `timeRange` seconds score higher.
//!
//! Score is each node's `sum_over_time(node_network_receive_bytes_total{device="<deviceName>"}[<timeRange>s])`,
//! the series matched to the node by its `instance` label (equal to the node name, or to it with a
//! `:port` suffix; a `nodename` label, as node_exporter's `node_uname_info` join gives, wins).
//! NormalizeScore is `100 - score * 100 / max` (all 100 when max is 0).
//!
//! Args: the seed's `ip`, `deviceName`, `timeRange`, or the later published `prometheusAddress`,
//! `networkInterface`, `timeRangeInSeconds` (not both at once); the normalized form uses the seed's.
//!
//! Prometheus is asked once per scheduling cycle (in PreScore when it is enabled, else by the first
//! Score call of the cycle), through the [`MetricsSource`] trait, with a bounded timeout
//! ([`QUERY_TIMEOUT`]). When it is down, slow or answers garbage, every node scores 0 (scheduling goes
//! on), the outage is logged once (and its end), and the plugin's own metric
//! [`PROMETHEUS_ERRORS`] counts the failures.
//! The HTTP client ([`prometheus::PrometheusClient`]) is the one I/O piece of the framework: it lives
//! in this module's `prometheus.rs`, behind the trait, so the plugin logic and its tests stay pure.

pub mod prometheus;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid, required};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, NodeScore, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::{Handle, MetricDeclaration, MetricKind, PluginRegistration};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

/// The longest one cycle waits for Prometheus.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The plugin's metric: failed Prometheus queries (scheduling went on with score 0), of every
/// profile's instance.
pub const PROMETHEUS_ERRORS: MetricDeclaration = MetricDeclaration {
    name: "scheduler_network_traffic_prometheus_errors",
    help: "Prometheus queries of the NetworkTraffic plugin that failed or timed out",
    kind: MetricKind::Counter,
};

/// One series of an instant-query result.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: HashMap<String, String>,
    pub value: f64,
}

/// Where the plugin gets its measurements: Prometheus' instant query API in production.
pub trait MetricsSource: Send + Sync {
    /// Runs the PromQL instant query `query`, giving up after `timeout`.
    fn query(&self, query: &str, timeout: Duration) -> Result<Vec<Sample>, String>;
}

/// The PromQL query for one cycle.
pub fn query_for(device_name: &str, time_range: i64) -> String {
    format!(
        "sum_over_time(node_network_receive_bytes_total{{device=\"{}\"}}[{time_range}s])",
        device_name.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

/// The node a sample belongs to: its `nodename` label, else its `instance` without a `:port`.
fn sample_node(sample: &Sample) -> Option<&str> {
    if let Some(n) = sample.labels.get("nodename") {
        return Some(n);
    }
    let instance = sample.labels.get("instance")?;
    Some(match instance.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.is_empty() => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => instance,
    })
}

/// One cycle's measurements: received bytes per node (None: the query failed).
#[derive(Debug)]
struct Fetched {
    pod_uid: String,
    at: Instant,
    bytes: Option<HashMap<String, i64>>,
}

pub struct NetworkTraffic {
    source: Arc<dyn MetricsSource>,
    query: String,
    last: Mutex<Option<Arc<Fetched>>>,
    outage: AtomicBool,
    /// [`PROMETHEUS_ERRORS`].
    errors: Counter,
}

impl NetworkTraffic {
    pub fn new(args: &NetworkTrafficArgs, source: Arc<dyn MetricsSource>) -> NetworkTraffic {
        NetworkTraffic {
            source,
            query: query_for(&args.device_name, args.time_range),
            last: Mutex::new(None),
            outage: AtomicBool::new(false),
            errors: Counter::default(),
        }
    }

    /// Counts failed queries in `errors` (the handle's [`PROMETHEUS_ERRORS`]).
    pub fn with_error_counter(mut self, errors: Counter) -> NetworkTraffic {
        self.errors = errors;
        self
    }

    /// The measurements for `pod`'s cycle: fetched once, reused by every node's Score.
    fn measurements(&self, pod: &PodInfo) -> Arc<Fetched> {
        let mut last = self.last.lock();
        if let Some(f) = last.as_ref()
            && f.pod_uid == pod.uid()
            && f.at.elapsed() < QUERY_TIMEOUT * 2
        {
            return f.clone();
        }
        let bytes = match self.source.query(&self.query, QUERY_TIMEOUT) {
            Ok(samples) => {
                if self.outage.swap(false, Ordering::Relaxed) {
                    info!("NetworkTraffic: Prometheus answers again");
                }
                let mut by_node = HashMap::new();
                for s in &samples {
                    if let Some(node) = sample_node(s) {
                        let v = if s.value.is_finite() && s.value > 0.0 {
                            s.value as i64
                        } else {
                            0
                        };
                        *by_node.entry(node.to_string()).or_insert(0i64) += v;
                    }
                }
                debug!(query = %self.query, nodes = by_node.len(), "NetworkTraffic measurements");
                Some(by_node)
            }
            Err(e) => {
                self.errors.inc();
                if !self.outage.swap(true, Ordering::Relaxed) {
                    warn!(error = %e, "NetworkTraffic: querying Prometheus failed; nodes score 0 until it answers");
                }
                None
            }
        };
        let f = Arc::new(Fetched {
            pod_uid: pod.uid().to_string(),
            at: Instant::now(),
            bytes,
        });
        *last = Some(f.clone());
        f
    }
}

impl_plugin!(NetworkTraffic, names::NETWORK_TRAFFIC, [PreScore, Score]);

impl PreScorePlugin for NetworkTraffic {
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        self.measurements(pod);
        Status::success()
    }
}

impl ScorePlugin for NetworkTraffic {
    /// The bytes the node received (0 when unknown or when Prometheus failed).
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let f = self.measurements(pod);
        Ok(f.bytes
            .as_ref()
            .and_then(|b| b.get(node.name()))
            .copied()
            .unwrap_or(0))
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// `100 - score * 100 / max`; all 100 when max is 0.
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        for s in scores.iter_mut() {
            s.score = if max <= 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE - (i128::from(s.score) * 100 / i128::from(max)) as i64
            };
        }
        Status::success()
    }
}

/// The registration: PreScore and Score, and its metric.
pub fn registration() -> PluginRegistration {
    PluginRegistration::new(
        NetworkTraffic::EXTENSION_POINTS,
        crate::framework::args::decode::<NetworkTrafficArgs>,
        factory,
    )
    .with_metrics(&[PROMETHEUS_ERRORS])
}

pub fn factory(args: &Value, handle: &Handle) -> Result<Arc<dyn Plugin>, String> {
    let args: NetworkTrafficArgs =
        serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    let client = prometheus::PrometheusClient::new(&args.ip).map_err(|e| e.to_string())?;
    Ok(Arc::new(
        NetworkTraffic::new(&args, Arc::new(client))
            .with_error_counter(handle.metrics.counter(PROMETHEUS_ERRORS.name)),
    ))
}

/// Measures nothing: every node scores the same. For `ksched simulate`, which makes no network
/// calls besides reading the cluster.
struct NoMeasurements;

impl MetricsSource for NoMeasurements {
    fn query(&self, _query: &str, _timeout: Duration) -> Result<Vec<Sample>, String> {
        Ok(Vec::new())
    }
}

/// NetworkTraffic without Prometheus (see [`NoMeasurements`]).
pub fn offline_registration() -> PluginRegistration {
    PluginRegistration::new(
        NetworkTraffic::EXTENSION_POINTS,
        crate::framework::args::decode::<NetworkTrafficArgs>,
        |args, _handle| {
            let args: NetworkTrafficArgs =
                serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
            Ok(Arc::new(NetworkTraffic::new(
                &args,
                Arc::new(NoMeasurements),
            )))
        },
    )
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkTrafficArgs {
    /// The Prometheus server address.
    #[serde(alias = "prometheusAddress")]
    pub ip: String,
    /// The network interface to measure.
    #[serde(rename = "deviceName", alias = "networkInterface")]
    pub device_name: String,
    /// The measurement window in seconds.
    #[serde(rename = "timeRange", alias = "timeRangeInSeconds")]
    pub time_range: i64,
}

impl PluginArgs for NetworkTrafficArgs {
    const KIND: &'static str = "NetworkTrafficArgs";

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.ip.is_empty() {
            errs.push(required("ip", "the Prometheus address is needed"));
        }
        if self.time_range < 0 {
            errs.push(invalid(
                "timeRange",
                self.time_range,
                "must be greater than or equal to 0",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use serde_json::json;

    /// Answers with fixed samples (or an error), counting the queries.
    struct Fake {
        answer: Mutex<Result<Vec<Sample>, String>>,
        queries: Mutex<Vec<String>>,
    }

    impl MetricsSource for Fake {
        fn query(&self, query: &str, _timeout: Duration) -> Result<Vec<Sample>, String> {
            self.queries.lock().push(query.to_string());
            self.answer.lock().clone()
        }
    }

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: crate::framework::testing::string_map(labels),
            value,
        }
    }

    fn plugin(answer: Result<Vec<Sample>, String>) -> (NetworkTraffic, Arc<Fake>) {
        let fake = Arc::new(Fake {
            answer: Mutex::new(answer),
            queries: Mutex::new(Vec::new()),
        });
        let args = NetworkTrafficArgs {
            ip: "http://127.0.0.1:9090".into(),
            device_name: "eth0".into(),
            time_range: 60,
        };
        (NetworkTraffic::new(&args, fake.clone()), fake)
    }

    fn scores(p: &NetworkTraffic, pod: &PodInfo, nodes: &[&str]) -> Vec<i64> {
        let mut out: Vec<NodeScore> = nodes
            .iter()
            .map(|n| {
                let info = NodeBuilder::new(n).info(vec![]);
                NodeScore {
                    name: info.name_arc().clone(),
                    score: p.score(&CycleState::new(), pod, &info).unwrap(),
                }
            })
            .collect();
        assert!(
            p.normalize_score(&CycleState::new(), pod, &mut out)
                .is_success()
        );
        out.into_iter().map(|s| s.score).collect()
    }

    #[test]
    fn scores_quieter_nodes_higher_with_one_query_per_cycle() {
        let (p, fake) = plugin(Ok(vec![
            sample(&[("device", "eth0"), ("instance", "busy")], 200000.0),
            sample(&[("device", "eth0"), ("instance", "mid:9100")], 140000.0),
            sample(&[("instance", "10.0.0.9:9100"), ("nodename", "quiet")], 0.0),
        ]));
        let pod = PodBuilder::new("p").info();
        // The seed's example: 140000 of max 200000 scores 30; unknown nodes score as 0 bytes.
        assert_eq!(
            scores(&p, &pod, &["busy", "mid", "quiet", "unknown"]),
            vec![0, 30, 100, 100]
        );
        assert_eq!(
            fake.queries.lock().as_slice(),
            [r#"sum_over_time(node_network_receive_bytes_total{device="eth0"}[60s])"#]
        );
        // The next pod's cycle asks again.
        let pod2 = PodBuilder::new("p2").info();
        p.pre_score(&mut CycleState::new(), &pod2, &Snapshot::new(), &[]);
        scores(&p, &pod2, &["busy"]);
        assert_eq!(fake.queries.lock().len(), 2);
    }

    #[test]
    fn all_zero_scores_100() {
        let (p, _) = plugin(Ok(vec![]));
        let pod = PodBuilder::new("p").info();
        assert_eq!(scores(&p, &pod, &["a", "b"]), vec![100, 100]);
    }

    #[test]
    fn prometheus_down_scores_zero_and_counts() {
        let (p, fake) = plugin(Err("connection refused".into()));
        let errors = Counter::default();
        let p = p.with_error_counter(errors.clone());
        let pod = PodBuilder::new("p").info();
        assert_eq!(scores(&p, &pod, &["a", "b"]), vec![100, 100]);
        assert!(p.outage.load(Ordering::Relaxed));
        let pod2 = PodBuilder::new("p2").info();
        scores(&p, &pod2, &["a"]);
        assert_eq!(errors.get(), 2);
        // Recovery clears the outage.
        *fake.answer.lock() = Ok(vec![sample(&[("instance", "a")], 10.0)]);
        let pod3 = PodBuilder::new("p3").info();
        assert_eq!(scores(&p, &pod3, &["a", "b"]), vec![0, 100]);
        assert!(!p.outage.load(Ordering::Relaxed));
    }

    #[test]
    fn query_escapes_the_device() {
        assert_eq!(
            query_for("e\"x", 5),
            r#"sum_over_time(node_network_receive_bytes_total{device="e\"x"}[5s])"#
        );
    }

    #[test]
    fn factory_rejects_https() {
        let args = json!({"ip": "https://p:9090", "deviceName": "eth0", "timeRange": 60});
        let (h, _) = crate::framework::testing::handle();
        assert!(factory(&args, &h).is_err());
        let args = json!({"ip": "http://p:9090", "deviceName": "eth0", "timeRange": 60});
        assert!(factory(&args, &h).is_ok());
    }

    #[test]
    fn both_spellings() {
        let want = json!({"ip": "http://10.0.0.4:9090", "deviceName": "eth0", "timeRange": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&want)), Ok(want.clone()));
        let published = json!({"prometheusAddress": "http://10.0.0.4:9090", "networkInterface": "eth0", "timeRangeInSeconds": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&published)), Ok(want));
        assert!(decode::<NetworkTrafficArgs>(Some(&json!({"ip": "x", "address": "y"}))).is_err());
        assert_eq!(
            decode::<NetworkTrafficArgs>(None).unwrap_err()[0].path,
            "ip"
        );
    }
}
