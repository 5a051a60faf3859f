//! A pod group's cycle over placements (upstream 1.37's `podGroupSchedulingPlacementAlgorithm`,
//! gate `TopologyAwareWorkloadScheduling`): PlacementGenerate splits the nodes into placements
//! (a group with a topology constraint: one per domain), the group's members are tried in each
//! with the search limited to its nodes, and PlacementScore picks the best of those the group
//! fits in.
//!
//! Each placement's try assumes and reserves the members as the plain group cycle does, then
//! undoes them for the next; the winner's members are assumed again on the nodes its try chose,
//! with the cycle states it left (upstream reverts every try and assumes the winner again too).

use std::time::Instant;

use super::Cycle;
use super::group::{Attempt, POD_GROUP_UNSCHEDULABLE, Tried, undone};
use crate::framework::interface::{
    Code, GroupInCycle, Placement, PlacementAssignments, PlacementProgress, ProposedAssignment,
    Status,
};
use crate::framework::runtime::{Framework, GeneratedPlacements};
use crate::framework::schedule::PlacementNodes;
use crate::framework::types::{QueuedPodGroup, Snapshot};

/// A placement the group fits in: its members as its try left them (undone), and the group's
/// status and progress there.
struct Fitted {
    placement: usize,
    tried: Vec<Tried>,
    status: Status,
    progress: PlacementProgress,
}

impl Cycle {
    /// The group tried in each of its placements; the best one's members placed again.
    pub(super) fn run_in_placements(&self, fwk: &Framework, group: &QueuedPodGroup) -> Attempt {
        let snapshot = self.snapshot();
        let scheduled = self.scheduled_members(fwk, group);
        let view = GroupInCycle {
            group: &group.group,
            scheduled: &scheduled,
        };
        let GeneratedPlacements {
            placements,
            to_score,
        } = generate_placements(fwk, &view, &snapshot, self.sample_plugins())
            .map_err(|status| (Vec::new(), status))?;
        let all_nodes = snapshot.num_nodes();
        drop(snapshot);
        let metrics = self.metrics.as_ref().and_then(|m| m.placements.as_ref());
        if let Some(m) = metrics {
            m.generated(fwk.profile_name(), placements.len());
        }

        let mut fitted: Vec<Fitted> = Vec::new();
        let mut first_failure: Option<(Vec<Tried>, Status)> = None;
        for (i, placement) in placements.iter().enumerate() {
            // A placement of every node limits nothing (and keeps opportunistic batching).
            let limit =
                (placement.nodes.len() != all_nodes).then(|| PlacementNodes::new(&placement.nodes));
            let started = Instant::now();
            self.algorithm.lock().set_placement(limit);
            let (mut tried, status, progress) =
                self.run_members(fwk, group, |pod| self.try_member(fwk, pod));
            self.algorithm.lock().set_placement(None);
            if let Some(m) = metrics
                && status.code() != Code::Error
            {
                let seconds = started.elapsed().as_secs_f64();
                m.evaluated(fwk.profile_name(), status.is_success(), seconds);
            }
            if to_score == 1 && status.is_success() {
                // The only placement to score: nothing to compare, its members stay placed.
                return Ok((tried, status, progress));
            }
            self.undo_all(fwk, &mut tried);
            if status.code() == Code::Error {
                return Err((undone(tried), status));
            }
            if status.is_success() {
                fitted.push(Fitted {
                    placement: i,
                    tried,
                    status,
                    progress,
                });
                if fitted.len() == to_score {
                    break;
                }
            } else if first_failure.is_none() {
                first_failure = Some((tried, status));
            }
        }
        if fitted.is_empty() {
            let (tried, first) = first_failure.unwrap_or_default();
            return Err((undone(tried), none_fits(placements.len(), &first)));
        }
        let assignments: Vec<PlacementAssignments<'_>> = fitted
            .iter()
            .map(|f| PlacementAssignments {
                placement: &placements[f.placement],
                members: f
                    .tried
                    .iter()
                    .zip(&group.members)
                    .filter_map(|(t, m)| {
                        t.as_ref()
                            .ok()
                            .map(|r| (m.pod_info.as_ref(), r.host.as_str()))
                    })
                    .collect(),
            })
            .collect();
        let best = best_placement(fwk, &view, &assignments, self.sample_plugins())
            .map_err(|status| (Vec::new(), status))?;
        drop(assignments);
        let winner = fitted.swap_remove(best);
        let tried = self.place_again(fwk, group, winner.tried);
        Ok((tried, winner.status, winner.progress))
    }

    /// The group's placement algorithm on a copy of `cluster` (workload-aware preemption's
    /// `PodGroupSchedulingFunc` with placements): the member loop in each placement, the best
    /// by PlacementScore.
    pub(super) fn place_in_placements_on(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        cluster: &Snapshot,
    ) -> (Vec<ProposedAssignment>, Status) {
        let scheduled = self.scheduled_members(fwk, group);
        let view = GroupInCycle {
            group: &group.group,
            scheduled: &scheduled,
        };
        let GeneratedPlacements {
            placements,
            to_score,
        } = match generate_placements(fwk, &view, cluster, self.sample_plugins()) {
            Ok(generated) => generated,
            Err(status) => return (Vec::new(), status),
        };
        let mut fitted: Vec<(usize, Vec<ProposedAssignment>, Status)> = Vec::new();
        let mut first_failure: Option<Status> = None;
        for (i, placement) in placements.iter().enumerate() {
            let limit = (placement.nodes.len() != cluster.num_nodes())
                .then(|| PlacementNodes::new(&placement.nodes));
            self.algorithm.lock().set_placement(limit);
            let (placed, status) = self.place_members_on(fwk, group, cluster);
            self.algorithm.lock().set_placement(None);
            match status.code() {
                Code::Error => return (placed, status),
                Code::Success => {
                    fitted.push((i, placed, status));
                    if fitted.len() == to_score {
                        break;
                    }
                }
                _ => {
                    first_failure.get_or_insert(status);
                }
            }
        }
        if fitted.is_empty() {
            let first = first_failure.unwrap_or_default();
            return (Vec::new(), none_fits(placements.len(), &first));
        }
        let assignments: Vec<PlacementAssignments<'_>> = fitted
            .iter()
            .map(|(i, placed, _)| PlacementAssignments {
                placement: &placements[*i],
                members: placed
                    .iter()
                    .map(|a| (a.pod.as_ref(), a.node.as_str()))
                    .collect(),
            })
            .collect();
        let best = match best_placement(fwk, &view, &assignments, self.sample_plugins()) {
            Ok(best) => best,
            Err(status) => return (Vec::new(), status),
        };
        drop(assignments);
        let (_, placed, status) = fitted.swap_remove(best);
        (placed, status)
    }

    /// The winning placement's members assumed and reserved again where its try put them; one
    /// whose Reserve now fails is rejected alone (Permit still holds the gang to `minCount`).
    fn place_again(
        &self,
        fwk: &Framework,
        group: &QueuedPodGroup,
        tried: Vec<Tried>,
    ) -> Vec<Tried> {
        tried
            .into_iter()
            .zip(&group.members)
            .map(|(t, member)| {
                let reserved = t?;
                self.assume_and_reserve(fwk, reserved.state, &member.pod_info, reserved.host)
            })
            .collect()
    }
}

/// PlacementGenerate within every node of `cluster`.
fn generate_placements(
    fwk: &Framework,
    view: &GroupInCycle<'_>,
    cluster: &Snapshot,
    sampled: bool,
) -> Result<GeneratedPlacements, Status> {
    let every_node = Placement {
        name: String::new(),
        nodes: cluster.nodes().to_vec(),
    };
    fwk.run_placement_generate_plugins(view, every_node, cluster, sampled)
}

/// The group fits in none of its `n` placements: upstream's status, naming the first's.
fn none_fits(n: usize, first: &Status) -> Status {
    Status::with_reasons(
        Code::Unschedulable,
        vec![
            POD_GROUP_UNSCHEDULABLE.to_string(),
            format!(
                "0/{n} placements are available, first placement status: {}",
                as_error(first)
            ),
        ],
    )
}

/// The index of the placement PlacementScore ranks highest, ties broken at random as
/// upstream's; the only one without scoring.
fn best_placement(
    fwk: &Framework,
    view: &GroupInCycle<'_>,
    assignments: &[PlacementAssignments<'_>],
    sampled: bool,
) -> Result<usize, Status> {
    if assignments.len() == 1 {
        return Ok(0);
    }
    let totals = fwk.run_placement_score_plugins(view, assignments, sampled)?;
    let mut best = 0;
    let mut ties = 1u64;
    for (i, total) in totals.iter().enumerate().skip(1) {
        if *total > totals[best] {
            best = i;
            ties = 1;
        } else if *total == totals[best] {
            // Reservoir sampling: each of the tied placements wins with the same chance.
            ties += 1;
            if fastrand::u64(..ties) == 0 {
                best = i;
            }
        }
    }
    Ok(best)
}

/// Upstream's `Status.AsError()` text: the group's error when the status carries it (ksched
/// keeps it as the first reason), else the message.
fn as_error(status: &Status) -> String {
    match status.reasons().first() {
        Some(first) if first == POD_GROUP_UNSCHEDULABLE => first.clone(),
        _ => status.message(),
    }
}
