//! Coscheduling (gang scheduling with PodGroups) with seed 002's configuration, unchanged, on the
//! real control plane with kwok nodes.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;

use k8s_openapi::api::core::v1::Pod;
use ksched::api::PodGroup;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, ksched_bin, validate};
use support::wait::{create, node_of, wait_bound, wait_log};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// Seed 002's scheduler-config.yaml, verbatim (comments included).
const SEED_002: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1beta2
kind: KubeSchedulerConfiguration
leaderElection:
  # 使能Leader选举
  leaderElect: true
clientConnection:
  # 指定了kubeconfig文件路径
  kubeconfig: /etc/kubernetes/scheduler.conf
profiles:
# 默认调度器，启动如下内容
- schedulerName: default-scheduler
  plugins:
    # Required，启用 Coscheduling 的队列中 pod 的排序算法，只能有一种算法实现
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
    preFilter:
      enabled:
      - name: Coscheduling
    postFilter:
      enabled:
      - name: Coscheduling
    # Required
    permit:
      enabled:
      - name: Coscheduling
    # Required，
    reserve:
      enabled:
      - name: Coscheduling
  # 插件的配置
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 10
      deniedPGExpirationTimeSeconds: 3
"#;

#[test]
fn seed_002_validates() {
    let stdout = validate("seed-002", SEED_002);
    assert!(stdout.contains("Coscheduling"), "{stdout}");
    assert!(stdout.contains("permitWaitingTimeSeconds: 10"), "{stdout}");
}

/// Applies ksched's CRDs (PodGroup among them) and waits until they are served.
fn install_crds(cp: &ControlPlane) {
    let out = std::process::Command::new(ksched_bin())
        .arg("crds")
        .output()
        .expect("ksched crds");
    assert!(out.status.success());
    let (ok, _, err) = cp.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &String::from_utf8_lossy(&out.stdout),
    );
    assert!(ok, "{err}");
    let (ok, _, err) = cp.kubectl_run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podgroups.scheduling.x-k8s.io",
    ]);
    assert!(ok, "{err}");
}

async fn pod_group(client: &Client, ns: &str, name: &str, spec: serde_json::Value) {
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("podgroup literal");
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("create podgroup");
}

/// Every phase the PodGroup goes through (each change once), recorded from a watch so transient
/// phases are seen too.
fn watch_phases(groups: Api<PodGroup>, name: &str) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(groups, config).applied_objects());
        while let Some(Ok(pg)) = stream.next().await {
            if let Some(phase) = pg.status.and_then(|s| s.phase) {
                let mut seen = out.lock();
                if seen.last() != Some(&phase) {
                    seen.push(phase);
                }
            }
        }
    });
    seen
}

/// Waits until the recorded phases end with `until` (at most `within`).
async fn wait_phase(seen: &Mutex<Vec<String>>, until: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let now = seen.lock().clone();
        if now.last().map(String::as_str) == Some(until) || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn bound_count(pods: &Api<Pod>, names: &[&str]) -> usize {
    let mut n = 0;
    for name in names {
        if node_of(pods, name).await.is_some() {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_binds_all_or_nothing_with_seed_002() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    install_crds(cp);
    let client = cp.client().await;
    let ns = cp.namespace(&client, "gang").await;
    let nodes = Nodes::new(cp, "gang");
    // Room for two 1-CPU members.
    nodes.add("a", "2", &[]);
    let sched = SchedulerProcess::start(cp, "seed-002", SEED_002);
    let logs = || sched.logs();
    wait_log(logs, "starting to schedule").await;
    assert!(
        sched
            .logs()
            .contains("deniedPGExpirationTimeSeconds is deprecated"),
        "{}",
        sched.logs()
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    pod_group(&client, &ns, "gang", json!({"minMember": 3})).await;
    let names = ["gang-0", "gang-1", "gang-2"];
    let label = [("scheduling.x-k8s.io/pod-group", "gang")];
    // Two members only: the group is Pending (PreFilter: not enough siblings).
    for name in &names[..2] {
        create(
            &pods,
            &pause_pod(name, "default-scheduler", "1", &label, json!({})),
        )
        .await;
    }
    let phases = watch_phases(groups.clone(), "gang");
    let seen = wait_phase(&phases, "Pending", Duration::from_secs(30)).await;
    assert_eq!(seen, ["Pending"], "{}", sched.logs());

    // The third member: members get assumed and wait at Permit, the third does not fit, the group
    // is rejected as a whole. Nothing binds, for longer than permitWaitingTimeSeconds.
    create(
        &pods,
        &pause_pod(names[2], "default-scheduler", "1", &label, json!({})),
    )
    .await;
    wait_phase(&phases, "Scheduling", Duration::from_secs(30)).await;
    let quiet_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < quiet_until {
        assert_eq!(bound_count(&pods, &names).await, 0, "{}", sched.logs());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = sched.logs();
    assert!(
        log.contains("optimistic rejection in PostFilter")
            || log.contains("rejection in Unreserve"),
        "{log}"
    );

    // Room for the third: all three bind.
    nodes.add("b", "2", &[]);
    for name in names {
        wait_bound(&pods, name, Duration::from_secs(90), || sched.logs()).await;
    }
    let seen = wait_phase(&phases, "Running", Duration::from_secs(60)).await;
    let status = groups
        .get("gang")
        .await
        .expect("podgroup")
        .status
        .expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"), "{seen:?}");
    assert_eq!(
        (status.running, status.succeeded, status.failed),
        (Some(3), Some(0), Some(0))
    );
    assert!(status.schedule_start_time.is_some());
    // The stages, in order. The status loop writes the state it finds (at most one pass per
    // 200 ms): a stage that lasts less (PreScheduling here, Scheduled) may be passed over.
    let stages: Vec<&str> = seen.iter().map(String::as_str).collect();
    let order = [
        "Pending",
        "PreScheduling",
        "Scheduling",
        "Scheduled",
        "Running",
    ];
    let rank = |s: &str| order.iter().position(|o| *o == s);
    assert!(
        stages.windows(2).all(|w| rank(w[0]) < rank(w[1])),
        "stages out of order: {stages:?}"
    );
    for want in ["Pending", "Scheduling", "Running"] {
        assert!(stages.contains(&want), "stage {want} missing in {stages:?}");
    }

    // A group with every member but more CPU than the cluster has: PreFilter turns it away
    // before Permit, so it stays PreScheduling.
    pod_group(
        &client,
        &ns,
        "big",
        json!({"minMember": 2, "minResources": {"cpu": "100"}}),
    )
    .await;
    let big_phases = watch_phases(groups.clone(), "big");
    let big_label = [("scheduling.x-k8s.io/pod-group", "big")];
    for name in ["big-0", "big-1"] {
        create(
            &pods,
            &pause_pod(name, "default-scheduler", "1", &big_label, json!({})),
        )
        .await;
    }
    let seen = wait_phase(&big_phases, "PreScheduling", Duration::from_secs(30)).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("PreScheduling"),
        "{}",
        sched.logs()
    );
    let big = groups
        .get("big")
        .await
        .expect("podgroup")
        .status
        .expect("status");
    assert_eq!((big.running, big.schedule_start_time), (Some(0), None));
    drop(nodes);
}
