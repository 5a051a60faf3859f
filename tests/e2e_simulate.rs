//! `ksched simulate` against the real control plane: its placements agree with what `ksched
//! scheduler` then does on the same state; it reads the cluster as an identity that may only
//! read; snapshots (saved by simulate, or printed by kubectl) give the same answers as the live
//! cluster; `--explain` gives every plugin's verdict; bad snapshots are refused with a clear error.
//! The tests that create nodes run one at a time (a live read sees every node).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config, ksched_bin};
use support::wait::{create, node, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane, path_str};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The identity the live reads run as: get/list/watch on everything, nothing else.
const READER: &str = "ksched-simulate-reader";

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// `ksched simulate ARGS`: exit code, stdout, stderr.
fn simulate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(ksched_bin())
        .arg("simulate")
        .args(args)
        .output()
        .expect("run ksched simulate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ksched simulate ARGS -o json`, which must succeed: the report.
fn simulate_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = simulate(&all);
    assert_eq!(code, 0, "ksched simulate {all:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("report is not JSON ({e}): {out}"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

/// A kubeconfig acting as [`READER`], who may only get, list and watch (made so once).
fn reader_kubeconfig(cp: &ControlPlane) -> PathBuf {
    cp.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {READER}}}
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {READER}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {READER}}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {READER}}}
"#
    ));
    let admin = std::fs::read_to_string(&cp.kubeconfig).expect("read kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&admin).expect("kubeconfig YAML");
    for user in kc["users"].as_array_mut().expect("users") {
        user["user"]["as"] = json!(READER);
    }
    let path = cp.dir.join("simulate-reader.kubeconfig");
    std::fs::write(&path, kc.to_string()).expect("write kubeconfig");
    // The identity really cannot write.
    let (ok, _, err) = cp.kubectl_run(&[
        "--kubeconfig",
        path_str(&path),
        "create",
        "namespace",
        "simulate-write-probe",
    ]);
    assert!(!ok && err.contains("forbidden"), "{err}");
    path
}

/// `name -> (result, node, message)` of a report's pods in namespace `ns`.
fn outcomes(report: &Value, ns: &str) -> BTreeMap<String, (String, Option<String>, String)> {
    report["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter(|p| p["namespace"] == ns)
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                (
                    p["result"].as_str().expect("result").to_string(),
                    p["node"].as_str().map(String::from),
                    p["message"].as_str().expect("message").to_string(),
                ),
            )
        })
        .collect()
}

fn pc(cp: &ControlPlane, name: &str, value: i32) {
    cp.apply(&format!(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\n"
    ));
}

fn hostname_in(nodes: &[&str]) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}})
}

fn prefers(node: &str) -> Value {
    json!([{"weight": 100, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}])
}

/// `affinity` that requires `required` hostnames and prefers `preferred` (weight 100).
fn placement(required: &[&str], preferred: Option<&str>) -> Value {
    let mut a = hostname_in(required);
    if let Some(p) = preferred {
        a["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = prefers(p);
    }
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_agree_with_the_scheduler() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "agree").await;
    let reader = reader_kubeconfig(cp);
    let nodes = Nodes::new(cp, "agree").waiting_on_drop();
    let a = nodes.add("a", "4", &[("topology.kubernetes.io/zone", "z1")]);
    let b = nodes.add("b", "2", &[("topology.kubernetes.io/zone", "z1")]);
    let c = nodes.add("c", "8", &[("topology.kubernetes.io/zone", "z2")]);
    nodes.taint(&c, "dedicated=gpu:NoSchedule");
    let e = nodes.add("e", "2", &[("topology.kubernetes.io/zone", "z3")]);
    let f = nodes.add(
        "f",
        "6",
        &[("topology.kubernetes.io/zone", "z2"), ("disk", "ssd")],
    );
    for (name, value) in [
        ("sim-p40", 40),
        ("sim-p30", 30),
        ("sim-p20", 20),
        ("sim-p10", 10),
    ] {
        pc(cp, name, value);
    }
    let sched = "ksched-agree";
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p = |name: &str, cpu: &str, labels: &[(&str, &str)], extra: Value| {
        pause_pod(name, sched, cpu, labels, extra)
    };
    // Already running, placed by no scheduler.
    create(
        &pods,
        &p("db", "1", &[("app", "db")], json!({"nodeName": f})),
    )
    .await;
    // A pod that stays pending keeps its first message when the scheduler retries it later: the
    // pods that end up on a and b are not preemption victims of fill-4 (priority 10 or more), and
    // the pods that fail at priority 0 have no victims at all.
    let mut pending = vec![
        // NodeAffinity (nodeSelector).
        p(
            "pin-a",
            "500m",
            &[],
            json!({"nodeSelector": {"kubernetes.io/hostname": a}, "priorityClassName": "sim-p10"}),
        ),
        p(
            "pin-b",
            "500m",
            &[],
            json!({"nodeSelector": {"kubernetes.io/hostname": b}, "priorityClassName": "sim-p10"}),
        ),
        p(
            "pin-e",
            "500m",
            &[],
            json!({"nodeSelector": {"kubernetes.io/hostname": e}}),
        ),
        // TaintToleration, with a preference for the tainted node; and without the toleration.
        p(
            "gpu-1",
            "1",
            &[],
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                   "affinity": placement(&[&c, &a], Some(&c))}),
        ),
        p(
            "gpu-2",
            "1",
            &[],
            json!({"affinity": placement(&[&c], None)}),
        ),
        // NodeResourcesFit with assumed pods: in priority order, two fit the preferred node, the
        // third only the other one, the fourth nowhere.
        p("big", "7", &[], json!({})),
        // NodePorts.
        p(
            "port-1",
            "100m",
            &[],
            json!({"affinity": placement(&[&f], None), "containers": [{"name": "c", "image": support::fixtures::PAUSE_IMAGE,
                "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}),
        ),
        p(
            "port-2",
            "100m",
            &[],
            json!({"affinity": placement(&[&f], None), "containers": [{"name": "c", "image": support::fixtures::PAUSE_IMAGE,
                "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}),
        ),
    ];
    for (i, prio) in ["sim-p40", "sim-p30", "sim-p20", "sim-p10"]
        .iter()
        .enumerate()
    {
        pending.push(p(
            &format!("fill-{}", i + 1),
            "1500m",
            &[],
            json!({"priorityClassName": prio, "affinity": placement(&[&a, &b], Some(&a))}),
        ));
    }
    for i in 1..=4 {
        // NodeAffinity on a label, and the zone's untolerated node.
        pending.push(p(
            &format!("ssd-{i}"),
            "500m",
            &[],
            json!({"nodeSelector": {"disk": "ssd"}}),
        ));
        pending.push(p(
            &format!("zone-{i}"),
            "100m",
            &[],
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "z2"}}),
        ));
    }
    for i in 1..=3 {
        // InterPodAffinity: one per zone, among two zones.
        let mut affinity = placement(&[&f, &e], Some(&e));
        affinity["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "topology.kubernetes.io/zone"}]});
        pending.push(p(
            &format!("anti-{i}"),
            "200m",
            &[("app", "anti")],
            json!({"affinity": affinity}),
        ));
    }
    for i in 1..=2 {
        // PodTopologySpread (DoNotSchedule) between a full node and a free one.
        pending.push(p(
            &format!("spread-{i}"),
            "100m",
            &[("app", "spread")],
            json!({"affinity": placement(&[&b, &e], None),
                   "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                       "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]}),
        ));
        // InterPodAffinity: next to the running db.
        let affinity = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        pending.push(p(
            &format!("near-db-{i}"),
            "100m",
            &[],
            json!({"affinity": affinity}),
        ));
    }
    // InterPodAffinity to a pod later in the queue: popped first, rejected, placed next to its
    // target on a retry (the scheduler's when the target binds; simulate's after the others).
    let after_target = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "late"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    pending.push(p(
        "follow-late",
        "100m",
        &[],
        json!({"affinity": after_target, "priorityClassName": "sim-p40"}),
    ));
    pending.push(p(
        "late",
        "100m",
        &[("app", "late")],
        json!({"nodeSelector": {"kubernetes.io/hostname": f}}),
    ));
    // DynamicResources: one device, on e (as a driver would publish it); two pods with a claim
    // each, the second finds the device taken by the first's (assumed) allocation. The message
    // of a pod that stays pending must not change when the scheduler retries it later.
    let driver = "gpu.simulate.ksched.io";
    cp.apply(&format!(
        r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {sched}-gpu}}
spec:
  selectors: [{{cel: {{expression: 'device.driver == "{driver}"'}}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {e}-gpu}}
spec:
  driver: {driver}
  nodeName: {e}
  pool: {{name: {e}, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu-0}}]
"#
    ));
    for i in 1..=2 {
        cp.apply(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: gpu-{i}, namespace: {ns}}}\nspec:\n  devices:\n    requests: [{{name: gpu, exactly: {{deviceClassName: {sched}-gpu}}}}]\n"
        ));
        pending.push(p(
            &format!("dra-{i}"),
            "100m",
            &[],
            // Kept to e: elsewhere NodeAffinity rejects it whenever the scheduler retries.
            json!({"affinity": placement(&[&e], None),
                   "resourceClaims": [{"name": "gpu", "resourceClaimName": format!("gpu-{i}")}]}),
        ));
    }
    for pod in &pending {
        create(&pods, pod).await;
    }
    assert!(pending.len() >= 25);

    let config_yaml = config(sched, None);
    let config_file = write(&cp.dir, "agree-config.yaml", &config_yaml);
    let report = simulate_json(&[
        "--kubeconfig",
        path_str(&reader),
        "--profile",
        path_str(&config_file),
    ]);
    let want = outcomes(&report, &ns);
    assert_eq!(want.len(), pending.len(), "{report:#}");
    // The design of the pods, as simulate sees it.
    let on = |name: &str| want[name].1.clone();
    assert_eq!(on("fill-1").as_deref(), Some(a.as_str()));
    assert_eq!(on("fill-2").as_deref(), Some(a.as_str()));
    assert_eq!(on("fill-3").as_deref(), Some(b.as_str()));
    assert_eq!(want["fill-4"].0, "Unschedulable");
    assert_eq!(want["gpu-1"].1.as_deref(), Some(c.as_str()));
    assert_eq!(want["gpu-2"].0, "Unschedulable");
    assert_eq!(want["port-2"].0, "Unschedulable");
    assert_eq!(want["anti-3"].0, "Unschedulable");
    assert_eq!(want["spread-2"].0, "Unschedulable");
    assert_eq!(on("near-db-1").as_deref(), Some(f.as_str()));
    assert_eq!(
        on("follow-late").as_deref(),
        Some(f.as_str()),
        "placed on a retry"
    );
    assert_eq!(on("dra-1").as_deref(), Some(e.as_str()));
    assert_eq!(want["dra-2"].0, "Unschedulable");
    // Nothing was written: every pod is still pending, and no event was made.
    let listed = pods.list(&ListParams::default()).await.expect("list pods");
    assert!(
        listed
            .items
            .iter()
            .filter(|p| p.metadata.name.as_deref() != Some("db"))
            .all(|p| node(p).is_none())
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    assert!(
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .is_empty()
    );

    let allocated = |claim: &str| {
        cp.kubectl_ok(&[
            "get",
            "resourceclaim",
            claim,
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.allocation.devices.results[0].device}",
        ])
    };
    assert_eq!(allocated("gpu-1"), "", "simulate allocated nothing");

    // Now the scheduler, on the same state.
    let scheduler = SchedulerProcess::start(cp, "agree", &config_yaml);
    for (name, (result, node_name, message)) in &want {
        let logs = || scheduler.logs();
        let got = poll(
            &format!("pod {name}: {result} {node_name:?} {message}"),
            Duration::from_secs(90),
            logs,
            async || {
                let pod = pods.get(name).await.ok()?;
                match (node(&pod), unschedulable_message(&pod)) {
                    (Some(n), _) => Some((Some(n), String::new())),
                    (None, Some(m)) if result != "Scheduled" && &m == message => Some((None, m)),
                    _ => None,
                }
            },
        )
        .await;
        assert_eq!(&got.0, node_name, "pod {name}");
    }
    // The scheduler has settled: what stayed pending still does, with simulate's message.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, (result, node_name, message)) in &want {
        let pod = pods.get(name).await.expect("pod");
        assert_eq!(&node(&pod), node_name, "pod {name}");
        if result != "Scheduled" {
            assert_eq!(
                unschedulable_message(&pod).as_ref(),
                Some(message),
                "pod {name}"
            );
        }
    }
    // The scheduler allocated what simulate only assumed.
    assert_eq!(allocated("gpu-1"), "gpu-0");
    drop(scheduler);
    cp.kubectl_ok(&[
        "delete",
        "resourceslice",
        &format!("{e}-gpu"),
        "--wait=false",
    ]);
    cp.kubectl_ok(&[
        "delete",
        "deviceclass",
        &format!("{sched}-gpu"),
        "--wait=false",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_give_the_live_answer_and_explain_names_each_plugin() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "snap").await;
    let reader = reader_kubeconfig(cp);
    let nodes = Nodes::new(cp, "snap").waiting_on_drop();
    let small = nodes.add("small", "1", &[]);
    let big = nodes.add("big", "8", &[]);
    let tainted = nodes.add("tainted", "8", &[]);
    nodes.taint(&tainted, "dedicated=gpu:NoSchedule");
    let sched = "ksched-snap";
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(
        &pods,
        &pause_pod("running", sched, "2", &[], json!({"nodeName": big})),
    )
    .await;
    for (name, cpu) in [("web", "2"), ("huge", "20")] {
        create(&pods, &pause_pod(name, sched, cpu, &[], json!({}))).await;
    }
    cp.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n  storageClassName: none-such\n"
    ));
    create(
        &pods,
        &pause_pod(
            "claims",
            sched,
            "100m",
            &[],
            json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}),
        ),
    )
    .await;
    let config_file = write(&cp.dir, "snap-config.yaml", &config(sched, None));
    let profile = ["--profile", path_str(&config_file)];

    let live = simulate_json(&[&["--kubeconfig", path_str(&reader)][..], &profile].concat());
    let want = outcomes(&live, &ns);
    assert_eq!(want["web"].1.as_deref(), Some(big.as_str()));
    assert_eq!(want["huge"].0, "Unschedulable");
    // The claim's class does not exist, so it binds immediately (upstream's IsDelayBindingMode)
    // and nothing binds it: VolumeBinding waits, as the scheduler would.
    assert_eq!(want["claims"].0, "Unschedulable", "{:?}", want["claims"]);
    assert!(
        want["claims"].2.starts_with(
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        ),
        "{:?}",
        want["claims"]
    );

    // Saved by simulate, then read back.
    let saved = cp.dir.join("snap-saved.yaml");
    let (code, _, err) = simulate(&[
        "--kubeconfig",
        path_str(&reader),
        "--save-snapshot",
        path_str(&saved),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote"), "{err}");
    let from_saved = simulate_json(&[&["--snapshot", path_str(&saved)][..], &profile].concat());
    assert_eq!(outcomes(&from_saved, &ns), want);
    // Printed by kubectl as the documentation says.
    let printed = cp.kubectl_ok(&[
        "get",
        "nodes,pods,pv,pvc,storageclasses,csinodes,pdb,priorityclasses,podgroups,resourceclaims,resourceslices,deviceclasses",
        "-A",
        "-o",
        "yaml",
    ]);
    let kubectl_file = write(&cp.dir, "snap-kubectl.yaml", &printed);
    let from_kubectl =
        simulate_json(&[&["--snapshot", path_str(&kubectl_file)][..], &profile].concat());
    assert_eq!(outcomes(&from_kubectl, &ns), want);
    assert_eq!(from_kubectl["nodes"], live["nodes"]);

    // --explain: every plugin's verdict per node.
    let explained = simulate_json(
        &[
            &["--snapshot", path_str(&saved), "--explain"][..],
            &[format!("{ns}/web").as_str()],
            &profile,
        ]
        .concat(),
    );
    let e = &explained["explain"];
    assert_eq!(e["pod"], format!("{ns}/web"));
    let node_of = |name: &str| {
        e["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["node"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("node {name} in {e:#}"))
    };
    let filter = |n: &Value, plugin: &str| {
        n["filters"]
            .as_array()
            .expect("filters")
            .iter()
            .find(|f| f["plugin"] == plugin)
            .cloned()
            .unwrap_or_else(|| panic!("{plugin} in {n:#}"))
    };
    let s = node_of(&small);
    assert_eq!(s["feasible"], false);
    assert_eq!(
        filter(&s, "NodeResourcesFit")["reasons"],
        json!(["Insufficient cpu"])
    );
    let t = node_of(&tainted);
    assert_eq!(
        filter(&t, "TaintToleration")["code"],
        "UnschedulableAndUnresolvable"
    );
    assert_eq!(filter(&t, "NodeResourcesFit")["code"], "Success");
    let b = node_of(&big);
    assert_eq!(b["feasible"], true);
    assert!(b["totalScore"].as_i64().is_some_and(|t| t > 0), "{b:#}");
    assert!(
        b["scores"]
            .as_array()
            .expect("scores")
            .iter()
            .any(|s| s["plugin"] == "NodeResourcesFit"),
        "{b:#}"
    );
    let only = simulate_json(
        &[
            &["--snapshot", path_str(&saved), "--explain"][..],
            &[format!("{ns}/web").as_str(), "--node", small.as_str()],
            &profile,
        ]
        .concat(),
    );
    assert_eq!(only["explain"]["nodes"].as_array().map(Vec::len), Some(1));

    // --fail-on-pending: huge would stay Pending.
    let (code, out, err) = simulate(
        &[
            &["--snapshot", path_str(&saved), "--fail-on-pending"][..],
            &profile,
        ]
        .concat(),
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("Unschedulable"), "{out}");
}

#[test]
fn bad_snapshots_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refuse = |name: &str, text: &str, expect: &[&str]| {
        let path = write(dir.path(), name, text);
        let (code, out, err) = simulate(&["--snapshot", path_str(&path)]);
        assert_eq!(code, 1, "{name}: {out}{err}");
        assert!(out.is_empty(), "{name}: {out}");
        for e in expect {
            assert!(err.contains(e), "{name}: {e:?} not in:\n{err}");
        }
    };
    refuse(
        "garbage.yaml",
        "{{{ not yaml ::",
        &["the snapshot cannot be used", "garbage.yaml: not valid"],
    );
    refuse("binary.yaml", "\u{0}\u{1}", &["binary.yaml"]);
    refuse(
        "version.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n- apiVersion: policy/v1beta1\n  kind: PodDisruptionBudget\n  metadata: {name: b, namespace: x}\n",
        &[
            "item 2 (PodDisruptionBudget x/b): apiVersion \"policy/v1beta1\" of kind PodDisruptionBudget is not supported",
        ],
    );
    refuse(
        "kind.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: x}\n",
        &["kind \"Deployment\" is not part of a snapshot"],
    );
    refuse(
        "nokind.yaml",
        "apiVersion: v1\nmetadata: {name: n}\n",
        &["(n): no kind"],
    );
    // Pods use claims, but the snapshot was taken without PersistentVolumeClaims.
    refuse(
        "missing.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nspec:\n  containers: [{name: c, image: i}]\n  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]\n",
        &[
            "the snapshot is incomplete",
            "no PersistentVolumeClaim, but pod x/p uses a claim",
            "`pvc`",
        ],
    );
    refuse(
        "nodes.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nspec: {containers: []}\n",
        &["the snapshot has no Node"],
    );
    let (code, _, err) = simulate(&["--snapshot", "/nonexistent/snap.yaml"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/snap.yaml"), "{err}");
    // A bad profile is refused before anything is read.
    let profile = write(
        dir.path(),
        "profile.yaml",
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: p}\nspec:\n  plugins:\n    score:\n      enabled: [{name: NoSuchPlugin}]\n",
    );
    let (code, _, err) = simulate(&[
        "--snapshot",
        "/nonexistent",
        "--profile",
        path_str(&profile),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("spec.plugins.score.enabled[0]"), "{err}");
}
