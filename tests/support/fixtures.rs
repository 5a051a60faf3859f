//! Objects tests create, as YAML for kubectl or JSON for kube clients.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The pause image test pods run (kwok runs no containers).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Sets every field of the object `extra` on the object `base` (replacing those it has).
pub fn merge(base: &mut Value, extra: &Value) {
    if let (Some(b), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
}

/// A pod spec for `scheduler`: one pause container requesting `cpu` and `memory`, no grace period,
/// and the fields of `extra`.
pub fn pause_spec(scheduler: &str, cpu: &str, memory: &str, extra: &Value) -> Value {
    let mut spec = json!({
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": PAUSE_IMAGE,
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    });
    merge(&mut spec, extra);
    spec
}

/// A pause pod for `scheduler` requesting `cpu` and 100Mi, with `labels` and the extra spec fields
/// of `extra`.
pub fn pause_pod(
    name: &str,
    scheduler: &str,
    cpu: &str,
    labels: &[(&str, &str)],
    extra: Value,
) -> Pod {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": pause_spec(scheduler, cpu, "100Mi", &extra),
    }))
    .expect("pod literal")
}

/// A node kwok manages (annotation `kwok.x-k8s.io/node=fake`): kept Ready, its pods marked Running.
/// `labels` are added to the usual kubernetes.io/hostname, os and arch labels.
pub fn kwok_node(name: &str, cpu: &str, memory: &str, labels: &[(&str, &str)]) -> String {
    let extra: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        r#"apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
{extra}status:
  allocatable:
    cpu: "{cpu}"
    memory: {memory}
    pods: "110"
  capacity:
    cpu: "{cpu}"
    memory: {memory}
    pods: "110"
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: fake
    kubeProxyVersion: fake
    containerRuntimeVersion: fake
    osImage: fake
    kernelVersion: fake
    bootID: ""
    machineID: ""
    systemUUID: ""
  phase: Running
"#
    )
}

/// With `KSCHED_UPDATE_FIXTURES=1`, writes `obj` (without managed fields) as the Argo CD health
/// check's fixture `tests/fixtures/argocd/<file>.json` (`tests/argocd_health.rs` reads them).
pub fn save_argocd_fixture<T: serde::Serialize>(file: &str, obj: &T) {
    if std::env::var("KSCHED_UPDATE_FIXTURES").as_deref() == Ok("1") {
        let mut v = serde_json::to_value(obj).expect("json");
        if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("managedFields");
        }
        let path = super::repo_root()
            .join("tests/fixtures/argocd")
            .join(format!("{file}.json"));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&v).expect("json") + "\n",
        )
        .expect("write fixture");
    }
}
