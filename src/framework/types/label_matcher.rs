//! A label selector as the plugins match with it (upstream's `labels.Selector`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Expression, Selector, SelectorExt};

/// A label selector as upstream's `metav1.LabelSelectorAsSelector` builds it: a missing selector
/// matches nothing, an empty one everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelMatcher {
    Nothing,
    Selector(Selector),
}

impl LabelMatcher {
    /// Converts an API label selector; an invalid operator is an error (the API server rejects
    /// such objects, so it only happens with hand-made data).
    pub fn from_label_selector(sel: Option<&LabelSelector>) -> Result<LabelMatcher, String> {
        match sel {
            None => Ok(LabelMatcher::Nothing),
            Some(s) => Selector::try_from(s.clone())
                .map(LabelMatcher::Selector)
                .map_err(|e| e.to_string()),
        }
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        match self {
            LabelMatcher::Nothing => false,
            LabelMatcher::Selector(s) => s.matches(labels.unwrap_or(&EMPTY)),
        }
    }

    /// Upstream's `Selector.Empty()`: a selector with no requirements (not `Nothing`).
    pub fn is_empty(&self) -> bool {
        matches!(self, LabelMatcher::Selector(s) if s.selects_all())
    }

    /// Adds requirements (a no-op on `Nothing`, as upstream's `nothingSelector.Add`).
    pub fn extend(&mut self, exprs: impl IntoIterator<Item = Expression>) {
        if let LabelMatcher::Selector(s) = self {
            s.extend(exprs);
        }
    }
}
