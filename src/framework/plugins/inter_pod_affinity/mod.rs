//! InterPodAffinity — built in the issue "affinity, topology spread, volumes and preemption"; for
//! now its args, so configurations naming it validate strictly.

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid};

/// Upstream's `InterPodAffinityArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct InterPodAffinityArgs {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use serde_json::json;

    #[test]
    fn args() {
        assert_eq!(
            decode::<InterPodAffinityArgs>(None),
            Ok(json!({"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": false}))
        );
        assert_eq!(
            decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeight": 0}))),
            Ok(json!({"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": false}))
        );
        let e = decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeight": 101})))
            .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]"
        );
        assert!(
            decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeigth": 1}))).is_err()
        );
    }
}
