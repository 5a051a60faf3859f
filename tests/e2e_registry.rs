//! Installing from a registry, and running what is installed: the ksched image (hack/image.sh,
//! what `make image` runs) pushed with skopeo to Debian's docker-registry on loopback, the chart
//! packaged and pushed there as an OCI artifact (`helm push`), then `helm install
//! oci://127.0.0.1:PORT/charts/ksched` on the real control plane. The operator's pods and the
//! Deployment it renders for a `mode: Deployment` profile run for real on the test support's
//! podman node (a stand-in for a kubelet: tests/support/podman_node.rs), which pulls the image
//! from the registry: in-cluster configuration with a projected ServiceAccount token, the
//! rendered command line and ConfigMap, readiness from the probes. The profile becomes Ready with
//! its scheduler pod as the Lease's leader, that scheduler binds a pod, and `helm uninstall`
//! stops them all.
//!
//! Skipped, with the reason printed, only when podman or the registry cannot run here (`make
//! testenv` installs both).

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

use ksched::api::SchedulerProfile;
use support::helm::{chart, helm_ok};
use support::nodes::Nodes;
use support::operator::wait_profile_ready;
use support::podman_node::{self, PodmanNode};
use support::registry::Registry;
use support::scheduler::default_scheduler;
use support::wait::{create_bound, poll};
use support::{Components, ControlPlane, control_plane, path_str};

const NS: &str = "ksched-system";
const PROFILE: &str = "podman-run";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_from_a_registry_runs_the_operator_and_a_deployment_mode_scheduler() {
    let cp = cp();
    let client = cp.client().await;
    let registry = match Registry::start(cp).await {
        Ok(r) => r,
        Err(why) => {
            support::podman::cannot_run(&why);
            return;
        }
    };
    // The pods' image comes from the registry: the node's podman starts with none.
    let node = match PodmanNode::start(cp, client.clone(), "podman-node", &[]).await {
        Ok(n) => n,
        Err(why) => {
            support::podman::cannot_run(&why);
            return;
        }
    };
    let version = env!("CARGO_PKG_VERSION");
    let image = registry.push_archive(
        &support::podman::image_archive(),
        &format!("ksched:{version}"),
    );
    let charts = cp.dir.join("charts");
    helm_ok(
        None,
        &["package", &chart(), "--destination", path_str(&charts)],
    );
    let package = charts.join(format!("ksched-{version}.tgz"));
    let pushed = helm_ok(
        None,
        &[
            "push",
            path_str(&package),
            &format!("oci://{}/charts", registry.host),
            "--plain-http",
        ],
    );
    eprintln!("helm push: {pushed}");

    let _default_scheduler = default_scheduler(cp);
    let nodes = Nodes::new(cp, "registry");
    let workload_node = nodes.add("0", "4", &[]);
    let (node_selector, tolerations) = podman_node::placement();
    let values = cp.dir.join("values-registry.yaml");
    let repository = image.rsplit_once(':').map_or(image.as_str(), |(r, _)| r);
    std::fs::write(
        &values,
        serde_json::to_string(&json!({
            "image": {"repository": repository, "tag": version, "pullPolicy": "Always"},
            "replicas": 1,
            "podAntiAffinity": "none",
            "nodeSelector": node_selector,
            "tolerations": tolerations,
            "logLevel": "info,ksched=debug,kube_runtime=warn",
        }))
        .expect("values"),
    )
    .expect("write values");
    let diag = || diagnostics(cp, &node, &registry);

    // Helm waits (kstatus) until the operator Deployment is Available: its pod ran under podman
    // and its readiness probe passed.
    let (ok, out, err) = support::helm::helm(
        Some(cp),
        &[
            "install",
            "ksched",
            &format!("oci://{}/charts/ksched", registry.host),
            "--version",
            version,
            "--plain-http",
            "--namespace",
            NS,
            "--create-namespace",
            "--values",
            path_str(&values),
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    assert!(
        ok,
        "helm install from the registry: {err}\n{out}\n{}",
        diag()
    );
    let operator_pods = pods_on(&client, &node.name, "app.kubernetes.io/component=operator").await;
    assert_eq!(operator_pods.len(), 1, "{}", diag());
    let operator = &operator_pods[0];
    let container = &operator.spec.as_ref().expect("spec").containers[0];
    assert_eq!(container.image.as_deref(), Some(image.as_str()));
    assert!(ready(operator), "{}", diag());

    // A Deployment-mode profile whose scheduler pod also lands on the podman node.
    let profile = json!({
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": PROFILE},
        "spec": {"mode": "Deployment", "nodeSelector": node_selector, "tolerations": tolerations},
    });
    cp.apply(&profile.to_string());
    let ready_profile: SchedulerProfile = wait_profile_ready(&client, PROFILE, diag).await;
    let status = ready_profile.status.expect("status");
    let scheduler_pods = pods_on(
        &client,
        &node.name,
        &format!("app.kubernetes.io/instance={PROFILE}"),
    )
    .await;
    let scheduler_pod = scheduler_pods.iter().find(|p| ready(p)).unwrap_or_else(|| {
        panic!(
            "no ready scheduler pod of {PROFILE} on the podman node\n{}",
            diag()
        )
    });
    let leader = status.leader.clone().unwrap_or_default();
    assert!(
        leader.starts_with(&scheduler_pod.metadata.name.clone().unwrap_or_default()),
        "leader {leader:?}, scheduler pod {:?}\n{}",
        scheduler_pod.metadata.name,
        diag()
    );
    let rendered: Deployment = Api::namespaced(client.clone(), NS)
        .get(&ksched::operator::object_name(PROFILE))
        .await
        .expect("the rendered Deployment");
    let rendered_image = rendered.spec.template.spec.expect("pod spec").containers[0]
        .image
        .clone();
    assert_eq!(rendered_image.as_deref(), Some(image.as_str()));

    // The containerized scheduler (in-cluster configuration, its own ServiceAccount's token)
    // binds a pod.
    let ns = cp.namespace(&client, "registry").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = support::fixtures::pause_pod("p", PROFILE, "100m", &[], json!({}));
    let bound = create_bound(&pods, &pod, diag).await;
    assert_eq!(bound, workload_node);

    // Uninstall: the operator tears down what it rendered, its pods and the scheduler's stop.
    helm_ok(
        Some(cp),
        &[
            "uninstall",
            "ksched",
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "120s",
        ],
    );
    poll(
        "every pod on the podman node gone",
        Duration::from_secs(120),
        diag,
        async || {
            pods_on(&client, &node.name, "")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    poll(
        "every container of the podman node removed",
        Duration::from_secs(60),
        diag,
        async || node.containers().is_empty().then_some(()),
    )
    .await;
}

/// Pods bound to `node` matching `selector` (every pod for "").
async fn pods_on(client: &kube::Client, node: &str, selector: &str) -> Vec<Pod> {
    let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    if !selector.is_empty() {
        params = params.labels(selector);
    }
    Api::<Pod>::all(client.clone())
        .list(&params)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn diagnostics(cp: &ControlPlane, node: &PodmanNode, registry: &Registry) -> String {
    let (_, objects, _) = cp.kubectl_run(&["get", "sp,deploy,rs,pods", "-A", "-o", "wide"]);
    let (_, events, _) = cp.kubectl_run(&["get", "events", "-n", NS]);
    format!(
        "--- objects\n{objects}\n--- events in {NS}\n{events}\n{}\n--- registry\n{}",
        node.logs(),
        support::wait::tail(&registry.logs(), 20)
    )
}
