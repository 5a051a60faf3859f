//! The stopping of the operator (`ksched uninstall`, the chart's pre-delete hook) and the
//! teardown: everything the operator added or rendered removed, the profiles left behind marked
//! uninstalled.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{RENDERED, TICK, identity_gone};
use crate::api::{LeafClusterPolicy, SchedulerProfile};
use crate::operator::render::FIELD_MANAGER;
use crate::operator::{
    Error, FINALIZER, LEASE_NAME, LEGACY_FINALIZER, OPERATOR_NAME, is_conflict, is_forbidden,
    is_not_found, remove_finalizer,
};

/// Passes of [`teardown`] before it gives up (each one resumes where the last failed).
const PASSES: u32 = 3;
/// How long `ksched uninstall` waits for the operator to stop leading.
const STOP_WAIT: Duration = Duration::from_secs(90);

/// Stops the operator of `namespace` (`ksched uninstall`, the chart's pre-delete hook): its
/// Deployment scaled to 0, then waits until no replica leads (its Lease released or expired) and
/// holds the Lease, so nothing re-renders, re-taints or writes status behind the cleanup.
/// `Ok(false)` when there was no operator.
pub async fn stop_operator(client: &Client, namespace: &str) -> Result<bool, Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let scaled = match deployments.get_opt(OPERATOR_NAME).await? {
        Some(d) if d.metadata.deletion_timestamp.is_none() => {
            if d.spec.replicas != Some(0) {
                let patch = serde_json::json!({"spec": {"replicas": 0}});
                deployments
                    .patch_scale(
                        OPERATOR_NAME,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                tracing::info!("scaled Deployment {namespace}/{OPERATOR_NAME} to 0");
            }
            true
        }
        _ => false,
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + STOP_WAIT;
    loop {
        let lease = match leases.get_opt(LEASE_NAME).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(e.into()),
        };
        let leading = lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .is_some_and(|s| {
                let holder = s.holder_identity.as_deref().unwrap_or_default();
                let renewed = s.renew_time.as_ref().map(|t| t.0);
                let duration = i64::from(s.lease_duration_seconds.unwrap_or(15));
                !holder.is_empty()
                    && renewed.is_some_and(|r| {
                        r.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(duration))
                            .is_ok_and(|expires| expires > Timestamp::now())
                    })
            });
        if !leading {
            match hold_lease(&leases, lease).await {
                Ok(()) => return Ok(scaled),
                // A replica took the lease meanwhile (409: Conflict or AlreadyExists): wait for
                // it to stop too.
                Err(e) if is_conflict(&e) => {}
                // A namespace being deleted takes no new Lease (403), nor from a replica; one
                // gone has none: nothing to hold.
                Err(e) if is_forbidden(&e) || is_not_found(&e) => {
                    tracing::info!(error = %e, "not holding Lease {namespace}/{LEASE_NAME}");
                    return Ok(scaled);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Uninstall(format!(
                "an operator replica still leads on Lease {namespace}/{LEASE_NAME} {STOP_WAIT:?} after its Deployment was scaled to 0"
            )));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The holder the uninstall writes into the operator's Lease while it cleans up.
const UNINSTALL_HOLDER: &str = "ksched-uninstall";
/// How long the uninstall holds the operator's Lease: the teardown deletes it when done; an
/// uninstall that died midway leaves it to expire.
const HOLD: Duration = Duration::from_secs(300);

/// The operator's Lease, released or expired, held by [`UNINSTALL_HOLDER`]: a replica of the
/// Deployment that has not stopped yet (scaled to 0, still terminating) cannot take the lead and
/// render, taint or write status behind the cleanup. `lease` is the one just read; a replica that
/// wrote it since makes this a 409 (Conflict, or AlreadyExists).
async fn hold_lease(leases: &Api<Lease>, lease: Option<Lease>) -> Result<(), kube::Error> {
    let now = MicroTime(Timestamp::now());
    let seconds = i32::try_from(HOLD.as_secs()).unwrap_or(i32::MAX);
    let held = |transitions: i32| LeaseSpec {
        holder_identity: Some(UNINSTALL_HOLDER.into()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(now.clone()),
        renew_time: Some(now.clone()),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    match lease {
        Some(mut lease) => {
            let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
            lease.spec = Some(held(transitions.unwrap_or(0) + 1));
            leases
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await?;
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(held(0)),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    tracing::info!("holding Lease {LEASE_NAME} as {UNINSTALL_HOLDER} while cleaning up");
    Ok(())
}

/// What [`teardown`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Nodes whose operator-added taints were removed.
    pub nodes: usize,
    /// Finalizers removed from LeafClusterPolicies and SchedulerProfiles.
    pub finalizers: usize,
    /// Rendered objects deleted (the profiles' schedulers, RBAC, Leases, ...).
    pub objects: usize,
    /// Profiles left behind (Helm keeps the CRDs) whose status now says ksched was uninstalled.
    pub profiles: usize,
}

impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "taints removed from {} node(s), {} finalizer(s) removed, {} rendered object(s) deleted, {} profile(s) marked uninstalled",
            self.nodes, self.finalizers, self.objects, self.profiles
        )
    }
}

/// Removes everything the operator of `namespace` added or rendered: every taint it recorded on a
/// node (never one it did not add), the finalizers of LeafClusterPolicies and the legacy one of
/// SchedulerProfiles, every rendered object (in the operator namespace only when it is not being
/// deleted anyway), the operator's Lease, and a release identity a crashed release left; the
/// profiles left behind say that ksched was uninstalled. Idempotent, and safe beside another run
/// of it. `client` is the operator's identity (held), the hook's, or the user's.
pub async fn teardown(client: &Client, namespace: &str) -> Result<Removed, Error> {
    let mut last = None;
    for pass in 1..=PASSES {
        match teardown_pass(client, namespace).await {
            Ok(removed) => return Ok(removed),
            Err(e) => {
                tracing::warn!(pass, error = %e, "uninstall cleanup incomplete; trying again");
                if matches!(&e, Error::Kube(k) if identity_gone(k)) {
                    return Err(e);
                }
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(500 * u64::from(pass))).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Uninstall("cleanup did not run".into())))
}

async fn teardown_pass(client: &Client, namespace: &str) -> Result<Removed, Error> {
    let mut removed = Removed::default();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        let view = crate::operator::leaf_cluster_policy::node_view(&node);
        if view.records.0.is_empty() {
            continue;
        }
        let release = |n: &Node| {
            crate::operator::taints::release_all(&crate::operator::leaf_cluster_policy::node_view(
                n,
            ))
        };
        if crate::operator::leaf_cluster_policy::update_node(&nodes, &node, release)
            .await?
            .is_some_and(|plan| plan.change.is_some())
        {
            removed.nodes += 1;
        }
    }
    removed.finalizers += strip::<LeafClusterPolicy>(client, FINALIZER).await?;
    removed.finalizers += strip::<SchedulerProfile>(client, LEGACY_FINALIZER).await?;
    removed.profiles += mark_uninstalled(client).await?;

    removed.objects += delete_rendered(Api::<ClusterRoleBinding>::all(client.clone())).await?;
    removed.objects += delete_rendered(Api::<ClusterRole>::all(client.clone())).await?;
    removed.objects += delete_rendered(Api::<RoleBinding>::namespaced(
        client.clone(),
        "kube-system",
    ))
    .await?;
    let active = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await?
        .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none());
    if active {
        // A namespace being deleted takes them with it.
        let c = || client.clone();
        removed.objects += delete_rendered(Api::<Deployment>::namespaced(c(), namespace)).await?;
        removed.objects += delete_rendered(Api::<Service>::namespaced(c(), namespace)).await?;
        removed.objects += delete_rendered(Api::<ConfigMap>::namespaced(c(), namespace)).await?;
        removed.objects += delete_rendered(Api::<RoleBinding>::namespaced(c(), namespace)).await?;
        removed.objects += delete_rendered(Api::<Role>::namespaced(c(), namespace)).await?;
        removed.objects +=
            delete_rendered(Api::<ServiceAccount>::namespaced(c(), namespace)).await?;
        removed.objects += delete_rendered(Api::<Lease>::namespaced(c(), namespace)).await?;
        match Api::<Lease>::namespaced(client.clone(), namespace)
            .delete(LEASE_NAME, &DeleteParams::background())
            .await
        {
            Ok(_) => removed.objects += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

/// Every profile left behind says that ksched was uninstalled and nothing runs for it; how many.
async fn mark_uninstalled(client: &Client) -> Result<usize, Error> {
    let api: Api<SchedulerProfile> = Api::all(client.clone());
    let profiles = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if is_not_found(&e) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut n = 0;
    for p in profiles {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let previous = p.status.clone().unwrap_or_default();
        let status = crate::operator::status::uninstalled(
            &previous,
            p.metadata.generation,
            Timestamp::now(),
        );
        let patch = serde_json::json!({
            "apiVersion": SchedulerProfile::api_version(&()),
            "kind": SchedulerProfile::kind(&()),
            "status": status,
        });
        match api
            .patch_status(
                &p.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => n += 1,
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// The names (with finalizers) of the `K`s of `api` matching `params`; none when the kind itself
/// is gone (its CRD deleted with the rest).
async fn list<K>(
    api: &Api<K>,
    params: &ListParams,
) -> Result<Vec<kube::core::PartialObjectMeta<K>>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.list_metadata(params).await {
        Ok(list) => Ok(list.items),
        Err(e) if is_not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Removes `finalizer` from every `K`; how many had it.
async fn strip<K>(client: &Client, finalizer: &str) -> Result<usize, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let mut n = 0;
    for obj in list(&api, &ListParams::default()).await? {
        if obj.finalizers().iter().any(|f| f == finalizer) {
            remove_finalizer(&api, &obj.name_any(), finalizer).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Deletes every rendered `K` of `api`; how many.
async fn delete_rendered<K>(api: Api<K>) -> Result<usize, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let mut n = 0;
    for obj in list(&api, &ListParams::default().labels(RENDERED)).await? {
        match api
            .delete(&obj.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => n += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}
