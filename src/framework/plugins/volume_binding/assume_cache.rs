//! Upstream's assume cache: an overlay of "assumed" objects over an informer store. The scheduler
//! assumes a PV bound to a claim (or a claim annotated with its selected node) in Reserve, so the
//! next pods' Filter sees it taken before the API update lands; Unreserve (or a failed PreBind)
//! restores the informer's object. An assumed object stays visible while the informer still holds
//! the version it was assumed from; a newer informer version replaces it.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Resource;
use parking_lot::RwLock;

use crate::framework::listers::ObjectStore;

/// Why an object could not be assumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AssumeError {
    #[error("{kind} {key:?} not found")]
    NotFound { kind: &'static str, key: String },
    #[error("{key:?} is out of sync (stored: {stored}, assume: {assume})")]
    OutOfSync {
        key: String,
        stored: String,
        assume: String,
    },
}

/// The resourceVersion as a number (upstream's `APIObjectVersioner`); absent or odd versions are 0.
pub(crate) fn resource_version<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Assumed objects of one kind, keyed like [`ObjectStore`] keys.
pub(crate) struct AssumeCache<K> {
    kind: &'static str,
    assumed: RwLock<HashMap<String, Arc<K>>>,
}

impl<K: Resource + Clone> AssumeCache<K> {
    pub(crate) fn new(kind: &'static str) -> AssumeCache<K> {
        AssumeCache {
            kind,
            assumed: RwLock::new(HashMap::new()),
        }
    }

    /// The assumed object when it is still current, else the informer's (upstream's `Get`).
    pub(crate) fn get(
        &self,
        store: &ObjectStore<K>,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<K>> {
        let api = store.get(namespace, name)?;
        Some(Self::current(&self.assumed.read(), api))
    }

    /// The assumed object for `api` when it is not older, else `api`. Builds no key when nothing
    /// is assumed: PreFilter lists every PV of a class for each pod.
    fn current(assumed: &HashMap<String, Arc<K>>, api: Arc<K>) -> Arc<K> {
        if assumed.is_empty() {
            return api;
        }
        match assumed.get(&ObjectStore::<K>::key_of(&api)) {
            Some(a) if resource_version(a.as_ref()) >= resource_version(api.as_ref()) => a.clone(),
            _ => api,
        }
    }

    /// Every object with assumptions applied.
    pub(crate) fn list(&self, store: &ObjectStore<K>) -> Vec<Arc<K>> {
        let assumed = self.assumed.read();
        store
            .list()
            .into_iter()
            .map(|o| Self::current(&assumed, o))
            .collect()
    }

    /// Records `obj` as assumed; it must not be older than what the cache shows now.
    pub(crate) fn assume(&self, store: &ObjectStore<K>, obj: K) -> Result<(), AssumeError> {
        let key = ObjectStore::<K>::key_of(&obj);
        let meta = obj.meta();
        let current = self
            .get(
                store,
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            )
            .ok_or_else(|| AssumeError::NotFound {
                kind: self.kind,
                key: key.clone(),
            })?;
        let (stored, assume) = (resource_version(current.as_ref()), resource_version(&obj));
        if assume < stored {
            return Err(AssumeError::OutOfSync {
                key,
                stored: stored.to_string(),
                assume: assume.to_string(),
            });
        }
        self.assumed.write().insert(key, Arc::new(obj));
        Ok(())
    }

    /// Drops the assumption for `key` (upstream's `Restore`).
    pub(crate) fn restore(&self, key: &str) {
        self.assumed.write().remove(key);
    }

    /// Forgets assumptions the informer has caught up with (or whose object is gone).
    pub(crate) fn prune(&self, store: &ObjectStore<K>) {
        self.assumed.write().retain(|key, assumed| {
            let (namespace, name) = key.split_once('/').unwrap_or(("", key.as_str()));
            store.get(namespace, name).is_some_and(|api| {
                resource_version(assumed.as_ref()) > resource_version(api.as_ref())
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PvBuilder;
    use k8s_openapi::api::core::v1::PersistentVolume;

    #[test]
    fn assume_restore_and_newer_informer_versions() {
        let store: ObjectStore<PersistentVolume> = ObjectStore::default();
        let cache = AssumeCache::new("persistentvolume");
        let pv = PvBuilder::new("pv-1").resource_version("5").build();
        // Nothing to assume on.
        assert!(matches!(
            cache.assume(&store, pv.clone()),
            Err(AssumeError::NotFound { .. })
        ));
        store.apply(pv.clone());
        let bound = PvBuilder::new("pv-1")
            .resource_version("5")
            .claim_ref("ns", "c", "uid")
            .build();
        cache.assume(&store, bound).expect("assume");
        let got = cache.get(&store, "", "pv-1").expect("pv");
        assert!(
            got.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some()
        );
        assert_eq!(cache.list(&store).len(), 1);
        // Older than what is shown: refused.
        let old = PvBuilder::new("pv-1").resource_version("4").build();
        assert_eq!(
            cache.assume(&store, old),
            Err(AssumeError::OutOfSync {
                key: "pv-1".into(),
                stored: "5".into(),
                assume: "4".into()
            })
        );
        // Restore shows the informer's object again.
        cache.restore("pv-1");
        let got = cache.get(&store, "", "pv-1").expect("pv");
        assert!(
            got.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_none()
        );
        // A newer informer version wins over an assumption.
        cache
            .assume(
                &store,
                PvBuilder::new("pv-1")
                    .resource_version("5")
                    .claim_ref("ns", "c", "uid")
                    .build(),
            )
            .expect("assume");
        store.apply(PvBuilder::new("pv-1").resource_version("6").build());
        let got = cache.get(&store, "", "pv-1").expect("pv");
        assert_eq!(resource_version(got.as_ref()), 6);
        assert!(
            got.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_none()
        );
    }
}
