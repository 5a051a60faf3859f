//! The SchedulerProfile reconciler: render, apply (server-side, field manager `ksched-operator`),
//! start or stop the embedded scheduler, observe, write status. An invalid spec applies nothing.
//!
//! Triggers: the profile itself; every child it owns in the operator namespace (ConfigMap,
//! ServiceAccount, Role, RoleBinding, Deployment, Service) and its kube-system RoleBinding, so a
//! child edited or deleted by hand is put back; its ClusterRole/ClusterRoleBinding (by label, as
//! they carry no owner reference); every LeafClusterPolicy change (it may add or drop the profile);
//! and a periodic resync for the Lease and pending-pod counts.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::render::{
    self, FIELD_MANAGER, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY, Rendered, RenderedObject,
};
use super::status::{self, ConfigOutcome, DeploymentState, LeaseState, ProfileObservation};
use super::{Context, Error, Shutdown, is_not_found};
use crate::api::scheduler_profile::ProfileMode;
use crate::api::{LeafClusterPolicy, SchedulerProfile};
use crate::config::GoDuration;

pub(crate) async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
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
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(profile = %obj.name, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "profile reconcile failed"),
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
    let api: Api<SchedulerProfile> = Api::all(ctx.client.clone());
    finalizer(&api, super::FINALIZER, profile, |event| async {
        match event {
            Finalizer::Apply(p) => apply(&p, &ctx).await,
            Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
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

    let rendered = render::render(
        profile,
        &policies,
        &ctx.opts.render_options(),
        ctx.opts.catalog.as_ref(),
    );
    let mut apply_error = None;
    let mut embedded = None;
    let config = match &rendered {
        Ok(r) => {
            for w in &r.warnings {
                tracing::info!(profile = %name, warning = %w, "configuration warning");
            }
            if let Err(e) = apply_all(r, profile, ctx).await {
                tracing::warn!(profile = %name, error = %e, "applying rendered objects failed");
                apply_error = Some(e.to_string());
            }
            embedded = sync_embedded(profile, r, ctx).await;
            if previous.config_hash.as_deref() != Some(r.config_hash.as_str()) {
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
            }
        }
        Err(invalid) => {
            let message = invalid
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            let already_reported = previous.observed_generation == profile.metadata.generation
                && status::condition(&previous.conditions, status::CONFIG_VALID)
                    .is_some_and(|c| c.status == "False" && c.message == message);
            if !already_reported {
                tracing::warn!(profile = %name, errors = %message, "invalid profile: nothing applied, the running scheduler is left as it is");
                publish(
                    ctx,
                    profile,
                    EventType::Warning,
                    "InvalidConfiguration",
                    format!("{message} (nothing was changed: the running scheduler keeps its configuration)"),
                )
                .await;
            }
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
        apply_error,
        deployment,
        embedded,
        lease,
        lease_duration_seconds,
        lease_name: format!("{ns}/{}", render::object_name(&name)),
        pending_pods: i32::try_from(pending).unwrap_or(i32::MAX),
        now: Timestamp::now(),
    };
    let new_status = status::profile_status(&previous, &obs);
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
    Ok(Action::requeue(ctx.opts.resync))
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Applies every rendered object; an Embedded profile loses the Deployment and Service it had.
async fn apply_all(r: &Rendered, profile: &SchedulerProfile, ctx: &Context) -> Result<(), Error> {
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
            &render::service_name(&name),
            uid,
        )
        .await?;
    }
    Ok(())
}

/// Server-side apply of `obj` with the operator's field manager, taking over conflicting fields.
async fn ssa<K>(api: Api<K>, obj: &K) -> Result<(), Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

/// Deletes `name` when it is owned by the profile with `uid`.
async fn delete_if_owned<K>(api: Api<K>, name: &str, uid: Option<&str>) -> Result<(), Error>
where
    K: Resource + DeserializeOwned + Clone + Debug,
{
    let Some(uid) = uid else { return Ok(()) };
    let Some(obj) = api.get_opt(name).await? else {
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
            Err(e) => return Err(e.into()),
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
            .ensure(&name, &r.config_yaml)
            .await
            .map_err(|e| e.to_string());
        if let Err(e) = &res {
            tracing::warn!(profile = %name, error = %e, "embedded scheduler not running");
        }
        Some(res)
    } else {
        ctx.embedded.stop(&name).await;
        None
    }
}

/// On delete: stop the embedded scheduler and remove the cluster-scoped children (the namespaced
/// ones carry owner references and go by garbage collection).
async fn cleanup(profile: &SchedulerProfile, ctx: &Context) -> Result<Action, Error> {
    let name = profile.name_any();
    ctx.embedded.stop(&name).await;
    let cluster_name = render::cluster_object_name(&name);
    for res in [
        Api::<ClusterRoleBinding>::all(ctx.client.clone())
            .delete(&cluster_name, &DeleteParams::default())
            .await
            .map(|_| ()),
        Api::<ClusterRole>::all(ctx.client.clone())
            .delete(&cluster_name, &DeleteParams::default())
            .await
            .map(|_| ()),
    ] {
        match res {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(profile = %name, "profile deleted: cluster-scoped objects removed");
    Ok(Action::await_change())
}

async fn publish(
    ctx: &Context,
    profile: &SchedulerProfile,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &profile.object_ref(&())).await {
        tracing::warn!(profile = %profile.name_any(), error = %e, "publishing event failed");
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
