//! A candidate's timings and identity (checked as client-go checks them), the holders it may take
//! the lease from at once, and why leader election failed.

use std::time::Duration;

use super::JITTER_FACTOR;

/// Timings and identity of one candidate.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    pub lease_name: String,
    /// Unique per process: `<hostname>_<random>`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Holders known to have stopped without waiting for the lease to expire (an Embedded
    /// scheduler of an operator that no longer leads): the lease is taken from them at once.
    pub takeover: Option<Takeover>,
}

/// Which holders a candidate may take the lease from at once: identities starting with
/// `holders` but not with `except` (the candidate's own kind). The caller guarantees such a holder
/// stopped acting: an Embedded scheduler stops at its operator's renew deadline, which passes
/// before another operator can lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    pub holders: String,
    pub except: String,
}

impl Takeover {
    pub(super) fn applies_to(&self, holder: &str) -> bool {
        holder.starts_with(&self.holders) && !holder.starts_with(&self.except)
    }
}

impl LeaderElectionConfig {
    /// client-go's rules: `leaseDuration > renewDeadline > 1.2 * retryPeriod > 0`. A renew deadline
    /// as long as the lease would let another candidate take over while this one still leads.
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        let invalid = |msg: String| Err(LeaderElectionError::Invalid(msg));
        if self.retry_period.is_zero() {
            return invalid("retryPeriod must be greater than zero".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return invalid(format!(
                "leaseDuration ({:?}) must be at least 1s (the Lease records whole seconds)",
                self.lease_duration
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid(format!(
                "leaseDuration ({:?}) must be greater than renewDeadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return invalid(format!(
                "renewDeadline ({:?}) must be greater than retryPeriod ({:?}) * {JITTER_FACTOR}",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }

    /// The bound on one acquire, renew or release attempt: client-go's leader-election client
    /// timeout, `renewDeadline / 2` and at least 1 s, so a hung request leaves time for a retry
    /// within the deadline.
    pub fn request_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }

    pub(super) fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.lease_name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("invalid leader election configuration: {0}")]
    Invalid(String),
    #[error("lost the lease {lease}: {cause}")]
    Lost { lease: String, cause: LossCause },
}

/// Why leadership ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LossCause {
    #[error("not renewed within the renew deadline ({deadline:?}); last attempt: {last}")]
    Deadline { deadline: Duration, last: String },
    #[error("the lease is now held by {holder}")]
    TakenOver { holder: String },
}

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::*;

    #[test]
    fn valid_timings_are_accepted() {
        assert!(config(15, 10, 2).validate().is_ok());
        assert!(config(4, 3, 1).validate().is_ok());
    }

    #[test]
    fn a_renew_deadline_as_long_as_the_lease_is_rejected() {
        let err = config(10, 10, 2).validate().unwrap_err().to_string();
        assert!(
            err.contains("leaseDuration (10s) must be greater than renewDeadline (10s)"),
            "{err}"
        );
    }

    #[test]
    fn a_retry_period_without_room_for_jitter_is_rejected() {
        let err = config(15, 10, 9).validate().unwrap_err().to_string();
        assert!(
            err.contains("renewDeadline (10s) must be greater than retryPeriod (9s) * 1.2"),
            "{err}"
        );
        assert!(config(15, 10, 0).validate().is_err());
        assert!(config(0, 0, 0).validate().is_err());
    }

    #[test]
    fn request_timeout_is_half_the_renew_deadline_at_least_a_second() {
        assert_eq!(config(15, 10, 2).request_timeout(), Duration::from_secs(5));
        let mut short = config(2, 1, 0);
        short.renew_deadline = Duration::from_millis(1500);
        assert_eq!(short.request_timeout(), Duration::from_secs(1));
    }

    #[test]
    fn a_takeover_applies_to_other_operators_embedded_schedulers_only() {
        let t = Takeover {
            holders: "embedded/".into(),
            except: "embedded/op-b_1/".into(),
        };
        assert!(t.applies_to("embedded/op-a_9/p/1234"));
        assert!(!t.applies_to("embedded/op-b_1/p/1234"));
        assert!(!t.applies_to("ksched-profile-p-5d8f_abc"));
        assert!(!t.applies_to(""));
    }
}
