//! [`RecordingApi`]: an [`ApiClient`] that answers from memory and records every request and
//! Event (tests, `ksched simulate`). It keeps the objects it is given or that were written, with
//! their `resourceVersion`: a read finds them, a replace with a stale version is a conflict, as on
//! the API server.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ApiClient, ApiError, ApiEvent, ApiRequest, Verb, decode, encode};

/// Objects by kind, namespace and name.
type ObjectKey = (String, String, String);

/// A failure to answer matching requests with.
#[derive(Debug)]
struct Failure {
    verb: Verb,
    kind: String,
    error: ApiError,
    /// Answer only the next matching request with it.
    once: bool,
}

/// An [`ApiClient`] in memory: records requests, keeps objects, fails when told to.
#[derive(Debug, Default)]
pub struct RecordingApi {
    requests: Mutex<Vec<ApiRequest>>,
    objects: Mutex<BTreeMap<ObjectKey, Value>>,
    failures: Mutex<Vec<Failure>>,
    events: Mutex<Vec<ApiEvent>>,
}

fn object_key(request: &ApiRequest) -> ObjectKey {
    (
        request.resource.kind.clone(),
        request.namespace.clone().unwrap_or_default(),
        request.name.clone(),
    )
}

fn kind_of<K: kube::Resource<DynamicType = ()>>() -> String {
    K::kind(&()).into_owned()
}

/// The resourceVersion after `current` (the recorder counts from 0).
fn next_resource_version(current: Option<&str>) -> String {
    (current.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1).to_string()
}

fn resource_version(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

impl RecordingApi {
    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<ApiRequest> {
        self.requests.lock().clone()
    }

    /// Every Event recorded so far, in order.
    pub fn events(&self) -> Vec<ApiEvent> {
        self.events.lock().clone()
    }

    /// Forgets the requests so far (the objects stay).
    pub fn clear(&self) {
        self.requests.lock().clear();
    }

    /// The requests of `verb` on kind `K` (and `subresource`: `None` matches the object itself).
    pub fn sent<K: kube::Resource<DynamicType = ()>>(
        &self,
        verb: Verb,
        subresource: Option<&str>,
    ) -> Vec<ApiRequest> {
        let kind = kind_of::<K>();
        self.requests
            .lock()
            .iter()
            .filter(|r| r.verb == verb && r.resource.kind == kind && r.subresource == subresource)
            .cloned()
            .collect()
    }

    /// `namespace/name` of each request of `verb` on kind `K` (and `subresource`).
    pub fn keys<K: kube::Resource<DynamicType = ()>>(
        &self,
        verb: Verb,
        subresource: Option<&str>,
    ) -> Vec<String> {
        self.sent::<K>(verb, subresource)
            .iter()
            .map(ApiRequest::key)
            .collect()
    }

    /// The bodies of the requests of `verb` on kind `K` (and `subresource`), read as `T`.
    pub fn bodies<K: kube::Resource<DynamicType = ()>, T: DeserializeOwned>(
        &self,
        verb: Verb,
        subresource: Option<&str>,
    ) -> Vec<T> {
        self.sent::<K>(verb, subresource)
            .into_iter()
            .filter_map(|r| r.body.and_then(|b| serde_json::from_value(b).ok()))
            .collect()
    }

    /// Keeps `obj` as the API server's copy (what a read returns, what a replace is checked
    /// against).
    pub fn store<K: kube::Resource<DynamicType = ()> + serde::Serialize>(&self, obj: &K) {
        let meta = obj.meta();
        let key = (
            kind_of::<K>(),
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        self.objects.lock().insert(key, encode(obj));
    }

    /// The API server's copy of `namespace/name` of kind `K`.
    pub fn stored<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<K> {
        let key = (kind_of::<K>(), namespace.to_string(), name.to_string());
        let obj = self.objects.lock().get(&key).cloned()?;
        decode(obj).ok()
    }

    /// Every later request of `verb` on kind `K` fails with `error`.
    pub fn fail<K: kube::Resource<DynamicType = ()>>(&self, verb: Verb, error: ApiError) {
        self.push_failure::<K>(verb, error, false);
    }

    /// The next request of `verb` on kind `K` fails with `error`.
    pub fn fail_once<K: kube::Resource<DynamicType = ()>>(&self, verb: Verb, error: ApiError) {
        self.push_failure::<K>(verb, error, true);
    }

    /// Requests on kind `K` succeed again.
    pub fn heal<K: kube::Resource<DynamicType = ()>>(&self) {
        let kind = kind_of::<K>();
        self.failures.lock().retain(|f| f.kind != kind);
    }

    fn push_failure<K: kube::Resource<DynamicType = ()>>(
        &self,
        verb: Verb,
        error: ApiError,
        once: bool,
    ) {
        self.failures.lock().push(Failure {
            verb,
            kind: kind_of::<K>(),
            error,
            once,
        });
    }

    /// The failure the request meets, if any (a one-time failure is used up).
    fn failure(&self, request: &ApiRequest) -> Option<ApiError> {
        let mut failures = self.failures.lock();
        let at = failures
            .iter()
            .position(|f| f.verb == request.verb && f.kind == request.resource.kind)?;
        let error = failures[at].error.clone();
        if failures[at].once {
            failures.remove(at);
        }
        Some(error)
    }

    /// A replace: checked against the stored copy's resourceVersion (when there is one and the
    /// request names one); stored with the next version.
    fn replace(&self, request: &ApiRequest) -> Result<Value, ApiError> {
        let Some(mut obj) = request.body.clone() else {
            return Err(ApiError::Other("a replace without an object".into()));
        };
        let key = object_key(request);
        let mut objects = self.objects.lock();
        let current = objects
            .get(&key)
            .and_then(|o| resource_version(o))
            .map(str::to_string);
        let sent = resource_version(&obj).map(str::to_string);
        if let (Some(current), Some(sent)) = (&current, &sent)
            && current != sent
        {
            return Err(ApiError::Conflict("the object has been modified".into()));
        }
        let next = next_resource_version(current.as_deref().or(sent.as_deref()));
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(next));
        }
        objects.insert(key, obj.clone());
        Ok(obj)
    }
}

#[async_trait]
impl ApiClient for RecordingApi {
    async fn send(&self, request: ApiRequest) -> Result<Value, ApiError> {
        self.requests.lock().push(request.clone());
        if let Some(error) = self.failure(&request) {
            return Err(error);
        }
        match request.verb {
            Verb::Get => self
                .objects
                .lock()
                .get(&object_key(&request))
                .cloned()
                .ok_or_else(|| ApiError::NotFound(request.key())),
            Verb::Replace => self.replace(&request),
            Verb::Delete => {
                self.objects.lock().remove(&object_key(&request));
                Ok(json!({}))
            }
            // Creations (bindings) and patches are recorded; nothing reads them back.
            Verb::Create | Verb::Patch => Ok(json!({})),
        }
    }

    fn record_event(&self, event: ApiEvent) {
        self.events.lock().push(event);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
    use k8s_openapi::api::resource::v1::ResourceClaim;

    use super::*;
    use crate::framework::api_calls::{Delete, Get, Replace};

    fn claim(rv: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "resourceVersion": rv}
        }))
        .expect("claim")
    }

    #[tokio::test]
    async fn reads_and_replaces_follow_the_resource_version() {
        let api = RecordingApi::default();
        let client: &dyn ApiClient = &api;
        assert_eq!(
            client
                .call(Get::<ResourceClaim>::new("ns", "c"))
                .await
                .err(),
            Some(ApiError::NotFound("ns/c".into()))
        );
        api.store(&claim("5"));
        let stored = client.call(Replace(claim("5"))).await.expect("replaced");
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("6"));
        assert!(matches!(
            client.call(Replace(claim("5"))).await,
            Err(ApiError::Conflict(_))
        ));
        let read = client.call(Get::<ResourceClaim>::new("ns", "c")).await;
        assert_eq!(read.ok(), Some(stored));
        assert_eq!(
            api.keys::<ResourceClaim>(Verb::Replace, None),
            ["ns/c", "ns/c"]
        );
    }

    #[tokio::test]
    async fn failures_are_told_per_verb_and_kind() {
        let api = RecordingApi::default();
        let client: &dyn ApiClient = &api;
        api.fail_once::<Pod>(Verb::Delete, ApiError::Other("down".into()));
        let pv: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "pv"}})).expect("pv");
        assert!(client.call(Replace(pv)).await.is_ok(), "another kind");
        assert!(
            client
                .call(Delete::<Pod>::new("ns", "a", "u"))
                .await
                .is_err()
        );
        assert!(
            client
                .call(Delete::<Pod>::new("ns", "b", "u"))
                .await
                .is_ok()
        );
        assert_eq!(api.keys::<Pod>(Verb::Delete, None), ["ns/a", "ns/b"]);
        api.fail::<Pod>(Verb::Delete, ApiError::Other("down".into()));
        assert!(
            client
                .call(Delete::<Pod>::new("ns", "c", "u"))
                .await
                .is_err()
        );
        assert!(
            client
                .call(Delete::<Pod>::new("ns", "d", "u"))
                .await
                .is_err()
        );
        api.heal::<Pod>();
        assert!(
            client
                .call(Delete::<Pod>::new("ns", "e", "u"))
                .await
                .is_ok()
        );
    }
}
