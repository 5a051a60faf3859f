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

pub(crate) const READY: &str = "Ready";
pub(crate) const RECONCILING: &str = "Reconciling";
pub(crate) const STALLED: &str = "Stalled";
pub(crate) const CONFIG_VALID: &str = "ConfigValid";
pub(crate) const LEADER_ELECTED: &str = "LeaderElected";

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

/// What the rendered configuration came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigOutcome {
    Valid {
        hash: String,
        warnings: Vec<String>,
        leaf_policies: Vec<String>,
        /// The Kubernetes minor the scheduler runs as.
        kubernetes_version: String,
    },
    /// `message` lists every `path: reason`.
    Invalid { message: String },
    /// Another scheduler already serves the profile's name: `message` says which and how to fix it.
    NameInUse { message: String },
}

/// The scheduler Deployment as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeploymentState {
    pub generation: i64,
    pub observed_generation: i64,
    pub replicas: i32,
    pub updated_replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    /// Why the ReplicaSet cannot create pods (the Deployment's `ReplicaFailure` condition, which
    /// the controller copies from the ReplicaSet's `FailedCreate`), e.g. a missing PriorityClass.
    pub replica_failure: Option<String>,
}

impl DeploymentState {
    pub(crate) fn from_deployment(d: &Deployment) -> Self {
        let s = d.status.clone().unwrap_or_default();
        let replica_failure = s
            .conditions
            .iter()
            .flatten()
            .find(|c| {
                c.type_.as_deref() == Some("ReplicaFailure") && c.status.as_deref() == Some("True")
            })
            .map(|c| {
                c.message
                    .clone()
                    .unwrap_or_else(|| c.reason.clone().unwrap_or_default())
            });
        DeploymentState {
            generation: d.metadata.generation.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: s.replicas.unwrap_or(0),
            updated_replicas: s.updated_replicas.unwrap_or(0),
            ready_replicas: s.ready_replicas.unwrap_or(0),
            available_replicas: s.available_replicas.unwrap_or(0),
            replica_failure,
        }
    }
}

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

/// The profile's Lease as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub holder: Option<String>,
    pub renew_time: Option<Timestamp>,
    pub lease_duration_seconds: Option<i32>,
}

impl LeaseState {
    pub(crate) fn from_lease(l: &Lease) -> Self {
        let spec = l.spec.clone().unwrap_or_default();
        LeaseState {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renew_time: spec.renew_time.map(|t| t.0),
            lease_duration_seconds: spec.lease_duration_seconds,
        }
    }

    /// The holder, when it renewed within the lease duration (`fallback_seconds` when the Lease does
    /// not say).
    pub(crate) fn fresh_holder(&self, now: Timestamp, fallback_seconds: i64) -> Option<&str> {
        let holder = self.holder.as_deref()?;
        let expires = self.expires(fallback_seconds)?;
        (expires > now).then_some(holder)
    }

    /// How long the holder's term still runs from `now`, when it is fresh.
    pub(crate) fn fresh_until(
        &self,
        now: Timestamp,
        fallback_seconds: i64,
    ) -> Option<std::time::Duration> {
        self.fresh_holder(now, fallback_seconds)?;
        let left = self.expires(fallback_seconds)?.duration_since(now);
        std::time::Duration::try_from(left).ok()
    }

    /// When the holder's term ends unless it renews: its last renewal plus the lease duration.
    fn expires(&self, fallback_seconds: i64) -> Option<Timestamp> {
        let renewed = self.renew_time?;
        let duration = self
            .lease_duration_seconds
            .map(i64::from)
            .unwrap_or(fallback_seconds);
        renewed
            .checked_add(SignedDuration::from_secs(duration))
            .ok()
    }
}

/// Applying the rendered objects failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApplyError {
    /// Which object and the API server's own words (`applying Deployment ns/name: ...`).
    pub message: String,
    /// The API server refused the object itself (a 4xx other than conflict, timeout or
    /// throttling): retrying the same objects cannot help, the spec must change.
    pub permanent: bool,
    /// Failed attempts with these very objects.
    pub attempts: u32,
    /// The wait before the next attempt, as chosen after the last one (unless the spec changes
    /// first); it doubles with every attempt.
    pub retry_after_seconds: u64,
}

/// Everything one reconcile of a profile observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileObservation {
    pub generation: Option<i64>,
    pub mode: ProfileMode,
    pub suspend: bool,
    /// `spec.replicas`.
    pub replicas: i32,
    pub config: ConfigOutcome,
    /// LeafClusterPolicies naming the profile that are invalid, each with what is wrong and what
    /// the profile makes of it.
    pub ignored_policies: Vec<String>,
    pub apply_error: Option<ApplyError>,
    /// Rendered objects whose names are taken by objects ksched did not create for this profile
    /// (`Kind ns/name`): nothing is applied while there are any.
    pub objects_in_use: Vec<String>,
    /// Deployment mode: the Deployment, when it exists.
    pub deployment: Option<DeploymentState>,
    /// Embedded mode: whether the in-process scheduler runs (`Err` says why not).
    pub embedded: Option<Result<(), String>>,
    /// Embedded mode: the leader-election identity of the in-process scheduler, when known.
    pub embedded_identity: Option<String>,
    pub lease: Option<LeaseState>,
    /// `spec.leaderElection.leaseDuration` in seconds (used when the Lease has no duration).
    pub lease_duration_seconds: i64,
    pub lease_name: String,
    pub pending_pods: i32,
    pub now: Timestamp,
}

pub(crate) const LEAF_POLICIES_VALID: &str = "LeafPoliciesValid";

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
        if err.permanent {
            let message = format!(
                "{message} or as soon as the spec changes: the API server refuses these objects, so the spec must change"
            );
            return (
                Cond::new(READY, false, "ApplyFailed", message.clone()),
                Some(Cond::new(STALLED, true, "ApplyFailed", message)),
            );
        }
        return progressing("ApplyFailed", message);
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
            permanent: false,
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
            permanent: true,
            ..error
        });
        let s = profile_status(&SchedulerProfileStatus::default(), &o);
        assert_eq!(reason(&s, STALLED).as_deref(), Some("ApplyFailed"));
        assert_eq!(status_of(&s, READY).as_deref(), Some("False"));
        assert!(get(&s, RECONCILING).is_none());
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
        assert_eq!(s.ready.as_deref(), Some("0/1"));
        assert_eq!(s.leader, None);
    }

    #[test]
    fn a_fresh_lease_says_how_long_its_term_still_runs() {
        let l = LeaseState {
            holder: Some("a".into()),
            renew_time: Some(now()),
            lease_duration_seconds: Some(15),
        };
        assert_eq!(
            l.fresh_until(later(5), 15),
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(l.fresh_until(later(15), 15), None);
        let released = LeaseState {
            holder: None,
            ..l.clone()
        };
        assert_eq!(released.fresh_until(later(1), 15), None);
    }

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
