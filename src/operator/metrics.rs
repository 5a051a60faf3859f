//! The operator's Prometheus metrics, under the names controller-runtime operators export
//! (`controller_runtime_reconcile_*`, `controller_runtime_active_workers`) and client-go's
//! `leader_election_master_status`, so existing operator dashboards and alerts work; and
//! `ksched_operator_queue_depth`, the objects still waiting for the operator; and the state of each
//! SchedulerProfile and LeafClusterPolicy as their status says it (`ksched_scheduler_profile_*`,
//! `ksched_leaf_cluster_policy_ready`), which the chart's alerts read. Also the process's
//! and the API clients' metrics (as the scheduler's), and the scheduler metrics of the Embedded
//! profiles running inside the operator, each sample labelled `profile="<name>"`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::status::{READY, condition};
use crate::api::scheduler_profile::ProfileMode;
use crate::api::{SchedulerProfile, SchedulerProfileStatus};
use crate::emulation::Minor;
use crate::infra::metrics::{register, register_process_metrics};
use crate::scheduler::metrics::Metrics;

/// Controller names in the `controller` label.
pub(crate) const SCHEDULER_PROFILE: &str = "schedulerprofile";
pub(crate) const LEAF_CLUSTER_POLICY: &str = "leafclusterpolicy";
/// The `name` of the operator's entry in `leader_election_master_status`.
pub(crate) const LEADER_NAME: &str = "ksched-operator";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileReadyLabels {
    pub profile: String,
    /// The Ready condition's reason (`Running`, `NoLeader`, `InvalidConfiguration`, ...).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyReadyLabels {
    pub policy: String,
    /// The Ready condition's reason (`TaintsApplied`, `Conflict`, ...).
    pub reason: String,
}

/// What a profile's status says, as its gauges export it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileState {
    pub ready: bool,
    pub reason: String,
    pub leader: bool,
    /// Scheduler replicas the spec asks for (0 when suspended).
    pub desired_replicas: i32,
    pub ready_replicas: i32,
    pub pending_pods: i32,
}

impl ProfileState {
    /// The state of `profile` once `status` is written.
    pub(crate) fn of(profile: &SchedulerProfile, status: &SchedulerProfileStatus) -> Self {
        let ready = condition(&status.conditions, READY);
        let spec = &profile.spec;
        ProfileState {
            ready: ready.is_some_and(|c| c.status == "True"),
            reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
            leader: status.leader.is_some(),
            desired_replicas: match (spec.suspend, spec.mode) {
                (true, _) => 0,
                (false, ProfileMode::Embedded) => spec.replicas.min(1),
                (false, ProfileMode::Deployment) => spec.replicas,
            },
            ready_replicas: status.ready_replicas.unwrap_or(0),
            pending_pods: status.pending_pods.unwrap_or(0),
        }
    }
}

fn reconcile_histogram() -> Histogram {
    // controller-runtime's buckets span 5ms to 60s; exponential from 5ms by 2 reaches 40s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Every metric the operator exports.
pub struct OperatorMetrics {
    registry: Registry,
    /// The metrics of the Embedded schedulers, by profile.
    /// Per Embedded profile: the minor its scheduler emulates, and its metrics.
    embedded: Mutex<BTreeMap<String, (Minor, Arc<Metrics>)>>,
    pub reconcile_total: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    pub active_workers: Family<ControllerLabels, Gauge>,
    pub queue_depth: Family<ControllerLabels, Gauge>,
    pub leader: Family<LeaderLabels, Gauge>,
    pub profile_ready: Family<ProfileReadyLabels, Gauge>,
    pub profile_leader: Family<ProfileLabels, Gauge>,
    pub profile_desired_replicas: Family<ProfileLabels, Gauge>,
    pub profile_ready_replicas: Family<ProfileLabels, Gauge>,
    pub profile_pending_pods: Family<ProfileLabels, Gauge>,
    pub policy_ready: Family<PolicyReadyLabels, Gauge>,
    /// The Ready reason last exported per profile and per policy: its series goes when the
    /// reason changes.
    profile_reasons: Mutex<BTreeMap<String, String>>,
    policy_reasons: Mutex<BTreeMap<String, String>>,
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for OperatorMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorMetrics").finish_non_exhaustive()
    }
}

impl OperatorMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        register_process_metrics(&mut registry);
        let r = &mut registry;
        Self {
            embedded: Mutex::new(BTreeMap::new()),
            reconcile_total: register(
                r,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            reconcile_errors: register(
                r,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            reconcile_time: register(
                r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(reconcile_histogram),
            ),
            active_workers: register(
                r,
                "controller_runtime_active_workers",
                "Number of reconciliations running now per controller",
                Family::default(),
            ),
            queue_depth: register(
                r,
                "ksched_operator_queue_depth",
                "Objects whose latest generation the operator has not reconciled yet, or whose deletion waits for its finalizer",
                Family::default(),
            ),
            leader: register(
                r,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
                Family::default(),
            ),
            profile_ready: register(
                r,
                "ksched_scheduler_profile_ready",
                "1 when the SchedulerProfile's Ready condition is True; reason is the condition's reason",
                Family::default(),
            ),
            profile_leader: register(
                r,
                "ksched_scheduler_profile_leader",
                "1 when a scheduler of the SchedulerProfile holds its Lease (renewed within its duration)",
                Family::default(),
            ),
            profile_desired_replicas: register(
                r,
                "ksched_scheduler_profile_desired_replicas",
                "Scheduler replicas the SchedulerProfile asks for (0 when suspended; 1 for a running Embedded profile)",
                Family::default(),
            ),
            profile_ready_replicas: register(
                r,
                "ksched_scheduler_profile_ready_replicas",
                "Scheduler replicas of the SchedulerProfile that are ready",
                Family::default(),
            ),
            profile_pending_pods: register(
                r,
                "ksched_scheduler_profile_pending_pods",
                "Pods Pending with the SchedulerProfile's scheduler name and no node",
                Family::default(),
            ),
            policy_ready: register(
                r,
                "ksched_leaf_cluster_policy_ready",
                "1 when the LeafClusterPolicy's Ready condition is True; reason is the condition's reason (Conflict, ForeignTaint, ...)",
                Family::default(),
            ),
            profile_reasons: Mutex::new(BTreeMap::new()),
            policy_reasons: Mutex::new(BTreeMap::new()),
            registry,
        }
    }

    /// Records whether this process leads (reconciles).
    pub fn set_leader(&self, leading: bool) {
        self.leader
            .get_or_create(&LeaderLabels {
                name: LEADER_NAME.into(),
            })
            .set(i64::from(leading));
    }

    /// Runs one reconciliation of `controller`, counting it, its result and its duration.
    pub async fn reconcile<T, E>(
        &self,
        controller: &str,
        reconciliation: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        let active = self.active_workers.get_or_create(&labels).clone();
        active.inc();
        let start = Instant::now();
        let out = reconciliation.await;
        active.dec();
        self.reconcile_time
            .get_or_create(&labels)
            .observe(start.elapsed().as_secs_f64());
        let result = if out.is_ok() { "success" } else { "error" };
        self.reconcile_total
            .get_or_create(&ReconcileLabels {
                controller: controller.to_string(),
                result: result.into(),
            })
            .inc();
        if out.is_err() {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
        out
    }

    /// `reconcile` (a kube-runtime reconciler function) counted as [`Self::reconcile`] does.
    pub fn instrument<K, C, T, E, F, Fut>(
        self: &Arc<Self>,
        controller: &'static str,
        reconcile: F,
    ) -> impl FnMut(Arc<K>, Arc<C>) -> futures::future::BoxFuture<'static, Result<T, E>>
    + use<K, C, T, E, F, Fut>
    where
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        K: Send + Sync + 'static,
        C: Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let metrics = self.clone();
        let reconcile = Arc::new(reconcile);
        move |obj, ctx| {
            let metrics = metrics.clone();
            let reconcile = reconcile.clone();
            Box::pin(async move { metrics.reconcile(controller, reconcile(obj, ctx)).await })
        }
    }

    /// Sets how many objects of `controller` wait for it.
    pub fn set_queue_depth(&self, controller: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Exports what `profile`'s status says.
    pub(crate) fn record_profile(&self, profile: &str, state: &ProfileState) {
        let labels = ProfileLabels {
            profile: profile.to_string(),
        };
        let previous = self
            .profile_reasons
            .lock()
            .insert(profile.to_string(), state.reason.clone());
        if let Some(old) = previous.filter(|old| *old != state.reason) {
            self.profile_ready.remove(&ProfileReadyLabels {
                profile: profile.to_string(),
                reason: old,
            });
        }
        self.profile_ready
            .get_or_create(&ProfileReadyLabels {
                profile: profile.to_string(),
                reason: state.reason.clone(),
            })
            .set(i64::from(state.ready));
        self.profile_leader
            .get_or_create(&labels)
            .set(i64::from(state.leader));
        self.profile_desired_replicas
            .get_or_create(&labels)
            .set(i64::from(state.desired_replicas));
        self.profile_ready_replicas
            .get_or_create(&labels)
            .set(i64::from(state.ready_replicas));
        self.profile_pending_pods
            .get_or_create(&labels)
            .set(i64::from(state.pending_pods));
    }

    /// Drops the series of a profile that was deleted.
    pub(crate) fn forget_profile(&self, profile: &str) {
        let labels = ProfileLabels {
            profile: profile.to_string(),
        };
        if let Some(reason) = self.profile_reasons.lock().remove(profile) {
            self.profile_ready.remove(&ProfileReadyLabels {
                profile: profile.to_string(),
                reason,
            });
        }
        for family in [
            &self.profile_leader,
            &self.profile_desired_replicas,
            &self.profile_ready_replicas,
            &self.profile_pending_pods,
        ] {
            family.remove(&labels);
        }
    }

    /// Exports whether `policy` is Ready, and why (not).
    pub(crate) fn record_policy(&self, policy: &str, ready: bool, reason: &str) {
        let previous = self
            .policy_reasons
            .lock()
            .insert(policy.to_string(), reason.to_string());
        if let Some(old) = previous.filter(|old| old != reason) {
            self.policy_ready.remove(&PolicyReadyLabels {
                policy: policy.to_string(),
                reason: old,
            });
        }
        self.policy_ready
            .get_or_create(&PolicyReadyLabels {
                policy: policy.to_string(),
                reason: reason.to_string(),
            })
            .set(i64::from(ready));
    }

    /// Drops the series of a policy that was deleted.
    pub(crate) fn forget_policy(&self, policy: &str) {
        if let Some(reason) = self.policy_reasons.lock().remove(policy) {
            self.policy_ready.remove(&PolicyReadyLabels {
                policy: policy.to_string(),
                reason,
            });
        }
    }

    /// The metrics of `profile`'s Embedded scheduler emulating `minor` (kept across its
    /// restarts, so its counters go on; a new minor starts over with that minor's families).
    pub fn embedded(&self, profile: &str, minor: Minor) -> Arc<Metrics> {
        let mut embedded = self.embedded.lock();
        match embedded.get(profile) {
            Some((m, metrics)) if *m == minor => metrics.clone(),
            _ => {
                let metrics = Arc::new(Metrics::scheduler_only(minor));
                embedded.insert(profile.to_string(), (minor, metrics.clone()));
                metrics
            }
        }
    }

    /// Forgets `profile`'s Embedded scheduler's metrics (it stopped for good).
    pub fn remove_embedded(&self, profile: &str) {
        self.embedded.lock().remove(profile);
    }

    /// The exposition of every metric: the operator's and the Embedded schedulers'.
    pub fn encode(&self) -> String {
        let mut parts = vec![(None, crate::infra::metrics::encode(&self.registry))];
        let embedded: Vec<(String, Arc<Metrics>)> = self
            .embedded
            .lock()
            .iter()
            .map(|(p, (_, m))| (p.clone(), m.clone()))
            .collect();
        for (profile, metrics) in &embedded {
            parts.push((Some(("profile", profile.as_str())), metrics.encode()));
        }
        crate::infra::metrics::merge_expositions(&parts)
    }
}

/// Every metric family the scheduler and the operator export, name -> type (`counter`, `gauge`,
/// `histogram`): what their `/metrics` carry once each has samples (an exposition leaves out a
/// family without any). Plugins' own families (`with_metrics`) are not included.
pub fn metric_families() -> BTreeMap<String, String> {
    let scheduler = Metrics::new();
    let operator = OperatorMetrics::new();
    let mut families = crate::infra::metrics::declared_families();
    // Collectors (the process's families) register no family; their samples are always there.
    for exposition in [scheduler.encode(), operator.encode()] {
        for line in exposition.lines() {
            let mut words = line
                .strip_prefix("# TYPE ")
                .unwrap_or("")
                .split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                families.insert(name.to_string(), kind.to_string());
            }
        }
    }
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_value(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    #[tokio::test]
    async fn counts_reconciles_errors_and_durations_per_controller() {
        let m = Arc::new(OperatorMetrics::new());
        let mut reconcile = m.instrument(
            SCHEDULER_PROFILE,
            |obj: Arc<u32>, _ctx: Arc<()>| async move {
                if *obj == 0 { Err("failed") } else { Ok(*obj) }
            },
        );
        assert_eq!(reconcile(Arc::new(1), Arc::new(())).await, Ok(1));
        assert_eq!(reconcile(Arc::new(2), Arc::new(())).await, Ok(2));
        assert_eq!(reconcile(Arc::new(0), Arc::new(())).await, Err("failed"));
        let text = m.encode();
        let count = |prefix: &str| line_value(&text, prefix);
        assert_eq!(
            count(
                r#"controller_runtime_reconcile_total{controller="schedulerprofile",result="success"} "#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            count(
                r#"controller_runtime_reconcile_total{controller="schedulerprofile",result="error"} "#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            count(r#"controller_runtime_reconcile_errors_total{controller="schedulerprofile"} "#),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            count(
                r#"controller_runtime_reconcile_time_seconds_count{controller="schedulerprofile"} "#
            ),
            Some(3.0),
            "{text}"
        );
        assert_eq!(
            count(r#"controller_runtime_active_workers{controller="schedulerprofile"} "#),
            Some(0.0),
            "{text}"
        );
        // Another controller has series of its own.
        assert_eq!(
            count(r#"controller_runtime_reconcile_total{controller="leafclusterpolicy","#),
            None
        );
    }

    #[test]
    fn exports_leader_status_and_queue_depth() {
        let m = OperatorMetrics::new();
        m.set_leader(true);
        m.set_queue_depth(LEAF_CLUSTER_POLICY, 3);
        let text = m.encode();
        for line in [
            r#"leader_election_master_status{name="ksched-operator"} 1"#,
            r#"ksched_operator_queue_depth{controller="leafclusterpolicy"} 3"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        m.set_leader(false);
        assert!(
            m.encode()
                .lines()
                .any(|l| l == r#"leader_election_master_status{name="ksched-operator"} 0"#)
        );
    }

    #[test]
    fn every_family_is_declared_also_without_samples() {
        let families = metric_families();
        for (name, kind) in [
            ("scheduler_schedule_attempts", "counter"),
            ("scheduler_unschedulable_pods", "gauge"),
            ("controller_runtime_reconcile_errors", "counter"),
            ("ksched_leaf_cluster_policy_ready", "gauge"),
            ("scheduler_pod_scheduling_sli_duration_seconds", "histogram"),
            ("process_resident_memory_bytes", "gauge"),
        ] {
            assert_eq!(families.get(name).map(String::as_str), Some(kind), "{name}");
        }
    }

    #[test]
    fn profile_and_policy_states_follow_their_status() {
        let m = OperatorMetrics::new();
        let mut state = ProfileState {
            ready: false,
            reason: "RollingOut".into(),
            leader: false,
            desired_replicas: 2,
            ready_replicas: 1,
            pending_pods: 4,
        };
        m.record_profile("p", &state);
        state.ready = true;
        state.reason = "Running".into();
        state.leader = true;
        m.record_profile("p", &state);
        m.record_policy("leaves", false, "Conflict");
        let text = m.encode();
        for line in [
            r#"ksched_scheduler_profile_ready{profile="p",reason="Running"} 1"#,
            r#"ksched_scheduler_profile_leader{profile="p"} 1"#,
            r#"ksched_scheduler_profile_desired_replicas{profile="p"} 2"#,
            r#"ksched_scheduler_profile_ready_replicas{profile="p"} 1"#,
            r#"ksched_scheduler_profile_pending_pods{profile="p"} 4"#,
            r#"ksched_leaf_cluster_policy_ready{policy="leaves",reason="Conflict"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing:
{text}"
            );
        }
        // The old reason's series is gone, so an alert on it resolves.
        assert!(!text.contains(r#"reason="RollingOut""#), "{text}");
        m.forget_profile("p");
        m.forget_policy("leaves");
        let text = m.encode();
        assert!(!text.contains(r#"profile="p""#), "{text}");
        assert!(!text.contains(r#"policy="leaves""#), "{text}");
    }

    #[test]
    fn embedded_schedulers_metrics_are_served_with_their_profile() {
        let m = OperatorMetrics::new();
        let a = m.embedded("a", Minor::V1_37);
        let b = m.embedded("b", Minor::V1_37);
        for (metrics, profile) in [(&a, "a"), (&b, "b")] {
            metrics
                .schedule_attempts
                .get_or_create(&crate::scheduler::metrics::AttemptLabels {
                    result: "scheduled".into(),
                    profile: profile.into(),
                })
                .inc();
            metrics
                .queue
                .pending_pods
                .get_or_create(&crate::scheduler::metrics::QueueLabels {
                    queue: "active".into(),
                })
                .set(1);
        }
        let text = m.encode();
        for line in [
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="a"} 1"#,
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="b"} 1"#,
            r#"scheduler_pending_pods{profile="b",queue="active"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert_eq!(
            text.matches("# TYPE scheduler_pending_pods gauge").count(),
            1
        );
        assert!(text.contains("process_cpu_seconds_total"));
        // The same handle after a restart; gone once removed.
        assert!(Arc::ptr_eq(&a, &m.embedded("a", Minor::V1_37)));
        // Another minor: that minor's families, counters from zero.
        assert!(!Arc::ptr_eq(&a, &m.embedded("a", Minor::V1_36)));
        m.remove_embedded("a");
        assert!(!m.encode().contains(r#"profile="a""#));
    }
}
