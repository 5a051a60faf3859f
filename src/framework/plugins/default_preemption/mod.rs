//! DefaultPreemption: when no node fits, find nodes where removing lower-priority pods lets the pod
//! fit, pick the best one, evict those pods gracefully and nominate the node for the pod — upstream's
//! `plugins/defaultpreemption` and `framework/preemption` (1.36, asynchronous preemption).
//!
//! - `plugin`: the plugin (`default_preemption.go`): eligibility, the victims on one node,
//!   PreEnqueue, PostFilter, the registration.
//! - `evaluator`: the evaluator (`preemption.go`): the dry run, extenders, choice of the node.
//! - `pod_group`: PodGroupPostFilter, the preemption for a whole pod group (1.37).
//! - `victims`: victims as units (a pod, or a whole PodGroup with `disruptionMode: all`).
//! - `executor`: the executor (`executor.go`): the victims' eviction, handed to the scheduler's
//!   API dispatcher so the scheduling cycle never waits on it.

mod evaluator;
mod executor;
mod plugin;
mod pod_group;
#[cfg(test)]
mod tests;
mod victims;

pub(crate) use plugin::registration;
pub(crate) use victims::pod_group_priority;

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid};

/// Upstream's `DefaultPreemptionArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct DefaultPreemptionArgs {
    pub min_candidate_nodes_percentage: Option<i32>,
    pub min_candidate_nodes_absolute: Option<i32>,
}

impl PluginArgs for DefaultPreemptionArgs {
    const KIND: &'static str = "DefaultPreemptionArgs";

    fn set_defaults(&mut self) {
        self.min_candidate_nodes_percentage.get_or_insert(10);
        self.min_candidate_nodes_absolute.get_or_insert(100);
    }

    fn validate(&self) -> Vec<FieldError> {
        let p = self.min_candidate_nodes_percentage.unwrap_or(10);
        let a = self.min_candidate_nodes_absolute.unwrap_or(100);
        let mut errs = Vec::new();
        if !(0..=100).contains(&p) {
            errs.push(invalid(
                "minCandidateNodesPercentage",
                p,
                "not in valid range [0, 100]",
            ));
        }
        if a < 0 {
            errs.push(invalid(
                "minCandidateNodesAbsolute",
                a,
                "not in valid range [0, inf)",
            ));
        }
        if p == 0 && a == 0 {
            errs.push(invalid(
                "minCandidateNodesPercentage",
                p,
                "cannot be zero at the same time as minCandidateNodesAbsolute",
            ));
            errs.push(invalid(
                "minCandidateNodesAbsolute",
                a,
                "cannot be zero at the same time as minCandidateNodesPercentage",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod args_tests {
    use super::*;
    use crate::framework::args::decode;
    use serde_json::json;

    #[test]
    fn args() {
        assert_eq!(
            decode::<DefaultPreemptionArgs>(None),
            Ok(json!({"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}))
        );
        assert_eq!(
            decode::<DefaultPreemptionArgs>(Some(&json!({"minCandidateNodesPercentage": 0}))),
            Ok(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 100}))
        );
        let e = decode::<DefaultPreemptionArgs>(Some(
            &json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
        ))
        .unwrap_err();
        assert_eq!(e.len(), 2);
        let e = decode::<DefaultPreemptionArgs>(Some(&json!({"minCandidateNodesPercentage": 101})))
            .unwrap_err();
        assert_eq!(e[0].path, "minCandidateNodesPercentage");
    }
}
