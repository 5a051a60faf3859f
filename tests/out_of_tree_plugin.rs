//! The out-of-tree plugin example (`examples/custom_plugin.rs`): built with cargo, run as the full
//! scheduler against the real control plane; its `PreferLabeled` Score plugin decides placement.

mod support;

use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::scheduler_command;
use support::wait::{create_bound, wait_log};
use support::{Components, control_plane, repo_root};

/// Builds the example and returns its path.
fn build_example() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--example",
            "custom_plugin",
            "--message-format=short",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo build --example custom_plugin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("examples").join("custom_plugin")
}

const CONFIG: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: labeled-scheduler
  plugins:
    score:
      enabled:
      - name: PreferLabeled
        weight: 10
  pluginConfig:
  - name: PreferLabeled
    args:
      label: example.com/preferred
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_plugin_decides_placement() {
    let bin = build_example();
    let cp = control_plane(Components::WITH_KWOK);
    let client = cp.client().await;
    let ns = cp.namespace(&client, "oot").await;
    let nodes = Nodes::new(cp, "oot");
    // The default scorers prefer the big, empty node; the plugin prefers the labeled small one.
    nodes.add("big", "64", &[]);
    let labeled = nodes.add("small", "4", &[("example.com/preferred", "yes")]);

    let config = cp.dir.join("custom-plugin-config.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let mut cmd = scheduler_command(&bin, cp, &config);
    cmd.args(["--secure-port=0", "--v=4"]);
    let example = LoggedChild::spawn(cmd, cp.dir.join("custom-plugin.log"));
    wait_log(|| example.logs(), "starting to schedule").await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        let name = format!("p{i}");
        let node = create_bound(
            &pods,
            &pause_pod(&name, "labeled-scheduler", "500m", &[], json!({})),
            || example.logs(),
        )
        .await;
        assert_eq!(node, labeled, "{}", example.logs());
    }
    drop(nodes);
}
