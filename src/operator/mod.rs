//! The operator: reconciles `SchedulerProfile`s into running schedulers (ConfigMap, RBAC, Lease,
//! Deployment or an embedded scheduler) and `LeafClusterPolicy`s into node taints, and warns about
//! pods waiting for a scheduler that does not exist. [`render`] is the pure part; the rest talks to
//! the API server with server-side apply (field manager [`render::FIELD_MANAGER`]).
//!
//! Run it with [`run`] (`ksched operator` does; tests do it in-process with an impersonating client).

pub(crate) mod backoff;
pub mod command;
pub mod embedded;
pub(crate) mod health;
pub(crate) mod host_nodes;
pub mod http;
pub mod in_process;
pub(crate) mod leaf_cluster_policy;
pub mod leaf_render;
pub(crate) mod metrics;
pub(crate) mod render;
pub(crate) mod render_cli;
pub(crate) mod scheduler_profile;
pub(crate) mod status;
#[cfg(any(test, feature = "testing"))]
pub mod status_samples;
pub(crate) mod taints;
pub mod uninstall;
pub(crate) mod unknown_scheduler;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::PluginCatalog;
use crate::emulation::Minor;
use crate::infra::leader_election::{
    LeaderElectionConfig, LeaderElectionError, LeaderElector, Leadership, task_outcome,
};

pub use embedded::{EmbeddedError, EmbeddedSchedulers, NoEmbeddedSchedulers, OperatorTerm};
pub use metrics::metric_families;
pub use render::{
    CLUSTER_PROFILE_PREFIX, FIELD_MANAGER, PROFILE_PREFIX, RenderOptions, Rendered,
    cluster_object_name, object_name, render,
};

/// Finalizer of LeafClusterPolicies: removes the taints the policy added (no owner reference can).
pub const FINALIZER: &str = "ksched.io/cleanup";
/// The finalizer SchedulerProfiles had (same name) before their ClusterRole and ClusterRoleBinding
/// carried owner references; the operator removes it on sight.
pub const LEGACY_FINALIZER: &str = FINALIZER;
/// How long the controllers may take to stop after a shutdown request (reconciles in flight finish).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// The operator's name in an installation (chart, kustomization): its ServiceAccount, Deployment,
/// ClusterRole, ClusterRoleBinding, Roles and RoleBindings, and the replicas' Lease.
pub const OPERATOR_NAME: &str = "ksched-operator";
/// The operator replicas' Lease, in the operator namespace.
pub const LEASE_NAME: &str = OPERATOR_NAME;
/// Scheduler names that are always served (besides every SchedulerProfile's name).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// How the operator runs.
#[derive(Clone)]
pub struct OperatorOptions {
    /// The operator namespace: rendered objects and Leases live here.
    pub namespace: String,
    /// The operator's own image: the default scheduler image of Deployment-mode profiles.
    pub image: String,
    /// Scheduler names served by something other than a profile (besides `default-scheduler`):
    /// pods naming them get no `UnknownSchedulerName` warning.
    pub known_schedulers: Vec<String>,
    /// Which plugins exist (validation of every profile): `framework::registry::Registry::in_tree()`
    /// or a registry with the user's own plugins.
    pub catalog: Arc<dyn PluginCatalog + Send + Sync>,
    /// Identity in events (`reportingInstance`): the pod name, or the host name.
    pub instance: String,
    /// How often a profile's status is refreshed without any change (Lease freshness, pending pods).
    pub resync: Duration,
    /// Readiness and metrics, served by [`http::serve`].
    pub health: Arc<health::OperatorHealth>,
    /// The first wait before objects the API server refused are applied again (doubling per
    /// failure up to `retry_max`; changed objects are applied at once).
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Leader election among replicas (Lease [`LEASE_NAME`] in the operator namespace): only the
    /// leader reconciles and runs Embedded schedulers. None: this process leads alone.
    pub leader_election: Option<LeaderElectionConfig>,
    /// The configuration the client was made from (its cluster address and CA): with it, an
    /// installed operator watches for its uninstall and cleans up after itself ([`uninstall`]).
    /// None: no cleanup on uninstall (`ksched uninstall` does it).
    pub client_config: Option<kube::Config>,
    /// The API server's Kubernetes minor: what a profile without `spec.kubernetesVersion` runs
    /// as (its validation, `status.kubernetesVersion`). None: asked of the API server at start.
    pub cluster_minor: Option<Minor>,
}

impl OperatorOptions {
    pub fn new(
        namespace: impl Into<String>,
        image: impl Into<String>,
        catalog: Arc<dyn PluginCatalog + Send + Sync>,
    ) -> Self {
        OperatorOptions {
            namespace: namespace.into(),
            image: image.into(),
            known_schedulers: Vec::new(),
            catalog,
            instance: std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| "ksched-operator".into()),
            resync: Duration::from_secs(15),
            health: Arc::default(),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(300),
            leader_election: None,
            client_config: None,
            cluster_minor: None,
        }
    }

    pub fn render_options(&self) -> RenderOptions {
        RenderOptions {
            namespace: self.namespace.clone(),
            image: self.image.clone(),
            cluster_minor: self.cluster_minor,
        }
    }
}

impl std::fmt::Debug for OperatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorOptions")
            .field("namespace", &self.namespace)
            .field("image", &self.image)
            .field("known_schedulers", &self.known_schedulers)
            .field("instance", &self.instance)
            .field("resync", &self.resync)
            .field("retry_initial", &self.retry_initial)
            .field("retry_max", &self.retry_max)
            .field("leader_election", &self.leader_election)
            .field("client_config", &self.client_config.is_some())
            .finish_non_exhaustive()
    }
}

/// What can go wrong while reconciling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {}", crate::infra::logging::kube_error(.0))]
    Kube(#[from] kube::Error),
    #[error("{}", finalizer_error(.0))]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("serializing {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("node {node}: still conflicting after {attempts} attempts to update its taints")]
    NodeConflict { node: String, attempts: u32 },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    LeaderElection(#[from] LeaderElectionError),
    #[error("uninstall: {0}")]
    Uninstall(String),
}

/// kube's finalizer error with the API errors inside as [`kube_error`](crate::infra::logging::kube_error)
/// says them (kube's own text prints the whole Status struct).
fn finalizer_error(e: &kube::runtime::finalizer::Error<Error>) -> String {
    use crate::infra::logging::kube_error;
    use kube::runtime::finalizer::Error as F;
    match e {
        F::AddFinalizer(e) => format!("failed to add finalizer: {}", kube_error(e)),
        F::RemoveFinalizer(e) => format!("failed to remove finalizer: {}", kube_error(e)),
        other => other.to_string(),
    }
}

/// Shared by the reconcilers.
pub(crate) struct Context {
    pub client: Client,
    pub opts: OperatorOptions,
    pub embedded: Arc<dyn EmbeddedSchedulers>,
    pub recorder: Recorder,
    pub apply_backoff: backoff::ApplyBackoff,
    /// The last Event [`announce`]d per (object, topic).
    pub announced: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
}

/// A clonable shutdown signal for the controllers.
pub(crate) type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Runs the operator until `shutdown` resolves: the SchedulerProfile and LeafClusterPolicy
/// controllers and the unknown-schedulerName watcher, while leading (always, without leader
/// election); the caches behind `/readyz` and the queue-depth metric on every replica. `client`
/// carries the operator's identity (in a cluster, its ServiceAccount). Returns Ok once stopped on
/// `shutdown` (the Lease released last, so a follower takes over at once), or the cause when
/// leadership was lost (controllers and Embedded schedulers stopped first; the process should exit
/// and start over as a follower, as kube-controller-manager does).
///
/// With [`OperatorOptions::client_config`], an installed operator (its Deployment exists) also
/// watches its installation: when it is being uninstalled the controllers stop and the operator
/// removes what it added and rendered, and releases the objects of its identity, before it
/// returns ([`uninstall`]).
pub async fn run(
    client: Client,
    opts: OperatorOptions,
    embedded: Arc<dyn EmbeddedSchedulers>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown: Shutdown = shutdown.boxed().shared();
    let mut opts = opts;
    if opts.cluster_minor.is_none() {
        // Once, as the schedulers it renders decide theirs.
        match client.apiserver_version().await {
            Ok(info) => match Minor::from_server(&info) {
                Ok(minor) => opts.cluster_minor = Some(minor),
                Err(err) => {
                    tracing::warn!(%err, "the API server's version is not a Kubernetes minor: profiles are validated as the newest one ksched emulates")
                }
            },
            Err(err) => {
                tracing::warn!(%err, "asking the API server for its version failed: profiles are validated as the newest minor ksched emulates")
            }
        }
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(opts.instance.clone()),
        },
    );
    let apply_backoff = backoff::ApplyBackoff::new(opts.retry_initial, opts.retry_max);
    let (elector, leadership) = match &opts.leader_election {
        Some(config) => {
            let (elector, leadership) = LeaderElector::new(client.clone(), config.clone())?;
            (Some(elector), leadership)
        }
        None => (None, Leadership::always()),
    };
    let departure = opts.client_config.clone().map(|config| {
        Arc::new(uninstall::Departure::start(
            client.clone(),
            config,
            &opts.namespace,
        ))
    });
    let ctx = Arc::new(Context {
        client,
        opts,
        embedded,
        recorder,
        apply_backoff,
        announced: Default::default(),
    });
    tracing::info!(namespace = %ctx.opts.namespace, image = %ctx.opts.image, "operator starting");
    // The controllers also stop when the installation is seen going.
    let stop: Shutdown = {
        let shutdown = shutdown.clone();
        let departure = departure.clone();
        async move {
            match departure {
                Some(d) => tokio::select! {
                    _ = shutdown => {}
                    _ = d.detected() => {}
                },
                None => shutdown.await,
            }
        }
        .boxed()
        .shared()
    };
    let health = ctx.opts.health.clone();
    // The health reflectors stop with the operator, whether it stops on `shutdown` or on a loss.
    let (finished, finished_rx) = tokio::sync::watch::channel(false);
    let observing = {
        let stop = stop.clone();
        let mut finished_rx = finished_rx;
        let stop: Shutdown = async move {
            tokio::select! {
                _ = stop => {}
                _ = finished_rx.wait_for(|f| *f) => {}
            }
        }
        .boxed()
        .shared();
        health::observe(ctx.client.clone(), health.clone(), stop)
    };
    let leading = async {
        let result = lead(&ctx, elector, leadership, stop, departure.as_deref()).await;
        let _ = finished.send(true);
        result
    };
    let (result, ()) = futures::join!(leading, observing);
    if let Some(departure) = departure {
        let uninstalling = match departure.reason() {
            Some(why) => Some(why),
            None if shutdown.peek().is_some() => departure.after_shutdown().await,
            None => None,
        };
        if uninstalling.is_some() {
            let led = matches!(result, Ok(true));
            departure.tear_down(led).await?;
            tracing::info!("operator stopped: uninstalled");
            return Ok(());
        }
    }
    tracing::info!("operator stopped");
    result.map(|_| ())
}

/// Campaigns (when electing), then runs the controllers while leading and until `shutdown`.
/// `Ok(true)` when it led until told to stop.
async fn lead(
    ctx: &Arc<Context>,
    elector: Option<LeaderElector>,
    leadership: Leadership,
    shutdown: Shutdown,
    departure: Option<&uninstall::Departure>,
) -> Result<bool, Error> {
    let metrics = &ctx.opts.health.metrics;
    let (stop_elector, elector_stop) = tokio::sync::watch::channel(false);
    let mut elector_task = None;
    if let Some(elector) = elector {
        // Followers show 0 (client-go's gauge exists from the start).
        metrics.set_leader(false);
        let health = elector.health();
        let mut task = tokio::spawn(elector.run(elector_stop));
        // Meanwhile, the profiles a leader that stopped ran in its process say so.
        let follower = scheduler_profile::mark_orphaned_embedded(ctx, health);
        tokio::select! {
            _ = leadership.acquired() => {}
            _ = follower => {}
            r = &mut task => return Ok(task_outcome(r).map(|()| false)?),
            _ = shutdown.clone() => {
                let _ = stop_elector.send(true);
                return Ok(task_outcome(task.await).map(|()| false)?);
            }
        }
        tracing::info!(lease = LEASE_NAME, "leading: starting the controllers");
        elector_task = Some(task);
    }
    metrics.set_leader(true);
    // The Embedded schedulers lead only within this term.
    let identity = ctx
        .opts
        .leader_election
        .as_ref()
        .map_or_else(|| ctx.opts.instance.clone(), |c| c.identity.clone());
    ctx.embedded
        .start_term(OperatorTerm::new(leadership.clone(), identity))
        .await;
    let lost = leadership.clone();
    let stop: Shutdown = {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                _ = shutdown => {}
                _ = lost.lost() => tracing::error!(lease = LEASE_NAME, "leadership lost: stopping the controllers and Embedded schedulers"),
            }
        }
        .boxed()
        .shared()
    };
    let controllers = async {
        futures::join!(
            scheduler_profile::run(ctx.clone(), stop.clone()),
            leaf_cluster_policy::run(ctx.clone(), stop.clone()),
            unknown_scheduler::run(ctx.clone(), stop.clone()),
        )
    };
    // kube-runtime's controllers finish a graceful shutdown only once their caches have synced: one
    // whose watch never could (a missing permission or CRD) would keep the process alive forever.
    let overdue = async {
        stop.clone().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        _ = controllers => {}
        _ = overdue => tracing::warn!(
            "the controllers did not stop within {SHUTDOWN_GRACE:?} of the shutdown request; stopping them"
        ),
    }
    let lost = !leadership.is_leader();
    leadership.resign();
    let uninstalling = departure.is_some_and(|d| d.reason().is_some());
    if lost || uninstalling {
        // The next leader owns the profiles' status now, or nobody will: only stop what runs here.
        ctx.embedded.stop_all().await;
    } else {
        scheduler_profile::embedded_stopped(ctx).await;
    }
    metrics.set_leader(false);
    let Some(task) = elector_task else {
        return Ok(true);
    };
    // On a loss the elector ends by itself with the cause; on shutdown it is told to stop, and
    // releases the lease last.
    let _ = stop_elector.send(true);
    task_outcome(task.await)?;
    Ok(!lost)
}

/// Publishes an Event about `obj` unless the last one this operator announced about it on `topic`
/// said the same: a reconcile that runs on a not-yet-updated copy of the object (the watch cache
/// lags behind the status just written) does not repeat it.
pub(crate) async fn announce<K>(
    ctx: &Context,
    obj: &K,
    topic: &str,
    type_: EventType,
    reason: &str,
    note: String,
) where
    K: Resource<DynamicType = ()>,
{
    let said = format!("{reason}: {note}");
    {
        let mut last = ctx.announced.lock().unwrap_or_else(|p| p.into_inner());
        let key = (announce_key(obj), topic.to_string());
        if last.get(&key) == Some(&said) {
            return;
        }
        last.insert(key, said);
    }
    publish(ctx, obj, type_, reason, note).await;
}

/// What was announced about `obj` on `topic` is over (the next announcement goes out even if it
/// repeats an older one).
pub(crate) fn forget_announced<K>(ctx: &Context, obj: &K, topic: &str)
where
    K: Resource<DynamicType = ()>,
{
    let mut last = ctx.announced.lock().unwrap_or_else(|p| p.into_inner());
    last.remove(&(announce_key(obj), topic.to_string()));
}

fn announce_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}",
        K::kind(&()),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

/// Publishes an Event about `obj` (the note cut to the 1 kB the API allows); a failure is logged.
pub(crate) async fn publish<K>(ctx: &Context, obj: &K, type_: EventType, reason: &str, note: String)
where
    K: Resource<DynamicType = ()>,
{
    let ev = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(object = %obj.meta().name.as_deref().unwrap_or_default(), error = %crate::infra::logging::kube_error(&e), "publishing event failed");
    }
}

/// At most `max` bytes, cut at a character boundary.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Server-side apply of `obj` with the operator's field manager, taking over conflicting fields;
/// the object as stored.
pub(crate) async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
}

/// Removes `finalizer` from the `K` named `name`, with its resourceVersion as a precondition (a
/// concurrent change of its finalizers is read again, never overwritten). Gone is fine.
pub(crate) async fn remove_finalizer<K>(
    api: &Api<K>,
    name: &str,
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    const ATTEMPTS: u32 = 10;
    for attempt in 1..=ATTEMPTS {
        let Some(obj) = api.get_metadata_opt(name).await? else {
            return Ok(());
        };
        if !obj.finalizers().iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let rest: Vec<&String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != finalizer)
            .collect();
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": obj.resource_version(), "finalizers": rest}
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) if is_conflict(&e) && attempt < ATTEMPTS => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `true` for a 404 from the API server.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// `true` for a 403 Forbidden from the API server.
pub(crate) fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// `true` for a 409 Conflict from the API server.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finalizer_error_reads_as_the_api_server_says_it() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": "leafclusterpolicies.ksched.io \"p\" not found",
            "reason": "NotFound",
            "code": 404,
        }))
        .expect("status");
        let e = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::RemoveFinalizer(
            kube::Error::Api(Box::new(status)),
        )));
        assert_eq!(
            e.to_string(),
            "failed to remove finalizer: leafclusterpolicies.ksched.io \"p\" not found (NotFound, HTTP 404)"
        );
    }
}
