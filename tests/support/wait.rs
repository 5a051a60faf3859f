//! Polling with generous deadlines (these are not timing tests) and what tests poll for on pods.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;

/// How often [`poll`] asks again.
pub const EVERY: Duration = Duration::from_millis(200);

/// Calls `probe` every [`EVERY`] until it returns `Some`, for up to `within`; panics with `what`
/// and `diagnostics()` then.
pub async fn poll<T>(
    what: &str,
    within: Duration,
    diagnostics: impl Fn() -> String,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}\n{}",
            diagnostics()
        );
        tokio::time::sleep(EVERY).await;
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub async fn create(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod)
        .await
        .expect("create pod");
}

/// The node the pod is bound to.
pub fn node(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

/// The node pod `name` is bound to (`None` also when it does not exist).
pub async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    node(&pods.get(name).await.ok()?)
}

/// The message of the pod's `PodScheduled=False` condition.
pub fn unschedulable_message(p: &Pod) -> Option<String> {
    let conditions = p.status.as_ref()?.conditions.as_ref()?;
    let c = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    c.message.clone()
}

/// Every `PodScheduled=False` message the pods of `pods` showed, as (pod, message), in the order a
/// watch saw them: a message a pod shows only briefly (a preemptor binds once its victim is gone)
/// is recorded too, where polling the pod could miss it. Returns once the watch has listed.
pub async fn record_unschedulable_messages(pods: Api<Pod>) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let (listed, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut stream = watcher::watcher(pods, watcher::Config::default()).boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                Event::InitDone => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                }
                Event::Apply(p) | Event::InitApply(p) => {
                    if let Some(message) = unschedulable_message(&p) {
                        let mut out = out.lock();
                        let entry = (p.name_any(), message);
                        if !out.contains(&entry) {
                            out.push(entry);
                        }
                    }
                }
                Event::Delete(_) | Event::Init => {}
            }
        }
    });
    ready.await.expect("the pod watch listed");
    seen
}

/// Polls until `name` is bound (within `within`); its node. `logs` explains a failure.
pub async fn wait_bound(
    pods: &Api<Pod>,
    name: &str,
    within: Duration,
    logs: impl Fn() -> String,
) -> String {
    poll(&format!("pod {name} bound"), within, logs, async || {
        node_of(pods, name).await
    })
    .await
}

/// Creates `pod` and polls until it is bound (within 60s); its node. `logs` explains a failure.
pub async fn create_bound(pods: &Api<Pod>, pod: &Pod, logs: impl Fn() -> String) -> String {
    create(pods, pod).await;
    let name = pod.metadata.name.as_deref().expect("pod name");
    wait_bound(pods, name, Duration::from_secs(60), logs).await
}

/// Waits (up to 60s) until `logs()` contains `needle`.
pub async fn wait_log(logs: impl Fn() -> String, needle: &str) {
    poll(
        &format!("{needle:?} logged"),
        Duration::from_secs(60),
        &logs,
        async || logs().contains(needle).then_some(()),
    )
    .await
}
