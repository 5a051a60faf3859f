//! The preemption evaluator: eligibility, the dry run on candidate nodes (upstream's
//! `SelectVictimsOnNode` and `DryRunPreemption`), the choice of the node
//! (`pickOneNodeForPreemption`) and the eviction of the victims (the asynchronous executor).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};
use rayon::prelude::*;
use tracing::{debug, info, warn};

use super::DefaultPreemptionArgs;
use crate::framework::args::{decode, typed};
use crate::framework::extender::Victims;
use crate::framework::interface::{
    Code, CycleState, FrameworkHandle, NodeToStatus, NominatingInfo, NominatingMode,
    PostFilterPlugin, PostFilterResult, PreEnqueuePlugin, Status,
};
use crate::framework::listers::Informer;
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::{ApiError, Handle, PluginRegistration};
use crate::framework::schedule::{Diagnosis, FitError};
use crate::framework::types::DISRUPTION_TARGET;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView, Snapshot};

/// A node where every lower-priority pod was removed and the pod still does not fit.
pub const ERR_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// The status of nodes where removing pods cannot help (UnschedulableAndUnresolvable).
pub const ERR_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// PreEnqueue's reason while the pod's own preemption is still evicting.
pub const WAITING_FOR_PREEMPTION: &str = "waiting for the preemption for this pod to be finished";

const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Picks the random start among `n` potential nodes (upstream's `getOffsetRand`).
type OffsetFn = Box<dyn Fn(usize) -> usize + Send + Sync>;

pub struct DefaultPreemption {
    handle: Handle,
    min_candidate_nodes_percentage: i32,
    min_candidate_nodes_absolute: i32,
    offset: OffsetFn,
    /// UIDs of preemptors whose victims are still being evicted (upstream's `preempting`).
    preempting: Arc<parking_lot::Mutex<HashSet<String>>>,
}

/// A node and the pods to evict there.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    /// Most important first.
    pub victims: Vec<Arc<AssignedPod>>,
    pub num_pdb_violations: usize,
}

impl DefaultPreemption {
    pub fn new(args: &DefaultPreemptionArgs, handle: Handle) -> DefaultPreemption {
        DefaultPreemption {
            handle,
            min_candidate_nodes_percentage: args.min_candidate_nodes_percentage.unwrap_or(10),
            min_candidate_nodes_absolute: args.min_candidate_nodes_absolute.unwrap_or(100),
            offset: Box::new(|n| if n == 0 { 0 } else { fastrand::usize(..n) }),
            preempting: Arc::default(),
        }
    }

    /// Replaces the random offset (tests).
    pub fn with_offset(mut self, offset: impl Fn(usize) -> usize + Send + Sync + 'static) -> Self {
        self.offset = Box::new(offset);
        self
    }

    /// How many candidates to find among `num_nodes` potential nodes (upstream's
    /// `calculateNumCandidates`).
    pub fn num_candidates(&self, num_nodes: usize) -> usize {
        let pct = usize::try_from(self.min_candidate_nodes_percentage).unwrap_or(0);
        let abs = usize::try_from(self.min_candidate_nodes_absolute).unwrap_or(0);
        (num_nodes * pct / 100).max(abs).min(num_nodes)
    }

    /// Upstream's `PodEligibleToPreemptOthers`.
    fn eligible(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominated_status: &Status,
    ) -> Result<(), &'static str> {
        let policy = pod.spec().and_then(|s| s.preemption_policy.as_deref());
        if policy == Some("Never") {
            return Err(NOT_ELIGIBLE_NEVER);
        }
        let nominated = pod.nominated_node_name();
        if nominated.is_empty() || nominated_status.code() == Code::UnschedulableAndUnresolvable {
            return Ok(());
        }
        if let Some(node) = snapshot.get(nominated)
            && node
                .pods
                .iter()
                .any(|p| p.priority() < pod.priority() && terminating_by_preemption(p))
        {
            return Err(NOT_ELIGIBLE_TERMINATING);
        }
        Ok(())
    }

    /// Upstream's `Evaluator.Preempt` (without the "preemption: " prefix).
    pub fn preempt(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let nominated_status = filtered.get(pod.nominated_node_name());
        if let Err(msg) = self.eligible(pod, snapshot, nominated_status) {
            debug!(pod = %pod.key(), reason = msg, "pod is not eligible for preemption");
            return (None, Status::unschedulable(msg));
        }
        let all = snapshot.nodes();
        if all.is_empty() {
            return (None, Status::error("no nodes available"));
        }
        let potential: Vec<&Arc<NodeInfo>> = all
            .iter()
            .filter(|n| filtered.get(n.name()).code() == Code::Unschedulable)
            .collect();
        let (candidates, statuses, errors) = if potential.is_empty() {
            (Vec::new(), NodeToStatus::new(), Vec::new())
        } else {
            let pdbs = self.handle.listers.pod_disruption_budgets.list();
            let offset = (self.offset)(potential.len());
            let num = self.num_candidates(potential.len());
            self.dry_run_preemption(fwk, state, pod, &potential, &pdbs, offset, num)
        };
        if candidates.is_empty() && !errors.is_empty() {
            return (None, Status::error(aggregate(&errors)));
        }
        if candidates.is_empty() {
            return not_helpful(pod, all.len(), statuses);
        }
        let candidates = match self.call_extenders(pod, candidates, snapshot) {
            Ok(c) => c,
            Err(s) => return (None, s),
        };
        let Some(best) = select_candidate(&candidates) else {
            return (
                None,
                Status::unschedulable("no candidate node for preemption"),
            );
        };
        info!(pod = %pod.key(), node = %best.name, victims = best.victims.len(), "preempting");
        self.actuate(pod, best);
        (
            Some(PostFilterResult::nominate(&best.name)),
            Status::success(),
        )
    }

    /// Upstream's `callExtenders`: each interested extender that supports preemption narrows the
    /// candidates (node -> victims); an ignorable one's failures are skipped.
    fn call_extenders(
        &self,
        pod: &PodInfo,
        candidates: Vec<Candidate>,
        snapshot: &Snapshot,
    ) -> Result<Vec<Candidate>, Status> {
        if self.handle.extenders.is_empty() {
            return Ok(candidates);
        }
        let mut victims: BTreeMap<String, Victims> = candidates
            .into_iter()
            .map(|c| {
                let v = Victims {
                    pods: c.victims,
                    num_pdb_violations: i64::try_from(c.num_pdb_violations).unwrap_or(i64::MAX),
                };
                (c.name, v)
            })
            .collect();
        let node_pods = |name: &str| snapshot.get(name).map(|n| n.pods.clone());
        for extender in &self.handle.extenders {
            if !extender.supports_preemption() || !extender.is_interested(pod) {
                continue;
            }
            let mut answer = match extender.process_preemption(pod, victims.clone(), &node_pods) {
                Ok(a) => a,
                Err(e) if extender.is_ignorable() => {
                    debug!(extender = extender.name(), error = %e,
                        "skipped extender as it returned error and has ignorable flag set");
                    continue;
                }
                Err(e) => return Err(Status::error(e)),
            };
            let empty: Vec<String> = answer
                .iter()
                .filter(|(_, v)| v.pods.is_empty())
                .map(|(n, _)| n.clone())
                .collect();
            for node in empty {
                if !extender.is_ignorable() {
                    return Err(Status::error(format!(
                        "expected at least one victim pod on node {node:?}"
                    )));
                }
                answer.remove(&node);
            }
            victims = answer;
            if victims.is_empty() {
                break;
            }
        }
        Ok(victims
            .into_iter()
            .map(|(name, v)| Candidate {
                name,
                victims: v.pods,
                num_pdb_violations: usize::try_from(v.num_pdb_violations).unwrap_or(0),
            })
            .collect())
    }

    /// Simulates preemption on `potential[(offset + i) % n]` until `num` candidates are found
    /// (at least one without PDB violations); upstream's `DryRunPreemption`. Nodes are checked in
    /// parallel chunks and consumed in order, so the result equals a sequential scan.
    #[allow(clippy::too_many_arguments)]
    pub fn dry_run_preemption(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        potential: &[&Arc<NodeInfo>],
        pdbs: &[Arc<PodDisruptionBudget>],
        offset: usize,
        num: usize,
    ) -> (Vec<Candidate>, NodeToStatus, Vec<String>) {
        let n = potential.len();
        let mut non_violating = Vec::new();
        let mut violating = Vec::new();
        let mut statuses = NodeToStatus::new();
        let mut errors = Vec::new();
        let check = |i: usize| {
            let node = potential[(offset + i) % n];
            let mut node_copy = NodeInfo::clone(node);
            let mut state_copy = state.clone();
            let r = self.select_victims_on_node(fwk, &mut state_copy, pod, &mut node_copy, pdbs);
            (node.name().to_string(), r)
        };
        let mut next = 0;
        'outer: while next < n {
            let end = (next + CHUNK).min(n);
            let results: Vec<_> = if end - next >= 2 {
                (next..end).into_par_iter().map(check).collect()
            } else {
                (next..end).map(check).collect()
            };
            next = end;
            for (name, r) in results {
                match r {
                    Ok((victims, num_pdb_violations)) if !victims.is_empty() => {
                        let c = Candidate {
                            name,
                            victims,
                            num_pdb_violations,
                        };
                        if num_pdb_violations == 0 {
                            non_violating.push(c);
                        } else {
                            violating.push(c);
                        }
                        if !non_violating.is_empty() && non_violating.len() + violating.len() >= num
                        {
                            break 'outer;
                        }
                    }
                    Ok(_) => {
                        let msg = format!("expected at least one victim pod on node {name:?}");
                        errors.push(msg.clone());
                        statuses.set(name, Status::error(msg));
                    }
                    Err(s) => {
                        if s.code() == Code::Error {
                            errors.push(s.message());
                        }
                        statuses.set(name, s);
                    }
                }
            }
        }
        non_violating.extend(violating);
        (non_violating, statuses, errors)
    }

    /// The fewest lower-priority pods to remove from `node` so that `pod` fits, reprieving PDB
    /// violators first; with the number of victims that violate a PDB. Upstream's
    /// `SelectVictimsOnNode`, on copies of the state and the node.
    pub fn select_victims_on_node(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &mut NodeInfo,
        pdbs: &[Arc<PodDisruptionBudget>],
    ) -> Result<(Vec<Arc<AssignedPod>>, usize), Status> {
        let remove = |state: &mut CycleState, node: &mut NodeInfo, p: &Arc<AssignedPod>| {
            node.remove_pod(p)
                .map_err(|e| Status::error(e.to_string()))?;
            let s = fwk.run_pre_filter_extension_remove_pod(state, pod, p, node);
            if s.is_success() { Ok(()) } else { Err(s) }
        };
        let add = |state: &mut CycleState, node: &mut NodeInfo, p: &Arc<AssignedPod>| {
            node.add_pod(p.clone());
            let s = fwk.run_pre_filter_extension_add_pod(state, pod, p, node);
            if s.is_success() { Ok(()) } else { Err(s) }
        };
        let mut potential: Vec<Arc<AssignedPod>> = node
            .pods
            .iter()
            .filter(|p| p.priority() < pod.priority())
            .cloned()
            .collect();
        for p in &potential {
            remove(state, node, p)?;
        }
        if potential.is_empty() {
            return Err(Status::unresolvable(ERR_NO_VICTIMS));
        }
        let s = fwk.run_filter_plugins_with_nominated_pods(state, pod, node);
        if !s.is_success() {
            return Err(s);
        }
        let now = Timestamp::now();
        potential.sort_by(|a, b| more_important_cmp(a, b, now));
        let (violating, non_violating) = filter_pods_with_pdb_violation(&potential, pdbs);
        let mut victims = Vec::new();
        let mut num_violating = 0;
        let mut reprieve = |p: &Arc<AssignedPod>, victims: &mut Vec<Arc<AssignedPod>>| {
            add(state, node, p)?;
            let fits = fwk
                .run_filter_plugins_with_nominated_pods(state, pod, node)
                .is_success();
            if !fits {
                remove(state, node, p)?;
                victims.push(p.clone());
            }
            Ok::<bool, Status>(fits)
        };
        for p in &violating {
            if !reprieve(p, &mut victims)? {
                num_violating += 1;
            }
        }
        for p in &non_violating {
            reprieve(p, &mut victims)?;
        }
        if !violating.is_empty() && !non_violating.is_empty() {
            victims.sort_by(|a, b| more_important_cmp(a, b, now));
        }
        Ok((victims, num_violating))
    }

    /// Clears lower-priority nominations on the node and evicts the victims, in the background
    /// (upstream's asynchronous preemption): waiting pods are rejected, the others get the
    /// `DisruptionTarget` condition and are deleted gracefully.
    fn actuate(&self, pod: &PodInfo, c: &Candidate) {
        let victims: Vec<Arc<AssignedPod>> = c
            .victims
            .iter()
            .filter(|v| !v.is_terminating())
            .cloned()
            .collect();
        if victims.is_empty() {
            return;
        }
        let lower_nominated: Vec<Arc<PodInfo>> = match &self.handle.nominator {
            Some(n) => n
                .nominated_pods_for_node(&c.name)
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
        let (preemptor, node) = (pod.key(), c.name.clone());
        let (preempting, uid) = (self.preempting.clone(), pod.uid().to_string());
        preempting.lock().insert(uid.clone());
        let work = async move {
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
                }
            }
            let evictions = victims.iter().map(|v| {
                let (api, waiting, message) = (api.clone(), waiting.clone(), message.clone());
                let (preemptor, node) = (preemptor.clone(), node.clone());
                async move {
                    if waiting.reject(v.uid(), "preempted") {
                        info!(%preemptor, victim = %v.key(), %node, "preempted a waiting pod");
                        return;
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
                        Err(err) => warn!(%preemptor, victim = %v.key(), %err, "preempting"),
                    }
                }
            });
            futures::future::join_all(evictions).await;
            preempting.lock().remove(&uid);
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

/// Nodes checked per parallel round of the dry run.
const CHUNK: usize = 16;

fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A victim the scheduler is already evicting: deleted, with `DisruptionTarget=True` by
/// `PreemptionByScheduler`.
fn terminating_by_preemption(p: &AssignedPod) -> bool {
    p.is_terminating()
        && p.disruption_target().is_some_and(|c| {
            c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
        })
}

/// `status.startTime`, or `now` for pods not started yet (upstream's `GetPodStartTime`).
fn start_time(p: &AssignedPod, now: Timestamp) -> Timestamp {
    p.start_time().map_or(now, |t| t.0)
}

fn more_important_cmp(a: &AssignedPod, b: &AssignedPod, now: Timestamp) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| start_time(a, now).cmp(&start_time(b, now)))
}

/// Higher priority, or equal priority and started earlier (upstream's `MoreImportantPod`).
pub fn more_important_pod(a: &AssignedPod, b: &AssignedPod) -> bool {
    more_important_cmp(a, b, Timestamp::now()) == Ordering::Less
}

/// Splits `pods` (most important first) into those whose eviction would exceed a PDB's allowed
/// disruptions and the others (upstream's `filterPodsWithPDBViolation`).
fn filter_pods_with_pdb_violation(
    pods: &[Arc<AssignedPod>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<AssignedPod>>, Vec<Arc<AssignedPod>>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|p| {
            p.status
                .as_ref()
                .map_or(0, |s| s.disruptions_allowed.unwrap_or(0))
        })
        .collect();
    // A PDB without a selector selects nothing; an empty one is skipped as upstream does.
    let selectors: Vec<Option<Selector>> = pdbs
        .iter()
        .map(|p| {
            let sel = p.spec.as_ref()?.selector.clone()?;
            Selector::try_from(sel).ok().filter(|s| !s.selects_all())
        })
        .collect();
    let empty = BTreeMap::new();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for p in pods {
        let labels = p.labels().unwrap_or(&empty);
        let mut violated = false;
        if !labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref() != Some(p.namespace()) {
                    continue;
                }
                let Some(sel) = &selectors[i] else { continue };
                if !sel.matches(labels) {
                    continue;
                }
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(p.name()));
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(p.clone());
        } else {
            non_violating.push(p.clone());
        }
    }
    (violating, non_violating)
}

/// No node would fit even after preemption: upstream's FitError over the dry run's statuses, every
/// other node "not helpful"; the pod's nomination is cleared.
fn not_helpful(
    pod: &PodInfo,
    num_all_nodes: usize,
    statuses: NodeToStatus,
) -> (Option<PostFilterResult>, Status) {
    let mut diagnosis = Diagnosis {
        node_to_status: statuses,
        ..Default::default()
    };
    diagnosis
        .node_to_status
        .set_absent_nodes_status(Status::unresolvable(ERR_NOT_HELPFUL));
    let fit = FitError {
        pod: pod.key(),
        num_all_nodes,
        diagnosis,
    };
    debug!(pod = %pod.key(), "no preemption candidate; preemption is not helpful");
    (
        Some(PostFilterResult::nominate("")),
        Status::unschedulable(fit.to_string()),
    )
}

/// The best candidate (upstream's `SelectCandidate`).
fn select_candidate(candidates: &[Candidate]) -> Option<&Candidate> {
    match candidates {
        [] => None,
        [one] => Some(one),
        many => many.get(pick_one_node_for_preemption(many)),
    }
}

/// The index of the candidate to preempt on, by upstream's criteria in order: fewest PDB
/// violations, lowest highest-victim priority, smallest sum of victim priorities, fewest victims,
/// latest start time of the highest-priority victims; the first remaining on a tie.
pub fn pick_one_node_for_preemption(candidates: &[Candidate]) -> usize {
    let now = Timestamp::now();
    let score_fns: [&dyn Fn(&Candidate) -> i128; 5] = [
        &|c| -(c.num_pdb_violations as i128),
        &|c| -i128::from(c.victims.first().map_or(0, |p| p.priority())),
        &|c| {
            -c.victims
                .iter()
                .map(|p| i128::from(p.priority()) + i128::from(i32::MAX) + 1)
                .sum::<i128>()
        },
        &|c| -(c.victims.len() as i128),
        &|c| earliest_start_time(&c.victims, now).as_nanosecond(),
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for f in score_fns {
        let scores: Vec<i128> = remaining.iter().map(|&i| f(&candidates[i])).collect();
        let Some(max) = scores.iter().copied().max() else {
            break;
        };
        remaining = remaining
            .iter()
            .zip(&scores)
            .filter(|(_, s)| **s == max)
            .map(|(i, _)| *i)
            .collect();
        if remaining.len() == 1 {
            break;
        }
    }
    remaining.first().copied().unwrap_or(0)
}

/// The earliest start time among the highest-priority victims (upstream's
/// `GetEarliestPodStartTime`).
fn earliest_start_time(victims: &[Arc<AssignedPod>], now: Timestamp) -> Timestamp {
    let Some(top) = victims.iter().map(|p| p.priority()).max() else {
        return Timestamp::MIN;
    };
    victims
        .iter()
        .filter(|p| p.priority() == top)
        .map(|p| start_time(p, now))
        .min()
        .unwrap_or(Timestamp::MIN)
}

impl_plugin!(
    DefaultPreemption,
    names::DEFAULT_PREEMPTION,
    [PreEnqueue, PostFilter]
);

/// Keeps a preemptor out of the active queue while its victims are being evicted (asynchronous
/// preemption), so it does not preempt again meanwhile.
impl PreEnqueuePlugin for DefaultPreemption {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if self.preempting.lock().contains(pod.uid()) {
            return Status::unresolvable(WAITING_FOR_PREEMPTION);
        }
        Status::success()
    }
}

impl PostFilterPlugin for DefaultPreemption {
    /// Preemption simulates with the framework: see `post_filter_with_framework`.
    fn post_filter(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        _filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        (
            None,
            Status::error("DefaultPreemption runs only through its framework"),
        )
    }

    fn post_filter_with_framework(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let (result, status) = self.preempt(fwk, state, pod, snapshot, filtered);
        let msg = status.message();
        if msg.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), format!("preemption: {msg}")),
        )
    }
}

pub fn registration() -> PluginRegistration {
    PluginRegistration::new(
        DefaultPreemption::EXTENSION_POINTS,
        decode::<DefaultPreemptionArgs>,
        |args, handle| {
            let args = typed::<DefaultPreemptionArgs>(args)?;
            Ok(Arc::new(DefaultPreemption::new(&args, handle.clone())))
        },
    )
    .with_informers(&[Informer::PodDisruptionBudgets])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    use super::*;
    use crate::config::ExtensionPoint::{Filter, PostFilter, PreFilter};
    use crate::framework::registry::{PodNominator, RecordingApi, Registry};
    use crate::framework::runtime::Framework;
    use crate::framework::schedule::{Algorithm, ScheduleError};
    use crate::framework::testing::{NodeBuilder, PodBuilder, handle, profile};

    struct Nominated(Vec<Arc<PodInfo>>);

    impl PodNominator for Nominated {
        fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
            self.0
                .iter()
                .filter(|p| p.nominated_node_name() == node_name)
                .cloned()
                .collect()
        }
    }

    /// A cluster: nodes of 2 cpu (`taint`ed ones untolerable), pods on them, nominated pods, PDBs.
    #[derive(Default)]
    struct Cluster {
        nodes: Vec<(&'static str, bool)>,
        pods: Vec<Pod>,
        nominated: Vec<Pod>,
        pdbs: Vec<PodDisruptionBudget>,
        /// minCandidateNodesPercentage, minCandidateNodesAbsolute and a fixed offset, instead of
        /// the profile's plugin (defaults, random offset).
        candidates: Option<(i32, i32, usize)>,
        extenders: Vec<Arc<dyn crate::framework::extender::Extender>>,
    }

    impl Cluster {
        /// Untainted nodes named `nodes` with `pods` on them.
        fn of(nodes: &[&'static str], pods: Vec<Pod>) -> Cluster {
            Cluster {
                nodes: nodes.iter().map(|n| (*n, false)).collect(),
                pods,
                ..Default::default()
            }
        }
    }

    struct Outcome {
        result: Option<PostFilterResult>,
        status: Status,
        /// The FailedScheduling message as the scheduler renders it.
        message: String,
        api: Arc<RecordingApi>,
    }

    impl Outcome {
        fn nominated(&self) -> Option<&str> {
            self.result
                .as_ref()
                .map(|r| r.nominating_info.nominated_node_name.as_str())
        }

        fn deleted(&self) -> Vec<String> {
            let mut d = self.api.deletions.lock().clone();
            d.sort();
            d
        }

        /// The preemptor is nominated to `node` and exactly `victims` (in "default") go.
        fn assert_preempted(&self, node: &str, victims: &[&str]) {
            assert_eq!(self.nominated(), Some(node));
            let want: Vec<String> = victims.iter().map(|v| format!("default/{v}")).collect();
            assert_eq!(self.deleted(), want);
        }
    }

    fn pod(name: &str, priority: i32, cpu: &str) -> PodBuilder {
        PodBuilder::new(name)
            .priority(priority)
            .container(&[("cpu", cpu)])
    }

    fn on(node: &str, name: &str, priority: i32, cpu: &str) -> Pod {
        pod(name, priority, cpu).node(node).build()
    }

    /// A pod of priority 1 labelled app=db (the PDBs' selector) on `node`.
    fn db_on(node: &str, name: &str, cpu: &str) -> Pod {
        pod(name, 1, cpu).label("app", "db").node(node).build()
    }

    /// The preemptor of most cases: priority 100, requesting `cpu`.
    fn preemptor(cpu: &str) -> Pod {
        pod("p", 100, cpu).build()
    }

    fn started(mut p: Pod, rfc3339: &str) -> Pod {
        let t: Timestamp = rfc3339.parse().expect("time");
        p.status.get_or_insert_with(Default::default).start_time = Some(Time(t));
        p
    }

    fn never(mut p: Pod) -> Pod {
        if let Some(s) = p.spec.as_mut() {
            s.preemption_policy = Some("Never".into());
        }
        p
    }

    fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), app.to_string())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(allowed),
                ..Default::default()
            }),
        }
    }

    fn preempt(cluster: Cluster, preemptor: Pod) -> Outcome {
        let (h, api) = handle();
        let nominated = cluster
            .nominated
            .into_iter()
            .map(|p| Arc::new(PodInfo::from_pod(p)))
            .collect();
        let mut h = h.with_nominator(Arc::new(Nominated(nominated)));
        h.extenders = cluster.extenders.clone();
        for p in cluster.pdbs {
            h.listers.pod_disruption_budgets.apply(p);
        }
        let spec = profile(&[
            (PreFilter, &[names::NODE_RESOURCES_FIT]),
            (
                Filter,
                &[names::TAINT_TOLERATION, names::NODE_RESOURCES_FIT],
            ),
            (PostFilter, &[names::DEFAULT_PREEMPTION]),
        ]);
        let fwk = Framework::new(&spec, &Registry::in_tree(), h).expect("framework");
        let nodes: Vec<Arc<k8s_openapi::api::core::v1::Node>> = cluster
            .nodes
            .iter()
            .map(|(name, tainted)| {
                let b = NodeBuilder::new(name).allocatable(&[("cpu", "2"), ("pods", "110")]);
                let b = if *tainted {
                    b.taint("k", "v", "NoSchedule")
                } else {
                    b
                };
                Arc::new(b.build())
            })
            .collect();
        let pods: Vec<Arc<Pod>> = cluster.pods.into_iter().map(Arc::new).collect();
        let snapshot = Snapshot::from_objects(&nodes, &pods);
        let preemptor = PodInfo::from_pod(preemptor);
        let mut state = CycleState::new();
        let mut fit = match Algorithm::new(0).schedule_pod(&fwk, &mut state, &preemptor, &snapshot)
        {
            Err(ScheduleError::Fit(fit)) => fit,
            other => panic!("expected a fit error, got {other:?}"),
        };
        let filtered = &fit.diagnosis.node_to_status;
        let (result, status) = match cluster.candidates {
            None => fwk.run_post_filter_plugins(&state, &preemptor, &snapshot, filtered),
            Some((percentage, absolute, offset)) => {
                let args = DefaultPreemptionArgs {
                    min_candidate_nodes_percentage: Some(percentage),
                    min_candidate_nodes_absolute: Some(absolute),
                };
                DefaultPreemption::new(&args, fwk.handle().clone())
                    .with_offset(move |_| offset)
                    .post_filter_with_framework(&fwk, &state, &preemptor, &snapshot, filtered)
            }
        };
        if !status.message().is_empty() {
            fit.set_post_filter_message(status.message());
        }
        Outcome {
            result,
            status,
            message: fit.to_string(),
            api,
        }
    }

    #[test]
    fn no_victims_found_and_not_helpful() {
        // n1: full with a pod of the same priority; n2, n3: untolerated taint.
        let out = preempt(
            Cluster {
                nodes: vec![("n1", false), ("n2", true), ("n3", true)],
                pods: vec![on("n1", "same", 100, "2")],
                ..Default::default()
            },
            preemptor("1"),
        );
        assert_eq!(out.status.code(), Code::Unschedulable);
        assert_eq!(
            out.message,
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s). \
             preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
             2 Preemption is not helpful for scheduling."
        );
        // Upstream clears any nomination in this case.
        assert_eq!(out.nominated(), Some(""));
        assert!(out.deleted().is_empty());
    }

    #[test]
    fn unresolvable_everywhere_is_not_helpful() {
        let out = preempt(
            Cluster {
                nodes: vec![("n1", true), ("n2", true)],
                pods: vec![on("n1", "low", 1, "1")],
                ..Default::default()
            },
            preemptor("1"),
        );
        assert_eq!(
            out.status.message(),
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn victims_that_do_not_make_room_leave_the_filter_reason() {
        // Removing the low pod frees 1 cpu of 2; the pod wants 3.
        let out = preempt(
            Cluster::of(
                &["n1"],
                vec![on("n1", "low", 1, "1"), on("n1", "high", 200, "1")],
            ),
            preemptor("2"),
        );
        assert_eq!(
            out.status.message(),
            "preemption: 0/1 nodes are available: 1 Insufficient cpu."
        );
        assert!(out.deleted().is_empty());
    }

    #[test]
    fn preemption_policy_never_is_not_eligible() {
        let out = preempt(
            Cluster::of(&["n1"], vec![on("n1", "low", 1, "2")]),
            never(preemptor("1")),
        );
        assert_eq!(out.status.code(), Code::Unschedulable);
        assert_eq!(
            out.status.message(),
            "preemption: not eligible due to preemptionPolicy=Never."
        );
        assert_eq!(
            out.message,
            "0/1 nodes are available: 1 Insufficient cpu. \
             preemption: not eligible due to preemptionPolicy=Never."
        );
        assert!(out.result.is_none());
        assert!(out.deleted().is_empty());
    }

    #[test]
    fn terminating_victim_on_the_nominated_node_waits() {
        let mut victim = on("n1", "low", 1, "2");
        victim.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        victim
            .status
            .get_or_insert_with(Default::default)
            .conditions = Some(vec![PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(REASON_PREEMPTION_BY_SCHEDULER.into()),
            ..Default::default()
        }]);
        let out = preempt(
            Cluster::of(&["n1", "n2"], vec![victim, on("n2", "low2", 1, "2")]),
            pod("p", 100, "1").nominated_node("n1").build(),
        );
        assert_eq!(
            out.status.message(),
            "preemption: not eligible due to a terminating pod on the nominated node."
        );
        assert!(out.deleted().is_empty());
    }

    #[test]
    fn lowest_priority_victims_first_and_the_rest_reprieved() {
        // n1 (2 cpu): three pods of 0.5, 0.5 and 1 cpu; the pod needs 1 cpu: removing the two
        // least important is enough, the 1-cpu pod of priority 3 is reprieved.
        let out = preempt(
            Cluster::of(
                &["n1"],
                vec![
                    on("n1", "p1", 1, "500m"),
                    on("n1", "p2", 2, "500m"),
                    on("n1", "p3", 3, "1"),
                ],
            ),
            pod("p", 100, "1").scheduler_name("my-sched").build(),
        );
        assert!(out.status.is_success(), "{:?}", out.status);
        out.assert_preempted("n1", &["p1", "p2"]);
        // Victims get DisruptionTarget before deletion.
        let patches = out.api.status_patches.lock().clone();
        let disrupted: Vec<&str> = patches
            .iter()
            .filter(|(_, c, _)| {
                c.as_ref().is_some_and(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.reason.as_deref() == Some("PreemptionByScheduler")
                        && c.message.as_deref()
                            == Some("my-sched: preempting to accommodate a higher priority pod")
                })
            })
            .map(|(k, _, _)| k.as_str())
            .collect();
        assert_eq!(disrupted.len(), 2);
    }

    #[test]
    fn higher_priority_pods_are_never_victims() {
        // Only the 1-cpu low pod may go; it is enough.
        let out = preempt(
            Cluster::of(
                &["n1"],
                vec![on("n1", "low", 1, "1"), on("n1", "higher", 500, "1")],
            ),
            preemptor("1"),
        );
        out.assert_preempted("n1", &["low"]);
    }

    #[test]
    fn pdb_violations_are_avoided_where_possible() {
        // Same victims' priority on both nodes; n1's victim is protected by a PDB allowing none.
        let out = preempt(
            Cluster {
                pdbs: vec![pdb("db", "db", 0)],
                ..Cluster::of(
                    &["n1", "n2"],
                    vec![db_on("n1", "a", "2"), on("n2", "b", 1, "2")],
                )
            },
            preemptor("1"),
        );
        out.assert_preempted("n2", &["b"]);
    }

    #[test]
    fn pdb_violating_victims_when_nothing_else_helps() {
        // Two db pods on one node, the PDB allows one disruption: both must go, one violates.
        let out = preempt(
            Cluster {
                pdbs: vec![pdb("db", "db", 1)],
                ..Cluster::of(&["n1"], vec![db_on("n1", "a", "1"), db_on("n1", "b", "1")])
            },
            preemptor("2"),
        );
        out.assert_preempted("n1", &["a", "b"]);
    }

    #[test]
    fn reprieves_pdb_violators_before_others() {
        // n1: a (PDB, allows 0) and b (no PDB), same priority, 1 cpu each; the pod needs 1 cpu.
        // Violating `a` is reprieved first, so `b` is the victim.
        let out = preempt(
            Cluster {
                pdbs: vec![pdb("db", "db", 0)],
                ..Cluster::of(&["n1"], vec![db_on("n1", "a", "1"), on("n1", "b", 1, "1")])
            },
            preemptor("1"),
        );
        assert_eq!(out.deleted(), ["default/b"]);
    }

    #[test]
    fn candidate_with_lowest_highest_victim_priority() {
        let out = preempt(
            Cluster::of(
                &["n1", "n2"],
                vec![on("n1", "five", 5, "2"), on("n2", "three", 3, "2")],
            ),
            preemptor("1"),
        );
        out.assert_preempted("n2", &["three"]);
    }

    #[test]
    fn candidate_with_smallest_priority_sum_then_fewest_victims() {
        // n1: two victims of priority 1; n2: one victim of priority 1 (and a reprieved-free node).
        let out = preempt(
            Cluster::of(
                &["n1", "n2"],
                vec![
                    on("n1", "a", 1, "1"),
                    on("n1", "b", 1, "1"),
                    on("n2", "c", 1, "2"),
                ],
            ),
            preemptor("2"),
        );
        out.assert_preempted("n2", &["c"]);
    }

    #[test]
    fn extenders_narrow_the_candidates() {
        use crate::framework::extender::tests::FakeExtender;
        let cluster = |ext: FakeExtender| Cluster {
            extenders: vec![Arc::new(ext)],
            ..Cluster::of(
                &["n1", "n2"],
                vec![
                    on("n1", "a", 1, "1"),
                    on("n1", "b", 1, "1"),
                    on("n2", "c", 1, "2"),
                ],
            )
        };
        // Alone, n2 (one victim) wins; the extender allows only n1.
        let mut ext = FakeExtender::new("http://ext");
        ext.preempt = Some(Ok(vec!["n1".into()]));
        preempt(cluster(ext), preemptor("2")).assert_preempted("n1", &["a", "b"]);
        // It allows none: no candidate.
        let mut ext = FakeExtender::new("http://ext");
        ext.preempt = Some(Ok(vec![]));
        let out = preempt(cluster(ext), preemptor("2"));
        assert_eq!(
            (out.status.code(), out.status.message()),
            (
                Code::Unschedulable,
                "preemption: no candidate node for preemption".into()
            )
        );
        assert!(out.deleted().is_empty());
        // It fails: an error, unless it is ignorable.
        let mut ext = FakeExtender::new("http://ext");
        ext.preempt = Some(Err("extender down".into()));
        let out = preempt(cluster(ext), preemptor("2"));
        assert_eq!(
            (out.status.code(), out.status.message()),
            (Code::Error, "preemption: extender down".into())
        );
        let mut ext = FakeExtender::new("http://ext");
        ext.preempt = Some(Err("extender down".into()));
        ext.ignorable = true;
        preempt(cluster(ext), preemptor("2")).assert_preempted("n2", &["c"]);
    }

    #[test]
    fn candidate_with_latest_start_time() {
        let out = preempt(
            Cluster::of(
                &["n1", "n2"],
                vec![
                    started(on("n1", "old", 1, "2"), "2024-01-01T00:00:00Z"),
                    started(on("n2", "new", 1, "2"), "2025-01-01T00:00:00Z"),
                ],
            ),
            preemptor("1"),
        );
        assert_eq!(out.nominated(), Some("n2"));
    }

    #[test]
    fn higher_priority_nominated_pods_keep_their_room() {
        // A pod of priority 200 is nominated to n1 and takes its 2 cpu: preempting there cannot
        // help, so n2 is chosen.
        let out = preempt(
            Cluster {
                nominated: vec![pod("big", 200, "2").nominated_node("n1").build()],
                ..Cluster::of(
                    &["n1", "n2"],
                    vec![
                        on("n1", "low1", 1, "2"),
                        started(on("n2", "low2", 1, "2"), "2020-01-01T00:00:00Z"),
                    ],
                )
            },
            preemptor("1"),
        );
        out.assert_preempted("n2", &["low2"]);
    }

    #[test]
    fn lower_priority_nominations_on_the_node_are_cleared() {
        let out = preempt(
            Cluster {
                nominated: vec![pod("small", 5, "1").nominated_node("n1").build()],
                ..Cluster::of(&["n1"], vec![on("n1", "low", 1, "2")])
            },
            preemptor("1"),
        );
        assert_eq!(out.nominated(), Some("n1"));
        let patches = out.api.status_patches.lock().clone();
        let cleared: Vec<&str> = patches
            .iter()
            .filter(|(_, _, n)| {
                n.as_ref().is_some_and(|n| {
                    n.mode == NominatingMode::Override && n.nominated_node_name.is_empty()
                })
            })
            .map(|(k, _, _)| k.as_str())
            .collect();
        assert_eq!(cleared, ["default/small"]);
    }

    #[test]
    fn min_candidate_nodes_stop_the_dry_run_from_the_offset() {
        // Four equal nodes but n3's victim is the least important: with every node a candidate,
        // n3 wins; with one candidate from offset 1, the dry run stops at n2.
        let cluster = |candidates| Cluster {
            candidates,
            ..Cluster::of(
                &["n1", "n2", "n3", "n4"],
                vec![
                    on("n1", "v1", 5, "2"),
                    on("n2", "v2", 5, "2"),
                    on("n3", "v3", 1, "2"),
                    on("n4", "v4", 5, "2"),
                ],
            )
        };
        let all = preempt(cluster(Some((100, 0, 1))), preemptor("1"));
        assert_eq!(all.nominated(), Some("n3"));
        let one = preempt(cluster(Some((0, 1, 1))), preemptor("1"));
        one.assert_preempted("n2", &["v2"]);
        // 25% of 4 nodes is one candidate too; from offset 3 the scan starts at n4.
        let pct = preempt(cluster(Some((25, 0, 3))), preemptor("1"));
        assert_eq!(pct.nominated(), Some("n4"));
    }

    #[test]
    fn pre_enqueue_holds_the_preemptor_only_while_it_preempts() {
        let (h, _) = handle();
        let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h);
        let p = pod("p", 100, "1").info();
        assert!(pl.pre_enqueue(&p).is_success());
        pl.preempting.lock().insert(p.uid().to_string());
        let s = pl.pre_enqueue(&p);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), WAITING_FOR_PREEMPTION);
        // Without a runtime the eviction runs inline (tests, offline simulation).
        let out = preempt(
            Cluster::of(&["n1"], vec![on("n1", "low", 1, "2")]),
            preemptor("1"),
        );
        assert_eq!(out.deleted(), ["default/low"]);
    }

    #[test]
    fn num_candidates_and_pick() {
        let (h, _) = handle();
        let args = |p, a| DefaultPreemptionArgs {
            min_candidate_nodes_percentage: Some(p),
            min_candidate_nodes_absolute: Some(a),
        };
        let pl = DefaultPreemption::new(&args(10, 100), h.clone());
        assert_eq!(pl.num_candidates(50), 50);
        assert_eq!(pl.num_candidates(5000), 500);
        let pl = DefaultPreemption::new(&args(40, 0), h.clone()).with_offset(|_| 0);
        assert_eq!(pl.num_candidates(10), 4);
        assert_eq!(pl.num_candidates(1), 0);
        let pl = DefaultPreemption::new(&args(0, 3), h);
        assert_eq!(pl.num_candidates(10), 3);

        let c = |name: &str, prios: &[i32], pdb: usize| Candidate {
            name: name.into(),
            victims: prios
                .iter()
                .enumerate()
                .map(|(i, p)| Arc::new(pod(&format!("{name}-{i}"), *p, "1").assigned()))
                .collect(),
            num_pdb_violations: pdb,
        };
        // Fewest PDB violations wins over everything else.
        assert_eq!(
            pick_one_node_for_preemption(&[c("a", &[1], 1), c("b", &[50, 40], 0)]),
            1
        );
        // Then the lowest highest priority, then the smallest sum, then fewest victims.
        assert_eq!(
            pick_one_node_for_preemption(&[c("a", &[10, 1], 0), c("b", &[9, 8, 7], 0)]),
            1
        );
        assert_eq!(
            pick_one_node_for_preemption(&[c("a", &[10, 5], 0), c("b", &[10, 1], 0)]),
            1
        );
        assert_eq!(
            pick_one_node_for_preemption(&[
                c("a", &[10, 5], 0),
                c("b", &[10], 0),
                c("c", &[10], 0)
            ]),
            1
        );
        assert!(more_important_pod(
            &pod("a", 2, "1").assigned(),
            &pod("b", 1, "1").assigned()
        ));
    }
}
