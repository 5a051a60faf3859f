//! NetworkTraffic's refresher: a background task (started by the scheduler, never by a cycle) that
//! asks Prometheus for every node's received bytes once per refresh period and keeps the answer
//! in memory, where PreScore and Score read it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use super::{MetricsSource, Sample};
use crate::framework::background::{BackgroundTask, TaskContext};
use crate::framework::registry::{Counter, FloatGauge};

/// Received bytes per node, as measured at `at`.
#[derive(Debug)]
pub struct Measurements {
    pub at: Instant,
    pub bytes: HashMap<String, i64>,
}

impl Measurements {
    /// Sums the samples per node (a node's several series add up; negative or non-finite values
    /// count as 0).
    pub fn from_samples(samples: &[Sample], at: Instant) -> Measurements {
        let mut bytes = HashMap::new();
        for s in samples {
            if let Some(node) = sample_node(s) {
                let v = if s.value.is_finite() && s.value > 0.0 {
                    s.value as i64
                } else {
                    0
                };
                *bytes.entry(node.to_string()).or_insert(0i64) += v;
            }
        }
        Measurements { at, bytes }
    }
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

/// The latest measurements, shared by the refresher (writer) and the plugin (reader).
pub type Latest = Arc<RwLock<Option<Arc<Measurements>>>>;

/// How often the data's age is published between queries.
const AGE_UPDATE_PERIOD: Duration = Duration::from_secs(1);

/// What the refresher exports, for its profile: the failed queries and the age of the data the
/// plugin scores with (its declared metrics, from the handle).
#[derive(Debug, Clone, Default)]
pub struct RefresherMetrics {
    /// `ksched_network_traffic_query_errors_total{profile}`.
    pub query_errors: Counter,
    /// `ksched_network_traffic_data_age_seconds{profile}`: +Inf before the first answer.
    pub data_age: FloatGauge,
}

/// Queries Prometheus every `period` and stores what it answers in `latest`.
pub struct Refresher {
    pub(super) source: Arc<dyn MetricsSource>,
    pub(super) query: String,
    pub(super) period: Duration,
    pub(super) latest: Latest,
    pub(super) metrics: RefresherMetrics,
    /// None before the first answer; then whether the last query failed.
    outage: Mutex<Option<bool>>,
}

impl Refresher {
    pub fn new(
        source: Arc<dyn MetricsSource>,
        query: String,
        period: Duration,
        latest: Latest,
        metrics: RefresherMetrics,
    ) -> Refresher {
        let refresher = Refresher {
            source,
            query,
            period,
            latest,
            metrics,
            outage: Mutex::new(None),
        };
        refresher.publish_age();
        refresher
    }

    /// Sets the data-age gauge: how old the latest answer is (+Inf: none yet).
    pub fn publish_age(&self) {
        let age = self
            .latest
            .read()
            .as_ref()
            .map_or(f64::INFINITY, |m| m.at.elapsed().as_secs_f64());
        self.metrics.data_age.set(age);
    }

    /// One query (waiting at most one period); the outcome is stored, counted and logged once
    /// per change (first answer, outage, recovery).
    pub async fn refresh(&self) {
        match self.source.query(&self.query, self.period).await {
            Ok(samples) => {
                let m = Arc::new(Measurements::from_samples(&samples, Instant::now()));
                debug!(query = %self.query, nodes = m.bytes.len(), "NetworkTraffic measurements");
                match self.outage.lock().replace(false) {
                    None => {
                        info!(
                            nodes = m.bytes.len(),
                            "NetworkTraffic: measurements from Prometheus"
                        )
                    }
                    Some(true) => info!("NetworkTraffic: Prometheus answers again"),
                    Some(false) => {}
                }
                *self.latest.write() = Some(m);
                self.publish_age();
            }
            Err(e) => {
                self.metrics.query_errors.inc();
                if self.outage.lock().replace(true) != Some(true) {
                    warn!(error = %e, "NetworkTraffic: querying Prometheus failed; nodes score the same while its data is missing or stale");
                }
            }
        }
    }
}

impl BackgroundTask for Refresher {
    fn name(&self) -> &str {
        "NetworkTraffic refresher"
    }

    /// Reads only: it runs on standby replicas too, so a new leader scores with fresh data. The
    /// data's age is published every second, also while a query waits for its answer.
    fn run(self: Arc<Self>, _ctx: TaskContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let queries = async {
                let mut tick = tokio::time::interval(self.period);
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    self.refresh().await;
                }
            };
            let ages = async {
                let mut tick = tokio::time::interval(AGE_UPDATE_PERIOD);
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    self.publish_age();
                }
            };
            futures::future::join(queries, ages).await;
        })
    }
}
