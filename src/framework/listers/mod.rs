//! Caches of the cluster objects some plugins read besides nodes and pods (volumes, storage,
//! disruption budgets, namespaces, PodGroups and their member pods, ...), one per watched kind.
//!
//! A kind is declared once, as a [`Kind`] (the in-tree ones in [`in_tree`]): its objects, its
//! store, the cluster events its changes are, whether Filter or Score read it, how a snapshot
//! holds it. Everything else follows from that entry ([`WatchedKind`]): the scheduler's informer,
//! the RBAC rule the operator grants, opportunistic batching's generation, `ksched simulate`'s
//! snapshot codec and live read. A plugin names the kinds it reads in its registration
//! (`with_informers`); the scheduler watches only those, so a profile without volume plugins never
//! lists a PersistentVolume. Plugins read the stores through `Handle::listers`
//! (`listers.store(&PERSISTENT_VOLUMES)`); tests fill them with plain values. A background task
//! that follows a store waits on its `subscribe()`.

mod in_tree;
mod kind;
mod members;
mod store;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Resource;
use serde_json::Value;
use tokio::sync::watch;

pub use in_tree::{
    CSI_DRIVERS, CSI_NODES, CSI_STORAGE_CAPACITIES, DEVICE_CLASSES, DEVICE_TAINT_RULES, IN_TREE,
    NAMESPACES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, POD_DISRUPTION_BUDGETS,
    POD_GROUP_MEMBERS, POD_GROUPS, PRIORITY_CLASSES, REPLICA_SETS, REPLICATION_CONTROLLERS,
    RESOURCE_CLAIMS, RESOURCE_SLICES, SCHEDULING_GROUP_MEMBERS, SERVICES, STATEFUL_SETS,
    STORAGE_CLASSES, WORKLOAD_POD_GROUPS,
};
pub use kind::{Kind, WatchedObject};
pub use members::{BySchedulingGroup, GroupOf, PodGroupMembers};
pub use store::{ObjectStore, Store, StoreChange};

use super::types::{ClusterEvent, EventObject, EventResource};

/// A watched kind, as the rest of the system sees its entry (a [`Kind`]).
pub trait WatchedKind: Send + Sync + 'static {
    /// Unique among the kinds of a binary (`PersistentVolumes`).
    fn name(&self) -> &'static str;
    /// The objects' kind, as an object's `kind` field says it (`PersistentVolume`).
    fn object_kind(&self) -> String;
    fn api_version(&self) -> String;
    /// The cluster events its changes are; `None`: no event (as upstream has none for it).
    fn event_resource(&self) -> Option<EventResource>;
    /// Whether Filter or Score results on a node may depend on it (the batching generation).
    fn read_by_filter_or_score(&self) -> bool;
    /// Whether the API server of `minor` serves it (a scheduler emulating `minor` watches it).
    fn served_at(&self, minor: crate::emulation::Minor) -> bool;
    /// `list` and `watch` on its resource: what its informer needs.
    fn rbac_rule(&self) -> PolicyRule;
    /// kubectl's name of it when a snapshot holds it (`pv`).
    fn snapshot_name(&self) -> Option<&'static str>;
    /// Whether the snapshot command of the docs lists it (a live read takes it even when no
    /// plugin needs it).
    fn in_default_snapshot(&self) -> bool;
    /// The label selector its informer watches with, if it watches only some objects.
    fn label_selector(&self) -> Option<&'static str>;
    /// A kind of pods the scheduler's pod informer fills ([`Kind::fed_by_pod_informer`]): no
    /// informer of its own is started.
    fn fed_by_pod_informer(&self) -> bool;
    /// For a kind of pods: the pod informer added or updated `pod` (the kind's store in
    /// `listers` keeps it if it indexes it). Other kinds ignore it.
    fn pod_applied(&'static self, listers: &Listers, pod: &k8s_openapi::api::core::v1::Pod);
    /// For a kind of pods: the pod informer deleted the pod `namespace/name`.
    fn pod_deleted(&'static self, listers: &Listers, namespace: &str, name: &str);
    /// The number of objects its store in `listers` holds.
    fn len(&'static self, listers: &Listers) -> usize;
    /// Adds one object of a snapshot (`item` of `api_version`) to its store in `listers`.
    fn decode(
        &'static self,
        listers: &Listers,
        api_version: &str,
        item: Value,
    ) -> Result<(), String>;
    /// For a kind of pods (Coscheduling's members index): replaces its store's objects in
    /// `listers` with `pods`, as its informer's list would (the store keeps those it indexes).
    /// Other kinds ignore it.
    fn replace_pods(&'static self, listers: &Listers, pods: Vec<k8s_openapi::api::core::v1::Pod>);
    /// Every object of its store in `listers`, for a saved snapshot.
    fn encode(&'static self, listers: &Listers) -> Result<Vec<Value>, serde_json::Error>;
    /// The informer: lists and watches the kind into its store, hands each change to the queue
    /// as the cluster event it is, and says when the first list is in. Runs until aborted.
    fn watch(&'static self, ctx: WatchContext) -> BoxFuture<'static, ()>;
    /// Lists the kind from the API into its store (`ksched simulate` on a live cluster).
    fn list<'a>(
        &'static self,
        client: &'a kube::Client,
        listers: &'a Listers,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// A plugin's reference to a kind it reads: the kind's entry.
pub type Informer = &'static dyn WatchedKind;

impl PartialEq for dyn WatchedKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for dyn WatchedKind {}

impl PartialOrd for dyn WatchedKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn WatchedKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl fmt::Debug for dyn WatchedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an informer's changes go: the scheduling queue, which requeues the pods they may help.
pub trait EventSink: Send + Sync {
    fn cluster_event(
        &self,
        event: &ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    );
}

/// What a kind's informer gets from the scheduler.
pub struct WatchContext {
    pub client: kube::Client,
    pub listers: Arc<Listers>,
    pub events: Arc<dyn EventSink>,
    /// Set once the first list is in the store.
    pub synced: watch::Sender<bool>,
}

/// Written by `kubectl apply`: a full copy of the object, never read by the scheduler.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the bookkeeping every kind carries that no plugin reads (upstream's informers drop
/// `managedFields` too).
pub fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The most kinds one binary may declare (each has a place in every [`Listers`]).
const MAX_KINDS: usize = 128;

/// A kind's store, type-erased, with what [`Listers::generation`] needs of it.
struct Slot {
    store: Box<dyn Any + Send + Sync>,
    generation: fn(&(dyn Any + Send + Sync)) -> u64,
    read_by_filter_or_score: bool,
}

/// Every store a plugin may read: one per kind, created on first use.
pub struct Listers {
    slots: Box<[OnceLock<Slot>]>,
    /// What plugins share across the profiles of one scheduler (DynamicResources' claim tracker,
    /// as upstream's one `SharedDRAManager` per scheduler).
    pub plugin_state: PluginState,
}

impl Default for Listers {
    fn default() -> Self {
        Listers {
            slots: (0..MAX_KINDS).map(|_| OnceLock::new()).collect(),
            plugin_state: PluginState::default(),
        }
    }
}

impl Listers {
    /// The store of `kind`.
    pub fn store<K: 'static, S: Store<K>>(&self, kind: &'static Kind<K, S>) -> &S {
        let slot = self
            .slots
            .get(kind.slot())
            .unwrap_or_else(|| panic!("more than {MAX_KINDS} watched kinds"))
            .get_or_init(|| Slot {
                store: Box::new(S::default()),
                generation: |store| store.downcast_ref::<S>().map_or(0, S::generation),
                read_by_filter_or_score: kind.is_read_by_filter_or_score(),
            });
        // A slot holds the store its kind created, so the types agree.
        slot.store
            .downcast_ref::<S>()
            .unwrap_or_else(|| panic!("the store in slot {} has another type", kind.slot()))
    }

    /// Changes whenever a store that Filter or Score results on a node may depend on changes
    /// (volumes, storage, namespaces, DRA objects, ...): the sum of their write counts. Not the
    /// stores only PreFilter-time decisions read, which run afresh every cycle: a pod's Services
    /// and controllers (PodTopologySpread's default constraints, which make a pod unsignable),
    /// disruption budgets (preemption), PodGroups (Coscheduling, which does not sign).
    pub fn generation(&self) -> u64 {
        self.slots
            .iter()
            .filter_map(OnceLock::get)
            .filter(|s| s.read_by_filter_or_score)
            .map(|s| (s.generation)(s.store.as_ref()))
            .fold(0, u64::wrapping_add)
    }
}

/// State a plugin shares across every profile of one scheduler: one value per type, created on
/// first use. The plugin owns the type; the framework only keeps it alive.
#[derive(Default)]
pub struct PluginState {
    items: parking_lot::Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl PluginState {
    /// The shared `T`, created with its default on first use.
    pub fn get_or_default<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut items = self.items.lock();
        let item = items
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match Arc::clone(item).downcast::<T>() {
            Ok(value) => value,
            // Entries are keyed by their own type, so this does not happen; a fresh value keeps
            // the caller working all the same.
            Err(_) => {
                let value = Arc::new(T::default());
                *item = value.clone();
                value
            }
        }
    }
}

impl fmt::Debug for Listers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stores = self.slots.iter().filter(|s| s.get().is_some()).count();
        f.debug_struct("Listers")
            .field("stores", &stores)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PersistentVolume, Service};

    use super::*;

    fn pv(name: &str) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("pv")
    }

    #[test]
    fn each_kind_has_its_store_and_only_filter_kinds_move_the_generation() {
        let listers = Listers::default();
        listers.store(&PERSISTENT_VOLUMES).apply(pv("a"));
        assert_eq!(listers.store(&PERSISTENT_VOLUMES).len(), 1);
        assert!(listers.store(&PERSISTENT_VOLUME_CLAIMS).is_empty());
        let before = listers.generation();
        listers.store(&PERSISTENT_VOLUMES).apply(pv("b"));
        assert_ne!(listers.generation(), before, "Filter reads volumes");
        let before = listers.generation();
        listers.store(&SERVICES).apply(Service::default());
        assert_eq!(
            listers.generation(),
            before,
            "only PreFilter reads services"
        );
    }

    #[test]
    fn kinds_are_ordered_and_equal_by_name() {
        let mut kinds: Vec<Informer> = vec![&SERVICES, &PERSISTENT_VOLUMES, &SERVICES];
        kinds.sort();
        kinds.dedup();
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["PersistentVolumes", "Services"]);
        assert_eq!(PERSISTENT_VOLUMES.object_kind(), "PersistentVolume");
        let rule = PERSISTENT_VOLUME_CLAIMS.rbac_rule();
        assert_eq!(rule.resources, Some(vec!["persistentvolumeclaims".into()]));
        assert_eq!(rule.verbs, ["list", "watch"]);
    }
}
