//! LeafClusterPolicies through the operator: the operator renders the policy into the Embedded
//! profile's scheduler, which places pods as the placement mode says; changing the policy re-renders
//! and restarts the scheduler with the new placement. The profile's own args for the leaf plugins
//! are validated and merged with the policy's (in the ConfigMap and in scheduling); the profile is
//! Ready while its embedded scheduler holds the Lease, and says so when the operator stops.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use ksched::api::SchedulerProfile;
use ksched::framework::registry::Registry;
use ksched::operator::in_process::InProcessSchedulers;
use ksched::operator::{OperatorOptions, run as run_operator};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::wait::{node_of, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane, fixtures::kwok_node};

const NS: &str = "ksched-system";

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

fn kubectl(args: &[&str]) -> String {
    cp().kubectl_ok(args)
}

fn apply(yaml: &str) {
    cp().apply(yaml);
}

fn policy(mode: &str) -> String {
    let weight = if mode.starts_with("Prefer") {
        "\n    weight: 100"
    } else {
        ""
    };
    format!(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata: {{name: leaves}}\nspec:\n  profiles: [leafy]\n  placement:\n    mode: {mode}{weight}\n    podSelector:\n      matchLabels: {{placement: leaf-ok}}\n"
    )
}

fn pod(name: &str, cpu: &str, leaf_ok: bool) -> Pod {
    let labels = if leaf_ok {
        json!({"placement": "leaf-ok"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"schedulerName": "leafy", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2", "resources": {"requests": {"cpu": cpu}}}]}
    }))
    .expect("pod literal")
}

/// Polls `f` for up to 120s; fails with the cluster's profiles, policies and pods.
async fn eventually<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    poll(
        what,
        Duration::from_secs(120),
        || kubectl(&["get", "sp,lcp,pods", "-A", "-o", "wide"]),
        f,
    )
    .await
}

/// Waits until pod `name` is bound; its node.
async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("{name} bound"), async || {
        node_of(pods, name).await.filter(|n| !n.is_empty())
    })
    .await
}

async fn config_hash(sps: &Api<SchedulerProfile>) -> Option<String> {
    sps.get("leafy").await.ok()?.status?.config_hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_modes_take_effect_through_the_operator() {
    let cp = cp();
    let client = cp.client().await;
    kubectl(&["create", "namespace", NS]);
    let ns = cp.namespace(&client, "leafop").await;
    for name in ["host-1", "host-2"] {
        apply(&kwok_node(name, "4", "16Gi", &[]));
    }
    for name in ["leaf-x", "leaf-y"] {
        apply(&kwok_node(name, "8", "32Gi", &[("kosmos.io/node", "true")]));
    }
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=60s",
        "node",
        "--all",
    ]);

    let op_client = client.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(async move {
        let registry = Arc::new(Registry::in_tree());
        let mut opts = OperatorOptions::new(NS, "ksched:test", registry.clone());
        opts.instance = "leaf-e2e".into();
        let embedded = Arc::new(InProcessSchedulers::new(
            op_client.clone(),
            registry,
            "leaf-e2e",
        ));
        let _ = run_operator(op_client, opts, embedded, async move {
            let _ = stopped.await;
        })
        .await;
    });

    apply(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: leafy}\nspec: {mode: Embedded}\n",
    );
    apply(&policy("PreferHost"));
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=120s",
        "sp/leafy",
    ]);
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=120s",
        "lcp/leaves",
    ]);
    let sps: Api<SchedulerProfile> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // PreferHost: the host nodes fill first (two 1.5-CPU pods each), then the leaf nodes.
    let mut placed = Vec::new();
    for i in 0..6 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("prefer-{i}"), "1500m", true),
        )
        .await
        .expect("create");
        placed.push(bound_node(&pods, &format!("prefer-{i}")).await);
    }
    assert!(
        placed[..4].iter().all(|n| n.starts_with("host-")),
        "{placed:?}"
    );
    assert!(
        placed[4..].iter().all(|n| n.starts_with("leaf-")),
        "{placed:?}"
    );
    // A pod outside the podSelector stays on host nodes.
    pods.create(&PostParams::default(), &pod("outside", "100m", false))
        .await
        .expect("create");
    assert!(bound_node(&pods, "outside").await.starts_with("host-"));

    // LeafOnly: the operator re-renders the profile (new config hash) and selected pods go to leaf nodes only.
    let before = config_hash(&sps).await;
    apply(&policy("LeafOnly"));
    eventually("the profile re-rendered for LeafOnly", || async {
        let now = config_hash(&sps).await;
        (now.is_some() && now != before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // the embedded scheduler restarts with it
    for i in 0..2 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("leafonly-{i}"), "100m", true),
        )
        .await
        .expect("create");
        let node = bound_node(&pods, &format!("leafonly-{i}")).await;
        assert!(node.starts_with("leaf-"), "LeafOnly pod on {node}");
    }

    // HostOnly: a selected pod that fits only on a leaf node stays Pending.
    let before = config_hash(&sps).await;
    apply(&policy("HostOnly"));
    eventually("the profile re-rendered for HostOnly", || async {
        let now = config_hash(&sps).await;
        (now.is_some() && now != before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    pods.create(&PostParams::default(), &pod("hostonly", "3", true))
        .await
        .expect("create");
    let message = eventually("hostonly reported unschedulable", async || {
        unschedulable_message(&pods.get("hostonly").await.ok()?)
    })
    .await;
    // Host nodes are full; leaf nodes are closed to HostOnly pods (their taint is not tolerated).
    assert!(
        message.starts_with("0/4 nodes are available:") && message.contains("2 Insufficient cpu"),
        "{message}"
    );
    // Whichever filter runs first closes the two leaf nodes (the taint message has no key or
    // value since 1.35).
    assert!(
        message.contains("2 node(s) are leaf nodes and the pod's placement is HostOnly")
            || message.contains("2 node(s) had untolerated taint(s)"),
        "{message}"
    );
    assert_eq!(node_of(&pods, "hostonly").await, None);

    // Ready means the embedded scheduler leads: the Lease names it.
    let leafy = sps.get("leafy").await.expect("profile");
    let leader = leafy
        .status
        .as_ref()
        .and_then(|s| s.leader.clone())
        .unwrap_or_default();
    assert!(leader.starts_with("embedded/leaf-e2e/leafy/"), "{leader}");
    assert_eq!(
        lease_holder(&client).await.as_deref(),
        Some(leader.as_str())
    );
    assert_eq!(ready_reason(&leafy).as_deref(), Some("Running"));

    // The profile's own args for the leaf plugins: validated as the plugin's, the field named.
    apply(&leafy_with_args("\"five\""));
    let message = eventually("bindTimeoutSeconds \"five\" refused", async || {
        let p = sps.get("leafy").await.ok()?;
        let c = p
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ConfigValid")?;
        (c.status == "False").then_some(c.message)
    })
    .await;
    assert!(
        message.contains("spec.pluginConfig[0].args.bindTimeoutSeconds"),
        "{message}"
    );
    // ... and merged with what the policies render, never dropped.
    apply(&policy("Mix"));
    apply(&leafy_with_args("5"));
    let wanted = ["kosmos.io/node", "gpu.example.com/leaf"];
    let (timeout, tolerated) = eventually(
        "the profile re-rendered with its own leaf args",
        async || {
            let config = kubectl(&[
                "get",
                "configmap",
                "-n",
                NS,
                "ksched-profile-leafy",
                "-o",
                "jsonpath={.data.config\\.yaml}",
            ]);
            let loaded = ksched::config::load(config.as_bytes(), &Registry::in_tree()).ok()?;
            let profile = &loaded.config.profiles[0];
            let args = |name: &str| profile.plugin_args.get(name).cloned().unwrap_or_default();
            let tolerated: Vec<String> = args("LeafNodeTaintToleration")["policies"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|p| {
                    p["taints"][0]["key"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            let timeout = args("LeafNodeVolumeBinding")["bindTimeoutSeconds"].clone();
            (tolerated.len() == wanted.len()).then_some((timeout, tolerated))
        },
    )
    .await;
    // The policy's entry first, then the profile's own; the profile's own timeout.
    assert_eq!(tolerated, wanted);
    assert_eq!(timeout, json!(5));
    // In scheduling: a pod the profile's own entry selects tolerates the GPU nodes' taint.
    apply(&kwok_node("gpu-host", "4", "16Gi", &[("gpu", "yes")]));
    kubectl(&[
        "taint",
        "node",
        "gpu-host",
        "gpu.example.com/leaf=true:NoSchedule",
    ]);
    tokio::time::sleep(Duration::from_secs(2)).await; // the embedded scheduler restarts with it
    for (name, selected) in [("gpu-ok", true), ("gpu-not", false)] {
        let mut p = pod(name, "100m", false);
        if let Some(spec) = p.spec.as_mut() {
            spec.node_selector = Some([("gpu".to_string(), "yes".to_string())].into());
        }
        if selected {
            p.metadata.labels = Some([("gpu".to_string(), "yes".to_string())].into());
        }
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create");
    }
    assert_eq!(bound_node(&pods, "gpu-ok").await, "gpu-host");
    let message = eventually("gpu-not reported unschedulable", async || {
        unschedulable_message(&pods.get("gpu-not").await.ok()?)
    })
    .await;
    assert!(message.contains("untolerated taint"), "{message}");

    // The operator stops, and its embedded scheduler with it: the profile says so instead of
    // staying Ready.
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(30), operator).await;
    let leafy = sps.get("leafy").await.expect("profile");
    assert_eq!(
        ready_reason(&leafy).as_deref(),
        Some("OperatorStopped"),
        "{:?}",
        leafy.status
    );
    assert!(leafy.status.as_ref().is_some_and(|s| {
        s.leader.is_none()
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "False")
    }));
    assert_ne!(
        lease_holder(&client).await.as_deref(),
        Some(leader.as_str()),
        "Lease released"
    );
}

/// Profile `leafy` with its own args for LeafNodeVolumeBinding (`bindTimeoutSeconds`) and
/// LeafNodeTaintToleration (GPU nodes' taint, for pods labelled gpu=yes).
fn leafy_with_args(bind_timeout: &str) -> String {
    format!(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {{name: leafy}}\nspec:\n  mode: Embedded\n  pluginConfig:\n  - name: LeafNodeVolumeBinding\n    args: {{bindTimeoutSeconds: {bind_timeout}}}\n  - name: LeafNodeTaintToleration\n    args:\n      policies:\n      - taints: [{{key: gpu.example.com/leaf, effect: NoSchedule}}]\n        podSelector: {{matchLabels: {{gpu: \"yes\"}}}}\n"
    )
}

fn ready_reason(p: &SchedulerProfile) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone())
}

async fn lease_holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get(&ksched::operator::object_name("leafy"))
        .await
        .ok()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}
