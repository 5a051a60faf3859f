//! Uninstall in one step: `helm uninstall` or `kubectl delete -k manifests/install` deletes the
//! operator's ServiceAccount, RBAC, Deployment and (kustomize) namespace at the same moment as the
//! CRDs, profiles and policies. The operator cannot clean up with its own identity then: its
//! ServiceAccount token stops authenticating the moment the ServiceAccount is deleted, and its
//! permissions go with its RoleBindings. Finalizers on those objects would keep them, but the last
//! finalizer could never be removed: removing the ServiceAccount's ends the identity, removing a
//! binding's ends the permission to remove the other's.
//!
//! So the operator keeps a *kit* outside what the install deletes, with one root: the ClusterRole
//! [`KIT_NAME`], which owns (owner references, for the garbage collector) a ServiceAccount
//! `kube-system/KIT_NAME`, its ClusterRoleBinding, and a Role and RoleBinding in the operator
//! namespace and in kube-system, granting exactly what the cleanup needs ([`kit`]). Every replica
//! holds a token of that ServiceAccount (TokenRequest, renewed) and watches its installation with
//! it ([`Departure`]): when the operator's ClusterRoleBinding or namespace is deleted (or, after a
//! SIGTERM, its Deployment is gone and one of them follows within [`DEPARTURE_WAIT`]), the replica
//! that was leading stops its controllers and runs [`teardown`] with the kit's identity: it
//! removes every taint the operator added, the finalizers of the LeafClusterPolicies (and those an
//! older operator put on SchedulerProfiles) and every rendered object, then deletes the kit's root
//! as its very last request; the garbage collector removes the rest of the kit. A follower waits
//! [`FOLLOWER_DEFER`] for the leader to finish (seen as the kit's identity failing) and tears down
//! itself only if the leader did not.
//!
//! An operator that is gone before the uninstall (its pods cannot run) leaves the kit, its taints
//! and the policies' finalizers; `ksched uninstall` runs the same [`teardown`] with the user's
//! credentials.

mod kit;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub use kit::{KIT_NAME, KIT_NAMESPACE, Kit, kit};

use super::{
    Error, FINALIZER, LEGACY_FINALIZER, OPERATOR_NAME, apply, is_not_found, remove_finalizer,
};
use crate::api::{LeafClusterPolicy, SchedulerProfile};

/// Label selector of everything the operator renders for profiles (not the kit).
const RENDERED: &str =
    "app.kubernetes.io/managed-by=ksched-operator,app.kubernetes.io/component=scheduler";

/// Lifetime asked for the kit's token, and how often it is renewed.
const TOKEN_SECONDS: i64 = 3600;
const TOKEN_RENEWAL: Duration = Duration::from_secs(20 * 60);
/// Retries while the kit's ServiceAccount does not exist (yet: the leader creates it; or ever: not
/// an installation), doubling up to [`TOKEN_RETRY_MAX`].
const TOKEN_RETRY: Duration = Duration::from_secs(2);
const TOKEN_RETRY_MAX: Duration = Duration::from_secs(10);
/// How long a new leader waits for the kit's token before it starts the controllers anyway.
const TOKEN_WAIT: Duration = Duration::from_secs(5);
/// How often a replica looks at its installation.
const POLL: Duration = Duration::from_secs(1);
/// After SIGTERM with its Deployment gone, how long a replica waits for its ClusterRoleBinding or
/// namespace to be deleted too (`helm uninstall` deletes the Deployment first, RBAC a moment later).
pub const DEPARTURE_WAIT: Duration = Duration::from_secs(5);
/// How long a follower leaves the cleanup to the leader.
pub const FOLLOWER_DEFER: Duration = Duration::from_secs(10);
/// Passes of [`teardown`] before it gives up (each one resumes where the last failed).
const PASSES: u32 = 3;

/// Creates or updates the kit of an installed operator (its ClusterRoleBinding [`OPERATOR_NAME`]
/// exists: an operator started by hand outside an installation needs none). `Ok(false)` when
/// there is no installation.
pub(crate) async fn ensure_kit(client: &Client, namespace: &str) -> Result<bool, Error> {
    let installed = Api::<ClusterRoleBinding>::all(client.clone())
        .get_opt(OPERATOR_NAME)
        .await?;
    if installed.is_none_or(|b| b.metadata.deletion_timestamp.is_some()) {
        return Ok(false);
    }
    let k = kit(namespace);
    let root = apply(&Api::all(client.clone()), &k.cluster_role).await?;
    let uid = root
        .uid()
        .ok_or_else(|| Error::Uninstall(format!("ClusterRole {KIT_NAME} has no uid")))?;
    let k = k.owned_by(&uid);
    apply(&Api::all(client.clone()), &k.cluster_role_binding).await?;
    apply(
        &Api::namespaced(client.clone(), KIT_NAMESPACE),
        &k.service_account,
    )
    .await?;
    for role in &k.roles {
        let ns = role.metadata.namespace.as_deref().unwrap_or(KIT_NAMESPACE);
        apply(&Api::namespaced(client.clone(), ns), role).await?;
    }
    for binding in &k.role_bindings {
        let ns = binding
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(KIT_NAMESPACE);
        apply(&Api::namespaced(client.clone(), ns), binding).await?;
    }
    Ok(true)
}

/// A client with the kit's identity: `base` (the operator's cluster address and CA) with a token of
/// the kit's ServiceAccount instead of the operator's own credentials.
async fn kit_client(main: &Client, base: &kube::Config) -> Result<Client, Error> {
    let request = TokenRequest {
        // No audiences: the API server's own.
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: None,
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(main.clone(), KIT_NAMESPACE)
        .create_token_request(KIT_NAME, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Uninstall("the TokenRequest returned no token".into()))?;
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(secrecy::SecretString::from(token)),
        ..kube::config::AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

/// `true` for 401 and 403: the kit's identity is gone (its root was deleted: the cleanup finished).
fn identity_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Why the installation is going, if it is: its namespace or its ClusterRoleBinding is being
/// deleted or gone. (The kit, whose identity asks, exists only for an installation that had both.)
async fn departing(client: &Client, namespace: &str) -> Option<String> {
    match Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
    {
        Ok(Some(ns)) if ns.metadata.deletion_timestamp.is_none() => {}
        Ok(Some(_)) => return Some(format!("namespace {namespace} is being deleted")),
        Ok(None) => return Some(format!("namespace {namespace} is gone")),
        Err(e) => {
            tracing::debug!(error = %crate::logging::kube_error(&e), "reading the operator namespace with the uninstall identity");
            return None;
        }
    }
    match Api::<ClusterRoleBinding>::all(client.clone())
        .get_opt(OPERATOR_NAME)
        .await
    {
        Ok(Some(b)) if b.metadata.deletion_timestamp.is_none() => None,
        Ok(Some(_)) => Some(format!(
            "ClusterRoleBinding {OPERATOR_NAME} is being deleted"
        )),
        Ok(None) => Some(format!("ClusterRoleBinding {OPERATOR_NAME} is gone")),
        Err(e) => {
            tracing::debug!(error = %crate::logging::kube_error(&e), "reading the operator's ClusterRoleBinding with the uninstall identity");
            None
        }
    }
}

/// One replica's watch on its installation, with the kit's identity (see the module docs). Its
/// tasks end when it is dropped.
pub(crate) struct Departure {
    namespace: String,
    kit: Arc<parking_lot::Mutex<Option<Client>>>,
    /// Asks for a token now (the leader just created the kit).
    renew_now: Arc<tokio::sync::Notify>,
    reason: tokio::sync::watch::Receiver<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Departure {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Departure {
    /// Starts renewing the kit's token with `main` (the operator's own client) and watching the
    /// installation in `namespace`; `base` is the configuration `main` was made from.
    pub(crate) fn start(main: Client, base: kube::Config, namespace: &str) -> Departure {
        let kit: Arc<parking_lot::Mutex<Option<Client>>> = Arc::default();
        let renew_now: Arc<tokio::sync::Notify> = Arc::default();
        let (tx, reason) = tokio::sync::watch::channel(None);
        let renewing = {
            let kit = kit.clone();
            let renew_now = renew_now.clone();
            tokio::spawn(async move {
                let mut retry = TOKEN_RETRY;
                loop {
                    let wait = match kit_client(&main, &base).await {
                        Ok(client) => {
                            if kit.lock().replace(client).is_none() {
                                tracing::info!(
                                    kit = KIT_NAME,
                                    "holding the uninstall identity: an uninstall will be cleaned up"
                                );
                            }
                            retry = TOKEN_RETRY;
                            TOKEN_RENEWAL
                        }
                        Err(e) => {
                            // The leader creates the kit: a follower may ask before it exists.
                            tracing::debug!(error = %e, "no token of the uninstall identity (yet)");
                            let wait = retry;
                            retry = (retry * 2).min(TOKEN_RETRY_MAX);
                            wait
                        }
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = renew_now.notified() => {}
                    }
                }
            })
        };
        let watching = {
            let kit = kit.clone();
            let namespace = namespace.to_string();
            tokio::spawn(async move {
                loop {
                    let client = kit.lock().clone();
                    if let Some(client) = client
                        && let Some(why) = departing(&client, &namespace).await
                    {
                        tracing::info!(reason = %why, "ksched is being uninstalled");
                        let _ = tx.send(Some(why));
                        return;
                    }
                    tokio::time::sleep(POLL).await;
                }
            })
        };
        Departure {
            namespace: namespace.to_string(),
            kit,
            renew_now,
            reason,
            tasks: vec![renewing, watching],
        }
    }

    /// The leader created the kit: fetch its token now, and wait (up to [`TOKEN_WAIT`]) until it
    /// is held, so nothing is added to the cluster before this replica could take it away again.
    pub(crate) async fn kit_created(&self) {
        self.renew_now.notify_one();
        let deadline = Instant::now() + TOKEN_WAIT;
        while self.kit.lock().is_none() {
            if Instant::now() > deadline {
                tracing::warn!(
                    "no token of the uninstall identity after {TOKEN_WAIT:?}: starting anyway"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Resolves once the installation is seen going.
    pub(crate) async fn detected(&self) {
        let mut reason = self.reason.clone();
        let _ = reason.wait_for(Option::is_some).await;
    }

    /// Why the installation is going, if it was seen going.
    pub(crate) fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// After a SIGTERM: the pod is going, and an uninstall if its Deployment went too and the
    /// installation follows within [`DEPARTURE_WAIT`] (a rollout, a drain or a scale-down keeps the
    /// Deployment).
    pub(crate) async fn after_shutdown(&self) -> Option<String> {
        if let Some(why) = self.reason() {
            return Some(why);
        }
        let Some(client) = self.kit.lock().clone() else {
            tracing::debug!("no uninstall identity: not an installation, or not prepared");
            return None;
        };
        let deployment = Api::<Deployment>::namespaced(client, &self.namespace)
            .get_opt(OPERATOR_NAME)
            .await;
        match deployment {
            Ok(Some(d)) if d.metadata.deletion_timestamp.is_none() => return None,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %crate::logging::kube_error(&e), "reading the operator's Deployment");
                return None;
            }
        }
        tracing::info!(
            "the operator's Deployment is gone: waiting {DEPARTURE_WAIT:?} for its RBAC or namespace to go too"
        );
        tokio::time::timeout(DEPARTURE_WAIT, self.detected())
            .await
            .ok()?;
        self.reason()
    }

    /// Removes what the operator added and rendered, then the kit (see [`teardown`]). A follower
    /// first leaves it to the leader for [`FOLLOWER_DEFER`].
    pub(crate) async fn tear_down(&self, leading: bool) -> Result<(), Error> {
        let Some(client) = self.kit.lock().clone() else {
            return Err(Error::Uninstall(
                "the operator has no uninstall identity (see the earlier warning): run `ksched uninstall` to finish".into(),
            ));
        };
        if !leading {
            tracing::info!("leaving the cleanup to the leading replica for {FOLLOWER_DEFER:?}");
            let deadline = Instant::now() + FOLLOWER_DEFER;
            while Instant::now() < deadline {
                match Api::<Namespace>::all(client.clone())
                    .get_opt(&self.namespace)
                    .await
                {
                    Err(e) if identity_gone(&e) => {
                        tracing::info!("the leading replica finished the uninstall");
                        return Ok(());
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            }
        }
        match teardown(&client, &self.namespace).await {
            Ok(removed) => {
                tracing::info!(%removed, "uninstalled: nothing the operator added or rendered is left");
                Ok(())
            }
            Err(Error::Kube(e)) if !leading && identity_gone(&e) => {
                tracing::info!("another replica finished the uninstall");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
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
}

impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "taints removed from {} node(s), {} finalizer(s) removed, {} rendered object(s) deleted",
            self.nodes, self.finalizers, self.objects
        )
    }
}

/// Removes everything the operator of `namespace` added or rendered, then the kit: every taint it
/// recorded on a node (never one it did not add), the finalizers of LeafClusterPolicies and the
/// legacy one of SchedulerProfiles, every rendered object (in the operator namespace only when it
/// is not being deleted anyway), the operator's Lease; the kit's root last. Idempotent, and safe
/// beside another run of it. `client` is the kit's identity, or the user's (`ksched uninstall`).
pub async fn teardown(client: &Client, namespace: &str) -> Result<Removed, Error> {
    let mut last = None;
    for pass in 1..=PASSES {
        match teardown_pass(client, namespace).await {
            Ok(removed) => {
                match Api::<ClusterRole>::all(client.clone())
                    .delete(KIT_NAME, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
                return Ok(removed);
            }
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
        let view = super::leaf_cluster_policy::node_view(&node);
        if view.records.0.is_empty() {
            continue;
        }
        let release =
            |n: &Node| super::taints::release_all(&super::leaf_cluster_policy::node_view(n));
        if super::leaf_cluster_policy::update_node(&nodes, &node, release)
            .await?
            .is_some_and(|plan| plan.change.is_some())
        {
            removed.nodes += 1;
        }
    }
    removed.finalizers += strip::<LeafClusterPolicy>(client, FINALIZER).await?;
    removed.finalizers += strip::<SchedulerProfile>(client, LEGACY_FINALIZER).await?;

    removed.objects += delete_rendered(Api::<ClusterRoleBinding>::all(client.clone())).await?;
    removed.objects += delete_rendered(Api::<ClusterRole>::all(client.clone())).await?;
    removed.objects += delete_rendered(Api::<RoleBinding>::namespaced(
        client.clone(),
        KIT_NAMESPACE,
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
            .delete(OPERATOR_NAME, &DeleteParams::background())
            .await
        {
            Ok(_) => removed.objects += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
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
