//! Prioritizing: PreScore and Score over the feasible nodes (reusing a batch's raw scores) with
//! the extenders' scores, and the selection of the host as upstream's heap.

use std::sync::Arc;

use super::ScheduleError;
use crate::framework::batch::BatchCycle;
use crate::framework::extender::{Extender, extender_scores};
use crate::framework::interface::CycleState;
use crate::framework::runtime::{Framework, NodeScores, RawScores};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

/// A batch's raw scores, for the feasible nodes by their index (see [`RawScores`]).
struct RecordedScores<'a, 'b> {
    batch: &'a mut BatchCycle<'b>,
    positions: &'a [usize],
    nodes: &'a [Arc<NodeInfo>],
}

impl RawScores for RecordedScores<'_, '_> {
    fn get(&mut self, i: usize, len: usize) -> Option<&[i64]> {
        self.batch
            .raw_scores(self.positions[i], &self.nodes[i], len)
    }

    fn put(&mut self, i: usize, row: &[i64]) {
        self.batch
            .record_raw_scores(self.positions[i], &self.nodes[i], row);
    }
}

/// PreScore and Score over the feasible nodes, plus the extenders' scores (all score 1 without
/// Score plugins and extenders). With a batch (and the nodes' snapshot positions), recorded raw
/// scores are reused.
pub fn prioritize_nodes(
    fwk: &Framework,
    extenders: &[Arc<dyn Extender>],
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    nodes: &[Arc<NodeInfo>],
    batch: Option<(&mut BatchCycle<'_>, &[usize])>,
) -> Result<NodeScores, ScheduleError> {
    if extenders.is_empty() && !fwk.has_score_plugins() {
        return Ok(NodeScores::uniform(nodes, 1));
    }
    let s = fwk.run_pre_score_plugins(state, pod, snapshot, nodes);
    if !s.is_success() {
        return Err(ScheduleError::Internal(s));
    }
    let mut recorded = batch.and_then(|(b, positions)| {
        b.pre_score_skipped(state.skip_score_plugins());
        b.is_active().then_some(RecordedScores {
            batch: b,
            positions,
            nodes,
        })
    });
    let mut scores = fwk
        .run_score_plugins_reusing(
            state,
            pod,
            nodes,
            recorded.as_mut().map(|r| r as &mut dyn RawScores),
        )
        .map_err(ScheduleError::Internal)?;
    if !extenders.is_empty() {
        scores.add_extender_scores(&extender_scores(extenders, pod, nodes));
    }
    Ok(scores)
}

/// The node upstream's `selectHost` picks among `scores` (in evaluation order); see [`heap_top`].
pub fn select_host(scores: &NodeScores) -> Option<String> {
    heap_top(&scores.totals, &scores.randomizers).map(|i| scores.nodes[i].to_string())
}

/// The index upstream 1.36 pops first from its node-score heap: Go's `container/heap` `Init` over
/// the nodes in evaluation order, ordered by total score, then by `randomizers` (upstream draws one
/// per node only when extenders scored; missing ones are 0). Among equal top scores this is a node
/// fixed by the heap's layout, neither random nor always the first (scores [1, 5, 9, 9] pick the
/// last), so the same cluster state gives the same node as upstream.
pub fn heap_top(totals: &[i64], randomizers: &[u64]) -> Option<usize> {
    let key = |i: usize| (totals[i], randomizers.get(i).copied().unwrap_or(0));
    // Go's heap.Less: a strictly better node sorts first.
    let less = |h: &[usize], a: usize, b: usize| key(h[a]) > key(h[b]);
    let n = totals.len();
    let mut h: Vec<usize> = (0..n).collect();
    // heap.Init: down(i) for i from n/2-1 down to 0.
    for start in (0..n / 2).rev() {
        let mut i = start;
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let mut j = left;
            if left + 1 < n && less(&h, left + 1, left) {
                j = left + 1;
            }
            if !less(&h, j, i) {
                break;
            }
            h.swap(i, j);
            i = j;
        }
    }
    // heap.Pop returns the root.
    h.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_host_takes_the_top_of_gos_heap() {
        let mut scores = NodeScores::default();
        scores.nodes = ["a", "b", "c", "d"].into_iter().map(Arc::from).collect();
        scores.totals = vec![5, 9, 9, 1];
        // Deterministic: every call picks the same node.
        for _ in 0..20 {
            assert_eq!(select_host(&scores).as_deref(), Some("b"));
        }
        assert_eq!(select_host(&NodeScores::default()), None);
        // Worked through Go's heap.Init by hand: the tie does not always go to the first node.
        let cases: [(&[i64], usize); 7] = [
            (&[7], 0),
            (&[3, 3, 3, 3, 3], 0),
            (&[1, 5, 9, 9], 3),
            (&[5, 9, 9, 1], 1),
            (&[1, 9, 2, 9, 9], 1),
            (&[0, 1, 9, 2, 3, 9], 2),
            (&[2, 1, 3, 9, 1, 1, 9], 3),
        ];
        for (totals, want) in cases {
            assert_eq!(heap_top(totals, &[]), Some(want), "{totals:?}");
        }
        // With extenders upstream breaks ties by a random number per node.
        assert_eq!(heap_top(&[9, 9, 9], &[4, 7, 1]), Some(1));
        assert_eq!(heap_top(&[9, 8, 9], &[4, 70, 1]), Some(0));
    }
}
