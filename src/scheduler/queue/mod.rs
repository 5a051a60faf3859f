//! The scheduling queue, after upstream's PriorityQueue (`pkg/scheduler/backend/queue`):
//! `activeQ` (a heap ordered by the profile's QueueSort plugin), `backoffQ` (pods waiting out
//! their backoff: initial * 2^(attempts-1), capped), and the unschedulable pool.
//!
//! A pod in the pool moves back only on a cluster event that one of the plugins that rejected it
//! registered, and only when that plugin's queueing hint says Queue (upstream's
//! `isPodWorthRequeuing`, with the profile's [`QueueingHintMap`]); a pod rejected with Pending
//! skips backoff when its Pending plugin says Queue; a pod that failed with an error (no plugin
//! rejected it) moves on any event. Events that arrive while pods are being scheduled are kept
//! ([`in_flight`]) and checked against a pod when its attempt fails, so none is lost. Pods leave
//! the pool anyway after `--pod-max-in-unschedulable-pods-duration` (5 minutes by default).
//!
//! As upstream 1.33+ (SchedulerPopFromBackoffQ): backoff ends on whole wall-clock seconds (pods in
//! one second are ordered as the active queue orders them), PreEnqueue runs when a pod enters
//! backoff, and when the active queue is empty the next pod backing off after a rejection (not
//! after an error) is scheduled at once instead of the scheduler idling.
//!
//! Here: the queue, a pod's way in, out for an attempt and back. Beside it: [`backoff`] (how long
//! a pod backs off, the backoff queue), [`hints`] (which events move which pods out of the pool),
//! [`heap`] (the active queue), [`in_flight`] (the events seen during attempts), [`nominator`].

mod backoff;
mod heap;
mod hints;
mod in_flight;
mod nominator;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, MutexGuard};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tracing::warn;

use self::heap::ActiveHeap;
use self::in_flight::{InFlight, InFlightEvent};
pub(crate) use self::nominator::Nominator;
use super::metrics::{
    ENTITY_POD, EntityLabels, EventLabels, IncomingEntityLabels, IncomingLabels, QueueLabels,
    QueueMetrics, UnschedulableLabels,
};
use crate::framework::events::{
    EVENT_FORCE_ACTIVATE, EVENT_UNSCHEDULABLE_TIMEOUT, EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_UPDATE, POP_FROM_BACKOFF_Q, QueueingHintMap, SCHEDULE_ATTEMPT_FAILURE,
    pod_scheduling_properties_change,
};
use crate::framework::types::{ClusterEvent, EventObject, PodInfo, PodObject, QueuedPodInfo};

/// How long a pod may stay in the unschedulable pool before it is retried anyway (upstream's
/// `--pod-max-in-unschedulable-pods-duration` default).
pub(crate) const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// The `scheduler_inflight_events` label counting the pods in flight (upstream's).
const POD_POPPED: &str = "PodPopped";

/// Orders the active queue: `less(a, b)` means `a` is scheduled before `b`.
pub(crate) type LessFn = Arc<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;
/// Runs the PreEnqueue plugins: `None` lets the pod in, `Some(plugin)` names the plugin that gates it.
pub(crate) type PreEnqueueFn = Arc<dyn Fn(&PodInfo) -> Option<String> + Send + Sync>;

/// Pod counts per sub-queue, for the `scheduler_pending_pods` metric.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounts {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

/// Where an event (or a failed attempt) sends a pod from the pool (upstream's
/// `queueingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strategy {
    /// Stay in the pool.
    Skip,
    /// To backoff if the pod is still backing off, else to active.
    AfterBackoff,
    /// To active at once (a Pending plugin said Queue).
    Immediately,
}

/// Which sub-queue a pod went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubQueue {
    Active,
    Backoff,
    Unschedulable,
}

/// Whom to wake after a change: nobody, one `pop`, or every waiting `pop` (a batch moved).
enum Wake {
    None,
    One,
    All,
}

impl Wake {
    fn one_if(woke: bool) -> Wake {
        if woke { Wake::One } else { Wake::None }
    }
}

impl SubQueue {
    fn wakes_pop(self) -> bool {
        // Backoff too: an empty active queue pops a rejected pod from backoff.
        self != SubQueue::Unschedulable
    }
}

pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_in_unschedulable: Duration,
    pre_enqueue: PreEnqueueFn,
    /// Profile (scheduler name) -> its registered events and hints. A pod of a profile missing
    /// here moves on every event.
    hints: HashMap<String, Arc<QueueingHintMap>>,
    nominator: Arc<Nominator>,
    /// An instant and its wall-clock time since the epoch, to place instants in whole seconds.
    clock_anchor: (Instant, Duration),
    metrics: QueueMetrics,
    /// `scheduler_pending_pods` per sub-queue: active, backoff, unschedulable, gated.
    pending: [Gauge; 4],
}

/// The unschedulable pool; gated pods counted apart.
#[derive(Default)]
struct Pool {
    pods: HashMap<String, QueuedPodInfo>,
    gated: usize,
}

impl Pool {
    fn insert(&mut self, key: String, qpi: QueuedPodInfo) -> bool {
        let gated = qpi.gated();
        let old = self.pods.insert(key, qpi);
        self.gated += usize::from(gated);
        if let Some(old) = &old {
            self.gated -= usize::from(old.gated());
        }
        old.is_none()
    }

    fn remove(&mut self, key: &str) -> Option<QueuedPodInfo> {
        let qpi = self.pods.remove(key)?;
        self.gated -= usize::from(qpi.gated());
        Some(qpi)
    }
}

struct Inner {
    active: ActiveHeap,
    /// Backoff expiry -> key; stale entries (pod moved or removed) are skipped on flush.
    backoff_heap: BinaryHeap<Reverse<(Instant, u64, String)>>,
    backoff: HashMap<String, QueuedPodInfo>,
    pool: Pool,
    in_flight: InFlight,
    /// In-flight pods deleted meanwhile: dropped instead of requeued when their attempt fails.
    deleted_in_flight: HashSet<String>,
    /// In-flight pods updated meanwhile: requeued as they are now.
    updated_in_flight: HashMap<String, Arc<PodInfo>>,
    seq: u64,
    closed: bool,
}

impl Inner {
    fn contains(&self, key: &str) -> bool {
        self.active.contains(key)
            || self.backoff.contains_key(key)
            || self.pool.pods.contains_key(key)
    }

    fn counts(&self) -> QueueCounts {
        QueueCounts {
            active: self.active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.pool.pods.len() - self.pool.gated,
            gated: self.pool.gated,
        }
    }
}

impl SchedulingQueue {
    pub fn new(
        less: LessFn,
        pre_enqueue: PreEnqueueFn,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        let metrics = QueueMetrics::default();
        Self {
            inner: Mutex::new(Inner {
                active: ActiveHeap::new(less),
                backoff_heap: BinaryHeap::new(),
                backoff: HashMap::new(),
                pool: Pool::default(),
                in_flight: InFlight::default(),
                deleted_in_flight: HashSet::new(),
                updated_in_flight: HashMap::new(),
                seq: 0,
                closed: false,
            }),
            notify: Notify::new(),
            initial_backoff,
            max_backoff,
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
            pre_enqueue,
            hints: HashMap::new(),
            nominator: Arc::new(Nominator::new()),
            clock_anchor: (
                Instant::now(),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default(),
            ),
            pending: pending_gauges(&metrics),
            metrics,
        }
    }

    /// Uses `nominator` (shared with the frameworks' handle) to track nominated pods.
    pub fn with_nominator(mut self, nominator: Arc<Nominator>) -> Self {
        self.nominator = nominator;
        self
    }

    /// The registered events and hints of each profile (by scheduler name).
    pub fn with_queueing_hints(mut self, hints: HashMap<String, Arc<QueueingHintMap>>) -> Self {
        self.hints = hints;
        self
    }

    /// How long a pod may wait in the pool without an event before it is retried.
    pub fn with_max_in_unschedulable(mut self, max: Duration) -> Self {
        self.max_in_unschedulable = max;
        self
    }

    /// Records into `metrics` (the scheduler's `/metrics` families).
    pub fn with_metrics(mut self, metrics: QueueMetrics) -> Self {
        self.pending = pending_gauges(&metrics);
        self.metrics = metrics;
        self
    }

    pub fn nominator(&self) -> &Arc<Nominator> {
        &self.nominator
    }

    /// Observes how long handling an informer event took (the cache update and the moves).
    pub fn observe_event_handling(&self, event: &ClusterEvent, since: Instant) {
        self.metrics
            .event_handling_duration
            .get_or_create(&EventLabels {
                event: self.event_label(&event.label(), false).into_owned(),
            })
            .observe(since.elapsed().as_secs_f64());
    }

    /// A new pending pod.
    pub fn add(&self, pod: Arc<PodInfo>) {
        self.nominator.update(pod.clone());
        let key = pod.key();
        let inner = self.inner.lock();
        if inner.contains(&key) || inner.in_flight.contains(&key) {
            drop(inner);
            self.update(None, pod);
            return;
        }
        self.enter(inner, key, pod, &EVENT_UNSCHEDULED_POD_ADD);
    }

    /// A pod new to the queue: to active, or to the pool when a PreEnqueue plugin gates it.
    fn enter(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        key: String,
        pod: Arc<PodInfo>,
        event: &ClusterEvent,
    ) {
        let qpi = QueuedPodInfo::new(pod, Instant::now());
        let to = self.move_to_active(&mut inner, key, qpi, &event.label(), false);
        self.release(inner, Wake::one_if(to.wakes_pop()));
    }

    /// Publishes the pod counts, unlocks, and wakes `pop` as `wake` says.
    fn release(&self, inner: MutexGuard<'_, Inner>, wake: Wake) {
        self.publish_counts(&inner);
        drop(inner);
        match wake {
            Wake::None => {}
            Wake::One => self.notify.notify_one(),
            Wake::All => {
                self.notify.notify_waiters();
                self.notify.notify_one();
            }
        }
    }

    /// A pending pod changed from `old` (when known) to `new`: the queued copy is replaced, and a
    /// pod in the pool moves when one of its rejecting plugins' hints says the change may make it
    /// schedulable (upstream's `Update`).
    pub fn update(&self, old: Option<Arc<PodInfo>>, new: Arc<PodInfo>) {
        self.nominator.update(new.clone());
        let key = new.key();
        let events = match &old {
            Some(old) => {
                pod_scheduling_properties_change(&old.pod, &new.pod, &old.requests, &new.requests)
            }
            None => vec![EVENT_UNSCHEDULED_POD_UPDATE],
        };
        let old_obj = old.map(|o| PodObject::Unscheduled(o).into_event_object());
        let new_obj = PodObject::Unscheduled(new.clone()).into_event_object();
        let mut inner = self.inner.lock();
        if inner.in_flight.contains(&key) {
            // Being scheduled: if the attempt fails, the pod is requeued as it is now, and these
            // events are checked against it.
            for event in &events {
                self.record_in_flight(&mut inner, *event, old_obj.clone(), Some(new_obj.clone()));
            }
            inner.updated_in_flight.insert(key, new);
            return;
        }
        if let Some(qpi) = inner.active.get_mut(&key) {
            qpi.pod_info = new;
            inner.active.fix(&key);
            return;
        }
        if let Some(qpi) = inner.backoff.get_mut(&key) {
            qpi.pod_info = new;
            return;
        }
        if let Some(qpi) = inner.pool.pods.get_mut(&key) {
            qpi.pod_info = new;
            let mut to = SubQueue::Unschedulable;
            for event in &events {
                let Some(qpi) = inner.pool.pods.get(&key) else {
                    break;
                };
                let strategy =
                    self.is_pod_worth_requeuing(qpi, event, old_obj.as_ref(), Some(&new_obj));
                if strategy == Strategy::Skip {
                    continue;
                }
                let Some(qpi) = inner.pool.remove(&key) else {
                    break;
                };
                let label = self.event_label(&event.label(), true).into_owned();
                to = self.requeue(&mut inner, key.clone(), qpi, strategy, &label);
                if to.wakes_pop() {
                    break;
                }
            }
            self.release(inner, Wake::one_if(to.wakes_pop()));
            return;
        }
        // Not queued yet (the first time it is ours, e.g. its schedulerName changed).
        self.enter(inner, key, new, &EVENT_UNSCHEDULED_POD_UPDATE);
    }

    /// The pod was deleted or bound by someone else. A pod in flight is not requeued afterwards.
    pub fn delete(&self, key: &str) {
        self.nominator.delete(key);
        let mut inner = self.inner.lock();
        if inner.in_flight.contains(key) {
            inner.deleted_in_flight.insert(key.to_string());
        }
        let removed = inner
            .active
            .remove(key)
            .or_else(|| inner.backoff.remove(key))
            .or_else(|| inner.pool.remove(key));
        if let Some(qpi) = removed {
            self.count_rejectors(&qpi, -1);
        }
        self.publish_counts(&inner);
    }

    /// The next pod to schedule, waiting until there is one; `None` once the queue is closed.
    /// The pod counts as in flight until its attempt is handed back
    /// ([`SchedulingQueue::add_unschedulable_if_not_present`]) or [`SchedulingQueue::done`].
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if inner.closed {
                    return None;
                }
                let next = match inner.active.pop() {
                    Some(next) => Some(next),
                    None => self.pop_backoff(&mut inner).inspect(|_| {
                        self.count_incoming("active", POP_FROM_BACKOFF_Q);
                    }),
                };
                if let Some((key, mut qpi)) = next {
                    self.start_attempt(&mut inner, &key, &mut qpi);
                    self.publish_counts(&inner);
                    return Some(qpi);
                }
            }
            notified.await;
        }
    }

    /// The pods of `keys` that wait in any sub-queue and are not (or no longer) gated, taken out to be tried
    /// now with a popped pod (the members of its pod group: upstream queues a group as one
    /// entity, so an event that moves one member moves all). Each is in flight, as if popped.
    pub fn take(&self, keys: &[String]) -> Vec<QueuedPodInfo> {
        let mut inner = self.inner.lock();
        let mut taken = Vec::new();
        for key in keys {
            let found = inner
                .active
                .remove(key)
                .or_else(|| inner.backoff.remove(key))
                .or_else(|| {
                    // A gated member whose gate is open by now (the event that opened it may not
                    // have moved it yet) comes too; one still gated stays.
                    let open =
                        inner.pool.pods.get(key).is_some_and(|q| {
                            !q.gated() || (self.pre_enqueue)(&q.pod_info).is_none()
                        });
                    if open { inner.pool.remove(key) } else { None }
                });
            if let Some(mut qpi) = found {
                qpi.gating_plugin = None;
                self.start_attempt(&mut inner, key, &mut qpi);
                taken.push(qpi);
            }
        }
        self.publish_counts(&inner);
        taken
    }

    /// A pod leaves the queue for an attempt: one more attempt, in flight until it comes back.
    fn start_attempt(&self, inner: &mut Inner, key: &str, qpi: &mut QueuedPodInfo) {
        qpi.attempts += 1;
        if qpi.initial_attempt_timestamp.is_none() {
            qpi.initial_attempt_timestamp = Some(Instant::now());
        }
        if inner.in_flight.pop(key) {
            self.add_inflight_gauge(POD_POPPED, 1);
        } else {
            warn!(pod = %key, "pod popped while already in flight");
        }
        // It is being tried again: no longer counted as rejected.
        self.count_rejectors(qpi, -1);
    }

    /// The pod's attempt is over without coming back to the queue (bound, or dropped).
    pub fn done(&self, key: &str) {
        let mut inner = self.inner.lock();
        self.finish_in_flight(&mut inner, key);
    }

    fn finish_in_flight(&self, inner: &mut Inner, key: &str) {
        inner.deleted_in_flight.remove(key);
        inner.updated_in_flight.remove(key);
        let (dropped, was) = inner.in_flight.done(key);
        if was {
            self.add_inflight_gauge(POD_POPPED, -1);
        }
        for event in dropped {
            self.add_inflight_gauge(&event.label(), -1);
        }
    }

    /// A pod whose attempt failed, with the plugins that rejected it (none: it failed with an
    /// error): back to the pool, or to backoff or active when an event that arrived during the
    /// attempt may make it schedulable (upstream's `AddUnschedulableIfNotPresent`).
    pub fn add_unschedulable_if_not_present(&self, qpi: QueuedPodInfo) {
        self.back_from_attempt(qpi, false);
    }

    /// A member left unscheduled by a group cycle that scheduled its group: straight back to
    /// active, its timestamp kept (upstream's `AddAttemptedPodGroupIfNeeded` after a successful
    /// attempt): the group's next attempt, its preemption included, comes at once.
    pub fn add_after_group_scheduled(&self, qpi: QueuedPodInfo) {
        self.back_from_attempt(qpi, true);
    }

    fn back_from_attempt(&self, mut qpi: QueuedPodInfo, group_scheduled: bool) {
        let key = qpi.pod_info.key();
        let mut inner = self.inner.lock();
        if let Some(latest) = inner.updated_in_flight.remove(&key) {
            qpi.pod_info = latest;
        }
        if inner.deleted_in_flight.contains(&key) || inner.contains(&key) {
            self.finish_in_flight(&mut inner, &key);
            return;
        }
        if !group_scheduled {
            qpi.timestamp = Instant::now();
        }
        // Back after an attempt: a flush before it no longer explains what happens next.
        qpi.was_flushed_from_unschedulable = false;
        self.count_rejectors(&qpi, 1);
        let strategy = if group_scheduled {
            Strategy::Immediately
        } else {
            self.strategy_for_in_flight_pod(&inner, &key, &qpi)
        };
        self.finish_in_flight(&mut inner, &key);
        let to = self.requeue(&mut inner, key, qpi, strategy, SCHEDULE_ATTEMPT_FAILURE);
        self.release(inner, Wake::one_if(to.wakes_pop()));
    }

    /// Moves pods whose backoff has expired to active, and pods that sat in the pool longer than
    /// the maximum back (a wildcard event: every pod but the gated ones). Called every second.
    pub fn flush(&self) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let mut woke = self.flush_backoff_completed(&mut inner, now);
        let stale: Vec<String> = inner
            .pool
            .pods
            .iter()
            .filter(|(_, q)| now.duration_since(q.timestamp) > self.max_in_unschedulable)
            .filter(|(_, q)| self.gate_may_lift(q, &EVENT_UNSCHEDULABLE_TIMEOUT))
            .map(|(k, _)| k.clone())
            .collect();
        let timeout = EVENT_UNSCHEDULABLE_TIMEOUT.label();
        for key in stale {
            if let Some(mut qpi) = inner.pool.remove(&key) {
                qpi.was_flushed_from_unschedulable = true;
                let strategy =
                    self.is_pod_worth_requeuing(&qpi, &EVENT_UNSCHEDULABLE_TIMEOUT, None, None);
                woke |= self
                    .requeue(&mut inner, key, qpi, strategy, &timeout)
                    .wakes_pop();
            }
        }
        // A gate that lifts without an event of its own (DefaultPreemption's, once its
        // preemption is done) is seen within a second.
        let lifted: Vec<String> = inner
            .pool
            .pods
            .iter()
            .filter(|(_, q)| q.gated() && (self.pre_enqueue)(&q.pod_info).is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let activate = EVENT_FORCE_ACTIVATE.label();
        for key in lifted {
            if let Some(qpi) = inner.pool.remove(&key) {
                woke |= self
                    .requeue(&mut inner, key, qpi, Strategy::AfterBackoff, &activate)
                    .wakes_pop();
            }
        }
        self.release(inner, if woke { Wake::All } else { Wake::None });
    }

    pub fn counts(&self) -> QueueCounts {
        self.inner.lock().counts()
    }

    /// Wakes every `pop` with `None`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Sends a pod out of the pool as `strategy` says (upstream's
    /// `requeuePodWithQueueingStrategy`); `event` labels the move.
    fn requeue(
        &self,
        inner: &mut Inner,
        key: String,
        qpi: QueuedPodInfo,
        strategy: Strategy,
        event: &str,
    ) -> SubQueue {
        match strategy {
            Strategy::Skip => {
                self.to_pool(inner, key, qpi, event);
                SubQueue::Unschedulable
            }
            Strategy::AfterBackoff if self.is_backing_off(&qpi) => {
                self.move_to_backoff(inner, key, qpi, event)
            }
            _ => self.move_to_active(inner, key, qpi, event, false),
        }
    }

    /// Into the active queue after PreEnqueue (unless the pod comes from backoff, where it ran);
    /// a gated pod waits in the pool.
    fn move_to_active(
        &self,
        inner: &mut Inner,
        key: String,
        mut qpi: QueuedPodInfo,
        event: &str,
        from_backoff: bool,
    ) -> SubQueue {
        if !from_backoff {
            self.gate(&mut qpi);
        }
        if qpi.gated() {
            self.to_pool(inner, key, qpi, event);
            return SubQueue::Unschedulable;
        }
        inner.active.push(key, qpi);
        self.count_incoming("active", event);
        SubQueue::Active
    }

    fn to_pool(&self, inner: &mut Inner, key: String, qpi: QueuedPodInfo, event: &str) {
        if inner.pool.insert(key, qpi) {
            self.count_incoming("unschedulable", event);
        }
    }

    /// Runs PreEnqueue: a gating plugin joins the pod's rejecting plugins, so its events move
    /// the pod.
    fn gate(&self, qpi: &mut QueuedPodInfo) {
        match (self.pre_enqueue)(&qpi.pod_info) {
            Some(plugin) => {
                if !qpi.unschedulable_plugins.contains(&plugin)
                    && !qpi.pending_plugins.contains(&plugin)
                {
                    self.count_plugin(&plugin, qpi.pod_info.scheduler_name(), 1);
                    qpi.unschedulable_plugins.insert(plugin.clone());
                }
                qpi.gating_plugin = Some(plugin);
            }
            None => qpi.gating_plugin = None,
        }
    }

    /// Keeps `event` for the pods being scheduled.
    fn record_in_flight(
        &self,
        inner: &mut Inner,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        if inner.in_flight.record(InFlightEvent { event, old, new }) {
            self.add_inflight_gauge(&event.label(), 1);
        }
    }

    // ----- metrics -----

    fn publish_counts(&self, inner: &Inner) {
        let c = inner.counts();
        let counts = [c.active, c.backoff, c.unschedulable, c.gated];
        for (gauge, n) in self.pending.iter().zip(counts) {
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        // Every entity ksched queues is a pod.
        if let Some(entities) = &self.metrics.queued_entities {
            for (queue, n) in PENDING_QUEUES.iter().zip(counts) {
                entities
                    .get_or_create(&EntityLabels {
                        queue: (*queue).into(),
                        r#type: ENTITY_POD.into(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// `label` as the emulated minor spells it (see `PodEventSpelling`); `target`: the event is
    /// about the pod it concerns.
    fn event_label<'a>(&self, label: &'a str, target: bool) -> Cow<'a, str> {
        self.metrics.pod_event_spelling.label(label, target)
    }

    fn count_incoming(&self, queue: &str, event: &str) {
        let event = &self.event_label(event, false);
        self.metrics
            .incoming_pods
            .get_or_create(&IncomingLabels {
                queue: queue.to_string(),
                event: event.to_string(),
            })
            .inc();
        if let Some(entities) = &self.metrics.incoming_entities {
            entities
                .get_or_create(&IncomingEntityLabels {
                    queue: queue.to_string(),
                    event: event.to_string(),
                    r#type: ENTITY_POD.into(),
                })
                .inc();
        }
    }

    /// Adds `delta` to `scheduler_unschedulable_pods` for each plugin that rejected the pod.
    fn count_rejectors(&self, qpi: &QueuedPodInfo, delta: i64) {
        let profile = qpi.pod_info.scheduler_name();
        for plugin in qpi.rejector_plugins() {
            self.count_plugin(plugin, profile, delta);
        }
    }

    fn count_plugin(&self, plugin: &str, profile: &str, delta: i64) {
        self.metrics
            .unschedulable_pods
            .get_or_create(&UnschedulableLabels {
                plugin: plugin.to_string(),
                profile: profile.to_string(),
            })
            .inc_by(delta);
    }

    fn add_inflight_gauge(&self, event: &str, delta: i64) {
        let event = &self.event_label(event, false);
        self.metrics
            .inflight_events
            .get_or_create(&EventLabels {
                event: event.to_string(),
            })
            .inc_by(delta);
    }
}

/// The sub-queues `scheduler_pending_pods` counts, in [`QueueCounts`] order.
const PENDING_QUEUES: [&str; 4] = ["active", "backoff", "unschedulable", "gated"];

fn pending_gauges(metrics: &QueueMetrics) -> [Gauge; 4] {
    PENDING_QUEUES.map(|queue| {
        metrics
            .pending_pods
            .get_or_create(&QueueLabels {
                queue: queue.into(),
            })
            .clone()
    })
}
