//! PreScore, Score and NormalizeScore.

use std::sync::Arc;

use compact_str::CompactString;
use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Node, Pod};
use rayon::prelude::*;

use super::InterPodAffinity;
use super::terms::{Labels, namespace_labels};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, NodeScore, PARALLEL_THRESHOLD, PreScorePlugin, ScorePlugin, Status,
};
use crate::framework::types::affinity_terms::{AffinityTerm, PodTerms, WeightedAffinityTerm};
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView, Snapshot};

pub(super) const PRE_SCORE_STATE_KEY: &str = "PreScoreInterPodAffinity";

/// Topology key -> value -> score (foldhash: a cycle hashes a node's label value per matching
/// existing pod and term). A value is a `CompactString`, kept inline up to 24 bytes: a
/// per-node key such as the hostname would otherwise cost an allocation per node each cycle.
#[derive(Debug, Clone, Default)]
pub(super) struct ScoreMap {
    scores: HashMap<String, HashMap<CompactString, i64>>,
    /// How many values a key's map is made room for at once (the nodes this map covers):
    /// growing it one rehash at a time was a tenth of a 5000-node cycle.
    values_hint: usize,
}

impl ScoreMap {
    fn for_nodes(nodes: usize) -> ScoreMap {
        ScoreMap {
            scores: HashMap::default(),
            values_hint: nodes,
        }
    }

    fn process_term(
        &mut self,
        term: &AffinityTerm,
        weight: i64,
        pod: &impl PodView,
        ns_labels: Option<&Labels>,
        node: &Node,
    ) {
        if !term.matches(pod, ns_labels) {
            return;
        }
        if let Some(v) = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&term.topology_key))
        {
            self.add(&term.topology_key, v, weight);
        }
    }

    /// Adds `weight` to the pair's score, allocating its strings only for a new pair (a cycle
    /// adds to the same few pairs once per matching existing pod).
    fn add(&mut self, key: &str, value: &str, weight: i64) {
        match self.scores.get_mut(key) {
            Some(values) => match values.get_mut(value) {
                Some(score) => *score += weight,
                None => {
                    values.insert(CompactString::new(value), weight);
                }
            },
            None => {
                let mut values =
                    HashMap::with_capacity_and_hasher(self.values_hint, Default::default());
                values.insert(CompactString::new(value), weight);
                self.scores.insert(key.to_string(), values);
            }
        }
    }

    fn process_terms(
        &mut self,
        terms: &[WeightedAffinityTerm],
        pod: &impl PodView,
        ns_labels: Option<&Labels>,
        node: &Node,
        multiplier: i64,
    ) {
        for t in terms {
            self.process_term(
                &t.term,
                i64::from(t.weight) * multiplier,
                pod,
                ns_labels,
                node,
            );
        }
    }

    /// The sum of both maps' scores (moves `other`'s strings: nothing is allocated again).
    fn merge(mut self, other: ScoreMap) -> ScoreMap {
        for (key, values) in other.scores {
            match self.scores.get_mut(&key) {
                Some(mine) => {
                    mine.reserve(values.len());
                    for (value, score) in values {
                        *mine.entry(value).or_insert(0) += score;
                    }
                }
                None => {
                    self.scores.insert(key, values);
                }
            }
        }
        self
    }

    fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    fn score(&self, labels: Option<&Labels>) -> i64 {
        let Some(labels) = labels else { return 0 };
        self.scores
            .iter()
            .filter_map(|(k, values)| labels.get(k).and_then(|v| values.get(v.as_str())))
            .sum()
    }
}

/// The scores of `process` over `nodes`, the nodes split among the worker threads when there are
/// many (as upstream's PreScore runs over nodes in parallel): each part adds to its own map and
/// the maps are merged.
fn fold_nodes(
    nodes: Vec<&Arc<NodeInfo>>,
    process: impl Fn(&NodeInfo, &mut ScoreMap) + Sync,
) -> ScoreMap {
    let part = |nodes: &[&Arc<NodeInfo>]| {
        let mut scores = ScoreMap::for_nodes(nodes.len());
        for n in nodes {
            process(n, &mut scores);
        }
        scores
    };
    if nodes.len() < PARALLEL_THRESHOLD {
        return part(&nodes);
    }
    let part_len = nodes.len().div_ceil(rayon::current_num_threads());
    nodes
        .par_chunks(part_len)
        .map(part)
        .reduce(ScoreMap::default, ScoreMap::merge)
}

/// What PreScore computes for Score.
#[derive(Debug)]
pub(super) struct PreScoreState {
    pub topology_score: ScoreMap,
}

impl InterPodAffinity {
    /// Adds to `scores` what one existing pod contributes (upstream's `processExistingPod`).
    fn process_existing_pod(
        &self,
        incoming: &Pod,
        incoming_terms: &PodTerms,
        ns_labels: &Labels,
        existing: &AssignedPod,
        node: &Node,
        scores: &mut ScoreMap,
    ) {
        if node.metadata.labels.as_ref().is_none_or(|l| l.is_empty()) {
            return;
        }
        // The incoming pod's preferred terms (namespace selectors merged: no labels needed).
        scores.process_terms(&incoming_terms.preferred_affinity, existing, None, node, 1);
        scores.process_terms(
            &incoming_terms.preferred_anti_affinity,
            existing,
            None,
            node,
            -1,
        );
        let Some(existing_terms) = existing.affinity_terms() else {
            return;
        };
        let hard = i64::from(self.args.hard_pod_affinity_weight);
        if hard > 0 {
            for t in &existing_terms.required_affinity {
                scores.process_term(t, hard, incoming, Some(ns_labels), node);
            }
        }
        scores.process_terms(
            &existing_terms.preferred_affinity,
            incoming,
            Some(ns_labels),
            node,
            1,
        );
        scores.process_terms(
            &existing_terms.preferred_anti_affinity,
            incoming,
            Some(ns_labels),
            node,
            -1,
        );
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        let mut terms = match PodTerms::of(&pod.pod) {
            Ok(t) => t,
            Err(e) => return Status::error(format!("failed to parse pod: {e}")),
        };
        let has_constraints =
            !terms.preferred_affinity.is_empty() || !terms.preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        terms.merge_namespace_selectors(&self.listers);
        let ns_labels = namespace_labels(&self.listers, pod.namespace());

        let process = |node_info: &NodeInfo, pods: &[Arc<AssignedPod>], scores: &mut ScoreMap| {
            let Some(node) = node_info.node() else { return };
            for p in pods {
                self.process_existing_pod(&pod.pod, &terms, &ns_labels, p, node, scores);
            }
        };
        // Unless the incoming pod has preferred terms, only pods with affinity matter.
        let scores = if has_constraints {
            fold_nodes(snapshot.nodes().iter().collect(), |n, scores| {
                process(n, &n.pods, scores)
            })
        } else {
            fold_nodes(snapshot.have_pods_with_affinity().collect(), |n, scores| {
                process(n, &n.pods_with_affinity, scores)
            })
        };
        if scores.is_empty() {
            return Status::skip();
        }
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                topology_score: scores,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| {
                Status::error(format!(
                    "failed to read {PRE_SCORE_STATE_KEY:?} from cycleState: not found"
                ))
            })?;
        Ok(s.topology_score.score(node.labels()))
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// Scales scores linearly from the lowest (0) to the highest (100); negative scores
    /// (anti-affinity) included.
    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) else {
            return Status::error(format!(
                "failed to read {PRE_SCORE_STATE_KEY:?} from cycleState: not found"
            ));
        };
        if s.topology_score.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            s.score = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}
