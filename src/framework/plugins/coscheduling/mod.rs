//! Coscheduling (scheduler-plugins' gang scheduling with PodGroups).
//!
//! Pods join a group through the label `scheduling.x-k8s.io/pod-group` (the PodGroup of that name in
//! their namespace). The plugin keeps a group's pods together in the queue (QueueSort), rejects a
//! group that cannot reach `minMember` or `minResources` (PreFilter), holds assumed members at Permit
//! until `minMember` of them are assumed or bound (then allows them all), and rejects the group's
//! waiting members when one fails (PostFilter, Unreserve) so no group is left half-placed.
//!
//! Args are the union of scheduler-plugins' versions; `deniedPGExpirationTimeSeconds` (v1beta2, seed
//! 002) is accepted and ignored with a deprecation warning: `podGroupBackoffSeconds` replaced it.
//!
//! PodGroup status: upstream leaves it to its PodGroup controller; ksched runs one of its own per
//! profile, outside the scheduling cycle (`controller`): from the group's members and its first
//! Permit it writes `Pending` (fewer pods than `minMember`), `PreScheduling` (enough pods),
//! `Scheduling` (a member reached Permit; `scheduleStartTime` set), `Scheduled` (`minMember`
//! bound), `Running` (`minMember` running or succeeded), `Finished`, `Failed`, with the
//! running/succeeded/failed counts.
//!
//! A group's members are read from the scheduler's index of the pods carrying the pod-group label
//! (the `PodGroupMembers` informer, every phase): the scheduling cycle never calls the API.
//!
//! - `plugin`: the extension points (scheduler-plugins' `coscheduling.go`).
//! - `pod_group_manager`: a pod's group, its members, the cluster's room for the group
//!   (`core/core.go`).
//! - `controller`: the PodGroup status loop (`controllers/podgroup_controller.go`).

mod controller;
mod events;
mod plugin;
mod pod_group_manager;
#[cfg(test)]
mod tests;

pub(crate) use plugin::factory;

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid};
use crate::framework::registry::policy_rule;

/// scheduler-plugins' `CoschedulingArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct CoschedulingArgs {
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

/// The registration: QueueSort, PreFilter, PostFilter, Reserve, Permit; reads PodGroups and
/// their members.
pub(crate) fn registration() -> crate::framework::registry::PluginRegistration {
    use crate::framework::listers::{POD_GROUP_MEMBERS, POD_GROUPS};
    crate::framework::registry::PluginRegistration::new(
        plugin::Coscheduling::EXTENSION_POINTS,
        crate::framework::args::decode::<CoschedulingArgs>,
        factory,
    )
    .with_informers(&[&POD_GROUPS, &POD_GROUP_MEMBERS])
    // PodGroups are read, and their status written (PodGroupStatuses).
    .with_rbac_rules(vec![
        policy_rule(
            &["scheduling.x-k8s.io"],
            &["podgroups"],
            &["get", "list", "watch"],
        ),
        policy_rule(
            &["scheduling.x-k8s.io"],
            &["podgroups/status"],
            &["get", "patch", "update"],
        ),
    ])
}

#[cfg(test)]
mod args_tests {
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
