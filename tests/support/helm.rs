//! The testenv's helm (built from Go modules by hack/testenv), with its caches and configuration
//! under target/tmp, never the user's own.

use std::process::Command;

use super::{ControlPlane, path_str, testenv_bin_dir};

/// Runs helm with `args`, against `cp` when given; returns (success, stdout, stderr).
pub fn helm(cp: Option<&ControlPlane>, args: &[&str]) -> (bool, String, String) {
    let home = super::target_tmp().join("helm");
    let mut cmd = Command::new(testenv_bin_dir().join("helm"));
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(args);
    if let Some(cp) = cp {
        cmd.arg(format!("--kubeconfig={}", path_str(&cp.kubeconfig)));
    }
    let out = cmd.output().expect("run helm (make testenv builds it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`helm`], which must succeed; its stdout.
pub fn helm_ok(cp: Option<&ControlPlane>, args: &[&str]) -> String {
    let (ok, out, err) = helm(cp, args);
    assert!(ok, "helm {}: {err}\n{out}", args.join(" "));
    out
}

/// The chart charts/ksched.
pub fn chart() -> String {
    path_str(&super::repo_root().join("charts/ksched")).to_string()
}

/// `helm template` of the chart as release `ksched` in `namespace` with `--set` values: the
/// rendered objects.
pub fn template(namespace: &str, sets: &[&str]) -> Vec<serde_json::Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "ksched",
        chart.as_str(),
        "--namespace",
        namespace,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = helm_ok(None, &args);
    serde_saphyr::from_multiple::<serde_json::Value>(&out)
        .expect("helm template prints YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}
