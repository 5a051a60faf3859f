//! The scheduling queue, after upstream's PriorityQueue: `activeQ` (a heap ordered by the profile's
//! QueueSort plugin), `backoffQ` (pods waiting out their backoff: initial * 2^(attempts-1), capped),
//! and the unschedulable pool, which cluster events move back and a periodic flush empties after
//! 5 minutes. A cluster event that arrives while a pod is being scheduled sends that pod, if it
//! fails, to backoff rather than to the pool, so the event is not lost (upstream's move-request
//! cycle).
//!
//! As upstream 1.33+ (SchedulerPopFromBackoffQ): backoff ends on whole wall-clock seconds (pods in
//! one second are ordered as the active queue orders them), PreEnqueue runs when a pod enters
//! backoff, and when the active queue is empty the next pod backing off after a rejection (not
//! after an error) is scheduled at once instead of the scheduler idling.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::framework::registry::PodNominator;
use crate::framework::types::{PodInfo, QueuedPodInfo};

/// How long a pod may stay in the unschedulable pool before it is retried anyway.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// Orders the active queue: `less(a, b)` means `a` is scheduled before `b`.
pub type LessFn = Arc<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;
/// Runs the PreEnqueue plugins: `None` lets the pod in, `Some(plugin)` names the plugin that gates it.
pub type PreEnqueueFn = Arc<dyn Fn(&PodInfo) -> Option<String> + Send + Sync>;

/// Pod counts per sub-queue, for the `scheduler_pending_pods` metric.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounts {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    initial_backoff: Duration,
    max_backoff: Duration,
    pre_enqueue: PreEnqueueFn,
    nominator: Arc<Nominator>,
    /// An instant and its wall-clock time since the epoch, to place instants in whole seconds.
    clock_anchor: (Instant, Duration),
}

/// Pods nominated to a node by preemption, until they are bound or deleted (upstream's
/// `nominator`): from the pods' `status.nominatedNodeName` and from the scheduler's own PostFilter
/// result (recorded before the status patch lands). Filters count the nominated pods of equal or
/// higher priority on their node.
#[derive(Debug, Default)]
pub struct Nominator {
    inner: parking_lot::RwLock<NominatorInner>,
}

#[derive(Debug, Default)]
struct NominatorInner {
    /// node -> nominated pods.
    by_node: HashMap<String, Vec<Arc<PodInfo>>>,
    /// pod key -> (node, the pod as last seen).
    node_of: HashMap<String, (String, Arc<PodInfo>)>,
    /// Nominations made or dropped so far (for opportunistic batching).
    changes: u64,
}

impl NominatorInner {
    fn delete(&mut self, key: &str) {
        let Some((node, _)) = self.node_of.remove(key) else {
            return;
        };
        self.changes += 1;
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| p.key() != key);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    fn add(&mut self, pod: Arc<PodInfo>, node: &str) {
        let key = pod.key();
        self.delete(&key);
        if node.is_empty() || !pod.node_name().is_empty() {
            return;
        }
        self.node_of.insert(key, (node.to_string(), pod.clone()));
        self.by_node.entry(node.to_string()).or_default().push(pod);
        self.changes += 1;
    }
}

impl Nominator {
    pub fn new() -> Nominator {
        Nominator::default()
    }

    /// Nominates `pod` to `node` (PostFilter's result; an empty node clears the nomination).
    pub fn add_nominated_pod(&self, pod: Arc<PodInfo>, node: &str) {
        self.inner.write().add(pod, node);
    }

    /// A pod as the API shows it: its `status.nominatedNodeName` counts, except that a nomination
    /// the scheduler made is kept while neither the old nor the new object carries one yet (the
    /// status patch has not landed).
    pub fn update(&self, pod: Arc<PodInfo>) {
        let key = pod.key();
        let mut inner = self.inner.write();
        let kept = inner
            .node_of
            .get(&key)
            .filter(|(_, old)| {
                old.nominated_node_name().is_empty() && pod.nominated_node_name().is_empty()
            })
            .map(|(node, _)| node.clone());
        let node = kept.unwrap_or_else(|| pod.nominated_node_name().to_string());
        inner.add(pod, &node);
    }

    /// The pod was bound, assumed or deleted.
    pub fn delete(&self, key: &str) {
        self.inner.write().delete(key);
    }

    /// The node `key` is nominated to.
    pub fn nominated_node(&self, key: &str) -> Option<String> {
        self.inner.read().node_of.get(key).map(|(n, _)| n.clone())
    }
}

impl PodNominator for Nominator {
    fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
        self.inner
            .read()
            .by_node
            .get(node_name)
            .cloned()
            .unwrap_or_default()
    }

    fn batching_generation(&self) -> Option<u64> {
        let inner = self.inner.read();
        inner.by_node.is_empty().then_some(inner.changes)
    }
}

struct Inner {
    active: ActiveHeap,
    /// Backoff expiry -> key; stale entries (pod moved or removed) are skipped on flush.
    backoff_heap: BinaryHeap<Reverse<(Instant, u64, String)>>,
    backoff: HashMap<String, QueuedPodInfo>,
    unschedulable: HashMap<String, QueuedPodInfo>,
    in_flight: HashSet<String>,
    /// In-flight pods deleted meanwhile: dropped instead of requeued when their attempt fails.
    deleted_in_flight: HashSet<String>,
    scheduling_cycle: u64,
    move_request_cycle: u64,
    seq: u64,
    closed: bool,
}

impl SchedulingQueue {
    pub fn new(
        less: LessFn,
        pre_enqueue: PreEnqueueFn,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        Self {
            inner: Mutex::new(Inner {
                active: ActiveHeap::new(less),
                backoff_heap: BinaryHeap::new(),
                backoff: HashMap::new(),
                unschedulable: HashMap::new(),
                in_flight: HashSet::new(),
                deleted_in_flight: HashSet::new(),
                scheduling_cycle: 0,
                move_request_cycle: 0,
                seq: 0,
                closed: false,
            }),
            notify: Notify::new(),
            initial_backoff,
            max_backoff,
            pre_enqueue,
            nominator: Arc::new(Nominator::new()),
            clock_anchor: (
                Instant::now(),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default(),
            ),
        }
    }

    /// Uses `nominator` (shared with the frameworks' handle) to track nominated pods.
    pub fn with_nominator(mut self, nominator: Arc<Nominator>) -> Self {
        self.nominator = nominator;
        self
    }

    pub fn nominator(&self) -> &Arc<Nominator> {
        &self.nominator
    }

    /// A new pending pod.
    pub fn add(&self, pod: Arc<PodInfo>) {
        self.nominator.update(pod.clone());
        let key = pod.key();
        let mut qpi = QueuedPodInfo::new(pod, Instant::now());
        let mut inner = self.inner.lock();
        if inner.contains(&key) || inner.in_flight.contains(&key) {
            drop(inner);
            self.update(qpi.pod_info, true);
            return;
        }
        self.gate(&mut qpi);
        if qpi.gated {
            inner.unschedulable.insert(key, qpi);
        } else {
            inner.active.push(key, qpi);
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// A pending pod changed: the queued copy is replaced. When the change can alter the decision
    /// (`relevant`: spec, labels, annotations; not a status update such as our own PodScheduled
    /// condition), a pod in the unschedulable pool (or gated) is given another chance.
    pub fn update(&self, pod: Arc<PodInfo>, relevant: bool) {
        self.nominator.update(pod.clone());
        let key = pod.key();
        let mut inner = self.inner.lock();
        if let Some(qpi) = inner.active.get_mut(&key) {
            qpi.pod_info = pod;
            inner.active.fix(&key);
            return;
        }
        if let Some(qpi) = inner.backoff.get_mut(&key) {
            qpi.pod_info = pod;
            return;
        }
        if !relevant {
            if let Some(qpi) = inner.unschedulable.get_mut(&key) {
                qpi.pod_info = pod;
            }
            return;
        }
        if let Some(mut qpi) = inner.unschedulable.remove(&key) {
            qpi.pod_info = pod;
            self.gate(&mut qpi);
            if qpi.gated {
                inner.unschedulable.insert(key, qpi);
            } else {
                self.requeue(&mut inner, key, qpi, Instant::now());
                drop(inner);
                self.notify.notify_one();
            }
            return;
        }
        if inner.in_flight.contains(&key) {
            // Being scheduled right now: if this attempt fails, retry soon.
            inner.move_request_cycle = inner.scheduling_cycle;
            return;
        }
        drop(inner);
        self.add(pod);
    }

    /// The pod was deleted or bound by someone else. A pod in flight is not requeued afterwards.
    pub fn delete(&self, key: &str) {
        self.nominator.delete(key);
        let mut inner = self.inner.lock();
        if inner.in_flight.contains(key) {
            inner.deleted_in_flight.insert(key.to_string());
        }
        inner.active.remove(key);
        inner.backoff.remove(key);
        inner.unschedulable.remove(key);
    }

    /// The next pod to schedule, waiting until there is one; `None` once the queue is closed.
    /// The pod counts as in flight until [`SchedulingQueue::done`].
    pub async fn pop(&self) -> Option<(QueuedPodInfo, u64)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if inner.closed {
                    return None;
                }
                let next = match inner.active.pop() {
                    Some(next) => Some(next),
                    None => self.pop_backoff(&mut inner),
                };
                if let Some((key, mut qpi)) = next {
                    inner.scheduling_cycle += 1;
                    qpi.attempts += 1;
                    if qpi.initial_attempt_timestamp.is_none() {
                        qpi.initial_attempt_timestamp = Some(Instant::now());
                    }
                    inner.in_flight.insert(key);
                    let cycle = inner.scheduling_cycle;
                    return Some((qpi, cycle));
                }
            }
            notified.await;
        }
    }

    /// With the active queue empty, the pod backing off after a rejection whose backoff ends
    /// first (within one second: in queue-sort order), taken out of backoff.
    fn pop_backoff(&self, inner: &mut Inner) -> Option<(String, QueuedPodInfo)> {
        let mut best: Option<(&String, &QueuedPodInfo)> = None;
        for (key, q) in &inner.backoff {
            if q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty() {
                continue; // failed with an error: it waits out its backoff
            }
            let better = match best {
                None => true,
                Some((_, b)) => {
                    let (wq, wb) = (self.backoff_window(q), self.backoff_window(b));
                    wq < wb || (wq == wb && (inner.active.less)(q, b))
                }
            };
            if better {
                best = Some((key, q));
            }
        }
        let key = best?.0.clone();
        let qpi = inner.backoff.remove(&key)?;
        Some((key, qpi))
    }

    /// The pod's attempt is over (bound, requeued, or dropped).
    pub fn done(&self, key: &str) {
        let mut inner = self.inner.lock();
        inner.in_flight.remove(key);
        inner.deleted_in_flight.remove(key);
    }

    /// A pod that failed in `cycle` because no node fits: to the unschedulable pool, unless a
    /// cluster event arrived since the attempt started (then to backoff, so it is retried soon).
    pub fn add_unschedulable(&self, qpi: QueuedPodInfo, cycle: u64) {
        let key = qpi.pod_info.key();
        let mut inner = self.inner.lock();
        inner.in_flight.remove(&key);
        if inner.deleted_in_flight.remove(&key) || inner.contains(&key) {
            return;
        }
        let mut qpi = qpi;
        qpi.timestamp = Instant::now();
        if inner.move_request_cycle >= cycle {
            if self.to_backoff(&mut inner, key, qpi) {
                drop(inner);
                self.notify.notify_one();
            }
        } else {
            inner.unschedulable.insert(key, qpi);
        }
    }

    /// A pod that failed with an error: retried after its backoff.
    pub fn add_backoff(&self, qpi: QueuedPodInfo) {
        let key = qpi.pod_info.key();
        let mut inner = self.inner.lock();
        inner.in_flight.remove(&key);
        if inner.deleted_in_flight.remove(&key) || inner.contains(&key) {
            return;
        }
        let mut qpi = qpi;
        qpi.timestamp = Instant::now();
        self.to_backoff(&mut inner, key, qpi);
    }

    /// A cluster event that may make unschedulable pods schedulable (node added or changed, pod
    /// deleted, ...): every pod in the pool goes back to active (or backoff if still backing off).
    pub fn move_all_to_active_or_backoff(&self) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.move_request_cycle = inner.scheduling_cycle;
        // PreEnqueue runs again on the way back (upstream's moveToActiveQ): a pod a plugin holds
        // (DefaultPreemption while its preemption runs) waits in the pool, marked gated.
        if !self.regate(&mut inner, now, |_| true) {
            return;
        }
        drop(inner);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Moves pods whose backoff has expired to active, and pods that sat in the pool longer than
    /// [`MAX_IN_UNSCHEDULABLE`] back too. Called every second.
    pub fn flush(&self) {
        let now = Instant::now();
        let mut moved = false;
        let mut inner = self.inner.lock();
        while let Some(Reverse((at, _, _))) = inner.backoff_heap.peek() {
            if self.window(*at) >= self.window(now) {
                break;
            }
            let Some(Reverse((at, _, key))) = inner.backoff_heap.pop() else {
                break;
            };
            // Stale entries (the pod moved, or backs off anew) are dropped.
            let expired = inner
                .backoff
                .get(&key)
                .is_some_and(|q| self.backoff_expiry(q) == at);
            if expired && let Some(qpi) = inner.backoff.remove(&key) {
                inner.active.push(key, qpi);
                moved = true;
            }
        }
        let stale: Vec<String> = inner
            .unschedulable
            .iter()
            .filter(|(_, q)| !q.gated && now.duration_since(q.timestamp) > MAX_IN_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(qpi) = inner.unschedulable.remove(&key) {
                self.requeue(&mut inner, key, qpi, now);
                moved = true;
            }
        }
        // Gates that lift without an event of their own (a preemption that finished) are seen
        // within a second.
        moved |= self.regate(&mut inner, now, |q| q.gated);
        drop(inner);
        if moved {
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    pub fn counts(&self) -> QueueCounts {
        let inner = self.inner.lock();
        let gated = inner.unschedulable.values().filter(|q| q.gated).count();
        QueueCounts {
            active: inner.active.len(),
            backoff: inner.backoff.len(),
            unschedulable: inner.unschedulable.len() - gated,
            gated,
        }
    }

    /// Wakes every `pop` with `None`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Runs PreEnqueue on the pool's pods chosen by `which`: those it lets in are requeued, the
    /// others stay (gated). Whether any pod moved.
    fn regate(
        &self,
        inner: &mut Inner,
        now: Instant,
        which: impl Fn(&QueuedPodInfo) -> bool,
    ) -> bool {
        let keys: Vec<String> = inner
            .unschedulable
            .iter()
            .filter(|(_, q)| which(q))
            .map(|(k, _)| k.clone())
            .collect();
        let mut moved = false;
        for key in keys {
            let Some(mut qpi) = inner.unschedulable.remove(&key) else {
                continue;
            };
            self.gate(&mut qpi);
            if qpi.gated {
                inner.unschedulable.insert(key, qpi);
            } else {
                self.requeue(inner, key, qpi, now);
                moved = true;
            }
        }
        moved
    }

    fn gate(&self, qpi: &mut QueuedPodInfo) {
        match (self.pre_enqueue)(&qpi.pod_info) {
            Some(plugin) => {
                qpi.gated = true;
                qpi.unschedulable_plugins.insert(plugin);
            }
            None => qpi.gated = false,
        }
    }

    /// To backoff if the pod is still backing off, else to active.
    fn requeue(&self, inner: &mut Inner, key: String, qpi: QueuedPodInfo, now: Instant) {
        if qpi.attempts > 0 && self.backoff_window(&qpi) >= self.window(now) {
            self.to_backoff(inner, key, qpi);
        } else {
            inner.active.push(key, qpi);
        }
    }

    /// Into backoff, after PreEnqueue (a gated pod waits in the pool instead). Whether the pod
    /// is now in backoff.
    fn to_backoff(&self, inner: &mut Inner, key: String, mut qpi: QueuedPodInfo) -> bool {
        self.gate(&mut qpi);
        if qpi.gated {
            inner.unschedulable.insert(key, qpi);
            return false;
        }
        let expiry = self.backoff_expiry(&qpi);
        inner.seq += 1;
        let seq = inner.seq;
        inner.backoff_heap.push(Reverse((expiry, seq, key.clone())));
        inner.backoff.insert(key, qpi);
        true
    }

    /// When the pod's backoff ends: its last timestamp + initial * 2^(attempts-1), at most max.
    /// It counts as backing off until the wall-clock second this falls in is over.
    pub fn backoff_expiry(&self, qpi: &QueuedPodInfo) -> Instant {
        qpi.timestamp + backoff_duration(qpi.attempts, self.initial_backoff, self.max_backoff)
    }

    fn backoff_window(&self, qpi: &QueuedPodInfo) -> u64 {
        self.window(self.backoff_expiry(qpi))
    }

    /// The wall-clock second (since the epoch) `t` falls in: upstream orders and ends backoffs
    /// in one-second windows.
    fn window(&self, t: Instant) -> u64 {
        let (anchor, epoch) = self.clock_anchor;
        let wall = if t >= anchor {
            epoch + (t - anchor)
        } else {
            epoch.saturating_sub(anchor - t)
        };
        wall.as_secs()
    }
}

/// initial * 2^(attempts-1), capped at `max` (upstream's calculateBackoffDuration).
pub fn backoff_duration(attempts: u32, initial: Duration, max: Duration) -> Duration {
    let mut d = initial;
    for _ in 1..attempts {
        d = d.saturating_mul(2);
        if d >= max {
            return max;
        }
    }
    d.min(max)
}

impl Inner {
    fn contains(&self, key: &str) -> bool {
        self.active.contains(key)
            || self.backoff.contains_key(key)
            || self.unschedulable.contains_key(key)
    }
}

/// A binary heap ordered by a runtime comparator, with lookup and removal by key.
struct ActiveHeap {
    less: LessFn,
    items: Vec<(String, QueuedPodInfo)>,
    index: HashMap<String, usize>,
}

impl ActiveHeap {
    fn new(less: LessFn) -> Self {
        Self {
            less,
            items: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut QueuedPodInfo> {
        let i = *self.index.get(key)?;
        Some(&mut self.items[i].1)
    }

    fn push(&mut self, key: String, qpi: QueuedPodInfo) {
        if let Some(&i) = self.index.get(&key) {
            self.items[i].1 = qpi;
            self.fix_at(i);
            return;
        }
        self.index.insert(key.clone(), self.items.len());
        self.items.push((key, qpi));
        self.sift_up(self.items.len() - 1);
    }

    fn pop(&mut self) -> Option<(String, QueuedPodInfo)> {
        if self.items.is_empty() {
            return None;
        }
        let last = self.items.len() - 1;
        self.swap(0, last);
        let (key, qpi) = self.items.pop()?;
        self.index.remove(&key);
        if !self.items.is_empty() {
            self.sift_down(0);
        }
        Some((key, qpi))
    }

    fn remove(&mut self, key: &str) -> Option<QueuedPodInfo> {
        let i = self.index.remove(key)?;
        let last = self.items.len() - 1;
        if i != last {
            self.items.swap(i, last);
            let moved = self.items[i].0.clone();
            self.index.insert(moved, i);
        }
        let (_, qpi) = self.items.pop()?;
        if i < self.items.len() {
            self.fix_at(i);
        }
        Some(qpi)
    }

    fn fix(&mut self, key: &str) {
        if let Some(&i) = self.index.get(key) {
            self.fix_at(i);
        }
    }

    fn fix_at(&mut self, i: usize) {
        let i = self.sift_up(i);
        self.sift_down(i);
    }

    fn before(&self, a: usize, b: usize) -> bool {
        (self.less)(&self.items[a].1, &self.items[b].1)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.index.insert(self.items[a].0.clone(), a);
        self.index.insert(self.items[b].0.clone(), b);
    }

    fn sift_up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.before(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < self.items.len() && self.before(l, best) {
                best = l;
            }
            if r < self.items.len() && self.before(r, best) {
                best = r;
            }
            if best == i {
                return;
            }
            self.swap(i, best);
            i = best;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    fn by_priority() -> LessFn {
        Arc::new(|a: &QueuedPodInfo, b: &QueuedPodInfo| {
            let (pa, pb) = (a.pod_info.priority(), b.pod_info.priority());
            pa > pb || (pa == pb && a.timestamp < b.timestamp)
        })
    }

    fn queue_with_gate(gate: PreEnqueueFn) -> SchedulingQueue {
        SchedulingQueue::new(
            by_priority(),
            gate,
            Duration::from_secs(1),
            Duration::from_secs(10),
        )
    }

    fn queue() -> SchedulingQueue {
        queue_with_gate(Arc::new(|_: &PodInfo| None))
    }

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(PodInfo::from_pod(
            PodBuilder::new(name).priority(priority).build(),
        ))
    }

    async fn pop_name(q: &SchedulingQueue) -> (String, QueuedPodInfo, u64) {
        let (qpi, cycle) = q.pop().await.expect("queue open");
        (qpi.pod_info.name().to_string(), qpi, cycle)
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

    #[test]
    fn backoff_doubles_from_initial_up_to_max() {
        let (i, m) = (Duration::from_secs(1), Duration::from_secs(10));
        let got: Vec<u64> = (1..=6)
            .map(|a| backoff_duration(a, i, m).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
    }

    #[tokio::test]
    async fn unschedulable_pod_waits_for_a_cluster_event() {
        let q = queue();
        q.add(pod("p", 0));
        let (_, qpi, cycle) = pop_name(&q).await;
        q.add_unschedulable(qpi, cycle);
        assert_eq!(
            q.counts(),
            QueueCounts {
                unschedulable: 1,
                ..Default::default()
            }
        );
        q.flush();
        assert_eq!(
            q.counts().unschedulable,
            1,
            "no event, no retry before 5 minutes"
        );
        q.move_all_to_active_or_backoff();
        // Still inside its 1s backoff: it goes to backoffQ, not straight to active.
        assert_eq!(
            q.counts(),
            QueueCounts {
                backoff: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn event_during_the_attempt_sends_the_failed_pod_to_backoff() {
        let q = queue();
        q.add(pod("p", 0));
        let (_, qpi, cycle) = pop_name(&q).await;
        q.move_all_to_active_or_backoff(); // e.g. a node was added while we were filtering
        q.add_unschedulable(qpi, cycle);
        assert_eq!(
            q.counts(),
            QueueCounts {
                backoff: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn backoff_expires_into_active() {
        let q = SchedulingQueue::new(
            by_priority(),
            Arc::new(|_: &PodInfo| None),
            Duration::from_millis(10),
            Duration::from_millis(10),
        );
        q.add(pod("p", 0));
        let (_, qpi, _) = pop_name(&q).await;
        q.add_backoff(qpi);
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
        assert_eq!(
            q.counts(),
            QueueCounts {
                active: 1,
                ..Default::default()
            }
        );
        let (name, qpi, _) = pop_name(&q).await;
        assert_eq!((name.as_str(), qpi.attempts), ("p", 2));
    }

    /// A pod rejected by `plugin`, back from an attempt.
    async fn rejected(q: &SchedulingQueue, plugin: &str) -> (QueuedPodInfo, u64) {
        let (_, mut qpi, cycle) = pop_name(q).await;
        qpi.unschedulable_plugins.insert(plugin.into());
        (qpi, cycle)
    }

    #[tokio::test]
    async fn empty_active_queue_pops_from_backoff() {
        let q = SchedulingQueue::new(
            by_priority(),
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
            let (qpi, cycle) = rejected(&q, "NodeResourcesFit").await;
            attempts.push((qpi, cycle));
        }
        q.move_all_to_active_or_backoff(); // an event during the attempts: retry soon
        // Low fails last but goes first unless both fall in one second.
        for (mut qpi, cycle) in attempts.into_iter().rev() {
            if qpi.pod_info.name() == "errored" {
                qpi.unschedulable_plugins.clear();
                q.add_backoff(qpi);
            } else {
                q.add_unschedulable(qpi, cycle);
            }
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
        let (name, qpi, _) = pop_name(&q).await;
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
        let gate_on = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let g = gate_on.clone();
        let q = queue_with_gate(Arc::new(move |_: &PodInfo| {
            g.load(std::sync::atomic::Ordering::SeqCst)
                .then(|| "DefaultPreemption".to_string())
        }));
        q.add(pod("p", 0));
        let (qpi, cycle) = rejected(&q, "NodeResourcesFit").await;
        q.move_all_to_active_or_backoff();
        gate_on.store(true, std::sync::atomic::Ordering::SeqCst);
        q.add_unschedulable(qpi, cycle);
        assert_eq!(
            q.counts(),
            QueueCounts {
                gated: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn gated_pods_stay_out_until_an_update_ungates_them() {
        let q = queue_with_gate(Arc::new(|p: &PodInfo| {
            p.labels()
                .is_some_and(|l| l.contains_key("gated"))
                .then(|| "SchedulingGates".to_string())
        }));
        let gated = Arc::new(PodInfo::from_pod(
            PodBuilder::new("g").label("gated", "yes").build(),
        ));
        q.add(gated);
        assert_eq!(
            q.counts(),
            QueueCounts {
                gated: 1,
                ..Default::default()
            }
        );
        q.move_all_to_active_or_backoff();
        assert_eq!(q.counts().gated, 1, "cluster events do not ungate");
        q.update(pod("g", 0), false);
        assert_eq!(q.counts().gated, 1, "a status-only update does not ungate");
        q.update(pod("g", 0), true);
        assert_eq!(
            q.counts(),
            QueueCounts {
                active: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn delete_removes_from_every_sub_queue() {
        let q = queue();
        q.add(pod("a", 0));
        q.add(pod("b", 0));
        let (_, qpi, cycle) = pop_name(&q).await;
        q.add_unschedulable(qpi, cycle);
        q.delete("default/a");
        q.delete("default/b");
        assert_eq!(q.counts(), QueueCounts::default());
    }

    #[tokio::test]
    async fn a_pod_deleted_while_in_flight_is_not_requeued() {
        let q = queue();
        q.add(pod("p", 0));
        let (_, qpi, cycle) = pop_name(&q).await;
        q.delete("default/p");
        q.add_unschedulable(qpi, cycle);
        assert_eq!(q.counts(), QueueCounts::default());
    }

    #[tokio::test]
    async fn update_reorders_the_active_heap() {
        let q = queue();
        q.add(pod("a", 1));
        q.add(pod("b", 2));
        q.update(pod("a", 10), true);
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
        q.update(b, false);
        assert_eq!(nominated_names(&q, "n2"), ["b"]);
        assert_eq!(
            q.nominator().nominated_node("default/b").as_deref(),
            Some("n2")
        );
        // The patch lands, then another preemption clears it through the API.
        let b_nominated = Arc::new(PodInfo::from_pod(
            PodBuilder::new("b")
                .priority(10)
                .nominated_node("n2")
                .build(),
        ));
        q.update(b_nominated, false);
        assert_eq!(nominated_names(&q, "n2"), ["b"]);
        q.update(pod("b", 10), false);
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
    async fn pre_enqueue_runs_again_on_moves_and_lifted_gates_are_seen_on_flush() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let hold = Arc::new(AtomicBool::new(false));
        let h = hold.clone();
        let q = queue_with_gate(Arc::new(move |_: &PodInfo| {
            h.load(Ordering::SeqCst)
                .then(|| "DefaultPreemption".to_string())
        }));
        q.add(pod("p", 0));
        let (_, qpi, cycle) = pop_name(&q).await;
        q.add_unschedulable(qpi, cycle);
        // A plugin holds the pod (its preemption runs): an event does not send it back.
        hold.store(true, Ordering::SeqCst);
        q.move_all_to_active_or_backoff();
        assert_eq!(
            q.counts(),
            QueueCounts {
                gated: 1,
                ..Default::default()
            }
        );
        // The hold lifts with no event of its own: the next flush requeues the pod.
        hold.store(false, Ordering::SeqCst);
        q.flush();
        assert_eq!(q.counts().gated, 0);
        assert_eq!(q.counts().active + q.counts().backoff, 1);
    }
}
