//! Which pods leave the unschedulable pool on a cluster event, and where to: the queueing hints
//! of the plugins that rejected them (upstream's `isPodWorthRequeuing`,
//! `MoveAllToActiveOrBackoffQueue` and `determineSchedulingHintForInFlightPod`).

use std::borrow::Cow;
use std::time::Instant;

use tracing::warn;

use super::{Inner, SchedulingQueue, Strategy, Wake};
use crate::framework::types::{
    ClusterEvent, EventObject, PodInfo, PodObject, PodView, QueuedPodInfo, QueueingHint,
};
use crate::scheduler::metrics::HintLabels;

impl SchedulingQueue {
    /// A cluster event (`old` -> `new`): the pods in the pool it may make schedulable move to
    /// active or backoff (upstream's `MoveAllToActiveOrBackoffQueue`).
    pub fn move_all_to_active_or_backoff(
        &self,
        event: &ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        self.move_matching_to_active_or_backoff(event, old, new, |_| true);
    }

    /// As [`SchedulingQueue::move_all_to_active_or_backoff`], for the pods `pre_check` selects
    /// (a deleted nominated pod frees room only for pods of lower or equal priority).
    pub fn move_matching_to_active_or_backoff(
        &self,
        event: &ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        pre_check: impl Fn(&PodInfo) -> bool,
    ) {
        if !self.is_event_of_interest(event) {
            return;
        }
        let mut inner = self.inner.lock();
        let moving: Vec<(String, Strategy)> = inner
            .pool
            .pods
            .iter()
            .filter(|(_, q)| pre_check(&q.pod_info))
            .filter(|(_, q)| self.gate_may_lift(q, event))
            .filter_map(|(k, q)| {
                match self.is_pod_worth_requeuing(q, event, old.as_ref(), new.as_ref()) {
                    Strategy::Skip => None,
                    s => Some((k.clone(), s)),
                }
            })
            .collect();
        let label = event.label();
        let mut woke = false;
        for (key, strategy) in moving {
            if let Some(qpi) = inner.pool.remove(&key) {
                woke |= self
                    .requeue(&mut inner, key, qpi, strategy, &label)
                    .wakes_pop();
            }
        }
        self.record_in_flight(&mut inner, *event, old, new);
        self.release(inner, if woke { Wake::All } else { Wake::None });
    }

    /// Whether a plugin of any profile registered an event covering `event`.
    fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard()
            || self.hints.is_empty()
            || self.hints.values().any(|m| m.is_event_of_interest(event))
    }

    /// A gated pod moves only on the events its gating plugin registered.
    pub(super) fn gate_may_lift(&self, qpi: &QueuedPodInfo, event: &ClusterEvent) -> bool {
        let Some(plugin) = &qpi.gating_plugin else {
            return true;
        };
        match self.hints.get(qpi.pod_info.scheduler_name()) {
            Some(m) => m.plugin_registered(plugin, event),
            None => true,
        }
    }

    /// Upstream's `isPodWorthRequeuing`: runs the hints of the pod's rejecting plugins for the
    /// events covering `event`. Queue from a Pending plugin means at once, from another plugin
    /// after the backoff; all QueueSkip (or no such plugin) means stay.
    pub(super) fn is_pod_worth_requeuing(
        &self,
        qpi: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        if qpi.has_no_rejector() {
            return Strategy::AfterBackoff;
        }
        if event.is_wildcard() {
            // A wildcard event about one pod (an activation) moves only that pod.
            if let Some(p) = new.and_then(|n| n.get::<PodObject>())
                && p.uid() != qpi.pod_info.uid()
            {
                return Strategy::Skip;
            }
            return Strategy::AfterBackoff;
        }
        let Some(map) = self.hints.get(qpi.pod_info.scheduler_name()) else {
            return Strategy::AfterBackoff;
        };
        let mut strategy = Strategy::Skip;
        let mut label: Option<Cow<'static, str>> = None;
        for f in map.hints_for(event) {
            let plugin = f.plugin.as_ref();
            let pending = qpi.pending_plugins.contains(plugin);
            if !pending && !qpi.unschedulable_plugins.contains(plugin) {
                continue;
            }
            let start = Instant::now();
            let (hint, result) = match &f.hint {
                None => (QueueingHint::Queue, QueueingHint::Queue.as_str()),
                Some(hint) => match hint(&qpi.pod_info, old, new) {
                    Ok(h) => (h, h.as_str()),
                    Err(err) => {
                        warn!(%err, plugin, event = %event, pod = %qpi.pod_info.key(),
                            "queueing hint failed; the pod is requeued");
                        (QueueingHint::Queue, "Error")
                    }
                },
            };
            let event_label = label.get_or_insert_with(|| {
                let target = new
                    .or(old)
                    .and_then(|o| o.get::<PodObject>())
                    .is_some_and(|p| p.uid() == qpi.pod_info.uid());
                self.event_label(&event.label(), target).into_owned().into()
            });
            self.metrics
                .queueing_hint_duration
                .get_or_create(&HintLabels {
                    plugin: plugin.to_string(),
                    event: event_label.to_string(),
                    hint: result.to_string(),
                })
                .observe(start.elapsed().as_secs_f64());
            if hint == QueueingHint::QueueSkip {
                continue;
            }
            if pending {
                return Strategy::Immediately;
            }
            if qpi.pending_plugins.is_empty() {
                return Strategy::AfterBackoff;
            }
            strategy = Strategy::AfterBackoff;
        }
        strategy
    }

    /// What the events that arrived during the pod's attempt say (upstream's
    /// `determineSchedulingHintForInFlightPod`): a pod no plugin rejected is retried after its
    /// backoff; otherwise the strongest answer of its rejecting plugins' hints.
    pub(super) fn strategy_for_in_flight_pod(
        &self,
        inner: &Inner,
        key: &str,
        qpi: &QueuedPodInfo,
    ) -> Strategy {
        if qpi.has_no_rejector() {
            return Strategy::AfterBackoff;
        }
        let mut strategy = Strategy::Skip;
        for e in inner.in_flight.events_for(key) {
            match self.is_pod_worth_requeuing(qpi, &e.event, e.old.as_ref(), e.new.as_ref()) {
                Strategy::Skip => {}
                Strategy::Immediately => return Strategy::Immediately,
                Strategy::AfterBackoff => {
                    strategy = Strategy::AfterBackoff;
                    if qpi.pending_plugins.is_empty() {
                        return strategy;
                    }
                }
            }
        }
        strategy
    }
}
