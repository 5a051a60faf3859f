//! InterPodAffinity's cluster events and queueing hints (upstream's `EventsToRegister`,
//! `isSchedulableAfterPodChange`, `isSchedulableAfterNodeChange`).

use k8s_openapi::api::core::v1::Node;

use super::InterPodAffinity;
use super::terms::pod_matches_all_affinity_terms;
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::affinity_terms::PodTerms;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodObject, PodView,
    QueueingHint, objects,
};

impl EnqueueExtensions for InterPodAffinity {
    /// An assigned pod added (affinity), relabeled or deleted (anti-affinity), the pod's own
    /// relabeling; a node added or whose labels (topology) changed.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
                ),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
                ),
                is_schedulable_after_node_change,
            ),
        ]
    }
}

fn terms_of(pod: &PodInfo) -> Result<PodTerms, HintError> {
    PodTerms::of(&pod.pod).map_err(HintError)
}

/// Upstream's `isSchedulableAfterPodChange`.
fn is_schedulable_after_pod_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<PodObject>(old, new)?;
    if let (Some(_), Some(m)) = (original, modified)
        && m.uid() == pod.uid()
    {
        // Its own labels changed: another pod's anti-affinity may no longer match it.
        return Ok(QueueingHint::Queue);
    }
    // A pod that holds no node (nor a nomination) changes nothing.
    if [original, modified]
        .into_iter()
        .flatten()
        .any(|p| !p.on_or_nominated_to_node())
    {
        return Ok(QueueingHint::QueueSkip);
    }
    let terms = terms_of(pod)?;
    let (affinity, anti) = (&terms.required_affinity, &terms.required_anti_affinity);
    match (original, modified) {
        // Relabeled: now matching the affinity, or no longer matching the anti-affinity.
        (Some(o), Some(m)) => Ok(queue_if(
            (!pod_matches_all_affinity_terms(affinity, o)
                && pod_matches_all_affinity_terms(affinity, m))
                || (pod_matches_all_affinity_terms(anti, o)
                    && !pod_matches_all_affinity_terms(anti, m)),
        )),
        (None, Some(m)) => Ok(queue_if(pod_matches_all_affinity_terms(affinity, m))),
        (Some(o), None) => {
            if pod_matches_all_affinity_terms(anti, o) {
                return Ok(QueueingHint::Queue);
            }
            // The deleted pod's own anti-affinity may have kept the pod away.
            let its_anti = PodTerms::declared(o, o.affinity())
                .map_err(HintError)?
                .required_anti_affinity;
            Ok(queue_if(pod_matches_all_affinity_terms(
                &its_anti,
                pod.pod.as_ref(),
            )))
        }
        (None, None) => Ok(QueueingHint::QueueSkip),
    }
}

/// Upstream's `isSchedulableAfterNodeChange`: a node added with (or getting, or moving in) a
/// topology key of the pod's affinity; for anti-affinity any node added, or one losing or moving
/// in a key.
fn is_schedulable_after_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<Node>(old, new)?;
    let Some(modified) = modified else {
        return Ok(QueueingHint::QueueSkip);
    };
    let terms = terms_of(pod)?;
    let value = |n: &Node, key: &str| n.metadata.labels.as_ref()?.get(key).cloned();
    for term in &terms.required_affinity {
        let key = term.topology_key.as_str();
        let after = value(modified, key);
        let before = original.map(|o| value(o, key));
        let joins = match before {
            None => after.is_some(),
            Some(None) => after.is_some(),
            Some(Some(b)) => after.is_some_and(|a| a != b),
        };
        if joins {
            return Ok(QueueingHint::Queue);
        }
    }
    for term in &terms.required_anti_affinity {
        let Some(original) = original else {
            // Any new node: one without the key always accepts the pod.
            return Ok(QueueingHint::Queue);
        };
        let key = term.topology_key.as_str();
        match (value(original, key), value(modified, key)) {
            (Some(_), None) => return Ok(QueueingHint::Queue),
            (Some(b), Some(a)) if a != b => return Ok(QueueingHint::Queue),
            _ => {}
        }
    }
    Ok(QueueingHint::QueueSkip)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::framework::listers::Listers;
    use crate::framework::plugins::inter_pod_affinity::InterPodAffinityArgs;
    use crate::framework::testing::hints::{assigned_obj, event, hint, node_obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder, pod_term};
    use QueueingHint::{Queue, QueueSkip};

    fn plugin() -> InterPodAffinity {
        InterPodAffinity::new(
            InterPodAffinityArgs::default(),
            Arc::new(Listers::default()),
        )
    }

    /// Upstream's `Test_isSchedulableAfterPodChange` cases.
    #[test]
    fn pod_hints() {
        let pl = plugin();
        let with_affinity = PodBuilder::new("p")
            .uid("p")
            .required_pod_affinity(pod_term(&[("service", "securityscan")], "zone"))
            .info();
        let with_anti = PodBuilder::new("p")
            .uid("p")
            .label("service", "web")
            .required_pod_anti_affinity(pod_term(&[("service", "securityscan")], "zone"))
            .info();
        let assigned = |labels: &[(&str, &str)]| {
            let mut b = PodBuilder::new("o").uid("o").node("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            Some(assigned_obj(b.build()))
        };
        let scan = &[("service", "securityscan")][..];
        let add = event(EventResource::AssignedPod, ActionType::ADD);
        let relabel = event(EventResource::AssignedPod, ActionType::UPDATE_POD_LABEL);
        let delete = event(EventResource::AssignedPod, ActionType::DELETE);
        let hater = Some(assigned_obj(
            PodBuilder::new("h")
                .node("n")
                .required_pod_anti_affinity(pod_term(&[("service", "web")], "zone"))
                .build(),
        ));
        let cases = [
            (
                "added pod matches the affinity",
                &with_affinity,
                add,
                None,
                assigned(scan),
                Some(Queue),
            ),
            (
                "added pod does not match",
                &with_affinity,
                add,
                None,
                assigned(&[]),
                Some(QueueSkip),
            ),
            (
                "added pod unscheduled",
                &with_affinity,
                event(EventResource::UnscheduledPod, ActionType::ADD),
                None,
                Some(pod_obj(
                    PodBuilder::new("o")
                        .label("service", "securityscan")
                        .build(),
                )),
                Some(QueueSkip),
            ),
            (
                "relabeled to match the affinity",
                &with_affinity,
                relabel,
                assigned(&[]),
                assigned(scan),
                Some(Queue),
            ),
            (
                "relabeled away from the anti-affinity",
                &with_anti,
                relabel,
                assigned(scan),
                assigned(&[]),
                Some(Queue),
            ),
            (
                "relabeled, still matching anti-affinity",
                &with_anti,
                relabel,
                assigned(scan),
                assigned(scan),
                Some(QueueSkip),
            ),
            (
                "deleted pod matched the anti-affinity",
                &with_anti,
                delete,
                assigned(scan),
                None,
                Some(Queue),
            ),
            (
                "deleted pod unrelated",
                &with_anti,
                delete,
                assigned(&[]),
                None,
                Some(QueueSkip),
            ),
            (
                "deleted pod's anti-affinity kept it away",
                &with_anti,
                delete,
                hater,
                None,
                Some(Queue),
            ),
            (
                "the pod's own relabeling",
                &with_anti,
                event(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL),
                Some(pod_obj(PodBuilder::new("p").uid("p").build())),
                Some(pod_obj(
                    PodBuilder::new("p").uid("p").label("a", "b").build(),
                )),
                Some(Queue),
            ),
            (
                "assigned pod updated otherwise",
                &with_anti,
                event(EventResource::AssignedPod, ActionType::UPDATE),
                assigned(scan),
                assigned(&[]),
                None,
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
        let with_affinity = PodBuilder::new("p")
            .required_pod_affinity(pod_term(&[("service", "securityscan")], "zone"))
            .info();
        let with_anti = PodBuilder::new("p")
            .required_pod_anti_affinity(pod_term(&[("service", "securityscan")], "zone"))
            .info();
        let node = |labels: &[(&str, &str)]| {
            let mut b = NodeBuilder::new("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            Some(node_obj(b.build()))
        };
        let add = event(EventResource::Node, ActionType::ADD);
        let label = event(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        let cases = [
            (
                "added with the affinity key",
                &with_affinity,
                add,
                None,
                node(&[("zone", "a")]),
                Queue,
            ),
            (
                "added without it",
                &with_affinity,
                add,
                None,
                node(&[]),
                QueueSkip,
            ),
            (
                "got the affinity key",
                &with_affinity,
                label,
                node(&[]),
                node(&[("zone", "a")]),
                Queue,
            ),
            (
                "moved domain (affinity)",
                &with_affinity,
                label,
                node(&[("zone", "a")]),
                node(&[("zone", "b")]),
                Queue,
            ),
            (
                "unrelated label",
                &with_affinity,
                label,
                node(&[("zone", "a")]),
                node(&[("zone", "a"), ("x", "y")]),
                QueueSkip,
            ),
            (
                "added (anti-affinity)",
                &with_anti,
                add,
                None,
                node(&[]),
                Queue,
            ),
            (
                "lost the anti-affinity key",
                &with_anti,
                label,
                node(&[("zone", "a")]),
                node(&[]),
                Queue,
            ),
            (
                "got the anti-affinity key",
                &with_anti,
                label,
                node(&[]),
                node(&[("zone", "a")]),
                QueueSkip,
            ),
        ];
        for (name, pod, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, pod, old, new), Some(want), "{name}");
        }
    }
}
