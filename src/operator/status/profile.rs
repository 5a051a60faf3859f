//! A SchedulerProfile's status after a reconcile, and when its operator stopped or ksched was
//! uninstalled.

use k8s_openapi::jiff::Timestamp;

use super::observation::{ApplyFix, ConfigOutcome, OPERATOR_RULES_FIX, ProfileObservation};
use super::{
    CONFIG_VALID, Cond, LEADER_ELECTED, LEAF_POLICIES_VALID, READY, RECONCILING, STALLED,
    set_conditions, some_names,
};
use crate::api::SchedulerProfileStatus;
use crate::api::scheduler_profile::ProfileMode;

/// What a ReplicaSet's FailedCreate means for the profile, and the field that fixes it.
fn replica_failure_hint(failure: &str) -> String {
    let fix = if failure.contains("PriorityClass") {
        "fix spec.priorityClassName of the SchedulerProfile, or create that PriorityClass"
    } else if failure.contains("exceeded quota") {
        "lower spec.resources of the SchedulerProfile, or raise the ResourceQuota of the operator namespace"
    } else if failure.contains("PodSecurity") {
        "the operator namespace's Pod Security level refuses the scheduler pods: keep it at restricted or baseline, which they meet"
    } else {
        "kubectl describe replicaset in the operator namespace shows the events"
    };
    format!("the ReplicaSet cannot create the scheduler pods (FailedCreate: {failure}): {fix}")
}

/// The status a profile should have after a reconcile.
pub(crate) fn profile_status(
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

    // A profile that never had a valid configuration has nothing running to keep.
    let never_rendered = previous.config_hash.is_none();
    let refused = |reason: &str, message: &str, conds: &mut Vec<Cond>| {
        let msg = if never_rendered {
            format!("{message} (nothing was rendered: no scheduler runs for this profile yet)")
        } else {
            format!(
                "{message} (nothing was changed: the running scheduler keeps its last valid configuration)"
            )
        };
        conds.push(Cond::new(READY, false, reason, msg.clone()));
        conds.push(Cond::new(STALLED, true, reason, msg));
    };
    match &obs.config {
        ConfigOutcome::Invalid { message } => {
            // The last valid configuration keeps running: keep its hash, policies and minor.
            status.config_hash = previous.config_hash.clone();
            status.leaf_policies = previous.leaf_policies.clone();
            status.kubernetes_version = previous.kubernetes_version.clone();
            refused(
                "InvalidConfiguration",
                &format!("invalid spec: {message}"),
                &mut conds,
            );
            conds.push(Cond::new(
                CONFIG_VALID,
                false,
                "InvalidConfiguration",
                message.clone(),
            ));
        }
        ConfigOutcome::NameInUse { message } => {
            status.config_hash = previous.config_hash.clone();
            status.leaf_policies = previous.leaf_policies.clone();
            status.kubernetes_version = previous.kubernetes_version.clone();
            refused("SchedulerNameInUse", message, &mut conds);
        }
        ConfigOutcome::Valid {
            hash,
            warnings,
            leaf_policies,
            kubernetes_version,
        } => {
            status.config_hash = Some(hash.clone());
            status.leaf_policies = leaf_policies.clone();
            status.kubernetes_version = Some(kubernetes_version.clone());
            let valid_msg = if warnings.is_empty() {
                "the configuration is valid".to_string()
            } else {
                format!(
                    "the configuration is valid; warnings: {}",
                    warnings.join("; ")
                )
            };
            let (ready, progress) = readiness(obs, desired, leader);
            conds.push(ready);
            if let Some(r) = progress {
                conds.push(r);
            }
            conds.push(Cond::new(CONFIG_VALID, true, "Valid", valid_msg));
            if !obs.ignored_policies.is_empty() {
                conds.push(Cond::new(
                    LEAF_POLICIES_VALID,
                    false,
                    "LeafPolicyIgnored",
                    obs.ignored_policies.join("; "),
                ));
            } else if !leaf_policies.is_empty() {
                conds.push(Cond::new(
                    LEAF_POLICIES_VALID,
                    true,
                    "Valid",
                    format!("applied: {}", leaf_policies.join(", ")),
                ));
            }
        }
    }
    conds.push(leader_cond);
    status.conditions = set_conditions(&previous.conditions, conds, obs.generation, obs.now);
    status
}

/// `Ready` and, while the profile is not there yet, `Reconciling` (or `Stalled` when it cannot get
/// there without a change).
fn readiness(obs: &ProfileObservation, desired: i32, leader: Option<&str>) -> (Cond, Option<Cond>) {
    let progressing = |reason: &str, message: String| {
        (
            Cond::new(READY, false, reason, message.clone()),
            Some(Cond::new(RECONCILING, true, reason, message)),
        )
    };
    if !obs.objects_in_use.is_empty() {
        let message = objects_in_use_message(&obs.objects_in_use);
        return (
            Cond::new(READY, false, "NameInUse", message.clone()),
            Some(Cond::new(STALLED, true, "NameInUse", message)),
        );
    }
    if let Some(err) = &obs.apply_error {
        let message = format!(
            "{}; attempt {}, retried after {}s",
            err.message, err.attempts, err.retry_after_seconds
        );
        let fix = match err.fix {
            ApplyFix::Retry => return progressing("ApplyFailed", message),
            ApplyFix::Spec => "the API server refuses these objects, so the spec must change",
            ApplyFix::OperatorRules => OPERATOR_RULES_FIX,
        };
        let message = format!("{message} or as soon as the spec changes: {fix}");
        return (
            Cond::new(READY, false, "ApplyFailed", message.clone()),
            Some(Cond::new(STALLED, true, "ApplyFailed", message)),
        );
    }
    let lease = &obs.lease_name;
    let not_leading = |what: &str| {
        let last = obs
            .lease
            .as_ref()
            .and_then(|l| l.holder.as_deref())
            .map(|h| format!(" (last held by {h}, not renewed within its duration)"))
            .unwrap_or_default();
        progressing(
            "NoLeader",
            format!("{what}, but no scheduler holds Lease {lease} yet{last}"),
        )
    };
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
            (Some(Ok(())), false) => {
                let ours = match (leader, &obs.embedded_identity) {
                    (Some(h), Some(id)) => h == id,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                match leader {
                    Some(h) if ours => (
                        Cond::new(
                            READY,
                            true,
                            "Running",
                            format!(
                                "the scheduler runs inside the operator process and leads ({h} holds Lease {lease})"
                            ),
                        ),
                        None,
                    ),
                    Some(h) => progressing(
                        "NoLeader",
                        format!(
                            "the embedded scheduler runs, but Lease {lease} is held by {h}: it takes over once that holder stops renewing"
                        ),
                    ),
                    None => not_leading("the embedded scheduler runs"),
                }
            }
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
                let mut message = format!(
                    "{} of {desired} scheduler replicas updated and ready ({} running)",
                    d.ready_replicas.min(d.updated_replicas),
                    d.replicas
                );
                if let Some(failure) = &d.replica_failure {
                    message = format!("{message}; {}", replica_failure_hint(failure));
                }
                return progressing("RollingOut", message);
            }
            if obs.suspend {
                return (
                    Cond::new(
                        READY,
                        true,
                        "Suspended",
                        "suspended: scaled to 0, the configuration is kept",
                    ),
                    None,
                );
            }
            if desired == 0 {
                return (
                    Cond::new(
                        READY,
                        true,
                        "ScaledToZero",
                        "replicas is 0: no scheduler runs, pods naming this profile stay Pending",
                    ),
                    None,
                );
            }
            let replicas = format!("{desired} of {desired} scheduler replicas ready");
            match leader {
                Some(h) => (
                    Cond::new(
                        READY,
                        true,
                        "Running",
                        format!("{replicas}; {h} holds Lease {lease}"),
                    ),
                    None,
                ),
                None => not_leading(&replicas),
            }
        }
    }
}

/// Why a profile whose objects' names are taken renders nothing, and what to do.
pub(crate) fn objects_in_use_message(objects: &[String]) -> String {
    format!(
        "{} already exist{} and {} not created by ksched for this profile: ksched never adopts, changes or deletes an object it did not create, so nothing was applied; delete or rename {}, or give the profile another metadata.name",
        some_names(objects),
        if objects.len() == 1 { "s" } else { "" },
        if objects.len() == 1 { "was" } else { "were" },
        if objects.len() == 1 { "it" } else { "them" },
    )
}

/// The status of an Embedded profile whose operator stopped (with it, its scheduler): not Ready
/// until an operator runs it again.
pub(crate) fn operator_stopped(
    previous: &SchedulerProfileStatus,
    generation: Option<i64>,
    instance: &str,
    now: Timestamp,
) -> SchedulerProfileStatus {
    let message = format!(
        "the operator ({instance}) that ran this Embedded profile's scheduler stopped, and the scheduler with it: no pod is scheduled until an operator runs again"
    );
    nothing_runs(previous, generation, RECONCILING, &message, now)
}

/// The status of a profile left behind by an uninstall (Helm keeps the CRDs): nothing runs for
/// it, and nothing will until ksched is installed again.
pub(crate) fn uninstalled(
    previous: &SchedulerProfileStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> SchedulerProfileStatus {
    nothing_runs(
        previous,
        generation,
        STALLED,
        "ksched was uninstalled: no scheduler runs for this profile and nothing reconciles it; install ksched again to run it, or delete the profile",
        now,
    )
}

/// Whether `status` says ksched was uninstalled ([`uninstalled`]): final until an operator
/// reconciles the profile again, so a replica going away does not overwrite it.
pub(crate) fn says_uninstalled(status: &SchedulerProfileStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == STALLED && c.status == "True" && c.reason == OPERATOR_STOPPED)
}

/// `Ready=False` (`OperatorStopped`) with `progress` (`Reconciling` while an operator may come
/// back, `Stalled` when none will), no leader and no replica; the configuration's conditions kept.
fn nothing_runs(
    previous: &SchedulerProfileStatus,
    generation: Option<i64>,
    progress: &'static str,
    message: &str,
    now: Timestamp,
) -> SchedulerProfileStatus {
    let wanted = vec![
        Cond::new(READY, false, OPERATOR_STOPPED, message),
        Cond::new(progress, true, OPERATOR_STOPPED, message),
        Cond::new(
            LEADER_ELECTED,
            false,
            OPERATOR_STOPPED,
            "no scheduler runs for this profile",
        ),
    ];
    let mut conditions = set_conditions(&previous.conditions, wanted, generation, now);
    conditions.extend(
        previous
            .conditions
            .iter()
            .filter(|c| [CONFIG_VALID, LEAF_POLICIES_VALID].contains(&c.type_.as_str()))
            .cloned(),
    );
    let desired = previous
        .ready
        .as_deref()
        .and_then(|r| r.split_once('/'))
        .map_or("0", |(_, d)| d)
        .to_string();
    SchedulerProfileStatus {
        conditions,
        replicas: Some(0),
        ready_replicas: Some(0),
        ready: Some(format!("0/{desired}")),
        leader: None,
        ..previous.clone()
    }
}

/// The reason of a profile whose scheduler stopped with the operator that ran it, or was
/// uninstalled.
pub(crate) const OPERATOR_STOPPED: &str = "OperatorStopped";

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::operator::status::condition;
    use crate::operator::status::observation::{ApplyError, DeploymentState, LeaseState};
    use crate::operator::status_samples::{lease as held_by, now, seconds_later as later};

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
                kubernetes_version: "1.37".into(),
            },
            ignored_policies: vec![],
            apply_error: None,
            objects_in_use: Vec::new(),
            deployment: Some(DeploymentState {
                generation: 2,
                observed_generation: 2,
                replicas: 1,
                updated_replicas: 1,
                ready_replicas: 1,
                available_replicas: 1,
                replica_failure: None,
            }),
            embedded: None,
            embedded_identity: None,
            lease: Some(held_by("ksched-p-abc")),
            lease_duration_seconds: 15,
            lease_name: "ksched-system/ksched-p".into(),
            pending_pods: 2,
            now: now(),
        }
    }

    fn reason(s: &SchedulerProfileStatus, t: &str) -> Option<String> {
        get(s, t).map(|c| c.reason.clone())
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
        assert_eq!(status_of(&s, LEADER_ELECTED).as_deref(), Some("True"));
        assert_eq!(s.ready.as_deref(), Some("1/1"));
        assert_eq!(s.leader.as_deref(), Some("ksched-p-abc"));
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
    fn a_rolled_out_deployment_is_not_ready_until_a_replica_holds_the_lease() {
        let mut o = obs();
        o.lease = None;
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(reason(&s, READY).as_deref(), Some("NoLeader"));
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
        assert!(get(&s, STALLED).is_none());
        assert!(
            get(&s, READY).is_some_and(|c| c.message.contains("Lease ksched-system/ksched-p")),
            "{:?}",
            get(&s, READY)
        );
        // The holder stops renewing: not Ready once the lease duration has passed.
        let mut o = obs();
        o.now = later(16);
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("NoLeader"));
        assert!(get(&s, READY).is_some_and(|c| c.message.contains("last held by ksched-p-abc")));
        assert_eq!(reason(&s, LEADER_ELECTED).as_deref(), Some("LeaseExpired"));
        // Zero replicas asked for: nothing to lead, and that is what was asked.
        let mut o = obs();
        o.lease = None;
        o.replicas = 0;
        o.deployment = Some(DeploymentState {
            generation: 2,
            observed_generation: 2,
            ..DeploymentState::default()
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("ScaledToZero"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
    }

    #[test]
    fn a_replicaset_that_cannot_create_pods_says_why_and_what_to_fix() {
        let mut o = obs();
        o.deployment = Some(DeploymentState {
            generation: 2,
            observed_generation: 2,
            replica_failure: Some(
                "pods \"ksched-p-5d8f-\" is forbidden: no PriorityClass with name nope was found"
                    .into(),
            ),
            ..DeploymentState::default()
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("RollingOut"));
        let message = get(&s, READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            message.contains("the ReplicaSet cannot create the scheduler pods (FailedCreate: pods \"ksched-p-5d8f-\" is forbidden: no PriorityClass with name nope was found): fix spec.priorityClassName"),
            "{message}"
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
        assert!(
            get(&s, READY).is_some_and(|c| c.message.contains("the running scheduler keeps")),
            "{:?}",
            get(&s, READY)
        );
        // A profile that never rendered has no running scheduler to speak of.
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        let ready = get(&s, READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            ready.contains("no scheduler runs for this profile yet")
                && !ready.contains("running scheduler"),
            "{ready}"
        );
        assert_eq!(s.config_hash, None);
    }

    #[test]
    fn a_name_in_use_is_stalled_and_renders_nothing() {
        let mut o = obs();
        o.config = ConfigOutcome::NameInUse {
            message: "scheduler name p looks taken: Lease kube-system/p".into(),
        };
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("SchedulerNameInUse"));
        assert_eq!(reason(&s, STALLED).as_deref(), Some("SchedulerNameInUse"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert!(get(&s, READY).is_some_and(|c| c.message.contains("Lease kube-system/p")));
        assert_eq!(s.config_hash, None);
    }

    #[test]
    fn an_object_name_taken_by_someone_else_is_stalled_and_names_the_object() {
        let mut o = obs();
        o.objects_in_use = vec!["ClusterRole ksched:profile:p".into()];
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("NameInUse"));
        assert_eq!(reason(&s, STALLED).as_deref(), Some("NameInUse"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        let message = get(&s, READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            message.starts_with("ClusterRole ksched:profile:p already exists and was not created")
                && message.contains("never adopts"),
            "{message}"
        );
        // The configuration itself is fine.
        assert_eq!(status_of(&s, CONFIG_VALID).as_deref(), Some("True"));
    }

    #[test]
    fn an_ignored_policy_is_reported_without_stalling_the_profile() {
        let mut o = obs();
        o.ignored_policies =
            vec!["LeafClusterPolicy bad: spec.leafNodeSelector: Invalid value".into()];
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
        assert!(get(&s, STALLED).is_none());
        assert_eq!(status_of(&s, LEAF_POLICIES_VALID).as_deref(), Some("False"));
        assert_eq!(
            reason(&s, LEAF_POLICIES_VALID).as_deref(),
            Some("LeafPolicyIgnored")
        );
        assert!(
            get(&s, LEAF_POLICIES_VALID)
                .is_some_and(|c| c.message.contains("spec.leafNodeSelector"))
        );
        let s = profile_status(&SchedulerProfileStatus::default(), &obs());
        assert_eq!(status_of(&s, LEAF_POLICIES_VALID).as_deref(), Some("True"));
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let first = profile_status(&SchedulerProfileStatus::default(), &obs());
        let mut o = obs();
        o.now = later(60);
        o.lease = o.lease.map(|l| LeaseState {
            renew_time: Some(later(59)),
            ..l
        });
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
    fn embedded_follows_the_in_process_scheduler_and_its_lease() {
        let mut o = obs();
        o.mode = ProfileMode::Embedded;
        o.deployment = None;
        o.embedded = Some(Ok(()));
        o.embedded_identity = Some("op_p_1".into());
        o.lease = Some(held_by("op_p_1"));
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("True"));
        assert_eq!(s.ready.as_deref(), Some("1/1"));
        // Running, but another holder (the previous operator's scheduler) still has the Lease.
        o.lease = Some(held_by("old-operator_p_2"));
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("NoLeader"));
        assert!(get(&s, READY).is_some_and(|c| c.message.contains("old-operator_p_2")));
        // Running, no leader at all.
        o.lease = None;
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("NoLeader"));
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
        o.embedded = Some(Err("no runtime".into()));
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(s.ready.as_deref(), Some("0/1"));
        assert!(get(&s, RECONCILING).is_some_and(|c| c.message.contains("no runtime")));
    }

    #[test]
    fn apply_errors_are_reconciling_or_stalled_when_retrying_cannot_help() {
        let mut o = obs();
        let error = ApplyError {
            message: "applying Deployment ns/ksched-p: etcdserver: request timed out".into(),
            fix: ApplyFix::Retry,
            attempts: 2,
            retry_after_seconds: 10,
        };
        o.apply_error = Some(error.clone());
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, READY).as_deref(), Some("ApplyFailed"));
        assert_eq!(status_of(&s, RECONCILING).as_deref(), Some("True"));
        assert!(get(&s, STALLED).is_none());
        assert!(
            get(&s, READY).is_some_and(|c| c.message.contains("attempt 2, retried after 10s")),
            "{:?}",
            get(&s, READY)
        );
        o.apply_error = Some(ApplyError {
            fix: ApplyFix::Spec,
            ..error
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, STALLED).as_deref(), Some("ApplyFailed"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert!(get(&s, RECONCILING).is_none());
        assert!(
            get(&s, READY).is_some_and(|c| c.message.contains("the spec must change")),
            "{:?}",
            get(&s, READY)
        );
    }

    /// A rule the operator lacks is stalled too, and the message says whose rules to change.
    #[test]
    fn a_rule_the_operator_lacks_names_its_cluster_role_not_the_spec() {
        let mut o = obs();
        o.apply_error = Some(ApplyError {
            message: "applying ClusterRole ksched:profile:p: ... is attempting to grant RBAC permissions not currently held: {APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"list\" \"watch\"]} (HTTP 403)".into(),
            fix: ApplyFix::OperatorRules,
            attempts: 1,
            retry_after_seconds: 1,
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, STALLED).as_deref(), Some("ApplyFailed"));
        let ready = get(&s, READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(ready.contains("extraSchedulerRules"), "{ready}");
        assert!(!ready.contains("the spec must change"), "{ready}");
    }

    #[test]
    fn an_embedded_profile_whose_operator_stopped_is_not_ready() {
        let mut o = obs();
        o.mode = ProfileMode::Embedded;
        o.embedded = Some(Ok(()));
        let running = profile_status(&SchedulerProfileStatus::default(), &o);
        let s = operator_stopped(&running, Some(3), "op-1", later(5));
        assert_eq!(reason(&s, READY).as_deref(), Some("OperatorStopped"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert_eq!(status_of(&s, LEADER_ELECTED).as_deref(), Some("False"));
        assert_eq!(status_of(&s, CONFIG_VALID).as_deref(), Some("True"));
        assert_eq!(s.leader, None);
        assert_eq!(s.config_hash, running.config_hash);
        assert_eq!(
            get(&s, READY).map(|c| c.last_transition_time.0),
            Some(later(5))
        );
    }

    #[test]
    fn a_profile_left_behind_by_an_uninstall_is_stalled_not_ready() {
        let running = profile_status(&SchedulerProfileStatus::default(), &obs());
        assert_eq!(running.ready.as_deref(), Some("1/1"));
        let s = uninstalled(&running, Some(3), later(5));
        assert_eq!(reason(&s, READY).as_deref(), Some("OperatorStopped"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        // Nothing will reconcile it: Stalled (kstatus: Failed; Argo CD: Degraded), not Reconciling.
        assert_eq!(reason(&s, STALLED).as_deref(), Some("OperatorStopped"));
        assert!(get(&s, RECONCILING).is_none());
        assert!(
            get(&s, READY).is_some_and(|c| c.message.contains("ksched was uninstalled")),
            "{s:?}"
        );
        assert!(says_uninstalled(&s));
        assert!(!says_uninstalled(&running));
        assert!(
            !says_uninstalled(&operator_stopped(&running, Some(3), "op-1", later(9))),
            "an operator's stop is not an uninstall"
        );
        assert_eq!(s.ready.as_deref(), Some("0/1"));
        assert_eq!(s.leader, None);
    }
}
