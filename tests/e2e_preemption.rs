//! DefaultPreemption in `ksched scheduler` against the real control plane with kwok nodes: a
//! high-priority pod evicts a low-priority one, is nominated to the freed node and binds there; a
//! `preemptionPolicy: Never` pod does not preempt. Tests run one at a time (they add nodes).

mod support;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config};
use support::wait::{node, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// The test's kwok node and PriorityClasses `<test>-low` (10), `<test>-high` (1000) and
/// `<test>-high-never` (1000, Never); all removed when dropped.
struct Fixture {
    test: String,
    node: String,
    _nodes: Nodes,
}

impl Fixture {
    async fn new(test: &str, client: &Client) -> Fixture {
        let nodes = Nodes::new(cp(), test).with_memory("4Gi");
        let node = nodes.add("a", "1", &[]);
        let classes: Api<PriorityClass> = Api::all(client.clone());
        for (suffix, value, policy) in [
            ("low", 10, "PreemptLowerPriority"),
            ("high", 1000, "PreemptLowerPriority"),
            ("high-never", 1000, "Never"),
        ] {
            let pc: PriorityClass = serde_json::from_value(json!({
                "metadata": {"name": format!("{test}-{suffix}")},
                "value": value,
                "preemptionPolicy": policy,
            }))
            .expect("priority class literal");
            classes
                .create(&PostParams::default(), &pc)
                .await
                .expect("create priority class");
        }
        Fixture {
            test: test.to_string(),
            node,
            _nodes: nodes,
        }
    }

    /// A 1-CPU pod of class `<test>-<class>` pinned to the test's node.
    fn pod(&self, name: &str, scheduler: &str, class: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "schedulerName": scheduler,
                "priorityClassName": format!("{}-{class}", self.test),
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": self.node},
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
            }
        }))
        .expect("pod literal")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let classes: Vec<String> = ["low", "high", "high-never"]
            .iter()
            .map(|s| format!("priorityclass/{}-{s}", self.test))
            .collect();
        let mut args = vec!["delete", "--wait=false", "--ignore-not-found"];
        args.extend(classes.iter().map(String::as_str));
        let _ = cp().kubectl_run(&args);
    }
}

/// Every `status.nominatedNodeName` each pod of `ns` showed, as a watch sees them.
fn record_nominations(client: &Client, ns: &str) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Ok(Some(ev)) = stream.try_next().await {
            if let Event::Apply(p) | Event::InitApply(p) = ev {
                let nominated = p
                    .status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.clone());
                if let Some(n) = nominated {
                    out.lock().push((p.name_any(), n));
                }
            }
        }
    });
    seen
}

/// Polls `check` on the pod until it returns `Some`, for up to 60s.
async fn wait_for<T>(
    pods: &Api<Pod>,
    name: &str,
    sched: &SchedulerProcess,
    what: &str,
    check: impl Fn(Option<&Pod>) -> Option<T>,
) -> T {
    let last = RefCell::new(None);
    poll(
        &format!("pod {name}: {what}"),
        Duration::from_secs(60),
        || format!("pod: {:?}\nscheduler log:\n{}", last.borrow(), sched.logs()),
        async || {
            let pod = pods.get_opt(name).await.expect("get pod");
            let found = check(pod.as_ref());
            *last.borrow_mut() = pod;
            found
        },
    )
    .await
}

fn node_name(p: Option<&Pod>) -> Option<String> {
    p.and_then(node)
}

fn pod_scheduled_message(p: Option<&Pod>) -> Option<String> {
    p.and_then(unschedulable_message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_pod_preempts_and_binds_to_the_freed_node() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "preempt").await;
    let fx = Fixture::new("preempt", &client).await;
    let sched = SchedulerProcess::start(cp, "preempt", &config("ksched-preempt", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nominations = record_nominations(&client, &ns);

    pods.create(
        &PostParams::default(),
        &fx.pod("low", "ksched-preempt", "low"),
    )
    .await
    .expect("create low");
    let node = wait_for(&pods, "low", &sched, "bound", node_name).await;
    assert_eq!(node, fx.node);
    let low_uid = pods.get("low").await.expect("low").uid();

    pods.create(
        &PostParams::default(),
        &fx.pod("high", "ksched-preempt", "high"),
    )
    .await
    .expect("create high");
    let bound = wait_for(&pods, "high", &sched, "bound", node_name).await;
    assert_eq!(bound, fx.node);

    // The victim was deleted (kwok finishes the graceful deletion), not merely evicted later.
    let low = pods.get_opt("low").await.expect("get low");
    assert!(
        low.as_ref().is_none_or(|p| p.uid() != low_uid),
        "the low-priority pod survived: {low:?}"
    );
    // The preemptor was nominated to the node before it bound.
    let seen = nominations.lock().clone();
    assert!(
        seen.contains(&("high".to_string(), fx.node.clone())),
        "high was never nominated to {}: {seen:?}\nscheduler log:\n{}",
        fx.node,
        sched.logs()
    );
    assert!(
        seen.iter().all(|(p, _)| p == "high"),
        "only the preemptor is nominated: {seen:?}"
    );
    let _ = pods.delete("high", &DeleteParams::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_policy_pod_does_not_preempt() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "never").await;
    let fx = Fixture::new("never", &client).await;
    let sched = SchedulerProcess::start(cp, "never", &config("ksched-never", None));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    pods.create(
        &PostParams::default(),
        &fx.pod("low", "ksched-never", "low"),
    )
    .await
    .expect("create low");
    wait_for(&pods, "low", &sched, "bound", node_name).await;
    pods.create(
        &PostParams::default(),
        &fx.pod("polite", "ksched-never", "high-never"),
    )
    .await
    .expect("create polite");
    let message = wait_for(
        &pods,
        "polite",
        &sched,
        "PodScheduled=False",
        pod_scheduled_message,
    )
    .await;
    assert!(
        message.starts_with("0/") && message.contains("1 Insufficient cpu"),
        "{message}"
    );
    assert!(
        message.ends_with(". preemption: not eligible due to preemptionPolicy=Never."),
        "{message}"
    );
    // A few more scheduling attempts' worth of time: nothing changes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let low = pods.get("low").await.expect("low survives");
    assert!(low.metadata.deletion_timestamp.is_none(), "{low:?}");
    assert_eq!(node_name(Some(&low)), Some(fx.node.clone()));
    let polite = pods.get("polite").await.expect("polite");
    assert_eq!(node_name(Some(&polite)), None);
    assert_eq!(
        polite.status.and_then(|s| s.nominated_node_name),
        None,
        "a Never pod is not nominated"
    );
}
