//! Status with kstatus semantics, computed from what the reconciler observed (pure: values in,
//! status out). `Ready` is always present; `Reconciling` and `Stalled` only while true; every
//! condition carries the generation it describes, and `lastTransitionTime` changes only when its
//! status does.
//!
//! - this module: the condition types and [`set_conditions`], which every status goes through.
//! - `observation`: what a reconcile of a SchedulerProfile observed (its Deployment, Lease, ...).
//! - `profile`: a SchedulerProfile's status from that observation.
//! - `policy`: a LeafClusterPolicy's observation and status.

mod observation;
mod policy;
mod profile;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub(crate) use observation::{
    ApplyError, ApplyFix, ConfigOutcome, DeploymentState, LeaseState, OPERATOR_RULES_FIX,
    ProfileObservation,
};
pub(crate) use policy::{BlockedNode, PolicyConflict, PolicyObservation, policy_status};
pub(crate) use profile::{
    objects_in_use_message, operator_stopped, profile_status, says_uninstalled, uninstalled,
};

pub(crate) const READY: &str = "Ready";
pub(crate) const RECONCILING: &str = "Reconciling";
pub(crate) const STALLED: &str = "Stalled";
pub(crate) const CONFIG_VALID: &str = "ConfigValid";
pub(crate) const LEADER_ELECTED: &str = "LeaderElected";
pub(crate) const LEAF_POLICIES_VALID: &str = "LeafPoliciesValid";

/// A condition's status, reason and message (type and times are filled in by [`set_conditions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cond {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Cond {
    pub(crate) fn new(
        type_: &'static str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Cond {
            type_,
            status,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// The conditions `wanted`, keeping `lastTransitionTime` of those whose status did not change.
pub(crate) fn set_conditions(
    previous: &[Condition],
    wanted: Vec<Cond>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    wanted
        .into_iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: c.type_.to_string(),
                status: status.to_string(),
                reason: c.reason,
                message: c.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// Find a condition by type.
pub(crate) fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// At most a few names, then how many more.
fn some_names(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut out = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}
