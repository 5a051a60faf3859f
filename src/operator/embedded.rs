//! The hook through which the operator runs `mode: Embedded` profiles inside its own process.
//!
//! The reconciler calls [`EmbeddedSchedulers::ensure`] with the rendered, validated configuration
//! every time it reconciles an Embedded profile that is not suspended (the implementation starts the
//! scheduler, restarts it when `config_yaml` differs from the one running, and otherwise does
//! nothing), and [`EmbeddedSchedulers::stop`] when the profile is suspended, switches to
//! `mode: Deployment`, or is deleted. Both must be idempotent.
//!
//! An Embedded profile still gets its ConfigMap, ServiceAccount, RBAC and Lease (the scheduler
//! leader-elects on Lease `ksched-P` like any other), but no Deployment and no metrics Service.

use async_trait::async_trait;

use crate::emulation::Minor;

/// Starting an embedded scheduler failed; the message goes into the profile's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbeddedError {
    /// This operator has no embedded scheduler runtime.
    #[error("{0}")]
    Unavailable(String),
    /// The scheduler could not be started with this configuration.
    #[error("{0}")]
    Failed(String),
}

/// Runs schedulers inside the operator process, one per Embedded profile.
#[async_trait]
pub trait EmbeddedSchedulers: Send + Sync {
    /// Starts the scheduler of `profile` emulating Kubernetes `minor`, or restarts it when
    /// `config_yaml` or the minor changed.
    async fn ensure(
        &self,
        profile: &str,
        config_yaml: &str,
        minor: Minor,
    ) -> Result<(), EmbeddedError>;
    /// Stops the scheduler of `profile` if it runs.
    async fn stop(&self, profile: &str);
    /// The leader-election identity of `profile`'s running scheduler: the profile is Ready only
    /// while its Lease names this holder. `None` when not known (then any fresh holder counts).
    async fn identity(&self, _profile: &str) -> Option<String> {
        None
    }
    /// Stops every scheduler (the operator is shutting down); the profiles that were running.
    async fn stop_all(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The default until the scheduler runtime is plugged in: runs nothing and says so, so an Embedded
/// profile reports `Ready=False` (`EmbeddedFailed`) instead of pretending to schedule.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEmbeddedSchedulers;

#[async_trait]
impl EmbeddedSchedulers for NoEmbeddedSchedulers {
    async fn ensure(
        &self,
        profile: &str,
        _config_yaml: &str,
        _minor: Minor,
    ) -> Result<(), EmbeddedError> {
        tracing::warn!(
            profile,
            "mode Embedded requested, but this operator runs no embedded schedulers"
        );
        Err(EmbeddedError::Unavailable(
            "this operator has no embedded scheduler runtime: use mode: Deployment".into(),
        ))
    }

    async fn stop(&self, _profile: &str) {}
}
