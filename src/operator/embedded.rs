//! The hook through which the operator runs `mode: Embedded` profiles inside its own process.
//!
//! The reconciler calls [`EmbeddedSchedulers::ensure`] with the rendered, validated configuration
//! every time it reconciles an Embedded profile that is not suspended (the implementation starts the
//! scheduler, restarts it when `config_yaml` differs from the one running, and otherwise does
//! nothing), and [`EmbeddedSchedulers::stop`] when the profile is suspended, switches to
//! `mode: Deployment`, or is deleted. Both must be idempotent.
//!
//! An Embedded profile still gets its ConfigMap, ServiceAccount, RBAC and Lease (the scheduler
//! leader-elects on Lease `ksched-profile-P` like any other), but no Deployment and no Service.

use async_trait::async_trait;

use crate::emulation::Emulation;
use crate::infra::leader_election::{Leadership, Takeover};

/// How the Lease holder identity of every Embedded scheduler starts: `embedded/<operator>/...`,
/// `<operator>` the identity of the operator that runs it.
pub(crate) const EMBEDDED_IDENTITY_PREFIX: &str = "embedded/";

/// An operator's term as leader, given to the Embedded schedulers it runs: they lead only within
/// it (their leadership ends at the operator's renew deadline, before another operator can lead),
/// and they take a profile's Lease at once from the Embedded scheduler of an operator that no
/// longer leads.
#[derive(Clone)]
pub struct OperatorTerm {
    pub(crate) leadership: Leadership,
    /// The operator's identity: the holder of its Lease.
    pub(crate) identity: String,
}

impl std::fmt::Debug for OperatorTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorTerm")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl OperatorTerm {
    pub(crate) fn new(leadership: Leadership, identity: impl Into<String>) -> Self {
        OperatorTerm {
            leadership,
            identity: identity.into(),
        }
    }

    /// The Lease holder identity of a new Embedded scheduler of `profile`.
    pub(crate) fn scheduler_identity(&self, profile: &str) -> String {
        format!(
            "{}{profile}/{:08x}",
            self.scheduler_prefix(),
            fastrand::u32(..)
        )
    }

    /// How the identities of this operator's Embedded schedulers start.
    pub(crate) fn scheduler_prefix(&self) -> String {
        operator_scheduler_prefix(&self.identity)
    }

    /// From whom its schedulers take a Lease at once: any other operator's Embedded scheduler.
    pub(crate) fn takeover(&self) -> Takeover {
        Takeover {
            holders: EMBEDDED_IDENTITY_PREFIX.into(),
            except: self.scheduler_prefix(),
        }
    }
}

/// How the identities of the Embedded schedulers of the operator `identity` start.
pub(crate) fn operator_scheduler_prefix(identity: &str) -> String {
    format!("{EMBEDDED_IDENTITY_PREFIX}{identity}/")
}

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
    /// Starts the scheduler of `profile` emulating `emulation` (a Kubernetes minor and the feature
    /// gates the profile sets), or restarts it when `config_yaml` or the emulation changed.
    async fn ensure(
        &self,
        profile: &str,
        config_yaml: &str,
        emulation: &Emulation,
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
    /// The operator leads (`term`): the schedulers started from now on lead within it.
    async fn start_term(&self, _term: OperatorTerm) {}
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
        _emulation: &Emulation,
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
