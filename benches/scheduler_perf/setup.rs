//! The cluster objects of a workload besides its pods: nodes (with CSINodes or ResourceSlices),
//! priority and storage classes, labelled namespaces, PodGroups, the claims and volume claims
//! pods refer to, the bench's stand-in for the CSI provisioner, and their removal.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::contenders::Contender;
use super::workloads::{self, Kind, NODE_LABEL, Role, Workload};

/// A typed object from a JSON template the bench wrote itself.
pub fn object<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("bench object template")
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

/// Creates `objects` (64 in flight); an object that exists already is fine.
pub async fn create_all<K>(api: &Api<K>, objects: impl IntoIterator<Item = Value>)
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    for_each_concurrently(objects, |o| async move {
        let _ = api.create(&PostParams::default(), &object::<K>(o)).await;
    })
    .await;
}

/// Deletes every object of `api` matching `labels`, clearing finalizers first (no controller
/// runs here to clear them: PVC and PV protection, the scheduler's claim finalizer).
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
    for_each_concurrently(names, |name| {
        let api = api.clone();
        async move {
            let patch = json!({"metadata": {"finalizers": null}});
            let _ = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    })
    .await;
}

/// Priority classes of the preemption workloads and the churn pods (upstream's templates set
/// `priority: 10` directly, which the Priority admission plugin refuses without a class).
pub async fn priority_classes(admin: &Client) {
    let api: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(admin.clone());
    create_all(
        &api,
        [
            json!({"metadata": {"name": "bench-low"}, "value": 1}),
            json!({"metadata": {"name": "bench-high"}, "value": 10}),
        ],
    )
    .await;
}

/// Replaces the bench nodes with the workload's, with their CSINodes (SchedulingCSIPVs) or
/// ResourceSlices (SchedulingWithResourceClaimTemplate). Runs once per workload: every contender
/// meets the same nodes.
pub async fn nodes(admin: &Client, w: &Workload) {
    let bench = format!("{NODE_LABEL}=true");
    delete_all(Api::<Node>::all(admin.clone()), &bench).await;
    delete_all(Api::<CSINode>::all(admin.clone()), &bench).await;
    delete_all(Api::<ResourceSlice>::all(admin.clone()), &bench).await;
    let names: Vec<String> = (0..w.nodes).map(node_name).collect();
    let mut nodes: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| workloads::node(w.kind, n, i))
        .collect();
    if workloads::has_named_node(w.kind) {
        nodes.push(workloads::named_node());
    }
    create_all(&Api::<Node>::all(admin.clone()), nodes).await;
    match w.kind {
        Kind::CsiPvs => csi_nodes(admin, &names).await,
        Kind::ResourceClaimTemplate => dra_devices(admin, &names).await,
        _ => {}
    }
}

pub fn node_name(index: usize) -> String {
    format!("bench-node-{index}")
}

/// One CSINode per node: the driver may attach 39 volumes (upstream's `csiNodeAllocatable`).
async fn csi_nodes(admin: &Client, names: &[String]) {
    let csi_nodes = names.iter().map(|name| {
        json!({"metadata": {"name": name, "labels": {NODE_LABEL: "true"}},
            "spec": {"drivers": [{"name": workloads::CSI_DRIVER, "nodeID": name,
                "allocatable": {"count": workloads::CSI_VOLUMES_PER_NODE}}]}})
    });
    create_all(&Api::<CSINode>::all(admin.clone()), csi_nodes).await;
}

/// The StorageClass of SchedulingCSIPVs: the CSI driver provisions, WaitForFirstConsumer.
pub async fn storage_class(admin: &Client) {
    create_all(
        &Api::<StorageClass>::all(admin.clone()),
        [json!({"metadata": {"name": workloads::CSI_STORAGE_CLASS},
            "provisioner": workloads::CSI_DRIVER, "volumeBindingMode": "WaitForFirstConsumer"})],
    )
    .await;
}

/// The bench DeviceClass and one ResourceSlice per node with `DEVICES_PER_NODE` devices.
async fn dra_devices(admin: &Client, names: &[String]) {
    let selector = format!("device.driver == \"{}\"", workloads::DRA_DRIVER);
    create_all(
        &Api::<DeviceClass>::all(admin.clone()),
        [json!({"metadata": {"name": workloads::DRA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": selector}}]}})],
    )
    .await;
    let slices = names.iter().map(|node| {
        let devices: Vec<Value> = (0..workloads::DEVICES_PER_NODE)
            .map(|d| json!({"name": format!("gpu-{d}"), "attributes": {"model": {"string": "bench"}}}))
            .collect();
        json!({"metadata": {"name": format!("{node}-{}", workloads::DRA_DRIVER), "labels": {NODE_LABEL: "true"}},
            "spec": {"driver": workloads::DRA_DRIVER, "nodeName": node, "devices": devices,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}})
    });
    create_all(&Api::<ResourceSlice>::all(admin.clone()), slices).await;
}

/// What must exist before the pods `indices` of `role` are created in `ns`: their DRA claims
/// (as kube-controller-manager's resourceclaim controller would create them from the pods'
/// template; no controller runs here) or their volume claims (unbound, WaitForFirstConsumer).
pub async fn before_pods(admin: &Client, w: &Workload, ns: &str, role: Role, count: usize) {
    let names = (0..count).map(|i| workloads::pod_name(role, i));
    match (w.kind, role) {
        (Kind::ResourceClaimTemplate, Role::Init | Role::Measured) => {
            let claims = names.map(|pod| {
                json!({"metadata": {"name": format!("{pod}-gpu")},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": workloads::DRA_CLASS}}]}}})
            });
            create_all(&Api::<ResourceClaim>::namespaced(admin.clone(), ns), claims).await;
        }
        (Kind::CsiPvs, Role::Init | Role::Measured) => {
            let claims = names.map(|pod| {
                json!({"metadata": {"name": format!("{pod}-pvc")},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": workloads::CSI_STORAGE_CLASS}})
            });
            create_all(
                &Api::<PersistentVolumeClaim>::namespaced(admin.clone(), ns),
                claims,
            )
            .await;
        }
        _ => {}
    }
}

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The CSI external provisioner and the PV controller's binding, which upstream's harness fakes
/// too (`StartFakePVController`): once the scheduler's PreBind put `selected-node` on a claim of
/// `ns`, a PV on that node is created for it and the claim is bound to it. Runs until aborted.
pub async fn provisioner(admin: Client, ns: String) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let stream = watcher::watcher(claims.clone(), watcher::Config::default());
    stream
        .try_for_each_concurrent(32, |event| {
            let (claims, pvs, ns) = (claims.clone(), pvs.clone(), ns.clone());
            async move {
                if let Event::Apply(pvc) | Event::InitApply(pvc) = event {
                    provision(&claims, &pvs, &ns, &pvc).await;
                }
                Ok(())
            }
        })
        .await
        .ok();
}

async fn provision(
    claims: &Api<PersistentVolumeClaim>,
    pvs: &Api<PersistentVolume>,
    ns: &str,
    pvc: &PersistentVolumeClaim,
) {
    let bound = pvc.spec.as_ref().is_some_and(|s| s.volume_name.is_some());
    let node = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SELECTED_NODE));
    let (Some(node), false, Some(name), Some(uid)) = (
        node,
        bound,
        pvc.metadata.name.as_ref(),
        pvc.metadata.uid.as_ref(),
    ) else {
        return;
    };
    let volume = format!("{ns}-{name}");
    let pv = json!({
        "metadata": {"name": volume, "labels": {"bench-run": ns},
            "annotations": {"pv.kubernetes.io/provisioned-by": workloads::CSI_DRIVER}},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "csi": {"driver": workloads::CSI_DRIVER, "volumeHandle": volume},
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": workloads::CSI_STORAGE_CLASS,
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name, "uid": uid},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    });
    match pvs
        .create(&PostParams::default(), &object::<PersistentVolume>(pv))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            eprintln!("provisioner: PV for {ns}/{name}: {e}");
            return;
        }
    }
    let bind = json!({
        "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}},
        "spec": {"volumeName": volume},
    });
    if let Err(e) = claims
        .patch(name, &PatchParams::default(), &Patch::Merge(&bind))
        .await
    {
        eprintln!("provisioner: binding {ns}/{name}: {e}");
    }
}

/// The labelled namespaces the init pods of SchedulingRequiredPodAntiAffinityWithNSSelector go
/// to (upstream's `namespace-with-labels.yaml`); the run's own namespace gets the label too, as
/// upstream's `measure-ns-0`.
pub async fn labelled_namespaces(admin: &Client, run: &str, count: usize) -> Vec<String> {
    let api: Api<Namespace> = Api::all(admin.clone());
    let label = json!({"metadata": {"labels": {"team": "devops"}}});
    let _ = api
        .patch(run, &PatchParams::default(), &Patch::Merge(&label))
        .await;
    let names: Vec<String> = (0..count).map(|k| format!("{run}-init-{k}")).collect();
    create_all(
        &api,
        names.iter().map(|name| {
            json!({"metadata": {"name": name, "labels": {"team": "devops", "ksched.io/test": "true"}}})
        }),
    )
    .await;
    // Pods need their namespace's `default` ServiceAccount, which no controller creates here.
    for_each_concurrently(&names, |name| {
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), name);
        async move {
            create_all(&accounts, [json!({"metadata": {"name": "default"}})]).await;
        }
    })
    .await;
    names
}

/// scheduler-plugins' PodGroup (Coscheduling, read by ksched).
fn coscheduling_groups() -> ApiResource {
    ApiResource {
        group: "scheduling.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "scheduling.x-k8s.io/v1alpha1".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    }
}

/// Upstream's PodGroup (gang scheduling by kube-scheduler's GangScheduling).
fn workload_groups() -> ApiResource {
    let version = super::contenders::gang_api().version;
    ApiResource {
        group: "scheduling.k8s.io".into(),
        version: version.into(),
        api_version: format!("scheduling.k8s.io/{version}"),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    }
}

/// The gangs of a gang workload in `ns`, in the API `contender` reads: upstream's PodGroup with a
/// gang policy's `minCount` for kube-scheduler, and for ksched from 1.37; at 1.36 scheduler-plugins'
/// PodGroup with `minMember` for ksched's Coscheduling. Both are the gang size. The null binder
/// needs none.
pub async fn pod_groups(
    admin: &Client,
    ns: &str,
    w: &Workload,
    contender: Contender,
) -> Result<(), String> {
    let Some(size) = w.kind.gang_size() else {
        return Ok(());
    };
    let mut upstream_spec = json!({"schedulingPolicy": {"gang": {"minCount": size}}});
    if let Some(key) = w.kind.topology_key() {
        upstream_spec["schedulingConstraints"] = json!({"topology": [{"key": key}]});
    }
    let workload = (workload_groups(), upstream_spec);
    let (resource, spec) = match contender {
        Contender::Ceiling => return Ok(()),
        c if c.is_ksched() && !super::contenders::gang_api().ksched_has_it => {
            (coscheduling_groups(), json!({"minMember": size}))
        }
        _ => workload,
    };
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &resource);
    let errors = futures::stream::iter(0..w.measure_pods / size)
        .map(|g| {
            let api = api.clone();
            let mut group = DynamicObject::new(&workloads::gang_name(g), &resource);
            group.data = json!({"spec": spec});
            async move { api.create(&PostParams::default(), &group).await.err() }
        })
        .buffer_unordered(64)
        .filter_map(|e| async move { e })
        .collect::<Vec<_>>()
        .await;
    match errors.first() {
        Some(e) => Err(format!("creating {} PodGroups: {e}", resource.api_version)),
        None => Ok(()),
    }
}

/// Removes what a run left besides its pods: volume claims and their PVs, resource claims,
/// PodGroups.
pub async fn delete_run_objects(admin: &Client, w: &Workload, ns: &str) {
    match w.kind {
        Kind::CsiPvs => {
            delete_all(
                Api::<PersistentVolumeClaim>::namespaced(admin.clone(), ns),
                "",
            )
            .await;
            delete_all(
                Api::<PersistentVolume>::all(admin.clone()),
                &format!("bench-run={ns}"),
            )
            .await;
        }
        // Nothing else removes the scheduler's finalizer here: the devices are free for the
        // next contender once the claims are gone.
        Kind::ResourceClaimTemplate => {
            delete_all(Api::<ResourceClaim>::namespaced(admin.clone(), ns), "").await;
        }
        Kind::Gangs(_) => {
            for resource in [coscheduling_groups(), workload_groups()] {
                let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &resource);
                let _ = api
                    .delete_collection(&DeleteParams::default(), &ListParams::default())
                    .await;
            }
        }
        _ => {}
    }
}

/// Deletes the pods of `ns` and waits (up to a minute) until they are gone.
pub async fn delete_pods(admin: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods.delete_collection(&now, &ListParams::default()).await;
    for _ in 0..600 {
        match pods.list(&ListParams::default().limit(1)).await {
            Ok(list) if list.items.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
