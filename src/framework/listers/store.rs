//! [`ObjectStore`]: the objects of one watched kind, by key; and [`Store`], what an informer
//! needs of any store it fills (the members index is another).

use std::collections::HashMap;
use std::sync::Arc;

use kube::Resource;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::framework::types::EventObject;

/// A change a write made: `(old, new)`.
pub type StoreChange<K> = (Option<Arc<K>>, Option<Arc<K>>);

/// Counts a store's changes, for the tasks that follow it.
pub(super) struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Changes(watch::channel(0).0)
    }
}

impl Changes {
    pub(super) fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn count(&self) -> u64 {
        *self.0.borrow()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// A store an informer fills: an [`ObjectStore`], or a store of its own (the PodGroup members
/// index). Each write returns the change it made as `(old, new)`, for the cluster event it is.
pub trait Store<K>: Default + Send + Sync + 'static {
    /// Adds or updates `obj`; the change, or `None` when it is no event.
    fn apply(&self, obj: K) -> Option<StoreChange<K>>;
    /// [`apply`](Store::apply) of a borrowed object: a store that keeps only part of it (or
    /// only some objects) copies just that part.
    fn apply_borrowed(&self, obj: &K) -> Option<StoreChange<K>>
    where
        K: Clone,
    {
        self.apply(obj.clone())
    }
    /// Removes `obj`; the change, or `None` when it is no event.
    fn delete(&self, obj: K) -> Option<StoreChange<K>>;
    /// Replaces everything (after a re-list); the changes.
    fn replace(&self, objs: Vec<K>) -> Vec<StoreChange<K>>;
    /// What the queue's hints get for a stored object.
    fn event_object(&self, obj: Arc<K>) -> EventObject
    where
        K: Send + Sync + 'static,
    {
        EventObject::new(obj)
    }
    /// Every object stored.
    fn objects(&self) -> Vec<Arc<K>>;
    /// The number of writes so far (opportunistic batching reuses results only while the stores
    /// they read are unchanged).
    fn generation(&self) -> u64;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
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

impl<K> ObjectStore<K> {
    /// The number of writes to the store so far.
    pub fn generation(&self) -> u64 {
        self.changes.count()
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
        self.changes.subscribe()
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

impl<K: Resource + Send + Sync + 'static> Store<K> for ObjectStore<K> {
    fn apply(&self, obj: K) -> Option<StoreChange<K>> {
        let new = Arc::new(obj);
        Some((self.apply_arc(new.clone()), Some(new)))
    }

    fn delete(&self, obj: K) -> Option<StoreChange<K>> {
        let old = ObjectStore::delete(self, &ObjectStore::<K>::key_of(&obj));
        Some((Some(old.unwrap_or_else(|| Arc::new(obj))), None))
    }

    fn replace(&self, objs: Vec<K>) -> Vec<StoreChange<K>> {
        ObjectStore::replace(self, objs)
    }

    fn objects(&self) -> Vec<Arc<K>> {
        self.list()
    }

    fn generation(&self) -> u64 {
        ObjectStore::generation(self)
    }

    fn len(&self) -> usize {
        ObjectStore::len(self)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

    use super::*;

    #[test]
    fn namespaced_and_cluster_scoped_keys() {
        let claims = ObjectStore::<PersistentVolumeClaim>::default();
        let volumes = ObjectStore::<PersistentVolume>::default();
        let pvc: PersistentVolumeClaim = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "data", "namespace": "ns"}}),
        )
        .expect("pvc");
        let pv: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pv-1"}})).expect("pv");
        claims.apply(pvc);
        volumes.apply(pv);
        assert!(claims.get("ns", "data").is_some());
        assert!(claims.get("other", "data").is_none());
        assert!(volumes.get("", "pv-1").is_some());
        assert_eq!(claims.list_namespace("ns").len(), 1);
        claims.delete("ns/data");
        assert!(claims.is_empty());
    }
}
