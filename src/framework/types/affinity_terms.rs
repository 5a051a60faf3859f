//! A pod's affinity terms processed as upstream's `fwk.AffinityTerm`: namespaces resolved,
//! selectors parsed. An assigned pod keeps its own ([`AssignedPod::affinity_terms`]) so a cycle
//! does not parse every existing pod's terms again.
//!
//! [`AssignedPod::affinity_terms`]: super::AssignedPod::affinity_terms

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Affinity, Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use kube::core::Expression;

use super::{LabelMatcher, PodView};

/// A pod affinity term with its namespaces resolved and its selectors parsed.
#[derive(Debug, Clone)]
pub struct AffinityTerm {
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
    pub fn new(owner: &impl PodView, term: &PodAffinityTerm) -> Result<AffinityTerm, String> {
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
    pub fn matches(
        &self,
        pod: &impl PodView,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let ns = pod.namespace();
        if self.namespaces.contains(ns) || self.namespace_selector.matches(ns_labels) {
            return self.selector.matches(pod.labels());
        }
        false
    }
}

/// A processed preferred term.
#[derive(Debug, Clone)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// The four kinds of terms a pod declares.
#[derive(Debug, Clone, Default)]
pub struct PodTerms {
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
    pub fn of(pod: &Pod) -> Result<PodTerms, String> {
        PodTerms::declared(pod, pod.spec.as_ref().and_then(|s| s.affinity.as_ref()))
    }

    /// The terms of `affinity`, declared by `pod`.
    pub fn declared(pod: &impl PodView, affinity: Option<&Affinity>) -> Result<PodTerms, String> {
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
}
