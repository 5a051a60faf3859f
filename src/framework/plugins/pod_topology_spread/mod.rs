//! PodTopologySpread — built in the issue "affinity, topology spread, volumes and preemption"; for
//! now its args.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, duplicate, forbidden, invalid, not_supported, required};

pub const SYSTEM_DEFAULTING: &str = "System";
pub const LIST_DEFAULTING: &str = "List";

/// Upstream's `PodTopologySpreadArgs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PodTopologySpreadArgs {
    pub default_constraints: Vec<TopologySpreadConstraint>,
    pub defaulting_type: String,
}

impl PluginArgs for PodTopologySpreadArgs {
    const KIND: &'static str = "PodTopologySpreadArgs";

    fn set_defaults(&mut self) {
        if self.defaulting_type.is_empty() {
            self.defaulting_type = SYSTEM_DEFAULTING.to_string();
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let t = self.defaulting_type.as_str();
        if t != SYSTEM_DEFAULTING && t != LIST_DEFAULTING {
            errs.push(not_supported(
                "defaultingType",
                t,
                &[SYSTEM_DEFAULTING, LIST_DEFAULTING],
            ));
        } else if t == SYSTEM_DEFAULTING && !self.default_constraints.is_empty() {
            errs.push(invalid(
                "defaultingType",
                format!("\"{t}\""),
                "when .defaultConstraints are not empty",
            ));
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let p = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                errs.push(invalid(
                    format!("{p}.maxSkew"),
                    c.max_skew,
                    "not in valid range (0, inf)",
                ));
            }
            if c.topology_key.is_empty() {
                errs.push(required(format!("{p}.topologyKey"), "can not be empty"));
            }
            let w = c.when_unsatisfiable.as_str();
            if w != "DoNotSchedule" && w != "ScheduleAnyway" {
                errs.push(not_supported(
                    format!("{p}.whenUnsatisfiable"),
                    w,
                    &["DoNotSchedule", "ScheduleAnyway"],
                ));
            }
            if c.label_selector.is_some() {
                errs.push(forbidden(
                    format!("{p}.labelSelector"),
                    "constraint must not define a selector, as they deduced for each pod",
                ));
            }
            let repeated = self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                errs.push(duplicate(
                    format!("defaultConstraints[{i}]"),
                    format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable),
                ));
            }
        }
        errs
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
            decode::<PodTopologySpreadArgs>(None),
            Ok(json!({"defaultConstraints": [], "defaultingType": "System"}))
        );
        let c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"});
        assert!(
            decode::<PodTopologySpreadArgs>(Some(
                &json!({"defaultingType": "List", "defaultConstraints": [c]})
            ))
            .is_ok()
        );
        let e =
            decode::<PodTopologySpreadArgs>(Some(&json!({"defaultConstraints": [c]}))).unwrap_err();
        assert_eq!(e[0].path, "defaultingType");
        let e = decode::<PodTopologySpreadArgs>(Some(
            &json!({"defaultingType": "List", "defaultConstraints": [c, c]}),
        ))
        .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "defaultConstraints[1]: Duplicate value: {zone, ScheduleAnyway}"
        );
        let bad = json!({"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Never"});
        let e = decode::<PodTopologySpreadArgs>(Some(
            &json!({"defaultingType": "List", "defaultConstraints": [bad]}),
        ))
        .unwrap_err();
        assert_eq!(e.len(), 3);
        assert!(
            decode::<PodTopologySpreadArgs>(Some(&json!({"defaultingType": "Other"}))).is_err()
        );
    }
}
