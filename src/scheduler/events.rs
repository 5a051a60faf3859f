//! What users see of a scheduling decision, in upstream's form: a `Scheduled` or `FailedScheduling`
//! event (events.k8s.io/v1, reporting controller = the scheduler name) and the pod's `PodScheduled`
//! condition.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::framework::api_calls::ApiEvent;

/// `PodScheduled=False` reason for pods no node fits.
pub(crate) const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// `PodScheduled=False` reason for internal errors.
pub(crate) const REASON_SCHEDULER_ERROR: &str = "SchedulerError";

/// How long an event can be continued as a series (client-go's events broadcaster: 6 minutes).
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Events remembered for series at most; beyond that a repeat becomes a new event.
const SERIES_CAPACITY: usize = 4096;

/// Events waiting to be written at most; beyond that new ones are dropped, as client-go's broadcaster
/// drops when its queue (also 1000) is full.
const EVENT_QUEUE: usize = 1000;
/// Event writes in flight at most. client-go's broadcaster writes one at a time; with 4 in flight a
/// burst of bindings left the queue hundreds of events behind (lost when the leader was killed); 16
/// keep up with the binding rate, and the events client's own token bucket still bounds the rate.
const EVENT_WRITES_IN_FLIGHT: usize = 16;

/// What users see of a pod's scheduling attempts: the scheduler tells its profile's reporter
/// how each attempt ended. [`PodReporter`] writes it to the API server.
#[async_trait::async_trait]
pub(crate) trait Reporter: Send + Sync {
    /// The pod was bound to `node`.
    fn scheduled(&self, pod: &Pod, node: &str);

    /// The attempt failed with `reason` (Unschedulable or SchedulerError) and `message`;
    /// `nominated_node` is where preemption nominated the pod (`""` clears a nomination).
    async fn failed(&self, pod: &Pod, reason: &str, message: &str, nominated_node: Option<&str>);

    /// The pod is about to be bound to `node` (PreBind will act or Permit waits).
    async fn nominate(&self, pod: &Pod, node: &str);
}

/// Publishes events and condition updates for one scheduler profile. Events go to the process's
/// [`EventQueue`], so a binding cycle never waits for one; the condition update goes through the
/// scheduler's API client.
#[derive(Clone)]
pub(crate) struct PodReporter {
    client: Client,
    events: EventQueue,
    controller: Arc<str>,
}

/// The events of every profile of the process, written by one task (client-go's broadcaster does
/// the same); the task ends when [`EventFlusher::flush`] is called or the last clone of the queue
/// is dropped.
#[derive(Clone)]
pub(crate) struct EventQueue(mpsc::Sender<PendingEvent>);

/// Ends the writer after it has written what is queued.
pub(crate) struct EventFlusher {
    close: tokio::sync::oneshot::Sender<()>,
    queued: mpsc::Sender<PendingEvent>,
    writer: tokio::task::JoinHandle<()>,
}

impl EventFlusher {
    /// Takes no more events and waits up to `within` for the queued ones to be written (on SIGTERM,
    /// within the grace period); how many were left unwritten.
    pub(crate) async fn flush(self, within: Duration) -> usize {
        let _ = self.close.send(());
        let queued = self.queued.max_capacity() - self.queued.capacity();
        if queued > 0 {
            debug!(queued, "writing the queued events before exit");
        }
        match tokio::time::timeout(within, self.writer).await {
            Ok(_) => 0,
            Err(_) => {
                let left = self.queued.max_capacity() - self.queued.capacity();
                warn!(left, "events not written within {within:?}; dropped");
                left
            }
        }
    }
}

struct PendingEvent {
    controller: Arc<str>,
    regarding: ObjectReference,
    /// The other object the event is about (a victim's preemptor).
    related: Option<ObjectReference>,
    type_: &'static str,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Writes queued events with the events client.
struct EventWriter {
    client: Client,
    instance: String,
    series: Mutex<SeriesCache>,
}

/// The events published in the last `SERIES_WINDOW`, by client-go's isomorphic key (object,
/// reason, action, reporter), kept small: a hash of the key, the event's name and its count.
#[derive(Default)]
struct SeriesCache {
    entries: HashMap<u64, SeriesEntry>,
    swept: Option<Instant>,
}

struct SeriesEntry {
    name: String,
    count: i32,
    last_seen: Instant,
}

impl SeriesCache {
    /// The count this occurrence makes (1 for a new event) and, for a repeat, the event's name.
    fn record(&mut self, key: u64, name: &str, now: Instant) -> (i32, Option<String>) {
        if self
            .swept
            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(60))
            || self.entries.len() >= SERIES_CAPACITY
        {
            self.entries
                .retain(|_, e| now.duration_since(e.last_seen) < SERIES_WINDOW);
            self.swept = Some(now);
        }
        if let Some(e) = self.entries.get_mut(&key)
            && now.duration_since(e.last_seen) < SERIES_WINDOW
        {
            e.count += 1;
            e.last_seen = now;
            return (e.count, Some(e.name.clone()));
        }
        if self.entries.len() < SERIES_CAPACITY {
            let entry = SeriesEntry {
                name: name.to_string(),
                count: 1,
                last_seen: now,
            };
            self.entries.insert(key, entry);
        }
        (1, None)
    }
}

fn series_key(controller: &str, reference: &ObjectReference, reason: &str, action: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (controller, reason, action).hash(&mut h);
    (
        &reference.kind,
        &reference.namespace,
        &reference.name,
        &reference.uid,
        &reference.resource_version,
    )
        .hash(&mut h);
    h.finish()
}

impl EventQueue {
    /// Queues an event a plugin recorded (see [`ApiEvent`]); dropped when the queue is full.
    pub(crate) fn record(&self, event: ApiEvent) {
        let pending = PendingEvent {
            controller: event.reporting_controller.into(),
            regarding: event.regarding,
            related: event.related,
            type_: event.type_,
            reason: event.reason,
            action: event.action,
            note: event.note,
        };
        if self.0.try_send(pending).is_err() {
            debug!(reason = event.reason, "event queue full; event dropped");
        }
    }

    /// Spawns the writer; `events_client` writes, `instance` is the reporting instance.
    pub(crate) fn start(events_client: Client, instance: &str) -> (Self, EventFlusher) {
        let (events, mut queue) = mpsc::channel::<PendingEvent>(EVENT_QUEUE);
        let (close, mut closing) = tokio::sync::oneshot::channel::<()>();
        let writer = Arc::new(EventWriter {
            client: events_client,
            instance: instance.to_string(),
            series: Mutex::default(),
        });
        // Once closed, the queue hands out what it holds and then ends the stream.
        // (Also when the flusher is dropped unused.)
        let mut closed = false;
        let pending = futures::stream::poll_fn(move |cx| {
            if !closed && closing.poll_unpin(cx).is_ready() {
                closed = true;
                queue.close();
            }
            queue.poll_recv(cx)
        });
        let writer = tokio::spawn(pending.for_each_concurrent(
            EVENT_WRITES_IN_FLIGHT,
            move |event| {
                let writer = writer.clone();
                async move { writer.write(event).await }
            },
        ));
        let flusher = EventFlusher {
            close,
            queued: events.clone(),
            writer,
        };
        (Self(events), flusher)
    }
}

impl PodReporter {
    /// `client` updates pod status; events of `scheduler_name` go to `events`.
    pub(crate) fn new(client: Client, events: EventQueue, scheduler_name: &str) -> Self {
        Self {
            client,
            events,
            controller: scheduler_name.into(),
        }
    }

    fn publish(
        &self,
        pod: &Pod,
        type_: &'static str,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let event = PendingEvent {
            controller: self.controller.clone(),
            regarding: pod.object_ref(&()),
            related: None,
            type_,
            reason,
            action,
            note,
        };
        if self.events.0.try_send(event).is_err() {
            debug!(reason, "event queue full; event dropped");
        }
    }

    async fn patch_status(&self, pod: &Pod, status: serde_json::Value, what: &str) {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if let Err(err) = pods
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({ "status": status })),
            )
            .await
        {
            warn!(pod = %format!("{ns}/{name}"), err = %crate::infra::logging::kube_error(&err), "updating {what} failed");
        }
    }
}

#[async_trait::async_trait]
impl Reporter for PodReporter {
    /// `Scheduled`: "Successfully assigned ns/name to node".
    fn scheduled(&self, pod: &Pod, node: &str) {
        let note = format!(
            "Successfully assigned {}/{} to {node}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        self.publish(pod, "Normal", "Scheduled", "Binding", note);
    }

    /// `FailedScheduling` with `message`, and `PodScheduled=False` with `reason` (Unschedulable or
    /// SchedulerError) and the same message; `nominated_node` is written to status.nominatedNodeName
    /// when preemption chose one. A pod that already shows all of it is not patched again.
    async fn failed(&self, pod: &Pod, reason: &str, message: &str, nominated_node: Option<&str>) {
        self.publish(
            pod,
            "Warning",
            "FailedScheduling",
            "Scheduling",
            message.to_string(),
        );
        if let Some(status) =
            pod_scheduled_patch(pod, reason, message, nominated_node, Timestamp::now())
        {
            self.patch_status(pod, status, "the PodScheduled condition")
                .await;
        }
    }

    /// Writes `node` to status.nominatedNodeName (unless the pod already shows it): upstream 1.36
    /// does so before binding when PreBind will act or Permit waits (NominatedNodeNameForExpectation).
    async fn nominate(&self, pod: &Pod, node: &str) {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        if current != Some(node) {
            self.patch_status(
                pod,
                json!({ "nominatedNodeName": node }),
                "nominatedNodeName",
            )
            .await;
        }
    }
}

/// The status a failed attempt writes, or none when the pod already shows it: upstream's `updatePod`
/// skips an unchanged condition, and the transition time moves only when the condition's status does.
fn pod_scheduled_patch(
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated_node: Option<&str>,
    now: Timestamp,
) -> Option<serde_json::Value> {
    let status = pod.status.as_ref();
    let old = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    let nomination_changed = nominated_node
        .is_some_and(|n| status.and_then(|s| s.nominated_node_name.as_deref()) != Some(n));
    let unchanged = old.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
    });
    if unchanged && !nomination_changed {
        return None;
    }
    let transition = match old {
        Some(c) if c.status == "False" && c.last_transition_time.is_some() => {
            json!(c.last_transition_time)
        }
        _ => json!(now.to_string()),
    };
    let mut patch = json!({
        "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": transition,
        }]
    });
    if let Some(node) = nominated_node {
        patch["nominatedNodeName"] = json!(node);
    }
    Some(patch)
}

impl EventWriter {
    /// Creates an events.k8s.io/v1 event, or continues the series of the same event published
    /// within the last 6 minutes (count and lastObservedTime), as client-go's broadcaster does.
    async fn write(&self, event: PendingEvent) {
        let PendingEvent {
            controller,
            regarding: reference,
            related,
            type_,
            reason,
            action,
            note,
        } = event;
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or(&controller),
            now.as_nanosecond()
        );
        let key = series_key(&controller, &reference, reason, action);
        let (count, existing) = self.series.lock().record(key, &name, Instant::now());
        let result = match existing {
            Some(existing) => {
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                };
                let patch = json!({ "series": series });
                events
                    .patch(&existing, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            None => {
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    },
                    event_time: Some(MicroTime(now)),
                    action: Some(action.into()),
                    reason: Some(reason.into()),
                    note: Some(note),
                    type_: Some(type_.into()),
                    regarding: Some(reference),
                    related,
                    reporting_controller: Some(controller.to_string()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Default::default()
                };
                events
                    .create(&PostParams::default(), &event)
                    .await
                    .map(drop)
            }
        };
        if let Err(err) = result {
            warn!(err = %crate::infra::logging::kube_error(&err), reason, "publishing an event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_pod(message: &str, transition: &str, nominated: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"nominatedNodeName": nominated, "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": message, "lastTransitionTime": transition}]}
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-11-21T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn an_unchanged_condition_is_not_written_again() {
        let pod = failed_pod("0/3 nodes are available", "2026-11-21T10:00:00Z", None);
        let patch = pod_scheduled_patch(
            &pod,
            "Unschedulable",
            "0/3 nodes are available",
            None,
            now(),
        );
        assert_eq!(patch, None);
    }

    #[test]
    fn a_new_message_keeps_the_transition_time() {
        let pod = failed_pod("0/3 nodes are available", "2026-11-21T10:00:00Z", None);
        let patch = pod_scheduled_patch(
            &pod,
            "Unschedulable",
            "0/4 nodes are available",
            None,
            now(),
        );
        let c = &patch.unwrap()["conditions"][0];
        assert_eq!(c["message"], "0/4 nodes are available");
        assert_eq!(c["lastTransitionTime"], "2026-11-21T10:00:00Z");
    }

    #[test]
    fn a_first_failure_or_a_new_nomination_is_written() {
        let fresh: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let patch = pod_scheduled_patch(&fresh, "Unschedulable", "m", None, now()).unwrap();
        assert_eq!(
            patch["conditions"][0]["lastTransitionTime"],
            "2026-11-21T12:00:00Z"
        );
        let pod = failed_pod("m", "2026-11-21T10:00:00Z", Some("n1"));
        assert_eq!(
            pod_scheduled_patch(&pod, "Unschedulable", "m", Some("n1"), now()),
            None
        );
        let moved = pod_scheduled_patch(&pod, "Unschedulable", "m", Some("n2"), now()).unwrap();
        assert_eq!(moved["nominatedNodeName"], "n2");
    }

    fn reference(name: &str, rv: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(rv.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_repeat_within_the_window_continues_the_series() {
        let mut cache = SeriesCache::default();
        let t0 = Instant::now();
        let key = series_key("s", &reference("p", "1"), "FailedScheduling", "Scheduling");
        assert_eq!(cache.record(key, "p.1", t0), (1, None));
        let again = cache.record(key, "p.2", t0 + Duration::from_secs(10));
        assert_eq!(again, (2, Some("p.1".to_string())));
        let third = cache.record(key, "p.3", t0 + Duration::from_secs(20));
        assert_eq!(third, (3, Some("p.1".to_string())));
    }

    #[test]
    fn a_repeat_after_the_window_is_a_new_event() {
        let mut cache = SeriesCache::default();
        let t0 = Instant::now();
        let key = series_key("s", &reference("p", "1"), "FailedScheduling", "Scheduling");
        cache.record(key, "p.1", t0);
        let later = t0 + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(cache.record(key, "p.2", later), (1, None));
    }

    #[test]
    fn other_objects_reasons_and_versions_are_other_events() {
        let base = series_key("s", &reference("p", "1"), "FailedScheduling", "Scheduling");
        let others = [
            series_key("s", &reference("q", "1"), "FailedScheduling", "Scheduling"),
            series_key("s", &reference("p", "2"), "FailedScheduling", "Scheduling"),
            series_key("s", &reference("p", "1"), "Scheduled", "Binding"),
            series_key(
                "other",
                &reference("p", "1"),
                "FailedScheduling",
                "Scheduling",
            ),
        ];
        assert!(others.iter().all(|k| *k != base));
    }

    /// A reporter never waits on the writer: beyond the queue's capacity, events are dropped (as
    /// client-go's broadcaster drops them), and the ones queued are the first ones.
    #[tokio::test]
    async fn a_full_queue_drops_events_instead_of_waiting() {
        let (sender, mut queued) = mpsc::channel::<PendingEvent>(EVENT_QUEUE);
        let unreachable = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let reporter = PodReporter::new(
            Client::try_from(unreachable).unwrap(),
            EventQueue(sender),
            "s",
        );
        let pod = failed_pod("m", "2026-11-21T12:00:00Z", None);
        for i in 0..EVENT_QUEUE + 10 {
            reporter.scheduled(&pod, &format!("n{i}"));
        }
        let mut notes = Vec::new();
        while let Ok(event) = queued.try_recv() {
            notes.push(event.note);
        }
        assert_eq!(notes.len(), EVENT_QUEUE);
        assert_eq!(notes[0], "Successfully assigned ns/p to n0");
        assert_eq!(
            notes[EVENT_QUEUE - 1],
            format!("Successfully assigned ns/p to n{}", EVENT_QUEUE - 1)
        );
    }

    /// An events API that takes 5 ms per write and counts them.
    #[derive(Clone, Default)]
    struct SlowEvents {
        written: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl tower::Service<http::Request<kube::client::Body>> for SlowEvents {
        type Response = http::Response<kube::client::Body>;
        type Error = std::convert::Infallible;
        type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: http::Request<kube::client::Body>) -> Self::Future {
            let written = self.written.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                written.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = json!({"metadata": {"name": "e"}}).to_string();
                Ok(http::Response::new(kube::client::Body::from(
                    body.into_bytes(),
                )))
            })
        }
    }

    /// On SIGTERM everything queued is written before the process exits (unwritten events of a
    /// burst were lost when the scheduler stopped).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flush_writes_every_queued_event() {
        let api = SlowEvents::default();
        let (queue, flusher) = EventQueue::start(Client::new(api.clone(), "default"), "me");
        let reporter = PodReporter::new(Client::new(api.clone(), "default"), queue, "s");
        let pod = failed_pod("m", "2026-11-21T12:00:00Z", None);
        for i in 0..500 {
            let mut pod = pod.clone();
            pod.metadata.name = Some(format!("p{i}"));
            reporter.scheduled(&pod, "n");
        }
        let left = flusher.flush(Duration::from_secs(30)).await;
        assert_eq!(left, 0);
        assert_eq!(api.written.load(std::sync::atomic::Ordering::SeqCst), 500);
        // The queue takes nothing more once flushed.
        reporter.scheduled(&pod, "n");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(api.written.load(std::sync::atomic::Ordering::SeqCst), 500);
    }

    #[test]
    fn memory_is_bounded() {
        let mut cache = SeriesCache::default();
        let t0 = Instant::now();
        for i in 0..(SERIES_CAPACITY as u64 + 100) {
            cache.record(i, "e", t0);
        }
        assert_eq!(cache.entries.len(), SERIES_CAPACITY);
        // Once the window passed, old entries make room again.
        let later = t0 + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(cache.record(u64::MAX, "new", later), (1, None));
        assert_eq!(cache.entries.len(), 1);
    }
}
