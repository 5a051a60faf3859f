//! The Argo CD health check (manifests/argocd/health.lua) on real SchedulerProfile and
//! LeafClusterPolicy objects captured from the e2e run (tests/fixtures/argocd/, refreshed with
//! `KSCHED_UPDATE_FIXTURES=1 cargo test --test e2e_operator`), run by Debian's Lua
//! (`hack/install-lua.sh`). Also: argocd-cm.yaml carries the script verbatim.

#[path = "support/argocd_lua.rs"]
mod argocd_lua;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> serde_json::Value {
    let path = root()
        .join("tests/fixtures/argocd")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fixture `name` without its Stalled condition: only Ready says what is wrong.
fn without_stalled(name: &str) -> serde_json::Value {
    let mut obj = fixture(name);
    if let Some(conds) = obj["status"]["conditions"].as_array_mut() {
        conds.retain(|c| c["type"] != "Stalled");
    }
    obj
}

fn health(obj: &serde_json::Value) -> (String, String) {
    argocd_lua::health(&root().join("manifests/argocd/health.lua"), obj)
}

#[test]
fn ready_profile_is_healthy() {
    let (status, message) = health(&fixture("schedulerprofile-healthy"));
    assert_eq!(status, "Healthy", "{message}");
    assert!(message.starts_with("Running"), "{message}");
}

#[test]
fn rolling_out_profile_is_progressing() {
    let (status, message) = health(&fixture("schedulerprofile-progressing"));
    assert_eq!(status, "Progressing", "{message}");
    assert!(message.starts_with("RollingOut"), "{message}");
}

#[test]
fn invalid_profile_is_degraded_with_the_field() {
    let (status, message) = health(&fixture("schedulerprofile-degraded"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(
        message.contains("spec.plugins.score.enabled[0]"),
        "{message}"
    );
}

#[test]
fn not_yet_observed_is_progressing() {
    let mut obj = fixture("schedulerprofile-healthy");
    obj["metadata"]["generation"] = serde_json::json!(2);
    assert_eq!(health(&obj).0, "Progressing");
    let mut fresh = fixture("schedulerprofile-healthy");
    if let Some(o) = fresh.as_object_mut() {
        o.remove("status");
    }
    assert_eq!(health(&fresh).0, "Progressing");
}

#[test]
fn ready_false_with_a_stalled_reason_is_degraded() {
    assert_eq!(
        health(&without_stalled("schedulerprofile-degraded")).0,
        "Degraded"
    );
}

#[test]
fn leaf_cluster_policies() {
    assert_eq!(health(&fixture("leafclusterpolicy-healthy")).0, "Healthy");
    let (status, message) = health(&fixture("leafclusterpolicy-degraded"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(message.contains("leafNodeSelector"), "{message}");
}

#[test]
fn a_profile_the_api_server_refuses_is_degraded_in_plain_words() {
    let (status, message) = health(&fixture("schedulerprofile-applyfailed"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(
        message.starts_with("ApplyFailed: applying Deployment")
            && message.contains("must be less than or equal to cpu limit"),
        "{message}"
    );
    // Also when only Ready says so (a transient failure, no Stalled condition).
    assert_eq!(
        health(&without_stalled("schedulerprofile-applyfailed")).0,
        "Degraded"
    );
}

#[test]
fn a_conflicting_policy_is_degraded() {
    let (status, message) = health(&fixture("leafclusterpolicy-conflict"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(
        message.starts_with("Conflict: ") && message.contains("older LeafClusterPolicy"),
        "{message}"
    );
    assert_eq!(
        health(&without_stalled("leafclusterpolicy-conflict")).0,
        "Degraded"
    );
}

/// The reasons that say nothing runs, or that a name is taken (issue 31): a profile whose
/// scheduler stopped renewing its Lease, or whose operator stopped, is Progressing while an
/// operator works on it; one left behind by an uninstall, or whose object names are taken, needs
/// the user: Degraded.
#[test]
fn nothing_running_and_names_taken_read_as_they_are() {
    let (status, message) = health(&fixture("schedulerprofile-noleader"));
    assert_eq!(status, "Progressing", "{message}");
    assert!(message.starts_with("NoLeader: "), "{message}");
    let (status, message) = health(&fixture("schedulerprofile-operatorstopped"));
    assert_eq!(status, "Progressing", "{message}");
    assert!(message.starts_with("OperatorStopped: "), "{message}");
    let (status, message) = health(&fixture("schedulerprofile-uninstalled"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(
        message.starts_with("OperatorStopped: ksched was uninstalled"),
        "{message}"
    );
    let (status, message) = health(&fixture("schedulerprofile-nameinuse"));
    assert_eq!(status, "Degraded", "{message}");
    assert!(
        message.starts_with("NameInUse: ConfigMap ") && message.contains("never adopts"),
        "{message}"
    );
    assert_eq!(
        health(&without_stalled("schedulerprofile-nameinuse")).0,
        "Degraded"
    );
}

#[test]
fn argocd_cm_carries_the_script_verbatim() {
    let script = std::fs::read_to_string(root().join("manifests/argocd/health.lua")).expect("lua");
    let cm: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("manifests/argocd/argocd-cm.yaml")).expect("cm"),
    )
    .expect("argocd-cm.yaml is YAML");
    for kind in ["SchedulerProfile", "LeafClusterPolicy"] {
        let key = format!("resource.customizations.health.ksched.io_{kind}");
        assert_eq!(cm["data"][&key].as_str(), Some(script.as_str()), "{key}");
    }
}
