//! The CRDs on the real API server: they install, the samples are accepted, invalid resources are
//! rejected with the messages we wrote, and kubectl prints the declared columns.

mod support;

use support::{Components, control_plane_with_apiserver_args, repo_root};

/// The API server serves 1.37's `scheduling.k8s.io/v1beta1` and keeps a PodGroup's
/// `schedulingConstraints`, so the gang samples (`manifests/samples/gang.yaml`, `topology.yaml`: a
/// PodGroup and pods naming it) are accepted too.
fn cp() -> &'static support::ControlPlane {
    control_plane_with_apiserver_args(Components::API_ONLY, support::WORKLOAD_API_ARGS)
}

#[test]
fn crds_are_installed_and_established() {
    let (ok, out, err) = cp().kubectl_run(&["get", "crds", "-o", "name"]);
    assert!(ok, "{err}");
    for name in [
        "schedulerprofiles.ksched.io",
        "leafclusterpolicies.ksched.io",
        "podgroups.scheduling.x-k8s.io",
    ] {
        assert!(out.contains(name), "{name} not installed: {out}");
    }
    let (ok, out, err) =
        cp().kubectl_run(&["api-resources", "--api-group=ksched.io", "-o", "wide"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("schedulerprofiles") && out.contains(" sp "),
        "short name sp missing:\n{out}"
    );
    assert!(
        out.contains("leafclusterpolicies") && out.contains(" lcp "),
        "short name lcp missing:\n{out}"
    );
    let sp_line = out
        .lines()
        .find(|l| l.starts_with("schedulerprofiles"))
        .unwrap_or_default();
    assert!(
        sp_line.contains("false"),
        "SchedulerProfile must be cluster-scoped: {sp_line}"
    );
}

#[test]
fn every_sample_is_accepted() {
    let samples = repo_root().join("manifests/samples");
    let mut files: Vec<_> = std::fs::read_dir(&samples)
        .expect("manifests/samples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the samples of DESIGN.md, found {files:?}"
    );
    // The gang sample's pods need their namespace's default ServiceAccount, which no controller
    // creates on this control plane.
    let (ok, _, err) = cp().kubectl_run(&[
        "create",
        "serviceaccount",
        "default",
        "--namespace",
        "default",
    ]);
    assert!(ok || err.contains("AlreadyExists"), "{err}");
    for file in files {
        let path = support::path_str(&file);
        let (ok, out, err) = cp().kubectl_run(&["apply", "--dry-run=server", "-f", path]);
        assert!(ok, "{path} rejected: {err}");
        assert!(out.contains("(server dry run)"), "{path}: {out}");
    }
}

/// Each invalid resource and the text the API server must answer with.
const INVALID: &[(&str, &str, &str)] = &[
    (
        "replicas out of range",
        "kind: SchedulerProfile\nmetadata: {name: bad-replicas}\nspec: {replicas: 11}",
        "replicas must be between 0 and 10",
    ),
    (
        "max backoff below initial",
        "kind: SchedulerProfile\nmetadata: {name: bad-backoff}\nspec: {podInitialBackoffSeconds: 5, podMaxBackoffSeconds: 2}",
        "podMaxBackoffSeconds must be greater than or equal to podInitialBackoffSeconds",
    ),
    (
        "initial backoff zero",
        "kind: SchedulerProfile\nmetadata: {name: bad-initial}\nspec: {podInitialBackoffSeconds: 0}",
        "podInitialBackoffSeconds must be at least 1",
    ),
    (
        "embedded with replicas",
        "kind: SchedulerProfile\nmetadata: {name: bad-embedded}\nspec: {mode: Embedded, replicas: 3}",
        "mode Embedded runs one scheduler inside the operator: set replicas to 1",
    ),
    (
        "lease shorter than renew deadline",
        "kind: SchedulerProfile\nmetadata: {name: bad-lease}\nspec: {leaderElection: {leaseDuration: 5s, renewDeadline: 10s}}",
        "leaderElection.leaseDuration must be longer than leaderElection.renewDeadline",
    ),
    (
        "renew deadline shorter than retry period",
        "kind: SchedulerProfile\nmetadata: {name: bad-retry}\nspec: {leaderElection: {renewDeadline: 3s, retryPeriod: 4s}}",
        "leaderElection.renewDeadline must be longer than leaderElection.retryPeriod",
    ),
    (
        "duplicate pluginConfig",
        "kind: SchedulerProfile\nmetadata: {name: bad-pluginconfig}\nspec: {pluginConfig: [{name: NodeResourcesFit}, {name: NodeResourcesFit}]}",
        "pluginConfig lists the same plugin more than once: merge the args into a single entry per plugin",
    ),
    (
        "empty image",
        "kind: SchedulerProfile\nmetadata: {name: bad-image}\nspec: {image: ''}",
        "image must not be empty",
    ),
    (
        "profile name too long for its objects",
        "kind: SchedulerProfile\nmetadata: {name: a-very-long-profile-name-that-will-not-fit-in-object-names}\nspec: {}",
        "metadata.name names the scheduler and its objects",
    ),
    (
        "unknown mode",
        "kind: SchedulerProfile\nmetadata: {name: bad-mode}\nspec: {mode: Sideways}",
        "spec.mode: Unsupported value: \"Sideways\": supported values: ",
    ),
    (
        "misspelled taint effect",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-effect}\nspec: {profiles: [a], taint: {key: kosmos.io/node, value: 'true', effect: Noschedule}}",
        "taint.effect must be one of NoSchedule, PreferNoSchedule or NoExecute",
    ),
    (
        "bad taint key",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-key}\nspec: {profiles: [a], taint: {key: 'kosmos io/node!', effect: NoSchedule}}",
        "taint.key must be a qualified name",
    ),
    (
        "weight with Mix",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-weight-mode}\nspec: {profiles: [a], placement: {mode: Mix, weight: 10}}",
        "placement.weight only applies to mode PreferHost or PreferLeaf",
    ),
    (
        "weight out of range",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-weight}\nspec: {profiles: [a], placement: {mode: PreferLeaf, weight: 0}}",
        "placement.weight must be between 1 and 100",
    ),
    (
        "star with names",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-star}\nspec: {profiles: ['*', hybrid]}",
        "'*' already means every profile",
    ),
    (
        "duplicate profile",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-dup}\nspec: {profiles: [hybrid, hybrid]}",
        "profiles lists the same profile more than once",
    ),
    (
        "kube-scheduler's own name",
        "kind: SchedulerProfile\nmetadata: {name: default-scheduler}\nspec: {}",
        "metadata.name default-scheduler is the name kube-scheduler serves",
    ),
    (
        "a toleration operator the API server refuses",
        "kind: SchedulerProfile\nmetadata: {name: bad-toleration}\nspec: {tolerations: [{key: x, operator: Contains, value: 'y'}]}",
        "tolerations[].operator must be Exists or Equal",
    ),
    (
        "a selector that matches every node",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-all-nodes}\nspec: {profiles: [a], leafNodeSelector: {}}",
        "leafNodeSelector: {} selects every node of the cluster, host nodes included",
    ),
    (
        "an empty matchLabels matches every node too",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-all-nodes-2}\nspec: {profiles: [a], leafNodeSelector: {matchLabels: {}}}",
        "or set selectAllNodes: true if every node really is a leaf node",
    ),
    (
        "selectAllNodes with a selector",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-all-nodes-3}\nspec: {profiles: [a], selectAllNodes: true}",
        "selectAllNodes: true goes only with leafNodeSelector: {}",
    ),
    (
        "a misspelt field",
        "kind: SchedulerProfile\nmetadata: {name: bad-field}\nspec: {plugin: {}}",
        "unknown field \"spec.plugin\"",
    ),
    (
        "a score weight out of range",
        "kind: SchedulerProfile\nmetadata: {name: bad-weight}\nspec: {plugins: {score: {enabled: [{name: NodeResourcesFit, weight: 1000}]}}}",
        "should be less than or equal to 100",
    ),
    (
        "negative replicas",
        "kind: SchedulerProfile\nmetadata: {name: bad-negative}\nspec: {replicas: -1}",
        "replicas must be between 0 and 10",
    ),
    (
        "a log level above 10",
        "kind: SchedulerProfile\nmetadata: {name: bad-verbosity}\nspec: {logLevel: 11}",
        "should be less than or equal to 10",
    ),
    (
        "negative qps",
        "kind: SchedulerProfile\nmetadata: {name: bad-qps}\nspec: {clientConnection: {qps: -5}}",
        "should be greater than or equal to 0",
    ),
    (
        "an absurd qps",
        "kind: SchedulerProfile\nmetadata: {name: huge-qps}\nspec: {clientConnection: {qps: 1e300}}",
        "should be less than or equal to 100000",
    ),
    (
        "a lease of 292 years",
        "kind: SchedulerProfile\nmetadata: {name: bad-lease-duration}\nspec: {leaderElection: {leaseDuration: 2562047h}}",
        "leaderElection.leaseDuration must be between 1s and 1h",
    ),
    (
        "an image reference no runtime can pull",
        "kind: SchedulerProfile\nmetadata: {name: bad-reference}\nspec: {image: 'ksched:::bad'}",
        "image must be a container image reference",
    ),
    (
        "a cpu limit in words",
        "kind: SchedulerProfile\nmetadata: {name: bad-cpu}\nspec: {resources: {limits: {cpu: 1 core}}}",
        "resources.limits values must be quantities",
    ),
    (
        "workload-aware scheduling on a minor without it",
        "kind: SchedulerProfile\nmetadata: {name: bad-gangs}\nspec: {workloadAwareScheduling: true, kubernetesVersion: '1.36'}",
        "spec.workloadAwareScheduling needs Kubernetes 1.37 or later (the GenericWorkload feature gate): set spec.kubernetesVersion to 1.37",
    ),
    (
        "topology-aware scheduling without workload-aware scheduling",
        "kind: SchedulerProfile\nmetadata: {name: bad-topology}\nspec: {topologyAwareScheduling: true}",
        "spec.topologyAwareScheduling needs spec.workloadAwareScheduling (TopologyAwareWorkloadScheduling places the pod groups that GenericWorkload schedules): set spec.workloadAwareScheduling: true as well, or remove topologyAwareScheduling",
    ),
    (
        "topology-aware scheduling on a minor without it",
        "kind: SchedulerProfile\nmetadata: {name: bad-topology-minor}\nspec: {workloadAwareScheduling: true, topologyAwareScheduling: true, kubernetesVersion: '1.36'}",
        "spec.topologyAwareScheduling needs Kubernetes 1.37 or later (the TopologyAwareWorkloadScheduling feature gate): set spec.kubernetesVersion to 1.37",
    ),
    (
        "unknown placement mode",
        "kind: LeafClusterPolicy\nmetadata: {name: bad-placement}\nspec: {profiles: [a], placement: {mode: Anywhere}}",
        "spec.placement.mode: Unsupported value: \"Anywhere\": supported values: ",
    ),
];

#[test]
fn invalid_resources_are_rejected_with_our_messages() {
    let mut failures = Vec::new();
    for (what, body, message) in INVALID {
        let doc = format!("apiVersion: ksched.io/v1alpha1\n{body}\n");
        let (ok, out, err) = cp().kubectl_stdin(&["apply", "-f", "-"], &doc);
        if ok {
            failures.push(format!("{what}: accepted ({out})"));
        } else if !err.contains(message) {
            failures.push(format!("{what}: expected {message:?} in:\n{err}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(INVALID.len() >= 8);
}

/// `ksched render -f` (the CI gate of GitOps users) refuses what the API server refuses, with the
/// same words: the CRD's own schema and rules, read from the same generated CRDs.
#[test]
fn render_refuses_what_the_api_server_refuses() {
    let mut failures = Vec::new();
    for (what, body, message) in INVALID {
        let doc = format!("apiVersion: ksched.io/v1alpha1\n{body}\n");
        let out = std::process::Command::new(support::scheduler::ksched_bin())
            .args(["render", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(doc.as_bytes())?;
                }
                child.wait_with_output()
            })
            .expect("run ksched render");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            failures.push(format!("{what}: ksched render accepted it:\n{stderr}"));
        } else if !stderr.contains(message) {
            failures.push(format!("{what}: expected {message:?} in:\n{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_node_as_a_leaf_node_takes_an_explicit_opt_in() {
    let doc = "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata: {name: all-nodes}\nspec: {profiles: [a], leafNodeSelector: {}, selectAllNodes: true}\n";
    let (ok, out, err) = cp().kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], doc);
    assert!(ok, "{out}{err}");
}

fn header_columns(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn kubectl_get_schedulerprofiles_prints_the_declared_columns() {
    let cp = cp();
    let doc = "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: columns-sp}\nspec: {mode: Embedded}\n";
    let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], doc);
    assert!(ok, "{err}");
    let status = r#"{"status":{"ready":"1/1","replicas":1,"readyReplicas":1,"leader":"ksched-columns-sp-0","pendingPods":3,"configHash":"abc123","conditions":[{"type":"Ready","status":"True","reason":"Running","message":"scheduler is running","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    let (ok, _, err) = cp.kubectl_run(&[
        "patch",
        "schedulerprofile",
        "columns-sp",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ]);
    assert!(ok, "{err}");

    let (ok, out, err) = cp.kubectl_run(&["get", "schedulerprofiles", "columns-sp"]);
    assert!(ok, "{err}");
    assert_eq!(
        header_columns(&out),
        [
            "NAME", "MODE", "READY", "LEADER", "PENDING", "STATUS", "AGE"
        ],
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..6],
        [
            "columns-sp",
            "Embedded",
            "1/1",
            "ksched-columns-sp-0",
            "3",
            "Running"
        ],
        "{out}"
    );

    let (ok, out, err) = cp.kubectl_run(&["get", "sp", "columns-sp", "-o", "wide"]);
    assert!(ok, "{err}");
    assert_eq!(
        header_columns(&out),
        [
            "NAME",
            "MODE",
            "READY",
            "LEADER",
            "PENDING",
            "STATUS",
            "AGE",
            "CONFIG",
            "KUBERNETES",
            "MESSAGE"
        ],
        "{out}"
    );
    assert!(
        out.contains("abc123") && out.contains("scheduler is running"),
        "{out}"
    );
    let (ok, _, err) = cp.kubectl_run(&["delete", "sp", "columns-sp"]);
    assert!(ok, "{err}");
}

#[test]
fn kubectl_get_leafclusterpolicies_wide_prints_the_declared_columns() {
    let cp = cp();
    let doc = "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata: {name: columns-lcp}\nspec: {profiles: [hybrid], placement: {mode: PreferHost, weight: 30}}\n";
    let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], doc);
    assert!(ok, "{err}");
    let status = r#"{"status":{"leafNodes":2,"taintedNodes":2,"profiles":["hybrid"],"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"2 leaf nodes tainted","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    let (ok, _, err) = cp.kubectl_run(&[
        "patch",
        "lcp",
        "columns-lcp",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ]);
    assert!(ok, "{err}");

    let (ok, out, err) = cp.kubectl_run(&["get", "lcp", "columns-lcp", "-o", "wide"]);
    assert!(ok, "{err}");
    assert_eq!(
        header_columns(&out),
        [
            "NAME",
            "LEAF-NODES",
            "TAINTED",
            "MODE",
            "PROFILES",
            "READY",
            "AGE",
            "MESSAGE"
        ],
        "{out}"
    );
    let row = out.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        ["columns-lcp", "2", "2", "PreferHost"],
        "{out}"
    );
    assert!(cells[4].contains("hybrid") && cells[5] == "True", "{out}");
    assert!(row.contains("2 leaf nodes tainted"), "{out}");

    // Defaults from the schema: the Kosmos selector and taint.
    let (ok, out, err) = cp.kubectl_run(&["get", "lcp", "columns-lcp", "-o", "jsonpath={.spec.taint.key}={.spec.taint.value}:{.spec.taint.effect} {.spec.leafNodeSelector.matchLabels}"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("kosmos.io/node=true:NoSchedule"), "{out}");
    assert!(out.contains("\"kosmos.io/node\":\"true\""), "{out}");
    let (ok, _, err) = cp.kubectl_run(&["delete", "lcp", "columns-lcp"]);
    assert!(ok, "{err}");
}

#[tokio::test]
async fn podgroup_manifests_from_scheduler_plugins_apply_unchanged() {
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "pg").await;
    // As scheduler-plugins documents a PodGroup, minResources included.
    let doc = format!(
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: nginx\n  namespace: {ns}\nspec:\n  scheduleTimeoutSeconds: 10\n  minMember: 3\n  minResources:\n    cpu: \"3\"\n    memory: 1Gi\n"
    );
    let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], &doc);
    assert!(ok, "{err}");
    let api: kube::Api<ksched::api::PodGroup> = kube::Api::namespaced(client, &ns);
    let pg = api
        .get("nginx")
        .await
        .expect("get PodGroup through the typed API");
    assert_eq!(pg.spec.min_member, Some(3));
    assert_eq!(pg.spec.schedule_timeout_seconds, Some(10));
    let (ok, out, err) = cp.kubectl_run(&["get", "pg", "-n", &ns]);
    assert!(ok, "{err}");
    assert_eq!(
        header_columns(&out),
        [
            "NAME",
            "PHASE",
            "MINMEMBER",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
            "AGE"
        ],
        "{out}"
    );
}
