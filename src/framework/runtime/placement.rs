//! A pod group's PlacementGenerate and PlacementScore (topology-aware workload scheduling).

use super::Framework;
use crate::config::ExtensionPoint;
use crate::framework::interface::{
    Code, GroupInCycle, MAX_NODE_SCORE, MIN_NODE_SCORE, Placement, PlacementAssignments, Status,
};
use crate::framework::types::Snapshot;

/// What PlacementGenerate gave a group: its placements, in the order they are tried, and how
/// many of them the cycle finds feasible before it scores them and tries no more.
pub struct GeneratedPlacements {
    pub placements: Vec<Placement>,
    pub to_score: usize,
}

impl Framework {
    /// Upstream's `RunPlacementGeneratePlugins`: the first PlacementGenerate plugin's placements
    /// within `parent`; `parent` itself when the profile has none.
    pub fn run_placement_generate_plugins(
        &self,
        group: &GroupInCycle<'_>,
        parent: Placement,
        snapshot: &Snapshot,
    ) -> Result<GeneratedPlacements, Status> {
        let Some((name, plugin)) = self
            .at(ExtensionPoint::PlacementGenerate)
            .iter()
            .find_map(|e| e.plugin.as_placement_generate().map(|p| (&e.name, p)))
        else {
            return Ok(GeneratedPlacements {
                placements: vec![parent],
                to_score: 1,
            });
        };
        let placements = plugin
            .generate_placements(group, &parent, snapshot)
            .map_err(|status| status.with_plugin(name.clone()))?;
        if placements.is_empty() {
            return Err(
                Status::unschedulable("no feasible placements found").with_plugin(name.clone())
            );
        }
        let to_score = plugin.placements_to_score(&placements).max(1);
        Ok(GeneratedPlacements {
            placements,
            to_score,
        })
    }

    /// Upstream's `RunPlacementScorePlugins`: each placement's weighted total over the
    /// PlacementScore plugins (each normalized over all placements where it does so).
    pub fn run_placement_score_plugins(
        &self,
        group: &GroupInCycle<'_>,
        placements: &[PlacementAssignments<'_>],
    ) -> Result<Vec<i64>, Status> {
        let mut totals = vec![0i64; placements.len()];
        let entries = self.at(ExtensionPoint::PlacementScore);
        for (entry, weight) in entries.iter().zip(&self.placement_score_weights) {
            let Some(plugin) = entry.plugin.as_placement_score() else {
                continue;
            };
            let failed = |status: Status| {
                Status::error(format!(
                    "running PlacementScore plugins: plugin {:?} failed with: {}",
                    entry.name,
                    status.message()
                ))
            };
            let mut scores = placements
                .iter()
                .map(|p| plugin.score_placement(group, p))
                .collect::<Result<Vec<i64>, Status>>()
                .map_err(failed)?;
            plugin
                .normalize_placement_scores(group, &mut scores)
                .map_err(|status| {
                    Status::error(format!(
                        "running NormalizePlacementScore on PlacementScore plugins: plugin {:?} failed with: {}",
                        entry.name,
                        status.message()
                    ))
                })?;
            for (total, score) in totals.iter_mut().zip(scores) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
                    return Err(Status::new(
                        Code::Error,
                        format!(
                            "applying score defaultWeights on PlacementScore plugins: plugin {:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                            entry.name
                        ),
                    ));
                }
                *total += score * weight;
            }
        }
        Ok(totals)
    }
}
