//! The framework's [`ApiHandle`] over a kube client: binding through the `pods/binding`
//! subresource, pod status patches, deleting preemption victims, PodGroup statuses, the PV/PVC
//! updates of volume binding, and the ResourceClaim writes of dynamic resource allocation.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Binding, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, PodCondition,
};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status as ApiStatus};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use super::events::EventQueue;
use crate::api::PodGroup;
use crate::framework::api::ApiEvent;
use crate::framework::interface::{NominatingInfo, NominatingMode};
use crate::framework::registry::{ApiError, ApiHandle};
use crate::framework::types::PodInfo;

pub(crate) struct KubeApi {
    /// Binds only, so nothing else the scheduler writes waits in front of a bind.
    binds: Client,
    client: Client,
    /// Where plugins' events go (the process's event queue).
    events: Option<EventQueue>,
}

impl KubeApi {
    /// `binds` sends bindings, `client` everything else.
    pub(crate) fn new(binds: Client, client: Client) -> Self {
        Self {
            binds,
            client,
            events: None,
        }
    }

    /// Plugins' events go to `events`.
    pub(crate) fn with_events(mut self, events: EventQueue) -> Self {
        self.events = Some(events);
        self
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

fn api_error(err: kube::Error) -> ApiError {
    match err {
        kube::Error::Api(status) if status.code == 404 => ApiError::NotFound(status.message),
        kube::Error::Api(status) if status.code == 409 => ApiError::Conflict(status.message),
        other => ApiError::Other(other.to_string()),
    }
}

#[async_trait]
impl ApiHandle for KubeApi {
    async fn bind(&self, pod: &PodInfo, node_name: &str) -> Result<(), ApiError> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name().to_string()),
                namespace: Some(pod.namespace().to_string()),
                uid: Some(pod.uid().to_string()),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node_name.to_string()),
                ..Default::default()
            },
        };
        // The API answers a binding with a Status object, not a Pod.
        Api::<Pod>::namespaced(self.binds.clone(), pod.namespace())
            .create_subresource::<Binding, ApiStatus>(
                "binding",
                pod.name(),
                &PostParams::default(),
                &binding,
            )
            .await
            .map(|_| ())
            .map_err(api_error)
    }

    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        condition: Option<PodCondition>,
        nominating: Option<NominatingInfo>,
    ) -> Result<(), ApiError> {
        let mut status = serde_json::Map::new();
        if let Some(c) = condition {
            status.insert("conditions".into(), json!([c]));
        }
        if let Some(n) = nominating
            && n.mode == NominatingMode::Override
        {
            let node = if n.nominated_node_name.is_empty() {
                json!(null)
            } else {
                json!(n.nominated_node_name)
            };
            status.insert("nominatedNodeName".into(), node);
        }
        if status.is_empty() {
            return Ok(());
        }
        self.pods(namespace)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({ "status": status })),
            )
            .await
            .map(|_| ())
            .map_err(api_error)
    }

    fn record_event(&self, event: ApiEvent) {
        if let Some(events) = &self.events {
            events.record(event);
        }
    }

    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), ApiError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.pods(namespace).delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(err) => Err(api_error(err)),
        }
    }

    async fn update_pod_group_status(&self, pod_group: &PodGroup) -> Result<PodGroup, ApiError> {
        let namespace = pod_group.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod_group.metadata.name.as_deref().unwrap_or_default();
        // A PUT carries the object's resourceVersion: a concurrent change makes it a conflict.
        Api::<PodGroup>::namespaced(self.client.clone(), namespace)
            .replace_status(name, &PostParams::default(), pod_group)
            .await
            .map_err(api_error)
    }

    async fn update_persistent_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<PersistentVolume, ApiError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        api.replace(name, &PostParams::default(), pv)
            .await
            .map_err(api_error)
    }

    async fn update_persistent_volume_claim(
        &self,
        pvc: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ApiError> {
        let namespace = pvc.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let name = pvc.metadata.name.as_deref().unwrap_or_default();
        api.replace(name, &PostParams::default(), pvc)
            .await
            .map_err(api_error)
    }

    async fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ResourceClaim, ApiError> {
        self.resource_claims(namespace)
            .get(name)
            .await
            .map_err(api_error)
    }

    async fn update_resource_claim(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        let (namespace, name) = namespace_name(claim);
        self.resource_claims(namespace)
            .replace(name, &PostParams::default(), claim)
            .await
            .map_err(api_error)
    }

    async fn update_resource_claim_status(
        &self,
        claim: &ResourceClaim,
    ) -> Result<ResourceClaim, ApiError> {
        let (namespace, name) = namespace_name(claim);
        self.resource_claims(namespace)
            .replace_status(name, &PostParams::default(), claim)
            .await
            .map_err(api_error)
    }

    async fn remove_resource_claim_consumer(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ApiError> {
        // A strategic merge patch removes one entry without the latest claim; the uid
        // precondition keeps it off a claim recreated under the same name.
        let patch = json!({
            "metadata": {"uid": claim_uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": consumer_uid}]}
        });
        self.resource_claims(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(api_error)
    }
}

impl KubeApi {
    fn resource_claims(&self, namespace: &str) -> Api<ResourceClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

fn namespace_name(claim: &ResourceClaim) -> (&str, &str) {
    (
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default(),
    )
}
