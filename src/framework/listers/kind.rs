//! [`Kind`]: the one entry of a watched kind, and what it does for the rest of the system
//! ([`WatchedKind`]): the scheduler's informer, the cluster events, the RBAC rule, the batching
//! generation, the simulation's snapshot codec and live read.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::Value;

use super::store::{ObjectStore, Store, StoreChange};
use super::{EventSink, Listers, WatchContext, WatchedKind, trim_metadata};
use crate::emulation::Minor;
use crate::framework::types::{ActionType, ClusterEvent, EventResource};
use crate::infra::informer::{self, WatchSink, Watchable};

/// The entries of the kinds watched in this process, numbered as they are first used: an entry's
/// number is its store's place in every [`Listers`].
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A watched kind: objects of type `K` (those `selector` selects) kept in a store `S`. Declared
/// once, as a `static`, and named by the plugins that read it
/// (`PluginRegistration::with_informers`); `Handle::listers.store(&KIND)` is its store.
///
/// ```ignore
/// static WEIGHTS: Kind<ConfigMap> = Kind::new("NodeWeights")
///     .selected_by("example.com/node-weights")
///     .read_by_filter_or_score();
/// ```
pub struct Kind<K, S = ObjectStore<K>> {
    name: &'static str,
    resource: Option<EventResource>,
    /// The action of every change's event, when not the change's own (see [`Kind::events_as`]).
    action: Option<ActionType>,
    /// The first minor whose API server serves it (`None`: every supported minor).
    served_from: Option<Minor>,
    read_by_filter_or_score: bool,
    snapshot_name: Option<&'static str>,
    in_default_snapshot: bool,
    selector: Option<&'static str>,
    fed_by_pod_informer: bool,
    slot: OnceLock<usize>,
    objects: PhantomData<fn() -> (K, S)>,
}

impl<K, S> Kind<K, S> {
    /// A kind named `name` (unique among the kinds of a binary: `PersistentVolumes`), watched
    /// whole, whose changes are no cluster events and that no Filter or Score reads.
    pub const fn new(name: &'static str) -> Self {
        Kind {
            name,
            resource: None,
            action: None,
            served_from: None,
            read_by_filter_or_score: false,
            snapshot_name: None,
            in_default_snapshot: false,
            selector: None,
            fed_by_pod_informer: false,
            slot: OnceLock::new(),
            objects: PhantomData,
        }
    }

    /// Its changes are cluster events of `resource` (plugins register them to requeue pods).
    pub const fn events(mut self, resource: EventResource) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Every change of it is a cluster event of `resource` with `action`: for a kind that
    /// changes objects of another (a DeviceTaintRule, the devices of the ResourceSlices it
    /// selects, so upstream's slice tracker reports a slice update whatever the rule did).
    pub const fn events_as(mut self, resource: EventResource, action: ActionType) -> Self {
        self.resource = Some(resource);
        self.action = Some(action);
        self
    }

    /// API servers serve it from `minor` on: a scheduler emulating an older minor does not
    /// watch it (its informer would never sync).
    pub const fn served_from(mut self, minor: Minor) -> Self {
        self.served_from = Some(minor);
        self
    }

    /// Filter or Score results on a node may depend on it: a change ends opportunistic
    /// batching's reuse of results. (Kinds read only at PreFilter, which runs every cycle, need
    /// not say so.)
    pub const fn read_by_filter_or_score(mut self) -> Self {
        self.read_by_filter_or_score = true;
        self
    }

    /// A `ksched simulate` snapshot holds it, and `kubectl get <kubectl_name>` prints it; with
    /// `default`, the kubectl command of the docs lists it and a live read takes it even when
    /// no plugin needs it.
    pub const fn in_snapshot(mut self, kubectl_name: &'static str, default: bool) -> Self {
        self.snapshot_name = Some(kubectl_name);
        self.in_default_snapshot = default;
        self
    }

    /// Only the objects `label_selector` selects are watched.
    pub const fn selected_by(mut self, label_selector: &'static str) -> Self {
        self.selector = Some(label_selector);
        self
    }

    /// A kind of pods filled by the scheduler's pod informer, not by a watch of its own: the
    /// store changes in the same step as the queue (as upstream's pod group states, which the
    /// pod event handlers update before they queue the pod), so a plugin never counts a pod the
    /// queue has not seen yet, nor misses one it holds. Its changes raise no events of their own
    /// (the pod informer's are the events).
    pub const fn fed_by_pod_informer(mut self) -> Self {
        self.fed_by_pod_informer = true;
        self
    }

    /// Its store's place in every [`Listers`].
    pub(super) fn slot(&self) -> usize {
        *self
            .slot
            .get_or_init(|| NEXT_SLOT.fetch_add(1, Ordering::Relaxed))
    }

    pub(super) fn is_read_by_filter_or_score(&self) -> bool {
        self.read_by_filter_or_score
    }
}

/// What a kind's objects must be.
pub trait WatchedObject: Watchable + Serialize {}

impl<K: Watchable + Serialize> WatchedObject for K {}

/// Reads `item` as `K` after checking its apiVersion; errors name the field path.
fn decode<K: WatchedObject>(api_version: &str, item: Value) -> Result<K, String> {
    let want = K::api_version(&());
    if api_version != want {
        return Err(format!(
            "apiVersion {api_version:?} of kind {} is not supported: ksched reads {want:?} (what kubectl prints for this cluster version)",
            K::kind(&())
        ));
    }
    serde_path_to_error::deserialize(item).map_err(|e| match e.path().to_string() {
        p if p == "." => e.inner().to_string(),
        p => format!("{p}: {}", e.inner()),
    })
}

/// An informer's sink: trims what it gets, writes it to the kind's store, and hands every change
/// to the queue as the cluster event it is.
struct Sink<K: 'static, S: 'static> {
    kind: &'static Kind<K, S>,
    listers: Arc<Listers>,
    events: Arc<dyn EventSink>,
}

impl<K: WatchedObject, S: Store<K>> Sink<K, S> {
    fn store(&self) -> &S {
        self.listers.store(self.kind)
    }

    fn changed(&self, (old, new): StoreChange<K>) {
        let Some(resource) = self.kind.resource else {
            return;
        };
        let action = self.kind.action.unwrap_or(match (&old, &new) {
            (None, _) => ActionType::ADD,
            (_, None) => ActionType::DELETE,
            _ => ActionType::UPDATE,
        });
        let store = self.store();
        self.events.cluster_event(
            &ClusterEvent::new(resource, action),
            old.map(|o| store.event_object(o)),
            new.map(|n| store.event_object(n)),
        );
    }
}

impl<K: WatchedObject, S: Store<K>> WatchSink<K> for Sink<K, S> {
    fn apply(&mut self, mut obj: K) {
        trim_metadata(&mut obj);
        if let Some(change) = Store::apply(self.store(), obj) {
            self.changed(change);
        }
    }

    fn delete(&mut self, obj: K) {
        if let Some(change) = Store::delete(self.store(), obj) {
            self.changed(change);
        }
    }

    fn replace(&mut self, mut objs: Vec<K>) {
        objs.iter_mut().for_each(trim_metadata);
        for change in Store::replace(self.store(), objs) {
            self.changed(change);
        }
    }
}

impl<K: WatchedObject, S: Store<K>> WatchedKind for Kind<K, S> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn object_kind(&self) -> String {
        K::kind(&()).into_owned()
    }

    fn api_version(&self) -> String {
        K::api_version(&()).into_owned()
    }

    fn event_resource(&self) -> Option<EventResource> {
        self.resource
    }

    fn read_by_filter_or_score(&self) -> bool {
        self.read_by_filter_or_score
    }

    fn served_at(&self, minor: Minor) -> bool {
        self.served_from.is_none_or(|from| minor >= from)
    }

    fn rbac_rule(&self) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![K::group(&()).into_owned()]),
            resources: Some(vec![K::plural(&()).into_owned()]),
            verbs: vec!["list".into(), "watch".into()],
            ..PolicyRule::default()
        }
    }

    fn snapshot_name(&self) -> Option<&'static str> {
        self.snapshot_name
    }

    fn in_default_snapshot(&self) -> bool {
        self.in_default_snapshot
    }

    fn label_selector(&self) -> Option<&'static str> {
        self.selector
    }

    fn fed_by_pod_informer(&self) -> bool {
        self.fed_by_pod_informer
    }

    fn pod_applied(&'static self, listers: &Listers, pod: &Pod) {
        if let Some(pod) = (pod as &dyn Any).downcast_ref::<K>() {
            Store::apply_borrowed(listers.store(self), pod);
        }
    }

    fn pod_deleted(&'static self, listers: &Listers, namespace: &str, name: &str) {
        let pod = Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let pod: Box<dyn Any> = Box::new(pod);
        if let Ok(pod) = pod.downcast::<K>() {
            Store::delete(listers.store(self), *pod);
        }
    }

    fn len(&'static self, listers: &Listers) -> usize {
        listers.store(self).len()
    }

    fn decode(
        &'static self,
        listers: &Listers,
        api_version: &str,
        item: Value,
    ) -> Result<(), String> {
        let mut obj: K = decode(api_version, item)?;
        trim_metadata(&mut obj);
        Store::apply(listers.store(self), obj);
        Ok(())
    }

    fn replace_pods(&'static self, listers: &Listers, pods: Vec<Pod>) {
        let pods: Box<dyn Any> = Box::new(pods);
        if let Ok(pods) = pods.downcast::<Vec<K>>() {
            Store::replace(listers.store(self), *pods);
        }
    }

    fn encode(&'static self, listers: &Listers) -> Result<Vec<Value>, serde_json::Error> {
        Store::objects(listers.store(self))
            .iter()
            .map(|o| serde_json::to_value(&**o))
            .collect()
    }

    fn watch(&'static self, ctx: WatchContext) -> BoxFuture<'static, ()> {
        let WatchContext {
            client,
            listers,
            events,
            synced,
        } = ctx;
        let sink = Sink {
            kind: self,
            listers,
            events,
        };
        Box::pin(informer::watch::<K>(client, self.selector, sink, synced))
    }

    fn list<'a>(
        &'static self,
        client: &'a kube::Client,
        listers: &'a Listers,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let mut objs = informer::list_all::<K>(client, self.selector).await?;
            objs.iter_mut().for_each(trim_metadata);
            Store::replace(listers.store(self), objs);
            Ok(())
        })
    }
}
