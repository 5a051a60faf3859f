//! `make demo`: the main job, on a local control plane (etcd, kube-apiserver,
//! kube-controller-manager, kwok, and upstream kube-scheduler as the cluster's default scheduler):
//! two host nodes and two leaf-cluster nodes (Kosmos-style virtual nodes), ksched's CRDs and sample
//! profiles, the operator running with the `hybrid` profile in Embedded mode, and a Deployment that
//! the hybrid scheduler places across host and leaf nodes. The other sample profiles run in
//! Deployment mode: their scheduler pods run for real under podman, with the image `make image`
//! built (`KSCHED_DEMO_IMAGE`, its OCI archive), on the test support's podman node (a stand-in
//! for a kubelet, tests/support/podman_node.rs), so every profile shows Ready with its leader.
//! Prints `kubectl get sp,lcp` and the pods, then exits cleanly; with DEMO_KEEP=1 it keeps
//! running until Ctrl-C and prints the KUBECONFIG.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ksched::framework::registry::Registry;
use ksched::operator::in_process::InProcessSchedulers;
use ksched::operator::{OperatorOptions, run as run_operator};
use support::podman_node::{self, PodmanNode};
use support::process::LoggedChild;
use support::scheduler::kube_scheduler_command;
use support::{Components, ControlPlane, control_plane_with_apiserver_args, fixtures::kwok_node};

const NAMESPACE: &str = "ksched-system";
/// The image the operator renders into the Deployments, as `make demo` builds it.
const IMAGE: &str = "ksched:demo";

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let (ok, out, err) = cp.kubectl_run(args);
    if !ok {
        eprintln!("kubectl {}: {err}", args.join(" "));
        std::process::exit(1);
    }
    out
}

fn apply(cp: &ControlPlane, yaml: &str) {
    let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], yaml);
    if !ok {
        eprintln!("kubectl apply: {err}");
        std::process::exit(1);
    }
}

/// Upstream kube-scheduler as the cluster's default scheduler (for the sample profiles' own
/// Deployments, as in a real cluster). Killed with the demo, however the demo ends.
fn default_scheduler(cp: &ControlPlane) -> LoggedChild {
    LoggedChild::spawn(
        kube_scheduler_command(cp),
        cp.dir.join("kube-scheduler.log"),
    )
}

const WORKLOAD: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 6
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web, placement: leaf-ok}
    spec:
      schedulerName: hybrid
      terminationGracePeriodSeconds: 0
      containers:
      - name: web
        image: registry.k8s.io/pause:3.10.2
        resources:
          requests: {cpu: 1500m, memory: 1Gi}
"#;

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            eprintln!("timed out waiting for {what}");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn main() {
    let Some(image) = std::env::var_os("KSCHED_DEMO_IMAGE").map(std::path::PathBuf::from) else {
        eprintln!("KSCHED_DEMO_IMAGE is not set: run `make demo`, which builds the image first");
        std::process::exit(2);
    };
    // The samples include a PodGroup (gang.yaml, topology.yaml): the API server serves 1.37's
    // workload API, as the README asks of a cluster for them.
    let cp = control_plane_with_apiserver_args(Components::FULL, support::WORKLOAD_API_ARGS);
    let mut scheduler = default_scheduler(cp);
    println!("control plane up; KUBECONFIG={}", cp.kubeconfig.display());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let podman_node = runtime.block_on(async {
        PodmanNode::start(cp, cp.client().await, "podman-node", &[image.as_path()]).await
    });
    let podman_node = match podman_node {
        Ok(node) => node,
        Err(err) => {
            eprintln!("the podman node cannot run: {err}");
            std::process::exit(1);
        }
    };

    for i in 1..=2 {
        // A zone each, so the topology-aware sample gang (topology.yaml) has domains to land in.
        let zone = format!("demo-zone-{i}");
        apply(
            cp,
            &kwok_node(
                &format!("host-{i}"),
                "4",
                "16Gi",
                &[("topology.kubernetes.io/zone", &zone)],
            ),
        );
        apply(
            cp,
            &kwok_node(
                &format!("leaf-member-{i}"),
                "8",
                "32Gi",
                &[("kosmos.io/node", "true")],
            ),
        );
        kubectl(
            cp,
            &[
                "annotate",
                "node",
                &format!("leaf-member-{i}"),
                &format!("kosmos-io/owned-by-cluster=member-{i}"),
                "--overwrite",
            ],
        );
    }
    kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            "node",
            "--all",
        ],
    );
    kubectl(cp, &["create", "namespace", NAMESPACE]);
    kubectl(cp, &["create", "namespace", "demo"]);
    kubectl(
        cp,
        &[
            "apply",
            "-f",
            support::path_str(&support::repo_root().join("manifests/samples")),
        ],
    );
    // The Deployment-mode profiles' scheduler pods go to the podman node, where they really run.
    let (node_selector, tolerations) = podman_node::placement();
    let placement =
        serde_json::json!({"spec": {"nodeSelector": node_selector, "tolerations": tolerations}});
    for profile in kubectl(
        cp,
        &[
            "get",
            "sp",
            "-o",
            "jsonpath={range .items[?(@.spec.mode!=\"Embedded\")]}{.metadata.name} {end}",
        ],
    )
    .split_whitespace()
    {
        kubectl(
            cp,
            &[
                "patch",
                "sp",
                profile,
                "--type=merge",
                "-p",
                &placement.to_string(),
            ],
        );
    }

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = runtime.spawn(async move {
        let client = cp.client().await;
        let registry = Arc::new(Registry::in_tree());
        let mut opts = OperatorOptions::new(NAMESPACE, IMAGE, registry.clone());
        opts.instance = "demo-operator".into();
        let embedded = Arc::new(InProcessSchedulers::new(
            client.clone(),
            registry,
            "demo-operator",
        ));
        if let Err(err) = run_operator(client, opts, embedded, async move {
            let _ = stop_rx.await;
        })
        .await
        {
            eprintln!("operator: {err}");
        }
    });

    kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Ready",
            "--timeout=120s",
            "sp/hybrid",
        ],
    );
    // The Deployment-mode schedulers start in containers: Ready once one of each leads.
    let (ready, _, err) = cp.kubectl_run(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=300s",
        "sp",
        "--all",
    ]);
    if !ready {
        eprintln!(
            "not every profile became Ready: {err}\n{}\n{}",
            kubectl(cp, &["get", "sp", "-o", "wide"]),
            podman_node.logs()
        );
        std::process::exit(1);
    }
    wait_for(
        "the leaf nodes to be tainted",
        Duration::from_secs(60),
        || {
            kubectl(
                cp,
                &[
                    "get",
                    "nodes",
                    "-l",
                    "kosmos.io/node=true",
                    "-o",
                    "jsonpath={.items[*].spec.taints[*].key}",
                ],
            )
            .matches("kosmos.io/node")
            .count()
                == 2
        },
    );
    apply(cp, WORKLOAD);
    wait_for(
        "the workload to be placed",
        Duration::from_secs(120),
        || {
            let nodes = workload_nodes(cp);
            nodes.split_whitespace().count() == 6
        },
    );

    println!(
        "\n$ kubectl get sp,lcp\n{}",
        kubectl(cp, &["get", "sp,lcp"])
    );
    println!(
        "$ kubectl get pods -n {NAMESPACE} -o wide   # the schedulers, run by podman\n{}",
        kubectl(cp, &["get", "pods", "-n", NAMESPACE, "-o", "wide"])
    );
    println!(
        "$ kubectl get pods -n demo -o wide\n{}",
        kubectl(cp, &["get", "pods", "-n", "demo", "-o", "wide"])
    );
    let nodes = workload_nodes(cp);
    let on_leaf = nodes
        .split_whitespace()
        .filter(|n| n.starts_with("leaf-"))
        .count();
    println!(
        "{} pods on host nodes, {on_leaf} on leaf-cluster nodes (PreferHost: host nodes first)",
        6 - on_leaf
    );

    if std::env::var_os("DEMO_KEEP").is_some() {
        println!(
            "\nThe control plane and the operator keep running. In another shell:\n\n  export KUBECONFIG={}\n  export PATH={}:$PATH\n  kubectl get sp,lcp,pods -A\n\nPress Ctrl-C to stop.",
            cp.kubeconfig.display(),
            cp.bin_dir.display()
        );
        runtime.block_on(async {
            let _ = tokio::signal::ctrl_c().await;
        });
    }
    let _ = stop_tx.send(());
    let _ =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(15), operator).await });
    scheduler.kill();
    drop(podman_node);
    println!("demo done; everything stopped (DEMO_KEEP=1 keeps it running)");
}

/// The nodes the demo's workload pods are on, space-separated (empty for pods not placed yet).
fn workload_nodes(cp: &ControlPlane) -> String {
    kubectl(
        cp,
        &[
            "get",
            "pods",
            "-n",
            "demo",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
    )
}
