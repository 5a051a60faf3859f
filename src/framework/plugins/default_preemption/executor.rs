//! The preemption executor (upstream's `framework/preemption/executor.go`): clears lower-priority
//! nominations on the chosen node and evicts the victims, in the background (asynchronous
//! preemption).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::framework::interface::{NominatingInfo, NominatingMode};
use crate::framework::plugins::names::DEFAULT_PREEMPTION;
use crate::framework::registry::{ApiError, Handle};
use crate::framework::types::DISRUPTION_TARGET;
use crate::framework::types::{AssignedPod, PodInfo, PodView};

/// The reason of the `DisruptionTarget` condition preemption puts on its victims.
pub(super) const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Carries out a decided preemption (upstream's `Executor`), and knows which preemptors are still
/// waiting for their victims to go.
pub struct Executor {
    handle: Handle,
    /// UIDs of preemptors whose victims are still being evicted (upstream's `preempting`).
    pub(super) preempting: Arc<Mutex<HashSet<String>>>,
}

impl Executor {
    pub fn new(handle: Handle) -> Executor {
        Executor {
            handle,
            preempting: Arc::default(),
        }
    }

    /// Whether the preemption of the pod with `uid` is still evicting its victims.
    pub fn is_preempting(&self, uid: &str) -> bool {
        self.preempting.lock().contains(uid)
    }

    /// Clears lower-priority nominations on `node` and evicts `victims` there, in the background
    /// (upstream's asynchronous preemption): waiting pods are rejected, the others get the
    /// `DisruptionTarget` condition and are deleted gracefully.
    pub fn actuate(&self, pod: &PodInfo, node: &str, victims: &[Arc<AssignedPod>]) {
        let selected = victims.len();
        let victims: Vec<Arc<AssignedPod>> = victims
            .iter()
            .filter(|v| !v.is_terminating())
            .cloned()
            .collect();
        if victims.is_empty() {
            return;
        }
        let metrics = self.handle.metrics.clone();
        if let Some(m) = &metrics {
            m.preemption_victims.observe(selected as f64);
        }
        let lower_nominated: Vec<Arc<PodInfo>> = match &self.handle.nominator {
            Some(n) => n
                .nominated_pods_for_node(node)
                .into_iter()
                .filter(|p| p.priority() < pod.priority())
                .collect(),
            None => Vec::new(),
        };
        let api = self.handle.api.clone();
        let waiting = self.handle.waiting_pods.clone();
        let message = format!(
            "{}: preempting to accommodate a higher priority pod",
            pod.scheduler_name()
        );
        let (preemptor, node) = (pod.key(), node.to_string());
        let (preempting, uid) = (self.preempting.clone(), pod.uid().to_string());
        preempting.lock().insert(uid.clone());
        let work = async move {
            let started = Instant::now();
            let mut succeeded = true;
            for p in &lower_nominated {
                let clear = NominatingInfo {
                    nominated_node_name: String::new(),
                    mode: NominatingMode::Override,
                };
                if let Err(err) = api
                    .patch_pod_status(p.namespace(), p.name(), None, Some(clear))
                    .await
                {
                    warn!(pod = %p.key(), %err, "cannot clear nominatedNodeName");
                    succeeded = false;
                }
            }
            let evictions = victims.iter().map(|v| {
                let (api, waiting, message) = (api.clone(), waiting.clone(), message.clone());
                let (preemptor, node) = (preemptor.clone(), node.clone());
                async move {
                    if waiting.reject(v.uid(), "preempted") {
                        info!(%preemptor, victim = %v.key(), %node, "preempted a waiting pod");
                        return true;
                    }
                    let condition = PodCondition {
                        type_: DISRUPTION_TARGET.into(),
                        status: "True".into(),
                        reason: Some(REASON_PREEMPTION_BY_SCHEDULER.into()),
                        message: Some(message),
                        last_transition_time: Some(Time(Timestamp::now())),
                        ..Default::default()
                    };
                    let r = match api
                        .patch_pod_status(v.namespace(), v.name(), Some(condition), None)
                        .await
                    {
                        Ok(()) => api.delete_pod(v.namespace(), v.name(), v.uid()).await,
                        Err(e) => Err(e),
                    };
                    match r {
                        Ok(()) => info!(%preemptor, victim = %v.key(), %node, "preempted"),
                        Err(ApiError::NotFound(_)) => {
                            debug!(victim = %v.key(), "victim pod is already deleted")
                        }
                        Err(err) => {
                            warn!(%preemptor, victim = %v.key(), %err, "preempting");
                            return false;
                        }
                    }
                    true
                }
            });
            // The evictions run concurrently (upstream: DefaultPreemption's parallel workers).
            let running = metrics
                .as_ref()
                .map(|m| m.running(DEFAULT_PREEMPTION, victims.len()));
            let results = futures::future::join_all(evictions).await;
            drop(running);
            preempting.lock().remove(&uid);
            if let Some(m) = &metrics {
                succeeded &= results.iter().all(|ok| *ok);
                m.preemption_finished(succeeded, started);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(work);
            }
            // No runtime (tests, offline simulation): run it here.
            Err(_) => futures::executor::block_on(work),
        }
    }
}
