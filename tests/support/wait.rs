//! Polling with generous deadlines (these are not timing tests) and what tests poll for on pods.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

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
