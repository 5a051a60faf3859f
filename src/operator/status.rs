//! Status with kstatus semantics, computed from what the reconciler observed (pure: values in,
//! status out). `Ready` is always present; `Reconciling` and `Stalled` only while true; every
//! condition carries the generation it describes, and `lastTransitionTime` changes only when its
//! status does.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::scheduler_profile::ProfileMode;
use crate::api::{LeafClusterPolicyStatus, SchedulerProfileStatus};

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
pub const CONFIG_VALID: &str = "ConfigValid";
pub const LEADER_ELECTED: &str = "LeaderElected";

/// A condition's status, reason and message (type and times are filled in by [`set_conditions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Cond {
    pub fn new(
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
pub fn set_conditions(
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
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// What the rendered configuration came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOutcome {
    Valid {
        hash: String,
        warnings: Vec<String>,
        leaf_policies: Vec<String>,
    },
    /// `message` lists every `path: reason`.
    Invalid { message: String },
}

/// The scheduler Deployment as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeploymentState {
    pub generation: i64,
    pub observed_generation: i64,
    pub replicas: i32,
    pub updated_replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
}

impl DeploymentState {
    pub fn from_deployment(d: &Deployment) -> Self {
        let s = d.status.clone().unwrap_or_default();
        DeploymentState {
            generation: d.metadata.generation.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: s.replicas.unwrap_or(0),
            updated_replicas: s.updated_replicas.unwrap_or(0),
            ready_replicas: s.ready_replicas.unwrap_or(0),
            available_replicas: s.available_replicas.unwrap_or(0),
        }
    }
}

/// The profile's Lease as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseState {
    pub holder: Option<String>,
    pub renew_time: Option<Timestamp>,
    pub lease_duration_seconds: Option<i32>,
}

impl LeaseState {
    pub fn from_lease(l: &Lease) -> Self {
        let spec = l.spec.clone().unwrap_or_default();
        LeaseState {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renew_time: spec.renew_time.map(|t| t.0),
            lease_duration_seconds: spec.lease_duration_seconds,
        }
    }

    /// The holder, when it renewed within the lease duration (`fallback_seconds` when the Lease does
    /// not say).
    pub fn fresh_holder(&self, now: Timestamp, fallback_seconds: i64) -> Option<&str> {
        let holder = self.holder.as_deref()?;
        let renewed = self.renew_time?;
        let duration = self
            .lease_duration_seconds
            .map(i64::from)
            .unwrap_or(fallback_seconds);
        let expires = renewed
            .checked_add(SignedDuration::from_secs(duration))
            .ok()?;
        (expires > now).then_some(holder)
    }
}

/// Everything one reconcile of a profile observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileObservation {
    pub generation: Option<i64>,
    pub mode: ProfileMode,
    pub suspend: bool,
    /// `spec.replicas`.
    pub replicas: i32,
    pub config: ConfigOutcome,
    /// Applying the rendered objects failed (API error): the message.
    pub apply_error: Option<String>,
    /// Deployment mode: the Deployment, when it exists.
    pub deployment: Option<DeploymentState>,
    /// Embedded mode: whether the in-process scheduler runs (`Err` says why not).
    pub embedded: Option<Result<(), String>>,
    pub lease: Option<LeaseState>,
    /// `spec.leaderElection.leaseDuration` in seconds (used when the Lease has no duration).
    pub lease_duration_seconds: i64,
    pub lease_name: String,
    pub pending_pods: i32,
    pub now: Timestamp,
}

/// The status a profile should have after a reconcile.
pub fn profile_status(
    previous: &SchedulerProfileStatus,
    obs: &ProfileObservation,
) -> SchedulerProfileStatus {
    let mut status = SchedulerProfileStatus {
        observed_generation: obs.generation,
        pending_pods: Some(obs.pending_pods),
        ..SchedulerProfileStatus::default()
    };
    let mut conds = Vec::new();

    // What runs: replica counts.
    let desired = if obs.suspend { 0 } else { obs.replicas };
    let (replicas, ready_replicas) = match obs.mode {
        ProfileMode::Deployment => obs
            .deployment
            .as_ref()
            .map_or((0, 0), |d| (d.replicas, d.ready_replicas)),
        ProfileMode::Embedded => match &obs.embedded {
            Some(Ok(())) if !obs.suspend => (1, 1),
            Some(Err(_)) if !obs.suspend => (1, 0),
            _ => (0, 0),
        },
    };
    let desired_shown = match obs.mode {
        ProfileMode::Deployment => desired,
        ProfileMode::Embedded => i32::from(!obs.suspend),
    };
    status.replicas = Some(replicas);
    status.ready_replicas = Some(ready_replicas);
    status.ready = Some(format!("{ready_replicas}/{desired_shown}"));

    // Leader.
    let leader = obs
        .lease
        .as_ref()
        .and_then(|l| l.fresh_holder(obs.now, obs.lease_duration_seconds));
    status.leader = leader.map(String::from);
    let leader_cond = match (leader, &obs.lease) {
        (Some(h), _) => Cond::new(
            LEADER_ELECTED,
            true,
            "LeaderElected",
            format!("{h} holds Lease {}", obs.lease_name),
        ),
        _ if obs.suspend => Cond::new(
            LEADER_ELECTED,
            false,
            "Suspended",
            "suspended: no scheduler runs",
        ),
        (None, Some(l)) if l.holder.is_some() => Cond::new(
            LEADER_ELECTED,
            false,
            "LeaseExpired",
            format!(
                "Lease {} held by {} was not renewed within its duration",
                obs.lease_name,
                l.holder.as_deref().unwrap_or_default()
            ),
        ),
        _ => Cond::new(
            LEADER_ELECTED,
            false,
            "NoLeader",
            format!("no scheduler holds Lease {} yet", obs.lease_name),
        ),
    };

    match &obs.config {
        ConfigOutcome::Invalid { message } => {
            // The last valid configuration keeps running: keep its hash and policies.
            status.config_hash = previous.config_hash.clone();
            status.leaf_policies = previous.leaf_policies.clone();
            let msg = format!("invalid spec, the running scheduler is left unchanged: {message}");
            conds.push(Cond::new(READY, false, "InvalidConfiguration", msg.clone()));
            conds.push(Cond::new(STALLED, true, "InvalidConfiguration", msg));
            conds.push(Cond::new(
                CONFIG_VALID,
                false,
                "InvalidConfiguration",
                message.clone(),
            ));
        }
        ConfigOutcome::Valid {
            hash,
            warnings,
            leaf_policies,
        } => {
            status.config_hash = Some(hash.clone());
            status.leaf_policies = leaf_policies.clone();
            let valid_msg = if warnings.is_empty() {
                "the configuration is valid".to_string()
            } else {
                format!(
                    "the configuration is valid; warnings: {}",
                    warnings.join("; ")
                )
            };
            let (ready, reconciling) = readiness(obs, desired);
            conds.push(ready);
            if let Some(r) = reconciling {
                conds.push(r);
            }
            conds.push(Cond::new(CONFIG_VALID, true, "Valid", valid_msg));
        }
    }
    conds.push(leader_cond);
    status.conditions = set_conditions(&previous.conditions, conds, obs.generation, obs.now);
    status
}

/// `Ready` and, while the profile is not there yet, `Reconciling`.
fn readiness(obs: &ProfileObservation, desired: i32) -> (Cond, Option<Cond>) {
    let progressing = |reason: &str, message: String| {
        (
            Cond::new(READY, false, reason, message.clone()),
            Some(Cond::new(RECONCILING, true, reason, message)),
        )
    };
    if let Some(err) = &obs.apply_error {
        return progressing(
            "ApplyFailed",
            format!("applying the rendered objects: {err}"),
        );
    }
    match obs.mode {
        ProfileMode::Embedded => match (&obs.embedded, obs.suspend) {
            (_, true) => (
                Cond::new(
                    READY,
                    true,
                    "Suspended",
                    "suspended: the embedded scheduler is stopped, the configuration is kept",
                ),
                None,
            ),
            (Some(Ok(())), false) => (
                Cond::new(
                    READY,
                    true,
                    "Running",
                    "the scheduler runs inside the operator process",
                ),
                None,
            ),
            (Some(Err(e)), false) => progressing(
                "EmbeddedFailed",
                format!("starting the embedded scheduler: {e}"),
            ),
            (None, false) => progressing("Starting", "starting the embedded scheduler".into()),
        },
        ProfileMode::Deployment => {
            let Some(d) = &obs.deployment else {
                return progressing("RollingOut", "waiting for the Deployment".into());
            };
            let observed = d.observed_generation >= d.generation;
            let done = observed
                && d.updated_replicas >= desired
                && d.ready_replicas >= desired
                && d.available_replicas >= desired
                && d.replicas == desired;
            if !done {
                return progressing(
                    "RollingOut",
                    format!(
                        "{} of {desired} scheduler replicas updated and ready ({} running)",
                        d.ready_replicas.min(d.updated_replicas),
                        d.replicas
                    ),
                );
            }
            if obs.suspend {
                (
                    Cond::new(
                        READY,
                        true,
                        "Suspended",
                        "suspended: scaled to 0, the configuration is kept",
                    ),
                    None,
                )
            } else {
                (
                    Cond::new(
                        READY,
                        true,
                        "Running",
                        format!("{desired} of {desired} scheduler replicas ready"),
                    ),
                    None,
                )
            }
        }
    }
}

/// What one reconcile of a LeafClusterPolicy observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyObservation {
    pub generation: Option<i64>,
    pub leaf_nodes: i32,
    pub tainted_nodes: i32,
    pub profiles: Vec<String>,
    pub manage_taint: bool,
    pub taint: String,
    /// The policy cannot be applied as written (a bad selector): the message.
    pub invalid: Option<String>,
    /// Updating some nodes failed: the message (retried).
    pub error: Option<String>,
    pub now: Timestamp,
}

pub fn policy_status(
    previous: &LeafClusterPolicyStatus,
    obs: &PolicyObservation,
) -> LeafClusterPolicyStatus {
    let mut conds = Vec::new();
    if let Some(msg) = &obs.invalid {
        conds.push(Cond::new(READY, false, "InvalidSpec", msg.clone()));
        conds.push(Cond::new(STALLED, true, "InvalidSpec", msg.clone()));
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
        conds.push(Cond::new(
            READY,
            true,
            "TaintsApplied",
            format!(
                "{} of {} leaf nodes carry {}",
                obs.tainted_nodes, obs.leaf_nodes, obs.taint
            ),
        ));
    }
    LeafClusterPolicyStatus {
        observed_generation: obs.generation,
        conditions: set_conditions(&previous.conditions, conds, obs.generation, obs.now),
        leaf_nodes: Some(obs.leaf_nodes),
        tainted_nodes: Some(obs.tainted_nodes),
        profiles: obs.profiles.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn obs() -> ProfileObservation {
        ProfileObservation {
            generation: Some(3),
            mode: ProfileMode::Deployment,
            suspend: false,
            replicas: 1,
            config: ConfigOutcome::Valid {
                hash: "abc".into(),
                warnings: vec![],
                leaf_policies: vec!["leaves".into()],
            },
            apply_error: None,
            deployment: Some(DeploymentState {
                generation: 2,
                observed_generation: 2,
                replicas: 1,
                updated_replicas: 1,
                ready_replicas: 1,
                available_replicas: 1,
            }),
            embedded: None,
            lease: None,
            lease_duration_seconds: 15,
            lease_name: "ksched-system/ksched-p".into(),
            pending_pods: 2,
            now: now(),
        }
    }

    fn get<'a>(s: &'a SchedulerProfileStatus, t: &str) -> Option<&'a Condition> {
        condition(&s.conditions, t)
    }

    fn status_of(s: &SchedulerProfileStatus, t: &str) -> Option<String> {
        get(s, t).map(|c| c.status.clone())
    }

    #[test]
    fn rolled_out_deployment_is_ready() {
        let s = profile_status(&SchedulerProfileStatus::default(), &obs());
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
        assert_eq!(get(&s, READY).map(|c| c.reason.as_str()), Some("Running"));
        assert!(get(&s, RECONCILING).is_none());
        assert!(get(&s, STALLED).is_none());
        assert_eq!(status_of(&s, CONFIG_VALID).as_deref(), Some("True"));
        assert_eq!(status_of(&s, LEADER_ELECTED).as_deref(), Some("False"));
        assert_eq!(s.ready.as_deref(), Some("1/1"));
        assert_eq!(s.config_hash.as_deref(), Some("abc"));
        assert_eq!(s.leaf_policies, vec!["leaves"]);
        assert_eq!(s.pending_pods, Some(2));
        assert!(
            s.conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
    }

    #[test]
    fn rolling_out_is_reconciling_not_ready() {
        let mut o = obs();
        o.replicas = 2;
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
        assert_eq!(s.ready.as_deref(), Some("1/2"));
        let mut o = obs();
        if let Some(d) = o.deployment.as_mut() {
            d.generation = 3;
        }
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
        let mut o = obs();
        o.deployment = None;
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(
            get(&s, READY).map(|c| c.reason.as_str()),
            Some("RollingOut")
        );
    }

    #[test]
    fn invalid_config_is_stalled_and_keeps_the_running_hash() {
        let previous = profile_status(&SchedulerProfileStatus::default(), &obs());
        let mut o = obs();
        o.generation = Some(4);
        o.config = ConfigOutcome::Invalid {
            message: "spec.plugins.score.enabled[0].name: unknown plugin".into(),
        };
        let s = profile_status(&previous, &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(status_of(&s, STALLED).as_deref(), Some("True"));
        assert_eq!(status_of(&s, CONFIG_VALID).as_deref(), Some("False"));
        assert!(get(&s, RECONCILING).is_none());
        assert!(
            get(&s, STALLED)
                .is_some_and(|c| c.message.contains("spec.plugins.score.enabled[0].name"))
        );
        assert_eq!(s.config_hash.as_deref(), Some("abc"));
        assert_eq!(s.leaf_policies, vec!["leaves"]);
        assert_eq!(s.observed_generation, Some(4));
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let first = profile_status(&SchedulerProfileStatus::default(), &obs());
        let mut o = obs();
        o.now = now()
            .checked_add(SignedDuration::from_secs(60))
            .unwrap_or(now());
        let same = profile_status(&first, &o);
        assert_eq!(
            get(&first, READY).map(|c| c.last_transition_time.clone()),
            get(&same, READY).map(|c| c.last_transition_time.clone())
        );
        o.suspend = false;
        o.replicas = 3;
        let changed = profile_status(&same, &o);
        assert_eq!(
            get(&changed, READY).map(|c| c.last_transition_time.0),
            Some(o.now)
        );
    }

    #[test]
    fn leader_is_the_fresh_lease_holder() {
        let mut o = obs();
        o.lease = Some(LeaseState {
            holder: Some("ksched-p-abc_123".into()),
            renew_time: Some(now()),
            lease_duration_seconds: Some(15),
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(s.leader.as_deref(), Some("ksched-p-abc_123"));
        assert_eq!(status_of(&s, LEADER_ELECTED).as_deref(), Some("True"));

        o.now = now()
            .checked_add(SignedDuration::from_secs(16))
            .unwrap_or(now());
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(s.leader, None);
        assert_eq!(
            get(&s, LEADER_ELECTED).map(|c| c.reason.as_str()),
            Some("LeaseExpired")
        );
        // No duration on the Lease: the spec's.
        o.lease = Some(LeaseState {
            holder: Some("x".into()),
            renew_time: Some(now()),
            lease_duration_seconds: None,
        });
        o.lease_duration_seconds = 30;
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(s.leader.as_deref(), Some("x"));
    }

    #[test]
    fn suspended_is_ready_with_zero_replicas() {
        let mut o = obs();
        o.suspend = true;
        o.deployment = Some(DeploymentState {
            generation: 3,
            observed_generation: 3,
            ..DeploymentState::default()
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(get(&s, READY).map(|c| c.reason.as_str()), Some("Suspended"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
        assert_eq!(s.ready.as_deref(), Some("0/0"));
    }

    #[test]
    fn embedded_follows_the_in_process_scheduler() {
        let mut o = obs();
        o.mode = ProfileMode::Embedded;
        o.deployment = None;
        o.embedded = Some(Ok(()));
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
        assert_eq!(s.ready.as_deref(), Some("1/1"));
        o.embedded = Some(Err("no runtime".into()));
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(s.ready.as_deref(), Some("0/1"));
        assert!(get(&s, RECONCILING).is_some_and(|c| c.message.contains("no runtime")));
    }

    #[test]
    fn apply_errors_are_reconciling() {
        let mut o = obs();
        o.apply_error = Some("forbidden".into());
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(
            get(&s, READY).map(|c| c.reason.as_str()),
            Some("ApplyFailed")
        );
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
    }

    #[test]
    fn policy_status_counts_and_conditions() {
        let o = PolicyObservation {
            generation: Some(2),
            leaf_nodes: 3,
            tainted_nodes: 3,
            profiles: vec!["a".into()],
            manage_taint: true,
            taint: "kosmos.io/node=true:NoSchedule".into(),
            invalid: None,
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
        let bad = PolicyObservation {
            invalid: Some("spec.leafNodeSelector: bad operator".into()),
            ..o
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
    }
}
