//! A pod group's PlacementGenerate and PlacementScore (topology-aware workload scheduling).

use super::Framework;
use crate::config::ExtensionPoint;
use crate::framework::interface::{
    Code, GroupInCycle, MAX_NODE_SCORE, MIN_NODE_SCORE, Placement, PlacementAssignments, Status,
};
use crate::framework::metrics::Point;
use crate::framework::types::Snapshot;

/// The code of a group point's result, for its duration.
fn code_of<T>(result: &Result<T, Status>) -> Code {
    result.as_ref().map_or_else(Status::code, |_| Code::Success)
}

/// What PlacementGenerate gave a group: its placements, in the order they are tried, and how
/// many of them the cycle finds feasible before it scores them and tries no more.
pub struct GeneratedPlacements {
    pub placements: Vec<Placement>,
    pub to_score: usize,
}

impl Framework {
    /// Upstream's `RunPlacementGeneratePlugins`: the first PlacementGenerate plugin's placements
    /// within `parent`; `parent` itself when the profile has none. The plugin is timed when
    /// `sampled`.
    pub fn run_placement_generate_plugins(
        &self,
        group: &GroupInCycle<'_>,
        parent: Placement,
        snapshot: &Snapshot,
        sampled: bool,
    ) -> Result<GeneratedPlacements, Status> {
        let each = || {
            let Some((entry, plugin)) = self
                .at(ExtensionPoint::PlacementGenerate)
                .iter()
                .find_map(|e| e.plugin.as_placement_generate().map(|p| (e, p)))
            else {
                return Ok(GeneratedPlacements {
                    placements: vec![parent],
                    to_score: 1,
                });
            };
            let name = &entry.name;
            let timer = entry.timer(Point::PlacementGenerate, sampled);
            let generated = plugin.generate_placements(group, &parent, snapshot);
            timer.stop(code_of(&generated));
            let placements = generated.map_err(|status| status.with_plugin(name.clone()))?;
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
        };
        self.at_point(Point::PlacementGenerate, each, code_of)
    }

    /// Upstream's `RunPlacementScorePlugins`: each placement's weighted total over the
    /// PlacementScore plugins (each normalized over all placements where it does so). The
    /// plugins are timed when `sampled`.
    pub fn run_placement_score_plugins(
        &self,
        group: &GroupInCycle<'_>,
        placements: &[PlacementAssignments<'_>],
        sampled: bool,
    ) -> Result<Vec<i64>, Status> {
        let each = || {
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
                    .map(|p| {
                        let timer = entry.timer(Point::PlacementScore, sampled);
                        let score = plugin.score_placement(group, p);
                        timer.stop(code_of(&score));
                        score
                    })
                    .collect::<Result<Vec<i64>, Status>>()
                    .map_err(failed)?;
                if plugin.has_normalize_placement_scores() {
                    let timer = entry.timer(Point::PlacementScoreExtensionNormalize, sampled);
                    let normalized = plugin.normalize_placement_scores(group, &mut scores);
                    timer.stop(code_of(&normalized));
                    normalized.map_err(|status| {
                        Status::error(format!(
                            "running NormalizePlacementScore on PlacementScore plugins: plugin {:?} failed with: {}",
                            entry.name,
                            status.message()
                        ))
                    })?;
                }
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
        };
        self.at_point(Point::PlacementScore, each, code_of)
    }
}
