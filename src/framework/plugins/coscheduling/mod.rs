//! Coscheduling (scheduler-plugins, gang scheduling with PodGroups) — built in a later issue; for
//! now its args. The union of the fields scheduler-plugins' versions define (`v1beta2` has
//! `deniedPGExpirationTimeSeconds`, `kubeMaster`, `kubeConfigPath`; later ones
//! `podGroupBackoffSeconds`), so every seed configuration decodes.

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid};

/// scheduler-plugins' `CoschedulingArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CoschedulingArgs {
    pub permit_waiting_time_seconds: Option<i64>,
    #[serde(
        rename = "deniedPGExpirationTimeSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub denied_pg_expiration_time_seconds: Option<i64>,
    pub pod_group_backoff_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_master: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_config_path: Option<String>,
}

impl PluginArgs for CoschedulingArgs {
    const KIND: &'static str = "CoschedulingArgs";

    fn set_defaults(&mut self) {
        self.permit_waiting_time_seconds.get_or_insert(60);
        self.pod_group_backoff_seconds.get_or_insert(0);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (path, v) in [
            ("permitWaitingTimeSeconds", self.permit_waiting_time_seconds),
            (
                "deniedPGExpirationTimeSeconds",
                self.denied_pg_expiration_time_seconds,
            ),
            ("podGroupBackoffSeconds", self.pod_group_backoff_seconds),
        ] {
            if let Some(v) = v
                && v < 0
            {
                errs.push(invalid(path, v, "must be greater than or equal to 0"));
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
    fn seed_args_decode() {
        assert_eq!(
            decode::<CoschedulingArgs>(Some(
                &json!({"permitWaitingTimeSeconds": 10, "deniedPGExpirationTimeSeconds": 3})
            )),
            Ok(
                json!({"permitWaitingTimeSeconds": 10, "deniedPGExpirationTimeSeconds": 3, "podGroupBackoffSeconds": 0})
            )
        );
        assert_eq!(
            decode::<CoschedulingArgs>(None),
            Ok(json!({"permitWaitingTimeSeconds": 60, "podGroupBackoffSeconds": 0}))
        );
        assert!(
            decode::<CoschedulingArgs>(Some(&json!({"permitWaitingTimeSeconds": -1}))).is_err()
        );
        assert!(decode::<CoschedulingArgs>(Some(&json!({"permitWaitingTime": 1}))).is_err());
    }
}
