//! The API writes (and the few reads) plugins make, as values (upstream's `APICall`s): a call
//! is a typed value ([`ApiCall`]: [`Bind`], [`PatchPodStatus`], [`Replace`], [`ReplaceStatus`],
//! [`PatchStatus`], [`Get`], [`Delete`]) that becomes one [`ApiRequest`], which an [`ApiClient`]
//! sends: the scheduler's over kube (`scheduler::kube_api`), or the [`RecordingApi`] of tests and
//! `ksched simulate`. A new kind of write is a new [`ApiCall`] in the plugin that makes it; neither
//! client changes.
//!
//! Every call is async: a scheduling-cycle extension point (synchronous) cannot await one, so the
//! API is reached from PreBind/Bind/PostBind, from the [`ApiDispatcher`] and from the plugins'
//! background tasks only (see `framework::background`).
//!
//! [`ApiDispatcher`]: super::background::ApiDispatcher

mod calls;
mod recording;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
pub use kube::core::ApiResource;
use serde_json::Value;

pub use calls::{Bind, Delete, Get, PatchPodStatus, PatchStatus, Replace, ReplaceStatus};
pub use recording::RecordingApi;

/// Why an API request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// A transient failure upstream retries (`util.Retriable`): the API server's internal error or
    /// service unavailable, or a refused connection.
    #[error("{0}")]
    Retriable(String),
    #[error("{0}")]
    Other(String),
}

/// What a request does to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    /// Creates the object, or (with a subresource) posts to the object's subresource.
    Create,
    /// Replaces the object (or its subresource), checked against its `resourceVersion`.
    Replace,
    /// A strategic merge patch.
    Patch,
    Delete,
}

/// One request to the API server, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub verb: Verb,
    /// The object's kind, group, version and plural.
    pub resource: ApiResource,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    /// `status`, `binding`, ...
    pub subresource: Option<&'static str>,
    /// The object (create, replace) or the patch (patch).
    pub body: Option<Value>,
    /// Delete: only the object with this UID (not one recreated under the same name).
    pub uid_precondition: Option<String>,
}

impl ApiRequest {
    /// A request of `verb` on the object `namespace/name` of kind `K` (no body, no subresource).
    pub fn new<K: kube::Resource<DynamicType = ()>>(
        verb: Verb,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiRequest {
        ApiRequest {
            verb,
            resource: ApiResource::erase::<K>(&()),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_string),
            name: name.to_string(),
            subresource: None,
            body: None,
            uid_precondition: None,
        }
    }

    /// `namespace/name` (or `name`), for messages and records.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
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

/// Sends [`ApiRequest`]s: the one generic implementation every call goes through. Writes are
/// refused once the scheduler stops leading.
#[async_trait]
pub trait ApiClient: Send + Sync {
    /// Sends `request`; the response's body (the object, or a `Status`).
    async fn send(&self, request: ApiRequest) -> Result<Value, ApiError>;

    /// Records an Event (see [`ApiEvent`]): not a request, the process's event queue (which
    /// aggregates them into series) writes it; a client without events drops it.
    fn record_event(&self, _event: ApiEvent) {}
}

/// A typed API call: the request it is, and its result read from the response.
pub trait ApiCall: Send {
    type Output: Send;

    fn into_request(self) -> ApiRequest;

    /// The result from the response's body.
    fn output(body: Value) -> Result<Self::Output, ApiError>;
}

impl dyn ApiClient {
    /// Makes `call`.
    pub async fn call<C: ApiCall>(&self, call: C) -> Result<C::Output, ApiError> {
        let body = self.send(call.into_request()).await?;
        C::output(body)
    }
}

/// Reads `body` as `K` (a response that is not one is an error, not a panic).
fn decode<K: serde::de::DeserializeOwned>(body: Value) -> Result<K, ApiError> {
    serde_json::from_value(body)
        .map_err(|e| ApiError::Other(format!("reading the API server's answer: {e}")))
}

/// Writes `obj` as JSON (for a request's body).
fn encode<K: serde::Serialize>(obj: &K) -> Value {
    // Kubernetes objects always serialize (string keys, no non-finite floats).
    serde_json::to_value(obj).unwrap_or(Value::Null)
}
