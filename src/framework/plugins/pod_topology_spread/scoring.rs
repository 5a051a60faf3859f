//! PreScore, Score and NormalizeScore for `ScheduleAnyway` constraints.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::PodTopologySpread;
use super::common::{
    Constraint, LABEL_HOSTNAME, SCHEDULE_ANYWAY, count_pods_match_selector,
    node_labels_match_spread_constraints, topology_value,
};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, NodeScore, PreScorePlugin, ScorePlugin, Status,
};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

pub(super) const PRE_SCORE_STATE_KEY: &str = "PreScorePodTopologySpread";

#[derive(Debug, Default)]
pub(super) struct PreScoreState {
    pub constraints: Vec<Constraint>,
    /// Filtered nodes lacking a constraint's topology key: scored 0.
    pub ignored_nodes: HashSet<Arc<str>>,
    /// Per constraint: topology value -> matching pods (hostname constraints are counted per
    /// node in Score).
    pub topology_value_to_pod_counts: Vec<HashMap<String, i64>>,
    pub topology_normalizing_weight: Vec<f64>,
}

fn topology_normalizing_weight(size: usize) -> f64 {
    ((size + 2) as f64).ln()
}

fn score_for_count(cnt: i64, max_skew: i32, weight: f64) -> f64 {
    cnt as f64 * weight + f64::from(max_skew - 1)
}

impl PodTopologySpread {
    fn init_pre_score_state(
        &self,
        pod: &PodInfo,
        filtered: &[Arc<NodeInfo>],
        require_all_topologies: bool,
    ) -> Result<PreScoreState, String> {
        let constraints = self.constraints(&pod.pod, SCHEDULE_ANYWAY)?;
        let mut s = PreScoreState {
            topology_value_to_pod_counts: vec![HashMap::new(); constraints.len()],
            ..Default::default()
        };
        if constraints.is_empty() {
            return Ok(s);
        }
        for node in filtered {
            if require_all_topologies
                && !node_labels_match_spread_constraints(node.labels(), &constraints)
            {
                s.ignored_nodes.insert(node.name_arc().clone());
                continue;
            }
            let Some(n) = node.node() else { continue };
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let v = topology_value(n, &c.topology_key)
                    .cloned()
                    .unwrap_or_default();
                s.topology_value_to_pod_counts[i].entry(v).or_insert(0);
            }
        }
        s.topology_normalizing_weight = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    filtered.len() - s.ignored_nodes.len()
                } else {
                    s.topology_value_to_pod_counts[i].len()
                };
                topology_normalizing_weight(size)
            })
            .collect();
        s.constraints = constraints;
        Ok(s)
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        if snapshot.num_nodes() == 0 {
            return Status::skip();
        }
        let has_own = pod
            .spec()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let require_all_topologies = has_own || !self.system_defaulted;
        let mut s = match self.init_pre_score_state(pod, nodes, require_all_topologies) {
            Ok(s) => s,
            Err(e) => return Status::error(format!("calculating preScoreState: {e}")),
        };
        if s.constraints.is_empty() {
            return Status::skip();
        }
        for node_info in snapshot.nodes() {
            let Some(n) = node_info.node() else { continue };
            if require_all_topologies
                && !node_labels_match_spread_constraints(node_info.labels(), &s.constraints)
            {
                continue;
            }
            for (i, c) in s.constraints.iter().enumerate() {
                if !c.matches_node_inclusion_policies(pod, node_info) {
                    continue;
                }
                let v = topology_value(n, &c.topology_key)
                    .map(String::as_str)
                    .unwrap_or("");
                let Some(count) = s.topology_value_to_pod_counts[i].get_mut(v) else {
                    continue;
                };
                *count += count_pods_match_selector(&node_info.pods, &c.selector, pod.namespace());
            }
        }
        state.write(PRE_SCORE_STATE_KEY, s);
        Status::success()
    }
}

fn state_error() -> Status {
    Status::error(format!(
        "error reading {PRE_SCORE_STATE_KEY:?} from cycleState: not found"
    ))
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(state_error)?;
        if s.ignored_nodes.contains(node.name()) {
            return Ok(0);
        }
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = topology_value(n, &c.topology_key) else {
                continue;
            };
            let cnt = if c.topology_key == LABEL_HOSTNAME {
                count_pods_match_selector(&node.pods, &c.selector, pod.namespace())
            } else {
                s.topology_value_to_pod_counts[i]
                    .get(v)
                    .copied()
                    .unwrap_or(0)
            };
            score += score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i]);
        }
        Ok(score.round() as i64)
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// Fewer matching pods score higher: `100 * (max + min - score) / max`; ignored nodes 0.
    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) else {
            return state_error();
        };
        let mut min = i64::MAX;
        let mut max = 0;
        for sc in scores.iter() {
            if s.ignored_nodes.contains(&sc.name) {
                continue;
            }
            min = min.min(sc.score);
            max = max.max(sc.score);
        }
        for sc in scores.iter_mut() {
            if s.ignored_nodes.contains(&sc.name) {
                sc.score = 0;
            } else if max == 0 {
                sc.score = MAX_NODE_SCORE;
            } else {
                sc.score = MAX_NODE_SCORE * (max + min - sc.score) / max;
            }
        }
        Status::success()
    }
}
