//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! acquire and renew are updates guarded by the Lease's resourceVersion (a concurrent writer makes
//! ours fail with a conflict, never both succeed); expiry is judged on the local clock from when we
//! last saw the record change, so clock skew between schedulers does not matter; the lease is released
//! on clean shutdown so a successor takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tracing::{debug, info, warn};

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
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error(
        "lost the lease {namespace}/{name}: not renewed within the renew deadline ({deadline:?})"
    )]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

/// Result of one acquire-or-renew attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(String),
    Failed,
}

/// One candidate. `run` campaigns until leader, reports leadership on the watch channel, renews,
/// and returns an error when leadership is lost (the scheduler exits then, as upstream's does).
pub struct LeaderElector {
    config: LeaderElectionConfig,
    api: Api<Lease>,
    /// The last record we saw and when we saw it change (local clock).
    observed: Option<(LeaseSpec, Instant)>,
    leader_tx: watch::Sender<bool>,
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaderElectionConfig) -> (Self, watch::Receiver<bool>) {
        let (leader_tx, leader_rx) = watch::channel(false);
        let api = Api::namespaced(client, &config.namespace);
        (
            Self {
                config,
                api,
                observed: None,
                leader_tx,
            },
            leader_rx,
        )
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Campaigns, then renews until `shutdown` fires (then releases the lease and returns Ok) or the
    /// lease cannot be renewed within the renew deadline (returns Err).
    pub async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), LeaderElectionError> {
        let cfg = self.config.clone();
        info!(lease = %format!("{}/{}", cfg.namespace, cfg.lease_name), identity = %cfg.identity, "attempting to acquire leader lease");
        // Campaign.
        loop {
            match self.try_acquire_or_renew().await {
                Attempt::Held => break,
                Attempt::HeldByOther(holder) => {
                    debug!(%holder, "lease is held by another candidate")
                }
                Attempt::Failed => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(cfg.retry_period)) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
        info!(identity = %cfg.identity, "successfully acquired lease {}/{}", cfg.namespace, cfg.lease_name);
        let _ = self.leader_tx.send(true);
        // Renew.
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(cfg.retry_period) => {}
                _ = shutdown.changed() => {
                    self.release().await;
                    let _ = self.leader_tx.send(false);
                    return Ok(());
                }
            }
            match self.try_acquire_or_renew().await {
                Attempt::Held => last_renew = Instant::now(),
                other => {
                    warn!(
                        ?other,
                        "failed to renew lease {}/{}", cfg.namespace, cfg.lease_name
                    );
                    if last_renew.elapsed() >= cfg.renew_deadline
                        || matches!(other, Attempt::HeldByOther(_))
                    {
                        let _ = self.leader_tx.send(false);
                        return Err(LeaderElectionError::Lost {
                            namespace: cfg.namespace.clone(),
                            name: cfg.lease_name.clone(),
                            deadline: cfg.renew_deadline,
                        });
                    }
                }
            }
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let now = MicroTime(Timestamp::now());
        let lease_seconds = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let existing = match self.api.get_opt(&self.config.lease_name).await {
            Ok(lease) => lease,
            Err(err) => {
                warn!(%err, "error retrieving lease");
                return Attempt::Failed;
            }
        };
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(lease_seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.unwrap_or_default());
                    Attempt::Held
                }
                Err(err) => {
                    debug!(%err, "creating lease failed (another candidate was faster?)");
                    Attempt::Failed
                }
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(spec.clone());
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let we_hold = holder == self.config.identity;
        if !holder.is_empty() && !we_hold && !self.observed_expired(&spec) {
            return Attempt::HeldByOther(holder);
        }
        let mut new_spec = spec.clone();
        if !we_hold {
            new_spec.acquire_time = Some(now.clone());
            new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        new_spec.holder_identity = Some(self.config.identity.clone());
        new_spec.lease_duration_seconds = Some(lease_seconds);
        new_spec.renew_time = Some(now);
        lease.spec = Some(new_spec);
        // `replace` sends the resourceVersion we read: a concurrent update makes this a 409 Conflict.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.unwrap_or_default());
                Attempt::Held
            }
            Err(err) => {
                debug!(%err, "updating lease failed");
                Attempt::Failed
            }
        }
    }

    /// Records `spec`, restarting the local expiry clock when the record changed.
    fn observe(&mut self, spec: LeaseSpec) {
        let changed = self.observed.as_ref().is_none_or(|(old, _)| *old != spec);
        if changed {
            self.observed = Some((spec, Instant::now()));
        }
    }

    fn observed_expired(&self, spec: &LeaseSpec) -> bool {
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        match &self.observed {
            Some((_, seen)) => seen.elapsed() > duration,
            None => false,
        }
    }

    /// Gives the lease up (empty holder, 1s duration) so a successor need not wait for expiry.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.lease_name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(
                "released lease {}/{}",
                self.config.namespace, self.config.lease_name
            ),
            Err(err) => warn!(%err, "releasing lease failed"),
        }
    }
}

/// client-go waits retryPeriod with up to 20% jitter between campaign attempts.
fn jittered(base: Duration) -> Duration {
    base.mul_f64(1.0 + fastrand::f64() * 0.2)
}

/// `<hostname>_<random hex>`, unique per process.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "ksched".to_string());
    format!("{host}_{:016x}", fastrand::u64(..))
}
