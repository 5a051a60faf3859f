//! Running a Score plugin over nodes, and upstream's resource-scoring node and pod.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::builders::{NodeBuilder, PodBuilder};
use crate::framework::interface::{CycleState, NodeScore, PreScorePlugin, ScorePlugin};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

/// A node allocating `cpu`, 10000 bytes of memory and 32 pods (upstream's resource-scoring
/// examples), with `pods` on it.
pub fn scoring_node(name: &str, cpu: &str, pods: Vec<Pod>) -> NodeInfo {
    NodeBuilder::new(name)
        .allocatable(&[("cpu", cpu), ("memory", "10000"), ("pods", "32")])
        .info(pods)
}

/// Upstream's resource-scoring pod: 1000m/2000 and 2000m/3000 (cpu/memory) in two containers.
pub fn scoring_pod() -> PodInfo {
    PodBuilder::new("p")
        .container(&[("cpu", "1000m"), ("memory", "2000")])
        .container(&[("cpu", "2000m"), ("memory", "3000")])
        .info()
}

/// Score of each of `nodes` by `pl` with `state` (running PreScore is the caller's part).
pub fn score_nodes<N: std::borrow::Borrow<NodeInfo>>(
    pl: &dyn ScorePlugin,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[N],
) -> Vec<NodeScore> {
    nodes
        .iter()
        .map(|n| NodeScore {
            name: n.borrow().name_arc().clone(),
            score: pl.score(state, pod, n.borrow()).expect("score"),
        })
        .collect()
}

/// The values of `scores`, in order.
pub fn score_values(scores: &[NodeScore]) -> Vec<i64> {
    scores.iter().map(|s| s.score).collect()
}

/// PreScore on `nodes`, Score and NormalizeScore: the normalized scores in the order of `nodes`,
/// or `None` when PreScore skipped.
pub fn pre_score_and_score<P: PreScorePlugin + ScorePlugin>(
    pl: &P,
    pod: &PodInfo,
    snap: &Snapshot,
    nodes: &[Arc<NodeInfo>],
) -> Option<Vec<NodeScore>> {
    let mut state = CycleState::new();
    let s = pl.pre_score(&mut state, pod, snap, nodes);
    if s.is_skip() {
        return None;
    }
    assert!(s.is_success(), "{s:?}");
    let mut scores = score_nodes(pl, &state, pod, nodes);
    assert!(pl.normalize_score(&state, pod, &mut scores).is_success());
    Some(scores)
}
