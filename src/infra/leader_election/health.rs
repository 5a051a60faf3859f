//! What `/healthz/leaderElection` reads: the last Lease record a candidate saw, and when.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;

use super::LeaderElectionConfig;

/// How long past `leaseDuration` a leader that has not renewed is still healthy: client-go's
/// `NewLeaderHealthzAdaptor(20 * time.Second)`, as kube-scheduler sets it.
pub(crate) const HEALTHZ_TOLERANCE: Duration = Duration::from_secs(20);

/// What `/healthz/leaderElection` reads: whether the last record this candidate saw names it as
/// holder, and when that record was seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaderHealth(Arc<parking_lot::Mutex<Option<LeaderObservation>>>);

#[derive(Debug, Clone)]
struct LeaderObservation {
    lease: String,
    holder: String,
    holder_is_us: bool,
    seen: Instant,
    lease_duration: Duration,
}

impl LeaderHealth {
    pub(super) fn observe(&self, config: &LeaderElectionConfig, spec: &LeaseSpec, seen: Instant) {
        *self.0.lock() = Some(LeaderObservation {
            lease: config.lease_name.clone(),
            holder: spec.holder_identity.clone().unwrap_or_default(),
            holder_is_us: spec.holder_identity.as_deref() == Some(config.identity.as_str()),
            seen,
            lease_duration: config.lease_duration,
        });
    }

    /// Another candidate that held the lease and has not renewed it for `for_at_least` of this
    /// candidate's clock: with `for_at_least` its renew deadline, it has stopped acting as leader.
    pub(crate) fn stale_holder(&self, now: Instant, for_at_least: Duration) -> Option<String> {
        let o = self.0.lock().clone()?;
        let stale = !o.holder_is_us
            && !o.holder.is_empty()
            && now.saturating_duration_since(o.seen) >= for_at_least;
        stale.then_some(o.holder)
    }

    /// client-go's `LeaderElector.Check`: a replica that leads (the last record it saw names it)
    /// but has not seen its lease renewed for `leaseDuration` + [`HEALTHZ_TOLERANCE`] is
    /// unhealthy (it should have stepped down; something is stuck). Standbys are healthy.
    pub(crate) fn check(&self, now: Instant) -> Result<(), String> {
        let Some(o) = self.0.lock().clone() else {
            return Ok(());
        };
        if o.holder_is_us
            && now.saturating_duration_since(o.seen) > o.lease_duration + HEALTHZ_TOLERANCE
        {
            return Err(format!(
                "failed election to renew leadership on lease {}",
                o.lease
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::*;

    #[test]
    fn a_stale_holder_is_another_one_not_renewed_for_long_enough() {
        let cfg = config(15, 10, 2);
        let health = LeaderHealth::default();
        let start = Instant::now();
        let other = LeaseSpec {
            holder_identity: Some("op-a_1".into()),
            ..LeaseSpec::default()
        };
        health.observe(&cfg, &other, start);
        let deadline = Duration::from_secs(10);
        assert_eq!(
            health.stale_holder(start + Duration::from_secs(9), deadline),
            None
        );
        assert_eq!(
            health
                .stale_holder(start + Duration::from_secs(10), deadline)
                .as_deref(),
            Some("op-a_1")
        );
        // Ourselves, or nobody, is never stale.
        let ours = LeaseSpec {
            holder_identity: Some("me".into()),
            ..LeaseSpec::default()
        };
        health.observe(&cfg, &ours, start);
        assert_eq!(
            health.stale_holder(start + Duration::from_secs(60), deadline),
            None
        );
        health.observe(&cfg, &LeaseSpec::default(), start);
        assert_eq!(
            health.stale_holder(start + Duration::from_secs(60), deadline),
            None
        );
    }

    #[test]
    fn healthz_fails_only_for_a_leader_that_has_not_renewed_in_time() {
        let cfg = config(15, 10, 2);
        let health = LeaderHealth::default();
        let start = Instant::now();
        assert!(health.check(start).is_ok(), "nothing observed yet");
        let ours = LeaseSpec {
            holder_identity: Some("me".into()),
            ..LeaseSpec::default()
        };
        health.observe(&cfg, &ours, start);
        assert!(health.check(start + Duration::from_secs(34)).is_ok());
        let err = health.check(start + Duration::from_secs(36)).unwrap_err();
        assert_eq!(err, "failed election to renew leadership on lease l");
        // A standby (the record names another holder) is healthy however old its observation.
        let theirs = LeaseSpec {
            holder_identity: Some("other".into()),
            ..LeaseSpec::default()
        };
        health.observe(&cfg, &theirs, start);
        assert!(health.check(start + Duration::from_secs(3600)).is_ok());
    }
}
