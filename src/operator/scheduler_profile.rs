//! The SchedulerProfile reconciler: render, apply (server-side, field manager `ksched-operator`),
//! start or stop the embedded scheduler, observe, write status. An invalid spec applies nothing.
//!
//! Triggers: the profile itself; every child it owns in the operator namespace (ConfigMap,
//! ServiceAccount, Role, RoleBinding, Deployment, Service) and its kube-system RoleBinding, so a
//! child edited or deleted by hand is put back; its ClusterRole/ClusterRoleBinding (by label);
//! every LeafClusterPolicy change (it may add or drop the profile); and a periodic resync for the
//! Lease and pending-pod counts.
//!
//! A profile has no finalizer: every rendered object carries an owner reference to it, so the
//! garbage collector removes them when it goes, with or without the operator, and deleting the CRD
//! never waits for the operator. An Embedded profile's scheduler is stopped when the profile's
//! deletion is seen ([`stop_deleted_embedded`]). Profiles written by an operator that still used
//! the finalizer [`LEGACY_FINALIZER`] lose it on their next reconcile.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::backoff::ApplyFailure;
use super::embedded::operator_scheduler_prefix;
use super::metrics::ProfileState;
use super::render::{
    self, FIELD_MANAGER, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY, Rendered, RenderedObject,
};
use super::status::{
    self, ApplyError, ApplyFix, ConfigOutcome, DeploymentState, LeaseState, OPERATOR_RULES_FIX,
    ProfileObservation,
};
use super::{
    Context, Error, LEGACY_FINALIZER, Shutdown, announce, forget_announced, is_not_found, publish,
    remove_finalizer,
};
use crate::api::scheduler_profile::ProfileMode;
use crate::api::{LeafClusterPolicy, SchedulerProfile, SchedulerProfileStatus};
use crate::config::GoDuration;
use crate::infra::leader_election::LeaderHealth;

pub(crate) async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    futures::join!(
        reconcile_profiles(ctx.clone(), shutdown.clone()),
        stop_deleted_embedded(ctx, shutdown),
    );
}

async fn reconcile_profiles(ctx: Arc<Context>, shutdown: Shutdown) {
    let client = ctx.client.clone();
    let ns = ctx.opts.namespace.clone();
    let owned = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let profiles: Api<SchedulerProfile> = Api::all(client.clone());
    let controller = Controller::new(profiles, watcher::Config::default());
    let store = controller.store();
    let by_label = |obj: &dyn LabelledObject| {
        obj.instance()
            .map(|name| ObjectRef::<SchedulerProfile>::new(&name))
    };
    controller
        .owns(
            Api::<ConfigMap>::namespaced(client.clone(), &ns),
            owned.clone(),
        )
        .owns(
            Api::<ServiceAccount>::namespaced(client.clone(), &ns),
            owned.clone(),
        )
        .owns(Api::<Role>::namespaced(client.clone(), &ns), owned.clone())
        .owns(
            Api::<RoleBinding>::namespaced(client.clone(), &ns),
            owned.clone(),
        )
        .owns(
            Api::<RoleBinding>::namespaced(client.clone(), "kube-system"),
            owned.clone(),
        )
        .owns(
            Api::<Deployment>::namespaced(client.clone(), &ns),
            owned.clone(),
        )
        .owns(
            Api::<Service>::namespaced(client.clone(), &ns),
            owned.clone(),
        )
        .watches(
            Api::<ClusterRole>::all(client.clone()),
            owned.clone(),
            move |o| by_label(&o),
        )
        .watches(
            Api::<ClusterRoleBinding>::all(client.clone()),
            owned,
            move |o| by_label(&o),
        )
        .watches(
            Api::<LeafClusterPolicy>::all(client.clone()),
            watcher::Config::default(),
            move |_| {
                store
                    .state()
                    .iter()
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(kube::runtime::Config::default().debounce(Duration::from_millis(500)))
        .graceful_shutdown_on(shutdown)
        .run(
            ctx.opts
                .health
                .metrics
                .instrument(super::metrics::SCHEDULER_PROFILE, reconcile),
            error_policy,
            ctx,
        )
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(profile = %obj.name, "reconciled"),
                Err(e) => tracing::debug!(error = %crate::infra::logging::controller_error(&e), "profile reconcile failed"),
            }
        })
        .await;
}

/// Objects whose `app.kubernetes.io/instance` label names their profile.
trait LabelledObject {
    fn instance(&self) -> Option<String>;
}

impl<K: Resource> LabelledObject for K {
    fn instance(&self) -> Option<String> {
        self.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_INSTANCE).cloned())
    }
}

fn error_policy(profile: Arc<SchedulerProfile>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(profile = %profile.name_any(), error = %err, "reconciling profile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(profile: Arc<SchedulerProfile>, ctx: Arc<Context>) -> Result<Action, Error> {
    if profile.finalizers().iter().any(|f| f == LEGACY_FINALIZER) {
        release_legacy_finalizer(&profile, &ctx).await?;
        // The update brings the profile back (or lets it go).
        return Ok(Action::await_change());
    }
    if profile.metadata.deletion_timestamp.is_some() {
        // Another party's finalizer holds it: nothing of ours runs for it any more.
        ctx.embedded.stop(&profile.name_any()).await;
        return Ok(Action::await_change());
    }
    apply(&profile, &ctx).await
}

/// A profile an older operator gave [`LEGACY_FINALIZER`]: when it is being deleted, what that
/// finalizer did (stop its Embedded scheduler, remove its ClusterRole and ClusterRoleBinding, which
/// that operator rendered without an owner reference); then the finalizer goes. A live profile's
/// next apply gives those objects their owner reference.
async fn release_legacy_finalizer(profile: &SchedulerProfile, ctx: &Context) -> Result<(), Error> {
    let name = profile.name_any();
    if profile.metadata.deletion_timestamp.is_some() {
        ctx.embedded.stop(&name).await;
        let cluster_name = render::cluster_object_name(&name);
        delete_if_rendered_for(
            Api::<ClusterRoleBinding>::all(ctx.client.clone()),
            &cluster_name,
            &name,
        )
        .await?;
        delete_if_rendered_for(
            Api::<ClusterRole>::all(ctx.client.clone()),
            &cluster_name,
            &name,
        )
        .await?;
    }
    remove_finalizer(
        &Api::<SchedulerProfile>::all(ctx.client.clone()),
        &name,
        LEGACY_FINALIZER,
    )
    .await?;
    tracing::info!(profile = %name, "removed the finalizer of an older operator (owner references do its work now)");
    Ok(())
}

/// Deletes `name` when the operator rendered it for `profile` (its labels say so): an object
/// of that name that someone else made is never touched.
async fn delete_if_rendered_for<K>(api: Api<K>, name: &str, profile: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some(obj) = api.get_metadata_opt(name).await? else {
        return Ok(());
    };
    let labels = obj.labels();
    let ours = labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
        && labels.get(LABEL_INSTANCE).map(String::as_str) == Some(profile);
    if !ours {
        return Ok(());
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Stops the Embedded scheduler of every profile that is deleted (profiles have no finalizer, so
/// the reconciler never sees them go), also of one deleted while the watch was down.
async fn stop_deleted_embedded(ctx: Arc<Context>, shutdown: Shutdown) {
    let mut known: std::collections::BTreeSet<String> = Default::default();
    let mut listed: std::collections::BTreeSet<String> = Default::default();
    let events = watcher(
        Api::<SchedulerProfile>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .take_until(shutdown);
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let gone: Vec<String> = match event {
            Ok(watcher::Event::Apply(p)) => {
                known.insert(p.name_any());
                Vec::new()
            }
            Ok(watcher::Event::Delete(p)) => {
                known.remove(&p.name_any());
                vec![p.name_any()]
            }
            Ok(watcher::Event::Init) => {
                listed.clear();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(p)) => {
                listed.insert(p.name_any());
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let gone = known.difference(&listed).cloned().collect();
                known = std::mem::take(&mut listed);
                gone
            }
            Err(e) => {
                tracing::debug!(error = %crate::infra::logging::watch_error(&e), "watching profiles for deletions");
                Vec::new()
            }
        };
        for name in gone {
            ctx.embedded.stop(&name).await;
            ctx.opts.health.metrics.forget_profile(&name);
            tracing::info!(profile = %name, "profile deleted: its objects go by garbage collection");
        }
    }
}

async fn apply(profile: &SchedulerProfile, ctx: &Context) -> Result<Action, Error> {
    let name = profile.name_any();
    let client = &ctx.client;
    let ns = ctx.opts.namespace.as_str();
    let previous = profile.status.clone().unwrap_or_default();
    let policies: Vec<LeafClusterPolicy> = Api::<LeafClusterPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;

    let in_use = name_in_use(&name, ctx).await?;
    let rendered = match &in_use {
        Some(_) => None,
        None => Some(render::render(
            profile,
            &policies,
            &ctx.opts.render_options(),
            ctx.opts.catalog.as_ref(),
        )),
    };
    let mut apply_error = None;
    let mut retry_in = None;
    let mut embedded = None;
    let mut embedded_identity = None;
    let mut ignored_policies = Vec::new();
    let mut objects_in_use = Vec::new();
    let config = match rendered {
        None => {
            let message = in_use.unwrap_or_default();
            report_refusal(ctx, profile, &previous, "SchedulerNameInUse", &message).await;
            ConfigOutcome::NameInUse { message }
        }
        Some(Ok(r)) => {
            for w in &r.warnings {
                tracing::info!(profile = %name, warning = %w, "configuration warning");
            }
            forget_announced(ctx, profile, REFUSAL);
            ignored_policies = r.ignored_policies.iter().map(ToString::to_string).collect();
            report_ignored_policies(ctx, profile, &previous, &ignored_policies).await;
            objects_in_use = foreign_objects(&r, profile, ctx).await?;
            report_objects_in_use(ctx, profile, &objects_in_use).await;
            // An object of that name that ksched did not create is never overwritten: nothing is
            // applied, and whatever runs for the profile keeps running unchanged.
            if objects_in_use.is_empty() {
                if let Some((error, wait)) = apply_with_backoff(&r, profile, ctx).await {
                    apply_error = Some(error);
                    retry_in = Some(wait.max(Duration::from_secs(1)));
                }
                embedded = sync_embedded(profile, &r, ctx).await;
            } else {
                embedded = ctx.embedded.identity(&name).await.map(|_| Ok(()));
            }
            if matches!(embedded, Some(Ok(()))) {
                embedded_identity = ctx.embedded.identity(&name).await;
            }
            if previous.config_hash.as_deref() != Some(r.config_hash.as_str())
                && apply_error.is_none()
                && objects_in_use.is_empty()
            {
                publish(
                    ctx,
                    profile,
                    EventType::Normal,
                    "ConfigurationRendered",
                    format!(
                        "rendered configuration {} into ConfigMap {ns}/{}",
                        short(&r.config_hash),
                        render::object_name(&name)
                    ),
                )
                .await;
            }
            ConfigOutcome::Valid {
                hash: r.config_hash.clone(),
                warnings: r.warnings.clone(),
                leaf_policies: r.leaf_policies.clone(),
                kubernetes_version: r.emulation.minor().to_string(),
            }
        }
        Some(Err(invalid)) => {
            let message = invalid
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            report_refusal(ctx, profile, &previous, "InvalidConfiguration", &message).await;
            ConfigOutcome::Invalid { message }
        }
    };

    let deployment = match profile.spec.mode {
        ProfileMode::Deployment => Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(&render::object_name(&name))
            .await?
            .map(|d| DeploymentState::from_deployment(&d)),
        ProfileMode::Embedded => None,
    };
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(&render::object_name(&name))
        .await?
        .map(|l| LeaseState::from_lease(&l));
    let pending = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().fields(&format!(
            "spec.schedulerName={name},status.phase=Pending,spec.nodeName="
        )))
        .await?
        .items
        .len();
    let lease_duration_seconds = GoDuration::parse(&profile.spec.leader_election.lease_duration)
        .ok()
        .and_then(|d| d.to_std())
        .map_or(15, |d| d.as_secs() as i64);
    let obs = ProfileObservation {
        generation: profile.metadata.generation,
        mode: profile.spec.mode,
        suspend: profile.spec.suspend,
        replicas: profile.spec.replicas,
        config,
        ignored_policies,
        apply_error,
        objects_in_use,
        deployment,
        embedded,
        embedded_identity,
        lease,
        lease_duration_seconds,
        lease_name: format!("{ns}/{}", render::object_name(&name)),
        pending_pods: i32::try_from(pending).unwrap_or(i32::MAX),
        now: Timestamp::now(),
    };
    let new_status = status::profile_status(&previous, &obs);
    ctx.opts
        .health
        .metrics
        .record_profile(&name, &ProfileState::of(profile, &new_status));
    if profile.status.as_ref() != Some(&new_status) {
        let patch = serde_json::json!({
            "apiVersion": SchedulerProfile::api_version(&()),
            "kind": SchedulerProfile::kind(&()),
            "status": new_status,
        });
        Api::<SchedulerProfile>::all(client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }
    // While waiting for a leader, look again soon: Lease renewals are not watched.
    let waiting_for_leader = status::condition(&new_status.conditions, status::READY)
        .is_some_and(|c| c.reason == "NoLeader");
    let mut next = ctx.opts.resync;
    if let Some(retry) = retry_in {
        next = next.min(retry);
    }
    if waiting_for_leader {
        next = next.min(LEADER_POLL);
    }
    // Ready follows the Lease's renewals: look again the moment the holder's term would run out,
    // so a scheduler that stopped renewing makes the profile NoLeader within the lease duration.
    if let Some(expiry) = obs
        .lease
        .as_ref()
        .and_then(|l| l.fresh_until(obs.now, obs.lease_duration_seconds))
    {
        next = next.min(expiry + LEASE_EXPIRY_MARGIN);
    }
    Ok(Action::requeue(next))
}

/// Topic of the Events that say a profile is refused (see [`announce`]).
const REFUSAL: &str = "Refusal";

/// How soon a profile waiting for its scheduler to take the Lease is looked at again.
const LEADER_POLL: Duration = Duration::from_secs(5);

/// How long after its holder's term would end a Lease is read again (a renewal just in time is
/// seen as one).
const LEASE_EXPIRY_MARGIN: Duration = Duration::from_millis(500);

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// A Warning Event when the profile is refused (invalid spec, name in use), unless this very
/// refusal was already reported for this generation.
async fn report_refusal(
    ctx: &Context,
    profile: &SchedulerProfile,
    previous: &SchedulerProfileStatus,
    reason: &str,
    message: &str,
) {
    let already_reported = previous.observed_generation == profile.metadata.generation
        && status::condition(&previous.conditions, status::READY).is_some_and(|c| {
            c.status == "False" && c.reason == reason && c.message.contains(message)
        });
    if already_reported {
        return;
    }
    let outcome = if previous.config_hash.is_none() {
        "nothing was rendered: no scheduler runs for this profile yet"
    } else {
        "nothing was changed: the running scheduler keeps its last valid configuration"
    };
    tracing::warn!(profile = %profile.name_any(), reason, %message, outcome, "profile refused");
    announce(
        ctx,
        profile,
        REFUSAL,
        EventType::Warning,
        reason,
        format!("{message} ({outcome})"),
    )
    .await;
}

/// A Warning Event when the set of invalid LeafClusterPolicies naming the profile changes.
async fn report_ignored_policies(
    ctx: &Context,
    profile: &SchedulerProfile,
    previous: &SchedulerProfileStatus,
    ignored: &[String],
) {
    if ignored.is_empty() {
        forget_announced(ctx, profile, status::LEAF_POLICIES_VALID);
        return;
    }
    let message = ignored.join("; ");
    let already_reported = status::condition(&previous.conditions, status::LEAF_POLICIES_VALID)
        .is_some_and(|c| c.status == "False" && c.message == message);
    if !already_reported {
        announce(
            ctx,
            profile,
            status::LEAF_POLICIES_VALID,
            EventType::Warning,
            "LeafPolicyIgnored",
            message,
        )
        .await;
    }
}

/// Why the profile's name cannot be served by ksched, if it cannot: kube-scheduler's name, a name
/// the operator was told another scheduler serves (`--known-scheduler`), or a Lease named like it
/// in kube-system or the operator namespace that ksched did not create (another scheduler
/// elects its leader there: upstream's `leaderElection.resourceName` is usually the scheduler's
/// name).
async fn name_in_use(name: &str, ctx: &Context) -> Result<Option<String>, Error> {
    let fix = "rename the SchedulerProfile (metadata.name is the schedulerName pods select it by)";
    if name == super::DEFAULT_SCHEDULER {
        return Ok(Some(format!(
            "metadata.name {name} is kube-scheduler's scheduler name: a second scheduler of that name would race it for every pod of the cluster; {fix}"
        )));
    }
    if ctx.opts.known_schedulers.iter().any(|k| k == name) {
        return Ok(Some(format!(
            "scheduler name {name} is served by another scheduler (the operator's --known-scheduler lists it): two schedulers of one name race for the same pods; {fix}"
        )));
    }
    let mut namespaces = vec!["kube-system", ctx.opts.namespace.as_str()];
    namespaces.dedup();
    for ns in namespaces {
        let lease = match Api::<Lease>::namespaced(ctx.client.clone(), ns)
            .get_opt(name)
            .await
        {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::warn!(namespace = ns, error = %s.message, "cannot read Leases to check that no other scheduler uses a profile's name");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Some(lease) = lease else { continue };
        if lease.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY) {
            continue;
        }
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty())
            .map(|h| format!(", held by {h}"))
            .unwrap_or_default();
        return Ok(Some(format!(
            "scheduler name {name} looks taken: Lease {ns}/{name}{holder} was not created by ksched, so another scheduler of that name elects its leader there; {fix}"
        )));
    }
    Ok(None)
}

/// Topic of the Events that name objects in the way of a profile (see [`announce`]).
const OBJECTS_IN_USE: &str = "NameInUse";

/// A Warning Event naming the objects in the way, once per set of objects.
async fn report_objects_in_use(ctx: &Context, profile: &SchedulerProfile, objects: &[String]) {
    if objects.is_empty() {
        forget_announced(ctx, profile, OBJECTS_IN_USE);
        return;
    }
    let message = status::objects_in_use_message(objects);
    tracing::warn!(profile = %profile.name_any(), %message, "profile refused: its objects' names are taken");
    announce(
        ctx,
        profile,
        OBJECTS_IN_USE,
        EventType::Warning,
        "NameInUse",
        message,
    )
    .await;
}

/// The rendered objects that exist but were not created for this profile (`Kind ns/name` each):
/// their owner references do not name it. A Lease with no owner at all is this profile's
/// scheduler's own (its elector creates the Lease when it is missing) and is taken over.
async fn foreign_objects(
    r: &Rendered,
    profile: &SchedulerProfile,
    ctx: &Context,
) -> Result<Vec<String>, Error> {
    let Some(uid) = profile.metadata.uid.as_deref() else {
        return Ok(Vec::new());
    };
    let c = &ctx.client;
    let ns = ctx.opts.namespace.as_str();
    let mut foreign = Vec::new();
    for obj in r.objects() {
        let taken = match obj {
            RenderedObject::ConfigMap(o) => taken(Api::namespaced(c.clone(), ns), o, uid).await?,
            RenderedObject::ServiceAccount(o) => {
                taken(Api::namespaced(c.clone(), ns), o, uid).await?
            }
            RenderedObject::ClusterRole(o) => taken(Api::all(c.clone()), o, uid).await?,
            RenderedObject::ClusterRoleBinding(o) => taken(Api::all(c.clone()), o, uid).await?,
            RenderedObject::Role(o) => taken(Api::namespaced(c.clone(), ns), o, uid).await?,
            RenderedObject::RoleBinding(o) => {
                let obj_ns = o.metadata.namespace.as_deref().unwrap_or(ns);
                taken(Api::namespaced(c.clone(), obj_ns), o, uid).await?
            }
            RenderedObject::Lease(o) => {
                let api: Api<Lease> = Api::namespaced(c.clone(), ns);
                let name = o.metadata.name.as_deref().unwrap_or_default();
                api.get_metadata_opt(name).await?.is_some_and(|l| {
                    !l.owner_references().is_empty() && !owned_by(l.owner_references(), uid)
                })
            }
            RenderedObject::Deployment(o) => taken(Api::namespaced(c.clone(), ns), o, uid).await?,
            RenderedObject::Service(o) => taken(Api::namespaced(c.clone(), ns), o, uid).await?,
        };
        if taken {
            foreign.push(obj.describe());
        }
    }
    Ok(foreign)
}

/// Whether `obj`'s name is taken by an object not owned by the profile with `uid`.
async fn taken<K>(api: Api<K>, obj: &K, uid: &str) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let name = obj.meta().name.as_deref().unwrap_or_default();
    Ok(api
        .get_metadata_opt(name)
        .await?
        .is_some_and(|existing| !owned_by(existing.owner_references(), uid)))
}

fn owned_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    uid: &str,
) -> bool {
    owners.iter().any(|o| o.uid == uid)
}

/// Applies the rendered objects unless these very objects failed and their retry is not due.
/// `Some` when they are not applied: why, and how long until the next attempt.
async fn apply_with_backoff(
    r: &Rendered,
    profile: &SchedulerProfile,
    ctx: &Context,
) -> Option<(ApplyError, Duration)> {
    let name = profile.name_any();
    let fingerprint = r
        .to_yaml()
        .map(|y| render::sha256_hex(&y))
        .unwrap_or_else(|_| r.config_hash.clone());
    let backoff = &ctx.apply_backoff;
    let pending = match backoff.waiting(&name, &fingerprint, Instant::now()) {
        Some(p) => p,
        None => match apply_all(r, profile, ctx).await {
            Ok(()) => {
                backoff.succeeded(&name);
                return None;
            }
            Err(failure) => {
                tracing::warn!(profile = %name, error = %failure, "applying rendered objects failed");
                let fix = match failure.fix() {
                    ApplyFix::Spec => {
                        "the API server refuses an object rendered from this SchedulerProfile: change the field behind it (spec.resources, spec.image, spec.nodeSelector, spec.tolerations, spec.affinity, spec.priorityClassName), or what refuses it (an admission webhook, a policy, a quota)"
                    }
                    ApplyFix::OperatorRules => OPERATOR_RULES_FIX,
                    ApplyFix::Retry => {
                        "the API server or the network failed, not the spec: retried with backoff"
                    }
                };
                publish(
                    ctx,
                    profile,
                    EventType::Warning,
                    "ApplyFailed",
                    format!("{failure}; {fix}"),
                )
                .await;
                backoff.failed(&name, &fingerprint, failure, Instant::now())
            }
        },
    };
    let error = ApplyError {
        message: pending.failure.to_string(),
        fix: pending.failure.fix(),
        attempts: pending.attempts,
        retry_after_seconds: pending.delay.as_secs_f64().ceil() as u64,
    };
    Some((error, pending.wait))
}

/// Applies every rendered object; an Embedded profile loses the Deployment and Service it had.
async fn apply_all(
    r: &Rendered,
    profile: &SchedulerProfile,
    ctx: &Context,
) -> Result<(), ApplyFailure> {
    let c = &ctx.client;
    let ns = ctx.opts.namespace.as_str();
    for obj in r.objects() {
        match obj {
            RenderedObject::ConfigMap(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
            RenderedObject::ServiceAccount(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
            RenderedObject::ClusterRole(o) => ssa(Api::all(c.clone()), o).await?,
            RenderedObject::ClusterRoleBinding(o) => ssa(Api::all(c.clone()), o).await?,
            RenderedObject::Role(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
            RenderedObject::RoleBinding(o) => {
                let obj_ns = o.metadata.namespace.as_deref().unwrap_or(ns);
                ssa(Api::namespaced(c.clone(), obj_ns), o).await?
            }
            RenderedObject::Lease(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
            RenderedObject::Deployment(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
            RenderedObject::Service(o) => ssa(Api::namespaced(c.clone(), ns), o).await?,
        }
    }
    if profile.spec.mode == ProfileMode::Embedded {
        let name = profile.name_any();
        let uid = profile.metadata.uid.as_deref();
        delete_if_owned::<Deployment>(
            Api::namespaced(c.clone(), ns),
            &render::object_name(&name),
            uid,
        )
        .await?;
        delete_if_owned::<Service>(
            Api::namespaced(c.clone(), ns),
            &render::object_name(&name),
            uid,
        )
        .await?;
    }
    Ok(())
}

/// `Kind namespace/name` of an object.
fn describe<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{} {ns}/{name}", K::kind(&())),
        None => format!("{} {name}", K::kind(&())),
    }
}

/// What went wrong with `obj`, in the API server's own words.
fn failure<K: Resource<DynamicType = ()>>(obj: &K, e: kube::Error) -> ApplyFailure {
    let (code, message) = match e {
        kube::Error::Api(s) => (Some(s.code), s.message),
        other => (None, other.to_string()),
    };
    ApplyFailure {
        object: describe(obj),
        code,
        message,
    }
}

/// Server-side apply of `obj` with the operator's field manager, taking over conflicting fields.
async fn ssa<K>(api: Api<K>, obj: &K) -> Result<(), ApplyFailure>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    super::apply(&api, obj).await.map_err(|e| failure(obj, e))?;
    Ok(())
}

/// Deletes `name` when it is owned by the profile with `uid`.
async fn delete_if_owned<K>(api: Api<K>, name: &str, uid: Option<&str>) -> Result<(), ApplyFailure>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
{
    let Some(uid) = uid else { return Ok(()) };
    let gone = |e: kube::Error| ApplyFailure {
        object: format!("{} {name}", K::kind(&())),
        code: match &e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        },
        message: match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        },
    };
    let Some(obj) = api.get_opt(name).await.map_err(gone)? else {
        return Ok(());
    };
    if obj.owner_references().iter().any(|o| o.uid == uid) {
        tracing::info!(
            object = name,
            "removing what an Embedded profile does not use"
        );
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(failure(&obj, e)),
        }
    }
    Ok(())
}

/// Starts, restarts or stops the embedded scheduler; `Some(result)` for a running Embedded profile.
async fn sync_embedded(
    profile: &SchedulerProfile,
    r: &Rendered,
    ctx: &Context,
) -> Option<Result<(), String>> {
    let name = profile.name_any();
    if profile.spec.mode == ProfileMode::Embedded && !profile.spec.suspend {
        let res = ctx
            .embedded
            .ensure(&name, &r.config_yaml, &r.emulation)
            .await
            .map_err(|e| e.to_string());
        if let Err(e) = &res {
            tracing::warn!(profile = %name, error = %e, "embedded scheduler not running");
        } else if deleted_meanwhile(profile, ctx).await {
            // The deletion watcher may have stopped it while this reconcile was starting it: a
            // deleted profile never keeps a scheduler.
            ctx.embedded.stop(&name).await;
        }
        Some(res)
    } else {
        ctx.embedded.stop(&name).await;
        None
    }
}

/// Whether `profile` is gone (or replaced, or being deleted) by now; an API error says no.
async fn deleted_meanwhile(profile: &SchedulerProfile, ctx: &Context) -> bool {
    let api: Api<SchedulerProfile> = Api::all(ctx.client.clone());
    match api.get_opt(&profile.name_any()).await {
        Ok(Some(now)) => now.uid() != profile.uid() || now.metadata.deletion_timestamp.is_some(),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// The operator is stopping: its Embedded schedulers stop with it (releasing their Leases), and
/// their profiles say so instead of staying Ready.
pub(crate) async fn embedded_stopped(ctx: &Context) {
    let stopped = ctx.embedded.stop_all().await;
    let api: Api<SchedulerProfile> = Api::all(ctx.client.clone());
    for name in stopped {
        let profile = match api.get_opt(&name).await {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(profile = %name, error = %crate::infra::logging::kube_error(&e), "reading a profile to mark its embedded scheduler stopped");
                continue;
            }
        };
        let previous = profile.status.clone().unwrap_or_default();
        if status::says_uninstalled(&previous) {
            continue;
        }
        let new_status = status::operator_stopped(
            &previous,
            previous.observed_generation,
            &ctx.opts.instance,
            Timestamp::now(),
        );
        let patch = serde_json::json!({
            "apiVersion": SchedulerProfile::api_version(&()),
            "kind": SchedulerProfile::kind(&()),
            "status": new_status,
        });
        match api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(profile = %name, "embedded scheduler stopped with the operator: profile marked not Ready")
            }
            Err(e) => {
                tracing::warn!(profile = %name, error = %e, "marking a profile whose embedded scheduler stopped")
            }
        }
    }
}

/// On a replica that does not lead: once the leader has not renewed the operator Lease for a renew
/// deadline (so it stopped acting as leader, and its Embedded schedulers with it), the Embedded
/// profiles whose scheduler ran in it say `OperatorStopped` until a new leader runs them. Never
/// returns.
pub(crate) async fn mark_orphaned_embedded(ctx: &Context, health: LeaderHealth) {
    let Some(renew_deadline) = ctx.opts.leader_election.as_ref().map(|c| c.renew_deadline) else {
        return std::future::pending().await;
    };
    let mut marked: Option<String> = None;
    loop {
        tokio::time::sleep(ORPHAN_POLL).await;
        let Some(holder) = health.stale_holder(Instant::now(), renew_deadline) else {
            continue;
        };
        if marked.as_deref() == Some(holder.as_str()) {
            continue;
        }
        match mark_stopped_by(ctx, &holder).await {
            Ok(()) => marked = Some(holder),
            Err(e) => {
                tracing::warn!(operator = %holder, error = %e, "marking the profiles of an operator that stopped")
            }
        }
    }
}

/// How often a replica that does not lead looks whether the leader stopped.
const ORPHAN_POLL: Duration = Duration::from_millis(500);

/// The Embedded profiles led by a scheduler of the operator `holder` say `OperatorStopped`
/// (unless their status changed meanwhile: a new leader's is newer).
async fn mark_stopped_by(ctx: &Context, holder: &str) -> Result<(), kube::Error> {
    let prefix = operator_scheduler_prefix(holder);
    let api: Api<SchedulerProfile> = Api::all(ctx.client.clone());
    for p in api.list(&ListParams::default()).await?.items {
        let Some(previous) = &p.status else { continue };
        if status::says_uninstalled(previous) {
            continue;
        }
        if !previous
            .leader
            .as_deref()
            .is_some_and(|l| l.starts_with(&prefix))
        {
            continue;
        }
        let new_status = status::operator_stopped(
            previous,
            previous.observed_generation,
            holder,
            Timestamp::now(),
        );
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": p.resource_version()},
            "status": new_status,
        });
        match api
            .patch_status(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => tracing::info!(
                profile = %p.name_any(),
                operator = %holder,
                "the operator that ran this Embedded profile's scheduler stopped leading: profile marked OperatorStopped"
            ),
            Err(e) if super::is_conflict(&e) || is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
