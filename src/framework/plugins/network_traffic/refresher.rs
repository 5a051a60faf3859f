//! NetworkTraffic's refresher: a background task (started by the scheduler, never by a cycle) that
//! asks Prometheus for every node's received bytes once per refresh period and keeps the answer
//! in memory, where PreScore and Score read it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use super::{MetricsSource, Sample};
use crate::framework::background::{BackgroundTask, TaskContext};

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

/// What the scheduler exports about NetworkTraffic's refreshers, per profile (one value per
/// scheduler, in `Listers::plugin_state`).
#[derive(Debug, Default)]
pub struct Telemetry {
    profiles: Mutex<BTreeMap<String, ProfileTelemetry>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileTelemetry {
    /// Failed or timed-out queries since the refresher started.
    pub query_errors: u64,
    /// When the data the plugin scores with was fetched (None: never).
    pub refreshed_at: Option<Instant>,
}

impl Telemetry {
    /// Every profile's numbers.
    pub fn profiles(&self) -> BTreeMap<String, ProfileTelemetry> {
        self.profiles.lock().clone()
    }

    /// A refresher of `profile` exists (no data yet).
    pub fn register(&self, profile: &str) {
        self.update(profile, |_| {});
    }

    /// `profile`'s refresher got an answer at `at`.
    pub fn refreshed(&self, profile: &str, at: Instant) {
        self.update(profile, |t| t.refreshed_at = Some(at));
    }

    /// `profile`'s refresher got no answer.
    pub fn query_failed(&self, profile: &str) {
        self.update(profile, |t| t.query_errors += 1);
    }

    fn update(&self, profile: &str, f: impl FnOnce(&mut ProfileTelemetry)) {
        f(self.profiles.lock().entry(profile.to_string()).or_default());
    }
}

/// Queries Prometheus every `period` and stores what it answers in `latest`.
pub struct Refresher {
    pub(super) source: Arc<dyn MetricsSource>,
    pub(super) query: String,
    pub(super) period: Duration,
    pub(super) latest: Latest,
    pub(super) profile: String,
    pub(super) telemetry: Arc<Telemetry>,
    /// None before the first answer; then whether the last query failed.
    outage: Mutex<Option<bool>>,
}

impl Refresher {
    pub fn new(
        source: Arc<dyn MetricsSource>,
        query: String,
        period: Duration,
        latest: Latest,
        profile: String,
        telemetry: Arc<Telemetry>,
    ) -> Refresher {
        telemetry.register(&profile);
        Refresher {
            source,
            query,
            period,
            latest,
            profile,
            telemetry,
            outage: Mutex::new(None),
        }
    }

    /// One query (waiting at most one period); the outcome is stored, counted and logged once
    /// per change (first answer, outage, recovery).
    pub async fn refresh(&self) {
        match self.source.query(&self.query, self.period).await {
            Ok(samples) => {
                let m = Arc::new(Measurements::from_samples(&samples, Instant::now()));
                debug!(query = %self.query, nodes = m.bytes.len(), "NetworkTraffic measurements");
                self.telemetry.refreshed(&self.profile, m.at);
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
            }
            Err(e) => {
                self.telemetry.query_failed(&self.profile);
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

    /// Reads only: it runs on standby replicas too, so a new leader scores with fresh data.
    fn run(self: Arc<Self>, _ctx: TaskContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut tick = tokio::time::interval(self.period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                self.refresh().await;
            }
        })
    }
}
