//! manifests/install: generated from the Helm chart (one source of truth), builds with the real
//! kubectl's kustomize, carries the CRDs exactly as crds/ has them (and so does the chart), and puts
//! the image into KSCHED_IMAGE.

mod support;

use std::path::Path;

use support::{path_str, repo_root, testenv_bin_dir};

/// (file name, contents) of each file in `dir` (empty for a directory).
fn files(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            (name, text)
        })
        .collect()
}

#[test]
fn install_and_chart_crds_are_copies_of_crds_dir() {
    let root = repo_root();
    for (name, crd) in files(&root.join("crds")) {
        for dir in ["manifests/install/crds", "charts/ksched/crds"] {
            assert_eq!(
                std::fs::read_to_string(root.join(dir).join(&name)).unwrap_or_default(),
                crd,
                "{dir}/{name} differs from crds/{name}: make crds"
            );
        }
    }
}

/// The files of manifests/install the chart generates are exactly what `make manifests` writes
/// now, and no other file there claims to be generated.
#[test]
fn install_is_generated_from_the_chart() {
    let root = repo_root();
    let out = tempfile::tempdir().expect("temp dir");
    let status = std::process::Command::new(root.join("hack/generate-manifests.sh"))
        .arg(out.path())
        .env("HELM", testenv_bin_dir().join("helm"))
        .status()
        .expect("run hack/generate-manifests.sh");
    assert!(status.success(), "hack/generate-manifests.sh failed");
    let mut generated = Vec::new();
    for (name, text) in files(out.path()) {
        assert_eq!(
            std::fs::read_to_string(root.join("manifests/install").join(&name)).unwrap_or_default(),
            text,
            "manifests/install/{name} is not what the chart generates: make manifests"
        );
        generated.push(name);
    }
    assert!(
        generated.contains(&"deployment.yaml".to_string()),
        "{generated:?}"
    );
    for (name, text) in files(&root.join("manifests/install")) {
        assert!(
            !text.starts_with("# Generated from charts/ksched") || generated.contains(&name),
            "manifests/install/{name} was generated from a template the chart no longer has: remove it"
        );
    }
}

#[test]
fn install_builds_with_kustomize() {
    let out = std::process::Command::new(testenv_bin_dir().join("kubectl"))
        .args([
            "kustomize",
            path_str(&repo_root().join("manifests/install")),
        ])
        .output()
        .expect("run kubectl kustomize");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
    let kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    for (kind, name) in [
        ("CustomResourceDefinition", "schedulerprofiles.ksched.io"),
        ("CustomResourceDefinition", "leafclusterpolicies.ksched.io"),
        ("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io"),
        ("Namespace", "ksched-system"),
        ("ServiceAccount", "ksched-operator"),
        ("ClusterRole", "ksched-operator"),
        ("ClusterRoleBinding", "ksched-operator"),
        ("Deployment", "ksched-operator"),
        ("Service", "ksched-operator-metrics"),
    ] {
        assert!(
            kinds.iter().any(|(k, n)| k == kind && n == name),
            "{kind} {name} missing from {kinds:?}"
        );
    }
    let dep = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    let container = &dep["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().expect("image");
    assert_eq!(image, format!("ksched:{}", env!("CARGO_PKG_VERSION")));
    let env = container["env"].as_array().expect("env");
    let ksched_image = env
        .iter()
        .find(|e| e["name"] == "KSCHED_IMAGE")
        .and_then(|e| e["value"].as_str());
    assert_eq!(ksched_image, Some(image));
    // The kube-system RoleBindings stay in kube-system.
    assert!(docs.iter().any(|d| d["kind"] == "RoleBinding"
        && d["metadata"]["namespace"] == "kube-system"
        && d["roleRef"]["name"] == "extension-apiserver-authentication-reader"));
}
