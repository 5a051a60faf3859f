//! TaintToleration: Filter rejects nodes with a NoSchedule/NoExecute taint the pod does not
//! tolerate; Score prefers nodes with fewer intolerable PreferNoSchedule taints.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

use super::helper::{
    find_matching_untolerated_taint, normalize_to_max, own_update, queue_if,
    tolerations_tolerate_taint,
};
use super::names;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, NodeScore, PreScorePlugin,
    ScorePlugin, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::plugins::helper::{impl_plugin, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo,
    QueueingHint, Snapshot, objects,
};

const PRE_SCORE_STATE_KEY: &str = "PreScoreTaintToleration";

#[derive(Debug, Default)]
pub(crate) struct TaintToleration;

/// The tolerations that matter for PreferNoSchedule taints.
#[derive(Debug, Clone)]
struct PreScoreState {
    tolerations_prefer_no_schedule: Vec<Toleration>,
}

/// The tolerations that count for PreferNoSchedule taints (empty effect or PreferNoSchedule).
pub(crate) fn prefer_no_schedule_tolerations(tolerations: &[Toleration]) -> Vec<Toleration> {
    tolerations
        .iter()
        .filter(|t| {
            matches!(
                t.effect.as_deref(),
                None | Some("") | Some("PreferNoSchedule")
            )
        })
        .cloned()
        .collect()
}

/// The node's PreferNoSchedule taints `tolerations` do not tolerate (the raw score).
pub(crate) fn count_intolerable_prefer_no_schedule(
    taints: &[Taint],
    tolerations: &[Toleration],
) -> i64 {
    taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule" && !tolerations_tolerate_taint(tolerations, t))
        .count() as i64
}

/// The Filter reason for an untolerated taint. Since 1.35 upstream names no taint (its key and
/// value may be sensitive, and one reason for all taints keeps the counts together).
pub(crate) const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

impl_plugin!(
    TaintToleration,
    names::TAINT_TOLERATION,
    [Filter, PreScore, Score],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for TaintToleration {
    /// A node added or whose taints changed so that the pod may tolerate it; the pod itself
    /// getting a new toleration.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                |pod, old, new| is_schedulable_after_node_change(pod.tolerations(), old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION),
                is_schedulable_after_pod_toleration_change,
            ),
        ]
    }
}

/// Whether `node` has a NoSchedule/NoExecute taint `tolerations` do not tolerate.
fn has_untolerated_taint(node: &Node, tolerations: &[Toleration]) -> bool {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    find_matching_untolerated_taint(taints, tolerations, |t| {
        t.effect == "NoSchedule" || t.effect == "NoExecute"
    })
    .is_some()
}

/// Upstream's `isSchedulableAfterNodeChange`, for a pod with `tolerations`: Queue when the node
/// (added, or before the change) had a taint they do not tolerate and now has none.
pub(crate) fn is_schedulable_after_node_change(
    tolerations: &[Toleration],
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<Node>(old, new)?;
    let was_untolerated = old.is_none_or(|n| has_untolerated_taint(n, tolerations));
    let is_untolerated = new.is_none_or(|n| has_untolerated_taint(n, tolerations));
    Ok(queue_if(was_untolerated && !is_untolerated))
}

/// Upstream's `isSchedulableAfterPodTolerationChange`: the pod itself got a toleration.
pub(crate) fn is_schedulable_after_pod_toleration_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    Ok(queue_if(own_update(pod, old, new)?.is_some()))
}

impl SignPlugin for TaintToleration {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![sign_tolerations(pod.tolerations())?])
    }
}

/// The tolerations in a canonical order (upstream's `TolerationsSigner`, which orders by key and
/// value only).
pub(crate) fn sign_tolerations(tolerations: &[Toleration]) -> Result<SignFragment, Status> {
    let mut sorted: Vec<&Toleration> = tolerations.iter().collect();
    sorted.sort_by(|a, b| {
        let key = |t: &Toleration| {
            (
                t.key.clone(),
                t.operator.clone(),
                t.value.clone(),
                t.effect.clone(),
                t.toleration_seconds,
            )
        };
        key(a).cmp(&key(b))
    });
    SignFragment::json(signer_names::TOLERATIONS, &sorted)
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filter_tolerations(node, pod.tolerations())
    }
}

/// TaintToleration's Filter for a pod with `tolerations` (LeafNodeTaintToleration passes the
/// pod's own plus the leaf taints a policy lets it tolerate).
pub(crate) fn filter_tolerations(node: &NodeInfo, tolerations: &[Toleration]) -> Status {
    if node.node().is_none() {
        return Status::error("invalid nodeInfo");
    }
    let untolerated = find_matching_untolerated_taint(node.taints(), tolerations, |t| {
        t.effect == "NoSchedule" || t.effect == "NoExecute"
    });
    match untolerated {
        None => Status::success(),
        Some(t) => {
            tracing::debug!(node = node.name(), taint = %format_args!("{}={}:{}", t.key, t.value.as_deref().unwrap_or_default(), t.effect), "node had untolerated taints");
            Status::unresolvable(ERR_REASON_UNTOLERATED)
        }
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        pre_score_tolerations(state, PRE_SCORE_STATE_KEY, pod.tolerations())
    }
}

/// TaintToleration's PreScore for a pod with `tolerations`: keeps those that count for
/// PreferNoSchedule taints in `state` under `key`.
pub(crate) fn pre_score_tolerations(
    state: &mut CycleState,
    key: &'static str,
    tolerations: &[Toleration],
) -> Status {
    state.write(
        key,
        PreScoreState {
            tolerations_prefer_no_schedule: prefer_no_schedule_tolerations(tolerations),
        },
    );
    Status::success()
}

/// TaintToleration's Score: the node's intolerable PreferNoSchedule taints, with the tolerations
/// PreScore kept under `key`, or (PreScore disabled) those of `tolerations()`.
pub(crate) fn score_tolerations(
    state: &CycleState,
    key: &'static str,
    node: &NodeInfo,
    tolerations: impl FnOnce() -> Vec<Toleration>,
) -> i64 {
    match state.read::<PreScoreState>(key) {
        Some(s) => {
            count_intolerable_prefer_no_schedule(node.taints(), &s.tolerations_prefer_no_schedule)
        }
        None => count_intolerable_prefer_no_schedule(
            node.taints(),
            &prefer_no_schedule_tolerations(&tolerations()),
        ),
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(score_tolerations(state, PRE_SCORE_STATE_KEY, node, || {
            pod.tolerations().to_vec()
        }))
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        normalize_to_max(true, scores);
        Status::success()
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_without_args::<TaintToleration>(TaintToleration::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, pod_obj, registered};
    use crate::framework::testing::{NodeBuilder, PodBuilder, score_nodes, score_values};

    /// Upstream's `Test_isSchedulableAfterNodeChange` cases, and the pod's own toleration.
    #[test]
    fn hints() {
        use ActionType as A;
        use EventResource as R;
        use QueueingHint::{Queue, QueueSkip};
        let pl = TaintToleration;
        assert_eq!(
            registered(&pl),
            ["Node/Add|UpdateNodeTaint", "Pod/UpdatePodToleration"]
        );
        let pod = PodBuilder::new("p")
            .uid("p")
            .toleration("foo", "Equal", "bar", "NoExecute")
            .info();
        let node = |taints: &[(&str, &str, &str)]| {
            let mut b = NodeBuilder::new("n");
            for (k, v, e) in taints {
                b = b.taint(k, v, e);
            }
            Some(node_obj(b.build()))
        };
        let tolerated = &[("foo", "bar", "NoExecute")][..];
        let untolerated = &[("foo", "baz", "NoExecute")][..];
        let add = event(R::Node, A::ADD);
        let taint = event(R::Node, A::UPDATE_NODE_TAINT);
        let cases = [
            ("added, tolerated", add, None, node(tolerated), Some(Queue)),
            (
                "added, untolerated",
                add,
                None,
                node(untolerated),
                Some(QueueSkip),
            ),
            ("added, no taint", add, None, node(&[]), Some(Queue)),
            (
                "taint now tolerated",
                taint,
                node(untolerated),
                node(tolerated),
                Some(Queue),
            ),
            (
                "untolerated taint removed",
                taint,
                node(untolerated),
                node(&[]),
                Some(Queue),
            ),
            (
                "still untolerated",
                taint,
                node(untolerated),
                node(untolerated),
                Some(QueueSkip),
            ),
            (
                "was tolerated already",
                taint,
                node(tolerated),
                node(&[]),
                Some(QueueSkip),
            ),
            (
                "PreferNoSchedule does not count",
                taint,
                node(untolerated),
                node(&[("x", "y", "PreferNoSchedule")]),
                Some(Queue),
            ),
            (
                "label change",
                event(R::Node, A::UPDATE_NODE_LABEL),
                node(untolerated),
                node(&[]),
                None,
            ),
            (
                "annotation change",
                event(R::Node, A::UPDATE_NODE_ANNOTATION),
                node(untolerated),
                node(&[]),
                None,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), want, "{name}");
        }
        let toleration = event(R::UnscheduledPod, A::UPDATE_POD_TOLERATION);
        let old = || Some(pod_obj(PodBuilder::new("p").uid("p").build()));
        let new = |uid: &str| Some(pod_obj(PodBuilder::new("p").uid(uid).build()));
        assert_eq!(hint(&pl, toleration, &pod, old(), new("p")), Some(Queue));
        assert_eq!(
            hint(&pl, toleration, &pod, old(), new("q")),
            Some(QueueSkip)
        );
        assert!(is_schedulable_after_node_change(&[], None, old().as_ref()).is_err());
    }

    #[test]
    fn filter() {
        let cases = [
            (
                "no taints",
                PodBuilder::new("p"),
                NodeBuilder::new("n"),
                Code::Success,
                "",
            ),
            (
                "untolerated NoSchedule taint",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "control-plane taint without value",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint(
                    "node-role.kubernetes.io/control-plane",
                    "",
                    "NoSchedule",
                ),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "tolerated by equal toleration",
                PodBuilder::new("p").toleration("dedicated", "Equal", "user1", "NoSchedule"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                Code::Success,
                "",
            ),
            (
                "toleration value differs",
                PodBuilder::new("p").toleration("dedicated", "Equal", "user2", "NoSchedule"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "exists toleration with empty effect tolerates NoExecute",
                PodBuilder::new("p").toleration("foo", "Exists", "", ""),
                NodeBuilder::new("n").taint("foo", "bar", "NoExecute"),
                Code::Success,
                "",
            ),
            (
                "PreferNoSchedule taints never filter",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("foo", "bar", "PreferNoSchedule"),
                Code::Success,
                "",
            ),
            (
                "any untolerated taint rejects, none is named",
                PodBuilder::new("p").toleration("a", "Exists", "", ""),
                NodeBuilder::new("n")
                    .taint("a", "1", "NoSchedule")
                    .taint("b", "2", "NoExecute")
                    .taint("c", "3", "NoSchedule"),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "leaf-node taint (Kosmos) is untolerated by default",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("kosmos.io/node", "true", "NoSchedule"),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
        ];
        for (name, pod, node, code, msg) in cases {
            let s = TaintToleration.filter(&CycleState::new(), &pod.info(), &node.info(vec![]));
            assert_eq!((s.code(), s.message().as_str()), (code, msg), "{name}");
        }
    }

    #[test]
    fn score_prefers_fewer_intolerable_prefer_no_schedule_taints() {
        let pod = PodBuilder::new("p")
            .toleration("foo", "Equal", "bar", "PreferNoSchedule")
            .info();
        let nodes = [
            NodeBuilder::new("n1")
                .taint("foo", "bar", "PreferNoSchedule")
                .info(vec![]),
            NodeBuilder::new("n2")
                .taint("foo", "blah", "PreferNoSchedule")
                .info(vec![]),
            NodeBuilder::new("n3")
                .taint("foo", "blah", "PreferNoSchedule")
                .taint("x", "y", "PreferNoSchedule")
                .taint("z", "w", "NoSchedule")
                .info(vec![]),
        ];
        let mut state = CycleState::new();
        let snapshot = Snapshot::new();
        assert!(
            TaintToleration
                .pre_score(&mut state, &pod, &snapshot, &[])
                .is_success()
        );
        let mut scores = score_nodes(&TaintToleration, &state, &pod, &nodes);
        assert_eq!(score_values(&scores), [0, 1, 2]);
        TaintToleration.normalize_score(&state, &pod, &mut scores);
        assert_eq!(score_values(&scores), [100, 50, 0]);

        // Without PreScore the same counts come out.
        let fresh = CycleState::new();
        assert_eq!(TaintToleration.score(&fresh, &pod, &nodes[2]), Ok(2));
    }

    #[test]
    fn toleration_with_other_effect_does_not_count_for_scoring() {
        let pod = PodBuilder::new("p")
            .toleration("foo", "Equal", "bar", "NoSchedule")
            .info();
        let node = NodeBuilder::new("n1")
            .taint("foo", "bar", "PreferNoSchedule")
            .info(vec![]);
        assert_eq!(
            TaintToleration.score(&CycleState::new(), &pod, &node),
            Ok(1)
        );
    }
}
