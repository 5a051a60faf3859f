//! Objects tests create, as YAML for kubectl or JSON for kube clients.

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
