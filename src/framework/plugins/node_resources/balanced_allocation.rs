//! NodeResourcesBalancedAllocation: prefers nodes whose resource balance the pod improves. As
//! upstream 1.36 does, the score compares the balance (1 - standard deviation of the usage
//! fractions) with the pod to the balance without it, so a node that is already unbalanced is not
//! penalized for what the pod does not change.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use smallvec::SmallVec;

use super::{
    ResourceSpec, for_each_allocatable_and_requested, pod_resource_requests, set_default_resources,
    sign_requests,
};
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, decode, duplicate, invalid, typed};
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, PreScorePlugin, ScorePlugin, SignFragment, SignPlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

const PRE_SCORE_STATE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

/// Upstream's `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct NodeResourcesBalancedAllocationArgs {
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

pub(crate) struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
}

impl BalancedAllocation {
    pub(crate) fn new(args: NodeResourcesBalancedAllocationArgs) -> BalancedAllocation {
        let mut args = args;
        args.set_defaults();
        BalancedAllocation {
            resources: args.resources,
        }
    }
}

/// Upstream's `balancedResourceScorer` over usage fractions (each capped at 1).
pub(crate) fn balanced_score_of_fractions(fractions: &[f64]) -> i64 {
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
#[cfg(test)]
pub(crate) fn balanced_score(requested: &[i64], allocatable: &[i64]) -> i64 {
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
    [PreScore, Score],
    Sign
);

impl SignPlugin for BalancedAllocation {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![sign_requests(pod)])
    }
}

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
        let mut with_pod: SmallVec<[f64; 8]> = SmallVec::new();
        let mut without_pod: SmallVec<[f64; 8]> = SmallVec::new();
        for_each_allocatable_and_requested(
            node,
            &self.resources,
            pod_requests,
            true,
            |i, alloc, req| {
                let allocated = req - pod_requests.get(i).copied().unwrap_or(0);
                with_pod.push((req as f64 / alloc as f64).min(1.0));
                without_pod.push((allocated as f64 / alloc as f64).min(1.0));
            },
        );
        Ok(balance_improvement_score(
            balanced_score_of_fractions(&with_pod),
            balanced_score_of_fractions(&without_pod),
        ))
    }
}

/// Upstream 1.36's `balancedResourceScorer`: 50 for a pod that leaves the balance as it was, more
/// when it improves it, less when it worsens it (Go's truncating integer division).
pub(crate) fn balance_improvement_score(with_pod: i64, without_pod: i64) -> i64 {
    let half = MAX_NODE_SCORE / 2;
    half + (half + with_pod - without_pod) / 2
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        BalancedAllocation::EXTENSION_POINTS,
        decode::<NodeResourcesBalancedAllocationArgs>,
        |args, _| Ok(Arc::new(BalancedAllocation::new(typed(args)?))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder, scoring_pod};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    /// A node with `cpu` millicores, `memory` bytes and optionally 8 GPUs, running `pods`.
    fn node(name: &str, cpu: &str, memory: &str, gpu: bool, pods: Vec<Pod>) -> NodeInfo {
        let mut alloc = vec![("cpu", cpu), ("memory", memory), ("pods", "32")];
        if gpu {
            alloc.push((GPU, "8"));
        }
        NodeBuilder::new(name).allocatable(&alloc).info(pods)
    }

    const GPU: &str = "nvidia.com/gpu";

    /// A pod on `node` requesting 1000m/2000 and 2000m/3000 (or cpu only).
    fn existing(node: &str, memory: bool) -> Pod {
        let (m1, m2) = if memory { ("2000", "3000") } else { ("0", "0") };
        PodBuilder::new(&format!("e-{node}"))
            .node(node)
            .container(&[("cpu", "1000m"), ("memory", m1)])
            .container(&[("cpu", "2000m"), ("memory", m2)])
            .build()
    }

    fn scores(p: &BalancedAllocation, pod: &PodInfo, nodes: &[NodeInfo], pre: bool) -> Vec<i64> {
        let mut state = CycleState::new();
        if pre {
            assert!(
                p.pre_score(&mut state, pod, &Snapshot::new(), &[])
                    .is_success()
            );
        }
        nodes
            .iter()
            .map(|n| p.score(&state, pod, n).expect("score"))
            .collect()
    }

    /// Upstream 1.36's table (`balanced_allocation_test.go`): the score is how much the pod improves
    /// the node's balance, 50 meaning unchanged.
    #[test]
    fn score_as_upstream_1_36() {
        let p = BalancedAllocation::new(NodeResourcesBalancedAllocationArgs::default());
        let pod = scoring_pod();
        // cpu 0 -> 75 %, memory 0 -> 50 %: 100 -> 87 = 68; 50 % / 50 %: 100 -> 100 = 75.
        let nodes = [
            node("n1", "4000m", "10000", false, vec![]),
            node("n2", "6000m", "10000", false, vec![]),
        ];
        assert_eq!(scores(&p, &pod, &nodes, true), [68, 75]);
        // Existing pods count with their real requests (no non-zero defaults).
        // n1: cpu 30 -> 60 %, memory 0 -> 25 %: 85 -> 82 = 73; n2: 97 -> 95 = 74.
        let nodes = [
            node("n1", "10000m", "20000", false, vec![existing("n1", false)]),
            node("n2", "10000m", "20000", false, vec![existing("n2", true)]),
        ];
        assert_eq!(scores(&p, &pod, &nodes, true), [73, 74]);
        // Without PreScore the pod's requests are computed in Score: the same result.
        assert_eq!(scores(&p, &pod, &nodes, false), [73, 74]);
        // n2 with 50000 memory: 10 -> 20 %: 90 -> 80 = 70.
        let nodes = [
            node("n1", "10000m", "20000", false, vec![existing("n1", false)]),
            node("n2", "10000m", "50000", false, vec![existing("n2", true)]),
        ];
        assert_eq!(scores(&p, &pod, &nodes, true), [73, 70]);
        // Min and max: a memory-only pod fills a cpu-full node (50 -> 100 = 100) or unbalances an
        // empty one (100 -> 50 = 50).
        let memory_pod = PodBuilder::new("m")
            .container(&[("memory", "2000")])
            .container(&[("memory", "3000")])
            .info();
        let nodes = [
            node("n1", "3000m", "5000", false, vec![existing("n1", false)]),
            node("n2", "3000m", "5000", false, vec![]),
        ];
        assert_eq!(scores(&p, &memory_pod, &nodes, true), [100, 50]);
        // At capacity: 75 -> 50 and 100 -> 75 both give 62 (Go's truncating division).
        let cpu_pod = PodBuilder::new("c")
            .container(&[("cpu", "1000m")])
            .container(&[("cpu", "2000m")])
            .info();
        let nodes = [
            node("n1", "6000m", "10000", false, vec![existing("n1", false)]),
            node("n2", "6000m", "10000", false, vec![existing("n2", true)]),
        ];
        assert_eq!(scores(&p, &cpu_pod, &nodes, true), [62, 62]);
    }

    #[test]
    fn scalar_resources_count_only_when_requested() {
        let p = BalancedAllocation::new(NodeResourcesBalancedAllocationArgs {
            resources: ["cpu", "memory", GPU]
                .into_iter()
                .map(|n| ResourceSpec {
                    name: n.into(),
                    weight: 1,
                })
                .collect(),
        });
        let gpu_pod = PodBuilder::new("g")
            .container(&[("cpu", "0"), ("memory", "0"), (GPU, "1")])
            .info();
        let with_gpus = PodBuilder::new("e-n1")
            .node("n1")
            .container(&[("cpu", "1000m"), ("memory", "2000")])
            .container(&[("cpu", "2000m"), ("memory", "3000"), (GPU, "3")])
            .build();
        let nodes = [
            node("n1", "3500m", "40000", true, vec![with_gpus]),
            node("n2", "3500m", "40000", true, vec![existing("n2", true)]),
        ];
        // n1: gpu 3 -> 4 of 8: 69 -> 70 = 75; n2: gpu 0 -> 1: 62 -> 65 = 76.
        assert_eq!(scores(&p, &gpu_pod, &nodes, true), [75, 76]);
        // A pod without GPUs ignores them: 100 -> 63 = 56 on both nodes.
        let nodes = [
            node("n1", "3500m", "40000", true, vec![]),
            node("n2", "3500m", "40000", false, vec![]),
        ];
        assert_eq!(scores(&p, &scoring_pod(), &nodes, true), [56, 56]);
    }

    #[test]
    fn improvement_truncates_toward_zero() {
        assert_eq!(balance_improvement_score(100, 100), 75);
        assert_eq!(balance_improvement_score(50, 100), 50);
        assert_eq!(balance_improvement_score(100, 50), 100);
        // 50 + (50 + 0 - 100) / 2 = 25; 50 + (50 + 87 - 100) / 2 = 50 + 18.
        assert_eq!(balance_improvement_score(0, 100), 25);
        assert_eq!(balance_improvement_score(87, 100), 68);
        assert_eq!(balance_improvement_score(0, 99), 26); // 50 + (-49 / 2 = -24)
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
