//! The preemption executor (upstream's `framework/preemption/executor.go`, asynchronous
//! preemption): takes the candidate PostFilter chose and has its victims evicted and the
//! lower-priority nominations on its node cleared, outside the scheduling cycle. The API calls run
//! in the scheduler's [`ApiDispatcher`](crate::framework::background::ApiDispatcher); the
//! plugin's PreEnqueue keeps the preemptor out of the queue until they are done.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tracing::{debug, error, info};

use crate::framework::api_calls::{ApiClient, ApiError, ApiEvent, Delete, PatchPodStatus};
use crate::framework::interface::{NominatingInfo, NominatingMode};
use crate::framework::metrics::FrameworkMetrics;
use crate::framework::plugins::names::DEFAULT_PREEMPTION;
use crate::framework::registry::{Handle, PodNominator};
use crate::framework::types::DISRUPTION_TARGET;
use crate::framework::types::{AssignedPod, PodInfo, PodView};
use crate::framework::waiting_pods::WaitingPods;

/// The reason of the `DisruptionTarget` condition preemption puts on its victims.
pub(super) const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Carries out decided preemptions (upstream's `Executor`), and knows which preemptors are still
/// waiting for their victims to go.
pub(crate) struct Executor {
    handle: Handle,
    /// UIDs of preemptors whose victims are still being evicted (upstream's `preempting`).
    pub(super) preempting: Arc<Mutex<HashSet<String>>>,
}

/// One decided preemption, as the dispatcher runs it.
struct Preemption {
    /// `namespace/name`.
    preemptor: String,
    namespace: String,
    name: String,
    uid: String,
    /// The preemptor's scheduler name (the victims' `Preempted` events report it).
    scheduler: String,
    /// Whether the preemptor already shows the nomination to `node`.
    nominated: bool,
    priority: i32,
    node: String,
    /// Not terminating yet; most important first.
    victims: Vec<Arc<AssignedPod>>,
    /// The `DisruptionTarget` condition's message.
    message: String,
    nominator: Option<Arc<dyn PodNominator>>,
    waiting: Arc<WaitingPods>,
    preempting: Arc<Mutex<HashSet<String>>>,
    /// `scheduler_preemption_goroutines_*` and the victims' count; `None` records nothing.
    metrics: Option<Arc<FrameworkMetrics>>,
    started: Instant,
}

impl Executor {
    pub(crate) fn new(handle: Handle) -> Executor {
        Executor {
            handle,
            preempting: Arc::default(),
        }
    }

    /// Whether the preemption of the pod with `uid` is still evicting its victims (upstream's
    /// `IsPodRunningPreemption`).
    pub(crate) fn is_preempting(&self, uid: &str) -> bool {
        self.preempting.lock().contains(uid)
    }

    /// Hands the preemption of `victims` on `node` for `pod` over to the dispatcher (upstream's
    /// `prepareCandidateAsync`); returns at once. Victims already terminating are left alone;
    /// when none is left there is nothing to wait for.
    pub(crate) fn actuate(&self, pod: &PodInfo, node: &str, victims: &[Arc<AssignedPod>]) {
        let selected = victims.len();
        let victims: Vec<Arc<AssignedPod>> = victims
            .iter()
            .filter(|v| {
                let terminating = v.is_terminating();
                if terminating {
                    debug!(preemptor = %pod.key(), victim = %v.key(), %node,
                        "victim pod is already being deleted, skipping the API call for it");
                }
                !terminating
            })
            .cloned()
            .collect();
        if victims.is_empty() {
            return;
        }
        let metrics = self.handle.metrics.clone();
        if let Some(m) = &metrics {
            m.preemption_victims.observe(selected as f64);
        }
        let preemption = Preemption {
            preemptor: pod.key(),
            namespace: pod.namespace().to_string(),
            name: pod.name().to_string(),
            uid: pod.uid().to_string(),
            scheduler: pod.scheduler_name().to_string(),
            nominated: pod.nominated_node_name() == node,
            priority: pod.priority(),
            node: node.to_string(),
            victims,
            message: format!(
                "{}: preempting to accommodate a higher priority pod",
                pod.scheduler_name()
            ),
            nominator: self.handle.nominator.clone(),
            waiting: self.handle.waiting_pods.clone(),
            preempting: self.preempting.clone(),
            metrics,
            started: Instant::now(),
        };
        self.preempting.lock().insert(preemption.uid.clone());
        self.handle
            .dispatcher
            .dispatch(move |api| async move { preemption.run(api).await });
    }
}

impl Preemption {
    /// Clears lower-priority nominations on the node, then evicts the victims: all but the last
    /// together, then the last unless one of the others failed (upstream's order, so the
    /// preemptor comes back soon after a failure).
    async fn run(self, api: Arc<dyn ApiClient>) {
        info!(preemptor = %self.preemptor, node = %self.node, victims = self.victims.len(),
            "start the preemption asynchronously");
        // The nomination is written before any victim goes: other schedulers, which respect
        // every pod's nomination, see it before they see the room it is for.
        let mut failed = self.nominate(&api).await;
        failed |= self.clear_lower_nominations(&api).await;
        // The evictions run concurrently (upstream: DefaultPreemption's parallel workers).
        let running = self
            .metrics
            .as_ref()
            .map(|m| m.running(DEFAULT_PREEMPTION, self.victims.len()));
        if let Some((last, others)) = self.victims.split_last() {
            let errors: Vec<ApiError> = join_all(others.iter().map(|v| self.evict(&api, v)))
                .await
                .into_iter()
                .filter_map(Result::err)
                .collect();
            if let Some(err) = errors.first() {
                error!(preemptor = %self.preemptor, %err, "Error occurred during async preemption");
                failed = true;
            } else if let Err(err) = self.evict(&api, last).await {
                error!(preemptor = %self.preemptor, %err,
                    "Error occurred during async preemption of the last victim");
                failed = true;
            }
        }
        drop(running);
        self.preempting.lock().remove(&self.uid);
        if let Some(m) = &self.metrics {
            m.preemption_finished(!failed, self.started);
        }
        let result = if failed { "error" } else { "success" };
        info!(preemptor = %self.preemptor, node = %self.node, result,
            "async preemption finished completely");
    }

    /// Writes the preemptor's nomination to its node unless it shows it already. Whether the
    /// patch failed (not critical: the scheduling failure handler writes it too).
    async fn nominate(&self, api: &Arc<dyn ApiClient>) -> bool {
        if self.nominated {
            return false;
        }
        let nominate = PatchPodStatus {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            condition: None,
            nominating: Some(NominatingInfo {
                nominated_node_name: self.node.clone(),
                mode: NominatingMode::Override,
            }),
        };
        match api.call(nominate).await {
            Ok(()) => false,
            Err(err) => {
                error!(preemptor = %self.preemptor, node = %self.node, %err,
                    "Cannot set the preemptor's nominated node before preempting");
                true
            }
        }
    }

    /// Pods of lower priority nominated to the node may not fit there any more: their nomination
    /// is cleared, so the scheduler finds them another place sooner. Another scheduler's pods are
    /// not ours to change. Whether a patch failed (not critical: the preemption goes on).
    async fn clear_lower_nominations(&self, api: &Arc<dyn ApiClient>) -> bool {
        let Some(nominator) = &self.nominator else {
            return false;
        };
        let mut failed = false;
        for p in nominator.nominated_pods_for_node(&self.node) {
            if p.priority() >= self.priority || nominator.is_foreign(&p.key()) {
                continue;
            }
            let clear = NominatingInfo {
                nominated_node_name: String::new(),
                mode: NominatingMode::Override,
            };
            let patch = PatchPodStatus {
                namespace: p.namespace().to_string(),
                name: p.name().to_string(),
                condition: None,
                nominating: Some(clear),
            };
            if let Err(err) = api.call(patch).await {
                error!(pod = %p.key(), node = %self.node, %err,
                    "Cannot clear 'NominatedNodeName' field from lower priority pods on the same target node");
                failed = true;
            }
        }
        failed
    }

    /// Upstream's `PreemptPod`: a victim waiting at Permit is rejected in memory; any other gets
    /// the `DisruptionTarget` condition and is deleted; either gets upstream's `Preempted` event.
    /// A victim already gone is not an error.
    async fn evict(&self, api: &Arc<dyn ApiClient>, victim: &AssignedPod) -> Result<(), ApiError> {
        if self.waiting.reject(victim.uid(), "preempted") {
            info!(preemptor = %self.preemptor, victim = %victim.key(), node = %self.node,
                "preemptor preempted a waiting pod");
            self.preempted_event(api, victim, " (in kube-scheduler memory).");
            return Ok(());
        }
        let condition = PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(REASON_PREEMPTION_BY_SCHEDULER.into()),
            message: Some(self.message.clone()),
            last_transition_time: Some(Time(Timestamp::now())),
            ..Default::default()
        };
        let (ns, name) = (victim.namespace(), victim.name());
        let patch = PatchPodStatus {
            namespace: ns.to_string(),
            name: name.to_string(),
            condition: Some(condition),
            nominating: None,
        };
        let result = match api.call(patch).await {
            Ok(()) => api.call(Delete::<Pod>::new(ns, name, victim.uid())).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                info!(preemptor = %self.preemptor, victim = %victim.key(), node = %self.node,
                    "preemptor pod preempted victim pod");
                self.preempted_event(api, victim, "");
                Ok(())
            }
            Err(ApiError::NotFound(_)) => {
                debug!(preemptor = %self.preemptor, victim = %victim.key(), "victim pod is already deleted");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }
}

impl Preemption {
    /// Upstream's `Preempted` event on the victim (related: the preemptor): "Preempted by pod
    /// <uid> on node <node>", `suffix` for a victim preempted in memory.
    fn preempted_event(&self, api: &Arc<dyn ApiClient>, victim: &AssignedPod, suffix: &str) {
        let pod_ref = |namespace: &str, name: &str, uid: &str| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        };
        api.record_event(ApiEvent {
            reporting_controller: self.scheduler.clone(),
            regarding: pod_ref(victim.namespace(), victim.name(), victim.uid()),
            related: Some(pod_ref(&self.namespace, &self.name, &self.uid)),
            type_: "Normal",
            reason: "Preempted",
            action: "Preempting",
            note: format!(
                "Preempted by pod {} on node {}{suffix}",
                self.uid, self.node
            ),
        });
    }
}
