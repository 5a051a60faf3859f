//! Status that tells the truth when nothing runs (issue 31, reproduction 4): a profile's Ready
//! follows its scheduler's Lease renewals, and a LeafClusterPolicy recounts when a node goes.

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};

use super::*;

/// A Deployment-mode profile whose scheduler stops (SIGKILL: its Lease is not released) becomes
/// `Ready=False` (`NoLeader`, the Lease not renewed within its duration) as soon as the Lease's
/// term runs out, without any change to the profile or its objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_whose_scheduler_stopped_renewing_is_not_ready() {
    let c = client().await;
    let name = "op-silent";
    let (p, mut replica) = apply_running(&c, name, "  replicas: 1\n").await;
    assert!(p.status.as_ref().and_then(|s| s.leader.clone()).is_some());
    replica.kill();
    let killed = Instant::now();
    let p = wait_profile(&c, name, "NoLeader after its scheduler stopped", |p| {
        reason_of(p, "Ready").as_deref() == Some("NoLeader")
    })
    .await;
    let noticed = killed.elapsed();
    eprintln!("a scheduler stopped renewing: its profile said NoLeader after {noticed:?}");
    assert!(!is_true(&p, "Ready"));
    assert_eq!(p.status.as_ref().and_then(|s| s.leader.clone()), None);
    let elected = cond(&p, "LeaderElected").expect("LeaderElected");
    assert_eq!(elected.reason, "LeaseExpired", "{elected:?}");
    // The Lease's term (15 s) and the look the operator takes when it runs out, not a resync.
    assert!(
        noticed < Duration::from_secs(15) + Duration::from_secs(5),
        "noticed after {noticed:?}"
    );
    save_fixture("schedulerprofile-noleader", &p);
    assert_eq!(argo_health(&p).0, "Progressing");
    cp().kubectl_ok(&["delete", "schedulerprofile", name, "--wait=true"]);
}

/// A deleted node is counted out at once (not at the next resync), and a node that was the
/// subject of a conflict is no longer named once it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_recounts_when_a_node_is_deleted() {
    let c = client().await;
    for n in ["op-gone-a", "op-gone-b"] {
        kubectl_apply(&fixtures::kwok_node(
            n,
            "8",
            "16Gi",
            &[("ksched-e2e/gone", "yes")],
        ));
    }
    kubectl_apply(&profile_yaml("op-gone-only", "  replicas: 0\n"));
    kubectl_apply(&policy_yaml(
        "op-gone",
        "  leafNodeSelector:\n    matchLabels:\n      ksched-e2e/gone: \"yes\"\n  taint:\n    key: ksched-e2e/gone\n    value: \"true\"\n    effect: NoSchedule\n  profiles: [\"op-gone-only\"]\n",
    ));
    wait_policy(&c, "op-gone", "both nodes tainted", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.leaf_nodes == Some(2) && s.tainted_nodes == Some(2))
    })
    .await;
    let deleted = Instant::now();
    Api::<Node>::all(c.clone())
        .delete("op-gone-b", &DeleteParams::default())
        .await
        .expect("delete node");
    wait_policy(&c, "op-gone", "one node left", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.leaf_nodes == Some(1) && s.tainted_nodes == Some(1))
    })
    .await;
    // Well before the policy's 5-minute resync.
    assert!(
        deleted.elapsed() < Duration::from_secs(60),
        "{:?}",
        deleted.elapsed()
    );
    cp().kubectl_ok(&["delete", "leafclusterpolicy", "op-gone", "--wait=true"]);
    cp().kubectl_ok(&["delete", "schedulerprofile", "op-gone-only", "--wait=true"]);
    cp().kubectl_ok(&["delete", "node", "op-gone-a"]);
}
