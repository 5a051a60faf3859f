//! ksched's own identity (issue 31): a profile's name can reach no object ksched did not render
//! for it, and the API server itself keeps the operator's identity to what ksched made
//! (the chart's ValidatingAdmissionPolicy, which the whole suite runs under).

use k8s_openapi::api::core::v1::{ConfigMap, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::*;

/// What the installation's objects look like before a test: (owners, rules) of the ClusterRole
/// `ksched:metrics-reader`, and whether the ServiceAccount and Role `ksched-operator` are owned by
/// anything.
async fn installation(c: &Client) -> (usize, String, usize, usize) {
    let reader = Api::<ClusterRole>::all(c.clone())
        .get("ksched:metrics-reader")
        .await
        .expect("the installation's ClusterRole ksched:metrics-reader");
    let sa = Api::<ServiceAccount>::namespaced(c.clone(), NS)
        .get("ksched-operator")
        .await
        .expect("the operator's ServiceAccount");
    let role = Api::<Role>::namespaced(c.clone(), NS)
        .get("ksched-operator")
        .await
        .expect("the operator's Role");
    (
        reader.owner_references().len(),
        serde_json::to_string(&reader.rules).expect("rules"),
        sa.owner_references().len(),
        role.owner_references().len(),
    )
}

/// Reproduction 1: profiles named `metrics-reader`, `operator` and `operator-uninstall` used to
/// take over the chart's ClusterRole `ksched:metrics-reader`, the operator's own ServiceAccount
/// and Role, and the uninstall identity's RBAC. Now every rendered name has a prefix of its own:
/// they run like any profile, and deleting them touches nothing of the installation. A profile
/// named after another profile's rendered objects gets objects of its own too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_name_reaches_no_object_of_the_installation_or_another_profile() {
    let c = client().await;
    let before = installation(&c).await;
    let names = [
        "metrics-reader",
        "operator",
        "operator-uninstall",
        "op-named",
        // The namespaced objects of `op-named` are all called this.
        "ksched-profile-op-named",
    ];
    for name in names {
        kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
    }
    for name in names {
        let p = wait_rolled_out(&c, name).await;
        // Every object of its own, owned by it alone.
        for (kind, owners) in rendered_objects(&c, name).await {
            let owners = owners.unwrap_or_else(|| panic!("{kind} of {name} missing"));
            assert_eq!(owners.len(), 1, "{kind} of {name}: {owners:?}");
            assert_eq!(
                owners[0].uid,
                p.uid().unwrap_or_default(),
                "{kind} of {name}"
            );
        }
    }
    assert_eq!(
        installation(&c).await,
        before,
        "the installation's objects changed"
    );
    for name in names {
        cp().kubectl_ok(&["delete", "schedulerprofile", name, "--wait=true"]);
    }
    // The garbage collector took the profiles' objects, and nothing of the installation.
    for name in names {
        eventually(&format!("{name}'s objects collected"), async || {
            rendered_objects(&c, name)
                .await
                .iter()
                .all(|(_, o)| o.is_none())
                .then_some(())
        })
        .await;
    }
    assert_eq!(
        installation(&c).await,
        before,
        "the installation's objects changed"
    );
}

/// An object with a rendered name that ksched did not make for the profile is never adopted,
/// changed or deleted: the profile is Stalled (`NameInUse`) with a Warning naming the object, and
/// renders nothing until the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_ksched_did_not_make_is_never_adopted() {
    let c = client().await;
    let name = "op-squatted";
    let obj = obj_name(name);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    let squatter: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": obj, "labels": {"owner": "someone-else"}},
        "data": {"config.yaml": "mine"}
    }))
    .expect("configmap");
    cms.create(&PostParams::default(), &squatter)
        .await
        .expect("create the squatting ConfigMap");
    kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
    let p = wait_profile(&c, name, "NameInUse", |p| {
        observed(p) && reason_of(p, "Stalled").as_deref() == Some("NameInUse")
    })
    .await;
    let message = cond(&p, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("ConfigMap {NS}/{obj} already exists"))
            && message.contains("never adopts"),
        "{message}"
    );
    save_fixture("schedulerprofile-nameinuse", &p);
    assert_eq!(argo_health(&p).0, "Degraded");
    let event = eventually("NameInUse event", async || {
        events_about(&c, "NameInUse", name)
            .await
            .into_iter()
            .find(|e| e.type_.as_deref() == Some("Warning"))
    })
    .await;
    assert!(
        event.note.as_deref().unwrap_or_default().contains(&obj),
        "{event:?}"
    );
    // Untouched, and nothing else rendered.
    let cm = cms.get(&obj).await.expect("the squatting ConfigMap");
    assert!(cm.owner_references().is_empty(), "{:?}", cm.metadata);
    assert_eq!(
        cm.data
            .clone()
            .unwrap_or_default()
            .get("config.yaml")
            .map(String::as_str),
        Some("mine")
    );
    assert!(!cm.labels().contains_key("app.kubernetes.io/managed-by"));
    for (kind, owners) in rendered_objects(&c, name).await {
        if kind != "ConfigMap" {
            assert!(owners.is_none(), "{kind} rendered for {name}");
        }
    }
    // Once it is gone the profile renders.
    cms.delete(&obj, &DeleteParams::default())
        .await
        .expect("delete the squatting ConfigMap");
    wait_rolled_out(&c, name).await;
    cp().kubectl_ok(&["delete", "schedulerprofile", name, "--wait=true"]);
}

/// `kubectl ... --as=<operator> --dry-run=server`: (success, stderr).
fn as_operator(args: &[&str]) -> (bool, String) {
    let mut all = args.to_vec();
    all.extend([
        "--as=system:serviceaccount:ksched-system:ksched-operator",
        "--dry-run=server",
    ]);
    let (ok, _, err) = cp().kubectl_run(&all);
    (ok, err)
}

/// Reproduction 2: RBAC lets the operator delete any ClusterRole and patch any node (it must, to
/// render schedulers and taint leaf nodes); the ValidatingAdmissionPolicy refuses what ksched did
/// not make: `cluster-admin`, a node's labels, a taint it does not record, a profile's spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_the_operator_what_ksched_did_not_make() {
    let c = client().await;
    let refused_by_policy = |(ok, err): (bool, String), what: &str| {
        assert!(!ok, "{what} was allowed");
        assert!(
            err.contains("ValidatingAdmissionPolicy 'ksched-operator'"),
            "{what}: {err}"
        );
        err
    };
    // RBAC alone would allow it.
    let (_, yes, _) = cp().kubectl_run(&[
        "auth",
        "can-i",
        "delete",
        "clusterrole/cluster-admin",
        "--as=system:serviceaccount:ksched-system:ksched-operator",
    ]);
    assert_eq!(yes.trim(), "yes");
    let err = refused_by_policy(
        as_operator(&["delete", "clusterrole", "cluster-admin"]),
        "deleting cluster-admin",
    );
    assert!(
        err.contains("cluster-admin was not made by ksched"),
        "{err}"
    );
    refused_by_policy(
        as_operator(&["delete", "clusterrolebinding", "cluster-admin"]),
        "deleting the binding of cluster-admin",
    );
    refused_by_policy(
        as_operator(&[
            "delete",
            "rolebinding",
            "-n",
            "kube-system",
            "system::leader-locking-kube-scheduler",
        ]),
        "deleting a kube-system RoleBinding",
    );
    // Someone else's ClusterRole with rules the operator holds (so RBAC's escalation check
    // passes): it still may not claim it.
    cp().kubectl_run(&[
        "create",
        "clusterrole",
        "op-foreign",
        "--verb=get",
        "--resource=pods",
    ]);
    refused_by_policy(
        as_operator(&[
            "label",
            "clusterrole",
            "op-foreign",
            "app.kubernetes.io/managed-by=ksched-operator",
        ]),
        "labelling a ClusterRole as ksched's",
    );
    refused_by_policy(
        as_operator(&["delete", "clusterrole", "op-foreign"]),
        "deleting someone else's ClusterRole",
    );

    // Nodes: only the taints it records.
    let node = "op-host-0";
    let err = refused_by_policy(
        as_operator(&["label", "node", node, "e2e-hijack=yes"]),
        "labelling a node",
    );
    assert!(err.contains("only a node's taints"), "{err}");
    let err = refused_by_policy(
        as_operator(&["taint", "node", node, "e2e-hijack=yes:NoSchedule"]),
        "an unrecorded taint",
    );
    assert!(
        err.contains("records in the annotation ksched.io/leaf-taints"),
        "{err}"
    );
    // Recorded with it, the same taint passes (dry run: nothing changes).
    let nodes: Api<Node> = Api::all(c.clone());
    let rv = nodes.get(node).await.expect("node").resource_version();
    let patch = json!({
        "metadata": {
            "resourceVersion": rv,
            "annotations": {"ksched.io/leaf-taints": "{\"e2e\":\"e2e-recorded=yes:NoSchedule\"}"},
        },
        "spec": {"taints": [{"key": "e2e-recorded", "value": "yes", "effect": "NoSchedule"}]},
    })
    .to_string();
    let (ok, err) = as_operator(&["patch", "node", node, "--type=merge", "-p", &patch]);
    assert!(ok, "a recorded taint was refused: {err}");

    // A profile's spec (the uninstall identity once rolled out another image with it).
    kubectl_apply(&profile_yaml("op-spec-guarded", "  replicas: 0\n"));
    let err = refused_by_policy(
        as_operator(&[
            "patch",
            "schedulerprofile",
            "op-spec-guarded",
            "--type=merge",
            "-p",
            r#"{"spec":{"image":"attacker/ksched:evil"}}"#,
        ]),
        "changing a profile's spec",
    );
    assert!(err.contains("never change the spec"), "{err}");
    cp().kubectl_ok(&["delete", "schedulerprofile", "op-spec-guarded"]);
}
