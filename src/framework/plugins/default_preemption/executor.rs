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

/// The candidate name of a pod group's preemption (upstream's: its domain is the whole cluster).
const CLUSTER: &str = "cluster";

/// The reason of the `DisruptionTarget` condition preemption puts on its victims.
pub(super) const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Carries out decided preemptions (upstream's `Executor`), and knows which preemptors are still
/// waiting for their victims to go.
pub(crate) struct Executor {
    handle: Handle,
    /// UIDs of preemptors whose victims are still being evicted (upstream's `preempting`).
    pub(super) preempting: Arc<Mutex<HashSet<String>>>,
}

/// Who preempts (upstream's `ExecutorPreemptor`): a pod, or a pod group.
pub(super) struct Preemptor {
    /// Upstream's `Type()`: `pod` or `podgroup` (the victims' condition and events name it).
    pub(super) kind: &'static str,
    /// The victims' `Preempted` events relate to it.
    pub(super) reference: ObjectReference,
    /// `namespace/name`.
    pub(super) key: String,
    pub(super) uid: String,
    /// The preemptor's scheduler name (the victims' condition reports it).
    pub(super) scheduler: String,
    pub(super) priority: i32,
}

impl Preemptor {
    fn pod(pod: &PodInfo) -> Preemptor {
        Preemptor {
            kind: "pod",
            reference: object_ref("v1", "Pod", pod.namespace(), pod.name(), pod.uid()),
            key: pod.key(),
            uid: pod.uid().to_string(),
            scheduler: pod.scheduler_name().to_string(),
            priority: pod.priority(),
        }
    }
}

/// A reference to the object `namespace/name` of `kind`.
pub(super) fn object_ref(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: &str,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(uid.into()),
        ..ObjectReference::default()
    }
}

/// One decided preemption, as the dispatcher runs it.
struct Preemption {
    preemptor: Preemptor,
    /// A pod preemptor's nomination to write first, unless it shows it already.
    nominate: Option<(String, String)>,
    /// The candidate's name: the node, or `cluster` for a pod group's.
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
        if let Some(m) = &self.handle.metrics {
            m.preemption_victims.observe(victims.len() as f64);
        }
        let nominate = (pod.nominated_node_name() != node)
            .then(|| (pod.namespace().to_string(), pod.name().to_string()));
        self.start(Preemptor::pod(pod), nominate, node, victims);
    }

    /// A pod group's preemption (upstream's `actuatePodGroupPreemption`): its victims across the
    /// cluster; the members' nominations are the scheduling failure's to write.
    pub(super) fn actuate_group(&self, preemptor: Preemptor, victims: &[Arc<AssignedPod>]) {
        self.start(preemptor, None, CLUSTER, victims);
    }

    fn start(
        &self,
        preemptor: Preemptor,
        nominate: Option<(String, String)>,
        node: &str,
        victims: &[Arc<AssignedPod>],
    ) {
        let victims: Vec<Arc<AssignedPod>> = victims
            .iter()
            .filter(|v| {
                let terminating = v.is_terminating();
                if terminating {
                    debug!(preemptor = %preemptor.key, victim = %v.key(), %node,
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
        let preemption = Preemption {
            message: format!(
                "{}: preempting to accommodate a higher priority {}",
                preemptor.scheduler, preemptor.kind
            ),
            preemptor,
            nominate,
            node: node.to_string(),
            victims,
            nominator: self.handle.nominator.clone(),
            waiting: self.handle.waiting_pods.clone(),
            preempting: self.preempting.clone(),
            metrics,
            started: Instant::now(),
        };
        self.preempting
            .lock()
            .insert(preemption.preemptor.uid.clone());
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
        info!(preemptor = %self.preemptor.key, node = %self.node, victims = self.victims.len(),
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
                error!(preemptor = %self.preemptor.key, %err, "Error occurred during async preemption");
                failed = true;
            } else if let Err(err) = self.evict(&api, last).await {
                error!(preemptor = %self.preemptor.key, %err,
                    "Error occurred during async preemption of the last victim");
                failed = true;
            }
        }
        drop(running);
        self.preempting.lock().remove(&self.preemptor.uid);
        if let Some(m) = &self.metrics {
            m.preemption_finished(!failed, self.started);
        }
        let result = if failed { "error" } else { "success" };
        info!(preemptor = %self.preemptor.key, node = %self.node, result,
            "async preemption finished completely");
    }

    /// Writes the preemptor's nomination to its node unless it shows it already. Whether the
    /// patch failed (not critical: the scheduling failure handler writes it too).
    async fn nominate(&self, api: &Arc<dyn ApiClient>) -> bool {
        let Some((namespace, name)) = &self.nominate else {
            return false;
        };
        let nominate = PatchPodStatus {
            namespace: namespace.clone(),
            name: name.clone(),
            condition: None,
            nominating: Some(NominatingInfo {
                nominated_node_name: self.node.clone(),
                mode: NominatingMode::Override,
            }),
        };
        match api.call(nominate).await {
            Ok(()) => false,
            Err(err) => {
                error!(preemptor = %self.preemptor.key, node = %self.node, %err,
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
            if p.priority() >= self.preemptor.priority || nominator.is_foreign(&p.key()) {
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
            info!(preemptor = %self.preemptor.key, victim = %victim.key(), node = %self.node,
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
                info!(preemptor = %self.preemptor.key, victim = %victim.key(), node = %self.node,
                    "preemptor pod preempted victim pod");
                self.preempted_event(api, victim, "");
                Ok(())
            }
            Err(ApiError::NotFound(_)) => {
                debug!(preemptor = %self.preemptor.key, victim = %victim.key(), "victim pod is already deleted");
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
        let regarding = object_ref("v1", "Pod", victim.namespace(), victim.name(), victim.uid());
        api.record_event(ApiEvent {
            reporting_controller: self.preemptor.scheduler.clone(),
            regarding,
            related: Some(self.preemptor.reference.clone()),
            type_: "Normal",
            reason: "Preempted",
            action: "Preempting",
            note: format!(
                "Preempted by {} {} on node {}{suffix}",
                self.preemptor.kind, self.preemptor.uid, self.node
            ),
        });
    }
}
