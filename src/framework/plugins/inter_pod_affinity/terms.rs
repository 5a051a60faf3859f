//! The incoming pod's terms with namespace selectors resolved, and topology-pair counts.

use std::collections::BTreeMap;

use foldhash::HashMap;
use k8s_openapi::api::core::v1::Node;

use crate::framework::listers::Listers;
use crate::framework::listers::NAMESPACES;
use crate::framework::types::affinity_terms::{AffinityTerm, PodTerms};
use crate::framework::types::{LabelMatcher, PodView};

pub(super) type Labels = BTreeMap<String, String>;

impl AffinityTerm {
    /// Upstream's `mergeAffinityTermNamespacesIfNotEmpty`: the incoming pod's namespace selector
    /// is resolved into names once, so matching other pods needs no namespace lookups.
    pub(super) fn merge_namespace_selector(&mut self, listers: &Listers) {
        if let LabelMatcher::Selector(s) = &self.namespace_selector
            && !s.selects_all()
        {
            for ns in listers.store(&NAMESPACES).list() {
                if self.namespace_selector.matches(ns.metadata.labels.as_ref()) {
                    self.namespaces
                        .insert(ns.metadata.name.clone().unwrap_or_default());
                }
            }
            self.namespace_selector = LabelMatcher::Nothing;
        }
    }
}

impl PodTerms {
    pub(super) fn merge_namespace_selectors(&mut self, listers: &Listers) {
        for t in self
            .required_affinity
            .iter_mut()
            .chain(self.required_anti_affinity.iter_mut())
        {
            t.merge_namespace_selector(listers);
        }
        for t in self
            .preferred_affinity
            .iter_mut()
            .chain(self.preferred_anti_affinity.iter_mut())
        {
            t.term.merge_namespace_selector(listers);
        }
    }
}

/// True iff `pod` matches every term (and there is at least one). The terms are the incoming
/// pod's, with namespace selectors merged, so no namespace labels are needed.
pub(super) fn pod_matches_all_affinity_terms(terms: &[AffinityTerm], pod: &impl PodView) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, None))
}

/// The labels of the pod's namespace (empty when the namespace is unknown).
pub(super) fn namespace_labels(listers: &Listers, namespace: &str) -> Labels {
    listers
        .store(&NAMESPACES)
        .get("", namespace)
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default()
}

/// Topology key -> value -> number of matching terms (upstream's `topologyToMatchedTermCount`),
/// nested so lookups borrow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `value` to the node's pair for `key` (nothing when the node lacks the label); a pair
    /// down to zero is removed.
    pub(super) fn update(&mut self, node: &Node, key: &str, value: i64) {
        let Some(v) = node.metadata.labels.as_ref().and_then(|l| l.get(key)) else {
            return;
        };
        // Strings are allocated only for a new pair: PreFilter updates the same few pairs once
        // per matching existing pod.
        let Some(values) = self.0.get_mut(key) else {
            if value != 0 {
                self.0
                    .insert(key.to_string(), [(v.clone(), value)].into_iter().collect());
            }
            return;
        };
        match values.get_mut(v) {
            Some(count) => {
                *count += value;
                if *count == 0 {
                    values.remove(v);
                    if values.is_empty() {
                        self.0.remove(key);
                    }
                }
            }
            None if value != 0 => {
                values.insert(v.clone(), value);
            }
            None => {}
        }
    }

    /// For each of `terms` matching `pod` (with `ns_labels` for namespace selectors).
    pub(super) fn update_with_anti_affinity_terms(
        &mut self,
        terms: &[AffinityTerm],
        pod: &impl PodView,
        ns_labels: Option<&Labels>,
        node: &Node,
        value: i64,
    ) {
        for t in terms {
            if t.matches(pod, ns_labels) {
                self.update(node, &t.topology_key, value);
            }
        }
    }

    /// For every term, when `pod` matches all of them.
    pub(super) fn update_with_affinity_terms(
        &mut self,
        terms: &[AffinityTerm],
        pod: &impl PodView,
        node: &Node,
        value: i64,
    ) {
        if pod_matches_all_affinity_terms(terms, pod) {
            for t in terms {
                self.update(node, &t.topology_key, value);
            }
        }
    }

    pub(super) fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any of the node's (label, value) pairs has a positive count.
    pub(super) fn any_positive_for(&self, labels: &Labels) -> bool {
        self.0.iter().any(|(k, values)| {
            labels
                .get(k)
                .and_then(|v| values.get(v))
                .is_some_and(|c| *c > 0)
        })
    }
}
