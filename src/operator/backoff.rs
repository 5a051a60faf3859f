//! Exponential backoff of applying a profile's rendered objects: after a failure, the very same
//! objects are applied again only when their delay is up (initial delay, doubling per failure, up
//! to a maximum), however often the profile is reconciled meanwhile. Objects that differ (the spec
//! or a policy changed) are applied at once. Pure: the caller passes the time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::status::ApplyFix;

/// How the API server starts a 500 for an applied object that does not fit the type's schema.
const TYPED_PATCH_FAILED: &str = "failed to create typed patch object";
/// The API server's words when a role grants what its creator does not hold.
const NOT_HELD: &str = "attempting to grant RBAC permissions not currently held";

/// Applying one object failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApplyFailure {
    /// `Deployment ksched-system/ksched-p`.
    pub object: String,
    /// The API server's HTTP status, when it answered.
    pub code: Option<u16>,
    /// The API server's message (or the client's error).
    pub message: String,
}

impl ApplyFailure {
    /// The API server refused the object itself: retrying it unchanged cannot help. Conflicts,
    /// timeouts and throttling (409, 408, 429) pass; server errors and transport errors may too.
    pub(crate) fn permanent(&self) -> bool {
        match self.code {
            Some(c) if (400..500).contains(&c) => !matches!(c, 408 | 409 | 429),
            // Server-side apply cannot even type the object against its schema.
            Some(500) => self.message.starts_with(TYPED_PATCH_FAILED),
            _ => false,
        }
    }

    /// What can end it: a rule the operator lacks (a 403 on granting it) is the operator's to
    /// change, another refusal the spec's, anything else passes with a retry.
    pub(crate) fn fix(&self) -> ApplyFix {
        if self.code == Some(403) && self.message.contains(NOT_HELD) {
            ApplyFix::OperatorRules
        } else if self.permanent() {
            ApplyFix::Spec
        } else {
            ApplyFix::Retry
        }
    }
}

impl std::fmt::Display for ApplyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "applying {}: {}", self.object, self.message)?;
        if let Some(code) = self.code {
            write!(f, " (HTTP {code})")?;
        }
        Ok(())
    }
}

/// Where one profile's failed apply stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub failure: ApplyFailure,
    /// Failed attempts with these objects.
    pub attempts: u32,
    /// The wait chosen after the last failure (stays the same while waiting).
    pub delay: Duration,
    /// What is left of it.
    pub wait: Duration,
}

#[derive(Debug, Clone)]
struct Entry {
    fingerprint: String,
    failure: ApplyFailure,
    attempts: u32,
    delay: Duration,
    next: Instant,
}

/// Per profile: the last failed objects (by fingerprint) and when they may be tried again.
#[derive(Debug)]
pub(crate) struct ApplyBackoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl ApplyBackoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        ApplyBackoff {
            initial,
            max: max.max(initial),
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A poisoned lock only means a panic elsewhere; the map itself is always consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Some` when these very objects (`fingerprint`) failed and their next attempt is not due:
    /// do not apply them now.
    pub(crate) fn waiting(
        &self,
        profile: &str,
        fingerprint: &str,
        now: Instant,
    ) -> Option<Pending> {
        let entries = self.entries();
        let e = entries.get(profile)?;
        (e.fingerprint == fingerprint && now < e.next).then(|| Pending {
            failure: e.failure.clone(),
            attempts: e.attempts,
            delay: e.delay,
            wait: e.next - now,
        })
    }

    /// Records a failed attempt; how it stands now (the wait doubles with every failure of the
    /// same objects).
    pub(crate) fn failed(
        &self,
        profile: &str,
        fingerprint: &str,
        failure: ApplyFailure,
        now: Instant,
    ) -> Pending {
        let mut entries = self.entries();
        let attempts = entries
            .get(profile)
            .filter(|e| e.fingerprint == fingerprint)
            .map_or(1, |e| e.attempts.saturating_add(1));
        let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(31));
        let wait = self.initial.saturating_mul(factor).min(self.max);
        entries.insert(
            profile.to_string(),
            Entry {
                fingerprint: fingerprint.to_string(),
                failure: failure.clone(),
                attempts,
                delay: wait,
                next: now + wait,
            },
        );
        Pending {
            failure,
            attempts,
            delay: wait,
            wait,
        }
    }

    /// The objects applied: forget the failures.
    pub(crate) fn succeeded(&self, profile: &str) {
        self.entries().remove(profile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: Option<u16>) -> ApplyFailure {
        ApplyFailure {
            object: "Deployment ns/ksched-p".into(),
            code,
            message: "spec.template.spec.containers[0].resources.requests: Invalid value".into(),
        }
    }

    #[test]
    fn the_same_objects_wait_twice_as_long_after_each_failure_up_to_the_maximum() {
        let b = ApplyBackoff::new(Duration::from_secs(5), Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(b.waiting("p", "a", t0), None);
        let waits: Vec<u64> = (0..5)
            .map(|i| {
                b.failed("p", "a", failure(Some(422)), t0 + Duration::from_secs(i))
                    .wait
                    .as_secs()
            })
            .collect();
        assert_eq!(waits, [5, 10, 20, 30, 30]);
        let p = b
            .waiting("p", "a", t0 + Duration::from_secs(10))
            .expect("waiting");
        assert_eq!(p.attempts, 5);
        assert_eq!(p.wait, Duration::from_secs(24));
        assert_eq!(p.delay, Duration::from_secs(30));
        assert_eq!(b.waiting("p", "a", t0 + Duration::from_secs(34)), None);
    }

    #[test]
    fn other_objects_or_a_success_start_over() {
        let b = ApplyBackoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let t0 = Instant::now();
        b.failed("p", "a", failure(Some(422)), t0);
        b.failed("p", "a", failure(Some(422)), t0);
        assert_eq!(b.waiting("p", "b", t0), None, "changed objects go at once");
        assert_eq!(b.failed("p", "b", failure(None), t0).attempts, 1);
        assert!(b.waiting("q", "b", t0).is_none(), "per profile");
        b.succeeded("p");
        assert_eq!(b.waiting("p", "b", t0), None);
    }

    /// The API server's 403 for a ClusterRole granting configmaps, which the operator lacks.
    #[test]
    fn a_rule_the_operator_does_not_hold_is_the_operators_to_fix() {
        let not_held = ApplyFailure {
            object: "ClusterRole ksched:profile:p".into(),
            code: Some(403),
            message: "clusterroles.rbac.authorization.k8s.io \"ksched:profile:p\" is forbidden: user \"system:serviceaccount:ksched-system:ksched-operator\" (groups=[\"system:serviceaccounts\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"list\" \"watch\"]}".into(),
        };
        assert_eq!(not_held.fix(), ApplyFix::OperatorRules);
        assert_eq!(failure(Some(403)).fix(), ApplyFix::Spec);
        assert_eq!(failure(Some(422)).fix(), ApplyFix::Spec);
        assert_eq!(failure(Some(409)).fix(), ApplyFix::Retry);
        assert_eq!(failure(None).fix(), ApplyFix::Retry);
    }

    #[test]
    fn only_a_refusal_of_the_object_is_permanent() {
        assert!(failure(Some(422)).permanent());
        assert!(failure(Some(403)).permanent());
        for code in [Some(409), Some(429), Some(408), Some(500), None] {
            assert!(!failure(code).permanent(), "{code:?}");
        }
        let untyped = ApplyFailure {
            message: "failed to create typed patch object (ns/ksched-p; apps/v1, Kind=Deployment): .spec: expected string".into(),
            ..failure(Some(500))
        };
        assert!(untyped.permanent());
        assert_eq!(
            failure(Some(422)).to_string(),
            "applying Deployment ns/ksched-p: spec.template.spec.containers[0].resources.requests: Invalid value (HTTP 422)"
        );
    }
}
