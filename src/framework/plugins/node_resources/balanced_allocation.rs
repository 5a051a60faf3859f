//! NodeResourcesBalancedAllocation: prefers nodes whose resource usage stays balanced across
//! resources after placing the pod (1 - standard deviation of the usage fractions).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use smallvec::SmallVec;

use super::{
    ResourceSpec, for_each_allocatable_and_requested, pod_resource_requests, set_default_resources,
};
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, decode, duplicate, invalid, typed};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, PreScorePlugin, ScorePlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

const PRE_SCORE_STATE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

/// Upstream's `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeResourcesBalancedAllocationArgs {
    pub resources: Vec<ResourceSpec>,
}

impl PluginArgs for NodeResourcesBalancedAllocationArgs {
    const KIND: &'static str = "NodeResourcesBalancedAllocationArgs";

    fn set_defaults(&mut self) {
        set_default_resources(&mut self.resources);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, r) in self.resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                errs.push(duplicate(
                    format!("resources[{i}].name"),
                    format!("\"{}\"", r.name),
                ));
            }
            if r.weight != 1 {
                errs.push(invalid(
                    format!("resources[{i}].weight"),
                    r.weight,
                    "must be 1",
                ));
            }
        }
        errs
    }
}

pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
}

impl BalancedAllocation {
    pub fn new(args: NodeResourcesBalancedAllocationArgs) -> BalancedAllocation {
        let mut args = args;
        args.set_defaults();
        BalancedAllocation {
            resources: args.resources,
        }
    }
}

/// Upstream's `balancedResourceScorer` over usage fractions (each capped at 1).
pub fn balanced_score_of_fractions(fractions: &[f64]) -> i64 {
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The score from requested/allocatable pairs (resources with zero allocatable are left out).
pub fn balanced_score(requested: &[i64], allocatable: &[i64]) -> i64 {
    let fractions: SmallVec<[f64; 8]> = requested
        .iter()
        .zip(allocatable)
        .filter(|(_, a)| **a != 0)
        .map(|(r, a)| (*r as f64 / *a as f64).min(1.0))
        .collect();
    balanced_score_of_fractions(&fractions)
}

#[derive(Debug, Clone)]
struct PreScoreState {
    pod_requests: Vec<i64>,
}

impl_plugin!(
    BalancedAllocation,
    names::NODE_RESOURCES_BALANCED_ALLOCATION,
    [PreScore, Score]
);

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        let pod_requests = pod_resource_requests(pod, &self.resources, true);
        // Best-effort pods are not scored, so that they do not all pile onto one node.
        if pod_requests.iter().all(|r| *r == 0) {
            return Status::skip();
        }
        state.write(PRE_SCORE_STATE_KEY, PreScoreState { pod_requests });
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let computed;
        let pod_requests = match state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) {
            Some(s) => &s.pod_requests,
            None => {
                computed = pod_resource_requests(pod, &self.resources, true);
                &computed
            }
        };
        let mut fractions: SmallVec<[f64; 8]> = SmallVec::new();
        for_each_allocatable_and_requested(
            node,
            &self.resources,
            pod_requests,
            true,
            |_, alloc, req| {
                fractions.push((req as f64 / alloc as f64).min(1.0));
            },
        );
        Ok(balanced_score_of_fractions(&fractions))
    }
}

pub fn registration() -> PluginRegistration {
    PluginRegistration::new(
        BalancedAllocation::EXTENSION_POINTS,
        decode::<NodeResourcesBalancedAllocationArgs>,
        |args, _| Ok(Arc::new(BalancedAllocation::new(typed(args)?))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, scoring_node, scoring_pod};
    use serde_json::json;

    #[test]
    fn score() {
        let p = BalancedAllocation::new(NodeResourcesBalancedAllocationArgs::default());
        let pod = scoring_pod();
        let n1 = scoring_node("n1", "4000m", vec![]);
        let n2 = scoring_node("n2", "6000m", vec![]);
        let mut state = CycleState::new();
        assert!(
            p.pre_score(&mut state, &pod, &Snapshot::new(), &[])
                .is_success()
        );
        // n1: cpu 0.75, mem 0.5 -> std 0.125 -> 87; n2: 0.5, 0.5 -> 100
        assert_eq!(p.score(&state, &pod, &n1), Ok(87));
        assert_eq!(p.score(&state, &pod, &n2), Ok(100));
        // Existing pods count with their real requests (no non-zero defaults).
        let existing = PodBuilder::new("e")
            .node("n3")
            .container(&[("cpu", "3000m")])
            .build();
        let n3 = scoring_node("n3", "6000m", vec![existing]);
        // cpu 6000/6000 = 1, mem 0.5 -> std 0.25 -> 75
        assert_eq!(p.score(&state, &pod, &n3), Ok(75));
    }

    #[test]
    fn best_effort_pods_skip() {
        let p = BalancedAllocation::new(NodeResourcesBalancedAllocationArgs::default());
        let s = p.pre_score(
            &mut CycleState::new(),
            &PodBuilder::new("p").container(&[]).info(),
            &Snapshot::new(),
            &[],
        );
        assert!(s.is_skip());
    }

    #[test]
    fn std_dev_over_three_resources() {
        // fractions 0.2, 0.5, 0.8: mean 0.5, std sqrt(0.06) = 0.2449 -> 75
        assert_eq!(balanced_score(&[2, 5, 8], &[10, 10, 10]), 75);
        assert_eq!(balanced_score(&[20, 5], &[10, 10]), 75); // over 1 capped
        assert_eq!(balanced_score(&[], &[]), 100);
    }

    #[test]
    fn args() {
        assert_eq!(
            decode::<NodeResourcesBalancedAllocationArgs>(None),
            Ok(
                json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]})
            )
        );
        let e = decode::<NodeResourcesBalancedAllocationArgs>(Some(
            &json!({"resources": [{"name": "cpu", "weight": 2}]}),
        ))
        .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "resources[0].weight: Invalid value: 2: must be 1"
        );
        let e = decode::<NodeResourcesBalancedAllocationArgs>(Some(
            &json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]}),
        ))
        .unwrap_err();
        assert_eq!(e[0].path, "resources[1].name");
    }
}
