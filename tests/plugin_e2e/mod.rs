//! Helpers shared by the e2e tests of the seed plugins (Coscheduling, NetworkTraffic) and of the
//! out-of-tree example: kwok nodes owned by one test, pods, polling.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{ControlPlane, scheduler::ksched_bin};

/// kwok nodes labelled `ksched.io/e2e=<test>`; deleted when dropped.
pub struct Nodes<'a> {
    cp: &'a ControlPlane,
    test: String,
}

impl<'a> Nodes<'a> {
    pub fn new(cp: &'a ControlPlane, test: &str) -> Nodes<'a> {
        Nodes {
            cp,
            test: test.to_string(),
        }
    }

    /// Adds the Ready node `<test>-<suffix>` with `cpu` cores and extra labels.
    pub fn add(&self, suffix: &str, cpu: &str, labels: &[(&str, &str)]) -> String {
        let name = format!("{}-{suffix}", self.test);
        let mut all = vec![("ksched.io/e2e", self.test.as_str())];
        all.extend_from_slice(labels);
        let yaml = crate::support::fixtures::kwok_node(&name, cpu, "32Gi", &all);
        let (ok, _, err) = self.cp.kubectl_stdin(&["apply", "-f", "-"], &yaml);
        assert!(ok, "{err}");
        let (ok, _, err) = self.cp.kubectl_run(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            &format!("node/{name}"),
        ]);
        assert!(ok, "node {name} not Ready: {err}");
        name
    }
}

impl Drop for Nodes<'_> {
    fn drop(&mut self) {
        let _ = self.cp.kubectl_run(&[
            "delete",
            "nodes",
            "-l",
            &format!("ksched.io/e2e={}", self.test),
            "--wait=false",
        ]);
    }
}

/// Applies ksched's CRDs (PodGroup among them) and waits until they are served.
pub fn install_crds(cp: &ControlPlane) {
    let out = std::process::Command::new(ksched_bin())
        .arg("crds")
        .output()
        .expect("ksched crds");
    assert!(out.status.success());
    let (ok, _, err) = cp.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &String::from_utf8_lossy(&out.stdout),
    );
    assert!(ok, "{err}");
    let (ok, _, err) = cp.kubectl_run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podgroups.scheduling.x-k8s.io",
    ]);
    assert!(ok, "{err}");
}

/// A pause pod for `scheduler` requesting `cpu`, with extra labels.
pub fn pod(name: &str, scheduler: &str, cpu: &str, labels: &[(&str, &str)]) -> Pod {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}],
        }
    }))
    .expect("pod literal")
}

pub async fn create(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod)
        .await
        .expect("create pod");
}

pub async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.spec?.node_name
}

/// Polls until `name` is bound (within `within`); its node. `logs` explains a failure.
pub async fn wait_bound(
    pods: &Api<Pod>,
    name: &str,
    within: Duration,
    logs: impl Fn() -> String,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(node) = node_of(pods, name).await {
            return node;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not bound within {within:?}; scheduler log:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the scheduler's log shows it started scheduling, within 60s.
pub async fn wait_log(logs: impl Fn() -> String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !logs().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not logged within 60s:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
