//! `make demo`: a local control plane (etcd, kube-apiserver, kwok) with ksched's CRDs and three
//! kwok nodes; prints `kubectl get nodes,crds` and exits cleanly, or with DEMO_KEEP=1 keeps running
//! until Ctrl-C and prints the KUBECONFIG to export.

#[path = "../tests/support/mod.rs"]
mod support;

use support::{Components, control_plane};

fn main() {
    let cp = control_plane(Components::WITH_KWOK);
    for i in 0..3 {
        let node = support::fixtures::kwok_node(&format!("demo-node-{i}"), "4", "32Gi", &[]);
        let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], &node);
        if !ok {
            eprintln!("creating demo-node-{i}: {err}");
            std::process::exit(1);
        }
    }
    let (ok, _, err) = cp.kubectl_run(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=60s",
        "node",
        "--all",
    ]);
    if !ok {
        eprintln!("nodes did not become Ready: {err}");
        std::process::exit(1);
    }
    let (_, out, _) = cp.kubectl_run(&["get", "nodes,crds"]);
    println!("{out}");
    if std::env::var_os("DEMO_KEEP").is_some() {
        println!(
            "The control plane keeps running. In another shell:\n\n  export KUBECONFIG={}\n  {}/kubectl get nodes\n\nPress Ctrl-C to stop it.",
            cp.kubeconfig.display(),
            cp.bin_dir.display()
        );
        loop {
            std::thread::park();
        }
    }
    println!("demo done; control plane stopped (DEMO_KEEP=1 keeps it running)");
}
