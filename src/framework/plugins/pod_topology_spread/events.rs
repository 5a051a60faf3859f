//! PodTopologySpread's cluster events and queueing hints (upstream's `EventsToRegister`,
//! `isSchedulableAfterPodChange`, `isSchedulableAfterNodeChange`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::PodTopologySpread;
use super::common::{Constraint, DO_NOT_SCHEDULE, node_labels_match_spread_constraints};
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodObject, PodView,
    QueueingHint, objects,
};

impl EnqueueExtensions for PodTopologySpread {
    /// Pods in the pod's namespace added, relabeled or deleted (the counts), the pod's own new
    /// toleration (`nodeTaintsPolicy: Honor`); nodes added, deleted, relabeled or retainted (the
    /// domains).
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        // The hints read the constraints as the plugin does (default ones from its listers).
        let pl = Arc::new(self.clone());
        let on_pod = pl.clone();
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD
                        | ActionType::UPDATE_POD_LABEL
                        | ActionType::UPDATE_POD_TOLERATION
                        | ActionType::DELETE,
                ),
                move |pod, old, new| on_pod.is_schedulable_after_pod_change(pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD
                        | ActionType::DELETE
                        | ActionType::UPDATE_NODE_LABEL
                        | ActionType::UPDATE_NODE_TAINT,
                ),
                move |pod, old, new| pl.is_schedulable_after_node_change(pod, old, new),
            ),
        ]
    }
}

/// Upstream's `involvedInTopologySpreading`: the pod itself, or a pod holding (or nominated to)
/// a node in its namespace.
fn involved_in_topology_spreading(incoming: &PodObject, pod: &PodInfo) -> bool {
    incoming.uid() == pod.uid()
        || (incoming.on_or_nominated_to_node() && incoming.namespace() == pod.namespace())
}

/// Whether some constraint selects pods with `labels`.
fn pod_labels_match_spread_constraints(
    constraints: &[Constraint],
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    constraints.iter().any(|c| c.selector.matches(labels))
}

impl PodTopologySpread {
    fn hard_constraints(&self, pod: &PodInfo) -> Result<Vec<Constraint>, HintError> {
        self.constraints(&pod.pod, DO_NOT_SCHEDULE)
            .map_err(HintError)
    }

    /// Upstream's `isSchedulableAfterPodChange`.
    fn is_schedulable_after_pod_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, HintError> {
        let (original, modified) = objects::<PodObject>(old, new)?;
        if [original, modified]
            .into_iter()
            .flatten()
            .any(|p| !involved_in_topology_spreading(p, pod))
        {
            return Ok(QueueingHint::QueueSkip);
        }
        let constraints = self.hard_constraints(pod)?;
        match (original, modified) {
            (Some(o), Some(m)) => {
                fn tolerations(p: &PodObject) -> Option<&[k8s_openapi::api::core::v1::Toleration]> {
                    p.pod_info().map(PodInfo::tolerations)
                }
                if m.uid() == pod.uid()
                    && tolerations(o) != tolerations(m)
                    && constraints.iter().any(|c| c.honor_node_taints)
                {
                    return Ok(QueueingHint::Queue);
                }
                Ok(queue_if(constraints.iter().any(|c| {
                    c.selector.matches(o.labels()) != c.selector.matches(m.labels())
                })))
            }
            (None, Some(m)) => Ok(queue_if(pod_labels_match_spread_constraints(
                &constraints,
                m.labels(),
            ))),
            (Some(o), None) => Ok(queue_if(pod_labels_match_spread_constraints(
                &constraints,
                o.labels(),
            ))),
            (None, None) => Ok(QueueingHint::QueueSkip),
        }
    }

    /// Upstream's `isSchedulableAfterNodeChange`: a node that has (or had) every topology key of
    /// the pod's constraints added or deleted, one that gains or loses them, or one that keeps
    /// them with a key's value or its taints changed.
    fn is_schedulable_after_node_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, HintError> {
        let (original, modified) = objects::<Node>(old, new)?;
        let constraints = self.hard_constraints(pod)?;
        let labels = |n: &Node| n.metadata.labels.clone();
        let matching =
            |n: &Node| node_labels_match_spread_constraints(labels(n).as_ref(), &constraints);
        match (original, modified) {
            (Some(o), Some(m)) => {
                if matching(o) != matching(m) {
                    return Ok(QueueingHint::Queue);
                }
                let (ol, ml) = (labels(o), labels(m));
                let value = |l: &Option<std::collections::BTreeMap<String, String>>, k: &str| {
                    l.as_ref().and_then(|l| l.get(k)).cloned()
                };
                let key_changed = constraints
                    .iter()
                    .any(|c| value(&ol, &c.topology_key) != value(&ml, &c.topology_key));
                let taints = |n: &Node| n.spec.as_ref().and_then(|s| s.taints.clone());
                Ok(queue_if(
                    matching(m) && (key_changed || taints(o) != taints(m)),
                ))
            }
            (None, Some(m)) => Ok(queue_if(matching(m))),
            (Some(o), None) => Ok(queue_if(matching(o))),
            (None, None) => Ok(QueueingHint::QueueSkip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::listers::Listers;
    use crate::framework::plugins::pod_topology_spread::{LIST_DEFAULTING, PodTopologySpreadArgs};
    use crate::framework::testing::hints::{assigned_obj, event, hint, node_obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder, spread_constraint};
    use QueueingHint::{Queue, QueueSkip};

    fn plugin() -> PodTopologySpread {
        let args = PodTopologySpreadArgs {
            defaulting_type: LIST_DEFAULTING.into(),
            ..PodTopologySpreadArgs::default()
        };
        PodTopologySpread::new(args, Arc::new(Listers::default()))
    }

    fn spread_pod(honor_taints: bool) -> PodInfo {
        let mut c = spread_constraint(1, "zone", "DoNotSchedule", Some(&[("foo", "")]));
        if honor_taints {
            c.node_taints_policy = Some("Honor".into());
        }
        PodBuilder::new("p")
            .uid("p")
            .label("foo", "")
            .spread(c)
            .info()
    }

    /// Upstream's `Test_isSchedulableAfterPodChange` cases.
    #[test]
    fn pod_hints() {
        let pl = plugin();
        let pod = spread_pod(false);
        let assigned = |ns: &str, labels: &[(&str, &str)]| {
            let mut b = PodBuilder::new("o").uid("o").namespace(ns).node("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            Some(assigned_obj(b.build()))
        };
        let foo = &[("foo", "")][..];
        let add = event(EventResource::AssignedPod, ActionType::ADD);
        let relabel = event(EventResource::AssignedPod, ActionType::UPDATE_POD_LABEL);
        let delete = event(EventResource::AssignedPod, ActionType::DELETE);
        let own_toleration = event(
            EventResource::UnscheduledPod,
            ActionType::UPDATE_POD_TOLERATION,
        );
        let own = |toleration: bool| {
            let b = PodBuilder::new("p").uid("p").label("foo", "");
            let b = if toleration {
                b.toleration("k", "Exists", "", "NoSchedule")
            } else {
                b
            };
            Some(pod_obj(b.build()))
        };
        let cases = [
            (
                "matching pod added",
                &pod,
                add,
                None,
                assigned("default", foo),
                Some(Queue),
            ),
            (
                "unmatching pod added",
                &pod,
                add,
                None,
                assigned("default", &[]),
                Some(QueueSkip),
            ),
            (
                "pod added elsewhere",
                &pod,
                add,
                None,
                assigned("other", foo),
                Some(QueueSkip),
            ),
            (
                "unscheduled pod added",
                &pod,
                event(EventResource::UnscheduledPod, ActionType::ADD),
                None,
                Some(pod_obj(PodBuilder::new("o").label("foo", "").build())),
                Some(QueueSkip),
            ),
            (
                "relabeled into the selector",
                &pod,
                relabel,
                assigned("default", &[]),
                assigned("default", foo),
                Some(Queue),
            ),
            (
                "relabeled, no difference",
                &pod,
                relabel,
                assigned("default", &[("foo", ""), ("a", "b")]),
                assigned("default", foo),
                Some(QueueSkip),
            ),
            (
                "matching pod deleted",
                &pod,
                delete,
                assigned("default", foo),
                None,
                Some(Queue),
            ),
            (
                "unmatching pod deleted",
                &pod,
                delete,
                assigned("default", &[]),
                None,
                Some(QueueSkip),
            ),
            (
                "own toleration, Ignore policy",
                &pod,
                own_toleration,
                own(false),
                own(true),
                Some(QueueSkip),
            ),
            (
                "own toleration, Honor policy",
                &spread_pod(true),
                own_toleration,
                own(false),
                own(true),
                Some(Queue),
            ),
        ];
        for (name, pod, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, pod, old, new), want, "{name}");
        }
    }

    /// Upstream's `Test_isSchedulableAfterNodeChange` cases.
    #[test]
    fn node_hints() {
        let pl = plugin();
        let pod = spread_pod(false);
        let node = |labels: &[(&str, &str)], taint: bool| {
            let mut b = NodeBuilder::new("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            if taint {
                b = b.taint("k", "v", "NoSchedule");
            }
            Some(node_obj(b.build()))
        };
        let zone_a = &[("zone", "a")][..];
        let add = event(EventResource::Node, ActionType::ADD);
        let delete = event(EventResource::Node, ActionType::DELETE);
        let label = event(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        let taint = event(EventResource::Node, ActionType::UPDATE_NODE_TAINT);
        let cases = [
            ("added with the key", add, None, node(zone_a, false), Queue),
            (
                "added without the key",
                add,
                None,
                node(&[], false),
                QueueSkip,
            ),
            (
                "deleted with the key",
                delete,
                node(zone_a, false),
                None,
                Queue,
            ),
            (
                "deleted without the key",
                delete,
                node(&[], false),
                None,
                QueueSkip,
            ),
            (
                "got the key",
                label,
                node(&[], false),
                node(zone_a, false),
                Queue,
            ),
            (
                "moved zone",
                label,
                node(zone_a, false),
                node(&[("zone", "b")], false),
                Queue,
            ),
            (
                "unrelated label",
                label,
                node(zone_a, false),
                node(&[("zone", "a"), ("x", "y")], false),
                QueueSkip,
            ),
            (
                "taints changed",
                taint,
                node(zone_a, false),
                node(zone_a, true),
                Queue,
            ),
            (
                "taints changed, no key",
                taint,
                node(&[], false),
                node(&[], true),
                QueueSkip,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), Some(want), "{name}");
        }
    }
}
