//! The queue's tests: ordering, backoff, gates, and which events move which pods.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Node;

use super::*;
use crate::framework::events::{EVENT_NODE_ADD, QueueingHintMap};
use crate::framework::interface::ClusterEventWithHint;
use crate::framework::testing::hints::node_obj;
use crate::framework::testing::{NodeBuilder, PodBuilder};
use crate::framework::types::{ActionType, EventResource, GroupBackoff, QueueingHint, objects};

const PROFILE: &str = "default-scheduler";

fn by_priority() -> LessFn {
    Arc::new(|a: &QueuedPodInfo, b: &QueuedPodInfo| {
        let (pa, pb) = (a.pod_info.priority(), b.pod_info.priority());
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    })
}

/// The events of the test profile:
/// - `NodeAffinity`: a node added, or relabeled to carry `fits=yes` (its hint);
/// - `NodeResourcesFit`: a node added (no hint);
/// - `Pending`: a node added (a plugin rejecting with Pending);
/// - `Gate`: the pod's own relabeling (the PreEnqueue plugin of the gate tests).
fn hints() -> HashMap<String, Arc<QueueingHintMap>> {
    let mut m = QueueingHintMap::default();
    let node = |a| ClusterEvent::new(EventResource::Node, a);
    m.register(
        "NodeAffinity",
        vec![ClusterEventWithHint::with_hint(
            node(ActionType::ADD | ActionType::UPDATE_NODE_LABEL),
            |_, old, new| {
                let (_, new) = objects::<Node>(old, new)?;
                let fits = new
                    .and_then(|n| n.metadata.labels.as_ref())
                    .is_some_and(|l| l.get("fits").map(String::as_str) == Some("yes"));
                Ok(if fits {
                    QueueingHint::Queue
                } else {
                    QueueingHint::QueueSkip
                })
            },
        )],
    );
    m.register(
        "NodeResourcesFit",
        vec![ClusterEventWithHint::new(node(ActionType::ADD))],
    );
    m.register(
        "Pending",
        vec![ClusterEventWithHint::new(node(ActionType::ADD))],
    );
    m.register(
        "Gate",
        vec![ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::Pod,
            ActionType::UPDATE_POD_LABEL,
        ))],
    );
    HashMap::from([(PROFILE.to_string(), Arc::new(m))])
}

fn queue_with(gate: PreEnqueueFn, initial: Duration, max: Duration) -> SchedulingQueue {
    SchedulingQueue::new(by_priority(), gate, initial, max).with_queueing_hints(hints())
}

fn queue_with_gate(gate: PreEnqueueFn) -> SchedulingQueue {
    queue_with(gate, Duration::from_secs(1), Duration::from_secs(10))
}

fn queue() -> SchedulingQueue {
    queue_with_gate(Arc::new(|_: &PodInfo| None))
}

fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    Arc::new(PodInfo::from_pod(
        PodBuilder::new(name)
            .uid(name)
            .scheduler_name(PROFILE)
            .priority(priority)
            .build(),
    ))
}

async fn pop_name(q: &SchedulingQueue) -> (String, QueuedPodInfo) {
    let qpi = q.pop().await.expect("queue open");
    (qpi.pod_info.name().to_string(), qpi)
}

/// The next pod, back from an attempt that `plugin` rejected.
async fn rejected(q: &SchedulingQueue, plugin: &str) -> QueuedPodInfo {
    let (_, mut qpi) = pop_name(q).await;
    qpi.unschedulable_plugins.insert(plugin.into());
    qpi
}

fn counts(active: usize, backoff: usize, unschedulable: usize, gated: usize) -> QueueCounts {
    QueueCounts {
        active,
        backoff,
        unschedulable,
        gated,
    }
}

fn node_event(action: ActionType) -> ClusterEvent {
    ClusterEvent::new(EventResource::Node, action)
}

fn node(labels: &[(&str, &str)]) -> Option<EventObject> {
    let mut b = NodeBuilder::new("n");
    for (k, v) in labels {
        b = b.label(k, v);
    }
    Some(node_obj(b.build()))
}

#[tokio::test]
async fn active_queue_pops_in_queue_sort_order() {
    let q = queue();
    q.add(pod("low", 1));
    q.add(pod("high", 100));
    q.add(pod("mid", 50));
    q.add(pod("mid2", 50));
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(pop_name(&q).await.0);
    }
    assert_eq!(order, ["high", "mid", "mid2", "low"]);
}

/// A member its group's cycle sent back backs off by the group's failed cycles, not its own
/// attempts, up to max * sqrt(members) (upstream's backoff of a QueuedPodGroupInfo); its
/// siblings, sent back by the same cycle, end their backoff in the same second.
#[test]
fn a_group_backs_off_as_one_entity_by_its_failed_cycles_and_size() {
    let q = queue(); // initial 1s, max 10s
    let t = Instant::now();
    let member = |name: &str, attempts: u32, failed_cycles: u32, size: usize| {
        let mut qpi = QueuedPodInfo::new(pod(name, 0), t);
        qpi.attempts = attempts;
        qpi.group_backoff = Some(GroupBackoff {
            failed_cycles,
            size,
        });
        qpi
    };
    let backoff = |qpi: &QueuedPodInfo| (q.backoff_expiry(qpi) - t).as_secs();
    // A member that joined late (1 attempt) backs off as its group, at its second failure.
    assert_eq!(backoff(&member("late", 1, 2, 4)), 2);
    assert_eq!(backoff(&member("early", 7, 2, 4)), 2);
    // 2^5 = 32s is over the group's maximum: 10s * sqrt(4) = 20s, not a pod's 10s.
    assert_eq!(backoff(&member("a", 6, 6, 4)), 20);
    let mut alone = QueuedPodInfo::new(pod("alone", 0), t);
    alone.attempts = 6;
    assert_eq!(backoff(&alone), 10);
    // After a cycle that scheduled the group, its members left behind do not back off.
    assert!(!q.is_backing_off(&member("rest", 3, 0, 1)));
}

#[tokio::test]
async fn unschedulable_pod_waits_for_a_cluster_event() {
    let q = queue();
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeResourcesFit").await;
    q.add_unschedulable_if_not_present(qpi);
    assert_eq!(q.counts(), counts(0, 0, 1, 0));
    q.flush();
    assert_eq!(
        q.counts().unschedulable,
        1,
        "no event, no retry before 5 minutes"
    );
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    // Still inside its 1s backoff: it goes to backoffQ, not straight to active.
    assert_eq!(q.counts(), counts(0, 1, 0, 0));
}

#[tokio::test]
async fn a_pod_moves_only_on_its_rejecting_plugins_events_when_their_hint_says_queue() {
    let q = queue();
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeAffinity").await;
    q.add_unschedulable_if_not_present(qpi);
    // Events NodeAffinity did not register: an annotation, a condition heartbeat change.
    for a in [
        ActionType::UPDATE_NODE_ANNOTATION,
        ActionType::UPDATE_NODE_CONDITION,
    ] {
        q.move_all_to_active_or_backoff(&node_event(a), node(&[]), node(&[]));
    }
    // A registered event whose hint says QueueSkip.
    let label = node_event(ActionType::UPDATE_NODE_LABEL);
    q.move_all_to_active_or_backoff(&label, node(&[]), node(&[("fits", "no")]));
    assert_eq!(q.counts(), counts(0, 0, 1, 0), "no move");
    // The relabeling that may help.
    q.move_all_to_active_or_backoff(&label, node(&[]), node(&[("fits", "yes")]));
    assert_eq!(q.counts(), counts(0, 1, 0, 0));
}

#[tokio::test]
async fn another_plugins_events_do_not_move_the_pod() {
    let q = queue();
    q.add(pod("p", 0));
    let qpi = rejected(&q, "Gate").await;
    q.add_unschedulable_if_not_present(qpi);
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[("fits", "yes")]));
    assert_eq!(q.counts(), counts(0, 0, 1, 0));
}

#[tokio::test]
async fn a_pod_that_failed_with_an_error_moves_on_any_event() {
    let q = queue();
    q.add(pod("p", 0));
    let (_, qpi) = pop_name(&q).await;
    q.add_unschedulable_if_not_present(qpi);
    // No rejecting plugin: retried after its backoff, without waiting for an event.
    assert_eq!(q.counts(), counts(0, 1, 0, 0));
}

#[tokio::test]
async fn a_pod_of_a_profile_without_hints_moves_on_any_event() {
    let q = queue();
    let other = Arc::new(PodInfo::from_pod(
        PodBuilder::new("o").scheduler_name("other").build(),
    ));
    q.add(other);
    let qpi = rejected(&q, "NodeAffinity").await;
    q.add_unschedulable_if_not_present(qpi);
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    assert_eq!(q.counts(), counts(0, 1, 0, 0));
}

#[tokio::test]
async fn pending_rejected_pods_skip_backoff() {
    let q = queue_with(
        Arc::new(|_: &PodInfo| None),
        Duration::from_secs(10),
        Duration::from_secs(10),
    );
    q.add(pod("unschedulable", 0));
    q.add(pod("pending", 0));
    let (_, mut a) = pop_name(&q).await;
    a.unschedulable_plugins.insert("NodeResourcesFit".into());
    let (_, mut b) = pop_name(&q).await;
    b.pending_plugins.insert("Pending".into());
    q.add_unschedulable_if_not_present(a);
    q.add_unschedulable_if_not_present(b);
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    // Both are within their 10s backoff; the Pending one goes to active regardless.
    assert_eq!(q.counts(), counts(1, 1, 0, 0));
    assert_eq!(pop_name(&q).await.0, "pending");
}

#[tokio::test]
async fn an_event_during_the_attempt_is_checked_when_it_fails() {
    let q = queue();
    q.add(pod("helped", 0));
    q.add(pod("unhelped", 0));
    let helped = rejected(&q, "NodeAffinity").await;
    let unhelped = rejected(&q, "NodeAffinity").await;
    let label = node_event(ActionType::UPDATE_NODE_LABEL);
    // While both are being scheduled: an unrelated change...
    q.move_all_to_active_or_backoff(&label, node(&[]), node(&[("fits", "no")]));
    // ... `unhelped` fails and goes to the pool; then a relevant one arrives.
    q.add_unschedulable_if_not_present(unhelped);
    assert_eq!(q.counts(), counts(0, 0, 1, 0));
    q.move_all_to_active_or_backoff(&label, node(&[]), node(&[("fits", "yes")]));
    assert_eq!(q.counts(), counts(0, 1, 0, 0), "the pool's pod moved");
    // `helped` fails after the relevant event: it is not lost.
    q.add_unschedulable_if_not_present(helped);
    assert_eq!(q.counts(), counts(0, 2, 0, 0));
    assert!(!q.inner.lock().in_flight.any());
}

#[tokio::test]
async fn events_before_the_attempt_do_not_count_for_it() {
    let q = queue();
    q.add(pod("p", 0));
    q.add(pod("q", 0));
    let first = rejected(&q, "NodeAffinity").await;
    q.move_all_to_active_or_backoff(
        &node_event(ActionType::UPDATE_NODE_LABEL),
        node(&[]),
        node(&[("fits", "yes")]),
    );
    let second = rejected(&q, "NodeAffinity").await;
    q.add_unschedulable_if_not_present(second);
    q.add_unschedulable_if_not_present(first);
    // `first` was popped before the event, `second` after it.
    let inner = q.inner.lock();
    assert!(inner.pool.pods.contains_key("default/q"));
    assert!(inner.backoff.contains_key("default/p"));
}

#[tokio::test]
async fn backoff_expires_into_active() {
    let q = queue_with(
        Arc::new(|_: &PodInfo| None),
        Duration::from_millis(10),
        Duration::from_millis(10),
    );
    q.add(pod("p", 0));
    let (_, qpi) = pop_name(&q).await;
    q.add_unschedulable_if_not_present(qpi);
    assert_eq!(q.counts().backoff, 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let same_second = {
        let inner = q.inner.lock();
        inner
            .backoff
            .values()
            .all(|v| q.backoff_window(v) == q.window(Instant::now()))
    };
    q.flush();
    if same_second {
        // Backoff ends with the wall-clock second its expiry falls in.
        assert_eq!(q.counts().backoff, 1, "the second is not over");
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    q.flush();
    assert_eq!(q.counts(), counts(1, 0, 0, 0));
    let (name, qpi) = pop_name(&q).await;
    assert_eq!((name.as_str(), qpi.attempts), ("p", 2));
}

#[tokio::test]
async fn pods_leave_the_pool_after_the_maximum_time() {
    let q = queue().with_max_in_unschedulable(Duration::from_millis(50));
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeAffinity").await;
    assert!(!qpi.was_flushed_from_unschedulable);
    q.add_unschedulable_if_not_present(qpi);
    q.flush();
    assert_eq!(q.counts().unschedulable, 1);
    tokio::time::sleep(Duration::from_millis(60)).await;
    q.flush();
    assert_eq!(q.counts().unschedulable, 0);
    assert_eq!(q.counts().active + q.counts().backoff, 1);
    // Marked, so scheduler_pod_scheduled_after_flush_total counts it if it binds now.
    let (_, qpi) = pop_name(&q).await;
    assert!(qpi.was_flushed_from_unschedulable);
}

#[tokio::test]
async fn empty_active_queue_pops_from_backoff() {
    let q = queue_with(
        Arc::new(|_: &PodInfo| None),
        Duration::from_secs(10),
        Duration::from_secs(10),
    );
    for (name, prio) in [("low", 1), ("high", 9), ("errored", 100)] {
        q.add(pod(name, prio));
    }
    // All three fail in one second: two rejected, one with an error.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        attempts.push(rejected(&q, "NodeResourcesFit").await);
    }
    // A node added during the attempts: the rejected pods are retried soon.
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    // Low fails last but goes first unless both fall in one second.
    for mut qpi in attempts.into_iter().rev() {
        if qpi.pod_info.name() == "errored" {
            qpi.unschedulable_plugins.clear();
        }
        q.add_unschedulable_if_not_present(qpi);
    }
    assert_eq!(q.counts().backoff, 3);
    let windows: Vec<u64> = {
        let inner = q.inner.lock();
        ["low", "high"]
            .iter()
            .filter_map(|k| inner.backoff.values().find(|v| v.pod_info.name() == *k))
            .map(|v| q.backoff_window(v))
            .collect()
    };
    let order = if windows[0] == windows[1] {
        ["high", "low"] // one second: queue-sort order
    } else {
        ["low", "high"] // low's second ended first (the test straddled a second)
    };
    // Nothing is active: the rejected pods come out at once, long before their 10s backoff.
    let (name, qpi) = pop_name(&q).await;
    assert_eq!((name.as_str(), qpi.attempts), (order[0], 2));
    assert_eq!(pop_name(&q).await.0, order[1]);
    // The pod that failed with an error waits out its backoff.
    let waited = tokio::time::timeout(Duration::from_millis(100), q.pop()).await;
    assert!(waited.is_err(), "popped an errored pod early");
    assert_eq!(q.counts().backoff, 1);
    // An active pod goes first.
    q.add(pod("new", 0));
    assert_eq!(pop_name(&q).await.0, "new");
}

#[tokio::test]
async fn pre_enqueue_runs_when_a_pod_enters_backoff() {
    let gate_on = Arc::new(AtomicBool::new(false));
    let g = gate_on.clone();
    let q = queue_with_gate(Arc::new(move |_: &PodInfo| {
        g.load(Ordering::SeqCst)
            .then(|| "DefaultPreemption".to_string())
    }));
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeResourcesFit").await;
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    gate_on.store(true, Ordering::SeqCst);
    q.add_unschedulable_if_not_present(qpi);
    assert_eq!(q.counts(), counts(0, 0, 0, 1));
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> Arc<PodInfo> {
    let mut b = PodBuilder::new(name).uid(name).scheduler_name(PROFILE);
    for (k, v) in labels {
        b = b.label(k, v);
    }
    Arc::new(PodInfo::from_pod(b.build()))
}

#[tokio::test]
async fn gated_pods_move_only_on_their_gating_plugins_events() {
    let q = queue_with_gate(Arc::new(|p: &PodInfo| {
        p.labels()
            .is_some_and(|l| l.contains_key("gated"))
            .then(|| "Gate".to_string())
    }));
    let gated = labelled("g", &[("gated", "yes")]);
    q.add(gated.clone());
    assert_eq!(q.counts(), counts(0, 0, 0, 1));
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[("fits", "yes")]));
    assert_eq!(q.counts().gated, 1, "cluster events do not ungate");
    let mut status_only = PodInfo::clone(&gated);
    let mut pod = k8s_openapi::api::core::v1::Pod::clone(&gated.pod);
    pod.status = Some(Default::default());
    status_only.pod = Arc::new(pod);
    q.update(Some(gated.clone()), Arc::new(status_only));
    assert_eq!(q.counts().gated, 1, "a status-only update does not ungate");
    q.update(Some(gated), labelled("g", &[]));
    assert_eq!(q.counts(), counts(1, 0, 0, 0));
}

#[tokio::test]
async fn delete_removes_from_every_sub_queue() {
    let q = queue();
    q.add(pod("a", 0));
    q.add(pod("b", 0));
    let qpi = rejected(&q, "NodeAffinity").await;
    q.add_unschedulable_if_not_present(qpi);
    q.delete("default/a");
    q.delete("default/b");
    assert_eq!(q.counts(), QueueCounts::default());
}

#[tokio::test]
async fn a_pod_deleted_while_in_flight_is_not_requeued() {
    let q = queue();
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeAffinity").await;
    q.delete("default/p");
    q.add_unschedulable_if_not_present(qpi);
    assert_eq!(q.counts(), QueueCounts::default());
    assert!(!q.inner.lock().in_flight.any());
}

#[tokio::test]
async fn a_pod_updated_while_in_flight_is_requeued_as_it_is_now() {
    let q = queue();
    q.add(pod("p", 0));
    let qpi = rejected(&q, "Gate").await;
    q.update(Some(pod("p", 0)), labelled("p", &[("new", "label")]));
    q.add_unschedulable_if_not_present(qpi);
    // Gate registered the pod's relabeling, which came during the attempt.
    let inner = q.inner.lock();
    let requeued = inner.backoff.get("default/p").expect("in backoff");
    assert!(
        requeued
            .pod_info
            .labels()
            .is_some_and(|l| l.contains_key("new"))
    );
}

#[tokio::test]
async fn update_reorders_the_active_heap() {
    let q = queue();
    q.add(pod("a", 1));
    q.add(pod("b", 2));
    q.update(None, pod("a", 10));
    assert_eq!(pop_name(&q).await.0, "a");
}

#[tokio::test]
async fn close_wakes_pop() {
    let q = Arc::new(queue());
    let q2 = q.clone();
    let waiter = tokio::spawn(async move { q2.pop().await.is_none() });
    tokio::time::sleep(Duration::from_millis(10)).await;
    q.close();
    assert!(waiter.await.expect("join"));
}

fn nominated_names(q: &SchedulingQueue, node: &str) -> Vec<String> {
    use crate::framework::registry::PodNominator;
    q.nominator()
        .nominated_pods_for_node(node)
        .iter()
        .map(|p| p.name().to_string())
        .collect()
}

#[test]
fn nominator_follows_status_and_the_schedulers_own_nominations() {
    let q = queue();
    // From the API: a pending pod with status.nominatedNodeName.
    let a = Arc::new(PodInfo::from_pod(
        PodBuilder::new("a")
            .priority(5)
            .nominated_node("n1")
            .build(),
    ));
    q.add(a);
    assert_eq!(nominated_names(&q, "n1"), ["a"]);
    // From PostFilter, before the status patch lands; an unrelated update keeps it.
    let b = pod("b", 10);
    q.add(b.clone());
    q.nominator().add_nominated_pod(b.clone(), "n2");
    q.update(None, b);
    assert_eq!(nominated_names(&q, "n2"), ["b"]);
    assert_eq!(
        q.nominator().nominated_node("default/b").as_deref(),
        Some("n2")
    );
    // The patch lands, then another preemption clears it through the API.
    let b_nominated = Arc::new(PodInfo::from_pod(
        PodBuilder::new("b")
            .uid("b")
            .scheduler_name(PROFILE)
            .priority(10)
            .nominated_node("n2")
            .build(),
    ));
    q.update(None, b_nominated);
    assert_eq!(nominated_names(&q, "n2"), ["b"]);
    q.update(None, pod("b", 10));
    assert!(nominated_names(&q, "n2").is_empty());
    // Bound or deleted: gone.
    q.delete("default/a");
    assert!(nominated_names(&q, "n1").is_empty());
    // An empty Override clears; a bound pod is never nominated.
    let c = pod("c", 1);
    q.nominator().add_nominated_pod(c.clone(), "n3");
    q.nominator().add_nominated_pod(c, "");
    assert!(nominated_names(&q, "n3").is_empty());
    let bound = Arc::new(PodInfo::from_pod(
        PodBuilder::new("d").node("n4").nominated_node("n4").build(),
    ));
    q.nominator().add_nominated_pod(bound, "n4");
    assert!(nominated_names(&q, "n4").is_empty());
}

#[tokio::test]
async fn lifted_gates_are_seen_on_flush() {
    let hold = Arc::new(AtomicBool::new(false));
    let h = hold.clone();
    let q = queue_with_gate(Arc::new(move |_: &PodInfo| {
        h.load(Ordering::SeqCst)
            .then(|| "DefaultPreemption".to_string())
    }));
    q.add(pod("p", 0));
    let qpi = rejected(&q, "NodeResourcesFit").await;
    q.add_unschedulable_if_not_present(qpi);
    // A plugin holds the pod (its preemption runs): an event does not send it back.
    hold.store(true, Ordering::SeqCst);
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[]));
    assert_eq!(q.counts(), counts(0, 0, 0, 1));
    // The hold lifts with no event of its own: the next flush requeues the pod.
    hold.store(false, Ordering::SeqCst);
    q.flush();
    assert_eq!(q.counts().gated, 0);
    assert_eq!(q.counts().active + q.counts().backoff, 1);
}

#[tokio::test]
async fn metrics_follow_upstream() {
    use crate::scheduler::metrics::Metrics;
    let metrics = Metrics::scheduler_only(crate::emulation::Minor::V1_37);
    let q = queue().with_metrics(metrics.queue.clone());
    q.add(pod("p", 0));
    q.add(pod("q", 0));
    let first = rejected(&q, "NodeAffinity").await;
    // An event while `first` is in flight is held for it.
    q.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, node(&[("fits", "yes")]));
    let text = metrics.encode();
    for line in [
        // 1.37 spells the resource of a pending pod's events `UnscheduledPod`.
        r#"scheduler_queue_incoming_pods_total{queue="active",event="UnscheduledPodAdd"} 2"#,
        r#"scheduler_pending_pods{queue="active"} 1"#,
        // 1.37's per-entity families: every entity is a pod.
        r#"scheduler_queue_incoming_entities_total{queue="active",event="UnscheduledPodAdd",type="pod"} 2"#,
        r#"scheduler_queued_entities{queue="active",type="pod"} 1"#,
        r#"scheduler_inflight_events{event="PodPopped"} 1"#,
        r#"scheduler_inflight_events{event="NodeAdd"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    q.add_unschedulable_if_not_present(first);
    let text = metrics.encode();
    for line in [
        // The event during the attempt sent it to backoff.
        r#"scheduler_queue_incoming_pods_total{queue="backoff",event="ScheduleAttemptFailure"} 1"#,
        r#"scheduler_unschedulable_pods{plugin="NodeAffinity",profile="default-scheduler"} 1"#,
        r#"scheduler_pending_pods{queue="backoff"} 1"#,
        r#"scheduler_queued_entities{queue="backoff",type="pod"} 1"#,
        r#"scheduler_inflight_events{event="PodPopped"} 0"#,
        r#"scheduler_inflight_events{event="NodeAdd"} 0"#,
        r#"scheduler_queueing_hint_execution_duration_seconds_count{plugin="NodeAffinity",event="NodeAdd",hint="Queue"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    // Tried again (after `q`, the active queue empty, from backoff): no longer counted as
    // rejected.
    assert_eq!(pop_name(&q).await.0, "q");
    assert_eq!(pop_name(&q).await.0, "p");
    assert!(metrics.encode().lines().any(|l| l
        == r#"scheduler_unschedulable_pods{plugin="NodeAffinity",profile="default-scheduler"} 0"#));
    // 1.36 has no per-entity families.
    let old = Metrics::scheduler_only(crate::emulation::Minor::V1_36);
    let q = queue().with_metrics(old.queue.clone());
    q.add(pod("p", 0));
    let text = old.encode();
    assert!(
        text.contains("scheduler_pending_pods{queue=\"active\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnschedulablePodAdd\"} 1"
        ),
        "{text}"
    );
    assert!(!text.contains("entities"), "{text}");
}

#[tokio::test]
async fn take_pulls_waiting_members_from_every_sub_queue_but_not_gated_ones() {
    let gated = |p: &PodInfo| (p.name() == "gated").then(|| "Gate".to_string());
    let q = queue_with_gate(Arc::new(gated));
    for (name, priority) in [("popped", 10), ("rejected", 5), ("active", 0), ("gated", 0)] {
        q.add(pod(name, priority));
    }
    let (first, _) = pop_name(&q).await;
    assert_eq!(first, "popped");
    let r = rejected(&q, "NodeResourcesFit").await;
    assert_eq!(r.pod_info.name(), "rejected");
    q.add_unschedulable_if_not_present(r);
    assert_eq!(q.counts(), counts(1, 0, 1, 1));

    let ns = pod("x", 0).namespace().to_string();
    let keys: Vec<String> = ["active", "rejected", "gated", "unknown"]
        .iter()
        .map(|n| format!("{ns}/{n}"))
        .collect();
    let taken = q.take(&keys);
    let names: Vec<&str> = taken.iter().map(|t| t.pod_info.name()).collect();
    assert_eq!(names, ["active", "rejected"]);
    assert!(taken.iter().all(|t| t.attempts >= 1));
    // Only the gated pod is left; the taken ones are in flight.
    assert_eq!(q.counts(), counts(0, 0, 0, 1));
}

#[tokio::test]
async fn take_brings_a_gated_member_whose_gate_opened_before_an_event_moved_it() {
    let open = Arc::new(AtomicBool::new(false));
    let gate = {
        let open = open.clone();
        move |_: &PodInfo| (!open.load(Ordering::SeqCst)).then(|| "Gate".to_string())
    };
    let q = queue_with_gate(Arc::new(gate));
    q.add(pod("member", 0));
    assert_eq!(q.counts(), counts(0, 0, 0, 1));
    let key = format!("{}/member", pod("x", 0).namespace());
    assert!(q.take(std::slice::from_ref(&key)).is_empty());
    open.store(true, Ordering::SeqCst);
    let taken = q.take(&[key]);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].gating_plugin, None);
    assert_eq!(q.counts(), counts(0, 0, 0, 0));
}

#[tokio::test]
async fn a_member_left_by_a_scheduled_group_is_back_in_active_at_once_keeping_its_place() {
    let q = queue();
    q.add(pod("member", 0));
    let (_, mut member) = pop_name(&q).await;
    let queued = member.timestamp;
    member
        .unschedulable_plugins
        .insert("NodeResourcesFit".into());
    q.add_after_group_scheduled(member);
    // No backoff, no event needed; its timestamp is kept.
    assert_eq!(q.counts(), counts(1, 0, 0, 0));
    let (_, again) = pop_name(&q).await;
    assert_eq!(again.timestamp, queued);
    assert_eq!(again.attempts, 2);
}
