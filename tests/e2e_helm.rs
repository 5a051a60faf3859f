//! The Helm chart charts/ksched with the testenv's helm (built from Go modules by hack/testenv):
//! it lints, its schema rejects bad values, it renders what the values say; and on the real control
//! plane (kube-controller-manager, upstream kube-scheduler as the default scheduler, kwok nodes)
//! `helm install --wait` brings the operator Deployment to Available, the operator pods (`ksched
//! operator` processes with the chart's RBAC, started and stopped as a kubelet would) reconcile a
//! profile, `helm upgrade` with a changed value rolls out, and `helm uninstall`, with profiles and
//! a tainting policy still there, finishes within a minute leaving nothing the operator added or
//! rendered (Helm keeps the CRDs, whose deletion then finishes too).

#[path = "support/argocd_lua.rs"]
mod argocd_lua;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;

use ksched::api::SchedulerProfile;
use ksched::operator::NoEmbeddedSchedulers;
use support::helm::{chart, helm, helm_ok};
use support::https::As;
use support::operator::{InProcessOperator, sample, wait_profile_condition};
use support::operator_pods::{Endpoint, HookPods, OperatorPods};
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
        ("serving.port=0", "/serving/port"),
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
    // Every endpoint over HTTPS (delegated authentication and authorization), none in plain HTTP.
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(c["ports"][0]["containerPort"], 8443);
    let args = c["args"].as_array().expect("args");
    for arg in ["--secure-port=8443", "--http-port=0"] {
        assert!(args.contains(&arg.into()), "{arg}: {args:?}");
    }
    assert!(
        !args
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.starts_with("--tls-")))
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let svc = find(&docs, "Service").expect("metrics Service");
    assert_eq!(svc["metadata"]["name"], "ksched-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "https");
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
        "serving.port=9443",
        "serving.certSecret=ksched-operator-tls",
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
    for arg in [
        "--secure-port=9443",
        "--tls-cert-file=/etc/ksched/tls/tls.crt",
        "--tls-private-key-file=/etc/ksched/tls/tls.key",
    ] {
        assert!(args.contains(&arg.into()), "{arg}: {args:?}");
    }
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "ksched-operator-tls"
    );
    assert!(args.contains(&"--leader-elect=false".into()), "{args:?}");
    assert_eq!(c["ports"][0]["containerPort"], 9443);
    // Scraped over HTTPS with Prometheus's own token.
    let monitor = find(&docs, "ServiceMonitor").expect("ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "https-metrics");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
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

/// Every object of the chart has a name no profile's rendered object can have (those start with
/// `ksched-profile-` or `ksched:profile:`); the objects of the operator's identity are held through
/// an uninstall; the uninstall hook's objects exist only while it runs; the admission policy is
/// bound.
#[test]
fn chart_names_are_its_own_and_it_holds_the_operators_identity() {
    let docs = template(&["metrics.serviceMonitor.enabled=true"]);
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            !name.starts_with(ksched::operator::PROFILE_PREFIX)
                && !name.starts_with(ksched::operator::CLUSTER_PROFILE_PREFIX),
            "{} {name}",
            d["kind"]
        );
    }
    let held: Vec<String> = docs
        .iter()
        .filter(|d| {
            d["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.contains(&ksched::operator::uninstall::HOLD_FINALIZER.into()))
        })
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            match d["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{} {ns}/{name}", d["kind"].as_str().unwrap_or_default()),
                None => format!("{} {name}", d["kind"].as_str().unwrap_or_default()),
            }
        })
        .collect();
    let mut expected: Vec<String> = ksched::operator::uninstall::Held::ALL
        .iter()
        .map(|h| h.describe(NS))
        .collect();
    let mut held_sorted = held.clone();
    held_sorted.sort();
    expected.sort();
    assert_eq!(held_sorted, expected);
    for d in docs
        .iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "uninstall")
    {
        let annotations = &d["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "pre-delete", "{d}");
        let policy = annotations["helm.sh/hook-delete-policy"]
            .as_str()
            .unwrap_or_default();
        for when in ["hook-succeeded", "hook-failed"] {
            assert!(policy.contains(when), "{}: {policy}", d["kind"]);
        }
    }
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the uninstall Job");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        600
    );
    assert!(find(&docs, "ValidatingAdmissionPolicy").is_some());
    let binding = find(&docs, "ValidatingAdmissionPolicyBinding").expect("policy binding");
    assert_eq!(binding["spec"]["validationActions"][0], "Deny");
    // Without the hook, nothing of it.
    let docs = template(&["uninstallHook.enabled=false"]);
    assert!(find(&docs, "Job").is_none());
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

/// `helm install --wait` of the chart with the values every e2e install needs: the uninstall
/// hook's pod left to the test's kubelet ([`HookPods`]), `extra` values.
fn install(cp: &ControlPlane, extra: &[&str]) {
    let chart = chart();
    let mut args = vec![
        "install",
        RELEASE,
        &chart,
        "--namespace",
        NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
        "--set-json",
        r#"uninstallHook.podAnnotations={"kwok.x-k8s.io/status":"custom"}"#,
    ];
    args.extend(extra);
    helm_ok(Some(cp), &args);
}

/// `helm uninstall --wait`; how long helm took.
fn uninstall(cp: &ControlPlane) -> Duration {
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
            "90s",
        ],
    );
    started.elapsed()
}

/// A token of a new ServiceAccount `name` in `ns`.
async fn token_of(client: &Client, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("sa");
    sas.create(&PostParams::default(), &sa)
        .await
        .expect("create ServiceAccount");
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": {"expirationSeconds": 600}
    }))
    .expect("token request");
    sas.create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("a token")
}

/// One release of the chart at a time on the shared control plane.
static RELEASE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_reconciles_upgrades_and_uninstalls_in_one_step() {
    let _release = RELEASE_LOCK.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let scenario = Scenario::nodes(cp, "helm");
    let _default_scheduler = default_scheduler(cp);
    let chart = chart();
    // A scraper's ServiceAccount, bound to ksched:metrics-reader by the chart.
    let scrapers = cp.namespace(&client, "helm-scrape").await;
    let reader = format!(
        r#"metrics.reader.subjects=[{{"kind":"ServiceAccount","name":"prometheus","namespace":"{scrapers}"}}]"#
    );

    // Install: helm waits (kstatus) until every object is current, the Deployment Available.
    install(cp, &["--set-json", &reader]);
    let dep = operator_deployment(&client)
        .await
        .expect("the operator Deployment");
    let status = dep.status.clone().unwrap_or_default();
    assert_eq!(status.available_replicas, Some(2), "{status:?}");

    // The operator pods run as `ksched operator` processes with the chart's arguments and RBAC
    // (kwok runs no containers): one leads on the chart's Lease, reconciles a profile, says so on
    // /metrics.
    let pods = OperatorPods::start(cp, client.clone(), NS);
    let hooks = HookPods::start(cp, client.clone(), NS);
    let diag = || diagnostics(format!("{}\n{}", pods.logs(), hooks.logs()));
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

    // Every endpoint over HTTPS, authorized: the probes' paths for anyone, /metrics only for a
    // caller granted it (anonymous: 403), with a token the operator reviews.
    let endpoint = pods.endpoint(&leader).expect("the leader's endpoint");
    assert!(matches!(endpoint, Endpoint::Https { .. }), "{endpoint:?}");
    assert_eq!(
        endpoint.get("/healthz", As::Anonymous).await,
        Some((200, "ok".into()))
    );
    let (code, body) = endpoint
        .get("/metrics", As::Anonymous)
        .await
        .expect("the operator answers");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let stranger = token_of(&client, &scrapers, "stranger").await;
    assert_eq!(
        endpoint
            .get("/metrics", As::Token(&stranger))
            .await
            .map(|r| r.0),
        Some(403)
    );
    let prometheus = token_of(&client, &scrapers, "prometheus").await;
    poll(
        "operator metrics, read with the scraper's token",
        Duration::from_secs(60),
        diag,
        async || {
            let (code, metrics) = endpoint.get("/metrics", As::Token(&prometheus)).await?;
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
    // No identity stands by for the uninstall.
    assert_eq!(
        uninstall_identities(&client).await,
        Vec::<String>::new(),
        "an uninstall identity exists before any uninstall"
    );

    // Upgrade with a changed value: a new ReplicaSet rolls out and the Deployment is Available;
    // the old pods' operators stop on SIGTERM as in any rollout (no uninstall).
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
            "--reuse-values",
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
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .is_some_and(|a| a.contains_key("e2e-rollout"))
            && rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    });
    assert!(rolled_out, "no ready ReplicaSet with the new pod template");
    pods.wait_leader(&client, NS).await;
    assert!(hooks.runs().is_empty(), "an upgrade ran the uninstall hook");

    // What the operator makes: a Deployment-mode and an Embedded profile, a policy tainting the
    // leaf nodes (one already carried the taint).
    scenario.apply(cp, &client, diag).await;

    // Uninstall in one step, profiles and policies still there: the hook stops the operator and
    // cleans up; within a minute nothing the operator added or rendered is left, every operator
    // process stopped by itself, and the profiles left behind say that nothing runs for them.
    let started = Instant::now();
    let helm_done = uninstall(cp);
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
    let runs = hooks.runs();
    assert_eq!(runs.len(), 1, "{}", hooks.logs());
    assert!(
        runs[0].status.is_some_and(|s| s.success()) && runs[0].log.contains("uninstalled:"),
        "{}",
        hooks.logs()
    );
    assert_left_behind_say_uninstalled(&client, &scenario).await;
    assert_eq!(uninstall_identities(&client).await, Vec::<String>::new());

    // Helm keeps the CRDs and the namespace: with no finalizer left, deleting them finishes.
    let crds = path_str(&repo_root().join("charts/ksched/crds")).to_string();
    cp.kubectl_ok(&["delete", "-f", &crds, "--wait", "--timeout=60s"]);
    cp.kubectl_ok(&["delete", "namespace", NS, "--wait", "--timeout=60s"]);
    scenario
        .wait_uninstalled(&client, NS, Kept::Nothing, Duration::from_secs(30), diag)
        .await;
}

/// The operator dead (every replica SIGKILLed, none started again): `helm uninstall` still leaves
/// nothing, by the chart's pre-delete hook, with no binary on a workstation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_uninstall_cleans_up_after_a_dead_operator() {
    let _release = RELEASE_LOCK.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let scenario = Scenario::nodes(cp, "helmdead");
    let _default_scheduler = default_scheduler(cp);
    // The CRDs: a first install creates them (and a test before may have deleted them).
    install(cp, &[]);
    let pods = OperatorPods::start(cp, client.clone(), NS);
    let hooks = HookPods::start(cp, client.clone(), NS);
    let diag = || diagnostics(format!("{}\n{}", pods.logs(), hooks.logs()));
    pods.wait_leader(&client, NS).await;
    scenario.apply(cp, &client, diag).await;
    pods.kill_all();

    let started = Instant::now();
    let helm_done = uninstall(cp);
    scenario
        .wait_uninstalled(
            &client,
            NS,
            Kept::CrdsAndNamespace,
            Duration::from_secs(60),
            diag,
        )
        .await;
    eprintln!(
        "helm uninstall with the operator dead: helm returned after {helm_done:?}, nothing of ksched left after {:?}",
        started.elapsed()
    );
    let runs = hooks.runs();
    assert!(
        runs.len() == 1 && runs[0].status.is_some_and(|s| s.success()),
        "{}",
        hooks.logs()
    );
    assert_left_behind_say_uninstalled(&client, &scenario).await;
    let crds = path_str(&repo_root().join("charts/ksched/crds")).to_string();
    cp.kubectl_ok(&["delete", "-f", &crds, "--wait", "--timeout=60s"]);
    cp.kubectl_ok(&["delete", "namespace", NS, "--wait", "--timeout=60s"]);
}

/// The objects of an uninstall identity (the hook's, the release identity), as "Kind name".
async fn uninstall_identities(client: &Client) -> Vec<String> {
    let mut found = Vec::new();
    for name in ["ksched-operator-uninstall", "ksched-operator-release"] {
        if Api::<ClusterRole>::all(client.clone())
            .get_opt(name)
            .await
            .expect("get ClusterRole")
            .is_some()
        {
            found.push(format!("ClusterRole {name}"));
        }
        for ns in [NS, "kube-system"] {
            if Api::<ServiceAccount>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .expect("get ServiceAccount")
                .is_some()
            {
                found.push(format!("ServiceAccount {ns}/{name}"));
            }
        }
    }
    found
}

/// The scenario's profiles, kept by Helm with the CRDs, say that ksched was uninstalled
/// (`Ready=False`, `Stalled=True`, `OperatorStopped`) and Argo CD reads them Degraded.
async fn assert_left_behind_say_uninstalled(client: &Client, scenario: &Scenario) {
    let api: Api<SchedulerProfile> = Api::all(client.clone());
    for name in [&scenario.deployment_profile, &scenario.embedded_profile] {
        let p = api.get(name).await.expect("the profile Helm kept");
        let conds = p
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let has = |t: &str, status: &str| {
            conds
                .iter()
                .any(|c| c.type_ == t && c.status == status && c.reason == "OperatorStopped")
        };
        assert!(
            has("Ready", "False") && has("Stalled", "True"),
            "{name}: {conds:?}"
        );
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Ready" && c.message.contains("ksched was uninstalled")),
            "{name}: {conds:?}"
        );
        support::fixtures::save_argocd_fixture("schedulerprofile-uninstalled", &p);
        let v = serde_json::to_value(&p).expect("json");
        let (health, _) = argocd_lua::health(&repo_root().join("manifests/argocd/health.lua"), &v);
        assert_eq!(health, "Degraded", "{name}");
        assert_eq!(p.status.as_ref().and_then(|s| s.leader.clone()), None);
    }
}
