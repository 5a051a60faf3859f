//! Caches of the cluster objects some plugins read besides nodes and pods (volumes, storage,
//! disruption budgets, namespaces, PodGroups and their member pods). A plugin declares the
//! [`Informer`]s it needs in its registration; the scheduler runtime watches only those kinds and
//! fills these stores, so a profile without volume plugins never lists a PersistentVolume. Plugins
//! read them through `Handle::listers`; tests fill them with plain values. A background task that
//! follows a store waits on its [`ObjectStore::subscribe`] (or [`PodGroupMembers::subscribe`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec, PodStatus,
    ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use parking_lot::RwLock;
use tokio::sync::watch;

use super::types::EventResource;
use crate::api::PodGroup;
use crate::api::pod_group::POD_GROUP_LABEL;

/// A kind of object a plugin needs watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Informer {
    PersistentVolumes,
    PersistentVolumeClaims,
    StorageClasses,
    CSINodes,
    CSIDrivers,
    CSIStorageCapacities,
    PodDisruptionBudgets,
    Namespaces,
    PodGroups,
    /// Pods that carry the `scheduling.x-k8s.io/pod-group` label, in every phase (Coscheduling
    /// counts a group's members and their Running/Succeeded/Failed numbers).
    PodGroupMembers,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets: the owners PodTopologySpread's
    /// default constraints derive a pod's selector from.
    Services,
    ReplicationControllers,
    ReplicaSets,
    StatefulSets,
    /// resource.k8s.io: what DynamicResources allocates from and to.
    ResourceClaims,
    ResourceSlices,
    DeviceClasses,
}

/// A change a re-list found: `(old, new)`.
pub type StoreChange<K> = (Option<Arc<K>>, Option<Arc<K>>);

impl Informer {
    /// The resource of the cluster events its changes are; `None` for kinds whose changes no
    /// plugin registers (as upstream, which has no events for them).
    pub fn event_resource(self) -> Option<EventResource> {
        Some(match self {
            Informer::PersistentVolumes => EventResource::PersistentVolume,
            Informer::PersistentVolumeClaims => EventResource::PersistentVolumeClaim,
            Informer::StorageClasses => EventResource::StorageClass,
            Informer::CSINodes => EventResource::CSINode,
            Informer::CSIDrivers => EventResource::CSIDriver,
            Informer::CSIStorageCapacities => EventResource::CSIStorageCapacity,
            Informer::PodGroups => EventResource::PodGroup,
            Informer::ResourceClaims => EventResource::ResourceClaim,
            Informer::ResourceSlices => EventResource::ResourceSlice,
            Informer::DeviceClasses => EventResource::DeviceClass,
            Informer::PodDisruptionBudgets
            | Informer::Namespaces
            | Informer::Services
            | Informer::ReplicationControllers
            | Informer::ReplicaSets
            | Informer::StatefulSets => return None,
            // A pending member once the index holds it (the pod informer's own events say the
            // rest); see the scheduler's informers.
            Informer::PodGroupMembers => EventResource::UnscheduledPod,
        })
    }
}

/// Counts a store's changes, for the tasks that follow it.
struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Changes(watch::channel(0).0)
    }
}

impl Changes {
    fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl<K> ObjectStore<K> {
    /// The number of writes to the store so far (opportunistic batching reuses results only while
    /// the stores they read are unchanged).
    pub fn generation(&self) -> u64 {
        *self.changes.0.borrow()
    }
}

/// Objects of one kind by `namespace/name` (or `name` when cluster-scoped).
pub struct ObjectStore<K> {
    items: RwLock<HashMap<String, Arc<K>>>,
    changes: Changes,
}

impl<K> Default for ObjectStore<K> {
    fn default() -> Self {
        Self {
            items: RwLock::new(HashMap::new()),
            changes: Changes::default(),
        }
    }
}

impl<K: Resource> ObjectStore<K> {
    /// The store key of an object: `namespace/name`, or `name` for cluster-scoped kinds.
    pub fn key_of(obj: &K) -> String {
        let meta = obj.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        match meta.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_string(),
        }
    }

    pub fn apply(&self, obj: K) {
        self.apply_arc(Arc::new(obj));
    }

    /// Stores `obj`; returns the object it replaced.
    pub fn apply_arc(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = Self::key_of(&obj);
        let old = self.items.write().insert(key, obj);
        self.changes.bump();
        old
    }

    /// Removes the object under `key`; returns it.
    pub fn delete(&self, key: &str) -> Option<Arc<K>> {
        let old = self.items.write().remove(key);
        self.changes.bump();
        old
    }

    /// Replaces everything (after a re-list); returns what changed: `(old, new)` per object
    /// added (no old), changed (another resourceVersion) or gone (no new).
    pub fn replace(&self, objs: impl IntoIterator<Item = K>) -> Vec<StoreChange<K>> {
        let map: HashMap<String, Arc<K>> = objs
            .into_iter()
            .map(|o| (Self::key_of(&o), Arc::new(o)))
            .collect();
        let old = std::mem::replace(&mut *self.items.write(), map.clone());
        let mut changes = Vec::new();
        for (key, new) in &map {
            match old.get(key) {
                None => changes.push((None, Some(new.clone()))),
                Some(o) if o.meta().resource_version != new.meta().resource_version => {
                    changes.push((Some(o.clone()), Some(new.clone())))
                }
                Some(_) => {}
            }
        }
        for (key, o) in old {
            if !map.contains_key(&key) {
                changes.push((Some(o), None));
            }
        }
        self.changes.bump();
        changes
    }

    /// Changes with every write to the store.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.0.subscribe()
    }

    /// A namespaced object (`namespace` non-empty) or a cluster-scoped one (`namespace` empty).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let items = self.items.read();
        if namespace.is_empty() {
            items.get(name).cloned()
        } else {
            items.get(&format!("{namespace}/{name}")).cloned()
        }
    }

    pub fn list(&self) -> Vec<Arc<K>> {
        self.items.read().values().cloned().collect()
    }

    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.items
            .read()
            .values()
            .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.items.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.read().is_empty()
    }
}

/// The pods that carry the pod-group label, by group (`namespace/group`), kept as much of each
/// as Coscheduling reads: name, uid, labels, owners, deletion, node, scheduler name and phase.
#[derive(Default)]
pub struct PodGroupMembers {
    inner: RwLock<Members>,
    changes: Changes,
}

#[derive(Default)]
struct Members {
    /// `namespace/group` -> pod name -> pod.
    by_group: HashMap<String, HashMap<String, Arc<Pod>>>,
    /// `namespace/name` -> its group key.
    group_of: HashMap<String, String>,
}

impl Members {
    fn remove(&mut self, pod_key: &str) -> bool {
        let Some(group) = self.group_of.remove(pod_key) else {
            return false;
        };
        let name = pod_key.split_once('/').map_or(pod_key, |(_, n)| n);
        if let Some(pods) = self.by_group.get_mut(&group) {
            pods.remove(name);
            if pods.is_empty() {
                self.by_group.remove(&group);
            }
        }
        true
    }

    /// Whether the pod joined a group (it was not a member of that group before).
    fn insert(&mut self, pod: Pod) -> bool {
        let (key, group) = member_keys(&pod);
        let joined = self.group_of.get(&key) != group.as_ref();
        self.remove(&key);
        let Some(group) = group else {
            return false;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.group_of.insert(key, group.clone());
        self.by_group
            .entry(group)
            .or_default()
            .insert(name, Arc::new(member(pod)));
        joined
    }
}

/// `namespace/name` of a pod, and `namespace/group` of its group (if it has one).
fn member_keys(pod: &Pod) -> (String, Option<String>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let group = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(POD_GROUP_LABEL))
        .filter(|g| !g.is_empty())
        .map(|g| format!("{ns}/{g}"));
    (format!("{ns}/{name}"), group)
}

/// What of a member pod is kept.
fn member(pod: Pod) -> Pod {
    let Pod {
        metadata,
        spec,
        status,
        ..
    } = pod;
    Pod {
        metadata: ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            labels: metadata.labels,
            owner_references: metadata.owner_references,
            deletion_timestamp: metadata.deletion_timestamp,
            creation_timestamp: metadata.creation_timestamp,
            ..Default::default()
        },
        spec: spec.map(|s| PodSpec {
            node_name: s.node_name,
            scheduler_name: s.scheduler_name,
            ..Default::default()
        }),
        status: status.map(|s| PodStatus {
            phase: s.phase,
            ..Default::default()
        }),
    }
}

impl PodGroupMembers {
    /// Adds or updates a pod (one without the label leaves its group); whether it joined a group.
    pub fn apply(&self, pod: Pod) -> bool {
        let joined = self.inner.write().insert(pod);
        self.changes.bump();
        joined
    }

    /// Removes the pod `namespace/name`; whether it was a member.
    pub fn delete(&self, pod_key: &str) -> bool {
        let removed = self.inner.write().remove(pod_key);
        self.changes.bump();
        removed
    }

    /// Replaces every member (after a re-list).
    pub fn replace(&self, pods: impl IntoIterator<Item = Pod>) {
        let mut fresh = Members::default();
        for pod in pods {
            fresh.insert(pod);
        }
        *self.inner.write() = fresh;
        self.changes.bump();
    }

    /// The pods of group `group` in `namespace`, in every phase.
    pub fn members(&self, namespace: &str, group: &str) -> Vec<Arc<Pod>> {
        self.inner
            .read()
            .by_group
            .get(&format!("{namespace}/{group}"))
            .map(|pods| pods.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Changes with every write to the store.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.0.subscribe()
    }

    pub fn len(&self) -> usize {
        self.inner.read().group_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every store a plugin may read.
#[derive(Default)]
pub struct Listers {
    pub persistent_volumes: ObjectStore<PersistentVolume>,
    pub persistent_volume_claims: ObjectStore<PersistentVolumeClaim>,
    pub storage_classes: ObjectStore<StorageClass>,
    pub csi_nodes: ObjectStore<CSINode>,
    pub csi_drivers: ObjectStore<CSIDriver>,
    pub csi_storage_capacities: ObjectStore<CSIStorageCapacity>,
    pub pod_disruption_budgets: ObjectStore<PodDisruptionBudget>,
    pub namespaces: ObjectStore<Namespace>,
    pub pod_groups: ObjectStore<PodGroup>,
    pub pod_group_members: PodGroupMembers,
    pub services: ObjectStore<Service>,
    pub replication_controllers: ObjectStore<ReplicationController>,
    pub replica_sets: ObjectStore<ReplicaSet>,
    pub stateful_sets: ObjectStore<StatefulSet>,
    pub resource_claims: ObjectStore<ResourceClaim>,
    pub resource_slices: ObjectStore<ResourceSlice>,
    pub device_classes: ObjectStore<DeviceClass>,
    /// What plugins share across the profiles of one scheduler (DynamicResources' claim tracker,
    /// as upstream's one `SharedDRAManager` per scheduler).
    pub plugin_state: PluginState,
}

impl Listers {
    /// Changes whenever a store that Filter or Score results on a node may depend on changes
    /// (volumes, storage, namespaces, DRA objects): the sum of their write counts. Not the stores
    /// only PreFilter-time decisions read, which run afresh every cycle: a pod's Services and
    /// controllers (PodTopologySpread's default constraints, which make a pod unsignable),
    /// disruption budgets (preemption), PodGroups (Coscheduling, which does not sign).
    pub fn generation(&self) -> u64 {
        [
            self.persistent_volumes.generation(),
            self.persistent_volume_claims.generation(),
            self.storage_classes.generation(),
            self.csi_nodes.generation(),
            self.csi_drivers.generation(),
            self.csi_storage_capacities.generation(),
            self.namespaces.generation(),
            self.resource_claims.generation(),
            self.resource_slices.generation(),
            self.device_classes.generation(),
        ]
        .into_iter()
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

impl std::fmt::Debug for Listers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listers")
            .field("persistent_volumes", &self.persistent_volumes.len())
            .field(
                "persistent_volume_claims",
                &self.persistent_volume_claims.len(),
            )
            .field("pod_groups", &self.pod_groups.len())
            .field("pod_group_members", &self.pod_group_members.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_and_cluster_scoped_keys() {
        let listers = Listers::default();
        let pvc: PersistentVolumeClaim = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "data", "namespace": "ns"}}),
        )
        .expect("pvc");
        let pv: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pv-1"}})).expect("pv");
        listers.persistent_volume_claims.apply(pvc);
        listers.persistent_volumes.apply(pv);
        assert!(listers.persistent_volume_claims.get("ns", "data").is_some());
        assert!(
            listers
                .persistent_volume_claims
                .get("other", "data")
                .is_none()
        );
        assert!(listers.persistent_volumes.get("", "pv-1").is_some());
        assert_eq!(
            listers.persistent_volume_claims.list_namespace("ns").len(),
            1
        );
        listers.persistent_volume_claims.delete("ns/data");
        assert!(listers.persistent_volume_claims.is_empty());
    }

    fn pod(name: &str, group: Option<&str>, phase: &str) -> Pod {
        let labels = group.map(|g| serde_json::json!({ POD_GROUP_LABEL: g }));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "annotations": {"big": "dropped"}},
            "spec": {"nodeName": "n1", "schedulerName": "s",
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "podIP": "10.0.0.1"},
        }))
        .expect("pod")
    }

    #[test]
    fn members_by_group_follow_their_label() {
        let members = PodGroupMembers::default();
        let mut changes = members.subscribe();
        assert!(members.apply(pod("a", Some("g"), "Pending")));
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        // An update in the same group is not a new member, but still a change.
        assert!(!members.apply(pod("a", Some("g"), "Running")));
        assert!(changes.has_changed().unwrap_or(false));
        assert!(members.apply(pod("b", Some("g"), "Succeeded")));
        assert!(members.apply(pod("c", Some("other"), "Pending")));
        let mut names: Vec<String> = members
            .members("ns", "g")
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        // Kept: what Coscheduling reads; dropped: the rest.
        let a = members
            .members("ns", "g")
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some("a"))
            .unwrap();
        assert_eq!(
            a.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        assert_eq!(
            a.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("n1")
        );
        assert!(a.metadata.annotations.is_none());
        assert!(a.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
        // Relabelled: moves to its new group; unlabelled: leaves.
        assert!(members.apply(pod("a", Some("other"), "Running")));
        assert_eq!(members.members("ns", "g").len(), 1);
        assert!(!members.apply(pod("a", None, "Running")));
        assert_eq!(members.members("ns", "other").len(), 1);
        assert!(members.delete("ns/b"));
        assert!(!members.delete("ns/b"));
        assert!(members.members("ns", "g").is_empty());
        members.replace([pod("x", Some("g"), "Pending")]);
        assert_eq!(members.len(), 1);
        assert!(members.members("ns", "other").is_empty());
    }
}
