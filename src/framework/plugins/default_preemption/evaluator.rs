//! The preemption evaluator (upstream's `framework/preemption/preemption.go`): the dry run over
//! the potential nodes (`DryRunPreemption`), the extenders' say on the candidates
//! (`callExtenders`), the choice of the node (`SelectCandidate`, `pickOneNodeForPreemption`), and
//! the status when preemption cannot help. It knows the plugin only through [`Interface`] and
//! hands its decision to the [`Executor`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use rayon::prelude::*;
use tracing::{debug, info};

use super::executor::Executor;
use super::victims::{VictimCluster, VictimIndex};
use crate::emulation::{self, Minor};
use crate::framework::extender::Victims;
use crate::framework::interface::{
    Code, CycleState, FrameworkHandle, NodeToStatus, PostFilterResult, Status,
};
use crate::framework::listers::POD_DISRUPTION_BUDGETS;
use crate::framework::registry::Handle;
use crate::framework::schedule::{Diagnosis, FitError};
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, Snapshot};

/// The status of nodes where removing pods cannot help (UnschedulableAndUnresolvable).
pub(crate) const ERR_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// A node and the pods to evict there.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub name: String,
    /// Most important first.
    pub victims: Vec<Arc<AssignedPod>>,
    pub num_pdb_violations: usize,
}

/// What the evaluator asks of the preemption plugin it works for (upstream's
/// `preemption.Interface`).
pub(crate) trait Interface: Send + Sync {
    /// Where the dry run starts among `num_nodes` potential nodes, and how many candidates it
    /// looks for (upstream's `GetOffsetAndNumCandidates`).
    fn offset_and_num_candidates(&self, num_nodes: usize) -> (usize, usize);

    /// Whether `pod` may preempt others; the reason why not (upstream's
    /// `PodEligibleToPreemptOthers`).
    fn pod_eligible_to_preempt_others(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        index: &VictimIndex,
        nominated_status: &Status,
    ) -> Result<(), &'static str>;

    /// The fewest pods to remove from `node` so that `pod` fits, and how many of them violate a
    /// PDB (upstream's `SelectVictimsOnNode`), on copies of the state and the node.
    fn select_victims_on_node(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &mut NodeInfo,
        cluster: &VictimCluster<'_>,
    ) -> Result<(Vec<Arc<AssignedPod>>, usize), Status>;
}

/// Finds the node and victims of a preemption and hands them to the executor (upstream's
/// `Evaluator`).
/// Whether a successful preemption says where it placed the pod, per minor: from 1.37 upstream's
/// `Preempt` returns "found a potential placement for pod on node N, preempting K victims", which
/// ends the pod's FailedScheduling message and PodScheduled condition (after "preemption: ").
const NAMES_THE_PLACEMENT: &[(Minor, bool)] = &[(Minor::V1_36, false), (Minor::V1_37, true)];

pub(crate) struct Evaluator {
    handle: Handle,
    pub(super) executor: Executor,
}

impl Evaluator {
    pub(crate) fn new(handle: Handle) -> Evaluator {
        Evaluator {
            executor: Executor::new(handle.clone()),
            handle,
        }
    }

    pub(crate) fn executor(&self) -> &Executor {
        &self.executor
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Upstream's `Evaluator.Preempt` (without the "preemption: " prefix).
    pub(crate) fn preempt(
        &self,
        plugin: &dyn Interface,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let nominated_status = filtered.get(pod.nominated_node_name());
        let index = VictimIndex::new(&self.handle, snapshot);
        if let Err(msg) =
            plugin.pod_eligible_to_preempt_others(pod, snapshot, &index, nominated_status)
        {
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
            let pdbs = self.handle.listers.store(&POD_DISRUPTION_BUDGETS).list();
            let cluster = VictimCluster {
                pdbs: &pdbs,
                index: &index,
                snapshot,
            };
            let (offset, num) = plugin.offset_and_num_candidates(potential.len());
            self.dry_run_preemption(plugin, fwk, state, pod, &potential, &cluster, offset, num)
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
        self.executor.actuate(pod, &best.name, &best.victims);
        let message = if *emulation::at(NAMES_THE_PLACEMENT, self.handle.emulation.minor()) {
            format!(
                "found a potential placement for pod on node {}, preempting {} victims",
                best.name,
                best.victims.len()
            )
        } else {
            String::new()
        };
        (
            Some(PostFilterResult::nominate(&best.name)),
            Status::new(Code::Success, message),
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
    pub(crate) fn dry_run_preemption(
        &self,
        plugin: &dyn Interface,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        potential: &[&Arc<NodeInfo>],
        cluster: &VictimCluster<'_>,
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
            let r =
                plugin.select_victims_on_node(fwk, &mut state_copy, pod, &mut node_copy, cluster);
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
}

/// Nodes checked per parallel round of the dry run.
const CHUNK: usize = 16;

fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
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
pub(crate) fn pick_one_node_for_preemption(candidates: &[Candidate]) -> usize {
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

/// `status.startTime`, or `now` for pods not started yet (upstream's `GetPodStartTime`).
fn start_time(p: &AssignedPod, now: Timestamp) -> Timestamp {
    p.start_time().map_or(now, |t| t.0)
}
