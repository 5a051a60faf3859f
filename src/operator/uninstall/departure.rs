//! One replica's watch on its installation: the namespace, the operator's Deployment and the
//! held objects, whether the installation is going (an uninstall) or an object of its identity is
//! deleted on purpose while it stays (released), and the cleanup when it goes.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::release::{held_objects, release_one, release_through_kit};
use super::teardown::teardown;
use super::{DEPARTURE_GRACE, FOLLOWER_DEFER, HOLD_FINALIZER, Held, TICK, identity_gone};
use crate::operator::{Error, OPERATOR_NAME};

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
}
