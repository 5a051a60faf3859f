//! The API calls plugins make ([`ApiHandle`]), and an in-memory implementation that records them
//! ([`RecordingApi`], for tests and `ksched simulate`).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PodCondition,
};
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::interface::NominatingInfo;
use super::types::PodInfo;
use crate::api::{PodGroup, PodGroupStatus};

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

/// An Event a plugin records about an object (upstream's `EventRecorder.Eventf`): written in the
/// background, never failing or holding up the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiEvent {
    /// The scheduler name of the profile (upstream's reporting controller).
    pub reporting_controller: String,
    pub regarding: ObjectReference,
    /// The other object involved (a victim's preemptor).
    pub related: Option<ObjectReference>,
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// The few API actions plugins need. `scheduler/` implements it with kube; tests use an in-memory
/// recorder. Every call is async: a scheduling-cycle extension point (synchronous) cannot await
/// one, so the API is reached from PreBind/Bind/PostBind, from the [`ApiDispatcher`] and from
/// the plugins' background tasks only (see `framework::background`).
///
/// [`ApiDispatcher`]: super::background::ApiDispatcher
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

    /// Records an Event (see [`ApiEvent`]); an implementation without events drops it.
    fn record_event(&self, _event: ApiEvent) {}

    /// Replaces a PodGroup's status subresource (the Coscheduling plugin's status loop), checked
    /// against the object's `resourceVersion`; returns the stored object.
    async fn update_pod_group_status(&self, pod_group: &PodGroup) -> Result<PodGroup, ApiError>;

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

/// A recorded status patch: pod key, condition, nominating info.
pub type RecordedStatusPatch = (String, Option<PodCondition>, Option<NominatingInfo>);

/// An [`ApiHandle`] that records calls in memory (tests, `simulate`).
#[derive(Debug, Default)]
pub struct RecordingApi {
    pub bindings: parking_lot::Mutex<Vec<(String, String)>>,
    pub status_patches: parking_lot::Mutex<Vec<RecordedStatusPatch>>,
    pub deletions: parking_lot::Mutex<Vec<String>>,
    /// When set, `delete_pod` fails with this error.
    pub fail_delete: parking_lot::Mutex<Option<ApiError>>,
    /// When set, `bind` fails with this error.
    pub fail_bind: parking_lot::Mutex<Option<ApiError>>,
    /// PodGroup status updates: (`namespace/name`, status).
    pub pod_group_statuses: parking_lot::Mutex<Vec<(String, PodGroupStatus)>>,
    /// When set, PodGroup status updates fail with this error (taken: the next one succeeds).
    pub fail_pod_group_update: parking_lot::Mutex<Option<ApiError>>,
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
    /// Events recorded, in order.
    pub events: parking_lot::Mutex<Vec<ApiEvent>>,
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
        let mut updated = claim.clone();
        updated.metadata.resource_version = Some(next_resource_version(
            stored.metadata.resource_version.as_deref(),
        ));
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

    fn record_event(&self, event: ApiEvent) {
        self.events.lock().push(event);
    }

    async fn delete_pod(&self, namespace: &str, name: &str, _uid: &str) -> Result<(), ApiError> {
        if let Some(e) = self.fail_delete.lock().clone() {
            return Err(e);
        }
        self.deletions.lock().push(format!("{namespace}/{name}"));
        Ok(())
    }

    async fn update_pod_group_status(&self, pod_group: &PodGroup) -> Result<PodGroup, ApiError> {
        if let Some(e) = self.fail_pod_group_update.lock().take() {
            return Err(e);
        }
        let key = format!(
            "{}/{}",
            pod_group.metadata.namespace.as_deref().unwrap_or_default(),
            pod_group.metadata.name.as_deref().unwrap_or_default()
        );
        self.pod_group_statuses
            .lock()
            .push((key, pod_group.status.clone().unwrap_or_default()));
        let mut stored = pod_group.clone();
        stored.metadata.resource_version = Some(next_resource_version(
            pod_group.metadata.resource_version.as_deref(),
        ));
        Ok(stored)
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

/// The resourceVersion after `current` (the recorder counts from 0).
fn next_resource_version(current: Option<&str>) -> String {
    (current.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1).to_string()
}
