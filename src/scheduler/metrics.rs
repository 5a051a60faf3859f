//! Prometheus metrics under upstream kube-scheduler's names, so existing dashboards and alerts work.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
pub struct ExtensionPointLabels {
    pub extension_point: String,
    pub status: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

fn latency_histogram() -> Histogram {
    // upstream: exponential buckets from 1ms, factor 2, 15 buckets.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn extension_point_histogram() -> Histogram {
    // upstream: exponential buckets from 0.1ms, factor 2, 12 buckets.
    Histogram::new(exponential_buckets(0.0001, 2.0, 12))
}

/// Every metric the scheduler exports.
pub struct Metrics {
    pub registry: Registry,
    pub schedule_attempts: Family<AttemptLabels, Counter>,
    pub scheduling_attempt_duration: Family<AttemptLabels, Histogram, fn() -> Histogram>,
    pub pending_pods: Family<QueueLabels, Gauge>,
    pub extension_point_duration: Family<ExtensionPointLabels, Histogram, fn() -> Histogram>,
    pub leader_election_master_status: Family<LeaderLabels, Gauge>,
    /// Failed Prometheus queries of the NetworkTraffic plugin (scheduling went on with score 0).
    pub network_traffic_prometheus_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let schedule_attempts = Family::<AttemptLabels, Counter>::default();
        // prometheus-client appends `_total` to counters.
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result",
            schedule_attempts.clone(),
        );
        let scheduling_attempt_duration =
            Family::<AttemptLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            scheduling_attempt_duration.clone(),
        );
        let pending_pods = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type",
            pending_pods.clone(),
        );
        let extension_point_duration =
            Family::<ExtensionPointLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                extension_point_histogram,
            );
        registry.register(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point",
            extension_point_duration.clone(),
        );
        let leader_election_master_status = Family::<LeaderLabels, Gauge>::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            leader_election_master_status.clone(),
        );
        let network_traffic_prometheus_errors = Counter::default();
        registry.register(
            "scheduler_network_traffic_prometheus_errors",
            "Prometheus queries of the NetworkTraffic plugin that failed or timed out",
            network_traffic_prometheus_errors.clone(),
        );
        Self {
            registry,
            network_traffic_prometheus_errors,
            schedule_attempts,
            scheduling_attempt_duration,
            pending_pods,
            extension_point_duration,
            leader_election_master_status,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        crate::serving::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        m.pending_pods.get_or_create(&queue).set(2);
        let lease = LeaderLabels {
            name: "ksched-p".into(),
        };
        m.leader_election_master_status.get_or_create(&lease).set(1);
        let ep = ExtensionPointLabels {
            extension_point: "Bind".into(),
            status: "Success".into(),
            profile: "p".into(),
        };
        m.extension_point_duration
            .get_or_create(&ep)
            .observe(0.0001);
        let text = m.encode();
        for line in [
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="p"} 1"#,
            r#"scheduler_scheduling_attempt_duration_seconds_count{result="scheduled",profile="p"} 1"#,
            r#"scheduler_pending_pods{queue="active"} 2"#,
            r#"leader_election_master_status{name="ksched-p"} 1"#,
            r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",status="Success",profile="p"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
