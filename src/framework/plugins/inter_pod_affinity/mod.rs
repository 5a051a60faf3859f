//! InterPodAffinity: required pod affinity and anti-affinity (the incoming pod's and the existing
//! pods' anti-affinity against it) filter nodes; preferred terms (both ways) and existing pods'
//! required affinity (`hardPodAffinityWeight`) score them. Upstream's
//! `pkg/scheduler/framework/plugins/interpodaffinity`.

mod events;
mod filtering;
mod scoring;
mod terms;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::names;
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid};
use crate::framework::interface::{SignFragment, SignPlugin, Status, signer_names};
use crate::framework::listers::{Listers, NAMESPACES};
use crate::framework::plugins::helper::{impl_plugin, namespace_rules, registration_with_listers};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::PodInfo;

/// Upstream's `InterPodAffinityArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct InterPodAffinityArgs {
    pub hard_pod_affinity_weight: i32,
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl PluginArgs for InterPodAffinityArgs {
    const KIND: &'static str = "InterPodAffinityArgs";

    fn validate(&self) -> Vec<FieldError> {
        let w = self.hard_pod_affinity_weight;
        if !(0..=100).contains(&w) {
            return vec![invalid(
                "hardPodAffinityWeight",
                w,
                "not in valid range [0-100]",
            )];
        }
        Vec::new()
    }
}

/// The InterPodAffinity plugin.
pub(crate) struct InterPodAffinity {
    args: InterPodAffinityArgs,
    listers: Arc<Listers>,
}

impl InterPodAffinity {
    pub(crate) fn new(args: InterPodAffinityArgs, listers: Arc<Listers>) -> InterPodAffinity {
        InterPodAffinity { args, listers }
    }
}

impl_plugin!(
    InterPodAffinity,
    names::INTER_POD_AFFINITY,
    [PreFilter, Filter, PreScore, Score],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for InterPodAffinity {
    /// A pod with affinity terms of its own is not signable: where the previous pod went changes
    /// its results on other nodes. Otherwise existing pods' terms may select it by its labels
    /// (unless the profile ignores their preferred terms), so they are part of its signature.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let affinity = pod.affinity();
        let has_terms =
            affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some());
        if has_terms {
            return Err(Status::unschedulable(
                "pods with InterPodAffinity are not signable",
            ));
        }
        if self.args.ignore_preferred_terms_of_existing_pods {
            return Ok(Vec::new());
        }
        Ok(vec![SignFragment::json(
            signer_names::LABELS,
            &pod.labels(),
        )?])
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_with_listers(
        InterPodAffinity::EXTENSION_POINTS,
        &[&NAMESPACES],
        |args, listers| Ok(InterPodAffinity::new(args, listers)),
    )
    .with_rbac_rules(namespace_rules())
}
