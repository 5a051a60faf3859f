//! One candidate: campaigns for the Lease until it leads, renews it within the renew deadline,
//! and releases it when told to stop or when leadership is lost.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::timeout;
use tracing::{debug, error, info, warn};

use super::health::LeaderHealth;
use super::leadership::{Leadership, NOT_LEADING};
use super::{JITTER_FACTOR, LeaderElectionConfig, LeaderElectionError, LossCause};

/// Why one attempt did not leave us holding the lease.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the lease is held by {0}")]
    HeldByOther(String),
    #[error("another candidate updated the lease first")]
    Conflict,
    #[error("{action} the lease failed: {}", crate::infra::logging::kube_error(.source))]
    Api {
        action: &'static str,
        source: kube::Error,
    },
}

fn api_error(action: &'static str) -> impl FnOnce(kube::Error) -> AttemptError {
    move |source| match source {
        kube::Error::Api(status) if status.code == 409 => AttemptError::Conflict,
        source => AttemptError::Api { action, source },
    }
}

/// One candidate. [`Self::run`] campaigns until leader, renews, and ends when told to stop (then the
/// lease is released) or when leadership is lost.
pub(crate) struct LeaderElector {
    config: LeaderElectionConfig,
    api: Api<Lease>,
    /// The last record we saw and when we saw it change (local clock).
    observed: Option<(LeaseSpec, Instant)>,
    leadership: Leadership,
    health: LeaderHealth,
}

impl LeaderElector {
    pub(crate) fn new(
        client: Client,
        config: LeaderElectionConfig,
    ) -> Result<(Self, Leadership), LeaderElectionError> {
        config.validate()?;
        let leadership = Leadership::new(NOT_LEADING);
        let api = Api::namespaced(client, &config.namespace);
        let elector = Self {
            config,
            api,
            observed: None,
            leadership: leadership.clone(),
            health: LeaderHealth::default(),
        };
        Ok((elector, leadership))
    }

    /// The health check of this candidate (`/healthz/leaderElection`).
    pub(crate) fn health(&self) -> LeaderHealth {
        self.health.clone()
    }

    /// Campaigns, then renews until `stop` turns true or its sender is dropped (then resigns,
    /// releases the lease and returns Ok) or leadership is lost (returns the cause; the lease is
    /// released if the API server still shows us as holder).
    pub(crate) async fn run(
        mut self,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), LeaderElectionError> {
        let cfg = self.config.clone();
        info!(lease = %cfg.lease(), identity = %cfg.identity, "attempting to acquire leader lease");
        let request_timeout = cfg.request_timeout();
        // Campaign. Besides every retry period, look again the moment the lease changes (a
        // watch, when permitted) and the moment the holder's term runs out as observed: a
        // successor takes over one lease duration after the last renewal it saw, not up to two
        // retry periods later.
        let mut changes = lease_changes(self.api.clone(), &cfg.lease_name);
        loop {
            let sent = Instant::now();
            let attempt = tokio::select! {
                r = self.attempt(request_timeout) => r,
                _ = stopped(&mut stop) => return Ok(()),
            };
            match attempt {
                Ok(()) if self.leadership.lead_until(sent + cfg.renew_deadline) => break,
                Ok(()) => {
                    self.release().await;
                    return Ok(());
                }
                Err(AttemptError::HeldByOther(holder)) => {
                    debug!(%holder, "lease is held by another candidate")
                }
                Err(err) => debug!(%err, "failed to acquire lease {}", cfg.lease()),
            }
            // A term that ran out already (the attempt after it failed, say the API server is
            // unreachable) is no reason to look again at once: wait the retry period.
            let expiry = self.observed_expiry().filter(|at| *at > Instant::now());
            tokio::select! {
                _ = tokio::time::sleep(jittered(cfg.retry_period)) => {}
                _ = sleep_until_opt(expiry) => {}
                _ = changes.next() => {}
                _ = stopped(&mut stop) => return Ok(()),
            }
        }
        drop(changes);
        info!(identity = %cfg.identity, "successfully acquired lease {}", cfg.lease());
        // Renew. The deadline races every wait and every attempt.
        let mut last = String::from("none finished");
        loop {
            let lost = |last: String| LossCause::Deadline {
                deadline: cfg.renew_deadline,
                last,
            };
            let Some(deadline) = self.leadership.deadline() else {
                return self.end(lost(last)).await;
            };
            let deadline_passed = tokio::time::sleep_until(deadline.into());
            tokio::pin!(deadline_passed);
            tokio::select! {
                _ = tokio::time::sleep(cfg.retry_period) => {}
                _ = &mut deadline_passed => return self.end(lost(last)).await,
                _ = stopped(&mut stop) => return self.step_down().await,
            }
            let sent = Instant::now();
            let attempt = tokio::select! {
                r = self.attempt(request_timeout) => r,
                _ = &mut deadline_passed => Err(AttemptError::Timeout(sent.elapsed())),
                _ = stopped(&mut stop) => return self.step_down().await,
            };
            match attempt {
                Ok(()) if self.leadership.lead_until(sent + cfg.renew_deadline) => {
                    debug!("renewed lease {}", cfg.lease());
                }
                Ok(()) => {
                    let late = format!(
                        "renewed after the deadline, {:?} after sending",
                        sent.elapsed()
                    );
                    return self.end(lost(late)).await;
                }
                Err(AttemptError::HeldByOther(holder)) => {
                    return self.end(LossCause::TakenOver { holder }).await;
                }
                Err(err) => {
                    warn!(%err, "failed to renew lease {}", cfg.lease());
                    last = err.to_string();
                }
            }
        }
    }

    /// The term ended: resigned (shutting down: release, Ok) or lost (`cause`).
    async fn end(&mut self, cause: LossCause) -> Result<(), LeaderElectionError> {
        if self.leadership.resigned() {
            self.release().await;
            return Ok(());
        }
        self.lose(cause).await
    }

    /// Leadership ended without being asked to: stop acting at once, then give the lease up if the
    /// API server still names us (a successor need not wait for expiry).
    async fn lose(&mut self, cause: LossCause) -> Result<(), LeaderElectionError> {
        self.leadership.stop_leading();
        let lease = self.config.lease();
        error!(%cause, "stopped leading: lost the lease {lease}");
        self.release().await;
        Err(LeaderElectionError::Lost { lease, cause })
    }

    async fn step_down(&mut self) -> Result<(), LeaderElectionError> {
        self.leadership.resign();
        self.release().await;
        Ok(())
    }

    /// One acquire-or-renew within `within`.
    async fn attempt(&mut self, within: Duration) -> Result<(), AttemptError> {
        timeout(within, self.try_acquire_or_renew())
            .await
            .unwrap_or(Err(AttemptError::Timeout(within)))
    }

    async fn try_acquire_or_renew(&mut self) -> Result<(), AttemptError> {
        let now = MicroTime(Timestamp::now());
        let lease_seconds = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let existing = self
            .api
            .get_opt(&self.config.lease_name)
            .await
            .map_err(api_error("reading"))?;
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
            let created = self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .map_err(api_error("creating"))?;
            self.observe(created.spec.unwrap_or_default());
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(spec.clone());
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let we_hold = holder == self.config.identity;
        let stopped = self
            .config
            .takeover
            .as_ref()
            .is_some_and(|t| t.applies_to(&holder));
        if !holder.is_empty() && !we_hold && !stopped && !self.observed_expired(&spec) {
            return Err(AttemptError::HeldByOther(holder));
        }
        if stopped && !we_hold {
            info!(%holder, "taking over the lease from a holder that stopped with its operator");
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
        let updated = self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
            .map_err(api_error("updating"))?;
        self.observe(updated.spec.unwrap_or_default());
        Ok(())
    }

    /// Records `spec`, restarting the local expiry clock when the record changed.
    fn observe(&mut self, spec: LeaseSpec) {
        let changed = self.observed.as_ref().is_none_or(|(old, _)| *old != spec);
        if changed {
            let now = Instant::now();
            self.health.observe(&self.config, &spec, now);
            self.observed = Some((spec, now));
        }
    }

    /// When the holder's term runs out, as this candidate observed it: a moment after its last
    /// seen change plus the lease duration.
    fn observed_expiry(&self) -> Option<Instant> {
        let (spec, seen) = self.observed.as_ref()?;
        if spec
            .holder_identity
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            return None;
        }
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        Some(*seen + duration + Duration::from_millis(10))
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

    /// Gives the lease up (empty holder, 1 s duration) if the API server still names us, within
    /// the request timeout.
    async fn release(&mut self) {
        let within = self.config.request_timeout();
        match timeout(within, self.try_release()).await {
            Ok(Ok(true)) => info!("released lease {}", self.config.lease()),
            Ok(Ok(false)) => {}
            Ok(Err(err)) => warn!(%err, "releasing lease {} failed", self.config.lease()),
            Err(_) => warn!(
                "releasing lease {} failed: {}",
                self.config.lease(),
                AttemptError::Timeout(within)
            ),
        }
    }

    async fn try_release(&mut self) -> Result<bool, AttemptError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.lease_name)
            .await
            .map_err(api_error("reading"))?
        else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
            .map_err(api_error("releasing"))?;
        Ok(true)
    }
}

/// The outcome of an elector run on a task of its own: a task that panicked or was cancelled counts
/// as ended (the caller stops leading either way).
pub(crate) fn task_outcome(
    joined: Result<Result<(), LeaderElectionError>, tokio::task::JoinError>,
) -> Result<(), LeaderElectionError> {
    joined.unwrap_or(Ok(()))
}

/// Sleeps until `at`, forever when None.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// One item per change of the Lease `name` (created, renewed, taken, deleted). Without permission
/// to watch it, nothing ever comes (the campaign polls every retry period).
fn lease_changes(api: Api<Lease>, name: &str) -> futures::stream::BoxStream<'static, ()> {
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .filter_map(|event| async move {
            matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))
            )
            .then_some(())
        })
        .boxed()
}

/// Resolves when `stop` turns true or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// client-go waits retryPeriod with up to 20% jitter between campaign attempts.
fn jittered(base: Duration) -> Duration {
    base.mul_f64(1.0 + fastrand::f64() * (JITTER_FACTOR - 1.0))
}

/// `<hostname>_<random hex>`, unique per process.
pub(crate) fn default_identity() -> String {
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

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::*;

    /// An elector whose API server never answers gives up each attempt at the request timeout and
    /// never leads; stopping it returns at once.
    #[tokio::test]
    async fn a_hung_api_server_bounds_every_attempt() {
        let hung = hung_api_server().await;
        let client =
            Client::try_from(kube::Config::new(format!("http://{hung}").parse().unwrap())).unwrap();
        let mut cfg = config(4, 3, 1);
        cfg.renew_deadline = Duration::from_secs(2);
        let (mut elector, leadership) = LeaderElector::new(client, cfg).unwrap();
        let start = Instant::now();
        let err = elector
            .attempt(Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(err, AttemptError::Timeout(_)), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(!leadership.is_leader());
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(elector.run(stop));
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop_tx.send(true).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(3), task).await;
        assert!(matches!(result, Ok(Ok(Ok(())))));
    }

    /// A TCP listener that accepts connections and never answers.
    async fn hung_api_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        addr
    }
}
