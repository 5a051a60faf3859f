use serde_json::{Value, json};

use super::validate;

fn profile(spec: Value) -> Value {
    json!({
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "p"},
        "spec": spec,
    })
}

/// The errors of `object`, as `path: reason` lines.
fn errors(kind: &str, mut object: Value) -> Vec<String> {
    match validate(kind, &mut object) {
        Ok(()) => vec![],
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// `spec` is refused with one error at `path` whose reason contains `says`.
#[track_caller]
fn refused(spec: Value, path: &str, says: &str) {
    let errors = errors("SchedulerProfile", profile(spec.clone()));
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&format!("{path}: ")) && e.contains(says)),
        "spec {spec}: expected an error at {path} saying {says:?}, got {errors:#?}"
    );
}

/// `spec` is valid.
#[track_caller]
fn accepted(spec: Value) {
    assert_eq!(
        errors("SchedulerProfile", profile(spec.clone())),
        Vec::<String>::new(),
        "{spec}"
    );
}

/// The schema's default of `spec.<field>` (what an empty spec gets).
fn defaulted(field: &str) -> Value {
    let mut object = profile(json!({}));
    assert_eq!(validate("SchedulerProfile", &mut object), Ok(()));
    object["spec"][field].clone()
}

#[test]
fn a_minimal_profile_is_valid_and_gets_the_schema_defaults() {
    let mut object = profile(json!({}));
    assert_eq!(validate("SchedulerProfile", &mut object), Ok(()));
    let spec = &object["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["mode"], "Deployment");
    assert_eq!(spec["leaderElection"]["leaseDuration"], "15s");
    assert_eq!(spec["clientConnection"]["qps"], 50.0);
}

#[test]
fn the_samples_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/samples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("manifests/samples") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read sample");
        for doc in serde_saphyr::from_multiple::<Value>(&text).expect("YAML") {
            // The samples' PodGroups and Pods are Kubernetes' (or scheduler-plugins') kinds.
            if !doc["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("ksched.io/"))
            {
                continue;
            }
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            assert_eq!(
                errors(&kind, doc),
                Vec::<String>::new(),
                "{}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 5, "{seen} samples");
}

/// What the issue lists as accepted by `ksched render` and refused by the cluster.
#[test]
fn what_the_api_server_refuses_is_refused_with_the_field() {
    refused(
        json!({"plugin": {}}),
        "spec.plugin",
        "unknown field \"spec.plugin\": did you mean `plugins`?",
    );
    refused(
        json!({"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 1000}]}}}),
        "spec.plugins.score.enabled[0].weight",
        "Invalid value: 1000: should be less than or equal to 100",
    );
    refused(
        json!({"replicas": -1}),
        "spec.replicas",
        "replicas must be between 0 and 10",
    );
    refused(
        json!({"mode": "Embedded", "replicas": 3}),
        "spec",
        "mode Embedded runs one scheduler inside the operator: set replicas to 1",
    );
    refused(
        json!({"image": ""}),
        "spec.image",
        "image must not be empty",
    );
    refused(
        json!({"logLevel": 11}),
        "spec.logLevel",
        "should be less than or equal to 10",
    );
    refused(
        json!({"clientConnection": {"qps": -5}}),
        "spec.clientConnection.qps",
        "should be greater than or equal to 0",
    );
    refused(
        json!({"tolerations": [{"key": "k", "operator": "Contains"}]}),
        "spec.tolerations",
        "tolerations[].operator must be Exists or Equal",
    );
    refused(
        json!({"resources": {"limits": {"cpu": "1 core"}}}),
        "spec.resources.limits",
        "resources.limits values must be quantities",
    );
    refused(
        json!({"mode": "Sideways"}),
        "spec.mode",
        "Unsupported value: \"Sideways\": supported values: \"Deployment\", \"Embedded\"",
    );
    refused(
        json!({"replicas": "two"}),
        "spec.replicas",
        "Invalid value: \"two\": must be of type integer",
    );
}

#[test]
fn nonsense_the_cluster_used_to_accept_is_refused() {
    refused(
        json!({"leaderElection": {"leaseDuration": "2562047h", "renewDeadline": "10s", "retryPeriod": "2s"}}),
        "spec.leaderElection.leaseDuration",
        "leaderElection.leaseDuration must be between 1s and 1h",
    );
    refused(
        json!({"clientConnection": {"qps": 1e300}}),
        "spec.clientConnection.qps",
        "should be less than or equal to 100000",
    );
    refused(
        json!({"image": "ksched:::bad"}),
        "spec.image",
        "image must be a container image reference",
    );
    refused(
        json!({"leaderElection": {"leaseDuration": "10s", "renewDeadline": "10s"}}),
        "spec.leaderElection",
        "leaderElection.leaseDuration must be longer than leaderElection.renewDeadline",
    );
    for image in [
        "ksched:0.1.0",
        "registry.example.com:5000/team/ksched:v1.2-rc.1",
        "localhost/ksched@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        accepted(json!({"image": image}));
    }
}

/// `workloadAwareScheduling` turns on a gate ksched honours from 1.37: a profile pinned to 1.36 is
/// refused by the CRD; unpinned, the operator decides by the API server's minor.
#[test]
fn workload_aware_scheduling_is_refused_with_kubernetes_1_36() {
    refused(
        json!({"workloadAwareScheduling": true, "kubernetesVersion": "1.36"}),
        "spec",
        "spec.workloadAwareScheduling needs Kubernetes 1.37 or later (the GenericWorkload feature gate): set spec.kubernetesVersion to 1.37 (or leave it out on a 1.37 cluster), or remove workloadAwareScheduling",
    );
    for ok in [
        json!({"workloadAwareScheduling": true, "kubernetesVersion": "1.37"}),
        json!({"workloadAwareScheduling": true}),
        json!({"workloadAwareScheduling": false, "kubernetesVersion": "1.36"}),
    ] {
        accepted(ok);
    }
    assert_eq!(defaulted("workloadAwareScheduling"), false);
}

/// `topologyAwareScheduling` turns on a gate that places the groups of `workloadAwareScheduling`'s:
/// alone it is refused, naming both fields and the fix; pinned to 1.36 it is refused as
/// `workloadAwareScheduling` is.
#[test]
fn topology_aware_scheduling_needs_workload_aware_scheduling_and_1_37() {
    const ALONE: &str = "spec.topologyAwareScheduling needs spec.workloadAwareScheduling (TopologyAwareWorkloadScheduling places the pod groups that GenericWorkload schedules): set spec.workloadAwareScheduling: true as well, or remove topologyAwareScheduling";
    const OLD: &str = "spec.topologyAwareScheduling needs Kubernetes 1.37 or later (the TopologyAwareWorkloadScheduling feature gate): set spec.kubernetesVersion to 1.37 (or leave it out on a 1.37 cluster), or remove topologyAwareScheduling";
    for alone in [
        json!({"topologyAwareScheduling": true}),
        json!({"topologyAwareScheduling": true, "workloadAwareScheduling": false}),
        json!({"topologyAwareScheduling": true, "kubernetesVersion": "1.37"}),
    ] {
        assert_eq!(
            errors("SchedulerProfile", profile(alone.clone())),
            vec![format!("spec: Invalid value: \"object\": {ALONE}")],
            "{alone}"
        );
    }
    refused(
        json!({"topologyAwareScheduling": true, "workloadAwareScheduling": true, "kubernetesVersion": "1.36"}),
        "spec",
        OLD,
    );
    refused(
        json!({"topologyAwareScheduling": true, "workloadAwareScheduling": true, "kubernetesVersion": "1.36"}),
        "spec",
        "spec.workloadAwareScheduling needs Kubernetes 1.37 or later",
    );
    refused(
        json!({"topologyAwareScheduling": true, "kubernetesVersion": "1.36"}),
        "spec",
        ALONE,
    );
    for ok in [
        json!({"topologyAwareScheduling": true, "workloadAwareScheduling": true}),
        json!({"topologyAwareScheduling": true, "workloadAwareScheduling": true, "kubernetesVersion": "1.37"}),
        json!({"topologyAwareScheduling": false, "kubernetesVersion": "1.36"}),
        json!({"workloadAwareScheduling": true}),
    ] {
        accepted(ok);
    }
    assert_eq!(defaulted("topologyAwareScheduling"), false);
}

#[test]
fn rules_on_the_whole_resource_see_its_name() {
    let mut object = profile(json!({}));
    object["metadata"]["name"] = json!("default-scheduler");
    let errors = errors("SchedulerProfile", object);
    assert!(
        errors.iter().any(
            |e| e.contains("metadata.name default-scheduler is the name kube-scheduler serves")
        ),
        "{errors:?}"
    );
}

#[test]
fn a_leaf_cluster_policy_is_checked_on_its_own() {
    let policy = |spec: Value| {
        json!({
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "LeafClusterPolicy",
            "metadata": {"name": "leaves"},
            "spec": spec,
        })
    };
    assert_eq!(
        errors("LeafClusterPolicy", policy(json!({"profiles": ["p"]}))),
        Vec::<String>::new()
    );
    let errors_of = |spec| errors("LeafClusterPolicy", policy(spec));
    let e = errors_of(json!({"profiles": ["p"], "leafNodeSelector": {}}));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec: ")
                && e.contains("leafNodeSelector: {} selects every node")),
        "{e:?}"
    );
    let e = errors_of(json!({}));
    assert_eq!(e, vec!["spec.profiles: Required value"]);
    let e = errors_of(json!({"profiles": ["p"], "placement": {"mode": "Mix", "weight": 5}}));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.placement: ")
                && e.contains("placement.weight only applies")),
        "{e:?}"
    );
    let e = errors_of(json!({"profiles": ["p"], "taint": {"key": "k", "effect": "Sometimes"}}));
    assert!(
        e.iter().any(|e| e.starts_with("spec.taint.effect: ")),
        "{e:?}"
    );
}

#[test]
fn nulls_are_pruned_and_unknown_kinds_refused() {
    // A null for a non-nullable field is dropped, then defaulted, as the API server does.
    let mut object = profile(json!({"replicas": null}));
    assert_eq!(validate("SchedulerProfile", &mut object), Ok(()));
    assert_eq!(object["spec"]["replicas"], 1);
    assert_eq!(
        errors("ConfigMap", json!({})),
        vec!["kind: Unsupported value: \"ConfigMap\": ksched has no CRD of that kind"]
    );
}
