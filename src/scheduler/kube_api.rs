//! The framework's [`ApiClient`] over kube: every call plugins make (a binding, a status patch,
//! a victim's deletion, a PodGroup's status, a volume's claim, a ResourceClaim's allocation) is
//! one [`ApiRequest`] sent here, whatever its kind.

use async_trait::async_trait;
use kube::Client;
use kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{DynamicObject, Request, Resource};
use serde_json::Value;

use super::events::EventQueue;
use crate::framework::api_calls::{ApiClient, ApiError, ApiEvent, ApiRequest, Verb};

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

/// The HTTP request `request` is, and the verb kube's client metrics and traces name it by.
fn http_request(request: ApiRequest) -> Result<(http::Request<Vec<u8>>, &'static str), ApiError> {
    let url = DynamicObject::url_path(&request.resource, request.namespace.as_deref());
    let builder = Request::new(url);
    let name = request.name.as_str();
    let body = || -> Result<Vec<u8>, ApiError> {
        serde_json::to_vec(&request.body).map_err(|e| ApiError::Other(e.to_string()))
    };
    let post = PostParams::default();
    let built = match (request.verb, request.subresource) {
        (Verb::Get, None) => builder.get(name, &GetParams::default()).map(|r| (r, "get")),
        (Verb::Get, Some(sub)) => builder
            .get_subresource(sub, name)
            .map(|r| (r, "get_subresource")),
        (Verb::Create, None) => builder.create(&post, body()?).map(|r| (r, "create")),
        (Verb::Create, Some(sub)) => builder
            .create_subresource(sub, name, &post, body()?)
            .map(|r| (r, "create_subresource")),
        (Verb::Replace, None) => builder
            .replace(name, &post, body()?)
            .map(|r| (r, "replace")),
        (Verb::Replace, Some(sub)) => builder
            .replace_subresource(sub, name, &post, body()?)
            .map(|r| (r, "replace_subresource")),
        (Verb::Patch, sub) => {
            let patch = Patch::Strategic(request.body.clone().unwrap_or(Value::Null));
            let params = PatchParams::default();
            match sub {
                None => builder.patch(name, &params, &patch).map(|r| (r, "patch")),
                Some(sub) => builder
                    .patch_subresource(sub, name, &params, &patch)
                    .map(|r| (r, "patch_subresource")),
            }
        }
        (Verb::Delete, _) => {
            let params = DeleteParams {
                preconditions: request.uid_precondition.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            builder.delete(name, &params).map(|r| (r, "delete"))
        }
    };
    built.map_err(|e| ApiError::Other(e.to_string()))
}

#[async_trait]
impl ApiClient for KubeApi {
    async fn send(&self, request: ApiRequest) -> Result<Value, ApiError> {
        let client = match request.subresource {
            Some("binding") => &self.binds,
            _ => &self.client,
        };
        let (mut http, verb) = http_request(request)?;
        http.extensions_mut().insert(verb);
        client.request::<Value>(http).await.map_err(api_error)
    }

    fn record_event(&self, event: ApiEvent) {
        if let Some(events) = &self.events {
            events.record(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::resource::v1::ResourceClaim;

    use super::*;
    use crate::framework::api_calls::{ApiCall, Delete, PatchStatus, Replace};

    #[test]
    fn requests_go_to_the_object_and_its_subresource() {
        let (r, verb) =
            http_request(Delete::<Pod>::new("ns", "victim", "u1").into_request()).expect("delete");
        assert_eq!((r.method().as_str(), verb), ("DELETE", "delete"));
        assert_eq!(r.uri().path(), "/api/v1/namespaces/ns/pods/victim");
        let body: Value = serde_json::from_slice(r.body()).expect("json");
        assert_eq!(body["preconditions"]["uid"], "u1");

        let patch = serde_json::json!({"status": {"reservedFor": []}});
        let (r, _) = http_request(
            PatchStatus::<ResourceClaim>::new("ns", "gpu", patch.clone()).into_request(),
        )
        .expect("patch");
        assert_eq!(r.method().as_str(), "PATCH");
        assert_eq!(
            r.uri().path(),
            "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/gpu/status"
        );
        assert_eq!(
            r.headers()["content-type"],
            "application/strategic-merge-patch+json"
        );
        assert_eq!(serde_json::from_slice::<Value>(r.body()).ok(), Some(patch));

        let pv: k8s_openapi::api::core::v1::PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pv-1"}})).expect("pv");
        let (r, _) = http_request(Replace(pv).into_request()).expect("replace");
        assert_eq!(r.method().as_str(), "PUT");
        assert_eq!(r.uri().path(), "/api/v1/persistentvolumes/pv-1");
    }

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
