//! PreFilter (+AddPod/RemovePod) and Filter for `DoNotSchedule` constraints.

use std::collections::HashMap;
use std::sync::Arc;

use super::PodTopologySpread;
use super::common::{
    Constraint, DO_NOT_SCHEDULE, count_pods_match_selector, node_labels_match_spread_constraints,
    topology_value,
};
use crate::framework::interface::{
    CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, Status,
};
use crate::framework::plugins::helper::update_pre_filter_state;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView, Snapshot};

pub(crate) const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub(crate) const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub(super) const PRE_FILTER_STATE_KEY: &str = "PreFilterPodTopologySpread";

/// The two domains with the fewest matching pods (upstream's `criticalPaths`), so the global
/// minimum stays known while AddPod/RemovePod change counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CriticalPaths([(String, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        let none = (String::new(), i64::from(i32::MAX));
        CriticalPaths([none.clone(), none])
    }
}

impl CriticalPaths {
    pub(super) fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if value == p[0].0 {
            Some(0)
        } else if value == p[1].0 {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = p[0].clone();
                    p[0] = (value.to_string(), num);
                } else if num < p[1].1 {
                    p[1] = (value.to_string(), num);
                }
            }
        }
    }

    pub(super) fn min(&self) -> i64 {
        self.0[0].1
    }
}

#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    pub constraints: Arc<Vec<Constraint>>,
    pub critical_paths: Vec<CriticalPaths>,
    /// Per constraint: topology value -> matching pods.
    pub tp_value_to_match_num: Vec<HashMap<String, i64>>,
}

impl PreFilterState {
    fn min_match_num(&self, i: usize, min_domains: i32) -> i64 {
        if (self.tp_value_to_match_num[i].len() as i64) < i64::from(min_domains) {
            // Fewer domains than minDomains: the global minimum is 0.
            return 0;
        }
        self.critical_paths[i].min()
    }

    fn update_with_pod(
        &mut self,
        updated: &AssignedPod,
        preemptor: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        if updated.namespace() != preemptor.namespace() {
            return;
        }
        let Some(n) = node.node() else { return };
        if !node_labels_match_spread_constraints(node.labels(), &self.constraints) {
            return;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selector.matches(updated.labels())
                || !c.matches_node_inclusion_policies(preemptor, node)
            {
                continue;
            }
            let Some(v) = topology_value(n, &c.topology_key) else {
                continue;
            };
            let count = self.tp_value_to_match_num[i].entry(v.clone()).or_insert(0);
            *count += delta;
            let count = *count;
            self.critical_paths[i].update(v, count);
        }
    }
}

impl PodTopologySpread {
    pub(super) fn pre_filter_state(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<PreFilterState, String> {
        let constraints = self
            .constraints(&pod.pod, DO_NOT_SCHEDULE)
            .map_err(|e| format!("get constraints from pod: {e}"))?;
        let mut tp: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
        if !constraints.is_empty() {
            for node_info in snapshot.nodes() {
                let Some(node) = node_info.node() else {
                    continue;
                };
                if !node_labels_match_spread_constraints(node_info.labels(), &constraints) {
                    continue;
                }
                for (i, c) in constraints.iter().enumerate() {
                    if !c.matches_node_inclusion_policies(pod, node_info) {
                        continue;
                    }
                    let Some(v) = topology_value(node, &c.topology_key) else {
                        continue;
                    };
                    let count =
                        count_pods_match_selector(&node_info.pods, &c.selector, pod.namespace());
                    *tp[i].entry(v.clone()).or_insert(0) += count;
                }
            }
        }
        let critical_paths = tp
            .iter()
            .map(|m| {
                let mut p = CriticalPaths::default();
                for (v, n) in m {
                    p.update(v, *n);
                }
                p
            })
            .collect();
        Ok(PreFilterState {
            constraints: Arc::new(constraints),
            critical_paths,
            tp_value_to_match_num: tp,
        })
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        match self.pre_filter_state(pod, snapshot) {
            Err(e) => (None, Status::error(e)),
            Ok(s) if s.constraints.is_empty() => (None, Status::skip()),
            Ok(s) => {
                state.write(PRE_FILTER_STATE_KEY, s);
                (None, Status::success())
            }
        }
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

fn state_error() -> Status {
    Status::error(format!(
        "reading {PRE_FILTER_STATE_KEY:?} from cycleState: not found"
    ))
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(
            state,
            PRE_FILTER_STATE_KEY,
            state_error,
            |s: &mut PreFilterState| s.update_with_pod(pod_to_add, pod_to_schedule, node, 1),
        )
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(
            state,
            PRE_FILTER_STATE_KEY,
            state_error,
            |s: &mut PreFilterState| s.update_with_pod(pod_to_remove, pod_to_schedule, node, -1),
        )
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return state_error();
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = topology_value(n, &c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let min_match = s.min_match_num(i, c.min_domains);
            let self_match = i64::from(c.selector.matches(pod.labels()));
            let match_num = s.tp_value_to_match_num[i].get(v).copied().unwrap_or(0);
            let skew = match_num + self_match - min_match;
            if skew > i64::from(c.max_skew) {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
