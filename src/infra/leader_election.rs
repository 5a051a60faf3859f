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
//! moment it passes, and [`Leadership::watch`] is the same as a `watch` signal.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// client-go's `JitterFactor`: campaign attempts wait `retryPeriod` plus up to 20 %, and the renew
/// deadline must leave room for that.
const JITTER_FACTOR: f64 = 1.2;

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
    fn applies_to(&self, holder: &str) -> bool {
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

    fn lease(&self) -> String {
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

/// `until` encodings besides a deadline (nanoseconds after `base`, between the two). A term is
/// one-shot: once lost or resigned it never leads again (a new elector campaigns anew).
const NOT_LEADING: u64 = 0;
const LOST: u64 = u64::MAX - 2;
const ALWAYS: u64 = u64::MAX - 1;
const RESIGNED: u64 = u64::MAX;

struct LeadershipState {
    base: Instant,
    until: AtomicU64,
    signal: watch::Sender<bool>,
    /// A leadership this one lives within (an Embedded scheduler's, within its operator's): it
    /// ends the moment the parent's does.
    parent: std::sync::OnceLock<Leadership>,
}

/// Whether this process may act as leader, shared by everything that acts on it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Leadership(Arc<LeadershipState>);

/// What [`Leadership`] holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    NotLeading,
    Until(Instant),
    Always,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Leadership").field(&self.term()).finish()
    }
}

impl Leadership {
    fn new(until: u64) -> Self {
        let (signal, _) = watch::channel(until == ALWAYS);
        Self(Arc::new(LeadershipState {
            base: Instant::now(),
            until: AtomicU64::new(until),
            signal,
            parent: std::sync::OnceLock::new(),
        }))
    }

    /// Makes this leadership end with `parent`'s: leading only while both lead, its deadline never
    /// later than the parent's (so an elector renewing it stops at the parent's deadline too).
    pub(crate) fn within(&self, parent: Leadership) {
        let _ = self.0.parent.set(parent);
    }

    fn parent(&self) -> Option<&Leadership> {
        self.0.parent.get()
    }

    /// Leadership of a process that runs without leader election: leading until [`Self::resign`].
    pub(crate) fn always() -> Self {
        Self::new(ALWAYS)
    }

    fn term(&self) -> Term {
        let own = match self.0.until.load(Ordering::Acquire) {
            NOT_LEADING | LOST | RESIGNED => Term::NotLeading,
            ALWAYS => Term::Always,
            nanos => {
                let until = self.0.base + Duration::from_nanos(nanos);
                if Instant::now() < until {
                    Term::Until(until)
                } else {
                    Term::NotLeading
                }
            }
        };
        match (own, self.parent().map(Leadership::term)) {
            (_, Some(Term::NotLeading)) | (Term::NotLeading, _) => Term::NotLeading,
            (own, None | Some(Term::Always)) => own,
            (Term::Always, Some(parent)) => parent,
            (Term::Until(a), Some(Term::Until(b))) => Term::Until(a.min(b)),
        }
    }

    /// Leading right now: the renew deadline has not passed (checked here, on the clock).
    pub(crate) fn is_leader(&self) -> bool {
        self.term() != Term::NotLeading
    }

    /// A `watch` of [`Self::is_leader`]: turns true when the lease is acquired and false the moment
    /// the renew deadline passes, the lease is taken over, or [`Self::resign`] is called.
    pub(crate) fn watch(&self) -> watch::Receiver<bool> {
        self.0.signal.subscribe()
    }

    /// Resolves once leading (at once when leading now).
    pub(crate) async fn acquired(&self) {
        let mut signal = self.watch();
        while !self.is_leader() {
            if signal.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once not leading (at once when not leading now), on this process's clock: a stalled
    /// elector task cannot delay it past the deadline.
    pub(crate) async fn lost(&self) {
        let mut signal = self.watch();
        loop {
            let until = match self.term() {
                Term::NotLeading => return,
                Term::Until(until) => Some(until),
                Term::Always => None,
            };
            let deadline = async {
                match until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => std::future::pending().await,
                }
            };
            let parent_lost = async {
                match self.parent() {
                    Some(p) => Box::pin(p.lost()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = deadline => {}
                _ = parent_lost => {}
                changed = signal.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Stops acting as leader for good (shutting down): [`Self::is_leader`] is false from now on,
    /// whatever the elector renews. The elector releases the lease when told to stop.
    pub(crate) fn resign(&self) {
        self.0.until.store(RESIGNED, Ordering::Release);
        self.0.signal.send_replace(false);
    }

    /// Leads until `until`: starts the term or extends it while it lasts; false once it ended (the
    /// deadline passed, lost or resigned).
    fn lead_until(&self, until: Instant) -> bool {
        let nanos = |at: Instant| {
            u64::try_from(at.saturating_duration_since(self.0.base).as_nanos())
                .unwrap_or(LOST - 1)
                .clamp(1, LOST - 1)
        };
        let (until, now) = (nanos(until), nanos(Instant::now()));
        let set = self
            .0
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur == NOT_LEADING || (cur < LOST && now < cur)).then_some(until)
            })
            .is_ok();
        if set {
            self.0
                .signal
                .send_if_modified(|leading| !std::mem::replace(leading, true));
        }
        set
    }

    /// Ends the term as lost (unless resigned already).
    fn stop_leading(&self) {
        let _ = self
            .0
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur != RESIGNED).then_some(LOST)
            });
        self.0.signal.send_replace(false);
    }

    fn resigned(&self) -> bool {
        self.0.until.load(Ordering::Acquire) == RESIGNED
    }

    /// The deadline of the current term, if leading on a lease.
    fn deadline(&self) -> Option<Instant> {
        match self.term() {
            Term::Until(until) => Some(until),
            _ => None,
        }
    }
}

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
    fn observe(&self, config: &LeaderElectionConfig, spec: &LeaseSpec, seen: Instant) {
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
    use super::*;

    fn config(lease: u64, renew: u64, retry: u64) -> LeaderElectionConfig {
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

    #[tokio::test]
    async fn leadership_ends_at_the_deadline_on_its_own() {
        let leadership = Leadership::new(NOT_LEADING);
        assert!(!leadership.is_leader());
        let signal = leadership.watch();
        assert!(leadership.lead_until(Instant::now() + Duration::from_millis(300)));
        assert!(leadership.is_leader());
        assert!(*signal.borrow());
        let start = Instant::now();
        // Nothing renews: `lost` resolves at the deadline, and `is_leader` agrees without any task.
        tokio::time::timeout(Duration::from_secs(5), leadership.lost())
            .await
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert!(!leadership.is_leader());
    }

    #[tokio::test]
    async fn a_renewal_moves_the_deadline() {
        let leadership = Leadership::new(NOT_LEADING);
        leadership.lead_until(Instant::now() + Duration::from_millis(200));
        let lost = leadership.clone();
        let waiter = tokio::spawn(async move { lost.lost().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        leadership.lead_until(Instant::now() + Duration::from_millis(600));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!waiter.is_finished(), "lost before the renewed deadline");
        assert!(leadership.is_leader());
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!leadership.is_leader());
    }

    #[tokio::test]
    async fn a_term_that_ended_is_not_extended() {
        let leadership = Leadership::new(NOT_LEADING);
        assert!(leadership.lead_until(Instant::now() + Duration::from_millis(100)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // A renewal answered after the deadline does not bring leadership back.
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!leadership.is_leader());
        leadership.stop_leading();
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!*leadership.watch().borrow());
    }

    #[tokio::test]
    async fn resigning_is_final() {
        let leadership = Leadership::new(NOT_LEADING);
        leadership.lead_until(Instant::now() + Duration::from_secs(60));
        let signal = leadership.watch();
        leadership.resign();
        assert!(!leadership.is_leader());
        assert!(!*signal.borrow());
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(60)));
        assert!(!leadership.is_leader());
        tokio::time::timeout(Duration::from_secs(1), leadership.lost())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_leadership_within_another_ends_at_the_others_deadline() {
        let operator = Leadership::new(NOT_LEADING);
        let embedded = Leadership::new(NOT_LEADING);
        embedded.within(operator.clone());
        assert!(embedded.lead_until(Instant::now() + Duration::from_secs(60)));
        // The operator does not lead: neither does its Embedded scheduler.
        assert!(!embedded.is_leader());
        let operator_until = Instant::now() + Duration::from_millis(300);
        assert!(operator.lead_until(operator_until));
        assert!(embedded.is_leader());
        assert_eq!(embedded.deadline(), Some(operator_until));
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), embedded.lost())
            .await
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert!(!embedded.is_leader());
        // Its own renewals cannot bring it back while the operator does not lead.
        embedded.lead_until(Instant::now() + Duration::from_secs(60));
        assert!(!embedded.is_leader());
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

    #[tokio::test]
    async fn without_election_a_process_leads_until_it_resigns() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert!(*leadership.watch().borrow());
        tokio::time::timeout(Duration::from_secs(1), leadership.acquired())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), leadership.lost())
                .await
                .is_err()
        );
        leadership.resign();
        assert!(!leadership.is_leader());
    }

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
