//! manifests/install: generated from the Helm chart (one source of truth), builds with the real
//! kubectl's kustomize, carries the CRDs exactly as crds/ has them (and so does the chart), and puts
//! the image into KSCHED_IMAGE. On the real control plane, `kubectl delete -k` of the whole
//! kustomization, profiles and a tainting policy still there, finishes within a minute and leaves
//! nothing, also when the leading replica died just before; with the operator gone beforehand,
//! the policy waits on its finalizer until the documented `ksched uninstall` finishes the job.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::{Client, ResourceExt};

use ksched::api::{LeafClusterPolicy, SchedulerProfile};
use support::operator_pods::OperatorPods;
use support::scheduler::{default_scheduler, ksched_bin};
use support::uninstall::{Kept, Scenario, leaf_tainted, wait_finished};
use support::wait::poll;
use support::{Components, ControlPlane, control_plane, path_str, repo_root, testenv_bin_dir};

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

const NS: &str = "ksched-system";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

fn diagnostics(pods: &OperatorPods) -> String {
    let (_, objects, _) = cp().kubectl_run(&[
        "get",
        "sp,lcp,deploy,pods,crd,ns,clusterroles",
        "-A",
        "-o",
        "wide",
    ]);
    format!("--- objects\n{objects}\n{}", pods.logs())
}

/// `kubectl apply -k manifests/install`, then the operator pods (processes, see OperatorPods)
/// with one leading, then the scenario's profiles and policy. The pods and the leader's.
async fn install_and_use(
    cp: &'static ControlPlane,
    client: &Client,
    scenario: &Scenario,
) -> (OperatorPods, String) {
    let install = path_str(&repo_root().join("manifests/install")).to_string();
    cp.kubectl_ok(&["apply", "--server-side", "-k", &install]);
    // Every CRD served before anything is deleted again: a CRD deleted while the API server still
    // sets up the storage of its previous incarnation (this test installs three times) once
    // stayed past the minute, its cleanup retried with backoff.
    cp.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/schedulerprofiles.ksched.io",
        "crd/leafclusterpolicies.ksched.io",
        "crd/podgroups.scheduling.x-k8s.io",
    ]);
    poll(
        "PodGroups served",
        Duration::from_secs(60),
        String::new,
        async || {
            cp.kubectl_run(&["get", "podgroups.scheduling.x-k8s.io", "-A"])
                .0
                .then_some(())
        },
    )
    .await;
    cp.kubectl_ok(&[
        "wait",
        "--for=condition=Available",
        "--timeout=120s",
        "-n",
        NS,
        "deployment/ksched-operator",
    ]);
    let pods = OperatorPods::start(cp, client.clone(), NS);
    let leader = pods.wait_leader(client, NS).await;
    scenario.apply(cp, client, || diagnostics(&pods)).await;
    (pods, leader)
}

/// `ksched uninstall --kubeconfig <admin>`: (success, stdout, stderr).
fn ksched_uninstall(cp: &ControlPlane) -> (bool, String, String) {
    let out = Command::new(ksched_bin())
        .args(["uninstall", "--kubeconfig", path_str(&cp.kubeconfig)])
        .output()
        .expect("run ksched uninstall");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reproduction 3: deleting the operator's ClusterRoleBinding and creating it again (`kubectl
/// replace --force`, an RBAC clean-up script, an Argo CD `Replace=true` sync) is not an
/// uninstall: the binding is released after a grace and goes, the new one is taken as it comes,
/// and nothing the operator made is torn down; no operator process exits.
async fn replacing_the_binding_tears_nothing_down(
    cp: &ControlPlane,
    client: &Client,
    scenario: &Scenario,
    pods: &OperatorPods,
) {
    let replaced = Instant::now();
    cp.kubectl_ok(&[
        "delete",
        "clusterrolebinding",
        "ksched-operator",
        "--wait=true",
        "--timeout=60s",
    ]);
    let gone_after = replaced.elapsed();
    let install = repo_root().join("manifests/install/rbac.yaml");
    cp.kubectl_ok(&["apply", "--server-side", "-f", path_str(&install)]);
    eprintln!("ClusterRoleBinding ksched-operator replaced: released after {gone_after:?}");
    let crb = Api::<ClusterRoleBinding>::all(client.clone())
        .get("ksched-operator")
        .await
        .expect("the new binding");
    assert!(
        crb.finalizers()
            .iter()
            .any(|f| f == ksched::operator::uninstall::HOLD_FINALIZER),
        "{:?}",
        crb.metadata
    );
    // Give a wrongly started uninstall every chance to show.
    tokio::time::sleep(ksched::operator::uninstall::DEPARTURE_GRACE * 3).await;
    let scheduler = Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(&ksched::operator::object_name(&scenario.deployment_profile))
        .await
        .expect("get Deployment");
    assert!(
        scheduler.is_some(),
        "a profile's scheduler Deployment was torn down"
    );
    let policy = Api::<LeafClusterPolicy>::all(client.clone())
        .get(&scenario.policy)
        .await
        .expect("policy");
    assert!(
        policy
            .finalizers()
            .iter()
            .any(|f| f == ksched::operator::FINALIZER),
        "the policy lost its finalizer"
    );
    let tainted = Api::<Node>::all(client.clone())
        .get(&scenario.tainted)
        .await
        .expect("node");
    assert!(leaf_tainted(&tainted), "the policy's taint went");
    let profile = Api::<SchedulerProfile>::all(client.clone())
        .get(&scenario.embedded_profile)
        .await
        .expect("profile");
    let ready = profile
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(ready, Some(("True".into(), "Running".into())));
    assert_eq!(pods.running().len(), 2, "{}", pods.logs());
    assert!(
        !pods.logs().contains("ksched is being uninstalled"),
        "{}",
        pods.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_k_uninstalls_in_one_step_also_with_the_leader_dead_and_ksched_uninstall_finishes_after_a_lost_operator()
 {
    let cp = cp();
    let client = cp.client().await;
    let scenario = Scenario::nodes(cp, "kustomize");
    let _default_scheduler = default_scheduler(cp);
    let install = path_str(&repo_root().join("manifests/install")).to_string();

    // Everything at once (CRDs, namespace, RBAC, operator; profiles and policy still there): done
    // within a minute, every operator process stopped by itself, nothing left (the release
    // identity made for the last step deleted too).
    let (pods, _) = install_and_use(cp, &client, &scenario).await;
    replacing_the_binding_tears_nothing_down(cp, &client, &scenario, &pods).await;
    let started = Instant::now();
    cp.kubectl_ok(&["delete", "-k", &install, "--wait", "--timeout=60s"]);
    let kubectl_done = started.elapsed();
    let took = wait_finished(
        &scenario,
        &pods,
        &client,
        NS,
        Kept::Nothing,
        started,
        || diagnostics(&pods),
    )
    .await;
    eprintln!(
        "kubectl delete -k: returned after {kubectl_done:?}, nothing of ksched left after {took:?}"
    );
    assert!(
        pods.logs().contains("the release identity deleted itself"),
        "{}",
        pods.logs()
    );
    drop(pods);

    // The leading replica dies just before the uninstall (its pod stays, as with a node that
    // died): the other one, which never led, leaves the cleanup to it for a while, then does it.
    let (pods, leader) = install_and_use(cp, &client, &scenario).await;
    pods.kill(&leader);
    let started = Instant::now();
    cp.kubectl_ok(&["delete", "-k", &install, "--wait", "--timeout=60s"]);
    let took = wait_finished(
        &scenario,
        &pods,
        &client,
        NS,
        Kept::Nothing,
        started,
        || diagnostics(&pods),
    )
    .await;
    eprintln!("kubectl delete -k with the leader dead: nothing of ksched left after {took:?}");
    drop(pods);

    // The operator gone (its pods cannot run) before the uninstall: the profiles (no finalizer;
    // the garbage collector takes what they own) still go; the policy waits on its finalizer, so
    // its CRD stays Terminating, the taint stays, and the operator's identity stays held, so the
    // namespace stays Terminating too.
    let (pods, _) = install_and_use(cp, &client, &scenario).await;
    pods.kill_all();
    cp.kubectl_ok(&["delete", "-k", &install, "--wait=false"]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let policies: Api<LeafClusterPolicy> = Api::all(client.clone());
    poll(
        "what a lost operator leaves",
        Duration::from_secs(60),
        || diagnostics(&pods),
        async || {
            let ns_waits = namespaces
                .get_opt(NS)
                .await
                .ok()??
                .metadata
                .deletion_timestamp
                .is_some();
            let profiles_gone = crds
                .get_opt("schedulerprofiles.ksched.io")
                .await
                .ok()?
                .is_none();
            let policy_crd_waits = crds
                .get_opt("leafclusterpolicies.ksched.io")
                .await
                .ok()??
                .metadata
                .deletion_timestamp
                .is_some();
            let policy_waits = policies
                .get_opt(&scenario.policy)
                .await
                .ok()??
                .metadata
                .deletion_timestamp
                .is_some();
            (ns_waits && profiles_gone && policy_crd_waits && policy_waits).then_some(())
        },
    )
    .await;
    let tainted = Api::<Node>::all(client.clone())
        .get(&scenario.tainted)
        .await
        .expect("node");
    assert!(
        leaf_tainted(&tainted),
        "the taint went without the operator?"
    );

    // The way out the README documents: `ksched uninstall` with the user's credentials.
    let started = Instant::now();
    let (ok, stdout, stderr) = ksched_uninstall(cp);
    assert!(ok, "ksched uninstall: {stdout}{stderr}");
    assert!(
        stdout.contains("taints removed from 1 node(s)")
            && stdout.contains("7 object(s) of the operator's identity released"),
        "{stdout}"
    );
    scenario
        .wait_uninstalled(&client, NS, Kept::Nothing, Duration::from_secs(60), || {
            diagnostics(&pods)
        })
        .await;
    eprintln!(
        "ksched uninstall after a lost operator: {} ({:?} until nothing was left)",
        stdout.trim(),
        started.elapsed()
    );
}
