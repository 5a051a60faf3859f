//! A LeafClusterPolicy's status: what one reconcile of it observed, the problems the user must act
//! on, the conditions and counts.

use k8s_openapi::jiff::Timestamp;

use super::{Cond, READY, RECONCILING, STALLED, set_conditions, some_names};
use crate::api::LeafClusterPolicyStatus;

/// Nodes a policy leaves to an older one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyConflict {
    /// The older policy that keeps the nodes.
    pub with: String,
    /// Its taint (`key=value:effect`).
    pub with_taint: String,
    pub nodes: Vec<String>,
}

/// A node where the policy's taint cannot go: a taint with the same key and effect that the
/// operator did not add is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockedNode {
    pub node: String,
    pub taint: String,
}

/// What one reconcile of a LeafClusterPolicy observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyObservation {
    pub generation: Option<i64>,
    pub leaf_nodes: i32,
    pub tainted_nodes: i32,
    /// Matching nodes carrying the taint that the operator did not add.
    pub preexisting_taints: i32,
    pub profiles: Vec<String>,
    /// Names in spec.profiles with no SchedulerProfile.
    pub missing_profiles: Vec<String>,
    pub manage_taint: bool,
    pub taint: String,
    /// The policy cannot be applied as written: every `path: reason`.
    pub invalid: Option<String>,
    pub conflicts: Vec<PolicyConflict>,
    pub blocked: Vec<BlockedNode>,
    /// Updating some nodes failed: the message (retried).
    pub error: Option<String>,
    pub now: Timestamp,
}

pub(crate) const PROFILES_RESOLVED: &str = "ProfilesResolved";

/// The problems the user must act on, most serious first: (reason, message).
fn policy_problems(obs: &PolicyObservation) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(msg) = &obs.invalid {
        out.push((
            "InvalidSpec",
            format!("{msg} (no node is changed until the spec is fixed)"),
        ));
    }
    for c in &obs.conflicts {
        let why = if c.with_taint == obs.taint {
            format!("both policies manage taint {}", c.with_taint)
        } else {
            format!(
                "it keeps taint {} there, which this policy's profiles do not tolerate",
                c.with_taint
            )
        };
        out.push((
            "Conflict",
            format!(
                "node(s) {} are also selected by the older LeafClusterPolicy {} ({why}): {} keeps them and this policy leaves them alone; make the spec.leafNodeSelectors disjoint, or set spec.manageTaint: false on this policy if it only adds placement for its profiles to the same leaf nodes with the same taint",
                some_names(&c.nodes),
                c.with,
                c.with
            ),
        ));
    }
    if !obs.blocked.is_empty() {
        let nodes: Vec<String> = obs
            .blocked
            .iter()
            .map(|b| format!("{} ({})", b.node, b.taint))
            .collect();
        out.push((
            "ForeignTaint",
            format!(
                "node(s) {} carry a taint with the key and effect of {} but another value, which the operator did not add and does not change: remove that taint from the nodes or change spec.taint",
                some_names(&nodes),
                obs.taint
            ),
        ));
    }
    if !obs.missing_profiles.is_empty() {
        out.push((
            "ProfileNotFound",
            format!(
                "spec.profiles names {}, but no SchedulerProfile of that name exists: create it or fix the name",
                obs.missing_profiles.join(", ")
            ),
        ));
    }
    out
}

pub(crate) fn policy_status(
    previous: &LeafClusterPolicyStatus,
    obs: &PolicyObservation,
) -> LeafClusterPolicyStatus {
    let mut conds = Vec::new();
    let problems = policy_problems(obs);
    if let Some((reason, _)) = problems.first() {
        let msg = problems
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        conds.push(Cond::new(READY, false, reason, msg.clone()));
        conds.push(Cond::new(STALLED, true, reason, msg));
    } else if let Some(err) = &obs.error {
        let msg = format!("updating node taints: {err}");
        conds.push(Cond::new(READY, false, "TaintUpdateFailed", msg.clone()));
        conds.push(Cond::new(RECONCILING, true, "TaintUpdateFailed", msg));
    } else if !obs.manage_taint {
        conds.push(Cond::new(
            READY,
            true,
            "TaintNotManaged",
            format!(
                "{} leaf nodes; manageTaint is false, node taints are left alone",
                obs.leaf_nodes
            ),
        ));
    } else {
        let preexisting = if obs.preexisting_taints > 0 {
            format!(
                " ({} of them put there by someone else: never removed by the operator)",
                obs.preexisting_taints
            )
        } else {
            String::new()
        };
        conds.push(Cond::new(
            READY,
            true,
            "TaintsApplied",
            format!(
                "{} of {} leaf nodes carry {}{preexisting}",
                obs.tainted_nodes, obs.leaf_nodes, obs.taint
            ),
        ));
    }
    conds.push(if obs.missing_profiles.is_empty() {
        Cond::new(
            PROFILES_RESOLVED,
            true,
            "Resolved",
            format!("profiles: {}", obs.profiles.join(", ")),
        )
    } else {
        Cond::new(
            PROFILES_RESOLVED,
            false,
            "ProfileNotFound",
            format!(
                "no SchedulerProfile named {}",
                obs.missing_profiles.join(", ")
            ),
        )
    });
    LeafClusterPolicyStatus {
        observed_generation: obs.generation,
        conditions: set_conditions(&previous.conditions, conds, obs.generation, obs.now),
        leaf_nodes: Some(obs.leaf_nodes),
        tainted_nodes: Some(obs.tainted_nodes),
        preexisting_taints: Some(obs.preexisting_taints),
        conflicting_nodes: Some(
            i32::try_from(obs.conflicts.iter().map(|c| c.nodes.len()).sum::<usize>())
                .unwrap_or(i32::MAX),
        ),
        profiles: obs.profiles.clone(),
        missing_profiles: obs.missing_profiles.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::status::condition;
    use crate::operator::status_samples::now;

    #[test]
    fn policy_status_counts_and_conditions() {
        let o = PolicyObservation {
            generation: Some(2),
            leaf_nodes: 3,
            tainted_nodes: 3,
            preexisting_taints: 1,
            profiles: vec!["a".into()],
            missing_profiles: vec![],
            manage_taint: true,
            taint: "kosmos.io/node=true:NoSchedule".into(),
            invalid: None,
            conflicts: vec![],
            blocked: vec![],
            error: None,
            now: now(),
        };
        let s = policy_status(&LeafClusterPolicyStatus::default(), &o);
        assert_eq!(s.leaf_nodes, Some(3));
        assert_eq!(s.tainted_nodes, Some(3));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(
            condition(&s.conditions, READY).map(|c| c.status.as_str()),
            Some("True")
        );
        assert!(condition(&s.conditions, STALLED).is_none());
        assert_eq!(s.preexisting_taints, Some(1));
        assert!(
            condition(&s.conditions, READY)
                .is_some_and(|c| c.message.contains("1 of them put there by someone else"))
        );
        let bad = PolicyObservation {
            invalid: Some("spec.leafNodeSelector: bad operator".into()),
            ..o.clone()
        };
        let s = policy_status(&s, &bad);
        assert_eq!(
            condition(&s.conditions, STALLED).map(|c| c.status.as_str()),
            Some("True")
        );
        assert_eq!(
            condition(&s.conditions, READY).map(|c| c.status.as_str()),
            Some("False")
        );

        // The user must act: conflict, a foreign taint in the way, a missing profile.
        let reason_of = |s: &LeafClusterPolicyStatus, t: &str| {
            condition(&s.conditions, t)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let conflict = PolicyObservation {
            conflicts: vec![PolicyConflict {
                with: "older".into(),
                with_taint: "other=x:NoSchedule".into(),
                nodes: (0..7).map(|i| format!("n{i}")).collect(),
            }],
            ..o.clone()
        };
        let s = policy_status(&LeafClusterPolicyStatus::default(), &conflict);
        let (status, reason, message) = reason_of(&s, STALLED).expect("Stalled");
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Conflict"));
        assert!(
            message.contains("older LeafClusterPolicy older")
                && message.contains("n0, n1, n2, n3, n4 and 2 more")
                && message.contains("other=x:NoSchedule"),
            "{message}"
        );
        assert_eq!(s.conflicting_nodes, Some(7));
        let blocked = PolicyObservation {
            blocked: vec![BlockedNode {
                node: "leaf-1".into(),
                taint: "kosmos.io/node=false:NoSchedule".into(),
            }],
            ..o.clone()
        };
        let s = policy_status(&LeafClusterPolicyStatus::default(), &blocked);
        assert_eq!(
            reason_of(&s, READY).map(|r| r.1).as_deref(),
            Some("ForeignTaint")
        );
        let missing = PolicyObservation {
            missing_profiles: vec!["nope".into()],
            ..o
        };
        let s = policy_status(&LeafClusterPolicyStatus::default(), &missing);
        assert_eq!(
            reason_of(&s, READY).map(|r| r.1).as_deref(),
            Some("ProfileNotFound")
        );
        let (status, reason, message) = reason_of(&s, PROFILES_RESOLVED).expect("resolved");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ProfileNotFound")
        );
        assert!(message.contains("nope"), "{message}");
        assert_eq!(s.missing_profiles, vec!["nope"]);
    }
}
