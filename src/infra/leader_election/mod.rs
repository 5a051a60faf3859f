//! Leader election on a `coordination.k8s.io/v1` Lease, shared by the scheduler and the operator.
//!
//! As client-go's leaderelection: acquire and renew are updates guarded by the Lease's
//! resourceVersion (a concurrent writer makes ours fail with a conflict, never both succeed); expiry
//! is judged on the local clock from when we last saw the record change, so clock skew between
//! candidates does not matter; the lease is released on clean shutdown so a successor takes over at
//! once.
//!
//! Safe under a hung or partitioned API server: every attempt is bounded by a request timeout
//! (client-go's `renewDeadline / 2`, at least 1 s), and leadership ends at a deadline kept by a timer
//! of its own, `renewDeadline` after the last successful renewal was *sent*, whatever request is in
//! flight. Another candidate can take the Lease only `leaseDuration` after it saw that renewal, which
//! was written after it was sent: so this process stops acting as leader at least
//! `leaseDuration - renewDeadline` before anyone else can start.
//!
//! [`Leadership`] is what the rest of the process reads: [`Leadership::is_leader`] checks the
//! deadline itself (no task has to run for it to turn false), [`Leadership::lost`] resolves the
//! moment it passes, and [`Leadership::watch`] is the same as a `watch` signal.//!
//! `config` holds a candidate's timings and identity and the errors, `leadership` the
//! [`Leadership`] the process reads, `health` what `/healthz/leaderElection` reads, `elector` the
//! candidate that campaigns for the Lease, renews and releases it.

mod config;
mod elector;
mod health;
mod leadership;

pub use config::{LeaderElectionConfig, LeaderElectionError, LossCause, Takeover};
pub(crate) use elector::{LeaderElector, default_identity, task_outcome};
pub(crate) use health::LeaderHealth;
pub(crate) use leadership::Leadership;

/// client-go's `JitterFactor`: campaign attempts wait `retryPeriod` plus up to 20 %, and the renew
/// deadline must leave room for that.
const JITTER_FACTOR: f64 = 1.2;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LeaderElectionConfig;

    pub(super) fn config(lease: u64, renew: u64, retry: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            namespace: "ns".into(),
            lease_name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            takeover: None,
        }
    }
}
