//! PodGroupPodsCount (upstream 1.37's `podgrouppodscount`, gate
//! `TopologyAwareWorkloadScheduling`): a PlacementScore favouring the placement that holds more
//! of the group (members scheduled before plus those placed there), normalized by the most any
//! placement holds (not by `minCount`, so close counts stay close).

use super::helper::{impl_plugin, registration_without_args};
use super::names;
use crate::framework::interface::{
    GroupInCycle, MAX_NODE_SCORE, MIN_NODE_SCORE, PlacementAssignments, PlacementScorePlugin,
    Status,
};

#[derive(Default)]
pub(crate) struct PodGroupPodsCount;

impl_plugin!(
    PodGroupPodsCount,
    names::POD_GROUP_PODS_COUNT,
    [PlacementScore]
);

impl PlacementScorePlugin for PodGroupPodsCount {
    fn score_placement(
        &self,
        group: &GroupInCycle<'_>,
        assignments: &PlacementAssignments<'_>,
    ) -> Result<i64, Status> {
        Ok((group.scheduled.len() + assignments.members.len()) as i64)
    }

    fn has_normalize_placement_scores(&self) -> bool {
        true
    }

    fn normalize_placement_scores(
        &self,
        _group: &GroupInCycle<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        let most = scores.iter().copied().max().unwrap_or(0);
        if most == 0 {
            return Err(Status::error(
                "no pods from pod group are assigned to any of the candidate placements",
            ));
        }
        for s in scores {
            *s = MIN_NODE_SCORE + *s * (MAX_NODE_SCORE - MIN_NODE_SCORE) / most;
        }
        Ok(())
    }
}

pub(crate) fn registration() -> crate::framework::registry::PluginRegistration {
    registration_without_args::<PodGroupPodsCount>(PodGroupPodsCount::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_holding_more_of_the_group_score_higher_relative_to_the_most() {
        let group = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
        }))
        .expect("pod group");
        let view = GroupInCycle {
            group: &group,
            scheduled: &[],
        };
        let mut scores = vec![3, 4, 1];
        PodGroupPodsCount
            .normalize_placement_scores(&view, &mut scores)
            .expect("normalized");
        assert_eq!(scores, [75, 100, 25]);
        let mut none = vec![0, 0];
        let err = PodGroupPodsCount
            .normalize_placement_scores(&view, &mut none)
            .expect_err("nothing placed");
        assert_eq!(
            err.message(),
            "no pods from pod group are assigned to any of the candidate placements"
        );
    }
}
