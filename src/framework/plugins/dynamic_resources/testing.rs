//! Plain-value builders for DRA objects, shared by the module's table tests.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

pub(crate) const DRIVER: &str = "gpu.example.com";

/// A device named `name` with `attributes` (id -> {"string": ..} / {"int": ..} / ...).
pub(crate) fn device(name: &str, attributes: Value) -> Value {
    json!({"name": name, "attributes": attributes})
}

/// The one slice of pool `node` (generation 1) with `devices`, published for `node`.
pub(crate) fn node_slice(node: &str, devices: Vec<Value>) -> Arc<ResourceSlice> {
    slice(
        &format!("{node}-{DRIVER}"),
        json!({"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}),
    )
}

pub(crate) fn slice(name: &str, spec: Value) -> Arc<ResourceSlice> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
            .expect("ResourceSlice"),
    )
}

/// A DeviceClass selecting the driver's devices (plus `extra` selectors).
pub(crate) fn class(name: &str, extra: &[&str]) -> Arc<DeviceClass> {
    let mut selectors =
        vec![json!({"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}})];
    selectors.extend(extra.iter().map(|e| json!({"cel": {"expression": e}})));
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"selectors": selectors}}),
        )
        .expect("DeviceClass"),
    )
}

/// A claim `ns/name` with uid `name-uid` and the given `spec.devices`.
pub(crate) fn claim(name: &str, devices: Value) -> Arc<ResourceClaim> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"), "resourceVersion": "1"},
            "spec": {"devices": devices}
        }))
        .expect("ResourceClaim"),
    )
}

/// `spec.devices` with one ExactCount request `req` for `count` devices of class `gpu`.
pub(crate) fn exact(req: &str, count: i64) -> Value {
    json!({"requests": [{"name": req, "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}}]})
}
