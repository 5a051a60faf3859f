//! Events (events.k8s.io/v1) of a test namespace.

use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};

/// The events of `ns` with `reason`.
pub async fn with_reason(client: &Client, ns: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The events of `ns` with `reason` about the object named `name`.
pub async fn about(client: &Client, ns: &str, reason: &str, name: &str) -> Vec<Event> {
    let mut events = with_reason(client, ns, reason).await;
    events.retain(|e| regarding(e) == name);
    events
}

/// The note of the newest event about `name` with `reason`.
pub async fn latest_note(client: &Client, ns: &str, reason: &str, name: &str) -> Option<String> {
    about(client, ns, reason, name)
        .await
        .into_iter()
        .max_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0))
        .and_then(|e| e.note)
}

/// The name of the object the event is about.
pub fn regarding(e: &Event) -> &str {
    e.regarding
        .as_ref()
        .and_then(|r| r.name.as_deref())
        .unwrap_or_default()
}

/// The events of `ns` with `reason` once there are at least `n` (events are written after the
/// binding they report, so a test that saw a pod bound waits for its event), within 30 s.
pub async fn at_least(client: &Client, ns: &str, reason: &str, n: usize) -> Vec<Event> {
    super::wait::poll(
        &format!("{n} {reason} events"),
        std::time::Duration::from_secs(30),
        String::new,
        async || {
            let events = with_reason(client, ns, reason).await;
            (events.len() >= n).then_some(events)
        },
    )
    .await
}
