//! The scheduler process: builds one framework per profile, starts the informers, the HTTPS
//! endpoint and (optionally) leader election, then runs the scheduling cycle one pod at a time while
//! binding cycles run concurrently, as upstream's `scheduleOne` does.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{debug, error, info};

use super::api::KubeApi;
use super::cache::Cache;
use super::client::Clients;
use super::events::{EventQueue, PodReporter, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE};
use super::http::{self, HttpState};
use super::informers::{PodHandler, start_informers, watch_nodes, watch_pods};
use super::leader_election::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, Leadership,
};
use super::metrics::{AttemptLabels, CacheLabels, LeaderLabels, Metrics, SliLabels};
use super::queue::{Nominator, SchedulingQueue};
use crate::config::{Config, EffectiveProfile, PluginAvailability, PluginCatalog};
use crate::framework::background::TaskContext;
use crate::framework::events::EVENT_ASSIGNED_POD_DELETE;
use crate::framework::extender::Extender;
use crate::framework::interface::{Code, CycleState, NominatingMode, Status};
use crate::framework::listers::Informer;
use crate::framework::metrics::OPERATION_BINDING;
use crate::framework::registry::{Handle, Registry};
use crate::framework::runtime::{Framework, FrameworkError, ProfileSpec};
use crate::framework::schedule::{Algorithm, FitError, ScheduleError};
use crate::framework::types::{AssignedPod, PodInfo, PodObject, PodView, QueuedPodInfo, Snapshot};

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Framework(#[from] FrameworkError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error(transparent)]
    LeaderElection(#[from] LeaderElectionError),
    #[error("the configuration has no profile")]
    NoProfiles,
    #[error(transparent)]
    Extender(#[from] super::extender::ExtenderSetupError),
}

/// Everything `run` needs besides the client.
pub struct SchedulerOptions {
    pub config: Config,
    pub registry: Arc<Registry>,
    /// HTTPS endpoint (`0.0.0.0:10259` by default); `None` serves nothing (embedded use).
    pub secure_address: Option<SocketAddr>,
    /// How the endpoint serves (TLS, authentication and authorization).
    pub endpoint: http::Endpoint,
    /// Where the scheduler's metrics go; `None`: a registry of its own with the process's and
    /// the API clients' metrics. The operator passes one per Embedded scheduler.
    pub metrics: Option<Arc<Metrics>>,
    /// Leader-election identity (`<hostname>_<random>`).
    pub identity: String,
    /// `/configz` body.
    pub configz: String,
    /// How long a pod may wait in the unschedulable pool without an event that may help it
    /// (`--pod-max-in-unschedulable-pods-duration`).
    pub pod_max_in_unschedulable_pods_duration: Duration,
    /// The `OpportunisticBatching` feature gate: pods of the same signature share Filter and Score
    /// work (see `framework::batch`).
    pub opportunistic_batching: bool,
    /// Run inside an operator (`mode: Embedded`): the scheduler leads only while its operator
    /// does, and takes its Lease at once from an Embedded scheduler of an operator that stopped.
    pub(crate) embedded_in: Option<EmbeddedIn>,
}

/// The operator an Embedded scheduler runs in.
#[derive(Debug, Clone)]
pub(crate) struct EmbeddedIn {
    /// The operator's leadership: the scheduler's ends with it.
    pub(crate) operator: Leadership,
    /// Holders of the profile's Lease that stopped with their operator.
    pub(crate) takeover: crate::leader_election::Takeover,
}

/// Events still queued at SIGTERM are written within this; the lease release follows, all within
/// a pod's default 30 s grace period.
const EVENT_FLUSH_ON_SHUTDOWN: Duration = Duration::from_secs(15);
/// After a lost lease the API server may not answer: events get a short chance only.
const EVENT_FLUSH_ON_LOSS: Duration = Duration::from_secs(2);

/// The scheduler's scheduling and binding cycles over the parts they share (upstream's
/// `Scheduler` and its `pkg/scheduler/schedule_one.go`: `scheduleOne`, `schedulingCycle`,
/// `bindingCycle`, `handleSchedulingFailure`).
struct Scheduler {
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    frameworks: HashMap<String, Arc<Framework>>,
    reporters: HashMap<String, PodReporter>,
    handle: Handle,
    algorithm: Mutex<Algorithm>,
    metrics: Arc<Metrics>,
    leadership: Leadership,
}

/// The profile as the framework runs it. Plugins ksched has not built yet that come from
/// upstream's default set are left out with a warning (so a default profile runs); one the user
/// enabled explicitly makes `Framework::new` fail with the reason.
pub fn profile_spec(profile: &EffectiveProfile, registry: &Registry) -> ProfileSpec {
    let defaults: HashSet<&str> = crate::config::defaults::DEFAULT_MULTI_POINT
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let skip = |name: &str| {
        defaults.contains(name)
            && matches!(
                registry.availability(name),
                PluginAvailability::NotBuiltYet { .. }
            )
    };
    let mut spec = ProfileSpec::from(profile);
    for list in spec.plugins.values_mut() {
        list.retain(|(name, _)| !skip(name));
    }
    spec.args.retain(|name, _| !skip(name));
    debug!(profile = %profile.scheduler_name, "default plugins not built in ksched yet are skipped");
    spec
}

/// The frameworks of a configuration, by scheduler name.
pub type Frameworks = HashMap<String, Arc<Framework>>;

/// One framework per profile of `config`, by scheduler name, sharing `handle`; and the object kinds
/// their plugins read (the informers to start). `ksched simulate` builds its frameworks here too.
pub fn build_frameworks(
    config: &Config,
    registry: &Registry,
    handle: &Handle,
) -> Result<(Frameworks, BTreeSet<Informer>), FrameworkError> {
    let mut frameworks = HashMap::new();
    let mut informers = BTreeSet::new();
    for profile in &config.profiles {
        let mut spec = profile_spec(profile, registry);
        super::extender::ignore_managed_resources(&mut spec, &config.extenders);
        let enabled = spec
            .plugins
            .values()
            .flatten()
            .map(|(name, _)| name.as_str());
        informers.extend(registry.informers_for(enabled));
        let fwk = Framework::new(&spec, registry, handle.clone())?;
        frameworks.insert(profile.scheduler_name.clone(), Arc::new(fwk));
    }
    Ok((frameworks, informers))
}

/// The queue for `frameworks`: ordered by the first profile's QueueSort (upstream requires every
/// profile to use the same), gated by each pod's own profile's PreEnqueue plugins, and requeueing
/// a profile's pods on the events its plugins registered.
pub fn scheduling_queue(
    config: &Config,
    frameworks: &Frameworks,
) -> Result<SchedulingQueue, SchedulerError> {
    let first = config.profiles.first().ok_or(SchedulerError::NoProfiles)?;
    let sort_fwk = frameworks
        .get(&first.scheduler_name)
        .cloned()
        .ok_or(SchedulerError::NoProfiles)?;
    let gate_fwks = frameworks.clone();
    let hints = frameworks
        .iter()
        .map(|(name, fwk)| (name.clone(), fwk.queueing_hints().clone()))
        .collect();
    Ok(SchedulingQueue::new(
        Arc::new(move |a: &QueuedPodInfo, b: &QueuedPodInfo| sort_fwk.queue_sort_less(a, b)),
        Arc::new(move |pod: &PodInfo| {
            let fwk = gate_fwks.get(pod.scheduler_name())?;
            let status = fwk.run_pre_enqueue_plugins(pod);
            (!status.is_success()).then(|| status.plugin().unwrap_or("PreEnqueue").to_string())
        }),
        Duration::from_secs(u64::try_from(config.pod_initial_backoff_seconds).unwrap_or(1)),
        Duration::from_secs(u64::try_from(config.pod_max_backoff_seconds).unwrap_or(10)),
    )
    .with_queueing_hints(hints))
}

/// Runs the scheduler until `shutdown` fires (Ok) or leadership is lost (Err).
pub async fn run(
    client: Client,
    options: SchedulerOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), SchedulerError> {
    let config = &options.config;
    // Leadership first: the clients that act as leader send only while it holds.
    let le = &config.leader_election;
    let (elector, leadership) = if le.leader_elect {
        let mut elector_config = elector_config(config, &options.identity);
        elector_config.takeover = options.embedded_in.as_ref().map(|e| e.takeover.clone());
        let (elector, leadership) = LeaderElector::new(client.clone(), elector_config)?;
        if let Some(e) = &options.embedded_in {
            leadership.within(e.operator.clone());
        }
        (Some(elector), leadership)
    } else {
        (None, Leadership::always())
    };
    // The elector keeps the caller's client: renewals never wait behind anything.
    let cc = &config.client_connection;
    let clients = Clients::new(&client, cc.qps, cc.burst, &leadership);
    // One queue serves the events of every profile.
    let (events, event_flusher) = EventQueue::start(clients.events.clone(), &options.identity);
    let metrics = options
        .metrics
        .clone()
        .unwrap_or_else(|| Arc::new(Metrics::new()));
    let nominator = Arc::new(Nominator::new());
    let api =
        KubeApi::new(clients.binds.clone(), clients.writes.clone()).with_events(events.clone());
    let extenders = super::extender::build_extenders(&config.extenders)?;
    let mut handle = Handle::new(Arc::new(api)).with_nominator(nominator.clone());
    handle.extenders = extenders.clone();
    handle.metrics = Some(metrics.framework.clone());
    let (frameworks, informers) = build_frameworks(config, &options.registry, &handle)?;
    // The families the enabled plugins declared (their factories took them from the handle).
    metrics.set_plugin_metrics(handle.plugin_metrics.clone());
    let reporters: HashMap<String, PodReporter> = frameworks
        .keys()
        .map(|name| {
            let reporter = PodReporter::new(clients.writes.clone(), events.clone(), name);
            (name.clone(), reporter)
        })
        .collect();
    let queue = Arc::new(
        scheduling_queue(config, &frameworks)?
            .with_nominator(nominator)
            .with_max_in_unschedulable(options.pod_max_in_unschedulable_pods_duration)
            .with_metrics(metrics.queue.clone()),
    );
    let cache = Arc::new(Cache::default());
    let scheduler = Arc::new(Scheduler {
        cache: cache.clone(),
        queue: queue.clone(),
        frameworks,
        reporters,
        handle,
        algorithm: Mutex::new(
            Algorithm::new(config.percentage_of_nodes_to_score)
                .with_extenders(extenders)
                .with_opportunistic_batching(options.opportunistic_batching),
        ),
        metrics: metrics.clone(),
        leadership: leadership.clone(),
    });

    let http_state = Arc::new(HttpState::new(
        metrics.clone(),
        options.configz.clone(),
        elector.as_ref().map(LeaderElector::health),
        shutdown.clone(),
        config.enable_profiling,
    ));
    if let Some(addr) = options.secure_address {
        http::serve(
            addr,
            &options.endpoint,
            http_state.clone(),
            shutdown.clone(),
        )
        .await?;
    }

    // Informers.
    let profiles: HashSet<String> = config
        .profiles
        .iter()
        .map(|p| p.scheduler_name.clone())
        .collect();
    let (pods_synced_tx, mut pods_synced) = watch::channel(false);
    let (nodes_synced_tx, mut nodes_synced) = watch::channel(false);
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(watch_pods(
        clients.informers.clone(),
        PodHandler::new(cache.clone(), queue.clone(), profiles),
        pods_synced_tx,
    )));
    tasks.push(tokio::spawn(watch_nodes(
        clients.informers.clone(),
        cache.clone(),
        queue.clone(),
        nodes_synced_tx,
    )));
    let (extra_tasks, mut extra_synced) = start_informers(
        &clients.informers,
        &informers,
        &scheduler.handle.listers,
        &queue,
    );
    tasks.extend(extra_tasks);
    let all_synced = async {
        pods_synced.wait_for(|s| *s).await.map(|_| ())?;
        nodes_synced.wait_for(|s| *s).await.map(|_| ())?;
        for rx in &mut extra_synced {
            rx.wait_for(|s| *s).await.map(|_| ())?;
        }
        Ok::<(), watch::error::RecvError>(())
    };
    tokio::select! {
        r = all_synced => if r.is_err() { return Ok(()); },
        _ = shutdown.changed() => return Ok(()),
    }
    http_state.ready.store(true, Ordering::Release);
    info!("caches synced");
    tasks.push(tokio::spawn(scheduler.clone().housekeeping()));
    // The plugins' work outside the scheduling cycle; each task writes only while we lead.
    let task_context = TaskContext {
        api: scheduler.handle.api.clone(),
        leading: leadership.watch(),
    };
    for task in scheduler.handle.tasks.take() {
        debug!(task = task.name(), "starting background task");
        tasks.push(tokio::spawn(task.run(task_context.clone())));
    }

    // Leader election. The elector is stopped by this function, after scheduling has stopped and
    // the events are written, so the lease is released last.
    let (stop_elector, elector_stop) = watch::channel(false);
    let mut elector_task = None;
    if let Some(elector) = elector {
        let gauge = metrics
            .leader_election_master_status
            .get_or_create(&LeaderLabels {
                name: le.resource_name.clone(),
            })
            .clone();
        gauge.set(0);
        let mut task = tokio::spawn(elector.run(elector_stop));
        tokio::select! {
            _ = leadership.acquired() => {}
            r = &mut task => return elector_result(r),
            _ = shutdown.changed() => {
                let _ = stop_elector.send(true);
                return elector_result(task.await);
            }
        }
        gauge.set(1);
        let mut leading = leadership.watch();
        tasks.push(tokio::spawn(async move {
            let _ = leading.wait_for(|l| !*l).await;
            gauge.set(0);
        }));
        elector_task = Some(task);
    }

    info!(profiles = ?scheduler.frameworks.keys().collect::<Vec<_>>(), "starting to schedule");
    let mut scheduling = tokio::spawn(scheduler.clone().schedule_all());
    let lost = tokio::select! {
        _ = shutdown.changed() => false,
        // The renew deadline passed (on this process's clock) or the lease was taken over.
        _ = leadership.lost() => true,
        _ = &mut scheduling => false,
    };
    // Stop acting as leader: no new scheduling cycle; binding cycles not yet started see it, and
    // the gated clients send no bind, patch or delete from here on.
    if !lost {
        leadership.resign();
    }
    queue.close();
    scheduling.abort();
    for t in tasks {
        t.abort();
    }
    let flush_within = if lost {
        EVENT_FLUSH_ON_LOSS
    } else {
        EVENT_FLUSH_ON_SHUTDOWN
    };
    event_flusher.flush(flush_within).await;
    let Some(elector) = elector_task else {
        return Ok(());
    };
    // On a loss the elector ends by itself (its own deadline) with the cause; on shutdown it is
    // told to stop, and releases the lease last.
    if !lost {
        let _ = stop_elector.send(true);
    }
    elector_result(elector.await)
}

fn elector_result(
    joined: Result<Result<(), LeaderElectionError>, tokio::task::JoinError>,
) -> Result<(), SchedulerError> {
    crate::leader_election::task_outcome(joined).map_err(Into::into)
}

/// The elector's settings from the configuration's `leaderElection`.
fn elector_config(config: &Config, identity: &str) -> LeaderElectionConfig {
    let le = &config.leader_election;
    LeaderElectionConfig {
        namespace: le.resource_namespace.clone(),
        lease_name: le.resource_name.clone(),
        identity: identity.to_string(),
        lease_duration: le
            .lease_duration
            .to_std()
            .unwrap_or(Duration::from_secs(15)),
        renew_deadline: le
            .renew_deadline
            .to_std()
            .unwrap_or(Duration::from_secs(10)),
        retry_period: le.retry_period.to_std().unwrap_or(Duration::from_secs(2)),
        takeover: None,
    }
}

/// One pod's scheduling attempt: what its cycles and the failure handler share.
struct Attempt {
    qpi: QueuedPodInfo,
    /// The framework of the pod's profile.
    fwk: Arc<Framework>,
    started: Instant,
}

/// What the scheduling cycle hands to the binding cycle: the pod assumed and reserved on `host`.
struct Reserved {
    state: CycleState,
    assumed: Arc<PodInfo>,
    host: String,
}

/// Why an attempt failed: what the failure handler reports and how the pod is requeued.
#[derive(Default)]
struct Failure {
    /// Unschedulable: the pod waits for a cluster event; otherwise an error, retried with
    /// backoff.
    unschedulable: bool,
    message: String,
    /// The node PostFilter nominated the pod to (`""` clears a nomination); `None` leaves it.
    nominated: Option<String>,
    /// The plugins that rejected the pod, and those that answered Pending: only the events they
    /// registered requeue it. None for an error, which any event requeues.
    unschedulable_plugins: BTreeSet<String>,
    pending_plugins: BTreeSet<String>,
}

impl Failure {
    fn unschedulable(message: String) -> Failure {
        Failure {
            unschedulable: true,
            message,
            ..Failure::default()
        }
    }

    fn error(message: String) -> Failure {
        Failure {
            message,
            ..Failure::default()
        }
    }

    /// A plugin's status: rejected means unschedulable (by that plugin), anything else an error.
    fn from_status(status: &Status) -> Failure {
        let mut failure = Failure {
            unschedulable: status.is_rejected(),
            message: status.message(),
            ..Failure::default()
        };
        if let Some(plugin) = status.plugin().filter(|_| status.is_rejected()) {
            let plugins = if status.code() == Code::Pending {
                &mut failure.pending_plugins
            } else {
                &mut failure.unschedulable_plugins
            };
            plugins.insert(plugin.to_string());
        }
        failure
    }
}

impl Scheduler {
    /// Schedules the pods the queue hands out, one at a time, until it closes.
    async fn schedule_all(self: Arc<Self>) {
        while let Some(qpi) = self.queue.pop().await {
            self.schedule_one(qpi).await;
        }
    }

    /// Every second: backoff and unschedulable flushes, assumed-pod expiry, the cache-size gauge.
    async fn housekeeping(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            self.queue.flush();
            for expired in self.cache.cleanup_expired_assumed(Instant::now()) {
                debug!(pod = %expired.pod.key(), "expired assumed pod removed");
                let old = PodObject::assigned(expired.pod, &expired.node).into_event_object();
                self.queue.move_all_to_active_or_backoff(
                    &EVENT_ASSIGNED_POD_DELETE,
                    Some(old),
                    None,
                );
            }
            let sizes = self.cache.sizes();
            for (kind, n) in [
                ("nodes", sizes.nodes),
                ("pods", sizes.pods),
                ("assumed_pods", sizes.assumed_pods),
            ] {
                self.metrics
                    .cache_size
                    .get_or_create(&CacheLabels {
                        r#type: kind.into(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// One pod: the scheduling cycle, then a binding cycle that runs concurrently with the next
    /// pod's scheduling cycle (upstream's `scheduleOne`).
    async fn schedule_one(self: &Arc<Self>, qpi: QueuedPodInfo) {
        let key = qpi.pod_info.key();
        let Some(fwk) = self.frameworks.get(qpi.pod_info.scheduler_name()).cloned() else {
            self.queue.done(&key);
            return;
        };
        if self.cache.is_assumed(&key) {
            self.queue.done(&key);
            return;
        }
        let mut attempt = Attempt {
            qpi,
            fwk,
            started: Instant::now(),
        };
        match self.scheduling_cycle(&mut attempt) {
            Ok(reserved) => {
                let scheduler = self.clone();
                tokio::spawn(scheduler.binding_cycle(attempt, reserved));
            }
            Err(failure) => self.handle_scheduling_failure(attempt, failure).await,
        }
    }

    /// Picks a node, assumes the pod there, reserves, permits (upstream's `schedulingCycle`). On
    /// failure what was reserved is undone; the caller reports the failure.
    fn scheduling_cycle(&self, attempt: &mut Attempt) -> Result<Reserved, Failure> {
        let pod = attempt.qpi.pod_info.clone();
        self.handle
            .snapshot
            .update(|s| self.cache.update_snapshot(s));
        let snapshot = self.handle.snapshot.load();
        let mut state = CycleState::new();
        // Each plugin's duration is measured in a share of the cycles only, as upstream.
        state.set_record_plugin_metrics(self.metrics.framework.sampler.sample());
        let host = self.scheduling_algorithm(attempt, &mut state, &snapshot);
        // From the start of the attempt, snapshot update and PostFilter included, as upstream.
        self.metrics
            .scheduling_algorithm_duration
            .observe(attempt.started.elapsed().as_secs_f64());
        let host = host?;
        drop(snapshot);
        let fwk = &attempt.fwk;

        // Assume: the cache counts the pod on `host` from now on, so the next cycle sees it.
        let assumed = Arc::new(PodInfo::new(Arc::new(with_node_name(&pod.pod, &host))));
        // The pod is counted on its node from now on; a nomination would count it twice.
        self.queue.nominator().delete(&pod.key());
        if let Err(err) = self.cache.assume_pod(&assumed) {
            return Err(Failure::error(err.to_string()));
        }
        let status = fwk.run_reserve_plugins_reserve(&mut state, &assumed, &host);
        if !status.is_success() {
            self.undo_reservation(fwk, &mut state, &assumed, &host);
            return Err(Failure::from_status(&status));
        }
        let status = fwk.run_permit_plugins(&mut state, &assumed, &host);
        if !status.is_success() && !status.is_wait() {
            self.undo_reservation(fwk, &mut state, &assumed, &host);
            return Err(Failure::from_status(&status));
        }
        Ok(Reserved {
            state,
            assumed,
            host,
        })
    }

    /// Filter and Score over the snapshot, and PostFilter when no node fits (upstream's
    /// `schedulingAlgorithm`): the chosen node, or why there is none.
    fn scheduling_algorithm(
        &self,
        attempt: &Attempt,
        state: &mut CycleState,
        snapshot: &Snapshot,
    ) -> Result<String, Failure> {
        let fwk = &attempt.fwk;
        let pod = attempt.qpi.pod_info.clone();
        let result = cpu_bound(|| {
            self.algorithm
                .lock()
                .schedule_pod(fwk, state, &pod, snapshot)
        });
        match result {
            Ok(r) => Ok(r.suggested_host),
            Err(ScheduleError::Fit(fit)) => Err(self.post_filter(fwk, state, &pod, snapshot, fit)),
            Err(ScheduleError::NoNodesAvailable) => Err(Failure::unschedulable(
                "no nodes available to schedule pods".into(),
            )),
            Err(ScheduleError::Internal(status)) => Err(Failure::error(status.message())),
        }
    }

    /// No node fits: PostFilter (preemption) may nominate the pod to a node; the failure carries
    /// the fit error's message with PostFilter's and the nomination.
    fn post_filter(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        mut fit: Box<FitError>,
    ) -> Failure {
        let mut nominated = None;
        if fwk.has_post_filter_plugins() {
            // The dry run is CPU work, and preempting extenders are called synchronously.
            let (res, status) = cpu_bound(|| {
                fwk.run_post_filter_plugins(state, pod, snapshot, &fit.diagnosis.node_to_status)
            });
            if !status.message().is_empty() {
                fit.set_post_filter_message(status.message());
            }
            // Override with a node nominates the pod there; with "" it clears a nomination.
            if let Some(info) = res.map(|r| r.nominating_info)
                && info.mode == NominatingMode::Override
            {
                let node = info.nominated_node_name;
                self.queue.nominator().add_nominated_pod(pod.clone(), &node);
                if !node.is_empty() || !pod.nominated_node_name().is_empty() {
                    nominated = Some(node);
                }
            }
        }
        Failure {
            unschedulable: true,
            message: fit.to_string(),
            nominated,
            unschedulable_plugins: std::mem::take(&mut fit.diagnosis.unschedulable_plugins),
            pending_plugins: std::mem::take(&mut fit.diagnosis.pending_plugins),
        }
    }

    /// Permit wait, PreBind, Bind, PostBind (upstream's `bindingCycle`); on failure the
    /// reservation is undone and the pod requeued.
    async fn binding_cycle(self: Arc<Self>, attempt: Attempt, reserved: Reserved) {
        let Reserved {
            mut state,
            assumed,
            host,
        } = reserved;
        let fwk = attempt.fwk.clone();
        let profile = fwk.profile_name();
        let key = assumed.key();
        let _running = self.metrics.framework.running(OPERATION_BINDING, 1);
        if !self.leadership.is_leader() {
            // Stepping down: this binding cycle never starts; the next leader schedules the pod.
            self.undo_reservation(&fwk, &mut state, &assumed, &host);
            self.queue.done(&key);
            return;
        }
        // NominatedNodeNameForExpectation: when PreBind will act or Permit waits, the pod's node
        // is published as its nominated node before it is bound (autoscalers and users see it
        // coming).
        let pre_flight = fwk.run_pre_bind_pre_flights(&mut state, &assumed, &host);
        let mut status = if pre_flight.is_success() || pre_flight.is_skip() {
            if (pre_flight.is_success() || fwk.will_wait_on_permit(&assumed))
                && let Some(reporter) = self.reporters.get(profile)
            {
                reporter.nominate(&attempt.qpi.pod_info.pod, &host).await;
            }
            fwk.wait_on_permit(&assumed).await
        } else {
            pre_flight
        };
        if status.is_success() {
            status = fwk.run_pre_bind_plugins(&state, &assumed, &host).await;
        }
        if status.is_success() {
            status = match self.extender_binder(&assumed) {
                Some(extender) => bind_through(extender, &assumed, &host).await,
                None => fwk.run_bind_plugins(&state, &assumed, &host).await,
            };
        }
        if !status.is_success() {
            self.undo_reservation(&fwk, &mut state, &assumed, &host);
            // The freed reservation may let other pods fit (upstream: AssignedPodDelete).
            let freed = PodObject::assigned(Arc::new(AssignedPod::from_pod_info(&assumed)), &host);
            let uid = assumed.uid().to_string();
            self.queue.move_matching_to_active_or_backoff(
                &EVENT_ASSIGNED_POD_DELETE,
                Some(freed.into_event_object()),
                None,
                |p| p.uid() != uid,
            );
            self.handle_scheduling_failure(attempt, Failure::from_status(&status))
                .await;
            return;
        }
        self.cache.finish_binding(&key);
        self.queue.done(&key);
        self.record_attempt(profile, "scheduled", attempt.started);
        self.record_scheduled(&attempt.qpi);
        if let Some(reporter) = self.reporters.get(profile) {
            reporter.scheduled(&assumed.pod, &host);
        }
        fwk.run_post_bind_plugins(&state, &assumed, &host).await;
    }

    /// Requeues a pod that did not get scheduled and tells the user why (event +
    /// PodScheduled=False): upstream's `handleSchedulingFailure`, the one place every failed
    /// attempt ends. The status is written before the caller goes on, so the next attempt (which
    /// may bind the pod at once) cannot overtake it.
    async fn handle_scheduling_failure(&self, attempt: Attempt, failure: Failure) {
        let Attempt {
            mut qpi,
            fwk,
            started,
        } = attempt;
        let profile = fwk.profile_name();
        let pod = qpi.pod_info.pod.clone();
        let message = &failure.message;
        if failure.unschedulable {
            self.record_attempt(profile, "unschedulable", started);
            debug!(pod = %qpi.pod_info.key(), %message, "unable to schedule pod; waiting");
        } else {
            self.record_attempt(profile, "error", started);
            error!(pod = %qpi.pod_info.key(), %message, "error scheduling pod; retrying");
        }
        // This attempt's rejecting plugins decide which events requeue the pod.
        qpi.unschedulable_plugins = failure.unschedulable_plugins;
        qpi.pending_plugins = failure.pending_plugins;
        self.queue.add_unschedulable_if_not_present(qpi);
        let Some(reporter) = self.reporters.get(profile) else {
            return;
        };
        let reason = if failure.unschedulable {
            REASON_UNSCHEDULABLE
        } else {
            REASON_SCHEDULER_ERROR
        };
        reporter
            .failed(&pod, reason, message, failure.nominated.as_deref())
            .await;
    }

    /// Unreserve (in reverse order) and forget the assumed pod: the node is free again.
    fn undo_reservation(
        &self,
        fwk: &Framework,
        state: &mut CycleState,
        assumed: &PodInfo,
        host: &str,
    ) {
        fwk.run_reserve_plugins_unreserve(state, assumed, host);
        let _ = self.cache.forget_pod(&assumed.key());
    }

    /// The extender that binds `pod` instead of the Bind plugins: the first binding extender
    /// interested in it (upstream's `extendersBinding`).
    fn extender_binder(&self, pod: &PodInfo) -> Option<Arc<dyn Extender>> {
        self.handle
            .extenders
            .iter()
            .find(|e| e.is_binder() && e.is_interested(pod))
            .cloned()
    }

    /// A bound pod's attempts, and its time from the first attempt (upstream's SLI).
    fn record_scheduled(&self, qpi: &QueuedPodInfo) {
        self.metrics
            .pod_scheduling_attempts
            .observe(f64::from(qpi.attempts));
        if let Some(first) = qpi.initial_attempt_timestamp {
            self.metrics
                .pod_scheduling_sli_duration
                .get_or_create(&SliLabels {
                    attempts: attempts_label(qpi.attempts),
                })
                .observe(first.elapsed().as_secs_f64());
        }
        if qpi.was_flushed_from_unschedulable {
            self.metrics.pod_scheduled_after_flush.inc();
        }
    }

    fn record_attempt(&self, profile: &str, result: &str, started: Instant) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.metrics.schedule_attempts.get_or_create(&labels).inc();
        self.metrics
            .scheduling_attempt_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The `attempts` label of the SLI: the count, capped at `15+` (upstream's `getAttemptsLabel`).
fn attempts_label(attempts: u32) -> String {
    if attempts >= 15 {
        "15+".into()
    } else {
        attempts.to_string()
    }
}

/// Binds through `extender` (a blocking call, off the async workers).
async fn bind_through(extender: Arc<dyn Extender>, pod: &PodInfo, node: &str) -> Status {
    let (ns, name, uid, node) = (
        pod.namespace().to_string(),
        pod.name().to_string(),
        pod.uid().to_string(),
        node.to_string(),
    );
    match tokio::task::spawn_blocking(move || extender.bind(&ns, &name, &uid, &node)).await {
        Ok(Ok(())) => Status::success(),
        Ok(Err(e)) => Status::error(e),
        Err(e) => Status::error(format!("binding through the extender: {e}")),
    }
}

/// A copy of `pod` bound to `node` (what the cache assumes).
pub fn with_node_name(pod: &Pod, node: &str) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    pod
}

/// Runs CPU-heavy work (filter and score over all nodes) without stalling other tasks on a
/// multi-threaded runtime; on a current-thread runtime (embedded in a test) it just runs.
fn cpu_bound<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
