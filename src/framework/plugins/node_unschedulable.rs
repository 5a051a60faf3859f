//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods tolerating the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::{Node, Taint};

use super::helper::tolerations_tolerate_taint;
use super::names;
use super::taint_toleration::sign_tolerations;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, SignFragment, SignPlugin,
    Status,
};
use crate::framework::plugins::helper::{
    impl_plugin, own_update, queue_if, registration_without_args,
};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo,
    QueueingHint, objects,
};

pub(crate) const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub(crate) const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

#[derive(Debug, Default)]
pub(crate) struct NodeUnschedulable;

impl_plugin!(
    NodeUnschedulable,
    names::NODE_UNSCHEDULABLE,
    [Filter],
    EnqueueExtensions,
    Sign
);

fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`.
fn tolerates_unschedulable(pod: &PodInfo) -> bool {
    let taint = Taint {
        key: TAINT_NODE_UNSCHEDULABLE.to_string(),
        effect: "NoSchedule".to_string(),
        value: None,
        time_added: None,
    };
    tolerations_tolerate_taint(pod.tolerations(), &taint)
}

impl SignPlugin for NodeUnschedulable {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![sign_tolerations(pod.tolerations())?])
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::unresolvable("node(s) had unknown conditions");
        };
        if !is_unschedulable(n) || tolerates_unschedulable(pod) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        }
    }
}

impl EnqueueExtensions for NodeUnschedulable {
    /// A node added schedulable or uncordoned; the pod itself getting the toleration.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION),
                is_schedulable_after_pod_toleration_change,
            ),
        ]
    }
}

/// Upstream's `isSchedulableAfterNodeChange`: Queue for a node added schedulable, or one
/// uncordoned.
fn is_schedulable_after_node_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<Node>(old, new)?;
    let now_schedulable = new.is_some_and(|n| !is_unschedulable(n));
    let was_unschedulable = old.is_none_or(is_unschedulable);
    Ok(queue_if(now_schedulable && was_unschedulable))
}

/// Upstream's `isSchedulableAfterPodTolerationChange`: Queue when the pod itself now tolerates
/// the unschedulable taint.
fn is_schedulable_after_pod_toleration_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    Ok(queue_if(
        own_update(pod, old, new)?.is_some_and(tolerates_unschedulable),
    ))
}

pub(crate) fn registration() -> PluginRegistration {
    registration_without_args::<NodeUnschedulable>(NodeUnschedulable::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn hints() {
        use ActionType as A;
        use EventResource as R;
        use QueueingHint::{Queue, QueueSkip};
        let pl = NodeUnschedulable;
        let pod = PodBuilder::new("p").uid("p").info();
        let node = |cordoned: bool| {
            let b = NodeBuilder::new("n");
            Some(node_obj(
                if cordoned { b.unschedulable() } else { b }.build(),
            ))
        };
        let taint = event(R::Node, A::UPDATE_NODE_TAINT);
        let cases = [
            (
                "schedulable node added",
                event(R::Node, A::ADD),
                None,
                node(false),
                Some(Queue),
            ),
            (
                "cordoned node added",
                event(R::Node, A::ADD),
                None,
                node(true),
                Some(QueueSkip),
            ),
            (
                "node uncordoned",
                taint,
                node(true),
                node(false),
                Some(Queue),
            ),
            (
                "node cordoned",
                taint,
                node(false),
                node(true),
                Some(QueueSkip),
            ),
            (
                "other taint change",
                taint,
                node(false),
                node(false),
                Some(QueueSkip),
            ),
            (
                "label change",
                event(R::Node, A::UPDATE_NODE_LABEL),
                node(true),
                node(false),
                None,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), want, "{name}");
        }
        let toleration = event(R::UnscheduledPod, A::UPDATE_POD_TOLERATION);
        let with = |uid: &str, key: &str| {
            Some(pod_obj(
                PodBuilder::new("p")
                    .uid(uid)
                    .toleration(key, "Exists", "", "NoSchedule")
                    .build(),
            ))
        };
        let old = Some(pod_obj(PodBuilder::new("p").uid("p").build()));
        let cases = [
            (
                "pod tolerates now",
                with("p", TAINT_NODE_UNSCHEDULABLE),
                Queue,
            ),
            ("unrelated toleration", with("p", "other"), QueueSkip),
            (
                "another pod",
                with("q", TAINT_NODE_UNSCHEDULABLE),
                QueueSkip,
            ),
        ];
        for (name, new, want) in cases {
            assert_eq!(
                hint(&pl, toleration, &pod, old.clone(), new),
                Some(want),
                "{name}"
            );
        }
        // A hint given a wrong object errs (the queue then requeues the pod).
        assert!(is_schedulable_after_node_change(&pod, None, old.as_ref()).is_err());
    }

    #[test]
    fn filter() {
        let cases = [
            (
                "schedulable node",
                PodBuilder::new("p"),
                NodeBuilder::new("n"),
                Code::Success,
            ),
            (
                "cordoned node",
                PodBuilder::new("p"),
                NodeBuilder::new("n").unschedulable(),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "cordoned node, pod tolerates the taint",
                PodBuilder::new("p").toleration(
                    TAINT_NODE_UNSCHEDULABLE,
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                NodeBuilder::new("n").unschedulable(),
                Code::Success,
            ),
            (
                "cordoned node, pod tolerates everything",
                PodBuilder::new("p").toleration("", "Exists", "", ""),
                NodeBuilder::new("n").unschedulable(),
                Code::Success,
            ),
        ];
        for (name, pod, node, want) in cases {
            let s = NodeUnschedulable.filter(&CycleState::new(), &pod.info(), &node.info(vec![]));
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON_UNSCHEDULABLE);
            }
        }
    }
}
