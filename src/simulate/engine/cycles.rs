//! The candidates through the scheduler's queue and scheduling cycle: the first pass in the
//! order the scheduler pops them, the retries of unschedulable pods, the pods Permit holds, and
//! what a pod not placed reports (its message, each node's rejecting plugin, the preemption).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use super::{SimulateError, Simulation, Waiting};
use crate::framework::api_calls::{ApiClient, Verb};
use crate::framework::types::{PodInfo, QueuedEntity, QueuedPodGroup, QueuedPodInfo};
use crate::scheduler::cycle::{Failure, PodDecision, pod_group_of};
use crate::scheduler::run::scheduling_queue;
use crate::simulate::report::{NodeReason, Outcome, PodResult, Preemption};

impl Simulation {
    /// Every candidate through the queue, one cycle each, as the scheduler pops them.
    pub(super) fn run(
        &mut self,
        config: &crate::config::Config,
        candidates: Vec<Arc<PodInfo>>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(), SimulateError> {
        let total = candidates.len();
        let popped = self.first_pass(config, &candidates, &mut |done| progress(done, total))?;
        let tried: HashSet<String> = popped.iter().map(|qpi| qpi.pod_info.key()).collect();
        self.retry_unschedulable(&popped);
        // Pods a PreEnqueue plugin keeps out of the queue (scheduling gates).
        for pod in candidates.iter().filter(|p| !tried.contains(&p.key())) {
            let status = self.framework_for(pod).run_pre_enqueue_plugins(pod);
            let mut r = result(pod, Outcome::Gated, None, status.message());
            if status.is_success() {
                r.message = "not popped from the queue".into();
            }
            self.results.push(r);
            progress(self.results.len(), total);
        }
        for w in std::mem::take(&mut self.waiting) {
            let plugins = w
                .fwk
                .waiting_pods()
                .get(w.reserved.assumed.uid())
                .map(|wp| wp.pending_plugins().join(", "))
                .unwrap_or_default();
            self.results[w.index].message = format!(
                "waiting at Permit for {plugins} on node {}: nothing allowed it, so the scheduler rejects it when the wait times out",
                w.reserved.host
            );
        }
        Ok(())
    }

    /// Every candidate through the queue once, in the order the scheduler pops them; returns the
    /// popped pods (`self.results[i]` is the result of the `i`th). `progress(done)` after each.
    pub(in crate::simulate) fn first_pass(
        &mut self,
        config: &crate::config::Config,
        candidates: &[Arc<PodInfo>],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<QueuedPodInfo>, SimulateError> {
        let queue =
            scheduling_queue(config, &self.frameworks)?.with_nominator(self.nominator.clone());
        for pod in candidates {
            queue.add(pod.clone());
        }
        let mut popped: Vec<QueuedPodInfo> = Vec::new();
        while queue.counts().active > 0 {
            let Some(qpi) = futures::executor::block_on(queue.pop()) else {
                break;
            };
            // A member of a PodGroup brings its group's waiting members, as in the scheduler.
            let entity = match pod_group_of(&self.handle, &qpi.pod_info) {
                Some((group, others)) => {
                    let mut members = queue.take(&others);
                    members.push(qpi);
                    QueuedEntity::Group(QueuedPodGroup::new(group, members))
                }
                None => QueuedEntity::Pod(qpi),
            };
            let first = self.results.len();
            let indexes: Vec<usize> = (first..first + entity.pods().count()).collect();
            let results = self.try_entity(&entity, &indexes);
            self.results.extend(results);
            let (members, _) = entity.into_members();
            for qpi in members {
                queue.done(&qpi.pod_info.key());
                popped.push(qpi);
            }
            self.settle_waiting();
            progress(self.results.len());
        }
        Ok(popped)
    }

    /// The scheduler tries an unschedulable pod again once the cluster changes, and pods placed
    /// after it are such changes (a pod whose affinity target came later in the queue fits now):
    /// the unschedulable pods are tried again against what the others left, pass after pass, until
    /// a pass places none. `popped[i]` is the pod of `self.results[i]`.
    fn retry_unschedulable(&mut self, popped: &[QueuedPodInfo]) {
        let unschedulable = |results: &[PodResult]| {
            results
                .iter()
                .filter(|r| r.result == Outcome::Unschedulable)
                .count()
        };
        let mut before = unschedulable(&self.results);
        // A pass goes on only when the previous one left fewer pods unschedulable (a gang member
        // may turn back when Permit rejects its group), so the passes end.
        while before > 0 {
            let mut index = 0;
            while index < popped.len() {
                if self.results[index].result != Outcome::Unschedulable {
                    index += 1;
                    continue;
                }
                // A group's unschedulable members are tried again together.
                let (entity, indexes) = self.retried_entity(popped, index);
                let retried = self.try_entity(&entity, &indexes);
                for (i, r) in indexes.iter().zip(retried) {
                    self.results[*i] = r;
                }
                self.settle_waiting();
                index += 1;
            }
            let after = unschedulable(&self.results);
            if after >= before {
                return;
            }
            before = after;
        }
    }

    /// The entity to retry for the unschedulable pod `popped[index]`: the pod alone, or with the
    /// other unschedulable members of its PodGroup (they come after it, their results go to
    /// their own indexes); and those indexes.
    fn retried_entity(&self, popped: &[QueuedPodInfo], index: usize) -> (QueuedEntity, Vec<usize>) {
        let qpi = &popped[index];
        let Some((group, others)) = pod_group_of(&self.handle, &qpi.pod_info) else {
            return (QueuedEntity::Pod(qpi.clone()), vec![index]);
        };
        let mut indexes = vec![index];
        indexes.extend((0..popped.len()).filter(|&i| {
            i != index
                && self.results[i].result == Outcome::Unschedulable
                && others.contains(&popped[i].pod_info.key())
        }));
        let group =
            QueuedPodGroup::new(group, indexes.iter().map(|&i| popped[i].clone()).collect());
        // The group's order decides; the indexes follow it.
        let indexes = group
            .members
            .iter()
            .filter_map(|m| {
                indexes
                    .iter()
                    .copied()
                    .find(|&i| popped[i].pod_info.key() == m.pod_info.key())
            })
            .collect();
        (QueuedEntity::Group(group), indexes)
    }

    /// One scheduling cycle (the scheduler's, up to Permit) for `entity`; the result of its `i`th
    /// pod goes to `self.results[indexes[i]]`. What PostFilter hands over
    /// (preemption's evictions) lands in the recording API, and is reported as what the
    /// preemption would do.
    fn try_entity(&mut self, entity: &QueuedEntity, indexes: &[usize]) -> Vec<PodResult> {
        let pods: Vec<Arc<PodInfo>> = entity.pods().cloned().collect();
        let Some(first) = pods.first() else {
            return Vec::new();
        };
        let fwk = self.framework_for(first);
        self.api.clear();
        let (decisions, outcome) = self
            .cycle
            .schedule(&fwk, entity, Instant::now())
            .into_parts();
        if let (QueuedEntity::Group(group), Some(outcome)) = (entity, outcome) {
            self.group_outcomes.insert(group.key(), outcome);
        }
        pods.iter()
            .zip(decisions)
            .zip(indexes)
            .map(|((pod, decision), &index)| match decision {
                PodDecision::Assumed(reserved) if reserved.waiting => {
                    self.waiting.push(Waiting {
                        index,
                        fwk: fwk.clone(),
                        reserved,
                    });
                    // The message is written once the simulation ends and the pod still waits.
                    result(pod, Outcome::Waiting, None, String::new())
                }
                PodDecision::Assumed(reserved) => {
                    result(pod, Outcome::Scheduled, Some(reserved.host), String::new())
                }
                PodDecision::Failed(failure) => self.failed(pod, failure),
            })
            .collect()
    }

    /// A pod not placed: the message the FailedScheduling event would carry, every node's
    /// rejecting plugin when no node fit, and the preemption PostFilter would start.
    fn failed(&mut self, pod: &PodInfo, failure: Failure) -> PodResult {
        let api: Arc<dyn ApiClient> = self.api.clone();
        self.handle.dispatcher.run_queued(&api);
        let preemption = failure
            .nominated
            .clone()
            .filter(|node| !node.is_empty())
            .map(|node| Preemption {
                node,
                victims: self.api.keys::<Pod>(Verb::Delete, None),
            });
        let Some(fit) = failure.fit else {
            // Rejected at Reserve or Permit, an error, or a member of a group (its group's
            // preemption nominates it).
            let outcome = match (&preemption, failure.unschedulable) {
                (Some(_), _) => Outcome::WouldPreempt,
                (None, true) => Outcome::Unschedulable,
                (None, false) => Outcome::Error,
            };
            let message = match &failure.plugin {
                Some(p) => format!("{p}: {}", failure.message),
                None => failure.message,
            };
            let mut r = result(pod, outcome, None, message);
            r.preemption = preemption;
            return r;
        };
        let snapshot = self.handle.snapshot.load();
        let mut node_reasons: Vec<NodeReason> = snapshot
            .nodes()
            .iter()
            .map(|n| {
                let s = fit.diagnosis.node_to_status.get(n.name());
                NodeReason {
                    node: n.name().to_string(),
                    plugin: s.plugin().unwrap_or("").to_string(),
                    reasons: s.reasons().to_vec(),
                }
            })
            .collect();
        node_reasons.sort_by(|a, b| a.node.cmp(&b.node));
        let outcome = if preemption.is_some() {
            Outcome::WouldPreempt
        } else {
            Outcome::Unschedulable
        };
        let mut r = result(pod, outcome, None, failure.message);
        r.preemption = preemption;
        r.node_reasons = node_reasons;
        r
    }

    /// Pods Permit held that another pod's Permit allowed (placed) or a plugin rejected (their
    /// reservation undone, as the binding cycle would).
    fn settle_waiting(&mut self) {
        let mut still = Vec::new();
        for mut w in std::mem::take(&mut self.waiting) {
            let uid = w.reserved.assumed.uid().to_string();
            let outcome = w.fwk.waiting_pods().get(&uid).and_then(|wp| wp.outcome());
            match outcome {
                None => still.push(w),
                Some(s) => {
                    w.fwk.waiting_pods().remove(&uid);
                    let r = &mut self.results[w.index];
                    if s.is_success() {
                        r.result = Outcome::Scheduled;
                        r.node = Some(w.reserved.host.clone());
                        r.message.clear();
                    } else {
                        self.cycle.undo(&w.fwk, &mut w.reserved);
                        let failed = self.failed(&w.reserved.assumed, Failure::from_status(&s));
                        let r = &mut self.results[w.index];
                        r.result = failed.result;
                        r.message = failed.message;
                    }
                }
            }
        }
        self.waiting = still;
    }
}

fn result(pod: &PodInfo, outcome: Outcome, node: Option<String>, message: String) -> PodResult {
    PodResult {
        namespace: pod.namespace().to_string(),
        name: pod.name().to_string(),
        scheduler_name: pod.scheduler_name().to_string(),
        result: outcome,
        node,
        message,
        preemption: None,
        node_reasons: Vec::new(),
    }
}
