//! NetworkTraffic, the Prometheus-scored plugin of seed 003: nodes that received fewer bytes on
//! `deviceName` over the last `timeRange` seconds score higher.
//!
//! Score is each node's `sum_over_time(node_network_receive_bytes_total{device="<deviceName>"}[<timeRange>s])`,
//! the series matched to the node by its `instance` label (equal to the node name, or to it with a
//! `:port` suffix; a `nodename` label, as node_exporter's `node_uname_info` join gives, wins).
//! NormalizeScore is `100 - score * 100 / max` (all 100 when max is 0).
//!
//! Args: the seed's `ip`, `deviceName`, `timeRange`, or the later published `prometheusAddress`,
//! `networkInterface`, `timeRangeInSeconds` (not both at once); the normalized form uses the
//! seed's. Our own `refreshPeriodSeconds` (default 10) sets how often Prometheus is asked.
//!
//! The scheduling cycle never waits on Prometheus: the plugin's [`refresher::Refresher`], a
//! background task the scheduler starts, asks once per refresh period for every node at once and
//! keeps the answer in memory; PreScore (when enabled) and Score read it. Data older than
//! [`STALE_AFTER_PERIODS`] periods, or none yet, scores every node the same (as a node without
//! data: 0 bytes), so a slow or unreachable Prometheus never stalls or skews scheduling. The outage
//! is logged once (and its end); the scheduler exports the data's age and the failed queries
//! (`ksched_network_traffic_data_age_seconds`, `ksched_network_traffic_query_errors_total`).

pub mod prometheus;
pub mod refresher;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid, required};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, NodeScore, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::{Handle, PluginRegistration};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};
use refresher::{Latest, Measurements, Refresher, Telemetry};

/// `refreshPeriodSeconds` when the args do not set it.
pub const DEFAULT_REFRESH_PERIOD_SECONDS: i64 = 10;

/// Measurements older than this many refresh periods are stale: nodes score the same.
pub const STALE_AFTER_PERIODS: u32 = 3;

/// One series of an instant-query result.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: HashMap<String, String>,
    pub value: f64,
}

/// Where the refresher gets its measurements: Prometheus' instant query API in production.
#[async_trait]
pub trait MetricsSource: Send + Sync {
    /// Runs the PromQL instant query `query`, giving up after `timeout`.
    async fn query(&self, query: &str, timeout: Duration) -> Result<Vec<Sample>, String>;
}

/// The PromQL query the refresher runs.
pub fn query_for(device_name: &str, time_range: i64) -> String {
    format!(
        "sum_over_time(node_network_receive_bytes_total{{device=\"{}\"}}[{time_range}s])",
        device_name.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

/// The cycle state PreScore leaves for Score: the measurements of this cycle (None: neutral).
const STATE_KEY: &str = "PreScoreNetworkTraffic";

pub struct NetworkTraffic {
    latest: Latest,
    /// Older measurements are stale.
    max_age: Duration,
}

impl NetworkTraffic {
    /// The plugin, reading what `latest` holds.
    pub fn new(args: &NetworkTrafficArgs, latest: Latest) -> NetworkTraffic {
        NetworkTraffic {
            latest,
            max_age: args.refresh_period() * STALE_AFTER_PERIODS,
        }
    }

    /// The measurements to score with: the latest, unless stale.
    fn current(&self) -> Option<Arc<Measurements>> {
        self.latest
            .read()
            .as_ref()
            .filter(|m| m.at.elapsed() <= self.max_age)
            .cloned()
    }
}

impl_plugin!(NetworkTraffic, names::NETWORK_TRAFFIC, [PreScore, Score]);

impl PreScorePlugin for NetworkTraffic {
    /// Takes this cycle's measurements, so every node is scored from the same ones.
    fn pre_score(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        _: &Snapshot,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        state.write(STATE_KEY, self.current());
        Status::success()
    }
}

impl ScorePlugin for NetworkTraffic {
    /// The bytes the node received (0 when unknown, stale or missing).
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // Without PreScore (seed 003 enables Score only) each node reads the latest.
        let m = match state.read::<Option<Arc<Measurements>>>(STATE_KEY) {
            Some(m) => m.clone(),
            None => self.current(),
        };
        Ok(m.and_then(|m| m.bytes.get(node.name()).copied())
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

/// The registration: PreScore and Score.
pub fn registration() -> PluginRegistration {
    PluginRegistration::new(
        NetworkTraffic::EXTENSION_POINTS,
        crate::framework::args::decode::<NetworkTrafficArgs>,
        factory,
    )
}

/// The plugin, and its refresher registered with the handle's background tasks.
pub fn factory(args: &Value, handle: &Handle) -> Result<Arc<dyn Plugin>, String> {
    let args: NetworkTrafficArgs =
        serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    let client = prometheus::PrometheusClient::new(&args.ip).map_err(|e| e.to_string())?;
    let latest = Latest::default();
    let refresher = Refresher::new(
        Arc::new(client),
        query_for(&args.device_name, args.time_range),
        args.refresh_period(),
        latest.clone(),
        handle.profile_name.to_string(),
        handle.listers.plugin_state.get_or_default::<Telemetry>(),
    );
    handle.tasks.register(Arc::new(refresher));
    Ok(Arc::new(NetworkTraffic::new(&args, latest)))
}

/// NetworkTraffic without Prometheus: no refresher, so every node scores the same. For `ksched
/// simulate`, which makes no network calls besides reading the cluster.
pub fn offline_registration() -> PluginRegistration {
    PluginRegistration::new(
        NetworkTraffic::EXTENSION_POINTS,
        crate::framework::args::decode::<NetworkTrafficArgs>,
        |args, _handle| {
            let args: NetworkTrafficArgs =
                serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
            Ok(Arc::new(NetworkTraffic::new(&args, Latest::default())))
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
    /// How often Prometheus is asked, in seconds.
    #[serde(rename = "refreshPeriodSeconds")]
    pub refresh_period_seconds: Option<i64>,
}

impl NetworkTrafficArgs {
    /// `refreshPeriodSeconds` as a duration (the default when unset or invalid).
    pub fn refresh_period(&self) -> Duration {
        let secs = self
            .refresh_period_seconds
            .filter(|s| *s > 0)
            .unwrap_or(DEFAULT_REFRESH_PERIOD_SECONDS);
        Duration::from_secs(u64::try_from(secs).unwrap_or(10))
    }
}

impl PluginArgs for NetworkTrafficArgs {
    const KIND: &'static str = "NetworkTrafficArgs";

    fn set_defaults(&mut self) {
        self.refresh_period_seconds
            .get_or_insert(DEFAULT_REFRESH_PERIOD_SECONDS);
    }

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
        if let Some(p) = self.refresh_period_seconds
            && p <= 0
        {
            errs.push(invalid(
                "refreshPeriodSeconds",
                p,
                "must be greater than 0 (how often Prometheus is asked, in seconds)",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use parking_lot::Mutex;
    use serde_json::json;

    use super::refresher::ProfileTelemetry;
    use super::*;
    use crate::framework::args::decode;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    /// Answers with fixed samples (or an error), recording the queries.
    struct Fake {
        answer: Mutex<Result<Vec<Sample>, String>>,
        queries: Mutex<Vec<(String, Duration)>>,
    }

    #[async_trait]
    impl MetricsSource for Fake {
        async fn query(&self, query: &str, timeout: Duration) -> Result<Vec<Sample>, String> {
            self.queries.lock().push((query.to_string(), timeout));
            self.answer.lock().clone()
        }
    }

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: crate::framework::testing::string_map(labels),
            value,
        }
    }

    fn args() -> NetworkTrafficArgs {
        NetworkTrafficArgs {
            ip: "http://127.0.0.1:9090".into(),
            device_name: "eth0".into(),
            time_range: 60,
            refresh_period_seconds: Some(5),
        }
    }

    /// Measurements taken `age` ago.
    fn measured(bytes: &[(&str, i64)], age: Duration) -> Latest {
        let at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        let bytes = bytes.iter().map(|(n, b)| (n.to_string(), *b)).collect();
        Arc::new(parking_lot::RwLock::new(Some(Arc::new(Measurements {
            at,
            bytes,
        }))))
    }

    /// Normalized scores of `nodes` for one cycle (with PreScore when `pre_score`).
    fn scores(p: &NetworkTraffic, nodes: &[&str], pre_score: bool) -> Vec<i64> {
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        if pre_score {
            assert!(
                p.pre_score(&mut state, &pod, &Snapshot::new(), &[])
                    .is_success()
            );
        }
        let mut out: Vec<NodeScore> = nodes
            .iter()
            .map(|n| {
                let info = NodeBuilder::new(n).info(vec![]);
                NodeScore {
                    name: info.name_arc().clone(),
                    score: p.score(&state, &pod, &info).unwrap(),
                }
            })
            .collect();
        assert!(p.normalize_score(&state, &pod, &mut out).is_success());
        out.into_iter().map(|s| s.score).collect()
    }

    #[test]
    fn quieter_nodes_score_higher() {
        let latest = measured(
            &[("busy", 200000), ("mid", 140000), ("quiet", 0)],
            Duration::ZERO,
        );
        let p = NetworkTraffic::new(&args(), latest);
        // The seed's example: 140000 of max 200000 scores 30; unknown nodes score as 0 bytes.
        for pre_score in [true, false] {
            assert_eq!(
                scores(&p, &["busy", "mid", "quiet", "unknown"], pre_score),
                vec![0, 30, 100, 100]
            );
        }
    }

    #[test]
    fn missing_or_stale_measurements_score_every_node_the_same() {
        let none = NetworkTraffic::new(&args(), Latest::default());
        assert_eq!(scores(&none, &["a", "b"], true), vec![100, 100]);
        // Period 5 s: stale after 15 s.
        let fresh = measured(&[("a", 10)], Duration::from_secs(14));
        assert_eq!(
            scores(&NetworkTraffic::new(&args(), fresh), &["a", "b"], true),
            vec![0, 100]
        );
        let stale = measured(&[("a", 10)], Duration::from_secs(16));
        for pre_score in [true, false] {
            assert_eq!(
                scores(
                    &NetworkTraffic::new(&args(), stale.clone()),
                    &["a", "b"],
                    pre_score
                ),
                vec![100, 100]
            );
        }
    }

    #[test]
    fn a_cycle_scores_with_the_measurements_pre_score_took() {
        let latest = measured(&[("a", 10)], Duration::ZERO);
        let p = NetworkTraffic::new(&args(), latest.clone());
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        p.pre_score(&mut state, &pod, &Snapshot::new(), &[]);
        // A refresh lands mid-cycle.
        *latest.write() = Some(Arc::new(Measurements {
            at: Instant::now(),
            bytes: [("b".to_string(), 10)].into(),
        }));
        let a = NodeBuilder::new("a").info(vec![]);
        let b = NodeBuilder::new("b").info(vec![]);
        assert_eq!(p.score(&state, &pod, &a), Ok(10));
        assert_eq!(p.score(&state, &pod, &b), Ok(0));
    }

    fn refresher(answer: Result<Vec<Sample>, String>) -> (Refresher, Arc<Fake>, Arc<Telemetry>) {
        let fake = Arc::new(Fake {
            answer: Mutex::new(answer),
            queries: Mutex::new(Vec::new()),
        });
        let telemetry = Arc::new(Telemetry::default());
        let r = Refresher::new(
            fake.clone(),
            query_for("eth0", 60),
            Duration::from_secs(5),
            Latest::default(),
            "p1".into(),
            telemetry.clone(),
        );
        (r, fake, telemetry)
    }

    #[tokio::test]
    async fn the_refresher_keeps_the_latest_answer_per_node() {
        let (r, fake, telemetry) = refresher(Ok(vec![
            sample(&[("device", "eth0"), ("instance", "busy")], 200000.0),
            sample(&[("device", "eth0"), ("instance", "mid:9100")], 140000.0),
            sample(&[("instance", "10.0.0.9:9100"), ("nodename", "quiet")], 0.0),
            sample(&[("instance", "[fd00::1]:9100")], -5.0),
        ]));
        assert_eq!(telemetry.profiles()["p1"], ProfileTelemetry::default());
        r.refresh().await;
        let m = r.latest.read().clone().expect("measurements");
        let mut bytes: Vec<(String, i64)> = m.bytes.clone().into_iter().collect();
        bytes.sort();
        assert_eq!(
            bytes,
            [
                ("busy".to_string(), 200000),
                ("fd00::1".to_string(), 0),
                ("mid".to_string(), 140000),
                ("quiet".to_string(), 0)
            ]
        );
        // One query for every node, given the period to answer.
        assert_eq!(
            *fake.queries.lock(),
            [(
                r#"sum_over_time(node_network_receive_bytes_total{device="eth0"}[60s])"#
                    .to_string(),
                Duration::from_secs(5)
            )]
        );
        assert_eq!(telemetry.profiles()["p1"].refreshed_at, Some(m.at));
    }

    #[tokio::test]
    async fn a_failed_query_keeps_the_data_and_counts() {
        let (r, fake, telemetry) = refresher(Ok(vec![sample(&[("instance", "a")], 10.0)]));
        r.refresh().await;
        let before = r.latest.read().clone().expect("measurements");
        *fake.answer.lock() = Err("connection refused".into());
        r.refresh().await;
        r.refresh().await;
        // The last answer stays until it goes stale; the failures are counted.
        let after = r.latest.read().clone().expect("measurements");
        assert!(Arc::ptr_eq(&before, &after));
        let t = &telemetry.profiles()["p1"];
        assert_eq!(t.query_errors, 2);
        assert_eq!(t.refreshed_at, Some(before.at));
        // Recovery replaces it.
        *fake.answer.lock() = Ok(vec![sample(&[("instance", "b")], 1.0)]);
        r.refresh().await;
        let recovered = r.latest.read().clone().expect("measurements");
        assert_eq!(recovered.bytes.get("b"), Some(&1));
    }

    #[test]
    fn query_escapes_the_device() {
        assert_eq!(
            query_for("e\"x", 5),
            r#"sum_over_time(node_network_receive_bytes_total{device="e\"x"}[5s])"#
        );
    }

    #[test]
    fn the_factory_registers_a_refresher_and_rejects_https() {
        let (h, _) = crate::framework::testing::handle();
        let args = json!({"ip": "https://p:9090", "deviceName": "eth0", "timeRange": 60});
        assert!(factory(&args, &h).is_err());
        let args = json!({"ip": "http://p:9090", "deviceName": "eth0", "timeRange": 60});
        assert!(factory(&args, &h).is_ok());
        assert!(
            h.tasks
                .names()
                .contains(&"NetworkTraffic refresher".to_string())
        );
        // Simulation's version asks nobody.
        let (h, _) = crate::framework::testing::handle();
        assert!((offline_registration().factory)(&args, &h).is_ok());
        assert_eq!(h.tasks.names(), ["API dispatcher"]);
    }

    #[test]
    fn both_spellings_and_the_refresh_period() {
        let want = json!({"ip": "http://10.0.0.4:9090", "deviceName": "eth0", "timeRange": 60, "refreshPeriodSeconds": 10});
        let seed = json!({"ip": "http://10.0.0.4:9090", "deviceName": "eth0", "timeRange": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&seed)), Ok(want.clone()));
        let published = json!({"prometheusAddress": "http://10.0.0.4:9090", "networkInterface": "eth0", "timeRangeInSeconds": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&published)), Ok(want));
        assert!(decode::<NetworkTrafficArgs>(Some(&json!({"ip": "x", "address": "y"}))).is_err());
        assert_eq!(
            decode::<NetworkTrafficArgs>(None).unwrap_err()[0].path,
            "ip"
        );
        let zero = json!({"ip": "http://p:9090", "deviceName": "eth0", "refreshPeriodSeconds": 0});
        let errs = decode::<NetworkTrafficArgs>(Some(&zero)).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "refreshPeriodSeconds");
        assert!(
            errs[0].to_string().contains("must be greater than 0"),
            "{}",
            errs[0]
        );
    }
}
