//! manifests/install: builds with the real kubectl's kustomize, carries the CRDs exactly as crds/
//! has them, and puts the image into KSCHED_IMAGE.

mod support;

use support::{path_str, repo_root, testenv_bin_dir};

#[test]
fn install_crds_are_copies_of_crds_dir() {
    let root = repo_root();
    for entry in std::fs::read_dir(root.join("crds")).expect("crds/") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let copy = root.join("manifests/install/crds").join(&name);
        assert_eq!(
            std::fs::read_to_string(&copy).unwrap_or_default(),
            std::fs::read_to_string(&path).expect("crd"),
            "manifests/install/crds/{name} differs from crds/{name}: cp crds/*.yaml manifests/install/crds/"
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
    assert_eq!(image, "ksched:0.1.0");
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
