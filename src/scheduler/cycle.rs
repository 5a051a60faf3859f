//! The scheduling cycle, written once: `ksched scheduler` wraps it with the API (the binding cycle,
//! status writes, events), `ksched simulate` with a recording API. Snapshot and framework in, a
//! [`Decision`] out (upstream's `schedulingCycle`, `schedulingAlgorithm` and `assumeAndReserve`).
//!
//! The cycle takes a [`QueuedEntity`] and decides for each of its pods. A pod group's cycle
//! (upstream 1.37's `podGroupCycle`) is one more arm of [`Cycle::schedule`] built from the same
//! per-pod steps: [`Cycle::find_node`] (Filter, Score, PostFilter) and
//! [`Cycle::assume_and_reserve`], whose [`Reserved`] a group cycle undoes when the group does
//! not fit.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

mod group;
mod placement;

pub(crate) use group::{GroupDecision, GroupOutcome, ScheduledGroups, pod_group_of};

use super::cache::Cache;
use super::metrics::Metrics;
use super::queue::Nominator;
use crate::framework::interface::{Code, CycleState, NominatingMode, Status};
use crate::framework::registry::SharedSnapshot;
use crate::framework::runtime::Framework;
use crate::framework::schedule::{Algorithm, FitError, ScheduleError};
use crate::framework::types::{PodInfo, QueuedEntity, Snapshot};

/// What one cycle needs besides the framework: the cache pods are assumed in, the nominator
/// PostFilter's nominations go to, the snapshot plugins read, and the node-search state.
pub(crate) struct Cycle {
    cache: Arc<Cache>,
    nominator: Arc<Nominator>,
    snapshot: Arc<SharedSnapshot>,
    algorithm: Mutex<Algorithm>,
    /// Where the scheduler records plugin durations (in a sample of cycles) and the algorithm's
    /// latency; `None` (a simulation) records nothing.
    metrics: Option<Arc<Metrics>>,
}

/// What the cycle decided for an entity.
pub(crate) enum Decision {
    Pod(PodDecision),
    Group(GroupDecision),
}

impl Decision {
    /// The decision for each pod of the entity, in its order, and the group's outcome.
    pub(crate) fn into_parts(self) -> (Vec<PodDecision>, Option<GroupOutcome>) {
        match self {
            Decision::Pod(decision) => (vec![decision], None),
            Decision::Group(group) => (group.members, Some(group.outcome)),
        }
    }
}

/// What the cycle decided for one pod.
pub(crate) enum PodDecision {
    /// Assumed on its node in the cache, reserved, and permitted or waiting at Permit: the binding
    /// cycle's to finish (or to undo).
    Assumed(Reserved),
    /// Not placed; nothing is left assumed or reserved.
    Failed(Failure),
}

/// A pod assumed and reserved on `host`: what the binding cycle needs.
pub(crate) struct Reserved {
    pub(crate) state: CycleState,
    pub(crate) assumed: Arc<PodInfo>,
    pub(crate) host: String,
    /// Permit answered Wait: the pod is held until a plugin allows or rejects it.
    pub(crate) waiting: bool,
}

/// Why a pod was not placed: what the failure handler reports and how the pod is requeued.
#[derive(Default)]
pub(crate) struct Failure {
    /// Unschedulable: the pod waits for a cluster event; otherwise an error, retried with
    /// backoff.
    pub(crate) unschedulable: bool,
    pub(crate) message: String,
    /// The plugin whose status this is, when one plugin's Reserve or Permit failed it.
    pub(crate) plugin: Option<String>,
    /// The node PostFilter nominated the pod to (`""` clears an earlier nomination); `None`
    /// leaves the pod's nomination as it is.
    pub(crate) nominated: Option<String>,
    /// The plugins that rejected the pod, and those that answered Pending: only the events they
    /// registered requeue it. None for an error, which any event requeues.
    pub(crate) unschedulable_plugins: BTreeSet<String>,
    pub(crate) pending_plugins: BTreeSet<String>,
    /// When no node fit: every node's status (the message already says it in sum).
    pub(crate) fit: Option<Box<FitError>>,
}

impl Failure {
    pub(crate) fn unschedulable(message: String) -> Failure {
        Failure {
            unschedulable: true,
            message,
            ..Failure::default()
        }
    }

    pub(crate) fn error(message: String) -> Failure {
        Failure {
            message,
            ..Failure::default()
        }
    }

    /// A plugin's status: rejected means unschedulable (by that plugin), anything else an error.
    pub(crate) fn from_status(status: &Status) -> Failure {
        let mut failure = Failure {
            unschedulable: status.is_rejected(),
            message: status.message(),
            plugin: status.plugin().map(str::to_string),
            ..Failure::default()
        };
        if let Some(plugin) = status.plugin().filter(|_| status.is_rejected()) {
            let plugins = if status.code() == Code::Pending {
                &mut failure.pending_plugins
            } else {
                &mut failure.unschedulable_plugins
            };
            plugins.insert(plugin.to_string());
        }
        failure
    }
}

impl Cycle {
    pub(crate) fn new(
        cache: Arc<Cache>,
        nominator: Arc<Nominator>,
        snapshot: Arc<SharedSnapshot>,
        algorithm: Algorithm,
    ) -> Cycle {
        Cycle {
            cache,
            nominator,
            snapshot,
            algorithm: Mutex::new(algorithm),
            metrics: None,
        }
    }

    /// Records plugin durations and the algorithm's latency in `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Cycle {
        self.metrics = Some(metrics);
        self
    }

    pub(crate) fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The snapshot brought up to date with the cache (assumed pods included). Other schedulers'
    /// pods it holds bound stop counting as nominated.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.update(|s| self.cache.update_snapshot(s));
        let snapshot = self.snapshot.load();
        self.nominator
            .retire_bound(|node, uid| snapshot.get(node).is_some_and(|n| n.holds(uid)));
        snapshot
    }

    /// Schedules `entity` with `fwk`, its profile's framework; `started` is when the attempt
    /// began (the algorithm's latency counts from there).
    pub(crate) fn schedule(
        &self,
        fwk: &Arc<Framework>,
        entity: &QueuedEntity,
        started: Instant,
    ) -> Decision {
        match entity {
            QueuedEntity::Pod(qpi) => Decision::Pod(self.schedule_pod(fwk, &qpi.pod_info, started)),
            QueuedEntity::Group(group) => Decision::Group(self.schedule_group(fwk, group, started)),
        }
    }

    /// One pod: a node, then assume, Reserve and Permit (upstream's `schedulingCycle`). On failure
    /// what was reserved is undone.
    fn schedule_pod(
        &self,
        fwk: &Arc<Framework>,
        pod: &Arc<PodInfo>,
        started: Instant,
    ) -> PodDecision {
        let snapshot = self.snapshot();
        let mut state = self.new_state();
        let host = self.find_node(fwk, &mut state, pod, &snapshot);
        if let Some(m) = &self.metrics {
            // From the start of the attempt, snapshot update and PostFilter included, as upstream.
            m.scheduling_algorithm_duration
                .observe(started.elapsed().as_secs_f64());
        }
        drop(snapshot);
        let host = match host {
            Ok(host) => host,
            Err(failure) => return PodDecision::Failed(*failure),
        };
        match self.assume_and_reserve(fwk, state, pod, host) {
            Ok(reserved) => self.permit(fwk, reserved),
            Err(failure) => PodDecision::Failed(*failure),
        }
    }

    /// A pod's cycle state; each plugin's duration is measured in a share of the cycles only, as
    /// upstream.
    fn new_state(&self) -> CycleState {
        let mut state = CycleState::new();
        state.set_record_plugin_metrics(self.sample_plugins());
        state
    }

    /// Whether this run of a point times its plugins: in a share of them, as upstream (a pod
    /// group's points draw each on their own, a share all the same).
    fn sample_plugins(&self) -> bool {
        self.metrics
            .as_ref()
            .is_some_and(|m| m.framework.sampler.sample())
    }

    /// Filter and Score over the snapshot, and PostFilter when no node fits (upstream's
    /// `schedulingAlgorithm`): the chosen node, or why there is none.
    pub(crate) fn find_node(
        &self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
    ) -> Result<String, Box<Failure>> {
        match self.run_algorithm(fwk, state, pod, snapshot) {
            Ok(host) => Ok(host),
            Err(ScheduleError::Fit(fit)) => {
                Err(Box::new(self.post_filter(fwk, state, pod, snapshot, fit)))
            }
            Err(other) => Err(Box::new(schedule_failure(other))),
        }
    }

    /// Filter and Score without PostFilter: a pod group's member (upstream runs the group's
    /// PostFilter once for the whole group instead).
    pub(crate) fn select_host(
        &self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
    ) -> Result<String, Box<Failure>> {
        self.run_algorithm(fwk, state, pod, snapshot)
            .map_err(|e| Box::new(schedule_failure(e)))
    }

    fn run_algorithm(
        &self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
    ) -> Result<String, ScheduleError> {
        cpu_bound(|| {
            self.algorithm
                .lock()
                .schedule_pod(fwk, state, pod, snapshot)
        })
        .map(|r| r.suggested_host)
    }

    /// No node fits: PostFilter (preemption) may nominate the pod to a node; the failure carries
    /// the fit error's message with PostFilter's, and the nomination.
    fn post_filter(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        mut fit: Box<FitError>,
    ) -> Failure {
        let mut nominated = None;
        if fwk.has_post_filter_plugins() {
            // The dry run is CPU work, and preempting extenders are called synchronously.
            let (res, status) = cpu_bound(|| {
                fwk.run_post_filter_plugins(state, pod, snapshot, &fit.diagnosis.node_to_status)
            });
            if !status.message().is_empty() {
                fit.set_post_filter_message(status.message());
            }
            // Override with a node nominates the pod there; with "" it clears a nomination.
            if let Some(info) = res.map(|r| r.nominating_info)
                && info.mode == NominatingMode::Override
            {
                let node = info.nominated_node_name;
                self.nominator.add_nominated_pod(pod.clone(), &node);
                if !node.is_empty() || !pod.nominated_node_name().is_empty() {
                    nominated = Some(node);
                }
            }
        }
        Failure {
            nominated,
            ..fit_failure(fit)
        }
    }

    /// Assumes `pod` on `host` in the cache (the next cycle sees it there) and runs Reserve
    /// (upstream's `assumeAndReserve`); on a failure nothing is left assumed or reserved.
    pub(crate) fn assume_and_reserve(
        &self,
        fwk: &Framework,
        state: CycleState,
        pod: &PodInfo,
        host: String,
    ) -> Result<Reserved, Box<Failure>> {
        let assumed = Arc::new(PodInfo::new(Arc::new(with_node_name(&pod.pod, &host))));
        // The pod is counted on its node from now on; a nomination would count it twice.
        self.nominator.delete(&pod.key());
        if let Err(err) = self.cache.assume_pod(&assumed) {
            return Err(Box::new(Failure::error(err.to_string())));
        }
        let mut reserved = Reserved {
            state,
            assumed,
            host,
            waiting: false,
        };
        let status =
            fwk.run_reserve_plugins_reserve(&mut reserved.state, &reserved.assumed, &reserved.host);
        if !status.is_success() {
            self.undo(fwk, &mut reserved);
            return Err(Box::new(Failure::from_status(&status)));
        }
        Ok(reserved)
    }

    /// Permit: allowed or waiting, the pod goes on to its binding cycle; rejected, its
    /// reservation is undone.
    fn permit(&self, fwk: &Framework, mut reserved: Reserved) -> PodDecision {
        let status = fwk.run_permit_plugins(&mut reserved.state, &reserved.assumed, &reserved.host);
        if !status.is_success() && !status.is_wait() {
            self.undo(fwk, &mut reserved);
            return PodDecision::Failed(Failure::from_status(&status));
        }
        reserved.waiting = status.is_wait();
        PodDecision::Assumed(reserved)
    }

    /// Unreserve (in reverse order) and forget the assumed pod: the node is free again.
    pub(crate) fn undo(&self, fwk: &Framework, reserved: &mut Reserved) {
        fwk.run_reserve_plugins_unreserve(&mut reserved.state, &reserved.assumed, &reserved.host);
        let _ = self.cache.forget_pod(&reserved.assumed.key());
    }
}

/// Why the algorithm found no node, as the failure handler takes it.
fn schedule_failure(err: ScheduleError) -> Failure {
    match err {
        ScheduleError::Fit(fit) => fit_failure(fit),
        ScheduleError::NoNodesAvailable => {
            Failure::unschedulable("no nodes available to schedule pods".into())
        }
        ScheduleError::Internal(status) => Failure::error(status.message()),
    }
}

/// No node fits: unschedulable, requeued by the events of the plugins that rejected it.
fn fit_failure(mut fit: Box<FitError>) -> Failure {
    Failure {
        unschedulable: true,
        message: fit.to_string(),
        unschedulable_plugins: std::mem::take(&mut fit.diagnosis.unschedulable_plugins),
        pending_plugins: std::mem::take(&mut fit.diagnosis.pending_plugins),
        fit: Some(fit),
        ..Failure::default()
    }
}

/// A copy of `pod` bound to `node` (what the cache assumes).
pub(crate) fn with_node_name(pod: &Pod, node: &str) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    pod
}

/// Runs CPU-heavy work (filter and score over all nodes) without stalling other tasks on a
/// multi-threaded runtime; on a current-thread runtime (embedded in a test) or outside one (a
/// simulation) it just runs.
fn cpu_bound<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
