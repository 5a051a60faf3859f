//! What runs beside the measured pods, after upstream's `churn` and `deletePods` ops: pods that
//! never fit or that preempt, created every 200 ms (`mode: create`); a node, a never-fitting pod
//! and a service created and deleted in turn every second (`mode: recreate`, `number: 1`); the
//! init pods deleted at 50 per second.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::setup::{delete_all, object};
use super::workloads::{self, Kind, Role, Workload};

/// Label of the nodes and services a churn creates, so they can be removed after the run.
const CHURN_LABEL: &str = "ksched.io/bench-churn";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Churn {
    /// A churn pod (the workload's `Role::Churn` template) every 200 ms.
    CreatePods,
    /// Every second a node (pods capacity 0), a never-fitting pod and a service are created, and
    /// the next second deleted.
    Recreate,
    /// The init pods are deleted at 50 per second.
    DeleteInitPods,
}

pub fn churn(kind: Kind) -> Option<Churn> {
    match kind {
        Kind::Unschedulable | Kind::PreemptionAsync => Some(Churn::CreatePods),
        Kind::MixedChurn => Some(Churn::Recreate),
        Kind::GatedPods => Some(Churn::DeleteInitPods),
        _ => None,
    }
}

/// Runs the workload's churn in the run's namespace `ns` until aborted.
pub async fn run(admin: Client, w: Workload, ns: String) {
    let Some(churn) = churn(w.kind) else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let churn_pod = |i: usize| object::<Pod>(workloads::pod(w.kind, Role::Churn, &ns, &ns, i));
    match churn {
        Churn::CreatePods => {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            for i in 0.. {
                tick.tick().await;
                let _ = pods.create(&PostParams::default(), &churn_pod(i)).await;
            }
        }
        Churn::Recreate => {
            let nodes: Api<Node> = Api::all(admin.clone());
            let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let dp = DeleteParams::default();
            for i in 0.. {
                tick.tick().await;
                let (node, pod) = (
                    churn_node_name(&ns, i / 2),
                    workloads::pod_name(Role::Churn, i / 2),
                );
                if i % 2 == 1 {
                    let _ = nodes.delete(&node, &dp).await;
                    let _ = pods.delete(&pod, &dp).await;
                    let _ = services.delete(&pod, &dp).await;
                    continue;
                }
                // Upstream's churn/node-default.yaml: Ready, room for no pod.
                let n = json!({"metadata": {"name": node, "labels": {CHURN_LABEL: ns}},
                    "status": {"capacity": {"pods": "0"}, "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}});
                let _ = nodes.create(&PostParams::default(), &object(n)).await;
                let _ = pods.create(&PostParams::default(), &churn_pod(i / 2)).await;
                let svc = json!({"metadata": {"name": pod, "labels": {CHURN_LABEL: ns}},
                    "spec": {"selector": {"app": "foo"}, "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]}});
                let _ = services.create(&PostParams::default(), &object(svc)).await;
            }
        }
        Churn::DeleteInitPods => {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            for i in 0..w.init_pods {
                tick.tick().await;
                let name = workloads::pod_name(Role::Init, i);
                let _ = pods.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
}

fn churn_node_name(ns: &str, i: usize) -> String {
    format!("{ns}-churn-{i}")
}

/// Whether `node` is a node the churn of run `ns` created.
pub fn is_churn_node(ns: &str, node: &str) -> bool {
    node.strip_prefix(ns)
        .is_some_and(|rest| rest.starts_with("-churn-"))
}

/// Removes the nodes and services a churn left (its pods go with the run's pods).
pub async fn clean(admin: &Client, ns: &str) {
    let labels = format!("{CHURN_LABEL}={ns}");
    delete_all(Api::<Node>::all(admin.clone()), &labels).await;
    delete_all(Api::<Service>::namespaced(admin.clone(), ns), &labels).await;
}
