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

use crate::api::PodGroup;
use crate::framework::interface::{NominatingInfo, NominatingMode};
use crate::framework::registry::{ApiError, ApiHandle};
use crate::framework::types::PodInfo;

pub(crate) struct KubeApi {
    /// Binds only, so nothing else the scheduler writes waits in front of a bind.
    binds: Client,
    client: Client,
}

impl KubeApi {
    /// `binds` sends bindings, `client` everything else.
    pub(crate) fn new(binds: Client, client: Client) -> Self {
        Self { binds, client }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

fn api_error(err: kube::Error) -> ApiError {
    match err {
        kube::Error::Api(status) if status.code == 404 => ApiError::NotFound(status.message),
        kube::Error::Api(status) if status.code == 409 => ApiError::Conflict(status.message),
        kube::Error::Api(status) if is_retriable_status(status.code, &status.reason) => {
            ApiError::Retriable(status.message)
        }
        other if connection_refused(&other) => ApiError::Retriable(other.to_string()),
        other => ApiError::Other(other.to_string()),
    }
}

/// Upstream's `apierrors.IsInternalError || IsServiceUnavailable`: the reason, or the code when
/// the reason is not one the API server names.
fn is_retriable_status(code: u16, reason: &str) -> bool {
    const KNOWN_REASONS: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    match reason {
        "InternalError" | "ServiceUnavailable" => true,
        r if KNOWN_REASONS.contains(&r) => false,
        _ => code == 500 || code == 503,
    }
}

/// Upstream's `net.IsConnectionRefused`: somewhere in the error's chain.
fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_upstreams_retriable_ones() {
        assert!(is_retriable_status(500, "InternalError"));
        assert!(is_retriable_status(503, "ServiceUnavailable"));
        // A code without a reason the API server names.
        assert!(is_retriable_status(500, ""));
        assert!(is_retriable_status(503, "SomethingElse"));
        // Known reasons that are not transient, whatever the code.
        assert!(!is_retriable_status(500, "Conflict"));
        assert!(!is_retriable_status(409, "Conflict"));
        assert!(!is_retriable_status(429, "TooManyRequests"));
        assert!(!is_retriable_status(504, "Timeout"));

        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let wrapped = kube::Error::Service(Box::new(refused));
        assert!(matches!(api_error(wrapped), ApiError::Retriable(_)));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(matches!(
            api_error(kube::Error::Service(Box::new(reset))),
            ApiError::Other(_)
        ));
    }
}
