//! The backoff queue (upstream's `backoff_queue.go`): how long a pod backs off after a failed
//! attempt (its own attempts, or its group's failed cycles), in whole wall-clock seconds; pods
//! into backoff, out of it when it expires, and popped early when the active queue is empty.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use super::{Inner, SchedulingQueue, SubQueue};
use crate::framework::events::BACKOFF_COMPLETE;
use crate::framework::types::QueuedPodInfo;

impl SchedulingQueue {
    /// Into backoff, after PreEnqueue (a gated pod waits in the pool instead).
    pub(super) fn move_to_backoff(
        &self,
        inner: &mut Inner,
        key: String,
        mut qpi: QueuedPodInfo,
        event: &str,
    ) -> SubQueue {
        self.gate(&mut qpi);
        if qpi.gated() {
            self.to_pool(inner, key, qpi, event);
            return SubQueue::Unschedulable;
        }
        let expiry = self.backoff_expiry(&qpi);
        inner.seq += 1;
        let seq = inner.seq;
        inner.backoff_heap.push(Reverse((expiry, seq, key.clone())));
        inner.backoff.insert(key, qpi);
        self.count_incoming("backoff", event);
        SubQueue::Backoff
    }

    /// Moves the pods whose backoff has expired to active (upstream's `flushBackoffQCompleted`);
    /// whether one of them may wake `pop`.
    pub(super) fn flush_backoff_completed(&self, inner: &mut Inner, now: Instant) -> bool {
        let mut woke = false;
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
                // PreEnqueue ran when it entered backoff.
                let to = self.move_to_active(inner, key, qpi, BACKOFF_COMPLETE, true);
                woke |= to.wakes_pop();
            }
        }
        woke
    }

    /// With the active queue empty, the pod backing off after a rejection whose backoff ends
    /// first (within one second: in queue-sort order), taken out of backoff.
    pub(super) fn pop_backoff(&self, inner: &mut Inner) -> Option<(String, QueuedPodInfo)> {
        let mut best: Option<(&String, &QueuedPodInfo)> = None;
        for (key, q) in &inner.backoff {
            if q.has_no_rejector() {
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

    pub(super) fn is_backing_off(&self, qpi: &QueuedPodInfo) -> bool {
        let count = qpi.group_backoff.map_or(qpi.attempts, |g| g.failed_cycles);
        count > 0 && self.backoff_window(qpi) >= self.window(Instant::now())
    }

    /// When the pod's backoff ends: its last timestamp + initial * 2^(attempts-1), at most max.
    /// A member its group's cycle sent back counts the group's failed cycles instead, and its
    /// maximum is max * sqrt(members) (upstream's `calculateBackoffDuration` of an entity), so
    /// the members of a group back off together. It counts as backing off until the
    /// wall-clock second this falls in is over.
    pub fn backoff_expiry(&self, qpi: &QueuedPodInfo) -> Instant {
        let duration = match qpi.group_backoff {
            None => backoff_duration(qpi.attempts, self.initial_backoff, self.max_backoff),
            Some(g) => backoff_duration(
                g.failed_cycles,
                self.initial_backoff,
                group_max_backoff(self.max_backoff, g.size),
            ),
        };
        qpi.timestamp + duration
    }

    pub(super) fn backoff_window(&self, qpi: &QueuedPodInfo) -> u64 {
        self.window(self.backoff_expiry(qpi))
    }

    /// The wall-clock second (since the epoch) `t` falls in: upstream orders and ends backoffs
    /// in one-second windows.
    pub(super) fn window(&self, t: Instant) -> u64 {
        let (anchor, epoch) = self.clock_anchor;
        let wall = if t >= anchor {
            epoch + (t - anchor)
        } else {
            epoch.saturating_sub(anchor - t)
        };
        wall.as_secs()
    }
}

/// The maximum backoff of a group of `size` members: `max` * sqrt(size) (longer than a pod's,
/// still bounded).
fn group_max_backoff(max: Duration, size: usize) -> Duration {
    if size > 1 {
        max.mul_f64((size as f64).sqrt())
    } else {
        max
    }
}

/// initial * 2^(attempts-1), capped at `max` (upstream's calculateBackoffDuration).
fn backoff_duration(attempts: u32, initial: Duration, max: Duration) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let mut d = initial;
    for _ in 1..attempts {
        d = d.saturating_mul(2);
        if d >= max {
            return max;
        }
    }
    d.min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_up_to_max() {
        let (i, m) = (Duration::from_secs(1), Duration::from_secs(10));
        let got: Vec<u64> = (1..=6)
            .map(|a| backoff_duration(a, i, m).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
    }
}
