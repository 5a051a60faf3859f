//! PreFilter (+AddPod/RemovePod) and Filter.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::InterPodAffinity;
use super::terms::{Labels, TopologyCounts, namespace_labels, pod_matches_all_affinity_terms};
use crate::framework::interface::{
    CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, Status,
};
use crate::framework::plugins::helper::update_pre_filter_state;
use crate::framework::types::affinity_terms::PodTerms;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, Snapshot};

pub(crate) const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
pub(crate) const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod affinity rules";
pub(crate) const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";

pub(super) const PRE_FILTER_STATE_KEY: &str = "PreFilterInterPodAffinity";

/// What PreFilter computes for Filter. Cloned (copy-on-write) when preemption or nominated pods
/// add/remove pods.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    /// Existing pods' required anti-affinity terms matching the incoming pod.
    pub existing_anti_affinity_counts: TopologyCounts,
    /// Existing pods matching all of the incoming pod's required affinity terms.
    pub affinity_counts: TopologyCounts,
    /// Existing pods matching the incoming pod's required anti-affinity terms.
    pub anti_affinity_counts: TopologyCounts,
    /// The incoming pod and its terms (namespace selectors merged).
    pub pod: Arc<Pod>,
    pub terms: Arc<PodTerms>,
    pub namespace_labels: Arc<Labels>,
}

impl PreFilterState {
    fn update_with_pod(&mut self, other: &AssignedPod, node: &NodeInfo, multiplier: i64) {
        let Some(node) = node.node() else { return };
        if other.has_required_anti_affinity()
            && let Some(other_terms) = other.affinity_terms()
        {
            self.existing_anti_affinity_counts
                .update_with_anti_affinity_terms(
                    &other_terms.required_anti_affinity,
                    &self.pod,
                    Some(&self.namespace_labels),
                    node,
                    multiplier,
                );
        }
        self.affinity_counts.update_with_affinity_terms(
            &self.terms.required_affinity,
            other,
            node,
            multiplier,
        );
        self.anti_affinity_counts.update_with_anti_affinity_terms(
            &self.terms.required_anti_affinity,
            other,
            None,
            node,
            multiplier,
        );
    }

    /// The node does not break an existing pod's anti-affinity.
    fn satisfies_existing_pods_anti_affinity(&self, labels: &Labels) -> bool {
        self.existing_anti_affinity_counts.is_empty()
            || !self.existing_anti_affinity_counts.any_positive_for(labels)
    }

    /// The node satisfies the incoming pod's anti-affinity.
    fn satisfies_pod_anti_affinity(&self, labels: &Labels) -> bool {
        if self.anti_affinity_counts.is_empty() {
            return true;
        }
        !self.terms.required_anti_affinity.iter().any(|t| {
            labels
                .get(&t.topology_key)
                .is_some_and(|v| self.anti_affinity_counts.get(&t.topology_key, v) > 0)
        })
    }

    /// The node satisfies the incoming pod's affinity; a pod whose terms match itself may go
    /// first when no pod matches yet (so a group with affinity to itself is not stuck forever).
    fn satisfies_pod_affinity(&self, labels: &Labels) -> bool {
        let mut pods_exist = true;
        for t in &self.terms.required_affinity {
            match labels.get(&t.topology_key) {
                // All topology labels must exist on the node.
                None => return false,
                Some(v) => {
                    if self.affinity_counts.get(&t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
            }
        }
        pods_exist
            || (self.affinity_counts.is_empty()
                && pod_matches_all_affinity_terms(&self.terms.required_affinity, &self.pod))
    }
}

impl InterPodAffinity {
    fn pre_filter_state(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<PreFilterState, Status> {
        let mut terms = PodTerms::of(&pod.pod)
            .map_err(|e| Status::unresolvable(format!("parsing pod: {e}")))?;
        terms
            .required_affinity
            .iter_mut()
            .for_each(|t| t.merge_namespace_selector(&self.listers));
        terms
            .required_anti_affinity
            .iter_mut()
            .for_each(|t| t.merge_namespace_selector(&self.listers));
        let ns_labels = namespace_labels(&self.listers, pod.namespace());

        let mut existing = TopologyCounts::default();
        for node_info in snapshot.have_pods_with_required_anti_affinity() {
            let Some(node) = node_info.node() else {
                continue;
            };
            for p in &node_info.pods_with_required_anti_affinity {
                let Some(t) = p.affinity_terms() else {
                    continue;
                };
                existing.update_with_anti_affinity_terms(
                    &t.required_anti_affinity,
                    &pod.pod,
                    Some(&ns_labels),
                    node,
                    1,
                );
            }
        }

        let mut affinity = TopologyCounts::default();
        let mut anti_affinity = TopologyCounts::default();
        if !terms.required_affinity.is_empty() || !terms.required_anti_affinity.is_empty() {
            for node_info in snapshot.nodes() {
                let Some(node) = node_info.node() else {
                    continue;
                };
                for p in &node_info.pods {
                    affinity.update_with_affinity_terms(&terms.required_affinity, p, node, 1);
                    anti_affinity.update_with_anti_affinity_terms(
                        &terms.required_anti_affinity,
                        p,
                        None,
                        node,
                        1,
                    );
                }
            }
        }
        Ok(PreFilterState {
            existing_anti_affinity_counts: existing,
            affinity_counts: affinity,
            anti_affinity_counts: anti_affinity,
            pod: pod.pod.clone(),
            terms: Arc::new(terms),
            namespace_labels: Arc::new(ns_labels),
        })
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let s = match self.pre_filter_state(pod, snapshot) {
            Ok(s) => s,
            Err(status) => return (None, status),
        };
        if s.existing_anti_affinity_counts.is_empty()
            && s.terms.required_affinity.is_empty()
            && s.terms.required_anti_affinity.is_empty()
        {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_STATE_KEY, s);
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

fn state_error() -> Status {
    Status::error(format!(
        "error reading {PRE_FILTER_STATE_KEY:?} from cycleState: not found"
    ))
}

impl PreFilterExtensions for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(
            state,
            PRE_FILTER_STATE_KEY,
            state_error,
            |s: &mut PreFilterState| s.update_with_pod(pod_to_add, node, 1),
        )
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(
            state,
            PRE_FILTER_STATE_KEY,
            state_error,
            |s: &mut PreFilterState| s.update_with_pod(pod_to_remove, node, -1),
        )
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return state_error();
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        static EMPTY: Labels = Labels::new();
        let labels = n.metadata.labels.as_ref().unwrap_or(&EMPTY);
        if !s.satisfies_pod_affinity(labels) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_pod_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_pods_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}
