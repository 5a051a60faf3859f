//! Plugin name -> factory, and the [`Handle`] plugins receive.
//!
//! Every plugin registers its name, the extension points it implements, a strict args decoder and
//! a factory. The registry knows no plugin itself: the in-tree list lives with the plugins
//! (`plugins::register_in_tree`, which also provides `Registry::in_tree`). A user's own binary adds
//! out-of-tree plugins with [`Registry::register`] — the Rust form of `app.WithPlugin`; a plugin
//! known but not runnable yet is registered with [`Registry::register_not_built`], so
//! configurations naming it validate.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodCondition};
use k8s_openapi::api::resource::v1::ResourceClaim;
use parking_lot::RwLock;
use serde_json::Value;

use super::interface::{NominatingInfo, Plugin};
use super::listers::{Informer, Listers};
use super::types::{PodInfo, Snapshot};
use super::waiting_pods::WaitingPods;
use crate::api::PodGroupStatus;
use crate::config::{ExtensionPoint, FieldError, PluginAvailability, PluginCatalog};

/// Why an API action failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Other(String),
}

/// The few API actions plugins need. `scheduler/` implements it with kube; tests use an in-memory
/// recorder.
#[async_trait]
pub trait ApiHandle: Send + Sync {
    /// Binds the pod to the node (the `pods/binding` subresource).
    async fn bind(&self, pod: &PodInfo, node_name: &str) -> Result<(), ApiError>;

    /// Patches the status of pod `namespace/name`: a condition and/or the nominated node name.
    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        condition: Option<PodCondition>,
        nominating: Option<NominatingInfo>,
    ) -> Result<(), ApiError>;

    /// Deletes a pod (preemption victims).
    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), ApiError>;

    /// The pods of `namespace` carrying `label=value`, whatever their phase (Coscheduling counts a
    /// PodGroup's members and their Running/Succeeded/Failed numbers this way).
    async fn list_pods_with_label(
        &self,
        namespace: &str,
        label: &str,
        value: &str,
    ) -> Result<Vec<Pod>, ApiError>;

    /// Merge-patches a PodGroup's status subresource (Coscheduling's phase and counts).
    async fn patch_pod_group_status(
        &self,
        namespace: &str,
        name: &str,
        status: &PodGroupStatus,
    ) -> Result<(), ApiError>;

    /// Replaces a PersistentVolume (VolumeBinding's PreBind sets its `claimRef`), checked against
    /// its `resourceVersion`; returns the stored object.
    async fn update_persistent_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<PersistentVolume, ApiError>;

    /// Replaces a PersistentVolumeClaim (VolumeBinding's PreBind sets the
    /// `volume.kubernetes.io/selected-node` annotation), checked against its `resourceVersion`;
    /// returns the stored object.
    async fn update_persistent_volume_claim(
        &self,
        pvc: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ApiError>;

    /// Reads a ResourceClaim (DynamicResources, after a conflict).
    async fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ResourceClaim, ApiError>;

    /// Replaces a ResourceClaim (DynamicResources adds its finalizer), checked against its
    /// `resourceVersion`; returns the stored object.
    async fn update_resource_claim(&self, claim: &ResourceClaim)
    -> Result<ResourceClaim, ApiError>;

    /// Replaces a ResourceClaim's status (`allocation`, `reservedFor`), checked against its
    /// `resourceVersion`; returns the stored object.
    async fn update_resource_claim_status(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError>;

    /// Removes the consumer with `consumer_uid` from the claim's `status.reservedFor`.
    async fn remove_resource_claim_consumer(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ApiError>;
}

/// Pods nominated to run on a node (preemptors); the scheduler's queue implements it.
pub trait PodNominator: Send + Sync {
    fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>>;

    /// While no pod is nominated anywhere: a number that changes with every nomination made or
    /// dropped. `None` while some pod is nominated, or when the nominator cannot tell (then
    /// opportunistic batching stays off: nominated pods count on their node in Filter).
    fn batching_generation(&self) -> Option<u64> {
        None
    }
}

/// The latest snapshot, shared between the scheduler (which publishes it each cycle) and plugins
/// that need it outside the calls that receive it directly.
#[derive(Debug, Default)]
pub struct SharedSnapshot {
    inner: RwLock<Arc<Snapshot>>,
}

impl SharedSnapshot {
    pub fn new(snapshot: Snapshot) -> SharedSnapshot {
        SharedSnapshot {
            inner: RwLock::new(Arc::new(snapshot)),
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.inner.read().clone()
    }

    pub fn store(&self, snapshot: Arc<Snapshot>) {
        *self.inner.write() = snapshot;
    }

    /// Updates the snapshot in place when nobody else holds it (no copy), else on a copy, and
    /// publishes the result.
    pub fn update<R>(&self, f: impl FnOnce(&mut Snapshot) -> R) -> R {
        let mut guard = self.inner.write();
        f(Arc::make_mut(&mut guard))
    }
}

/// What a plugin gets from the framework: the API, the waiting pods, the snapshot, nominated pods.
#[derive(Clone)]
pub struct Handle {
    pub api: Arc<dyn ApiHandle>,
    pub waiting_pods: Arc<WaitingPods>,
    pub snapshot: Arc<SharedSnapshot>,
    pub nominator: Option<Arc<dyn PodNominator>>,
    /// Caches of the extra object kinds plugins declared (see [`Informer`]).
    pub listers: Arc<Listers>,
    /// The configuration's extenders (DefaultPreemption asks them about its candidates).
    pub extenders: Vec<Arc<dyn crate::framework::extender::Extender>>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("waiting_pods", &self.waiting_pods.len())
            .finish()
    }
}

impl Handle {
    pub fn new(api: Arc<dyn ApiHandle>) -> Handle {
        Handle {
            api,
            waiting_pods: Arc::new(WaitingPods::new()),
            snapshot: Arc::new(SharedSnapshot::default()),
            nominator: None,
            listers: Arc::new(Listers::default()),
            extenders: Vec::new(),
        }
    }

    pub fn with_nominator(mut self, nominator: Arc<dyn PodNominator>) -> Handle {
        self.nominator = Some(nominator);
        self
    }
}

/// Decodes, defaults and validates a plugin's args (see [`super::args`]).
pub type ArgsDecoder = Arc<dyn Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync>;

/// Builds a plugin instance from its normalized args.
pub type PluginFactory =
    Arc<dyn Fn(&Value, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync>;

/// What a built plugin registers.
#[derive(Clone)]
pub struct PluginRegistration {
    pub extension_points: Vec<ExtensionPoint>,
    pub decode_args: ArgsDecoder,
    pub factory: PluginFactory,
    /// Object kinds the plugin reads through `Handle::listers` (watched only when it is enabled).
    pub informers: Vec<Informer>,
}

impl PluginRegistration {
    pub fn new(
        extension_points: &[ExtensionPoint],
        decode_args: impl Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync + 'static,
        factory: impl Fn(&Value, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync + 'static,
    ) -> PluginRegistration {
        PluginRegistration {
            extension_points: extension_points.to_vec(),
            decode_args: Arc::new(decode_args),
            factory: Arc::new(factory),
            informers: Vec::new(),
        }
    }

    /// Declares the object kinds the plugin reads.
    pub fn with_informers(mut self, informers: &[Informer]) -> PluginRegistration {
        self.informers = informers.to_vec();
        self
    }
}

/// A registry entry.
#[derive(Clone)]
pub enum RegistryEntry {
    Built(PluginRegistration),
    /// Known (args decode, extension points known) but not runnable yet.
    NotBuiltYet {
        extension_points: Vec<ExtensionPoint>,
        reason: String,
        decode_args: ArgsDecoder,
    },
}

impl RegistryEntry {
    pub fn extension_points(&self) -> &[ExtensionPoint] {
        match self {
            RegistryEntry::Built(r) => &r.extension_points,
            RegistryEntry::NotBuiltYet {
                extension_points, ..
            } => extension_points,
        }
    }

    fn decoder(&self) -> &ArgsDecoder {
        match self {
            RegistryEntry::Built(r) => &r.decode_args,
            RegistryEntry::NotBuiltYet { decode_args, .. } => decode_args,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a plugin named {0:?} already exists in the registry")]
    Duplicate(String),
}

/// Plugin name -> entry.
#[derive(Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, RegistryEntry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a built plugin (in-tree or out-of-tree); names are unique.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        registration: PluginRegistration,
    ) -> Result<(), RegistryError> {
        self.insert(name.into(), RegistryEntry::Built(registration))
    }

    /// Adds a plugin that is known but not built yet.
    pub fn register_not_built(
        &mut self,
        name: impl Into<String>,
        extension_points: &[ExtensionPoint],
        reason: impl Into<String>,
        decode_args: impl Fn(Option<&Value>) -> Result<Value, Vec<FieldError>> + Send + Sync + 'static,
    ) -> Result<(), RegistryError> {
        self.insert(
            name.into(),
            RegistryEntry::NotBuiltYet {
                extension_points: extension_points.to_vec(),
                reason: reason.into(),
                decode_args: Arc::new(decode_args),
            },
        )
    }

    fn insert(&mut self, name: String, entry: RegistryEntry) -> Result<(), RegistryError> {
        if self.entries.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.entries.insert(name, entry);
        Ok(())
    }

    /// Swaps the registration of the built plugin `name` (same name, args and extension points,
    /// another factory: `ksched simulate` runs NetworkTraffic without Prometheus). False when no
    /// built plugin has that name.
    pub fn replace(&mut self, name: &str, registration: PluginRegistration) -> bool {
        match self.entries.get_mut(name) {
            Some(entry @ RegistryEntry::Built(_)) => {
                *entry = RegistryEntry::Built(registration);
                true
            }
            _ => false,
        }
    }

    /// Replaces or removes nothing: merges `other`'s entries, failing on a duplicate name.
    pub fn merge(&mut self, other: Registry) -> Result<(), RegistryError> {
        for (name, entry) in other.entries {
            self.insert(name, entry)?;
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&RegistryEntry> {
        self.entries.get(name)
    }

    /// The object kinds the named plugins read (unknown and not-built plugins need none).
    pub fn informers_for<'a>(
        &self,
        plugins: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::BTreeSet<Informer> {
        plugins
            .into_iter()
            .filter_map(|name| match self.entries.get(name) {
                Some(RegistryEntry::Built(r)) => Some(r.informers.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}

impl PluginCatalog for Registry {
    fn plugin_names(&self) -> Vec<String> {
        // Every name a configuration may use (BTreeMap keys: sorted).
        self.entries.keys().cloned().collect()
    }

    fn availability(&self, name: &str) -> PluginAvailability {
        match self.entries.get(name) {
            Some(RegistryEntry::Built(r)) => PluginAvailability::Built(r.extension_points.clone()),
            Some(RegistryEntry::NotBuiltYet {
                extension_points,
                reason,
                ..
            }) => PluginAvailability::NotBuiltYet {
                extension_points: extension_points.clone(),
                reason: reason.clone(),
            },
            None => PluginAvailability::Unknown,
        }
    }

    fn decode_args(&self, name: &str, args: Option<&Value>) -> Result<Value, Vec<FieldError>> {
        match self.entries.get(name) {
            Some(e) => (e.decoder())(args),
            None => Err(vec![FieldError::new(
                "",
                format!("Invalid value: {name:?}: unknown plugin"),
            )]),
        }
    }
}

/// A recorded status patch: pod key, condition, nominating info.
pub type RecordedStatusPatch = (String, Option<PodCondition>, Option<NominatingInfo>);

/// An [`ApiHandle`] that records calls in memory (tests, `simulate`).
#[derive(Debug, Default)]
pub struct RecordingApi {
    pub bindings: parking_lot::Mutex<Vec<(String, String)>>,
    pub status_patches: parking_lot::Mutex<Vec<RecordedStatusPatch>>,
    pub deletions: parking_lot::Mutex<Vec<String>>,
    /// When set, `bind` fails with this error.
    pub fail_bind: parking_lot::Mutex<Option<ApiError>>,
    /// What `list_pods_with_label` lists from (filtered by namespace and label).
    pub pods: parking_lot::Mutex<Vec<Pod>>,
    /// PodGroup status patches: (`namespace/name`, status).
    pub pod_group_statuses: parking_lot::Mutex<Vec<(String, PodGroupStatus)>>,
    /// PersistentVolumes and claims replaced through the API, in order.
    pub pv_updates: parking_lot::Mutex<Vec<PersistentVolume>>,
    pub pvc_updates: parking_lot::Mutex<Vec<PersistentVolumeClaim>>,
    /// When set, PV and PVC updates fail with this error.
    pub fail_volume_updates: parking_lot::Mutex<Option<ApiError>>,
    /// ResourceClaims as the API has them: `get` reads, updates replace (bumping the
    /// resourceVersion, refusing a stale one with a conflict).
    pub resource_claims: parking_lot::Mutex<Vec<ResourceClaim>>,
    /// Every claim write, in order: (`update` or `status`, the claim sent).
    pub claim_writes: parking_lot::Mutex<Vec<(&'static str, ResourceClaim)>>,
    /// Consumers removed from claims: (`namespace/name`, consumer uid).
    pub claim_consumer_removals: parking_lot::Mutex<Vec<(String, String)>>,
}

impl RecordingApi {
    /// The recorded claim `namespace/name` is replaced by `claim` when their resourceVersions
    /// agree; the stored copy gets the next one.
    fn replace_claim(
        &self,
        kind: &'static str,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        self.claim_writes.lock().push((kind, claim.clone()));
        let mut claims = self.resource_claims.lock();
        let same = |c: &ResourceClaim| {
            c.metadata.namespace == claim.metadata.namespace
                && c.metadata.name == claim.metadata.name
        };
        let Some(stored) = claims.iter_mut().find(|c| same(c)) else {
            return Err(ApiError::NotFound(format!("{:?}", claim.metadata.name)));
        };
        if stored.metadata.resource_version != claim.metadata.resource_version {
            return Err(ApiError::Conflict("the object has been modified".into()));
        }
        let next = stored
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        let mut updated = claim.clone();
        updated.metadata.resource_version = Some(next.to_string());
        *stored = updated.clone();
        Ok(updated)
    }
}

#[async_trait]
impl ApiHandle for RecordingApi {
    async fn bind(&self, pod: &PodInfo, node_name: &str) -> Result<(), ApiError> {
        if let Some(e) = self.fail_bind.lock().clone() {
            return Err(e);
        }
        self.bindings
            .lock()
            .push((pod.key(), node_name.to_string()));
        Ok(())
    }

    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        condition: Option<PodCondition>,
        nominating: Option<NominatingInfo>,
    ) -> Result<(), ApiError> {
        self.status_patches
            .lock()
            .push((format!("{namespace}/{name}"), condition, nominating));
        Ok(())
    }

    async fn delete_pod(&self, namespace: &str, name: &str, _uid: &str) -> Result<(), ApiError> {
        self.deletions.lock().push(format!("{namespace}/{name}"));
        Ok(())
    }

    async fn list_pods_with_label(
        &self,
        namespace: &str,
        label: &str,
        value: &str,
    ) -> Result<Vec<Pod>, ApiError> {
        Ok(self
            .pods
            .lock()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref().unwrap_or_default() == namespace)
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(label))
                    .map(String::as_str)
                    == Some(value)
            })
            .cloned()
            .collect())
    }

    async fn patch_pod_group_status(
        &self,
        namespace: &str,
        name: &str,
        status: &PodGroupStatus,
    ) -> Result<(), ApiError> {
        self.pod_group_statuses
            .lock()
            .push((format!("{namespace}/{name}"), status.clone()));
        Ok(())
    }

    async fn update_persistent_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<PersistentVolume, ApiError> {
        if let Some(e) = self.fail_volume_updates.lock().clone() {
            return Err(e);
        }
        self.pv_updates.lock().push(pv.clone());
        Ok(pv.clone())
    }

    async fn update_persistent_volume_claim(
        &self,
        pvc: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ApiError> {
        if let Some(e) = self.fail_volume_updates.lock().clone() {
            return Err(e);
        }
        self.pvc_updates.lock().push(pvc.clone());
        Ok(pvc.clone())
    }

    async fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ResourceClaim, ApiError> {
        self.resource_claims
            .lock()
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("{namespace}/{name}")))
    }

    async fn update_resource_claim(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        self.replace_claim("update", claim)
    }

    async fn update_resource_claim_status(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        self.replace_claim("status", claim)
    }

    async fn remove_resource_claim_consumer(
        &self,
        namespace: &str,
        name: &str,
        _claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ApiError> {
        self.claim_consumer_removals
            .lock()
            .push((format!("{namespace}/{name}"), consumer_uid.to_string()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_out_of_tree_and_duplicates() {
        struct Mine;
        impl Plugin for Mine {
            fn name(&self) -> &str {
                "Mine"
            }
        }
        let mut r = Registry::in_tree();
        let reg = PluginRegistration::new(
            &[ExtensionPoint::Filter],
            crate::framework::args::no_args,
            |_, _| Ok(Arc::new(Mine) as Arc<dyn Plugin>),
        );
        assert!(r.register("Mine", reg.clone()).is_ok());
        assert_eq!(
            r.register("Mine", reg),
            Err(RegistryError::Duplicate("Mine".into()))
        );
        assert_eq!(
            r.availability("Mine"),
            PluginAvailability::Built(vec![ExtensionPoint::Filter])
        );
    }
}
