//! One ksched binary, two cluster versions: the same `ksched scheduler`, started without
//! `--emulated-version`, against a control plane of the previous supported minor
//! (`K8S_PREVIOUS_VERSION`, 1.36.3) and one of the pin (`K8S_VERSION`, 1.37.2). Each scheduler
//! emulates its API server's minor, with that minor's messages and scores:
//! - a successful preemption's message: 1.37's ends with "preemption: found a potential
//!   placement for pod on node N, preempting K victims", 1.36's says nothing after the nodes;
//! - ImageLocality: 1.37 counts the images of image volumes, 1.36 does not, so a pod whose
//!   volume's image is on one node and whose container's image is on another goes to the first at
//!   1.37 and to the second at 1.36;
//! - the 1.37 families of `/metrics` (`scheduler_queued_entities`) only at 1.37.
//!
//! `ksched simulate --kubeconfig` on each emulates that minor as well (`kubernetesVersion` in its
//! report) and predicts the ImageLocality pod's node of that minor.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::events::about;
use support::https::{As, get_as};
use support::scheduler::{SchedulerProcess, config};
use support::wait::{poll, record_unschedulable_messages, wait_bound, wait_log};
use support::{Components, ControlPlane, Release, control_plane_of};

const MB: i64 = 1024 * 1024;

/// What the test expects of one minor.
struct Expected {
    minor: &'static str,
    /// The node the pod with an image volume binds to.
    imaged_node: &'static str,
    /// How the preemptor's PodScheduled message ends.
    preemption_suffix: fn(&str) -> String,
    /// Whether `/metrics` has `scheduler_queued_entities`.
    queued_entities: bool,
}

const PREVIOUS: Expected = Expected {
    minor: "1.36",
    imaged_node: "container-image",
    preemption_suffix: |_| "2 node(s) didn't match Pod's node affinity/selector.".into(),
    queued_entities: false,
};

const PINNED: Expected = Expected {
    minor: "1.37",
    imaged_node: "volume-image",
    preemption_suffix: |node| {
        format!(
            "preemption: found a potential placement for pod on node {node}, preempting 1 victims"
        )
    },
    queued_entities: true,
};

fn node(name: &str, cpu: &str, image: Option<(&str, i64)>) -> Node {
    let images = image.map(|(name, size)| json!([{"names": [name], "sizeBytes": size}]));
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "ksched.io/e2e": "skew"}},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "images": images,
        }
    }))
    .expect("node literal")
}

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    spec["schedulerName"] = json!("skew");
    spec["terminationGracePeriodSeconds"] = json!(0);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod literal")
}

async fn run(cp: &'static ControlPlane, want: &Expected) {
    let client = cp.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let ns = cp.namespace(&client, "skew").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("skew-low", 10), ("skew-high", 1000)] {
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))
                .expect("priority class literal");
        classes
            .create(&PostParams::default(), &pc)
            .await
            .expect("create priority class");
    }
    // Images as ImageLocality sees them (one node each, of three: spread 1/3).
    for n in [
        node(
            "volume-image",
            "4",
            Some(("registry.example/model:v1", 3000 * MB)),
        ),
        node(
            "container-image",
            "4",
            Some(("registry.example/app:v1", 600 * MB)),
        ),
        node("tiny", "1", None),
    ] {
        nodes
            .create(&PostParams::default(), &n)
            .await
            .expect("create node");
    }
    // ImageLocality. 1.36 scores the container's 600MB/3 = 200MB on container-image; 1.37 also
    // the volume's 3000MB/3 = 1000MB on volume-image, of two images.
    let imaged = pod(
        "imaged",
        json!({
            "containers": [{"name": "c", "image": "registry.example/app:v1",
                "resources": {"requests": {"cpu": "100m"}}}],
            "volumes": [{"name": "model", "image": {"reference": "registry.example/model:v1"}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                    "operator": "In", "values": ["volume-image", "container-image"]}]}]}}},
        }),
    );
    pods.create(&PostParams::default(), &imaged)
        .await
        .expect("create pod");

    // `ksched simulate` on the live cluster emulates its minor too, and predicts the node.
    let out = std::process::Command::new(support::scheduler::ksched_bin())
        .args(["simulate", "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .args(["--all-pending", "-o", "json"])
        .output()
        .expect("ksched simulate");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["kubernetesVersion"], want.minor, "{report}");
    let predicted = report["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["name"] == "imaged"))
        .map(|p| p["node"].clone());
    assert_eq!(
        predicted,
        Some(json!(want.imaged_node)),
        "simulate at Kubernetes {}: {report}",
        want.minor
    );

    let ksched = SchedulerProcess::start(cp, "skew", &config("skew", None));
    wait_log(
        || ksched.logs(),
        &format!(
            "emulating Kubernetes {}, the API server's minor",
            want.minor
        ),
    )
    .await;

    let bound = wait_bound(&pods, "imaged", Duration::from_secs(60), || ksched.logs()).await;
    assert_eq!(bound, want.imaged_node, "Kubernetes {}", want.minor);

    // Preemption on the one node the preemptor may take.
    let victim = pod(
        "victim",
        json!({"nodeName": "tiny", "priorityClassName": "skew-low",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1"}}}]}),
    );
    pods.create(&PostParams::default(), &victim)
        .await
        .expect("create the victim");
    let preemptor = pod(
        "preemptor",
        json!({"priorityClassName": "skew-high",
            "nodeSelector": {"kubernetes.io/hostname": "tiny"},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1"}}}]}),
    );
    // The preemptor binds as soon as its victim is gone (no kubelet holds the victim): its
    // PodScheduled=False message is seen by a watch, its FailedScheduling event stays.
    let messages = record_unschedulable_messages(pods.clone()).await;
    pods.create(&PostParams::default(), &preemptor)
        .await
        .expect("create the preemptor");
    let message = poll(
        "the preemptor's PodScheduled=False message",
        Duration::from_secs(60),
        || ksched.logs(),
        async || {
            let messages = messages.lock();
            messages
                .iter()
                .find(|(pod, _)| pod == "preemptor")
                .map(|(_, m)| m.clone())
        },
    )
    .await;
    let want_end = (want.preemption_suffix)("tiny");
    let want_start = "0/3 nodes are available: 1 Insufficient cpu, ";
    assert!(
        message.starts_with(want_start) && message.ends_with(&want_end),
        "Kubernetes {}: PodScheduled {message:?} should end with {want_end:?}",
        want.minor
    );
    let note = poll(
        "the preemptor's FailedScheduling event",
        Duration::from_secs(60),
        || ksched.logs(),
        async || {
            about(&client, &ns, "FailedScheduling", "preemptor")
                .await
                .into_iter()
                .find_map(|e| e.note)
        },
    )
    .await;
    assert_eq!(
        note, message,
        "Kubernetes {}: the event says what PodScheduled said",
        want.minor
    );

    let (cert, key, ca) = (
        cp.dir.join("admin.crt"),
        cp.dir.join("admin.key"),
        cp.dir.join("ca.crt"),
    );
    let metrics = poll(
        "/metrics",
        Duration::from_secs(60),
        || ksched.logs(),
        async || match get_as(&ca, ksched.secure_port, "/metrics", As::Cert(&cert, &key)).await {
            Ok((200, body)) => Some(body),
            _ => None,
        },
    )
    .await;
    assert_eq!(
        metrics.contains("\nscheduler_queued_entities{"),
        want.queued_entities,
        "Kubernetes {}: scheduler_queued_entities",
        want.minor
    );

    drop(ksched);
    let gone = DeleteParams::default();
    let _ = nodes
        .delete_collection(&gone, &ListParams::default().labels("ksched.io/e2e=skew"))
        .await;
}

/// The same ksched against the previous minor's control plane, then the pin's: each with its
/// own minor's behaviour (the two control planes run one after the other: 2 cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_binary_serves_both_minors_with_each_minors_behaviour() {
    run(
        control_plane_of(Release::Previous, Components::API_ONLY),
        &PREVIOUS,
    )
    .await;
    run(
        control_plane_of(Release::Pinned, Components::API_ONLY),
        &PINNED,
    )
    .await;
}
