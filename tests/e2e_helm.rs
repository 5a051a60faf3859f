//! The Helm chart charts/ksched with the testenv's helm (built from Go modules by hack/testenv):
//! it lints, its schema rejects bad values, it renders what the values say; and on the real control
//! plane (kube-controller-manager, upstream kube-scheduler as the default scheduler, kwok nodes)
//! `helm install --wait` brings the operator Deployment to Available, the operator pods (`ksched
//! operator` processes with the chart's RBAC, started and stopped as a kubelet would) reconcile a
//! profile, `helm upgrade` with a changed value rolls out, and `helm uninstall`, with profiles and
//! a tainting policy still there, finishes within a minute leaving nothing the operator added or
//! rendered (Helm keeps the CRDs, whose deletion then finishes too).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use ksched::operator::NoEmbeddedSchedulers;
use support::helm::{chart, helm, helm_ok};
use support::operator::{InProcessOperator, http_get, sample, wait_profile_condition};
use support::operator_pods::OperatorPods;
use support::scheduler::default_scheduler;
use support::uninstall::{Kept, Scenario, wait_finished};
use support::wait::{poll, tail};
use support::{Components, ControlPlane, control_plane, path_str, repo_root};

const NS: &str = "ksched-system";
const RELEASE: &str = "ksched";
const OPERATOR: &str = "ksched-operator";

/// `helm template` of the chart with `--set` values; the rendered objects.
fn template(sets: &[&str]) -> Vec<Value> {
    support::helm::template(NS, sets)
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind)
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

#[test]
fn chart_lints_and_its_version_is_the_crates() {
    helm_ok(None, &["lint", "--strict", &chart()]);
    let chart_yaml: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("charts/ksched/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart_yaml["version"], version, "Chart.yaml version");
    assert_eq!(chart_yaml["appVersion"], version, "Chart.yaml appVersion");
}

#[test]
fn chart_schema_rejects_bad_values_naming_them() {
    let chart = chart();
    for (set, expected) in [
        ("replicas=two", "/replicas"),
        ("bogus=1", "bogus"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("http.port=0", "/http/port"),
        (
            "leaderElection.leaseDuration=soon",
            "/leaderElection/leaseDuration",
        ),
        ("podAntiAffinity=hard", "/podAntiAffinity"),
        // The operator would log nothing: not a level.
        ("logLevel=verbose", "/logLevel"),
        (
            "metrics.prometheusRule.schedulingErrorRatio=5",
            "/metrics/prometheusRule/schedulingErrorRatio",
        ),
        // The operator would refuse to start (checked by templates/validate.yaml: JSON Schema
        // compares no two values).
        (
            "leaderElection.renewDeadline=15s",
            "leaderElection.renewDeadline (15s) must be shorter than leaderElection.leaseDuration (15s)",
        ),
        (
            "leaderElection.renewDeadline=1m30s",
            "leaderElection.renewDeadline (1m30s) must be shorter than leaderElection.leaseDuration (15s)",
        ),
        (
            "leaderElection.retryPeriod=9s",
            "leaderElection.renewDeadline (10s) must be longer than 1.2 x leaderElection.retryPeriod (9s)",
        ),
    ] {
        let (ok, _, err) = helm(None, &["template", RELEASE, &chart, "--set", set]);
        assert!(!ok, "--set {set} was accepted");
        assert!(err.contains(expected), "--set {set}: {err}");
    }
    // Replicas without leader election would all reconcile.
    let (ok, _, err) = helm(
        None,
        &[
            "template",
            RELEASE,
            &chart,
            "--set",
            "leaderElection.enabled=false",
        ],
    );
    assert!(!ok && err.contains("leaderElection.enabled"), "{err}");
}

#[test]
fn chart_renders_what_its_values_say() {
    let version = env!("CARGO_PKG_VERSION");
    let docs = template(&[]);
    let dep = find(&docs, "Deployment").expect("Deployment");
    assert_eq!(dep["metadata"]["name"], OPERATOR);
    assert_eq!(dep["metadata"]["namespace"], NS);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], OPERATOR);
    let c = &pod["containers"][0];
    let image = format!("ksched:{version}");
    assert_eq!(c["image"], image.as_str());
    assert_eq!(env_value(c, "KSCHED_IMAGE"), Some(image.as_str()));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert!(
        c["args"]
            .as_array()
            .expect("args")
            .contains(&"--http-port=8080".into())
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let svc = find(&docs, "Service").expect("metrics Service");
    assert_eq!(svc["metadata"]["name"], "ksched-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http");
    assert!(find(&docs, "ServiceMonitor").is_none());
    // Highly available by default: two replicas electing a leader, rolled one at a time, preferably
    // on different nodes, one kept through drains.
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(dep["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(
        dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    for arg in [
        "--leader-elect=true",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
    ] {
        assert!(
            c["args"].as_array().expect("args").contains(&arg.into()),
            "{arg}"
        );
    }
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        anti["podAffinityTerm"]["labelSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    let pdb = find(&docs, "PodDisruptionBudget").expect("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        assert!(find(&docs, kind).is_some(), "{kind} missing");
    }

    let docs = template(&[
        "image.repository=registry.example/ksched",
        "image.tag=9.9.9",
        "replicas=1",
        "leaderElection.enabled=false",
        "podAntiAffinity=none",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "resources.limits.memory=1Gi",
        "knownSchedulers[0]=volcano",
        "http.port=9090",
        "metrics.serviceMonitor.enabled=true",
    ]);
    let dep = find(&docs, "Deployment").expect("Deployment");
    assert_eq!(dep["spec"]["replicas"], 1);
    assert_eq!(dep["spec"]["strategy"]["type"], "Recreate");
    let pod = &dep["spec"]["template"]["spec"];
    assert!(pod["affinity"].is_null(), "{}", pod["affinity"]);
    assert_eq!(pod["nodeSelector"]["pool"], "system");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "registry.example/ksched:9.9.9");
    assert_eq!(
        env_value(c, "KSCHED_IMAGE"),
        Some("registry.example/ksched:9.9.9")
    );
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    let args = c["args"].as_array().expect("args");
    assert!(
        args.contains(&"--known-scheduler=volcano".into()),
        "{args:?}"
    );
    assert!(args.contains(&"--http-port=9090".into()), "{args:?}");
    assert!(args.contains(&"--leader-elect=false".into()), "{args:?}");
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let monitor = find(&docs, "ServiceMonitor").expect("ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    let pdb = find(&docs, "PodDisruptionBudget").expect("PodDisruptionBudget");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );

    // The rendered schedulers' image can differ from the operator's.
    let docs = template(&["schedulerImage=registry.example/ksched-scheduler:1"]);
    let c = &find(&docs, "Deployment").expect("Deployment")["spec"]["template"]["spec"]["containers"]
        [0];
    assert_eq!(c["image"], format!("ksched:{version}").as_str());
    assert_eq!(
        env_value(c, "KSCHED_IMAGE"),
        Some("registry.example/ksched-scheduler:1")
    );
}

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// Without permissions the operator is live but not ready, /readyz says why, and it still stops
/// when asked (its watches never synced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_without_permissions_is_not_ready_says_why_and_stops() {
    let cp = cp();
    let mut operator = InProcessOperator::start(
        cp,
        "helm-nobody",
        "system:serviceaccount:helm-nobody:nobody",
        Arc::new(NoEmbeddedSchedulers),
    );
    let diag = || diagnostics(tail(&operator.logs(), 40));
    assert_eq!(operator.get("/healthz").await, (200, "ok".into()));
    let why = poll(
        "operator /readyz says why it is not ready",
        Duration::from_secs(60),
        diag,
        async || {
            let (code, body) = operator.get("/readyz").await;
            (code == 503 && body.contains("forbidden")).then_some(body)
        },
    )
    .await;
    assert!(why.contains("ksched.io"), "{why}");
    operator
        .stop_within(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&operator.logs(), 20)));
}

fn diagnostics(logs: String) -> String {
    let (_, objects, _) = cp().kubectl_run(&[
        "get",
        "sp,lcp,deploy,rs,pods,clusterroles",
        "-A",
        "-o",
        "wide",
    ]);
    let (_, events, _) = cp().kubectl_run(&["get", "events", "-n", NS]);
    format!("--- objects\n{objects}\n--- events in {NS}\n{events}\n{logs}")
}

async fn operator_deployment(client: &Client) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(OPERATOR)
        .await
        .expect("get the operator Deployment")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_reconciles_upgrades_and_uninstalls_in_one_step() {
    let cp = cp();
    let client = cp.client().await;
    let scenario = Scenario::nodes(cp, "helm");
    let _default_scheduler = default_scheduler(cp);
    let chart = chart();

    // Install: helm waits (kstatus) until every object is current, the Deployment Available.
    helm_ok(
        Some(cp),
        &[
            "install",
            RELEASE,
            &chart,
            "--namespace",
            NS,
            "--create-namespace",
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    let dep = operator_deployment(&client)
        .await
        .expect("the operator Deployment");
    let status = dep.status.clone().unwrap_or_default();
    assert_eq!(status.available_replicas, Some(2), "{status:?}");

    // The operator pods run as `ksched operator` processes with the chart's RBAC (kwok runs no
    // containers): one leads on the chart's Lease, reconciles a profile, says so on /metrics.
    let pods = OperatorPods::start(cp, client.clone(), NS);
    let diag = || diagnostics(pods.logs());
    let leader = pods.wait_leader(&client, NS).await;
    cp.apply(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: helm-plain\nspec: {}\n",
    );
    // Everything applied and the Deployment ready; no scheduler takes the Lease (kwok runs no
    // containers), which the operator reads with the chart's permissions and says.
    wait_profile_condition(&client, "helm-plain", "NoLeader", diag, |c| {
        c.type_ == "Ready"
            && c.reason == "NoLeader"
            && c.message.contains("1 of 1 scheduler replicas ready")
    })
    .await;
    let http = pods.http(&leader).expect("the leader's endpoint");
    poll(
        "operator metrics",
        Duration::from_secs(60),
        diag,
        async || {
            let (code, metrics) = http_get(http, "/metrics").await;
            let caught_up = sample(
                &metrics,
                r#"ksched_operator_queue_depth{controller="schedulerprofile"} "#,
            ) == Some(0.0);
            let leads = sample(
                &metrics,
                r#"leader_election_master_status{name="ksched-operator"} "#,
            ) == Some(1.0);
            let reconciled = sample(
                &metrics,
                r#"controller_runtime_reconcile_total{controller="schedulerprofile",result="success"} "#,
            )
            .is_some_and(|n| n >= 1.0);
            (code == 200 && caught_up && leads && reconciled).then_some(())
        },
    )
    .await;
    // The leader prepared the uninstall identity.
    let kit = |c: Client| async move {
        Api::<ClusterRole>::all(c)
            .get_opt(ksched::operator::uninstall::KIT_NAME)
            .await
            .expect("get ClusterRole")
    };
    poll(
        "the uninstall identity",
        Duration::from_secs(60),
        diag,
        async || kit(client.clone()).await.map(|_| ()),
    )
    .await;

    // Upgrade with a changed value: a new ReplicaSet rolls out and the Deployment is Available;
    // the old pods' operators stop on SIGTERM as in any rollout (no uninstall: the identity stays).
    let before = dep.metadata.generation.expect("generation");
    helm_ok(
        Some(cp),
        &[
            "upgrade",
            RELEASE,
            &chart,
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "5m",
            "--set",
            "podAnnotations.e2e-rollout=upgraded",
        ],
    );
    let dep = operator_deployment(&client)
        .await
        .expect("the operator Deployment");
    let generation = dep.metadata.generation.expect("generation");
    assert!(generation > before, "generation {before} -> {generation}");
    let template =
        serde_json::to_value(&dep).expect("Deployment as JSON")["spec"]["template"].clone();
    assert_eq!(
        template["metadata"]["annotations"]["e2e-rollout"], "upgraded",
        "{template}"
    );
    let status = dep.status.clone().unwrap_or_default();
    assert_eq!(status.observed_generation, Some(generation), "{status:?}");
    assert_eq!(status.updated_replicas, Some(2), "{status:?}");
    assert_eq!(status.available_replicas, Some(2), "{status:?}");
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .expect("list ReplicaSets");
    let rolled_out = sets.items.iter().any(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .is_some_and(|a| a.contains_key("e2e-rollout"))
            && rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    });
    assert!(rolled_out, "no ready ReplicaSet with the new pod template");
    pods.wait_leader(&client, NS).await;
    assert!(
        kit(client.clone()).await.is_some(),
        "a rollout removed the uninstall identity"
    );

    // What the operator makes: a Deployment-mode and an Embedded profile, a policy tainting the
    // leaf nodes (one already carried the taint).
    scenario.apply(cp, &client, diag).await;

    // Uninstall in one step, profiles and policies still there: within a minute nothing the
    // operator added or rendered is left, every operator process stopped by itself.
    let started = Instant::now();
    helm_ok(
        Some(cp),
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "60s",
        ],
    );
    let helm_done = started.elapsed();
    let took = wait_finished(
        &scenario,
        &pods,
        &client,
        NS,
        Kept::CrdsAndNamespace,
        started,
        diag,
    )
    .await;
    eprintln!(
        "helm uninstall: helm returned after {helm_done:?}, nothing of ksched left after {took:?}"
    );

    // Helm keeps the CRDs and the namespace: with no finalizer left, deleting them finishes.
    let crds = path_str(&repo_root().join("charts/ksched/crds")).to_string();
    cp.kubectl_ok(&["delete", "-f", &crds, "--wait", "--timeout=60s"]);
    cp.kubectl_ok(&["delete", "namespace", NS, "--wait", "--timeout=60s"]);
    scenario
        .wait_uninstalled(&client, NS, Kept::Nothing, Duration::from_secs(30), diag)
        .await;
}
