//! VolumeBinding on the real control plane: `ksched scheduler` (default plugins) with kwok nodes.
//! No PV controller runs here, so the tests play the external provisioner and the PV binder
//! themselves: they create the PV the scheduler's choice asks for and bind it to the claim.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config};
use support::wait::{node_of, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// `count` Ready kwok nodes `<test>-<i>` (deleted when the `Nodes` is dropped) and their names.
fn kwok_nodes(test: &str, count: usize) -> (Nodes, Vec<String>) {
    let nodes = Nodes::new(cp(), test);
    let names = (0..count)
        .map(|i| nodes.create(&i.to_string(), "8", &[]))
        .collect();
    nodes.wait_ready();
    (nodes, names)
}

fn object<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("object literal")
}

/// A pod of `scheduler` using the claims, kept on the test's nodes.
fn pod(name: &str, scheduler: &str, test: &str, claims: &[&str]) -> Pod {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    object(json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"ksched.io/e2e": test},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": volumes,
        }
    }))
}

fn claim(
    name: &str,
    class: &str,
    extra_meta: Value,
    volume_name: Option<&str>,
) -> PersistentVolumeClaim {
    let mut spec = json!({
        "storageClassName": class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    });
    if let Some(v) = volume_name {
        spec["volumeName"] = json!(v);
    }
    let mut meta = json!({"name": name});
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        m.extend(extra.clone());
    }
    object(json!({"metadata": meta, "spec": spec}))
}

/// A local PV on `node` bound to the claim `ns/claim` (uid).
fn local_pv(
    name: &str,
    class: &str,
    node: &str,
    ns: &str,
    claim: &str,
    uid: &str,
) -> PersistentVolume {
    object(json!({
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": "ksched.io/e2e-provisioner"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class,
            "local": {"path": "/mnt/e2e"},
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": claim, "uid": uid},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
            ]}},
        }
    }))
}

/// What the PV controller does once a PV names the claim: the claim gets the volume name and the
/// bind-completed annotation, both objects become Bound.
async fn bind_claim(client: &Client, ns: &str, claim: &str, pv: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    claims
        .patch(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                }},
                "spec": {"volumeName": pv},
            })),
        )
        .await
        .expect("bind claim");
    claims
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
            }})),
        )
        .await
        .expect("claim status");
    pvs.patch_status(
        pv,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await
    .expect("pv status");
}

/// Polls `probe` for up to 90s; fails with the scheduler's log.
async fn wait_for<T>(
    what: &str,
    sched: &SchedulerProcess,
    probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll(what, Duration::from_secs(90), || sched.logs(), probe).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_claim_gets_a_node_and_its_pod_binds_once_provisioned() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "wffc").await;
    let (_nodes, names) = kwok_nodes("wffc", 2);
    let scheduler = "ksched-wffc";
    let sched = SchedulerProcess::start(cp, "wffc", &config(scheduler, None));

    let class = format!("{ns}-wffc");
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": class},
                "provisioner": "ksched.io/e2e-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            })),
        )
        .await
        .expect("storage class");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    claims
        .create(
            &PostParams::default(),
            &claim("data", &class, json!({}), None),
        )
        .await
        .expect("claim");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &pod("app", scheduler, "wffc", &["data"]),
    )
    .await
    .expect("pod");

    // The scheduler picks a node in its cycle and, in PreBind, annotates the claim with it.
    let selected = wait_for("the selected-node annotation", &sched, async || {
        let c = claims.get("data").await.ok()?;
        c.metadata.annotations?.get(SELECTED_NODE).cloned()
    })
    .await;
    assert!(names.contains(&selected), "{selected} is not a test node");
    // PreBind waits for the claim to bind: the pod is not bound yet.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node_of(&pods, "app").await, None);

    // Play the provisioner (a PV on the selected node for this claim) and the PV binder.
    let uid = claims
        .get("data")
        .await
        .expect("claim")
        .metadata
        .uid
        .expect("uid");
    let pv_name = format!("{ns}-data");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(
        &PostParams::default(),
        &local_pv(&pv_name, &class, &selected, &ns, "data", &uid),
    )
    .await
    .expect("pv");
    bind_claim(&client, &ns, "data", &pv_name).await;

    let bound = wait_for("the pod's binding", &sched, async || {
        node_of(&pods, "app").await
    })
    .await;
    assert_eq!(bound, selected);

    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_claim_pins_its_pods_to_the_node_of_its_volume() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "pinned").await;
    let (_nodes, names) = kwok_nodes("pinned", 3);
    let scheduler = "ksched-pinned";
    let sched = SchedulerProcess::start(cp, "pinned", &config(scheduler, None));
    let target = names[1].clone();

    // A claim already bound (by volumeName and the bind-completed annotation) to a local PV on
    // one node; no class, so no provisioning is involved.
    let pv_name = format!("{ns}-pinned");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let created = claims
        .create(
            &PostParams::default(),
            &claim(
                "pinned",
                "",
                json!({"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}),
                Some(&pv_name),
            ),
        )
        .await
        .expect("claim");
    let uid = created.metadata.uid.expect("uid");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(
        &PostParams::default(),
        &local_pv(&pv_name, "", &target, &ns, "pinned", &uid),
    )
    .await
    .expect("pv");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let names = ["a", "b", "c"];
    for name in names {
        pods.create(
            &PostParams::default(),
            &pod(name, scheduler, "pinned", &["pinned"]),
        )
        .await
        .expect("pod");
    }
    for name in names {
        let node = wait_for("the pod's binding", &sched, async || {
            node_of(&pods, name).await
        })
        .await;
        assert_eq!(node, target, "pod {name}");
    }

    // A claim bound to a PV on no test node: the pod stays Pending with VolumeBinding's reason.
    let other_pv = format!("{ns}-elsewhere");
    let created = claims
        .create(
            &PostParams::default(),
            &claim(
                "elsewhere",
                "",
                json!({"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}),
                Some(&other_pv),
            ),
        )
        .await
        .expect("claim");
    let uid = created.metadata.uid.expect("uid");
    pvs.create(
        &PostParams::default(),
        &local_pv(&other_pv, "", "no-such-node", &ns, "elsewhere", &uid),
    )
    .await
    .expect("pv");
    pods.create(
        &PostParams::default(),
        &pod("stuck", scheduler, "pinned", &["elsewhere"]),
    )
    .await
    .expect("pod");
    let message = wait_for("the PodScheduled=False condition", &sched, async || {
        unschedulable_message(&pods.get("stuck").await.ok()?)
    })
    .await;
    assert!(
        message.contains("3 node(s) didn't match PersistentVolume's node affinity"),
        "{message}"
    );
    assert_eq!(node_of(&pods, "stuck").await, None);

    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    let _ = pvs.delete(&other_pv, &DeleteParams::default()).await;
}
