//! Processed pod affinity terms (upstream's `fwk.AffinityTerm`) and topology-pair counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Affinity, Node, Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use kube::core::Expression;

use crate::framework::listers::Listers;
use crate::framework::listers::NAMESPACES;
use crate::framework::plugins::helper::LabelMatcher;
use crate::framework::types::{AssignedPod, PodView};

pub(super) type Labels = BTreeMap<String, String>;

/// A pod affinity term with its namespaces resolved and its selectors parsed.
#[derive(Debug, Clone)]
pub(super) struct AffinityTerm {
    pub namespaces: BTreeSet<String>,
    pub selector: LabelMatcher,
    pub topology_key: String,
    pub namespace_selector: LabelMatcher,
}

impl AffinityTerm {
    /// Builds the term `owner` declares: namespaces default to the owner's own when neither
    /// `namespaces` nor `namespaceSelector` is set; `matchLabelKeys`/`mismatchLabelKeys` add
    /// `key in (v)`/`key notin (v)` for the owner's label values (as the API server merges them at
    /// admission; merging again is idempotent).
    pub(super) fn new(
        owner: &impl PodView,
        term: &PodAffinityTerm,
    ) -> Result<AffinityTerm, String> {
        let mut selector = LabelMatcher::from_label_selector(term.label_selector.as_ref())?;
        let owner_labels = owner.labels();
        let value_of = |k: &String| owner_labels.and_then(|l| l.get(k)).cloned();
        if term.label_selector.is_some() {
            for k in term.match_label_keys.iter().flatten() {
                if let Some(v) = value_of(k) {
                    selector.extend([Expression::In(k.clone(), [v].into())]);
                }
            }
            for k in term.mismatch_label_keys.iter().flatten() {
                if let Some(v) = value_of(k) {
                    selector.extend([Expression::NotIn(k.clone(), [v].into())]);
                }
            }
        }
        let namespace_selector =
            LabelMatcher::from_label_selector(term.namespace_selector.as_ref())?;
        let listed = term.namespaces.as_deref().unwrap_or(&[]);
        let namespaces = if listed.is_empty() && term.namespace_selector.is_none() {
            [owner.namespace().to_string()].into()
        } else {
            listed.iter().cloned().collect()
        };
        Ok(AffinityTerm {
            namespaces,
            selector,
            topology_key: term.topology_key.clone(),
            namespace_selector,
        })
    }

    /// Whether `pod` is in the term's namespaces (or its namespace's labels `ns_labels` match the
    /// namespace selector) and matches the label selector.
    pub(super) fn matches(&self, pod: &impl PodView, ns_labels: Option<&Labels>) -> bool {
        let ns = pod.namespace();
        if self.namespaces.contains(ns) || self.namespace_selector.matches(ns_labels) {
            return self.selector.matches(pod.labels());
        }
        false
    }

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

/// A processed preferred term.
#[derive(Debug, Clone)]
pub(super) struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// The four kinds of terms a pod declares.
#[derive(Debug, Clone, Default)]
pub(super) struct PodTerms {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
}

fn required(
    pod: &impl PodView,
    terms: Option<&Vec<PodAffinityTerm>>,
) -> Result<Vec<AffinityTerm>, String> {
    terms
        .into_iter()
        .flatten()
        .map(|t| AffinityTerm::new(pod, t))
        .collect()
}

fn preferred(
    pod: &impl PodView,
    terms: Option<&Vec<WeightedPodAffinityTerm>>,
) -> Result<Vec<WeightedAffinityTerm>, String> {
    terms
        .into_iter()
        .flatten()
        .map(|t| {
            Ok(WeightedAffinityTerm {
                term: AffinityTerm::new(pod, &t.pod_affinity_term)?,
                weight: t.weight,
            })
        })
        .collect()
}

impl PodTerms {
    /// All of the pod's terms; an unparseable selector is an error (upstream's `NewPodInfo`).
    pub(super) fn of(pod: &Pod) -> Result<PodTerms, String> {
        PodTerms::declared(pod, pod.spec.as_ref().and_then(|s| s.affinity.as_ref()))
    }

    /// The terms of `affinity`, declared by `pod`.
    pub(super) fn declared(
        pod: &impl PodView,
        affinity: Option<&Affinity>,
    ) -> Result<PodTerms, String> {
        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        Ok(PodTerms {
            required_affinity: required(
                pod,
                pa.and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
            )?,
            required_anti_affinity: required(
                pod,
                paa.and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
            )?,
            preferred_affinity: preferred(
                pod,
                pa.and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
            )?,
            preferred_anti_affinity: preferred(
                pod,
                paa.and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
            )?,
        })
    }

    /// An existing pod's terms; a pod the API server accepted always parses, so a failure (hand-made
    /// data) is logged and the pod counts as having no terms.
    pub(super) fn of_existing(pod: &AssignedPod) -> PodTerms {
        PodTerms::declared(pod, pod.affinity()).unwrap_or_else(|e| {
            tracing::warn!(
                pod = pod.name(),
                error = %e,
                "ignoring unparseable pod affinity terms"
            );
            PodTerms::default()
        })
    }

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
        let values = self.0.entry(key.to_string()).or_default();
        let e = values.entry(v.clone()).or_insert(0);
        *e += value;
        if *e == 0 {
            values.remove(v);
            if values.is_empty() {
                self.0.remove(key);
            }
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
