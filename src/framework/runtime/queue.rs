//! PreEnqueue and QueueSort, and the events (with the plugins' queueing hints) that may make the
//! pods this profile's plugins rejected schedulable (upstream's `fillEnqueueExtensions`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{EntriesByPoint, Framework, rejection_or_error};
use crate::config::ExtensionPoint;
use crate::framework::events::{QueueingHintMap, unroll_wildcard_resource};
use crate::framework::extender::EXTENDER_NAME;
use crate::framework::interface::{Plugin, Status};
use crate::framework::metrics::Point;
use crate::framework::registry::Handle;
use crate::framework::types::{PodInfo, QueuedPodInfo};

/// The events of the plugins that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve,
/// Permit): what each declares, or every event for one that declares nothing; and every event
/// for the extenders, which declare nothing (upstream's `fillEnqueueExtensions`).
pub(super) fn queueing_hint_map(
    instances: &BTreeMap<String, Arc<dyn Plugin>>,
    points: &EntriesByPoint,
    handle: &Handle,
) -> QueueingHintMap {
    const REJECTING: [ExtensionPoint; 5] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
    ];
    let rejecting: BTreeSet<&str> = REJECTING
        .iter()
        .flat_map(|ep| points.get(*ep))
        .map(|e| e.name.as_ref())
        .collect();
    let mut map = QueueingHintMap::default();
    if !handle.extenders.is_empty() {
        map.register(EXTENDER_NAME, unroll_wildcard_resource());
    }
    for (name, plugin) in instances {
        if !rejecting.contains(name.as_str()) {
            continue;
        }
        let events = match plugin.as_enqueue_extensions() {
            Some(ext) => ext.events_to_register(),
            None => unroll_wildcard_resource(),
        };
        map.register(name, events);
    }
    map
}

impl Framework {
    /// The events that may make the pods this profile's plugins rejected schedulable, with the
    /// plugins' hints (upstream's per-profile `QueueingHintMap`).
    pub fn queueing_hints(&self) -> &Arc<QueueingHintMap> {
        &self.queueing_hints
    }

    /// PreEnqueue: the first non-success keeps the pod out of the active queue.
    pub fn run_pre_enqueue_plugins(&self, pod: &PodInfo) -> Status {
        let entries = self.at(ExtensionPoint::PreEnqueue);
        if entries.is_empty() {
            return Status::success();
        }
        let sampled = self
            .instruments
            .as_ref()
            .is_some_and(|i| i.pre_enqueue.sample());
        self.at_point(
            Point::PreEnqueue,
            || {
                for e in entries {
                    let Some(p) = e.plugin.as_pre_enqueue() else {
                        continue;
                    };
                    let timer = e.timer(Point::PreEnqueue, sampled);
                    let s = p.pre_enqueue(pod);
                    timer.stop(s.code());
                    if !s.is_success() {
                        return rejection_or_error("PreEnqueue", &e.name, s)
                            .with_plugin(e.name.clone());
                    }
                }
                Status::success()
            },
            Status::code,
        )
    }

    /// QueueSort: whether `a` goes before `b`.
    pub fn queue_sort_less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match self
            .at(ExtensionPoint::QueueSort)
            .first()
            .and_then(|e| e.plugin.as_queue_sort())
        {
            Some(p) => p.less(a, b),
            None => a.timestamp < b.timestamp,
        }
    }

    pub fn queue_sort_plugin_name(&self) -> Option<&str> {
        self.at(ExtensionPoint::QueueSort).first().map(|e| &*e.name)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::log;
    use super::*;
    use crate::framework::testing::{Fake, PodBuilder, handle, profile, registry_with};
    use ExtensionPoint::*;

    /// The profile's events are those its rejecting plugins declare; a plugin that declares none
    /// (here an out-of-tree fake) gets every event; score-only plugins register nothing.
    #[test]
    fn queueing_hints_come_from_the_rejecting_plugins() {
        use crate::framework::events::EVENT_NODE_ADD;
        use crate::framework::types::{ActionType, ClusterEvent, EventResource};
        let l = log();
        let (reg, _) = registry_with(vec![Fake::new("Mine", &l)]);
        let spec = profile(&[
            (Filter, &["NodeAffinity", "Mine"]),
            (Score, &["ImageLocality"]),
        ]);
        let fwk = Framework::new(&spec, &reg, handle().0).expect("framework");
        let hints = fwk.queueing_hints();
        assert_eq!(
            hints.plugins().into_iter().collect::<Vec<_>>(),
            ["Mine", "NodeAffinity"]
        );
        let pv_added = ClusterEvent::new(EventResource::PersistentVolume, ActionType::ADD);
        let plugins = |e: &ClusterEvent| {
            let mut p: Vec<String> = hints.hints_for(e).map(|f| f.plugin.to_string()).collect();
            p.sort();
            p
        };
        assert_eq!(plugins(&pv_added), ["Mine"]);
        assert_eq!(plugins(&EVENT_NODE_ADD), ["Mine", "NodeAffinity"]);
        let annotation = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ANNOTATION);
        assert_eq!(plugins(&annotation), ["Mine"]);
    }

    #[test]
    fn pre_enqueue_and_queue_sort() {
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let fwk = Framework::new(&profile(&[(PreEnqueue, &["SchedulingGates"])]), &reg, h)
            .expect("framework");
        let gated = PodBuilder::new("p").scheduling_gate("g").info();
        let s = fwk.run_pre_enqueue_plugins(&gated);
        assert_eq!(s.plugin(), Some("SchedulingGates"));
        assert!(
            fwk.run_pre_enqueue_plugins(&PodBuilder::new("q").info())
                .is_success()
        );
        let now = std::time::Instant::now();
        let hi = QueuedPodInfo::new(PodBuilder::new("a").priority(10).arc_info(), now);
        let lo = QueuedPodInfo::new(PodBuilder::new("b").priority(1).arc_info(), now);
        assert!(fwk.queue_sort_less(&hi, &lo));
        assert_eq!(fwk.queue_sort_plugin_name(), Some("PrioritySort"));
    }
}
