//! The scheduler around the one [`Cycle`]: it pops entities from the queue, runs the cycle, then
//! the binding cycle of every pod the cycle assumed, concurrently with the next cycle, or the
//! failure handler (upstream's `pkg/scheduler/schedule_one.go`: `scheduleOne`, `bindingCycle`,
//! `handleSchedulingFailure`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use tracing::{debug, error};

use super::cycle::{
    Cycle, Failure, GroupOutcome, PodDecision, Reserved, ScheduledGroups, pod_group_of,
};
use super::events::{REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE, Reporter};
use super::leader_election::Leadership;
use super::metrics::{AttemptLabels, CacheLabels, Metrics, SliLabels};
use super::queue::SchedulingQueue;
use crate::framework::events::EVENT_ASSIGNED_POD_DELETE;
use crate::framework::extender::Extender;
use crate::framework::interface::Status;
use crate::framework::metrics::OPERATION_BINDING;
use crate::framework::registry::Handle;
use crate::framework::runtime::Framework;
use crate::framework::types::{
    AssignedPod, GroupBackoff, PodInfo, PodObject, QueuedEntity, QueuedPodGroup, QueuedPodInfo,
};

/// The scheduler's scheduling and binding cycles over the parts they share (upstream's
/// `Scheduler`).
pub(crate) struct Scheduler {
    pub(crate) cycle: Cycle,
    pub(crate) queue: Arc<SchedulingQueue>,
    pub(crate) frameworks: HashMap<String, Arc<Framework>>,
    /// Each profile's reporter of attempts (events, the PodScheduled condition).
    pub(crate) reporters: HashMap<String, Arc<dyn Reporter>>,
    pub(crate) handle: Handle,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) leadership: Leadership,
    /// Groups marked scheduled whose condition the informer does not show yet.
    pub(crate) scheduled_groups: Arc<ScheduledGroups>,
}

/// How a pod that was not scheduled goes back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requeue {
    /// By the events its rejecting plugins name, after backoff.
    Rejected,
    /// A member of a group its cycle scheduled: at once (upstream requeues the group's
    /// remaining pods to the active queue).
    GroupScheduled,
}

/// One pod's scheduling attempt (alone or in its group's cycle): what its binding cycle and the
/// failure handler share.
struct Attempt {
    qpi: QueuedPodInfo,
    /// The framework of the pod's profile.
    fwk: Arc<Framework>,
    started: Instant,
}

impl Attempt {
    fn pod(&self) -> &QueuedPodInfo {
        &self.qpi
    }
}

impl Scheduler {
    /// Schedules the entities the queue hands out, one at a time, until it closes.
    pub(crate) async fn schedule_all(self: Arc<Self>) {
        while let Some(qpi) = self.queue.pop().await {
            let entity = self.entity_of(qpi);
            self.schedule_one(entity).await;
        }
    }

    /// Every second: backoff and unschedulable flushes, assumed-pod expiry, the cache-size gauge.
    pub(crate) async fn housekeeping(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let cache = self.cycle.cache();
        loop {
            tick.tick().await;
            self.queue.flush();
            for expired in cache.cleanup_expired_assumed(Instant::now()) {
                debug!(pod = %expired.pod.key(), "expired assumed pod removed");
                let old = PodObject::assigned(expired.pod, &expired.node).into_event_object();
                self.queue.move_all_to_active_or_backoff(
                    &EVENT_ASSIGNED_POD_DELETE,
                    Some(old),
                    None,
                );
            }
            let sizes = cache.sizes();
            for (kind, n) in [
                ("nodes", sizes.nodes),
                ("pods", sizes.pods),
                ("assumed_pods", sizes.assumed_pods),
            ] {
                self.metrics
                    .cache_size
                    .get_or_create(&CacheLabels {
                        r#type: kind.into(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// The entity a popped pod is scheduled as: with workload-aware scheduling (GenericWorkload)
    /// a member of a known PodGroup brings its group's other waiting members along (upstream
    /// queues the group as one entity); any other pod is scheduled alone.
    fn entity_of(&self, qpi: QueuedPodInfo) -> QueuedEntity {
        let Some((group, others)) = pod_group_of(&self.handle, &qpi.pod_info) else {
            return QueuedEntity::Pod(qpi);
        };
        let mut members = self.queue.take(&others);
        members.push(qpi);
        QueuedEntity::Group(QueuedPodGroup::new(group, members))
    }

    /// One entity: the scheduling cycle, then a binding cycle for each pod it placed, running
    /// concurrently with the next entity's scheduling cycle, or the failure handler for each pod
    /// it did not (upstream's `scheduleOne` and `scheduleOnePodGroup`).
    pub(crate) async fn schedule_one(self: &Arc<Self>, mut entity: QueuedEntity) {
        let Some(fwk) = self.frameworks.get(entity.scheduler_name()).cloned() else {
            for pod in entity.pods() {
                self.queue.done(&pod.key());
            }
            return;
        };
        // A pod already assumed (its binding cycle runs) is not tried again.
        let cache = self.cycle.cache();
        let assumed: Vec<String> = entity
            .pods()
            .map(|p| p.key())
            .filter(|key| cache.is_assumed(key))
            .collect();
        for key in &assumed {
            self.queue.done(key);
        }
        if !assumed.is_empty() {
            match &mut entity {
                QueuedEntity::Pod(_) => return,
                QueuedEntity::Group(g) => {
                    g.members.retain(|m| !assumed.contains(&m.pod_info.key()));
                    if g.members.is_empty() {
                        return;
                    }
                }
            }
        }
        let started = Instant::now();
        let (decisions, outcome) = self.cycle.schedule(&fwk, &entity, started).into_parts();
        let (pods, group) = entity.into_members();
        let scheduled = matches!(outcome, Some(GroupOutcome::Scheduled(_)));
        let requeue = if scheduled {
            Requeue::GroupScheduled
        } else {
            Requeue::Rejected
        };
        let group_backoff = group.as_ref().map(|_| {
            let sent_back = decisions
                .iter()
                .filter(|d| matches!(d, PodDecision::Failed(_)))
                .count();
            GroupBackoff::after_cycle(&pods, sent_back, scheduled)
        });
        let mut failures = Vec::new();
        for (mut qpi, decision) in pods.into_iter().zip(decisions) {
            // A placed member that fails later (Permit, binding) backs off as a pod.
            qpi.group_backoff = match decision {
                PodDecision::Failed(_) => group_backoff,
                PodDecision::Assumed(_) => None,
            };
            let attempt = Attempt {
                qpi,
                fwk: fwk.clone(),
                started,
            };
            match decision {
                PodDecision::Assumed(reserved) => {
                    let scheduler = self.clone();
                    tokio::spawn(scheduler.binding_cycle(attempt, reserved));
                }
                PodDecision::Failed(failure) => {
                    failures.push(self.handle_scheduling_failure(attempt, failure, requeue));
                }
            }
        }
        // A group's members are reported together (each write is its own request).
        futures::future::join_all(failures).await;
        if let (Some(group), Some(outcome)) = (group, outcome) {
            if let Some(m) = &self.metrics.pod_group {
                let result = match outcome {
                    GroupOutcome::Scheduled(_) => "scheduled",
                    GroupOutcome::Unschedulable(_) => "unschedulable",
                    GroupOutcome::WaitingOnPreemption(_) => "waiting_on_preemption",
                    GroupOutcome::Error(_) => "error",
                };
                m.record(fwk.profile_name(), result, started.elapsed().as_secs_f64());
            }
            self.scheduled_groups.dispatch(
                &self.handle.dispatcher,
                &group,
                &outcome,
                Timestamp::now(),
            );
        }
    }

    /// Permit wait, PreBind, Bind, PostBind (upstream's `bindingCycle`); on failure the
    /// reservation is undone and the pod requeued.
    async fn binding_cycle(self: Arc<Self>, attempt: Attempt, mut reserved: Reserved) {
        let fwk = attempt.fwk.clone();
        let profile = fwk.profile_name();
        let key = reserved.assumed.key();
        let _running = self.metrics.framework.running(OPERATION_BINDING, 1);
        if !self.leadership.is_leader() {
            // Stepping down: this binding cycle never starts; the next leader schedules the pod.
            self.cycle.undo(&fwk, &mut reserved);
            self.queue.done(&key);
            return;
        }
        let Reserved {
            state,
            assumed,
            host,
            ..
        } = &mut reserved;
        // NominatedNodeNameForExpectation: when PreBind will act or Permit waits, the pod's node
        // is published as its nominated node before it is bound (autoscalers and users see it
        // coming).
        let pre_flight = fwk.run_pre_bind_pre_flights(state, assumed, host);
        let mut status = if pre_flight.is_success() || pre_flight.is_skip() {
            if (pre_flight.is_success() || fwk.will_wait_on_permit(assumed))
                && let Some(reporter) = self.reporters.get(profile)
            {
                reporter.nominate(&attempt.pod().pod_info.pod, host).await;
            }
            fwk.wait_on_permit(assumed).await
        } else {
            pre_flight
        };
        if status.is_success() {
            status = fwk.run_pre_bind_plugins(state, assumed, host).await;
        }
        if status.is_success() {
            status = match self.extender_binder(assumed) {
                Some(extender) => bind_through(extender, assumed, host).await,
                None => fwk.run_bind_plugins(state, assumed, host).await,
            };
        }
        if !status.is_success() {
            self.cycle.undo(&fwk, &mut reserved);
            let Reserved { assumed, host, .. } = &reserved;
            // The freed reservation may let other pods fit (upstream: AssignedPodDelete).
            let freed = PodObject::assigned(Arc::new(AssignedPod::from_pod_info(assumed)), host);
            let uid = assumed.uid().to_string();
            self.queue.move_matching_to_active_or_backoff(
                &EVENT_ASSIGNED_POD_DELETE,
                Some(freed.into_event_object()),
                None,
                |p| p.uid() != uid,
            );
            self.handle_scheduling_failure(
                attempt,
                Failure::from_status(&status),
                Requeue::Rejected,
            )
            .await;
            return;
        }
        self.cycle.cache().finish_binding(&key);
        self.queue.done(&key);
        self.record_attempt(profile, "scheduled", attempt.started);
        self.record_scheduled(attempt.pod());
        if let Some(reporter) = self.reporters.get(profile) {
            reporter.scheduled(&assumed.pod, host);
        }
        fwk.run_post_bind_plugins(state, assumed, host).await;
    }

    /// Requeues a pod that did not get scheduled and tells the user why (event +
    /// PodScheduled=False): upstream's `handleSchedulingFailure`, the one place every failed
    /// attempt ends. The status is written before the caller goes on, so the next attempt (which
    /// may bind the pod at once) cannot overtake it.
    async fn handle_scheduling_failure(
        &self,
        attempt: Attempt,
        failure: Failure,
        requeue: Requeue,
    ) {
        let Attempt {
            mut qpi,
            fwk,
            started,
        } = attempt;
        let profile = fwk.profile_name();
        let pod = qpi.pod_info.pod.clone();
        let message = &failure.message;
        if failure.unschedulable {
            self.record_attempt(profile, "unschedulable", started);
            debug!(pod = %qpi.pod_info.key(), %message, "unable to schedule pod; waiting");
        } else {
            self.record_attempt(profile, "error", started);
            error!(pod = %qpi.pod_info.key(), %message, "error scheduling pod; retrying");
        }
        // This attempt's rejecting plugins decide which events requeue the pod.
        qpi.unschedulable_plugins = failure.unschedulable_plugins;
        qpi.pending_plugins = failure.pending_plugins;
        match requeue {
            Requeue::Rejected => self.queue.add_unschedulable_if_not_present(qpi),
            Requeue::GroupScheduled => self.queue.add_after_group_scheduled(qpi),
        }
        let Some(reporter) = self.reporters.get(profile) else {
            return;
        };
        let reason = if failure.unschedulable {
            REASON_UNSCHEDULABLE
        } else {
            REASON_SCHEDULER_ERROR
        };
        reporter
            .failed(&pod, reason, message, failure.nominated.as_deref())
            .await;
    }

    /// The extender that binds `pod` instead of the Bind plugins: the first binding extender
    /// interested in it (upstream's `extendersBinding`).
    fn extender_binder(&self, pod: &PodInfo) -> Option<Arc<dyn Extender>> {
        self.handle
            .extenders
            .iter()
            .find(|e| e.is_binder() && e.is_interested(pod))
            .cloned()
    }

    /// A bound pod's attempts, and its time from the first attempt (upstream's SLI).
    fn record_scheduled(&self, qpi: &QueuedPodInfo) {
        self.metrics
            .pod_scheduling_attempts
            .observe(f64::from(qpi.attempts));
        if let Some(first) = qpi.initial_attempt_timestamp {
            self.metrics
                .pod_scheduling_sli_duration
                .get_or_create(&SliLabels {
                    attempts: attempts_label(qpi.attempts),
                })
                .observe(first.elapsed().as_secs_f64());
        }
        if qpi.was_flushed_from_unschedulable {
            self.metrics.pod_scheduled_after_flush.inc();
        }
    }

    fn record_attempt(&self, profile: &str, result: &str, started: Instant) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.metrics.schedule_attempts.get_or_create(&labels).inc();
        self.metrics
            .scheduling_attempt_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The `attempts` label of the SLI: the count, capped at `15+` (upstream's `getAttemptsLabel`).
fn attempts_label(attempts: u32) -> String {
    if attempts >= 15 {
        "15+".into()
    } else {
        attempts.to_string()
    }
}

/// Binds through `extender` (a blocking call, off the async workers).
async fn bind_through(extender: Arc<dyn Extender>, pod: &PodInfo, node: &str) -> Status {
    let (ns, name, uid, node) = (
        pod.namespace().to_string(),
        pod.name().to_string(),
        pod.uid().to_string(),
        node.to_string(),
    );
    match tokio::task::spawn_blocking(move || extender.bind(&ns, &name, &uid, &node)).await {
        Ok(Ok(())) => Status::success(),
        Ok(Err(e)) => Status::error(e),
        Err(e) => Status::error(format!("binding through the extender: {e}")),
    }
}
