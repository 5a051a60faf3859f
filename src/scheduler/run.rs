//! The scheduler process: builds one framework per profile, starts the informers, the HTTPS
//! endpoint and (optionally) leader election, then runs the scheduling cycle one pod at a time while
//! binding cycles run concurrently, as upstream's `scheduleOne` does.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tracing::{debug, info};

use super::cache::Cache;
use super::cycle::Cycle;
use super::events::{EventQueue, PodReporter, Reporter};
use super::http::{self, HttpState};
use super::informers::{PodHandler, PodKinds, start_informers, watch_nodes, watch_pods};
use super::kube_api::KubeApi;
use super::leader_election::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, Leadership,
};
use super::metrics::{LeaderLabels, Metrics};
use super::queue::{Nominator, SchedulingQueue};
use super::schedule_one::Scheduler;
use crate::config::{Config, EffectiveProfile, PluginAvailability, PluginCatalog};
use crate::framework::background::TaskContext;
use crate::framework::listers::Informer;
use crate::framework::registry::{Handle, Registry};
use crate::framework::runtime::{Framework, FrameworkError, ProfileSpec};
use crate::framework::schedule::Algorithm;
use crate::framework::types::{PodInfo, QueuedPodInfo};
use crate::infra::client::Clients;

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
    pub(crate) takeover: crate::infra::leader_election::Takeover,
}

/// Events still queued at SIGTERM are written within this; the lease release follows, all within
/// a pod's default 30 s grace period.
const EVENT_FLUSH_ON_SHUTDOWN: Duration = Duration::from_secs(15);
/// After a lost lease the API server may not answer: events get a short chance only.
const EVENT_FLUSH_ON_LOSS: Duration = Duration::from_secs(2);

/// The profile as the framework runs it. Plugins ksched has not built yet that come from
/// upstream's default set are left out with a warning (so a default profile runs); one the user
/// enabled explicitly makes `Framework::new` fail with the reason.
pub fn profile_spec(profile: &EffectiveProfile, registry: &Registry) -> ProfileSpec {
    let skip = |name: &str| {
        crate::config::defaults::is_default_plugin(name)
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

/// One framework per profile of `config`, by scheduler name, sharing `handle` (with the
/// configuration's emulated minor and gates); and the object kinds their plugins read (the
/// informers to start). `ksched simulate` builds its frameworks here too.
pub fn build_frameworks(
    config: &Config,
    registry: &Registry,
    handle: &Handle,
) -> Result<(Frameworks, BTreeSet<Informer>), FrameworkError> {
    let mut frameworks = HashMap::new();
    let mut informers = BTreeSet::new();
    let handle = handle.clone().with_emulation(config.emulation.clone());
    for profile in &config.profiles {
        let mut spec = profile_spec(profile, registry);
        super::extender::ignore_managed_resources(&mut spec, &config.extenders);
        let enabled = spec
            .plugins
            .values()
            .flatten()
            .map(|(name, _)| name.as_str());
        let minor = config.emulation.minor();
        informers.extend(
            registry
                .informers_for(enabled)
                .into_iter()
                .filter(|kind| kind.served_at(minor)),
        );
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
        .unwrap_or_else(|| Arc::new(Metrics::of(&config.emulation)));
    let nominator = Arc::new(Nominator::new());
    let api =
        KubeApi::new(clients.binds.clone(), clients.writes.clone()).with_events(events.clone());
    let extenders = super::extender::build_extenders(&config.extenders)?;
    let mut handle = Handle::new(Arc::new(api))
        .with_nominator(nominator.clone())
        .with_emulation(config.emulation.clone());
    handle.extenders = extenders.clone();
    handle.metrics = Some(metrics.framework.clone());
    let (frameworks, informers) = build_frameworks(config, &options.registry, &handle)?;
    // The families the enabled plugins declared (their factories took them from the handle).
    metrics.set_plugin_metrics(handle.plugin_metrics.clone());
    let reporters: HashMap<String, Arc<dyn Reporter>> = frameworks
        .keys()
        .map(|name| {
            let reporter = PodReporter::new(clients.writes.clone(), events.clone(), name);
            (name.clone(), Arc::new(reporter) as Arc<dyn Reporter>)
        })
        .collect();
    let queue = Arc::new(
        scheduling_queue(config, &frameworks)?
            .with_nominator(nominator.clone())
            .with_max_in_unschedulable(options.pod_max_in_unschedulable_pods_duration)
            .with_metrics(metrics.queue.clone()),
    );
    let cache = Arc::new(Cache::default());
    let algorithm = Algorithm::new(config.percentage_of_nodes_to_score)
        .with_extenders(extenders)
        .with_opportunistic_batching(options.opportunistic_batching);
    let cycle = Cycle::new(cache.clone(), nominator, handle.snapshot.clone(), algorithm)
        .with_metrics(metrics.clone());
    let scheduler = Arc::new(Scheduler {
        cycle,
        queue: queue.clone(),
        frameworks,
        reporters,
        handle,
        metrics: metrics.clone(),
        leadership: leadership.clone(),
        scheduled_groups: Arc::default(),
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
        PodHandler::new(cache.clone(), queue.clone(), profiles)
            .with_pod_kinds(PodKinds::new(&informers, scheduler.handle.listers.clone())),
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
    crate::infra::leader_election::task_outcome(joined).map_err(Into::into)
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
