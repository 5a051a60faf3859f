//! What one reconcile of a SchedulerProfile observed: the rendered configuration's outcome, the
//! scheduler Deployment, the Lease, a failed apply.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::scheduler_profile::ProfileMode;

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

/// The fix of [`ApplyFix::OperatorRules`], in the event and the status.
pub(crate) const OPERATOR_RULES_FIX: &str = "the operator may grant a scheduler only rules it holds itself (RBAC escalation prevention), and a plugin this profile enables needs the rules above (a plugin built into the operator's image, watching a kind of its own): add them to the operator's ClusterRole (the chart's value extraSchedulerRules), or disable the plugin in spec.plugins";

/// What can end a failed apply ([`crate::operator::backoff::ApplyFailure::fix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApplyFix {
    /// The API server or the network failed: retried with backoff.
    Retry,
    /// The API server refused the object itself (a 4xx other than conflict, timeout or
    /// throttling): retrying the same objects cannot help, the spec must change.
    Spec,
    /// The profile's ClusterRole grants a rule the operator does not hold itself (RBAC
    /// escalation prevention): a plugin it enables watches a kind the operator may not grant.
    OperatorRules,
}

/// Applying the rendered objects failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApplyError {
    /// Which object and the API server's own words (`applying Deployment ns/name: ...`).
    pub message: String,
    /// What ends it: a retry, a change of the spec, or a change of the operator's own rules.
    pub fix: ApplyFix,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::status_samples::{now, seconds_later as later};

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
}
