//! NodeResourcesFit's PlacementScore (upstream's `Fit.ScorePlacement`): how full a placement's
//! nodes would be with the pod group on them, by MostAllocated whatever the plugin's own scoring
//! strategy, over the strategy's resources and weights.

use std::sync::Arc;

use super::fit::{Fit, most_requested_score};
use super::{ResourceSpec, for_each_allocatable_and_requested, pod_resource_requests};
use crate::framework::interface::{
    GroupInCycle, PlacementAssignments, PlacementScorePlugin, Status,
};
use crate::framework::types::{NodeInfo, PodInfo};

impl PlacementScorePlugin for Fit {
    fn score_placement(
        &self,
        _group: &GroupInCycle<'_>,
        assignments: &PlacementAssignments<'_>,
    ) -> Result<i64, Status> {
        Ok(most_allocated_placement(
            self.scoring_resources(),
            assignments.members.iter().map(|(pod, _)| *pod),
            &assignments.placement.nodes,
        ))
    }
}

/// Upstream's `resourceAllocationScorer.scorePlacement` with the MostAllocated scorer: the
/// members' requests plus what every node of the placement has allocated, against the
/// placement's allocatable, per resource, weighted. As upstream, a node's extended resources
/// count only once something (a member or an earlier node) requests them.
fn most_allocated_placement<'a>(
    resources: &[ResourceSpec],
    members: impl Iterator<Item = &'a PodInfo>,
    nodes: &[Arc<NodeInfo>],
) -> i64 {
    let mut requested = vec![0i64; resources.len()];
    for pod in members {
        for (total, r) in requested
            .iter_mut()
            .zip(pod_resource_requests(pod, resources, false))
        {
            *total += r;
        }
    }
    let mut allocatable = vec![0i64; resources.len()];
    for node in nodes {
        let before = requested.clone();
        for_each_allocatable_and_requested(node, resources, &before, false, |i, a, q| {
            allocatable[i] += a;
            // `q` is the node's allocated plus what was requested before it.
            requested[i] += q - before[i];
        });
    }
    let (mut score, mut weights) = (0i64, 0i64);
    for (i, r) in resources.iter().enumerate() {
        if allocatable[i] == 0 {
            continue;
        }
        score += most_requested_score(requested[i], allocatable[i]) * r.weight;
        weights += r.weight;
    }
    if weights == 0 { 0 } else { score / weights }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, scoring_node};

    fn member(name: &str, cpu: &str, memory: &str) -> PodInfo {
        PodBuilder::new(name)
            .container(&[("cpu", cpu), ("memory", memory)])
            .info()
    }

    fn cpu_and_memory(cpu_weight: i64) -> Vec<ResourceSpec> {
        vec![
            ResourceSpec {
                name: "cpu".into(),
                weight: cpu_weight,
            },
            ResourceSpec {
                name: "memory".into(),
                weight: 1,
            },
        ]
    }

    #[test]
    fn a_placement_scores_how_full_its_nodes_would_be_with_the_group() {
        let used = PodBuilder::new("used")
            .node("a")
            .container(&[("cpu", "1000m"), ("memory", "2000")])
            .build();
        let nodes = vec![
            Arc::new(scoring_node("a", "4000m", vec![used])),
            Arc::new(scoring_node("b", "4000m", vec![])),
        ];
        let members = [member("m0", "1000m", "2000"), member("m1", "1000m", "2000")];
        // cpu (2000 + 1000) / 8000 = 37, memory (4000 + 2000) / 20000 = 30: (37 + 30) / 2.
        let score = most_allocated_placement(&cpu_and_memory(1), members.iter(), &nodes);
        assert_eq!(score, 33);
        // Weighted as the plugin's resources say: (37 * 3 + 30) / 4.
        let score = most_allocated_placement(&cpu_and_memory(3), members.iter(), &nodes);
        assert_eq!(score, 35);
        // The same members on one empty node fill it more: 2000 / 4000 = 50, 4000 / 10000 = 40.
        let score = most_allocated_placement(&cpu_and_memory(1), members.iter(), &nodes[1..]);
        assert_eq!(score, 45);
    }
}
