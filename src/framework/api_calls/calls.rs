//! The calls plugins make: binding a pod (upstream's `PodBindingCall`), patching a pod's
//! status (`PodStatusPatchCall`), and the generic reads and writes of any kind: a PodGroup's
//! status, a volume's claim reference, a ResourceClaim's allocation, a victim's deletion.

use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ApiCall, ApiError, ApiRequest, Verb, decode, encode};
use crate::framework::interface::{NominatingInfo, NominatingMode};
use crate::framework::types::PodInfo;

/// A kind the generic calls read and write.
pub trait Kind: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send {}

impl<K> Kind for K where K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send {}

/// `namespace` and `name` of `obj`.
fn namespace_name<K: kube::Resource>(obj: &K) -> (Option<&str>, &str) {
    let meta = obj.meta();
    (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// Binds a pod to a node (the `pods/binding` subresource).
pub struct Bind {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
}

impl Bind {
    pub fn new(pod: &PodInfo, node: &str) -> Bind {
        Bind {
            namespace: pod.namespace().to_string(),
            name: pod.name().to_string(),
            uid: pod.uid().to_string(),
            node: node.to_string(),
        }
    }
}

impl ApiCall for Bind {
    type Output = ();

    fn into_request(self) -> ApiRequest {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: Some(self.uid),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(self.node),
                ..Default::default()
            },
        };
        ApiRequest {
            subresource: Some("binding"),
            body: Some(encode(&binding)),
            ..ApiRequest::new::<Pod>(Verb::Create, Some(&self.namespace), &self.name)
        }
    }

    /// The API answers a binding with a `Status`, not a pod.
    fn output(_: Value) -> Result<(), ApiError> {
        Ok(())
    }
}

/// Patches a pod's status: a condition and/or its nominated node (`Override` with `""` clears
/// it).
pub struct PatchPodStatus {
    pub namespace: String,
    pub name: String,
    pub condition: Option<PodCondition>,
    pub nominating: Option<NominatingInfo>,
}

impl PatchPodStatus {
    /// The strategic merge patch of the pod's status; `None` when it changes nothing.
    fn patch(&self) -> Option<Value> {
        let mut status = serde_json::Map::new();
        if let Some(c) = &self.condition {
            status.insert("conditions".into(), json!([c]));
        }
        if let Some(n) = &self.nominating
            && n.mode == NominatingMode::Override
        {
            let node = if n.nominated_node_name.is_empty() {
                Value::Null
            } else {
                json!(n.nominated_node_name)
            };
            status.insert("nominatedNodeName".into(), node);
        }
        (!status.is_empty()).then(|| json!({ "status": status }))
    }
}

impl ApiCall for PatchPodStatus {
    type Output = ();

    fn into_request(self) -> ApiRequest {
        let patch = self.patch();
        PatchStatus::<Pod>::new(&self.namespace, &self.name, patch.unwrap_or(json!({})))
            .into_request()
    }

    fn output(_: Value) -> Result<(), ApiError> {
        Ok(())
    }
}

/// Reads the object `namespace/name` of kind `K`.
pub struct Get<K> {
    pub namespace: String,
    pub name: String,
    kind: PhantomData<fn() -> K>,
}

impl<K> Get<K> {
    pub fn new(namespace: &str, name: &str) -> Get<K> {
        Get {
            namespace: namespace.to_string(),
            name: name.to_string(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> ApiCall for Get<K> {
    type Output = K;

    fn into_request(self) -> ApiRequest {
        ApiRequest::new::<K>(Verb::Get, Some(&self.namespace), &self.name)
    }

    fn output(body: Value) -> Result<K, ApiError> {
        decode(body)
    }
}

/// Replaces an object, checked against its `resourceVersion` (a concurrent change makes it a
/// conflict); the stored object comes back.
pub struct Replace<K>(pub K);

impl<K: Kind> ApiCall for Replace<K> {
    type Output = K;

    fn into_request(self) -> ApiRequest {
        let (namespace, name) = namespace_name(&self.0);
        ApiRequest {
            body: Some(encode(&self.0)),
            ..ApiRequest::new::<K>(Verb::Replace, namespace, name)
        }
    }

    fn output(body: Value) -> Result<K, ApiError> {
        decode(body)
    }
}

/// Replaces an object's status subresource, checked against its `resourceVersion`; the stored
/// object comes back.
pub struct ReplaceStatus<K>(pub K);

impl<K: Kind> ApiCall for ReplaceStatus<K> {
    type Output = K;

    fn into_request(self) -> ApiRequest {
        let (namespace, name) = namespace_name(&self.0);
        ApiRequest {
            subresource: Some("status"),
            body: Some(encode(&self.0)),
            ..ApiRequest::new::<K>(Verb::Replace, namespace, name)
        }
    }

    fn output(body: Value) -> Result<K, ApiError> {
        decode(body)
    }
}

/// A strategic merge patch of the status of the object `namespace/name` of kind `K`.
pub struct PatchStatus<K> {
    pub namespace: String,
    pub name: String,
    pub patch: Value,
    kind: PhantomData<fn() -> K>,
}

impl<K> PatchStatus<K> {
    pub fn new(namespace: &str, name: &str, patch: Value) -> PatchStatus<K> {
        PatchStatus {
            namespace: namespace.to_string(),
            name: name.to_string(),
            patch,
            kind: PhantomData,
        }
    }
}

impl<K: Kind> ApiCall for PatchStatus<K> {
    type Output = ();

    fn into_request(self) -> ApiRequest {
        ApiRequest {
            subresource: Some("status"),
            body: Some(self.patch),
            ..ApiRequest::new::<K>(Verb::Patch, Some(&self.namespace), &self.name)
        }
    }

    fn output(_: Value) -> Result<(), ApiError> {
        Ok(())
    }
}

/// Deletes the object `namespace/name` of kind `K`, if it still has `uid`.
pub struct Delete<K> {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    kind: PhantomData<fn() -> K>,
}

impl<K> Delete<K> {
    pub fn new(namespace: &str, name: &str, uid: &str) -> Delete<K> {
        Delete {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> ApiCall for Delete<K> {
    type Output = ();

    fn into_request(self) -> ApiRequest {
        ApiRequest {
            uid_precondition: Some(self.uid),
            ..ApiRequest::new::<K>(Verb::Delete, Some(&self.namespace), &self.name)
        }
    }

    fn output(_: Value) -> Result<(), ApiError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_status_patch_carries_the_condition_and_the_nomination() {
        let call = PatchPodStatus {
            namespace: "ns".into(),
            name: "p".into(),
            condition: Some(PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                ..Default::default()
            }),
            nominating: Some(NominatingInfo {
                nominated_node_name: String::new(),
                mode: NominatingMode::Override,
            }),
        };
        let request = call.into_request();
        assert_eq!(
            (request.verb, request.subresource),
            (Verb::Patch, Some("status"))
        );
        assert_eq!(request.resource.plural, "pods");
        assert_eq!(request.key(), "ns/p");
        assert_eq!(
            request.body,
            Some(json!({"status": {
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "nominatedNodeName": null,
            }}))
        );
    }

    #[test]
    fn a_binding_names_the_pod_and_the_node() {
        let pod = crate::framework::testing::PodBuilder::new("p")
            .uid("u1")
            .info();
        let request = Bind::new(&pod, "n1").into_request();
        assert_eq!(
            (request.verb, request.subresource),
            (Verb::Create, Some("binding"))
        );
        let body = request.body.expect("a Binding");
        assert_eq!(body["metadata"]["uid"], "u1");
        assert_eq!(body["target"], json!({"kind": "Node", "name": "n1"}));
    }
}
