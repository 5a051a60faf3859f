//! Leaf clusters on the real control plane (kube-apiserver, kube-controller-manager for the
//! StatefulSet and PV controllers, kwok nodes): seed 000's hybrid scenario under `ksched scheduler`
//! running the seed's configuration verbatim, the same workload under upstream kube-scheduler, and
//! LeafClusterPolicies rendered (by `render_leaf_policies`) into the configuration ksched reads.
//! The tests of this binary run one at a time and remove their nodes when done.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::events::latest_note;
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, kube_scheduler_command};
use support::wait::{node_of, poll, tail};
use support::{Components, ControlPlane, control_plane, path_str};

use ksched::api::LeafClusterPolicy;
use ksched::operator::leaf_render::render_leaf_policies;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONER: &str = "e2e.ksched.io/fake";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// A host node of the test, tainted with `taint` if given.
fn host_node(nodes: &Nodes, suffix: &str, cpu: &str, taint: Option<&str>) -> String {
    let name = nodes.add(suffix, cpu, &[]);
    if let Some(t) = taint {
        nodes.taint(&name, t);
    }
    name
}

/// A leaf node as Kosmos maps a member cluster: labelled `kosmos.io/node=true`, annotated
/// `kosmos-io/owned-by-cluster=<cluster>`, tainted `kosmos.io/node=true:NoSchedule`.
fn leaf_node(nodes: &Nodes, suffix: &str, cpu: &str, cluster: &str) -> String {
    let name = nodes.add(
        suffix,
        cpu,
        &[("kosmos.io/node", "true"), ("leaf.e2e/cluster", cluster)],
    );
    nodes.annotate(&name, &format!("kosmos-io/owned-by-cluster={cluster}"));
    nodes.taint(&name, "kosmos.io/node=true:NoSchedule");
    name
}

fn kubectl(args: &[&str]) {
    cp().kubectl_ok(args);
}

fn apply(obj: &Value) {
    cp().apply(&obj.to_string());
}

/// Upstream kube-scheduler with its default profile (`default-scheduler`); killed when dropped.
fn kube_scheduler(cp: &ControlPlane, name: &str) -> LoggedChild {
    let config = cp.dir.join(format!("{name}-config.yaml"));
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\n",
            path_str(&cp.kubeconfig)
        ),
    )
    .expect("write kube-scheduler config");
    let mut cmd = kube_scheduler_command(cp);
    cmd.args([format!("--config={}", path_str(&config)), "--v=2".into()]);
    LoggedChild::spawn(cmd, cp.dir.join(format!("{name}.log")))
}

/// Plays the external provisioner of `PROVISIONER` and the PV controller's binder (which the test
/// control plane does not run) until dropped: a claim the scheduler's VolumeBinding annotated with
/// a selected node gets a PV on that node, and both are bound to each other.
struct FakeProvisioner {
    task: tokio::task::JoinHandle<()>,
}

impl FakeProvisioner {
    fn start(client: &Client, ns: &str) -> FakeProvisioner {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            loop {
                let list = claims.list(&ListParams::default()).await;
                for pvc in list.map(|l| l.items).unwrap_or_default() {
                    let Some(node) = pvc.annotations().get(SELECTED_NODE).cloned() else {
                        continue;
                    };
                    if pvc
                        .spec
                        .as_ref()
                        .and_then(|s| s.volume_name.as_ref())
                        .is_some()
                    {
                        continue;
                    }
                    let _ = provision(&claims, &pvs, &ns, &pvc, &node).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        FakeProvisioner { task }
    }
}

async fn provision(
    claims: &Api<PersistentVolumeClaim>,
    pvs: &Api<PersistentVolume>,
    ns: &str,
    pvc: &PersistentVolumeClaim,
    node: &str,
) -> Result<(), kube::Error> {
    let name = format!("pv-{}", pvc.uid().unwrap_or_default());
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": format!("/tmp/{name}")},
            "claimRef": {"namespace": ns, "name": pvc.name_any(), "uid": pvc.uid()},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        }
    }))
    .expect("pv literal");
    let _ = pvs.create(&PostParams::default(), &pv).await;
    let pp = PatchParams::default();
    pvs.patch_status(
        &name,
        &pp,
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await?;
    claims
        .patch(
            &pvc.name_any(),
            &pp,
            &Patch::Merge(json!({
                "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": name}
            })),
        )
        .await?;
    claims
        .patch_status(
            &pvc.name_any(),
            &pp,
            &Patch::Merge(
                json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"}}}),
            ),
        )
        .await?;
    Ok(())
}

impl Drop for FakeProvisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn storage_class(name: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer"})
}

/// Seed 000's workload: a 2-replica StatefulSet with required pod anti-affinity on
/// `kubernetes.io/hostname` and a volumeClaimTemplate; each replica needs 3 CPUs.
fn stateful_set(ns: &str, scheduler: &str, class: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "mysql", "namespace": ns},
        "spec": {
            "replicas": 2,
            "serviceName": "mysql",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "mysql"}},
            "template": {
                "metadata": {"labels": {"app": "mysql"}},
                "spec": {
                    "schedulerName": scheduler,
                    "terminationGracePeriodSeconds": 0,
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "mysql"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "containers": [{"name": "mysql", "image": "docker.io/percona:5.7",
                        "resources": {"requests": {"cpu": "3", "memory": "1Gi"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    })
}

/// Polls `f` for up to 90s; fails with the tail of `logs()`.
async fn wait_for<T>(
    what: &str,
    logs: &dyn Fn() -> String,
    f: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll(what, Duration::from_secs(90), || tail(&logs(), 60), f).await
}

async fn claim(client: &Client, ns: &str, name: &str) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get claim")
}

/// The latest FailedScheduling message for the pod.
async fn failed_message(client: &Client, ns: &str, pod: &str) -> Option<String> {
    latest_note(client, ns, "FailedScheduling", pod).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_hybrid_statefulset_uses_a_leaf_node_upstream_leaves_it_pending() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let nodes = Nodes::new(cp, "seed0");
    // One usable host node with room for one replica; the other host node is taken (tainted for
    // another team), so anti-affinity plus capacity need a second node: a leaf node. Of the two
    // leaf nodes only one has room, so exactly one replica goes to a leaf node.
    let host = host_node(&nodes, "host-a", "4", None);
    let _busy = host_node(
        &nodes,
        "host-b",
        "8",
        Some("dedicated=other-team:NoSchedule"),
    );
    let leaf = leaf_node(&nodes, "leaf-1", "4", "cluster1");
    let _small_leaf = leaf_node(&nodes, "leaf-2", "1", "cluster1");
    apply(&storage_class("leaf-wffc"));

    // Seed 000's configuration, verbatim; its lease namespace exists.
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kosmos-system"}})).expect("ns"),
        )
        .await;
    let seed_config = std::fs::read_to_string(
        support::repo_root().join("tests/fixtures/leaf/seed-000-scheduler-config.yaml"),
    )
    .expect("seed 000 config fixture");

    // ksched with seed 000's configuration.
    {
        let ns = cp.namespace(&client, "seed0-ksched").await;
        let _provisioner = FakeProvisioner::start(&client, &ns);
        let sched = SchedulerProcess::start(cp, "seed0-ksched", &seed_config);
        apply(&stateful_set(&ns, "kosmos-scheduler", "leaf-wffc"));
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let logs = || sched.logs();
        let mut placed = BTreeMap::new();
        for name in ["mysql-0", "mysql-1"] {
            let node = wait_for(&format!("{name} bound"), &logs, async || {
                node_of(&pods, name).await
            })
            .await;
            placed.insert(node, name);
        }
        let on_host = placed
            .get(&host)
            .copied()
            .expect("a replica on the host node");
        let on_leaf = placed
            .get(&leaf)
            .copied()
            .expect("a replica on the leaf node");
        // On the host node VolumeBinding selected the node and the (fake) provisioner's PV bound.
        let host_claim = format!("data-{on_host}");
        let bound = wait_for("host claim bound", &logs, async || {
            let c = claim(&client, &ns, &host_claim).await;
            (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
        })
        .await;
        assert_eq!(
            bound.annotations().get(SELECTED_NODE),
            Some(&host),
            "{host_claim}"
        );
        // On the leaf node the claim is left to the leaf cluster: no host-side binding.
        let leaf_claim = claim(&client, &ns, &format!("data-{on_leaf}")).await;
        assert_eq!(leaf_claim.annotations().get(SELECTED_NODE), None);
        assert_eq!(
            leaf_claim.status.and_then(|s| s.phase).as_deref(),
            Some("Pending")
        );
        // Let the replicas go before upstream's turn (their nodes are reused).
        kubectl(&["delete", "statefulset", "mysql", "-n", &ns]);
        kubectl(&[
            "delete",
            "pods",
            "--all",
            "-n",
            &ns,
            "--grace-period=0",
            "--force",
        ]);
        wait_for("replicas gone", &logs, async || {
            pods.list(&ListParams::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
        })
        .await;
    }

    // The same workload under upstream kube-scheduler's default profile.
    let ns = cp.namespace(&client, "seed0-upstream").await;
    let _provisioner = FakeProvisioner::start(&client, &ns);
    let upstream = kube_scheduler(cp, "seed0-kube-scheduler");
    apply(&stateful_set(&ns, "default-scheduler", "leaf-wffc"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let logs = || upstream.logs();
    let (bound, pending) = wait_for(
        "one replica bound, one reported unschedulable",
        &logs,
        async || {
            let mut bound = None;
            let mut pending = None;
            for name in ["mysql-0", "mysql-1"] {
                match node_of(&pods, name).await {
                    Some(n) => bound = Some((name, n)),
                    None => pending = Some((name, failed_message(&client, &ns, name).await?)),
                }
            }
            Some((bound?, pending?))
        },
    )
    .await;
    assert_eq!(
        bound.1, host,
        "upstream puts its one replica on the host node"
    );
    // Upstream names no taint: the host node lacks CPU, the other three (the tainted host node
    // and both leaf nodes) have taints the replica does not tolerate.
    assert!(
        pending.1.starts_with(
            "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) had untolerated taint(s)."
        ),
        "{pending:?}"
    );
    // It stays Pending: nothing else will ever fit.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_of(&pods, pending.0).await, None);
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        assert_ne!(
            p.spec.and_then(|s| s.node_name).as_deref(),
            Some(leaf.as_str())
        );
    }
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

fn policy(name: &str, spec: Value) -> LeafClusterPolicy {
    serde_json::from_value(json!({
        "apiVersion": "ksched.io/v1alpha1", "kind": "LeafClusterPolicy",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("policy literal")
}

/// The configuration the operator renders for profile `name` with `policies`: the profile's
/// entries and args from `render_leaf_policies`, leader election off.
fn rendered_config(name: &str, policies: &[LeafClusterPolicy]) -> String {
    let rendered = render_leaf_policies(name, policies);
    assert!(!rendered.is_empty());
    let mut profile = json!({"schedulerName": name});
    rendered
        .apply_to_profile(&mut profile)
        .expect("the policies apply");
    json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": false},
        "profiles": [profile]
    })
    .to_string()
}

fn small_pod(
    name: &str,
    scheduler: &str,
    placement: Option<&str>,
    cpu: &str,
    claim: Option<&str>,
) -> Pod {
    let labels: Vec<(&str, &str)> = placement.map(|p| ("placement", p)).into_iter().collect();
    let extra = match claim {
        Some(c) => {
            json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": c}}]})
        }
        None => json!({}),
    };
    pause_pod(name, scheduler, cpu, &labels, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_cluster_policies_rendered_into_the_scheduler_config() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let nodes = Nodes::new(cp, "lcp");
    let hosts = [
        host_node(&nodes, "host-1", "4", None),
        host_node(&nodes, "host-2", "4", None),
    ];
    // Leaf nodes are bigger: without a preference the scorers would pick them first.
    let leaf_x = leaf_node(&nodes, "leaf-x", "16", "x");
    let leaf_y = leaf_node(&nodes, "leaf-y", "16", "y");
    let leaves = [leaf_x.clone(), leaf_y.clone()];
    apply(&storage_class("leaf-wffc-lcp"));

    let scheduler = "leaf-policies";
    let by = |mode: &str| json!({"matchLabels": {"placement": mode}});
    let policies = [
        policy(
            "prefer-host",
            json!({"profiles": [scheduler],
            "placement": {"mode": "PreferHost", "weight": 100, "podSelector": by("prefer-host")}}),
        ),
        policy(
            "host-only",
            json!({"profiles": [scheduler],
            "placement": {"mode": "HostOnly", "podSelector": by("host-only")}}),
        ),
        policy(
            "leaf-only",
            json!({"profiles": ["*"],
            "placement": {"mode": "LeafOnly", "podSelector": by("leaf-only")}}),
        ),
        policy(
            "mix",
            json!({"profiles": [scheduler],
            "placement": {"mode": "Mix", "podSelector": by("mix")}}),
        ),
        policy(
            "elsewhere",
            json!({"profiles": ["another-profile"],
            "placement": {"mode": "LeafOnly"}}),
        ),
    ];
    let sched = SchedulerProcess::start(cp, "lcp", &rendered_config(scheduler, &policies));
    let logs = || sched.logs();
    let ns = cp.namespace(&client, "lcp").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let create = async |pod: Pod| {
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    };
    let bound = async |name: &str| {
        wait_for(&format!("{name} bound"), &logs, async || {
            node_of(&pods, name).await
        })
        .await
    };

    // PreferHost fills the host nodes (2 pods of 2 CPUs each) before using a leaf node.
    for i in 0..5 {
        let name = format!("prefer-host-{i}");
        create(small_pod(&name, scheduler, Some("prefer-host"), "2", None)).await;
        let node = bound(&name).await;
        if i < 4 {
            assert!(hosts.contains(&node), "{name} on {node}, hosts have room");
        } else {
            assert!(leaves.contains(&node), "{name} on {node}, hosts are full");
        }
    }
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .expect("delete pods");
    wait_for("pods gone", &logs, async || {
        pods.list(&ListParams::default())
            .await
            .ok()
            .filter(|l| l.items.is_empty())
    })
    .await;

    // HostOnly never uses leaf nodes: 6 CPUs fit only a leaf node, so the pod stays Pending; a pod
    // outside every policy's selectors behaves the same; small ones of both land on host nodes.
    for (name, placement) in [
        ("host-only-big", Some("host-only")),
        ("no-policy-big", None),
    ] {
        create(small_pod(name, scheduler, placement, "6", None)).await;
        let msg = wait_for(&format!("{name} FailedScheduling"), &logs, async || {
            failed_message(&client, &ns, name).await
        })
        .await;
        assert!(
            msg.starts_with(
                "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s)."
            ),
            "{name}: {msg}"
        );
        assert_eq!(node_of(&pods, name).await, None);
    }
    for (name, placement) in [
        ("host-only-small", Some("host-only")),
        ("no-policy-small", None),
    ] {
        create(small_pod(name, scheduler, placement, "1", None)).await;
        let node = bound(name).await;
        assert!(hosts.contains(&node), "{name} on {node}");
    }

    // LeafOnly: only leaf nodes, even with room on the host nodes.
    for i in 0..2 {
        let name = format!("leaf-only-{i}");
        create(small_pod(&name, scheduler, Some("leaf-only"), "1", None)).await;
        let node = bound(&name).await;
        assert!(leaves.contains(&node), "{name} on {node}");
    }

    // A claim owned by leaf cluster X pins its pod to X's leaf node (the pod itself may go
    // anywhere: Mix); the claim is left for the leaf cluster to provision.
    for (i, (cluster, node)) in [("x", &leaf_x), ("y", &leaf_y), ("x", &leaf_x)]
        .into_iter()
        .enumerate()
    {
        let claim_name = format!("owned-{cluster}-{i}");
        apply(&json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name, "namespace": ns,
                "annotations": {"kosmos-io/cluster-owners": cluster}},
            "spec": {"storageClassName": "leaf-wffc-lcp", "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}));
        let name = format!("with-{claim_name}");
        create(small_pod(
            &name,
            scheduler,
            Some("mix"),
            "100m",
            Some(&claim_name),
        ))
        .await;
        assert_eq!(&bound(&name).await, node, "{name}");
        let c = claim(&client, &ns, &claim_name).await;
        assert_eq!(c.annotations().get(SELECTED_NODE), None);
    }
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
