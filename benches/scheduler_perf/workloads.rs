//! The workloads beyond plain pods on plain nodes, after upstream's scheduler_perf
//! (test/integration/scheduler_perf/*/performance-config.yaml at 1.36): their setup (named nodes,
//! CSINodes and pre-bound CSI volumes, labelled namespaces) and the churn that runs while the
//! measured pods are created (unschedulable or preempting pods every 200 ms, recreated nodes, pods
//! and services every second, deletions at 50/s).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

pub const PREFERRED_POD_AFFINITY: &str = "SchedulingPreferredPodAffinity";
pub const PREFERRED_POD_ANTI_AFFINITY: &str = "SchedulingPreferredPodAntiAffinity";
pub const PREFERRED_TOPOLOGY_SPREADING: &str = "PreferredTopologySpreading";
pub const ANTI_AFFINITY_NS_SELECTOR: &str = "SchedulingRequiredPodAntiAffinityWithNSSelector";
pub const UNSCHEDULABLE: &str = "Unschedulable";
pub const MIXED_CHURN: &str = "SchedulingWithMixedChurn";
pub const CSI_PVS: &str = "SchedulingCSIPVs";
pub const GATED_PODS: &str = "SchedulingGatedPods";
pub const DAEMONSET: &str = "SchedulingDaemonset";
pub const PREEMPTION_ASYNC: &str = "PreemptionAsync";

/// The node every pod of SchedulingDaemonset and SchedulingGatedPods targets (pods capacity 90000).
pub const NAMED_NODE: &str = "scheduler-perf-node";
const CSI_DRIVER: &str = "ebs.csi.aws.com";
/// Volumes a node can attach (upstream's `csiNodeAllocatable` for SchedulingCSIPVs).
const CSI_VOLUMES_PER_NODE: i32 = 39;
/// Label of everything a churn creates, so it can be removed after the run.
const CHURN_LABEL: &str = "ksched.io/bench-churn";

/// Workloads whose init pods spread over labelled namespaces of their own.
pub fn init_namespaces(workload: &str, nodes: usize) -> usize {
    if workload == ANTI_AFFINITY_NS_SELECTOR {
        (nodes / 50).max(1)
    } else {
        0
    }
}

/// Whether the workload's pods carry one pre-bound CSI volume each.
pub fn uses_csi_volumes(workload: &str) -> bool {
    workload == CSI_PVS
}

/// The workload's own part of a pod's labels and spec (`measure`: a measured pod, else an init
/// pod); `ns` is the run's namespace.
pub fn customize_pod(
    workload: &str,
    name: &str,
    ns: &str,
    measure: bool,
    labels: &mut serde_json::Value,
    spec: &mut serde_json::Value,
) {
    let preferred_term = |color: &str| {
        json!([{"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": color}},
            "topologyKey": "kubernetes.io/hostname", "namespaces": [ns]}}])
    };
    match workload {
        PREFERRED_POD_AFFINITY => {
            labels["color"] = json!("red");
            spec["affinity"] = json!({"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": preferred_term("red")}});
        }
        PREFERRED_POD_ANTI_AFFINITY => {
            labels["color"] = json!("yellow");
            spec["affinity"] = json!({"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": preferred_term("yellow")}});
        }
        // Upstream's init pods are plain; the measured ones spread softly over three zones.
        PREFERRED_TOPOLOGY_SPREADING if measure => {
            labels["color"] = json!("blue");
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        ANTI_AFFINITY_NS_SELECTOR => {
            labels["color"] = json!("green");
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname",
                 "namespaceSelector": {"matchLabels": {"team": "devops"}}}]}});
        }
        CSI_PVS => {
            spec["volumes"] = json!([{"name": "data",
                "persistentVolumeClaim": {"claimName": format!("{name}-pvc")}}]);
        }
        DAEMONSET | GATED_PODS => {
            // DaemonSet pods: required node affinity on the node's name, as the DaemonSet
            // controller writes it. SchedulingGatedPods uses the same node (upstream's light pods
            // on one large node).
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NAMED_NODE]}]}]}}});
        }
        PREEMPTION_ASYNC if !measure => {
            spec["priorityClassName"] = json!("bench-low");
            spec["containers"] = super::container("900m");
        }
        _ => {}
    }
}

/// A node of the workload: `pods` is its pod capacity.
pub fn node(name: &str, zone: usize, pods: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone{zone}"), "ksched.io/bench": "true"}},
        "status": {"capacity": {"pods": pods, "cpu": "4", "memory": "32Gi"},
            "allocatable": {"pods": pods, "cpu": "4", "memory": "32Gi"},
            "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    }))
    .expect("node template")
}

/// The names of the workload's nodes besides `bench-node-<i>`: the named node when the workload
/// targets it. SchedulingGatedPods runs on that node alone.
pub fn extra_nodes(workload: &str) -> Vec<Node> {
    match workload {
        DAEMONSET | GATED_PODS => vec![node(NAMED_NODE, 1, "90000")],
        _ => Vec::new(),
    }
}

/// One CSINode per bench node for workloads with CSI volumes (39 attachable volumes each).
pub async fn csi_nodes(admin: &Client, workload: &str, nodes: usize) {
    if !uses_csi_volumes(workload) {
        return;
    }
    let api: Api<CSINode> = Api::all(admin.clone());
    for_each_concurrently(0..nodes, |i| {
        let api = api.clone();
        async move {
            let name = format!("bench-node-{i}");
            let csi: CSINode = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"ksched.io/bench": "true"}},
                "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": name,
                    "allocatable": {"count": CSI_VOLUMES_PER_NODE}}]}
            }))
            .expect("csinode template");
            let _ = api.create(&PostParams::default(), &csi).await;
        }
    })
    .await;
}

/// Removes the CSINodes of the previous workload.
pub async fn delete_csi_nodes(admin: &Client) {
    let api: Api<CSINode> = Api::all(admin.clone());
    let _ = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("ksched.io/bench=true"),
        )
        .await;
}

/// A bound PVC (`<pod>-pvc`) and its CSI PV for each pod, as upstream's
/// `CreatePodWithPersistentVolume` with `bindVolume` does. Not measured.
pub async fn csi_volumes(admin: &Client, ns: &str, pods: &[String]) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    for_each_concurrently(pods.iter(), |pod| {
        let (pvcs, pvs) = (pvcs.clone(), pvs.clone());
        async move {
            let claim = format!("{pod}-pvc");
            let volume = format!("{ns}-{pod}-pv");
            let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "true"}},
                "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}},
                    "volumeName": volume, "storageClassName": ""},
            }))
            .expect("pvc template");
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": volume, "labels": {"ksched.io/bench": "true"}},
                "spec": {"accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"},
                    "csi": {"driver": CSI_DRIVER, "volumeHandle": volume},
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                    "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": claim}},
            }))
            .expect("pv template");
            // Creation resets the status: it is written separately, as upstream does.
            if pvcs.create(&PostParams::default(), &pvc).await.is_ok() {
                let status = json!({"status": {"phase": "Bound"}});
                let _ = pvcs
                    .patch_status(&claim, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            }
            if pvs.create(&PostParams::default(), &pv).await.is_ok() {
                let status = json!({"status": {"phase": "Bound"}});
                let _ = pvs
                    .patch_status(&volume, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            }
        }
    })
    .await;
}

/// Removes the run's volumes: nothing runs the PV and PVC protection controllers here, so the bench
/// clears their finalizers.
pub async fn delete_csi_volumes(admin: &Client, ns: &str) {
    delete_all(
        Api::<PersistentVolumeClaim>::namespaced(admin.clone(), ns),
        "",
    )
    .await;
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let prefix = format!("{ns}-");
    let names: Vec<String> = pvs
        .list(&ListParams::default().labels("ksched.io/bench=true"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pv| pv.metadata.name)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    for_each_concurrently(names, |name| delete_unfinalized(pvs.clone(), name)).await;
}

/// Deletes every object of `api` matching `labels`, clearing finalizers first.
pub async fn delete_all<K>(api: Api<K>, labels: &str)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let names: Vec<String> = api
        .list(&ListParams::default().labels(labels))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    for_each_concurrently(names, |name| delete_unfinalized(api.clone(), name)).await;
}

async fn delete_unfinalized<K>(api: Api<K>, name: String)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"finalizers": null}});
    let _ = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
}

/// The labelled namespaces the init pods of SchedulingRequiredPodAntiAffinityWithNSSelector go to
/// (the run's own namespace is labelled too: the measured pods' selector matches all of them).
pub async fn labelled_namespaces(admin: &Client, run_ns: &str, count: usize) -> Vec<String> {
    let api: Api<Namespace> = Api::all(admin.clone());
    let label = json!({"metadata": {"labels": {"team": "devops"}}});
    let _ = api
        .patch(run_ns, &PatchParams::default(), &Patch::Merge(&label))
        .await;
    let mut names = Vec::new();
    for k in 0..count {
        let name = format!("{run_ns}-init-{k}");
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"team": "devops", "ksched.io/test": "true"}}
        }))
        .expect("namespace template");
        let _ = api.create(&PostParams::default(), &ns).await;
        names.push(name);
    }
    names
}

/// What runs beside the measured pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Churn {
    /// A high-priority pod every `every` (`cpu` each: 9 never fits a 4-CPU node, 3 preempts).
    Pods { every: Duration, cpu: &'static str },
    /// Every second, the previous node, pod and service are deleted and new ones created.
    Recreate,
    /// The init pods are deleted at 50 per second.
    DeleteInitPods,
}

pub fn churn(workload: &str) -> Option<Churn> {
    let every = Duration::from_millis(200);
    match workload {
        UNSCHEDULABLE => Some(Churn::Pods { every, cpu: "9" }),
        PREEMPTION_ASYNC => Some(Churn::Pods { every, cpu: "3" }),
        MIXED_CHURN => Some(Churn::Recreate),
        GATED_PODS => Some(Churn::DeleteInitPods),
        _ => None,
    }
}

/// Runs `churn` in namespace `ns` until aborted; `init` names the init pods.
pub async fn run_churn(admin: Client, ns: String, churn: Churn, init: Vec<String>) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let churn_pod = |i: usize, cpu: &str| {
        let pod = super::pod("SchedulingBasic", &ns, &format!("churn-{i}"), false);
        edit(pod, |p| {
            p["metadata"]["labels"][CHURN_LABEL] = json!("true");
            p["spec"]["priorityClassName"] = json!("bench-high");
            p["spec"]["containers"] = super::container(cpu);
        })
    };
    match churn {
        Churn::Pods { every, cpu } => {
            let mut tick = tokio::time::interval(every);
            for i in 0.. {
                tick.tick().await;
                let _ = pods
                    .create(&PostParams::default(), &churn_pod(i, cpu))
                    .await;
            }
        }
        Churn::Recreate => {
            let nodes: Api<Node> = Api::all(admin.clone());
            let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for i in 0.. {
                tick.tick().await;
                if i > 0 {
                    let dp = DeleteParams::default();
                    let _ = nodes.delete(&format!("{ns}-churn-{}", i - 1), &dp).await;
                    let _ = pods.delete(&format!("churn-{}", i - 1), &dp).await;
                    let _ = services.delete(&format!("churn-{}", i - 1), &dp).await;
                }
                let mut n = node(&format!("{ns}-churn-{i}"), 1, "0");
                let labels = n.metadata.labels.get_or_insert_default();
                labels.remove("ksched.io/bench");
                labels.insert(CHURN_LABEL.into(), "true".into());
                let _ = nodes.create(&PostParams::default(), &n).await;
                let _ = pods
                    .create(&PostParams::default(), &churn_pod(i, "9"))
                    .await;
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("churn-{i}"), "labels": {CHURN_LABEL: "true"}},
                    "spec": {"selector": {"app": "foo"}, "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]}
                }))
                .expect("service template");
                let _ = services.create(&PostParams::default(), &svc).await;
            }
        }
        Churn::DeleteInitPods => {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            for name in init {
                tick.tick().await;
                let _ = pods.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
}

/// Removes what a churn left: its nodes (pods and services go with the namespace's pods).
pub async fn clean_churn(admin: &Client, ns: &str) {
    delete_all(
        Api::<Node>::all(admin.clone()),
        &format!("{CHURN_LABEL}=true"),
    )
    .await;
    delete_all(
        Api::<Service>::namespaced(admin.clone(), ns),
        &format!("{CHURN_LABEL}=true"),
    )
    .await;
}

/// Gated pods of SchedulingGatedPods (`gated-<i>`): they wait in the queue the whole run.
pub fn gated_pods(ns: &str, count: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            let pod = super::pod(GATED_PODS, ns, &format!("gated-{i}"), false);
            edit(pod, |p| {
                p["spec"]["schedulingGates"] = json!([{"name": "test.k8s.io/hold"}])
            })
        })
        .collect()
}

/// Runs `f` over `items` with up to 64 in flight.
pub async fn for_each_concurrently<I, F, Fut>(items: I, f: F)
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(items)
        .map(f)
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

/// `pod` changed through its JSON form.
fn edit(pod: Pod, f: impl FnOnce(&mut serde_json::Value)) -> Pod {
    let mut value = serde_json::to_value(&pod).expect("pod");
    f(&mut value);
    serde_json::from_value(value).expect("pod")
}
