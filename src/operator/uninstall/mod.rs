//! Uninstall, on purpose only, in one step, with no standing identity.
//!
//! **What starts it.** The operator's Deployment [`OPERATOR_NAME`] being deleted and staying
//! deleted for [`DEPARTURE_GRACE`] (a `kubectl replace --force` brings it back within that), or
//! the operator namespace being deleted. Never the momentary absence of a binding or a Role: an
//! RBAC clean-up script, `kubectl replace --force` or an Argo CD `Replace=true` sync of the
//! operator's RBAC is not an uninstall.
//!
//! **With what identity.** `helm uninstall` and `kubectl delete -k` delete the operator's
//! ServiceAccount and RBAC at the same moment as its Deployment. So the installation *holds* them:
//! the ServiceAccount, ClusterRole, ClusterRoleBinding and the Roles and RoleBindings of the
//! operator (all named [`OPERATOR_NAME`], see [`Held`]) carry the finalizer [`HOLD_FINALIZER`],
//! which keeps them, and so the operator's identity and permissions, while the operator cleans up
//! ([`teardown`]). The last of them cannot be released with the identity they make up (releasing
//! the ServiceAccount ends the identity, releasing a binding its permission), so at the very end the
//! operator makes a *release identity* ([`kit`]: a ServiceAccount in kube-system that may only
//! release those objects and delete itself), asks a 10-minute token for it, releases the held
//! objects with it, and deletes its root as its last request. It exists for the seconds of the
//! release; nothing is kept between installs and uninstalls.
//!
//! An object of the operator's identity deleted while the Deployment stays (the RBAC cases above)
//! is released after [`DEPARTURE_GRACE`], so it goes and can be created again.
//!
//! Helm runs a pre-delete hook first (the chart's `uninstall` Job: `ksched uninstall`, with a
//! hook identity that exists only while the hook runs): it stops the operator, does the cleanup
//! and releases the held objects itself, before Helm deletes anything; so it also works when the
//! operator is dead. `kubectl delete -k` with the operator dead leaves the held objects and the
//! LeafClusterPolicies' finalizers: `ksched uninstall` with the user's credentials finishes it.
//!
//! Several replicas: the one that was leading cleans up at once; the others leave it
//! [`FOLLOWER_DEFER`] (seen as the held objects being released) and do it only if it did not.

mod kit;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub use kit::{Kit, RELEASE_NAME, RELEASE_NAMESPACE, kit};

use super::render::FIELD_MANAGER;
use super::{
    Error, FINALIZER, LEASE_NAME, LEGACY_FINALIZER, OPERATOR_NAME, apply, is_conflict,
    is_not_found, remove_finalizer,
};
use crate::api::{LeafClusterPolicy, SchedulerProfile};

/// Label selector of everything the operator renders for profiles (not the release identity).
pub(crate) const RENDERED: &str =
    "app.kubernetes.io/managed-by=ksched-operator,app.kubernetes.io/component=scheduler";

/// The finalizer by which the installation holds the objects of the operator's identity through
/// an uninstall (the chart puts it on them).
pub const HOLD_FINALIZER: &str = "ksched.io/uninstall";

/// How long the operator's Deployment must stay deleted before the operator takes it for an
/// uninstall; and how long an object of its identity must be going while the Deployment stays
/// before it is released as not an uninstall.
pub const DEPARTURE_GRACE: Duration = Duration::from_secs(3);
/// How long a follower leaves the cleanup to the leader.
pub const FOLLOWER_DEFER: Duration = Duration::from_secs(10);
/// The lifetime asked for the release identity's token (the API server's minimum).
const RELEASE_TOKEN_SECONDS: i64 = 600;
/// How long the release identity's permissions may take to reach the API server's authorizer.
const RELEASE_WAIT: Duration = Duration::from_secs(10);
/// How often the state of the installation is looked at (besides its watches).
const TICK: Duration = Duration::from_millis(500);
/// Passes of [`teardown`] before it gives up (each one resumes where the last failed).
const PASSES: u32 = 3;
/// How long `ksched uninstall` waits for the operator to stop leading.
const STOP_WAIT: Duration = Duration::from_secs(90);

/// One object of the operator's identity that the installation holds with [`HOLD_FINALIZER`];
/// each is named [`OPERATOR_NAME`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Held {
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    /// In the operator namespace.
    Role,
    RoleBinding,
    /// In kube-system (the profiles' auth-reader bindings; the release identity's ServiceAccount).
    KubeSystemRole,
    KubeSystemRoleBinding,
}

impl Held {
    pub const ALL: [Held; 7] = [
        Held::ServiceAccount,
        Held::ClusterRole,
        Held::ClusterRoleBinding,
        Held::Role,
        Held::RoleBinding,
        Held::KubeSystemRole,
        Held::KubeSystemRoleBinding,
    ];

    /// Its namespace, for an operator in `namespace` (None: cluster-scoped).
    pub fn namespace(self, namespace: &str) -> Option<&str> {
        match self {
            Held::ServiceAccount | Held::Role | Held::RoleBinding => Some(namespace),
            Held::KubeSystemRole | Held::KubeSystemRoleBinding => Some("kube-system"),
            Held::ClusterRole | Held::ClusterRoleBinding => None,
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Held::ServiceAccount => "ServiceAccount",
            Held::ClusterRole => "ClusterRole",
            Held::ClusterRoleBinding => "ClusterRoleBinding",
            Held::Role | Held::KubeSystemRole => "Role",
            Held::RoleBinding | Held::KubeSystemRoleBinding => "RoleBinding",
        }
    }

    /// `Kind [namespace/]name`.
    pub fn describe(self, namespace: &str) -> String {
        match self.namespace(namespace) {
            Some(ns) => format!("{} {ns}/{OPERATOR_NAME}", self.kind()),
            None => format!("{} {OPERATOR_NAME}", self.kind()),
        }
    }
}

/// Runs `$body` with `$api` an `Api` of the held object's kind, in its namespace.
macro_rules! with_api {
    ($held:expr, $client:expr, $namespace:expr, |$api:ident| $body:expr) => {{
        let ns = $held.namespace($namespace).unwrap_or_default();
        match $held {
            Held::ServiceAccount => {
                let $api: Api<ServiceAccount> = Api::namespaced($client, ns);
                $body
            }
            Held::ClusterRole => {
                let $api: Api<ClusterRole> = Api::all($client);
                $body
            }
            Held::ClusterRoleBinding => {
                let $api: Api<ClusterRoleBinding> = Api::all($client);
                $body
            }
            Held::Role | Held::KubeSystemRole => {
                let $api: Api<Role> = Api::namespaced($client, ns);
                $body
            }
            Held::RoleBinding | Held::KubeSystemRoleBinding => {
                let $api: Api<RoleBinding> = Api::namespaced($client, ns);
                $body
            }
        }
    }};
}

/// What is known of one object (its metadata), once its watch listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    uid: String,
    deleting: bool,
    held: bool,
}

/// The objects a replica watches to know its installation's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Namespace,
    Deployment,
    Held(Held),
}

/// A watch event of one target: `Listing` starts a (re)list, `Listed` ends it, `Present`/`Absent`
/// is the object.
#[derive(Debug)]
enum Observed {
    Listing,
    Present(Seen),
    Absent,
    Listed,
}

/// The metadata watch of the object named `name` of `api`, as [`Observed`] events of `target`.
fn observe<K>(
    api: Api<PartialObjectMeta<K>>,
    name: &str,
    target: Target,
) -> BoxStream<'static, (Target, Observed)>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| async move {
            let seen = |o: &PartialObjectMeta<K>| Seen {
                uid: o.uid().unwrap_or_default(),
                deleting: o.metadata.deletion_timestamp.is_some(),
                held: o.finalizers().iter().any(|f| f == HOLD_FINALIZER),
            };
            let observed = match event {
                Ok(watcher::Event::Init) => Observed::Listing,
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                    Observed::Present(seen(&o))
                }
                Ok(watcher::Event::Delete(_)) => Observed::Absent,
                Ok(watcher::Event::InitDone) => Observed::Listed,
                Err(e) => {
                    tracing::debug!(?target, error = %crate::infra::logging::watch_error(&e), "watching the installation");
                    return None;
                }
            };
            Some((target, observed))
        })
        .boxed()
}

/// The installation as this replica sees it.
#[derive(Debug, Default)]
struct Installation {
    /// Per target: `None` until its watch listed; then the object or `None` for none.
    seen: BTreeMap<Target, Option<Option<Seen>>>,
    /// Targets being (re)listed, and whether the object was in the list.
    listing: BTreeMap<Target, bool>,
    /// Whether this is an installation: the operator's Deployment existed when it was first seen.
    installed: Option<bool>,
    /// Since when the Deployment is gone or going.
    deployment_gone_since: Option<Instant>,
    /// Since when each held object is going.
    going_since: BTreeMap<Held, Instant>,
    /// Held objects already released as deleted on purpose.
    released: Vec<Held>,
}

impl Installation {
    fn apply(&mut self, target: Target, observed: Observed) {
        match observed {
            Observed::Listing => {
                self.listing.insert(target, false);
            }
            Observed::Present(s) => {
                if let Some(found) = self.listing.get_mut(&target) {
                    *found = true;
                }
                self.seen.insert(target, Some(Some(s)));
            }
            Observed::Absent => {
                self.seen.insert(target, Some(None));
            }
            Observed::Listed => {
                if self.listing.remove(&target) == Some(false) {
                    self.seen.insert(target, Some(None));
                }
            }
        }
    }

    fn get(&self, target: Target) -> Option<&Option<Seen>> {
        self.seen.get(&target).and_then(Option::as_ref)
    }

    /// Why the installation is going, or the held objects to release because they are being
    /// deleted while it stays.
    fn assess(&mut self, namespace: &str, now: Instant) -> Assessment {
        let (Some(ns), Some(deployment)) = (
            self.get(Target::Namespace).cloned(),
            self.get(Target::Deployment).cloned(),
        ) else {
            return Assessment::Unknown;
        };
        let live = |s: &Option<Seen>| s.as_ref().is_some_and(|s| !s.deleting);
        let installed = *self.installed.get_or_insert(live(&deployment));
        if !installed {
            return Assessment::NotInstalled;
        }
        if !live(&ns) {
            return Assessment::Departing(format!("namespace {namespace} is being deleted"));
        }
        if live(&deployment) {
            self.deployment_gone_since = None;
        } else {
            let since = *self.deployment_gone_since.get_or_insert(now);
            if now.duration_since(since) >= DEPARTURE_GRACE {
                return Assessment::Departing(format!(
                    "Deployment {namespace}/{OPERATOR_NAME} was deleted and stayed deleted for {DEPARTURE_GRACE:?}"
                ));
            }
            return Assessment::Staying(Vec::new());
        }
        let mut release = Vec::new();
        for held in Held::ALL {
            let going = self
                .get(Target::Held(held))
                .and_then(Option::as_ref)
                .is_some_and(|s| s.deleting && s.held);
            if !going {
                self.going_since.remove(&held);
                self.released.retain(|h| *h != held);
                continue;
            }
            let since = *self.going_since.entry(held).or_insert(now);
            if now.duration_since(since) >= DEPARTURE_GRACE && !self.released.contains(&held) {
                self.released.push(held);
                release.push(held);
            }
        }
        Assessment::Staying(release)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Assessment {
    /// Not every watch listed yet.
    Unknown,
    /// No operator Deployment: an operator run by hand, nothing to clean up after.
    NotInstalled,
    Departing(String),
    /// Installed and staying; these held objects are deleted on purpose: release them.
    Staying(Vec<Held>),
}

/// One replica's watch on its installation (see the module docs). Its task ends when it is
/// dropped.
pub(crate) struct Departure {
    client: Client,
    /// The configuration the operator's client was made from (its cluster and CA), for the
    /// release identity's client.
    base: kube::Config,
    namespace: String,
    reason: tokio::sync::watch::Receiver<Option<String>>,
    /// Whether the Deployment is gone or going (None: not known yet).
    deployment_going: tokio::sync::watch::Receiver<Option<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Departure {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Departure {
    /// Starts watching the installation in `namespace` with the operator's own `client`, made
    /// from `base`.
    pub(crate) fn start(client: Client, base: kube::Config, namespace: &str) -> Departure {
        let (reason_tx, reason) = tokio::sync::watch::channel(None);
        let (going_tx, deployment_going) = tokio::sync::watch::channel(None);
        let mut events: SelectAll<BoxStream<'static, (Target, Observed)>> = SelectAll::new();
        let c = || client.clone();
        let here = namespace;
        events.push(observe(
            Api::<PartialObjectMeta<Namespace>>::all(c()),
            namespace,
            Target::Namespace,
        ));
        events.push(observe(
            Api::<PartialObjectMeta<Deployment>>::namespaced(c(), here),
            OPERATOR_NAME,
            Target::Deployment,
        ));
        for held in Held::ALL {
            let (ns, name, target) = (
                held.namespace(here).unwrap_or(here),
                OPERATOR_NAME,
                Target::Held(held),
            );
            events.push(match held {
                Held::ServiceAccount => observe(
                    Api::<PartialObjectMeta<ServiceAccount>>::namespaced(c(), ns),
                    name,
                    target,
                ),
                Held::ClusterRole => observe(
                    Api::<PartialObjectMeta<ClusterRole>>::all(c()),
                    name,
                    target,
                ),
                Held::ClusterRoleBinding => observe(
                    Api::<PartialObjectMeta<ClusterRoleBinding>>::all(c()),
                    name,
                    target,
                ),
                Held::Role | Held::KubeSystemRole => observe(
                    Api::<PartialObjectMeta<Role>>::namespaced(c(), ns),
                    name,
                    target,
                ),
                Held::RoleBinding | Held::KubeSystemRoleBinding => observe(
                    Api::<PartialObjectMeta<RoleBinding>>::namespaced(c(), ns),
                    name,
                    target,
                ),
            });
        }
        let task = {
            let client = client.clone();
            let namespace = namespace.to_string();
            tokio::spawn(async move {
                let mut installation = Installation::default();
                let mut tick = tokio::time::interval(TICK);
                loop {
                    tokio::select! {
                        event = events.next() => match event {
                            Some((target, observed)) => installation.apply(target, observed),
                            None => return,
                        },
                        _ = tick.tick() => {}
                    }
                    let going = installation
                        .get(Target::Deployment)
                        .map(|d| d.as_ref().is_none_or(|s| s.deleting));
                    going_tx.send_if_modified(|g| std::mem::replace(g, going) != going);
                    match installation.assess(&namespace, Instant::now()) {
                        Assessment::Unknown => {}
                        Assessment::NotInstalled => {
                            tracing::info!(
                                "no Deployment {namespace}/{OPERATOR_NAME}: not an installation, nothing to clean up after"
                            );
                            return;
                        }
                        Assessment::Departing(why) => {
                            tracing::info!(reason = %why, "ksched is being uninstalled");
                            let _ = reason_tx.send(Some(why));
                            return;
                        }
                        Assessment::Staying(release) => {
                            for held in release {
                                tracing::warn!(
                                    object = %held.describe(&namespace),
                                    "an object of the operator's identity is being deleted while ksched stays installed (a replace or an RBAC clean-up, not an uninstall): releasing it"
                                );
                                if let Err(e) = release_one(&client, &namespace, held).await {
                                    tracing::warn!(object = %held.describe(&namespace), error = %e, "releasing it failed");
                                }
                            }
                        }
                    }
                }
            })
        };
        Departure {
            client,
            base,
            namespace: namespace.to_string(),
            reason,
            deployment_going,
            task,
        }
    }

    /// Resolves once the installation is seen going (never for an operator that is not an
    /// installation's).
    pub(crate) async fn detected(&self) {
        let mut reason = self.reason.clone();
        if reason.wait_for(Option::is_some).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Why the installation is going, if it was seen going.
    pub(crate) fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// After a SIGTERM: the pod is going, and it is an uninstall if the Deployment went too and
    /// stays gone (a rollout, a drain or a scale-down keeps the Deployment).
    pub(crate) async fn after_shutdown(&self) -> Option<String> {
        if let Some(why) = self.reason() {
            return Some(why);
        }
        if *self.deployment_going.borrow() != Some(true) {
            return None;
        }
        tracing::info!(
            "the operator's Deployment is gone: waiting {DEPARTURE_GRACE:?} for it to stay gone"
        );
        tokio::time::timeout(DEPARTURE_GRACE + TICK * 4, self.detected())
            .await
            .ok()?;
        self.reason()
    }

    /// Removes what the operator added and rendered ([`teardown`]), then releases the objects of
    /// its identity ([`release_through_kit`]). A follower first leaves it to the leader for
    /// [`FOLLOWER_DEFER`].
    pub(crate) async fn tear_down(&self, leading: bool) -> Result<(), Error> {
        if !leading {
            tracing::info!("leaving the cleanup to the leading replica for {FOLLOWER_DEFER:?}");
            let deadline = Instant::now() + FOLLOWER_DEFER;
            while Instant::now() < deadline {
                match held_objects(&self.client, &self.namespace).await {
                    Ok(held) if held.is_empty() => {
                        tracing::info!("the leading replica finished the uninstall");
                        return Ok(());
                    }
                    Err(Error::Kube(e)) if identity_gone(&e) => {
                        tracing::info!("the leading replica finished the uninstall");
                        return Ok(());
                    }
                    _ => tokio::time::sleep(TICK).await,
                }
            }
        }
        let removed = teardown(&self.client, &self.namespace).await?;
        tracing::info!(%removed, "uninstalled: nothing the operator added or rendered is left");
        match release_through_kit(&self.client, &self.base, &self.namespace).await {
            Ok(()) => Ok(()),
            Err(Error::Kube(e)) if !leading && identity_gone(&e) => {
                tracing::info!("another replica released the operator's identity");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// `true` for 401 and 403: this identity, or its permission, is gone.
fn identity_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// The objects of the operator's identity that are still held, and whether each is being
/// deleted.
pub(crate) async fn held_objects(
    client: &Client,
    namespace: &str,
) -> Result<Vec<(Held, bool)>, Error> {
    let mut out = Vec::new();
    for held in Held::ALL {
        let meta = with_api!(held, client.clone(), namespace, |api| api
            .get_metadata_opt(OPERATOR_NAME)
            .await?
            .map(|o| (
                o.finalizers().iter().any(|f| f == HOLD_FINALIZER),
                o.metadata.deletion_timestamp.is_some()
            )));
        if let Some((true, deleting)) = meta {
            out.push((held, deleting));
        }
    }
    Ok(out)
}

/// Removes [`HOLD_FINALIZER`] from one held object with `client`'s identity.
async fn release_one(client: &Client, namespace: &str, held: Held) -> Result<(), Error> {
    with_api!(held, client.clone(), namespace, |api| remove_finalizer(
        &api,
        OPERATOR_NAME,
        HOLD_FINALIZER
    )
    .await)?;
    Ok(())
}

/// Releases every held object of the operator's identity with `client`'s, which is not among them
/// (the hook's, or the user's: `ksched uninstall`); how many.
pub async fn release(client: &Client, namespace: &str) -> Result<usize, Error> {
    let held = held_objects(client, namespace).await?;
    for (h, _) in &held {
        release_one(client, namespace, *h).await?;
    }
    Ok(held.len())
}

/// The operator's own release, at the end of its cleanup (see the module docs): the held objects
/// not being deleted are released with its own identity (nothing goes with them); those being
/// deleted, by the release identity, which deletes itself last.
async fn release_through_kit(
    main: &Client,
    base: &kube::Config,
    namespace: &str,
) -> Result<(), Error> {
    let held = held_objects(main, namespace).await?;
    for (h, _) in held.iter().filter(|(_, deleting)| !deleting) {
        release_one(main, namespace, *h).await?;
    }
    let going: Vec<Held> = held
        .iter()
        .filter(|(_, deleting)| *deleting)
        .map(|(h, _)| *h)
        .collect();
    if going.is_empty() {
        return Ok(());
    }
    let k = kit();
    let root = apply(&Api::all(main.clone()), &k.cluster_role).await?;
    let uid = root
        .uid()
        .ok_or_else(|| Error::Uninstall(format!("ClusterRole {RELEASE_NAME} has no uid")))?;
    let k = k.owned_by(&uid);
    apply(&Api::all(main.clone()), &k.cluster_role_binding).await?;
    apply(
        &Api::namespaced(main.clone(), RELEASE_NAMESPACE),
        &k.service_account,
    )
    .await?;
    let releaser = release_client(main, base).await?;
    // The binding reaches the API server's authorizer a moment after it was written.
    let deadline = Instant::now() + RELEASE_WAIT;
    for h in &going {
        loop {
            match release_one(&releaser, namespace, *h).await {
                Ok(()) => break,
                Err(Error::Kube(e)) if identity_gone(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    match Api::<ClusterRole>::all(releaser)
        .delete(RELEASE_NAME, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(
        released = ?going.iter().map(|h| h.describe(namespace)).collect::<Vec<_>>(),
        identity = RELEASE_NAME,
        "released the operator's identity; the release identity deleted itself"
    );
    Ok(())
}

/// A client with the release identity: `base` (the operator's cluster address and CA) with a
/// short-lived token of the release ServiceAccount.
async fn release_client(main: &Client, base: &kube::Config) -> Result<Client, Error> {
    let request = TokenRequest {
        // No audiences: the API server's own.
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(RELEASE_TOKEN_SECONDS),
            bound_object_ref: None,
            attestations: None,
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(main.clone(), RELEASE_NAMESPACE)
        .create_token_request(RELEASE_NAME, &PostParams::default(), &request)
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

/// Stops the operator of `namespace` (`ksched uninstall`, the chart's pre-delete hook): its
/// Deployment scaled to 0, then waits until no replica leads (its Lease released or expired), so
/// nothing re-renders or re-taints behind the cleanup. `Ok(false)` when there was no operator.
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
            return Ok(scaled);
        }
        if Instant::now() > deadline {
            return Err(Error::Uninstall(format!(
                "an operator replica still leads on Lease {namespace}/{LEASE_NAME} {STOP_WAIT:?} after its Deployment was scaled to 0"
            )));
        }
        tokio::time::sleep(TICK).await;
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
        let status = super::status::uninstalled(&previous, p.metadata.generation, Timestamp::now());
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

/// Deletes a release identity a crashed release left behind (its root; the rest goes by garbage
/// collection).
pub async fn delete_leftover_release(client: &Client) -> Result<bool, Error> {
    match Api::<ClusterRole>::all(client.clone())
        .delete(RELEASE_NAME, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(deleting: bool, held: bool) -> Observed {
        Observed::Present(Seen {
            uid: "u".into(),
            deleting,
            held,
        })
    }

    /// An installation whose namespace, Deployment and held objects are all listed and live.
    fn listed() -> Installation {
        let mut i = Installation::default();
        let mut targets = vec![Target::Namespace, Target::Deployment];
        targets.extend(Held::ALL.map(Target::Held));
        for t in targets {
            i.apply(t, Observed::Listing);
            i.apply(t, present(false, matches!(t, Target::Held(_))));
            i.apply(t, Observed::Listed);
        }
        i
    }

    #[test]
    fn nothing_is_decided_before_every_watch_listed() {
        let mut i = Installation::default();
        assert_eq!(i.assess("ns", Instant::now()), Assessment::Unknown);
        i.apply(Target::Namespace, Observed::Listing);
        i.apply(Target::Namespace, present(false, false));
        i.apply(Target::Namespace, Observed::Listed);
        assert_eq!(i.assess("ns", Instant::now()), Assessment::Unknown);
        // A list that found nothing: the Deployment does not exist.
        i.apply(Target::Deployment, Observed::Listing);
        i.apply(Target::Deployment, Observed::Listed);
        assert_eq!(i.assess("ns", Instant::now()), Assessment::NotInstalled);
    }

    #[test]
    fn a_deleted_deployment_is_an_uninstall_only_once_it_stayed_deleted() {
        let mut i = listed();
        let t0 = Instant::now();
        assert_eq!(i.assess("ns", t0), Assessment::Staying(vec![]));
        i.apply(Target::Deployment, Observed::Absent);
        assert_eq!(i.assess("ns", t0), Assessment::Staying(vec![]));
        // `kubectl replace --force`: it is back within the grace.
        i.apply(Target::Deployment, present(false, false));
        assert_eq!(
            i.assess("ns", t0 + DEPARTURE_GRACE * 2),
            Assessment::Staying(vec![])
        );
        // Deleted for good.
        i.apply(Target::Deployment, present(true, false));
        let t1 = t0 + DEPARTURE_GRACE * 3;
        assert_eq!(i.assess("ns", t1), Assessment::Staying(vec![]));
        assert!(matches!(
            i.assess("ns", t1 + DEPARTURE_GRACE),
            Assessment::Departing(why) if why.contains("Deployment ns/ksched-operator was deleted")
        ));
    }

    #[test]
    fn a_namespace_being_deleted_is_an_uninstall_at_once() {
        let mut i = listed();
        i.apply(Target::Namespace, present(true, false));
        assert!(matches!(
            i.assess("ns", Instant::now()),
            Assessment::Departing(why) if why.contains("namespace ns")
        ));
    }

    #[test]
    fn a_binding_deleted_while_the_deployment_stays_is_released_after_the_grace_and_once() {
        let mut i = listed();
        let t0 = Instant::now();
        i.apply(Target::Held(Held::ClusterRoleBinding), present(true, true));
        assert_eq!(i.assess("ns", t0), Assessment::Staying(vec![]));
        assert_eq!(
            i.assess("ns", t0 + DEPARTURE_GRACE),
            Assessment::Staying(vec![Held::ClusterRoleBinding])
        );
        assert_eq!(
            i.assess("ns", t0 + DEPARTURE_GRACE * 2),
            Assessment::Staying(vec![])
        );
        // It went, and a new one came (with the hold, from the chart): released again if deleted
        // again.
        i.apply(Target::Held(Held::ClusterRoleBinding), Observed::Absent);
        i.assess("ns", t0 + DEPARTURE_GRACE * 3);
        i.apply(Target::Held(Held::ClusterRoleBinding), present(false, true));
        i.assess("ns", t0 + DEPARTURE_GRACE * 4);
        i.apply(Target::Held(Held::ClusterRoleBinding), present(true, true));
        let t1 = t0 + DEPARTURE_GRACE * 5;
        assert_eq!(i.assess("ns", t1), Assessment::Staying(vec![]));
        assert_eq!(
            i.assess("ns", t1 + DEPARTURE_GRACE),
            Assessment::Staying(vec![Held::ClusterRoleBinding])
        );
    }

    #[test]
    fn held_objects_going_with_the_deployment_are_kept_for_the_cleanup() {
        let mut i = listed();
        let t0 = Instant::now();
        assert_eq!(i.assess("ns", t0), Assessment::Staying(vec![]));
        for h in Held::ALL {
            i.apply(Target::Held(h), present(true, true));
        }
        i.apply(Target::Deployment, Observed::Absent);
        for step in 0..2 {
            let now = t0 + DEPARTURE_GRACE / 2 * step;
            assert_eq!(i.assess("ns", now), Assessment::Staying(vec![]));
        }
        assert!(matches!(
            i.assess("ns", t0 + DEPARTURE_GRACE),
            Assessment::Departing(_)
        ));
    }

    #[test]
    fn every_held_object_is_named_after_the_operator() {
        let described: Vec<String> = Held::ALL.iter().map(|h| h.describe("ops")).collect();
        assert_eq!(
            described,
            [
                "ServiceAccount ops/ksched-operator",
                "ClusterRole ksched-operator",
                "ClusterRoleBinding ksched-operator",
                "Role ops/ksched-operator",
                "RoleBinding ops/ksched-operator",
                "Role kube-system/ksched-operator",
                "RoleBinding kube-system/ksched-operator",
            ]
        );
    }
}
