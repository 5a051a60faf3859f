//! `ksched scheduler` against the real control plane with kwok nodes. The tests of this binary run
//! one at a time (they share the cluster's node list) and each removes its nodes when done.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};
use support::events::{about, at_least, regarding, with_reason as events};
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config};
use support::wait::{create, node_of};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// A pause pod of `scheduler` requesting `cpu`, with extra spec fields.
fn pod(name: &str, scheduler: &str, cpu: &str, extra_spec: Value) -> Pod {
    pause_pod(name, scheduler, cpu, &[], extra_spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_its_own_pods_and_leaves_other_schedulers_pods_alone() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "own").await;
    let nodes = Nodes::new(cp, "own");
    nodes.add("a", "4", &[]);
    let sched = SchedulerProcess::start(cp, "own", &config("ksched-own", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(&pods, &pod("mine", "ksched-own", "100m", json!({}))).await;
    create(
        &pods,
        &pod("theirs", "some-other-scheduler", "100m", json!({})),
    )
    .await;
    assert_eq!(sched.bound(&pods, "mine").await, "own-a");
    // The other scheduler's pod stays untouched: no node, no event from us.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_of(&pods, "theirs").await, None);
    let touched: Vec<_> = events(&client, &ns, "FailedScheduling")
        .await
        .into_iter()
        .chain(events(&client, &ns, "Scheduled").await)
        .filter(|e| regarding(e) == "theirs")
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    let scheduled = events(&client, &ns, "Scheduled").await;
    let mine: Vec<_> = scheduled
        .iter()
        .filter(|e| regarding(e) == "mine")
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(
        mine[0].note.as_deref(),
        Some(format!("Successfully assigned {ns}/mine to own-a").as_str())
    );
    assert_eq!(mine[0].reporting_controller.as_deref(), Some("ksched-own"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_taints_affinity_and_host_ports_decide_placement() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "place").await;
    let nodes = Nodes::new(cp, "place");
    let small = nodes.add("small", "1", &[]);
    let big = nodes.add("big", "8", &[]);
    let tainted = nodes.add("tainted", "8", &[]);
    nodes.taint(&tainted, "dedicated=gpu:NoSchedule");
    let zone_b = nodes.add("zoneb", "8", &[("topology.kubernetes.io/zone", "b")]);
    let sched = SchedulerProcess::start(cp, "place", &config("ksched-place", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let affinity = |op: &str, values: &[&str]| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": op, "values": values}]}
        ]}}}})
    };

    // Resources: 4 CPUs fit neither the 1-CPU node nor (untolerated) the tainted one; not zone b.
    assert_eq!(
        sched
            .create_bound(
                &pods,
                &pod("cpu", "ksched-place", "4", affinity("NotIn", &[&zone_b]))
            )
            .await,
        big
    );

    // Taints: tolerating the taint opens the tainted node, the only one left by the affinity.
    let mut spec = affinity("In", &[&tainted, &small]);
    spec["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    assert_eq!(
        sched
            .create_bound(&pods, &pod("tolerates", "ksched-place", "2", spec))
            .await,
        tainted
    );

    // Node affinity on a label.
    let spec = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}
    ]}}}});
    assert_eq!(
        sched
            .create_bound(&pods, &pod("zone", "ksched-place", "100m", spec))
            .await,
        zone_b
    );

    // Host ports: two pods asking for the same port on {big, zoneb} get one node each; a third waits.
    let with_port = || {
        let mut spec = affinity("In", &[&big, &zone_b]);
        spec["containers"] = json!([{"name": "c", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 9000, "hostPort": 9000}],
            "resources": {"requests": {"cpu": "100m"}}}]);
        spec
    };
    let first = sched
        .create_bound(&pods, &pod("port-1", "ksched-place", "100m", with_port()))
        .await;
    let second = sched
        .create_bound(&pods, &pod("port-2", "ksched-place", "100m", with_port()))
        .await;
    assert_ne!(first, second, "host port 9000 used twice on {first}");
    create(&pods, &pod("port-3", "ksched-place", "100m", with_port())).await;
    let message = wait_failed(&client, &ns, "port-3", &sched).await;
    assert_eq!(
        message,
        // Filters run in upstream's order (TaintToleration before NodeAffinity before NodePorts);
        // each node reports the first filter that rejected it. DefaultPreemption (default profile)
        // finds no lower-priority pods on the port-conflict nodes.
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    );
}

/// Waits for the pod's FailedScheduling event and returns its message, after checking the pod's
/// PodScheduled condition says the same.
async fn wait_failed(client: &Client, ns: &str, name: &str, sched: &SchedulerProcess) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let failed = about(client, ns, "FailedScheduling", name).await;
        let pod = pods.get(name).await.expect("get pod");
        let condition = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled");
        if let (Some(event), Some(condition)) = (failed.first(), condition) {
            assert_eq!(condition.status, "False");
            assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
            let note = event.note.clone().unwrap_or_default();
            assert_eq!(
                condition.message.as_deref(),
                Some(note.as_str()),
                "condition and event disagree"
            );
            assert_eq!(event.type_.as_deref(), Some("Warning"));
            return note;
        }
        assert!(
            Instant::now() < deadline,
            "no FailedScheduling for {name}; scheduler log:\n{}",
            sched.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_is_told_why_and_binds_once_a_fitting_node_joins() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "unsched").await;
    let nodes = Nodes::new(cp, "unsched");
    nodes.add("a", "1", &[]);
    nodes.add("b", "1", &[]);
    let control = nodes.add("cp", "8", &[]);
    nodes.taint(&control, "node-role.kubernetes.io/control-plane:NoSchedule");
    let sched = SchedulerProcess::start(cp, "unsched", &config("ksched-unsched", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(&pods, &pod("big", "ksched-unsched", "2", json!({}))).await;
    let message = wait_failed(&client, &ns, "big", &sched).await;
    assert_eq!(
        message,
        // 2 CPUs exceed the small nodes' allocatable: preemption cannot help anywhere (upstream).
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // A node that fits joins: the pod is retried on that event, long before the 5-minute flush.
    let started = Instant::now();
    let fits = nodes.add("c", "4", &[]);
    assert_eq!(sched.bound(&pods, "big").await, fits);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// Creates pods `<prefix>-0` to `<prefix>-4` of `ksched-ha`, then waits until `sched` bound each.
async fn create_then_bind(pods: &Api<Pod>, prefix: &str, sched: &SchedulerProcess) {
    for i in 0..5 {
        let name = format!("{prefix}-{i}");
        create(pods, &pod(&name, "ksched-ha", "100m", json!({}))).await;
    }
    for i in 0..5 {
        sched.bound(pods, &format!("{prefix}-{i}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_binds_and_a_standby_takes_over_after_sigkill() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "ha").await;
    let nodes = Nodes::new(cp, "ha");
    nodes.add("a", "8", &[]);
    nodes.add("b", "8", &[]);
    let config = config("ksched-ha", Some(&ns));
    let mut first = SchedulerProcess::start(cp, "ha-1", &config);
    let mut second = SchedulerProcess::start(cp, "ha-2", &config);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create_then_bind(&pods, "before", &first).await;
    let leader_identity = holder(&leases.get("ksched-ha").await.expect("lease"));
    assert!(!leader_identity.is_empty());
    let scheduled = at_least(&client, &ns, "Scheduled", 5).await;
    assert_eq!(scheduled.len(), 5);
    for e in &scheduled {
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some(leader_identity.as_str()),
            "a non-leader bound {}",
            regarding(e)
        );
    }

    // SIGKILL the leader: no release, the standby must wait out the lease and take over.
    let leader_is_first = first
        .logs()
        .contains(&format!("identity={leader_identity}"));
    let (leader, standby) = if leader_is_first {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    assert!(
        leader.logs().contains("successfully acquired lease"),
        "leader log:\n{}",
        leader.logs()
    );
    leader.kill();
    create_then_bind(&pods, "after", standby).await;
    let new_identity = holder(&leases.get("ksched-ha").await.expect("lease"));
    assert_ne!(new_identity, leader_identity);
    let scheduled = at_least(&client, &ns, "Scheduled", 10).await;
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for e in &scheduled {
        *per_pod.entry(regarding(e).to_string()).or_default() += 1;
        if regarding(e).starts_with("after-") {
            assert_eq!(e.reporting_instance.as_deref(), Some(new_identity.as_str()));
        }
    }
    assert_eq!(per_pod.len(), 10);
    assert!(
        per_pod.values().all(|n| *n == 1),
        "a pod was bound twice: {per_pod:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_configz_answer_over_https() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "http").await;
    let nodes = Nodes::new(cp, "http");
    nodes.add("a", "4", &[]);
    let sched = SchedulerProcess::start(cp, "http", &config("ksched-http", None));
    let ca = cp.dir.join("ca.crt");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match support::https::get(&ca, sched.secure_port, "/readyz").await {
            Ok((200, body)) => {
                assert_eq!(body, "ok");
                break;
            }
            other => assert!(
                Instant::now() < deadline,
                "/readyz: {other:?}\n{}",
                sched.logs()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        support::https::get(&ca, sched.secure_port, "/livez").await,
        Ok((200, "ok".to_string()))
    );
    assert_eq!(
        support::https::get(&ca, sched.secure_port, "/healthz").await,
        Ok((200, "ok".to_string()))
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    sched
        .create_bound(&pods, &pod("p", "ksched-http", "100m", json!({})))
        .await;
    // The admin's client certificate (system:masters) is authorized without a review.
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = support::https::As::Cert(&cert, &key);
    let (status, metrics) = support::https::get_as(&ca, sched.secure_port, "/metrics", admin)
        .await
        .expect("metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="ksched-http"} 1"#
        ),
        "{metrics}"
    );
    for name in [
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pending_pods",
        "scheduler_framework_extension_point_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    let (status, configz) = support::https::get_as(&ca, sched.secure_port, "/configz", admin)
        .await
        .expect("configz");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&configz).expect("configz is JSON");
    assert_eq!(
        v["componentconfig"]["profiles"][0]["schedulerName"],
        "ksched-http"
    );
}

/// The value of the sample `line_prefix` (a family with its labels) in the scheduler's `/metrics`.
async fn metric(cp: &ControlPlane, sched: &SchedulerProcess, line_prefix: &str) -> f64 {
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = support::https::As::Cert(&cert, &key);
    let (_, text) =
        support::https::get_as(&cp.dir.join("ca.crt"), sched.secure_port, "/metrics", admin)
            .await
            .expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line_prefix} missing:\n{text}"))
}

/// Queueing hints: a pod NodeAffinity rejected is not retried on node changes that cannot help it
/// (an annotation, an unrelated label), and is retried at once on the label it needs; a pod a
/// taint kept out is scheduled as soon as the taint goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_pods_are_retried_only_on_events_that_may_help_them() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "hints").await;
    let nodes = Nodes::new(cp, "hints").waiting_on_drop();
    let a = nodes.add("a", "4", &[]);
    let sched = SchedulerProcess::start(cp, "hints", &config("ksched-hints", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = |k: &str, v: &str| json!({"nodeSelector": {k: v}});
    create(
        &pods,
        &pod("picky", "ksched-hints", "100m", selector("e2e-hint", "yes")),
    )
    .await;
    wait_failed(&client, &ns, "picky", &sched).await;
    let attempts =
        r#"scheduler_schedule_attempts_total{result="unschedulable",profile="ksched-hints"} "#;
    let before = metric(cp, &sched, attempts).await;

    // Changes NodeAffinity did not register (an annotation) or whose hint says they cannot help
    // (a label the pod does not select on): no new attempt, even after its 1 s backoff.
    nodes.annotate(&a, "e2e-hint/unrelated=1");
    cp.kubectl_ok(&["label", "node", &a, "e2e-unrelated=1"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        metric(cp, &sched, attempts).await,
        before,
        "{}",
        sched.logs()
    );
    assert_eq!(node_of(&pods, "picky").await, None);

    // The label the pod needs: scheduled at once (the pool's flush is 5 minutes away).
    let started = Instant::now();
    cp.kubectl_ok(&["label", "node", &a, "e2e-hint=yes"]);
    assert_eq!(sched.bound(&pods, "picky").await, a);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );

    // A taint the pod does not tolerate, removed.
    let b = nodes.add("b", "4", &[]);
    nodes.taint(&b, "e2e-hint=no:NoSchedule");
    let hostname = selector("kubernetes.io/hostname", &b);
    create(&pods, &pod("tainted-out", "ksched-hints", "100m", hostname)).await;
    wait_failed(&client, &ns, "tainted-out", &sched).await;
    let started = Instant::now();
    nodes.taint(&b, "e2e-hint=no:NoSchedule-");
    assert_eq!(sched.bound(&pods, "tainted-out").await, b);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
