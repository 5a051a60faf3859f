//! PreScore, Score and NormalizeScore, and the weighted scores they give ([`NodeScores`]), with
//! the raw scores opportunistic batching keeps across cycles ([`RawScores`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rayon::prelude::*;

use super::{Entry, Framework};
use crate::config::ExtensionPoint;
use crate::framework::interface::{
    Code, CycleState, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore, PARALLEL_THRESHOLD, Status,
};
use crate::framework::metrics::Point;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

/// Every node's weighted score from every Score plugin, and the totals; one flat table (no
/// allocation per node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeScores {
    /// The scored nodes, in the order given.
    pub nodes: Vec<Arc<str>>,
    /// The Score plugins that ran, in order.
    pub plugins: Vec<Arc<str>>,
    /// `weighted[node * plugins.len() + plugin]`: normalized score times weight.
    weighted: Vec<i64>,
    /// The sum per node.
    pub totals: Vec<i64>,
    /// Tie-breakers: upstream draws a random one for each node an extender scored, 0 for others
    /// (empty: all 0).
    pub randomizers: Vec<u64>,
}

impl NodeScores {
    /// Every node with the same total (no Score plugins: upstream gives each node 1).
    pub fn uniform(nodes: &[Arc<NodeInfo>], total: i64) -> NodeScores {
        NodeScores {
            nodes: nodes.iter().map(|n| n.name_arc().clone()).collect(),
            plugins: Vec::new(),
            weighted: Vec::new(),
            totals: vec![total; nodes.len()],
            randomizers: Vec::new(),
        }
    }

    /// Adds the extenders' scores (by node name); each node that got one gets a random
    /// tie-breaker, as upstream gives it.
    pub fn add_extender_scores(&mut self, scores: &BTreeMap<String, i64>) {
        if scores.is_empty() {
            return;
        }
        self.randomizers.resize(self.nodes.len(), 0);
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(s) = scores.get(&**node) {
                self.totals[i] += s;
                self.randomizers[i] = fastrand::u64(..);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `(plugin, weighted score)` for node `i`.
    pub fn plugin_scores(&self, i: usize) -> impl Iterator<Item = (&str, i64)> {
        let k = self.plugins.len();
        self.plugins
            .iter()
            .enumerate()
            .map(move |(p, name)| (&**name, self.weighted[i * k + p]))
    }
}

/// Raw (not yet normalized) scores kept for nodes across cycles, by the node's index in the list
/// being scored: opportunistic batching's record of the Score plugins' per-node results.
pub trait RawScores {
    /// The `len` raw scores recorded for node `i`, if they are still valid.
    fn get(&mut self, i: usize, len: usize) -> Option<&[i64]>;
    /// Records node `i`'s raw scores.
    fn put(&mut self, i: usize, row: &[i64]);
}

impl Framework {
    /// The number of Score plugins.
    pub fn num_score_plugins(&self) -> usize {
        self.at(ExtensionPoint::Score).len()
    }

    pub fn has_score_plugins(&self) -> bool {
        !self.at(ExtensionPoint::Score).is_empty()
    }

    /// PreScore: `Skip` skips the plugin's Score for this pod; any other non-success is an error.
    pub fn run_pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        self.at_point(
            Point::PreScore,
            || self.pre_score_each(state, pod, snapshot, nodes),
            Status::code,
        )
    }

    fn pre_score_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut skip = BTreeSet::new();
        for e in self.at(ExtensionPoint::PreScore) {
            let Some(p) = e.plugin.as_pre_score() else {
                continue;
            };
            let timer = e.timer(Point::PreScore, sampled);
            let s = p.pre_score(state, pod, snapshot, nodes);
            timer.stop(s.code());
            if s.is_skip() {
                skip.insert(e.name.clone());
                continue;
            }
            e.evaluated();
            if !s.is_success() {
                state.set_skip_score_plugins(skip);
                return Status::error(format!(
                    "running PreScore plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        state.set_skip_score_plugins(skip);
        Status::success()
    }

    /// Score every node with every (non-skipped) plugin, normalize per plugin, check the range
    /// `0..=100`, weight and sum. Nodes are scored in parallel.
    pub fn run_score_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<NodeScores, Status> {
        self.run_score_plugins_reusing(state, pod, nodes, None)
    }

    /// [`Framework::run_score_plugins`], taking the raw scores `recorded` has for a node instead of
    /// running the plugins on it, and giving it those it computes (opportunistic batching).
    pub fn run_score_plugins_reusing(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        recorded: Option<&mut dyn RawScores>,
    ) -> Result<NodeScores, Status> {
        self.at_point(
            Point::Score,
            || self.score_each(state, pod, nodes, recorded),
            |r| r.as_ref().map_or_else(Status::code, |_| Code::Success),
        )
    }

    fn score_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        recorded: Option<&mut dyn RawScores>,
    ) -> Result<NodeScores, Status> {
        let sampled = state.record_plugin_metrics();
        let skip = state.skip_score_plugins();
        let plugins: Vec<(usize, &Entry)> = self
            .at(ExtensionPoint::Score)
            .iter()
            .enumerate()
            .filter(|(_, e)| !skip.contains(&e.name))
            .collect();
        let k = plugins.len();
        if k == 0 {
            return Ok(NodeScores::uniform(nodes, 0));
        }
        // raw[node * k + plugin]
        let mut raw = vec![0i64; nodes.len() * k];
        let score_row = |node: &NodeInfo, row: &mut [i64]| -> Result<(), Status> {
            let mut clock = self.plugin_clock(state);
            for ((_, e), slot) in plugins.iter().zip(row.iter_mut()) {
                let Some(p) = e.plugin.as_score() else {
                    continue;
                };
                e.evaluated();
                let score = p.score(state, pod, node);
                let code = score.as_ref().map_or_else(Status::code, |_| Code::Success);
                clock = e.lap(Point::Score, code, clock);
                *slot = score.map_err(|s| {
                    Status::error(format!(
                        "running Score plugins: plugin {:?} failed with: {}",
                        e.name,
                        s.message()
                    ))
                })?;
            }
            Ok(())
        };
        let parallel = |n: usize| {
            (n >= PARALLEL_THRESHOLD)
                .then(|| self.running("Score", rayon::current_num_threads().min(n)))
        };
        match recorded {
            None => match parallel(nodes.len()) {
                Some(_running) => nodes
                    .par_iter()
                    .zip(raw.par_chunks_mut(k))
                    .try_for_each(|(n, row)| score_row(n, row))?,
                None => nodes
                    .iter()
                    .zip(raw.chunks_mut(k))
                    .try_for_each(|(n, row)| score_row(n, row))?,
            },
            Some(recorded) => {
                let mut missing = Vec::new();
                for (i, row) in raw.chunks_mut(k).enumerate() {
                    match recorded.get(i, k) {
                        Some(r) => row.copy_from_slice(r),
                        None => missing.push(i),
                    }
                }
                let mut computed = vec![0i64; missing.len() * k];
                match parallel(missing.len()) {
                    Some(_running) => missing
                        .par_iter()
                        .zip(computed.par_chunks_mut(k))
                        .try_for_each(|(&i, row)| score_row(&nodes[i], row))?,
                    None => missing
                        .iter()
                        .zip(computed.chunks_mut(k))
                        .try_for_each(|(&i, row)| score_row(&nodes[i], row))?,
                }
                for (&i, row) in missing.iter().zip(computed.chunks(k)) {
                    raw[i * k..(i + 1) * k].copy_from_slice(row);
                    recorded.put(i, row);
                }
            }
        }
        for (pi, (_, e)) in plugins.iter().enumerate() {
            let Some(p) = e.plugin.as_score() else {
                continue;
            };
            if !p.has_normalize_score() {
                continue;
            }
            let mut list: Vec<NodeScore> = nodes
                .iter()
                .enumerate()
                .map(|(ni, n)| NodeScore {
                    name: n.name_arc().clone(),
                    score: raw[ni * k + pi],
                })
                .collect();
            let timer = e.timer(Point::ScoreExtensionNormalize, sampled);
            let s = p.normalize_score(state, pod, &mut list);
            timer.stop(s.code());
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    e.name,
                    s.message()
                )));
            }
            for (ni, ns) in list.iter().enumerate() {
                raw[ni * k + pi] = ns.score;
            }
        }
        let mut totals = vec![0i64; nodes.len()];
        for (ni, total) in totals.iter_mut().enumerate() {
            for (pi, (wi, e)) in plugins.iter().enumerate() {
                let score = raw[ni * k + pi];
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.name
                    )));
                }
                let weighted = score * self.score_weights[*wi];
                raw[ni * k + pi] = weighted;
                *total += weighted;
            }
        }
        Ok(NodeScores {
            nodes: nodes.iter().map(|n| n.name_arc().clone()).collect(),
            plugins: plugins.iter().map(|(_, e)| e.name.clone()).collect(),
            weighted: raw,
            totals,
            randomizers: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fwk_with, log};
    use super::*;
    use crate::framework::testing::{
        Fake, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use ExtensionPoint::*;

    #[test]
    fn score_normalize_weight_and_range() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.score = [("n1".to_string(), 10), ("n2".to_string(), 20)].into();
        a.normalize_factor = Some(2);
        let mut b = Fake::new("B", &l);
        b.score = [("n1".to_string(), 5)].into();
        let (reg, _) = registry_with(vec![a, b]);
        let (h, _) = handle();
        let mut spec = profile(&[]);
        spec.plugins
            .insert(Score, vec![("A".into(), 3), ("B".into(), 0)]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let snap = snapshot_of(&["n1", "n2"]);
        let pod = PodBuilder::new("p").info();
        let scores = fwk
            .run_score_plugins(&CycleState::new(), &pod, snap.nodes())
            .expect("scores");
        // n1: 10*2*3 + 5*1 = 65; n2: 20*2*3 + 0 = 120
        assert_eq!(scores.totals, [65, 120]);
        assert_eq!(&*scores.nodes[1], "n2");
        assert_eq!(
            scores.plugin_scores(0).collect::<Vec<_>>(),
            [("A", 60), ("B", 5)]
        );

        let mut state = CycleState::new();
        state.set_skip_score_plugins([Arc::from("A")].into());
        let scores = fwk
            .run_score_plugins(&state, &pod, snap.nodes())
            .expect("scores");
        assert_eq!(scores.plugin_scores(0).count(), 1);

        let mut c = Fake::new("C", &l);
        c.score = [("n1".to_string(), 101)].into();
        let fwk = fwk_with(vec![c], &[(Score, &["C"])]);
        let e = fwk
            .run_score_plugins(&CycleState::new(), &pod, snap.nodes())
            .expect_err("out of range");
        assert!(
            e.message().contains("returns an invalid score 101"),
            "{}",
            e.message()
        );
    }
}
