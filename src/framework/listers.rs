//! Caches of the cluster objects some plugins read besides nodes and pods (volumes, storage,
//! disruption budgets, namespaces, PodGroups). A plugin declares the [`Informer`]s it needs in its
//! registration; the scheduler runtime watches only those kinds and fills these stores, so a
//! profile without volume plugins never lists a PersistentVolume. Plugins read them through
//! `Handle::listers`; tests fill them with plain values.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::Resource;
use parking_lot::RwLock;

use crate::api::PodGroup;
use crate::framework::types::next_generation;

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

/// Objects of one kind by `namespace/name` (or `name` when cluster-scoped).
pub struct ObjectStore<K> {
    items: RwLock<HashMap<String, Arc<K>>>,
    /// A new process-wide generation at every change (opportunistic batching reuses results only
    /// while the stores they read are unchanged).
    generation: AtomicU64,
}

impl<K> Default for ObjectStore<K> {
    fn default() -> Self {
        Self {
            items: RwLock::new(HashMap::new()),
            generation: AtomicU64::new(next_generation()),
        }
    }
}

impl<K> ObjectStore<K> {
    /// Changes whenever an object is applied, deleted or the store replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.store(next_generation(), Ordering::Release);
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
        let key = Self::key_of(&obj);
        self.items.write().insert(key, Arc::new(obj));
        self.changed();
    }

    pub fn delete(&self, key: &str) {
        self.items.write().remove(key);
        self.changed();
    }

    /// Replaces everything (after a re-list).
    pub fn replace(&self, objs: impl IntoIterator<Item = K>) {
        let map = objs
            .into_iter()
            .map(|o| (Self::key_of(&o), Arc::new(o)))
            .collect();
        *self.items.write() = map;
        self.changed();
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
    /// (volumes, storage, namespaces, DRA objects). Not the stores only PreFilter-time decisions
    /// read, which run afresh every cycle: a pod's Services and controllers (PodTopologySpread's
    /// default constraints, which a pod's signature covers), disruption budgets (preemption),
    /// PodGroups (Coscheduling, which does not sign).
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
        .max()
        .unwrap_or(0)
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
}
