//! A pod group's cycle (upstream 1.37's `podGroupCycle` and `podGroupSchedulingDefaultAlgorithm`):
//! the members are tried in order on the cluster as the earlier members left it (each assumed
//! and reserved), PlacementFeasible says after each whether the group can still meet its
//! constraints (GangScheduling: `minCount`), and the group is placed whole or not at all.
//!
//! Upstream assumes the members in its snapshot, reverts them, then assumes them again in the
//! cache for binding; ksched assumes them in the cache once (the next member's snapshot update
//! sees them) and undoes them only when the group does not fit.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use parking_lot::Mutex;
use tracing::warn;

use super::{Cycle, Failure, PodDecision, Reserved};
use crate::emulation::{GENERIC_WORKLOAD, TOPOLOGY_AWARE_WORKLOAD_SCHEDULING};
use crate::framework::api_calls::{ApiCall, PatchStatus};
use crate::framework::background::ApiDispatcher;
use crate::framework::interface::{
    Code, PLACEMENT_PROGRESS, PlacementProgress, PodGroupPostFilterResult, ProposedAssignment,
    Status,
};
use crate::framework::listers::{
    BySchedulingGroup, GroupOf, SCHEDULING_GROUP_MEMBERS, WORKLOAD_POD_GROUPS,
};
use crate::framework::plugins::default_preemption::pod_group_priority;
use crate::framework::registry::Handle;
use crate::framework::runtime::Framework;
use crate::framework::types::{AssignedPod, PodInfo, QueuedPodGroup, Snapshot};
use crate::scheduler::informers::pod_key;

/// Upstream's `errPodGroupUnschedulable`: the first reason of a member placed in a group that
/// was not.
pub(super) const POD_GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// The condition a group cycle writes on its PodGroup.
pub(crate) const POD_GROUP_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// What the cycle decided for a pod group.
pub(crate) struct GroupDecision {
    /// One per member, in the entity's order.
    pub(crate) members: Vec<PodDecision>,
    pub(crate) outcome: GroupOutcome,
}

/// The group's result: what its `PodGroupInitiallyScheduled` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupOutcome {
    /// At least `minCount` placed: the placed members go on to bind.
    Scheduled(String),
    /// Not placed; nothing of the group is left assumed.
    Unschedulable(String),
    /// Not placed, but PodGroupPostFilter made room: the members wait, nominated, for their
    /// victims to go.
    WaitingOnPreemption(String),
    Error(String),
}

impl GroupOutcome {
    /// The condition's status, reason and message (upstream's `submitPodGroupAlgorithmResult`).
    pub(crate) fn condition(&self) -> (&'static str, &'static str, &str) {
        match self {
            GroupOutcome::Scheduled(m) => ("True", "Scheduled", m),
            GroupOutcome::Unschedulable(m) | GroupOutcome::WaitingOnPreemption(m) => {
                ("False", "Unschedulable", m)
            }
            GroupOutcome::Error(m) => ("False", "SchedulerError", m),
        }
    }
}

/// One member's try in the group cycle: placed (assumed and reserved), or why not.
pub(super) type Tried = Result<Reserved, Box<Failure>>;

/// A member of a group that was not placed, its placement undone: whether it had a nomination to
/// clear, or why it failed on its own.
pub(super) type Undone = Result<bool, Failure>;

/// What is left of members undone.
pub(super) fn undone(tried: Vec<Tried>) -> Vec<Undone> {
    let mut out = Vec::with_capacity(tried.len());
    for t in tried {
        out.push(match t {
            Ok(reserved) => Ok(!reserved.assumed.nominated_node_name().is_empty()),
            Err(failure) => Err(*failure),
        });
    }
    out
}

/// The group's attempt (one run over its members, or the best of its placements): the members
/// tried, still placed, the group's status and progress; or, when no placement took it, the
/// members undone and the group's status.
pub(super) type Attempt = Result<(Vec<Tried>, Status, PlacementProgress), (Vec<Undone>, Status)>;

impl Cycle {
    /// The group cycle: every member tried, then all placed members permitted, or all undone.
    pub(crate) fn schedule_group(
        &self,
        fwk: &Arc<Framework>,
        group: &QueuedPodGroup,
        started: Instant,
    ) -> GroupDecision {
        if let Err(message) = validate(group) {
            return all_failed(group, &message);
        }
        let attempt = if fwk
            .handle()
            .emulation
            .enabled(TOPOLOGY_AWARE_WORKLOAD_SCHEDULING)
        {
            self.run_in_placements(fwk, group)
        } else {
            Ok(self.run_members(fwk, group, |pod| self.try_member(fwk, pod)))
        };
        if let Some(m) = self.metrics.as_ref().and_then(|m| m.pod_group.as_ref()) {
            m.algorithm_duration
                .observe(started.elapsed().as_secs_f64());
        }
        // Not placed: the members placed are undone before the group's PostFilter looks.
        let (tried, mut status) = match attempt {
            Ok((tried, status, progress)) => {
                let any_placed = tried.iter().any(Result::is_ok);
                if status.is_success() && any_placed {
                    let outcome = GroupOutcome::Scheduled(status.message());
                    return self.permit_members(fwk, group, tried, progress, outcome);
                }
                let status = if status.is_success() {
                    // The framework needs at least one member placed to call the group scheduled.
                    unschedulable(&Status::success())
                } else {
                    status
                };
                (self.undo_placed(fwk, tried), status)
            }
            Err(not_placed) => not_placed,
        };
        // Members not tried are told the status as it was before PodGroupPostFilter's word.
        let before_post_filter = status.clone();
        let mut preempting = None;
        if status.code() == Code::Unschedulable {
            let (result, post_filter) = self.pod_group_post_filter(fwk, group);
            if post_filter.code() == Code::Error {
                status = post_filter;
            } else {
                status.append_reason(post_filter.message());
                if post_filter.is_success() {
                    preempting = result;
                }
            }
        }
        let rejected = Rejected {
            status: &status,
            before_post_filter: &before_post_filter,
            preempting: preempting.as_ref(),
        };
        rejected.members(group, tried)
    }

    /// Every placed member undone, last first: what is left of each is whether it failed on
    /// its own and whether it had a nomination to clear.
    fn undo_placed(&self, fwk: &Framework, mut tried: Vec<Tried>) -> Vec<Undone> {
        self.undo_all(fwk, &mut tried);
        undone(tried)
    }

    /// Undoes every placed member, last first, keeping what each was (its node and state).
    pub(super) fn undo_all(&self, fwk: &Framework, tried: &mut [Tried]) {
        for reserved in tried.iter_mut().rev().filter_map(|t| t.as_mut().ok()) {
            self.undo(fwk, reserved);
        }
    }

    /// PodGroupPostFilter on the cluster as it was before the group's cycle, with the group's
    /// algorithm to try the group on a changed copy of it.
    fn pod_group_post_filter(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let snapshot = self.snapshot();
        let members: Vec<Arc<PodInfo>> = group.members.iter().map(|m| m.pod_info.clone()).collect();
        let place = |cluster: &Snapshot| self.place_on(fwk, group, cluster);
        fwk.run_pod_group_post_filter_plugins(
            &group.group,
            &members,
            &snapshot,
            &place,
            self.sample_plugins(),
        )
    }

    /// The group's algorithm on `cluster` alone (upstream's `PodGroupSchedulingFunc`): each
    /// member placed on a copy of it as the members before it left it; no cache, no Reserve.
    fn place_on(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        cluster: &Snapshot,
    ) -> (Vec<ProposedAssignment>, Status) {
        let (placed, status) = if fwk
            .handle()
            .emulation
            .enabled(TOPOLOGY_AWARE_WORKLOAD_SCHEDULING)
        {
            self.place_in_placements_on(fwk, group, cluster)
        } else {
            self.place_members_on(fwk, group, cluster)
        };
        if status.is_success() && placed.is_empty() {
            return (placed, unschedulable(&Status::success()));
        }
        (placed, status)
    }

    /// The member loop on a copy of `cluster`: each member placed where the members before it
    /// left the copy.
    pub(super) fn place_members_on(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        cluster: &Snapshot,
    ) -> (Vec<ProposedAssignment>, Status) {
        let mut cluster = cluster.clone();
        let (tried, status, _) = self.run_members(fwk, group, |pod| {
            let mut state = self.new_state();
            let node = self.select_host(fwk, &mut state, pod, &cluster)?;
            cluster.add_pod(&node, Arc::new(AssignedPod::from_pod_info(pod)));
            Ok(ProposedAssignment {
                pod: pod.clone(),
                node,
                state,
            })
        });
        (tried.into_iter().filter_map(Result::ok).collect(), status)
    }

    /// Runs `step` on each member in turn, asking PlacementFeasible before the first and after
    /// each; the members tried (the rest were not) and the group's status.
    pub(super) fn run_members<T>(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        mut step: impl FnMut(&Arc<PodInfo>) -> Result<T, Box<Failure>>,
    ) -> (Vec<Result<T, Box<Failure>>>, Status, PlacementProgress) {
        let mut progress = PlacementProgress {
            remaining: group.members.len(),
            scheduled: self.scheduled_before(fwk, group),
        };
        let mut tried = Vec::with_capacity(group.members.len());
        let sampled = self.sample_plugins();
        let mut status = fwk.run_placement_feasible_plugins(&group.group, progress, sampled);
        if status.code() == Code::Error {
            return (tried, feasibility_error(&status), progress);
        }
        if status.code() == Code::Unschedulable {
            return (tried, unschedulable(&status), progress);
        }
        for member in &group.members {
            let result = step(&member.pod_info);
            if let Err(f) = &result
                && !f.unschedulable
            {
                let message = format!(
                    "failed to schedule other pod from a pod group: {}",
                    f.message
                );
                tried.push(result);
                return (tried, Status::error(message), progress);
            }
            progress.remaining -= 1;
            if result.is_ok() {
                progress.scheduled += 1;
            }
            tried.push(result);
            status = fwk.run_placement_feasible_plugins(&group.group, progress, sampled);
            match status.code() {
                Code::Error => return (tried, feasibility_error(&status), progress),
                Code::Unschedulable => break,
                _ => {}
            }
        }
        if status.is_wait() {
            status = unschedulable(&status);
        }
        (tried, status, progress)
    }

    /// One member: a node on the snapshot as the members before it left the cluster (no
    /// PostFilter: the group's preemption is the group's), then assume and Reserve.
    pub(super) fn try_member(&self, fwk: &Framework, pod: &Arc<PodInfo>) -> Tried {
        let started = Instant::now();
        let snapshot = self.snapshot();
        let mut state = self.new_state();
        let host = self.select_host(fwk, &mut state, pod, &snapshot);
        if let Some(m) = &self.metrics {
            m.scheduling_algorithm_duration
                .observe(started.elapsed().as_secs_f64());
        }
        drop(snapshot);
        self.assume_and_reserve(fwk, state, pod, host?)
    }

    /// The group's members already bound or assumed before this cycle (upstream's
    /// `ScheduledPodsCount`).
    fn scheduled_before(&self, fwk: &Framework, group: &QueuedPodGroup) -> usize {
        self.scheduled_members(fwk, group).len()
    }

    /// The group's members already bound or assumed before this cycle, as
    /// `(namespace/name, node)` (upstream's `PodGroupState.ScheduledPods`).
    pub(super) fn scheduled_members(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
    ) -> Vec<(String, String)> {
        let namespace = group
            .group
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default();
        let name = group.group.metadata.name.as_deref().unwrap_or_default();
        let queued: BTreeSet<String> = group.members.iter().map(|m| m.pod_info.key()).collect();
        let members = fwk
            .handle()
            .listers
            .store(&SCHEDULING_GROUP_MEMBERS)
            .members(namespace, name);
        members
            .iter()
            .filter_map(|p| {
                let key = pod_key(p);
                if queued.contains(&key) {
                    return None;
                }
                let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
                let node = bound.or_else(|| self.cache.assumed_node(&key))?;
                Some((key, node))
            })
            .collect()
    }

    /// The group fits: Permit for each placed member, in order, as upstream permits them one
    /// after the other: each member's cycle state carries how many of the group are scheduled
    /// with it (those before it and itself), so GangScheduling's Permit keeps the members before
    /// the quorum waiting (their binding cycles publish the node as nominated first) and the one
    /// that meets it allows them, without counting the group's pods on every node.
    fn permit_members(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        tried: Vec<Tried>,
        progress: PlacementProgress,
        outcome: GroupOutcome,
    ) -> GroupDecision {
        drop(self.snapshot());
        let placed = tried.iter().filter(|t| t.is_ok()).count();
        let mut scheduled = progress.scheduled.saturating_sub(placed);
        let mut members: Vec<PodDecision> = tried
            .into_iter()
            .map(|t| match t {
                Ok(mut reserved) => {
                    scheduled += 1;
                    let with_it = PlacementProgress {
                        scheduled,
                        ..progress
                    };
                    reserved.state.write(PLACEMENT_PROGRESS, with_it);
                    self.permit(fwk, reserved)
                }
                Err(failure) => PodDecision::Failed(*failure),
            })
            .collect();
        // Every member is tried when the group fits; this only keeps the lists aligned.
        while members.len() < group.members.len() {
            members.push(PodDecision::Failed(group_failure(
                false,
                POD_GROUP_UNSCHEDULABLE.into(),
            )));
        }
        GroupDecision { members, outcome }
    }
}

/// How a group that does not fit ends (its placed members already undone).
struct Rejected<'a> {
    /// The group's status, PodGroupPostFilter's word included.
    status: &'a Status,
    /// The group's status when its algorithm stopped.
    before_post_filter: &'a Status,
    /// PodGroupPostFilter made room: the group waits for its victims to go, each member
    /// nominated to its node.
    preempting: Option<&'a PodGroupPostFilterResult>,
}

impl Rejected<'_> {
    /// Each member's failure (upstream's `submitPodGroupAlgorithmResult`): a member placed is
    /// rejected with the group's message, one that failed keeps its own reason, one not tried
    /// gets the group's status as it was when the algorithm stopped; while the group waits on
    /// its preemption, each member carries its nomination.
    fn members(&self, group: &QueuedPodGroup, tried: Vec<Undone>) -> GroupDecision {
        let error = self.status.code() == Code::Error;
        let mut members: Vec<PodDecision> = Vec::with_capacity(group.members.len());
        for t in tried {
            let failure = match t {
                Err(own) => own,
                Ok(had_nomination) => {
                    let message = if error || self.preempting.is_some() {
                        self.status.message()
                    } else {
                        format!("{POD_GROUP_UNSCHEDULABLE}, {}", self.status.message())
                    };
                    let mut failure = group_failure(error, message);
                    if had_nomination {
                        failure.nominated = Some(String::new());
                    }
                    failure
                }
            };
            members.push(PodDecision::Failed(failure));
        }
        while members.len() < group.members.len() {
            let message = self.before_post_filter.message();
            members.push(PodDecision::Failed(group_failure(error, message)));
        }
        if let Some(result) = self.preempting {
            for (decision, member) in members.iter_mut().zip(&group.members) {
                if let (PodDecision::Failed(f), Some(node)) =
                    (decision, result.nominations.get(&member.pod_info.key()))
                {
                    f.nominated = Some(node.clone());
                }
            }
        }
        let message = self.status.message();
        let outcome = match (error, self.preempting) {
            (true, _) => GroupOutcome::Error(message),
            (false, Some(_)) => GroupOutcome::WaitingOnPreemption(message),
            (false, None) => GroupOutcome::Unschedulable(message),
        };
        GroupDecision { members, outcome }
    }
}

/// The `scheduling.k8s.io` PodGroup `pod` is a member of, when workload-aware scheduling
/// (GenericWorkload) is on and the group is known, with the keys of its other members not bound:
/// what a popped member brings along into its group's cycle (upstream queues the group as one
/// entity). `None`: the pod is scheduled alone.
pub(crate) fn pod_group_of(handle: &Handle, pod: &PodInfo) -> Option<(Arc<PodGroup>, Vec<String>)> {
    if !handle.emulation.enabled(GENERIC_WORKLOAD) {
        return None;
    }
    let name = BySchedulingGroup::group(&pod.pod)?;
    let namespace = pod.namespace();
    let group = handle
        .listers
        .store(&WORKLOAD_POD_GROUPS)
        .get(namespace, name)?;
    let own = pod.key();
    let others = handle
        .listers
        .store(&SCHEDULING_GROUP_MEMBERS)
        .members(namespace, name)
        .iter()
        .filter(|p| p.spec.as_ref().is_none_or(|s| s.node_name.is_none()))
        .map(|p| pod_key(p))
        .filter(|key| *key != own)
        .collect();
    Some((group, others))
}

/// Upstream's `validatePodGroup`: one scheduler, the group's priority and one preemption
/// policy for all members.
fn validate(group: &QueuedPodGroup) -> Result<(), String> {
    let Some(first) = group.members.first() else {
        return Ok(());
    };
    let scheduler = first.pod_info.scheduler_name();
    let priority = pod_group_priority(&group.group);
    let policy = preemption_policy(&first.pod_info);
    for m in &group.members {
        let pod = &m.pod_info;
        if pod.scheduler_name() != scheduler {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {:?} and {scheduler:?}",
                pod.scheduler_name()
            ));
        }
        if pod.priority() != priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {} and {priority}",
                pod.priority()
            ));
        }
        if preemption_policy(pod) != policy {
            return Err(format!(
                "all pods in a single pod group should have the same preemption policy, got {} and {policy}",
                preemption_policy(pod)
            ));
        }
    }
    Ok(())
}

/// The pod's preemption policy, `PreemptLowerPriority` when unset.
fn preemption_policy(pod: &PodInfo) -> &str {
    pod.spec()
        .and_then(|s| s.preemption_policy.as_deref())
        .unwrap_or("PreemptLowerPriority")
}

/// Every member failed with the group's error.
fn all_failed(group: &QueuedPodGroup, message: &str) -> GroupDecision {
    let members = group
        .members
        .iter()
        .map(|_| PodDecision::Failed(group_failure(true, message.to_string())))
        .collect();
    GroupDecision {
        members,
        outcome: GroupOutcome::Error(message.to_string()),
    }
}

/// A member's failure for the group's status: an error, or unschedulable (no plugin of its
/// own rejected it: any event may help, as upstream requeues such a pod).
fn group_failure(error: bool, message: String) -> Failure {
    if error {
        Failure::error(message)
    } else {
        Failure::unschedulable(message)
    }
}

/// Unschedulable with the group's error first (upstream's `.WithError(errPodGroupUnschedulable)`).
pub(super) fn unschedulable(status: &Status) -> Status {
    let mut reasons = vec![POD_GROUP_UNSCHEDULABLE.to_string()];
    reasons.extend(status.reasons().iter().cloned());
    Status::with_reasons(Code::Unschedulable, reasons)
}

fn feasibility_error(status: &Status) -> Status {
    Status::error(format!(
        "failed to evaluate placement feasibility: {}",
        status.message()
    ))
}

/// The groups this scheduler marked `PodGroupInitiallyScheduled=True` while its informer still
/// shows them without it. The write goes through the API dispatcher, so a cycle for the group's
/// later members may read the group before the write lands; it must not take the True back
/// (a patch of False would replace it) nor write it twice. Upstream writes in the cycle and
/// leaves the same window, narrower. A write that fails is forgotten, so the next cycle for the
/// group writes it again.
#[derive(Debug, Default)]
pub(crate) struct ScheduledGroups(Mutex<HashSet<String>>);

impl ScheduledGroups {
    /// Hands the group's condition, as `outcome` sets it, to `dispatcher` (upstream's
    /// `updatePodGroupCondition`); the cycle does not wait for the write.
    pub(crate) fn dispatch(
        self: &Arc<Self>,
        dispatcher: &ApiDispatcher,
        group: &PodGroup,
        outcome: &GroupOutcome,
        now: k8s_openapi::jiff::Timestamp,
    ) {
        let Some(patch) = self.condition_patch(group, outcome, now) else {
            return;
        };
        let namespace = group.metadata.namespace.as_deref().unwrap_or_default();
        let name = group.metadata.name.as_deref().unwrap_or_default();
        let request =
            PatchStatus::<PodGroup>::new(namespace, name, serde_json::json!({ "status": patch }))
                .into_request();
        let uid = group.metadata.uid.clone().unwrap_or_default();
        let marked = Arc::clone(self);
        dispatcher.dispatch(move |api| async move {
            let object = request.key();
            if let Err(error) = api.send(request).await {
                warn!(%object, %error, "updating the PodGroup's condition failed");
                marked.0.lock().remove(&uid);
            }
        });
    }

    /// [`condition_patch`], counting the group as scheduled when this scheduler marked it so.
    pub(crate) fn condition_patch(
        &self,
        group: &PodGroup,
        outcome: &GroupOutcome,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Option<serde_json::Value> {
        let uid = group.metadata.uid.as_deref().unwrap_or_default();
        let mut marked = self.0.lock();
        if is_initially_scheduled(group) {
            // The informer caught up: its copy says so from now on.
            marked.remove(uid);
        } else if marked.contains(uid) {
            return None;
        }
        let patch = condition_patch(group, outcome, now);
        if patch.is_some() && matches!(outcome, GroupOutcome::Scheduled(_)) {
            marked.insert(uid.to_string());
        }
        patch
    }
}

fn is_initially_scheduled(group: &PodGroup) -> bool {
    group
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED && c.status == "True")
}

/// The strategic-merge patch of `group`'s status setting its `PodGroupInitiallyScheduled`
/// condition as `outcome` says; `None` when nothing changes or the group was scheduled before
/// (a later cycle for extra members does not take that back), as upstream's
/// `updatePodGroupCondition`.
fn condition_patch(
    group: &PodGroup,
    outcome: &GroupOutcome,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<serde_json::Value> {
    let (status, reason, message) = outcome.condition();
    let conditions = group
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let existing = conditions
        .iter()
        .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED);
    let generation = group.metadata.generation;
    if let Some(c) = existing {
        if c.status == "True" && status != "True" {
            return None;
        }
        if c.status == status
            && c.reason == reason
            && c.message == message
            && c.observed_generation == generation
        {
            return None;
        }
    }
    // The transition time moves only when the status does.
    let transition = match existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
    };
    Some(serde_json::json!({
        "conditions": [{
            "type": POD_GROUP_INITIALLY_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": transition,
        }]
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::framework::api_calls::{ApiClient, ApiError, RecordingApi, Verb};
    use crate::framework::types::QueuedPodInfo;

    fn group(conditions: serde_json::Value) -> PodGroup {
        serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ns", "generation": 2},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {"conditions": conditions},
        }))
        .expect("pod group")
    }

    fn condition(status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": POD_GROUP_INITIALLY_SCHEDULED, "status": status, "reason": reason,
               "message": message, "observedGeneration": 2,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn the_condition_is_written_when_it_changes_and_never_taken_back_from_true() {
        let now = Timestamp::now();
        let unschedulable = GroupOutcome::Unschedulable("minCount (2) cannot be satisfied".into());
        let patch =
            condition_patch(&group(json!([])), &unschedulable, now).expect("a new condition");
        assert_eq!(patch["conditions"][0]["status"], "False");
        assert_eq!(patch["conditions"][0]["reason"], "Unschedulable");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 2);
        // The same again: nothing to write.
        let same = group(json!([condition(
            "False",
            "Unschedulable",
            "minCount (2) cannot be satisfied"
        )]));
        assert_eq!(condition_patch(&same, &unschedulable, now), None);
        // Another message, same status: the transition time stays.
        let other = GroupOutcome::Unschedulable("another reason".into());
        let patch = condition_patch(&same, &other, now).expect("a new message");
        assert_eq!(
            patch["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        // Scheduled once: a later cycle for extra members does not take it back.
        let scheduled = group(json!([condition("True", "Scheduled", "")]));
        assert_eq!(condition_patch(&scheduled, &unschedulable, now), None);
        let patch = condition_patch(&same, &GroupOutcome::Scheduled(String::new()), now)
            .expect("scheduled");
        assert_eq!(patch["conditions"][0]["status"], "True");
        assert_ne!(
            patch["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    /// groups-topology-018 of `make fidelity`: a basic group's first cycle placed three members,
    /// the cycle for its fourth read the group before the True landed and wrote False over it.
    #[test]
    fn a_group_marked_scheduled_stays_so_until_the_informer_shows_it() {
        let now = Timestamp::now();
        let marked = ScheduledGroups::default();
        let with_uid = |uid: &str, conditions: serde_json::Value| {
            let mut g = group(conditions);
            g.metadata.uid = Some(uid.into());
            g
        };
        let unschedulable = GroupOutcome::Unschedulable("no room for the last member".into());
        let scheduled = GroupOutcome::Scheduled(String::new());
        let stale = with_uid("u1", json!([]));
        let patch = marked
            .condition_patch(&stale, &scheduled, now)
            .expect("True");
        assert_eq!(patch["conditions"][0]["status"], "True");
        // The informer's copy is still without the condition: neither False nor True again.
        assert_eq!(marked.condition_patch(&stale, &unschedulable, now), None);
        assert_eq!(marked.condition_patch(&stale, &scheduled, now), None);
        // Another group is not affected.
        let other = with_uid("u2", json!([]));
        let patch = marked
            .condition_patch(&other, &unschedulable, now)
            .expect("False");
        assert_eq!(patch["conditions"][0]["status"], "False");
        // Once the informer shows True, its copy keeps the True as before.
        let caught_up = with_uid("u1", json!([condition("True", "Scheduled", "")]));
        assert_eq!(
            marked.condition_patch(&caught_up, &unschedulable, now),
            None
        );
        assert!(!marked.0.lock().contains("u1"));
    }

    /// A True whose write fails is not remembered: the group's next cycle writes it again
    /// (before, the group stayed without its condition until the scheduler restarted).
    #[test]
    fn a_failed_write_of_the_scheduled_condition_is_written_again() {
        let now = Timestamp::now();
        let marked = Arc::new(ScheduledGroups::default());
        let dispatcher = ApiDispatcher::default();
        let recording = Arc::new(RecordingApi::default());
        let api: Arc<dyn ApiClient> = recording.clone();
        let mut g = group(json!([]));
        g.metadata.uid = Some("u1".into());
        let scheduled = GroupOutcome::Scheduled(String::new());
        recording.fail_once::<PodGroup>(Verb::Patch, ApiError::Other("etcd timeout".into()));
        marked.dispatch(&dispatcher, &g, &scheduled, now);
        dispatcher.run_queued(&api);
        marked.dispatch(&dispatcher, &g, &scheduled, now);
        dispatcher.run_queued(&api);
        let sent: Vec<serde_json::Value> =
            recording.bodies::<PodGroup, _>(Verb::Patch, Some("status"));
        assert_eq!(sent.len(), 2, "written again after the failure: {sent:?}");
        assert_eq!(sent[1]["status"]["conditions"][0]["status"], "True");
        // The second write succeeded: remembered until the informer shows it.
        marked.dispatch(&dispatcher, &g, &scheduled, now);
        dispatcher.run_queued(&api);
        assert_eq!(
            recording
                .bodies::<PodGroup, serde_json::Value>(Verb::Patch, Some("status"))
                .len(),
            2
        );
    }

    fn member(name: &str, scheduler: &str, priority: i32) -> QueuedPodInfo {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"schedulerName": scheduler, "priority": priority, "containers": []},
        }))
        .expect("pod");
        QueuedPodInfo::new(Arc::new(PodInfo::new(Arc::new(pod))), Instant::now())
    }

    #[test]
    fn a_group_whose_pods_differ_in_scheduler_or_priority_is_refused_as_upstream_does() {
        let g = Arc::new(group(json!([])));
        let ok = QueuedPodGroup::new(g.clone(), vec![member("a", "s", 0), member("b", "s", 0)]);
        assert_eq!(validate(&ok), Ok(()));
        let two = QueuedPodGroup::new(g.clone(), vec![member("a", "s", 0), member("b", "t", 0)]);
        assert_eq!(
            validate(&two),
            Err("all pods in a single pod group should have the same .spec.schedulerName set, got: \"t\" and \"s\"".into())
        );
        let priority = QueuedPodGroup::new(g, vec![member("a", "s", 5)]);
        assert_eq!(
            validate(&priority),
            Err("all pods in a single pod group should have the same priority as the pod group's priority, got 5 and 0".into())
        );
    }
}
