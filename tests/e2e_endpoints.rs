//! The scheduler's HTTPS endpoint beside upstream kube-scheduler's, on the real control plane:
//! delegated authentication and authorization (anonymous, a bad token, a ServiceAccount token with
//! and without `ksched:metrics-reader`, the admin's client certificate), the always-allowed health
//! paths, `/healthz/leaderElection`, CPU profiles, heap profiles `go tool pprof` reads; every `scheduler_*` metric family of
//! kube-scheduler's `/metrics` present in ksched's (or listed below with the reason); and every
//! flag of `kube-scheduler --help` accepted by `ksched scheduler`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::fixtures::pause_pod;
use support::https::{As, get_as, get_bytes, request};
use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, config, ksched_bin, kube_scheduler_command};
use support::wait::{create, create_bound, poll, wait_bound};
use support::{Components, ControlPlane, control_plane, free_port, path_str, repo_root};

fn cp() -> &'static ControlPlane {
    control_plane(Components::API_ONLY)
}

/// Polls `path` of the endpoint on `port` as `who` until it answers `status`; the body.
async fn answers(
    port: u16,
    path: &str,
    who: As<'_>,
    status: u16,
    logs: impl Fn() -> String,
) -> String {
    let ca = cp().dir.join("ca.crt");
    poll(
        &format!("{path} answering {status}"),
        Duration::from_secs(60),
        logs,
        async || match get_as(&ca, port, path, who).await {
            Ok((s, body)) if s == status => Some(body),
            _ => None,
        },
    )
    .await
}

/// The `ksched:metrics-reader` ClusterRole as the chart ships it (from `manifests/install`).
fn metrics_reader_role() -> String {
    let rbac = std::fs::read_to_string(repo_root().join("manifests/install/rbac.yaml"))
        .expect("manifests/install/rbac.yaml");
    rbac.split("\n---")
        .find(|doc| doc.contains("name: ksched:metrics-reader"))
        .expect("ksched:metrics-reader in the install manifests")
        .to_string()
}

/// A token of a new ServiceAccount `name` in `ns`.
async fn service_account_token(client: &kube::Client, ns: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    accounts
        .create(&PostParams::default(), &sa)
        .await
        .expect("create ServiceAccount");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let answer: TokenRequest = accounts
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest");
    answer.status.expect("token").token.expect("token")
}

/// `/debug/pprof/heap` as kube-scheduler serves it, behind the same authorization as the CPU
/// profile: a gzipped pprof protobuf that `go tool pprof` reads, with ksched's functions named.
/// On glibc's malloc (`KSCHED_ALLOCATOR=glibc`) the answer says how to get one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heap_profile_is_one_go_tool_pprof_reads() {
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "heap").await;
    let mut yaml = config("ksched-heap", Some(&ns));
    yaml.push_str("enableProfiling: true\n");
    let sched = SchedulerProcess::start(cp, "heap", &yaml);
    let port = sched.secure_port;
    let logs = || sched.logs();
    let ca = cp.dir.join("ca.crt");
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = As::Cert(&cert, &key);
    answers(port, "/readyz", As::Anonymous, 200, logs).await;
    answers(port, "/debug/pprof/heap", As::Anonymous, 403, logs).await;
    let (status, profile) = get_bytes(&ca, port, "/debug/pprof/heap", admin)
        .await
        .expect("heap profile");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&profile));
    let file = cp.dir.join("heap.pb.gz");
    std::fs::write(&file, &profile).expect("write the profile");
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    let out = Command::new(&go)
        .args(["tool", "pprof", "-top", "-sample_index=inuse_space"])
        .arg(&file)
        .env("GOTOOLCHAIN", "local")
        .env("PPROF_TMPDIR", &cp.dir)
        .output()
        .expect("run go tool pprof (Go builds the testenv)");
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof: {}\n{top}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(top.contains("Type: inuse_space"), "{top}");
    assert!(
        top.contains("ksched::"),
        "no ksched function in the profile:\n{top}"
    );

    // On glibc's malloc there is no heap profile; the answer says how to get one.
    let mut yaml = config("ksched-heap-glibc", Some(&ns));
    yaml.push_str("enableProfiling: true\n");
    let glibc =
        SchedulerProcess::start_with_env(cp, "heap-glibc", &yaml, &[("KSCHED_ALLOCATOR", "glibc")]);
    let logs = || glibc.logs();
    answers(glibc.secure_port, "/readyz", As::Anonymous, 200, logs).await;
    let (status, body) = get_bytes(&ca, glibc.secure_port, "/debug/pprof/heap", admin)
        .await
        .expect("heap profile");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("KSCHED_ALLOCATOR=jemalloc"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_authenticates_and_authorizes_as_kube_schedulers() {
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "authz").await;
    let mut yaml = config("ksched-authz", Some(&ns));
    yaml.push_str("enableProfiling: true\n");
    let sched = SchedulerProcess::start(cp, "authz", &yaml);
    let port = sched.secure_port;
    let logs = || sched.logs();

    // Health paths are always allowed, also to anonymous requests.
    answers(port, "/readyz", As::Anonymous, 200, logs).await;
    answers(port, "/healthz", As::Anonymous, 200, logs).await;
    answers(port, "/livez", As::Anonymous, 200, logs).await;
    // Everything else needs authorization.
    let forbidden = answers(port, "/metrics", As::Anonymous, 403, logs).await;
    assert!(
        forbidden.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{forbidden}"
    );
    answers(port, "/healthz/leaderElection", As::Anonymous, 403, logs).await;
    answers(port, "/configz", As::Anonymous, 403, logs).await;
    // A token the API server does not know: 401.
    let unauthorized = answers(port, "/metrics", As::Token("not-a-token"), 401, logs).await;
    assert!(
        unauthorized.contains(r#""reason":"Unauthorized""#),
        "{unauthorized}"
    );

    // A ServiceAccount bound to ksched:metrics-reader may read /metrics; another may not.
    cp.apply(&metrics_reader_role());
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {ns}-reader\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: ksched:metrics-reader\nsubjects:\n- kind: ServiceAccount\n  name: reader\n  namespace: {ns}\n"
    );
    cp.apply(&binding);
    let reader = service_account_token(&client, &ns, "reader").await;
    let nobody = service_account_token(&client, &ns, "nobody").await;
    let metrics = answers(port, "/metrics", As::Token(&reader), 200, logs).await;
    for family in [
        "leader_election_master_status",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    let denied = answers(port, "/metrics", As::Token(&nobody), 403, logs).await;
    assert!(
        denied.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{denied}"
    );
    // The reader's role grants /metrics only.
    answers(port, "/configz", As::Token(&reader), 403, logs).await;

    // The admin's certificate (system:masters) needs no review.
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = As::Cert(&cert, &key);
    let le = answers(port, "/healthz/leaderElection", admin, 200, logs).await;
    assert_eq!(le, "ok");
    let verbose = answers(port, "/readyz?verbose", admin, 200, logs).await;
    assert!(
        verbose.contains("[+]leaderElection ok") && verbose.contains("[+]sched-handler-sync ok"),
        "{verbose}"
    );
    // A CPU profile in pprof's protobuf form.
    let ca = cp.dir.join("ca.crt");
    let started = Instant::now();
    let (status, profile) = get_bytes(&ca, port, "/debug/pprof/profile?seconds=1", admin)
        .await
        .expect("profile");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&profile));
    assert!(started.elapsed() >= Duration::from_secs(1));
    let text = String::from_utf8_lossy(&profile);
    assert!(
        text.contains("samples") && text.contains("nanoseconds"),
        "not a pprof profile"
    );
    answers(
        port,
        "/debug/pprof/profile?seconds=1",
        As::Token(&reader),
        403,
        logs,
    )
    .await;

    // `PUT /debug/flags/v` changes the running scheduler's verbosity (profiling on, as upstream).
    let put_v = async |level: &str, who: As<'_>| {
        let (status, body) = request(&ca, port, "PUT", "/debug/flags/v", level, who)
            .await
            .expect("PUT /debug/flags/v");
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    assert_eq!(put_v("0", As::Token(&reader)).await.0, 403);
    let (status, body) = put_v("x", admin).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = get_as(&ca, port, "/debug/flags/v", admin)
        .await
        .expect("GET");
    assert_eq!(status, 406);
    // A pod no node can take (tests sharing the control plane add nodes) is logged as left
    // unschedulable at -v=4, and not at 0.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let unscheduled = async |name: &str| {
        let nowhere = json!({"nodeSelector": {"ksched.io/test-no-such-node": "true"}});
        create(
            &pods,
            &pause_pod(name, "ksched-authz", "100m", &[], nowhere),
        )
        .await;
        poll(
            &format!("{name} marked unschedulable"),
            Duration::from_secs(60),
            logs,
            async || {
                let p = pods.get(name).await.ok()?;
                support::wait::unschedulable_message(&p)
            },
        )
        .await;
    };
    assert_eq!(
        put_v("0", admin).await,
        (
            200,
            "successfully set klog.logging.verbosity to 0".to_string()
        )
    );
    unscheduled("quiet").await;
    assert_eq!(put_v("4", admin).await.0, 200);
    unscheduled("verbose").await;
    let log = logs();
    let waiting = |pod: &str| {
        let pod = format!("{ns}/{pod}");
        log.lines()
            .any(|l| l.contains("unable to schedule pod; waiting") && l.contains(&pod))
    };
    assert!(!waiting("quiet"), "logged at -v=0:\n{log}");
    assert!(waiting("verbose"), "not logged at -v=4:\n{log}");
}

/// kube-scheduler families ksched does not export, and why.
const NOT_IN_KSCHED: &[(&str, &str)] = &[
    (
        "scheduler_pending_async_api_calls",
        "SchedulerAsyncAPICalls (off by default in 1.36 and 1.37) is not implemented: ksched makes its API calls from the binding cycle and the failure handler",
    ),
    (
        "scheduler_async_api_call_execution",
        "SchedulerAsyncAPICalls is not implemented (see above)",
    ),
    (
        "scheduler_async_api_call_execution_duration_seconds",
        "SchedulerAsyncAPICalls is not implemented (see above)",
    ),
];

/// Families ksched exports once something happens that this test may or may not cause, and why
/// (neither missing nor stale when absent).
const EXPORTED_ON_EVENT: &[(&str, &str)] = &[(
    "scheduler_batch_cache_flushed",
    "ksched counts a batch dropped when one existed (here: when some store, such as another test's namespace, changed during the one cycle); upstream counts pod_not_batchable for every pod its default spread constraints leave unsigned",
)];

/// The families of kube-scheduler's own exposition that ksched answers for: the scheduler's,
/// component-base's (`kubernetes_build_info`, `kubernetes_feature_enabled`), the process's and
/// client-go's informers' (from 1.37). Go runtime, workqueue and the API libraries' families are
/// not compared.
const COMPARED_PREFIXES: &[&str] = &["scheduler_", "kubernetes_", "process_", "informer_"];

/// The compared families ([`COMPARED_PREFIXES`]) with at least one sample in an exposition (text
/// 0.0.4 or OpenMetrics), counters without their `_total`.
fn compared_families(exposition: &str) -> BTreeSet<String> {
    let mut declared: Vec<String> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| n.strip_suffix("_total").unwrap_or(n).to_string())
        .collect();
    // Longest first, so `x_bucket` is matched to `x` and not to a shorter family.
    declared.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut with_samples = BTreeSet::new();
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        if let Some(family) = declared.iter().find(|f| {
            name == f.as_str()
                || ["_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_prefix(f.as_str()) == Some(s))
        }) && COMPARED_PREFIXES.iter().any(|p| family.starts_with(p))
        {
            with_samples.insert(family.clone());
        }
    }
    with_samples
}

/// The bucket bounds of each histogram family of an exposition (`+Inf` aside), as numbers: Go
/// writes `1e-05` where Rust writes `0.00001`.
fn bucket_bounds(exposition: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let mut bounds: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((family, labels)) = line.split_once("_bucket{") else {
            continue;
        };
        let Some(le) = labels
            .split_once("le=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(le, _)| le)
        else {
            continue;
        };
        if let Ok(bound) = le.parse::<f64>()
            && bound.is_finite()
        {
            bounds
                .entry(family.to_string())
                .or_default()
                .insert(bound.to_bits());
        }
    }
    bounds
}

/// The value of the sample `series` (name and labels, as ksched writes them) in `exposition`.
fn sample_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Upstream kube-scheduler (the testenv's, 1.37.2) and ksched (emulating the API server's minor)
/// each schedule a pod on the same control plane; each of upstream's compared families
/// ([`COMPARED_PREFIXES`]) is in ksched's `/metrics`, or in [`NOT_IN_KSCHED`] (and an
/// entry there that ksched does export fails the test, so the list stays true) or
/// [`EXPORTED_ON_EVENT`], with upstream's
/// buckets; and the pod ksched scheduled left samples for its profile at every extension point
/// of its scheduling and binding cycles, and for each plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kube_scheduler_metric_family_is_exported_or_listed() {
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "parity").await;
    let nodes = Nodes::new(cp, "parity");
    // Two nodes, so that scoring runs (a single feasible node is taken without it).
    nodes.create("a", "4", &[]);
    nodes.create("b", "4", &[]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let upstream_config = cp.dir.join("parity-upstream.yaml");
    // kube-scheduler ignores --kubeconfig with --config: the file names it.
    let upstream_yaml = format!(
        "{}clientConnection:\n  kubeconfig: {}\n",
        config("upstream-parity", None),
        path_str(&cp.kubeconfig)
    );
    std::fs::write(&upstream_config, upstream_yaml).unwrap();
    let upstream_port = free_port();
    let mut cmd = kube_scheduler_command(cp);
    cmd.args([
        format!("--config={}", path_str(&upstream_config)),
        format!("--secure-port={upstream_port}"),
        format!("--tls-cert-file={}", cp.dir.join("apiserver.crt").display()),
        format!(
            "--tls-private-key-file={}",
            cp.dir.join("apiserver.key").display()
        ),
        "--v=1".into(),
    ]);
    let upstream = LoggedChild::spawn(cmd, cp.dir.join("parity-upstream.log"));
    let ksched = SchedulerProcess::start(cp, "parity", &config("ksched-parity", None));
    create(
        &pods,
        &pause_pod("up", "upstream-parity", "100m", &[], json!({})),
    )
    .await;
    wait_bound(&pods, "up", Duration::from_secs(60), || upstream.logs()).await;
    create_bound(
        &pods,
        &pause_pod("ours", "ksched-parity", "100m", &[], json!({})),
        || ksched.logs(),
    )
    .await;
    // An unschedulable pod for each, so failure families have samples too.
    for (name, scheduler) in [("up-big", "upstream-parity"), ("ours-big", "ksched-parity")] {
        create(&pods, &pause_pod(name, scheduler, "64", &[], json!({}))).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = As::Cert(&cert, &key);
    let upstream_metrics = answers(upstream_port, "/metrics", admin, 200, || upstream.logs()).await;
    let ours = answers(ksched.secure_port, "/metrics", admin, 200, || ksched.logs()).await;

    let upstream_families = compared_families(&upstream_metrics);
    let our_families = compared_families(&ours);
    assert!(
        upstream_families.len() > 10,
        "too few upstream families: {upstream_families:?}"
    );
    let missing: Vec<&String> = upstream_families
        .iter()
        .filter(|f| {
            !our_families.contains(*f)
                && !NOT_IN_KSCHED
                    .iter()
                    .chain(EXPORTED_ON_EVENT)
                    .any(|(n, _)| n == f)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "kube-scheduler families missing from ksched's /metrics: {missing:?}\nours: {our_families:?}"
    );
    let stale: Vec<&str> = NOT_IN_KSCHED
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| our_families.contains(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "listed as not exported, but exported: {stale:?}"
    );
    eprintln!(
        "metric families: upstream {} compared families, ksched exports {} of them",
        upstream_families.len(),
        upstream_families.intersection(&our_families).count(),
    );

    // The same buckets, bound for bound, for every histogram both export.
    let (upstream_buckets, our_buckets) = (bucket_bounds(&upstream_metrics), bucket_bounds(&ours));
    let mut compared = 0;
    for (family, bounds) in &upstream_buckets {
        if let Some(our_bounds) = our_buckets.get(family) {
            assert_eq!(
                our_bounds, bounds,
                "{family}: buckets differ from upstream's"
            );
            compared += 1;
        }
    }
    assert!(compared >= 8, "too few histograms compared: {compared}");

    // The scheduled pod's cycles, for the profile; every plugin at Filter was evaluated and, in
    // the process's first cycle (always sampled), timed.
    let profile = r#"profile="ksched-parity""#;
    for point in [
        "PreFilter",
        "Filter",
        "PreScore",
        "Score",
        "Reserve",
        "Permit",
        "PreBind",
        "Bind",
    ] {
        let series = format!(
            "scheduler_framework_extension_point_duration_seconds_count{{extension_point=\"{point}\",status=\"Success\",{profile}}}"
        );
        assert!(
            sample_value(&ours, &series).is_some_and(|n| n >= 1.0),
            "{series} missing:\n{ours}"
        );
    }
    // Plugins with no PreFilter, or one that does not skip a plain pod (NodeAffinity skips it).
    for plugin in ["NodeResourcesFit", "TaintToleration", "NodeUnschedulable"] {
        let evaluated = format!(
            "scheduler_plugin_evaluation_total{{plugin=\"{plugin}\",extension_point=\"Filter\",{profile}}}"
        );
        assert!(
            sample_value(&ours, &evaluated).is_some_and(|n| n >= 1.0),
            "{evaluated} missing:\n{ours}"
        );
        let timed = format!(
            "scheduler_plugin_execution_duration_seconds_count{{plugin=\"{plugin}\",extension_point=\"Filter\",status=\"Success\"}}"
        );
        assert!(
            sample_value(&ours, &timed).is_some_and(|n| n >= 1.0),
            "{timed} missing:\n{ours}"
        );
    }
    let sli = r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"}"#;
    assert_eq!(sample_value(&ours, sli), Some(1.0), "{sli}:\n{ours}");
}

/// Every flag `kube-scheduler --help` lists is one `ksched scheduler` accepts; and a command line
/// as kube-scheduler Deployments pass it runs (here up to `--write-config-to`), with the
/// overrides applied and one warning naming the flags without effect.
#[test]
fn every_kube_scheduler_flag_is_accepted() {
    let bin = support::testenv_bin_dir().join("kube-scheduler");
    let help = Command::new(&bin)
        .arg("--help")
        .output()
        .expect("kube-scheduler --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let upstream: BTreeSet<String> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-v, ")
                .or_else(|| l.strip_prefix("-h, "))
                .unwrap_or(l);
            let flag = l.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    assert!(upstream.len() > 50, "{upstream:?}");
    let ours = Command::new(ksched_bin())
        .args(["scheduler", "--help"])
        .output()
        .expect("ksched scheduler --help");
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let missing: Vec<&String> = upstream
        .iter()
        .filter(|f| !ours.contains(&format!("--{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "kube-scheduler flags ksched lacks: {missing:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("written.yaml");
    let run = Command::new(ksched_bin())
        .args([
            "scheduler",
            "--authentication-kubeconfig=/nonexistent",
            "--authorization-kubeconfig=/nonexistent",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--leader-elect-resource-name=copied",
            "--kube-api-qps=77",
            "--logging-format=json",
            "--feature-gates=OpportunisticBatching=false,SchedulerAsyncPreemption=false",
            "--vmodule=foo=2",
            "--profiling",
            "-v=2",
        ])
        .arg(format!("--write-config-to={}", out.display()))
        .output()
        .expect("ksched scheduler");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("leaderElect: false"), "{written}");
    assert!(written.contains("resourceName: copied"), "{written}");
    assert!(
        written.contains("qps: 77"),
        "without --config the deprecated flag applies: {written}"
    );
    assert!(!written.contains("OpportunisticBatching"), "{written}");
    let warnings: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| {
            v["msg"]
                .as_str()
                .is_some_and(|m| m.contains("have no effect in ksched"))
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one JSON warning naming them:\n{stderr}");
    let flags = warnings[0]["flags"].as_str().unwrap_or_default();
    assert!(
        flags.contains("--vmodule") && flags.contains("SchedulerAsyncPreemption=false"),
        "{flags}"
    );
    assert!(
        !flags.contains("OpportunisticBatching"),
        "honoured: {flags}"
    );
}
