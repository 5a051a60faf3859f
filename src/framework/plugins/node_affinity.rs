//! NodeAffinity: `spec.nodeSelector` and required node affinity filter nodes; preferred node
//! affinity (weights) scores them. `addedAffinity` (args) applies to every pod of the profile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Node, NodeAffinity as NodeAffinitySpec, NodeSelectorRequirement, NodeSelectorTerm,
    PreferredSchedulingTerm,
};
use serde::{Deserialize, Serialize};

use super::helper::{
    node_selector_term_matches, node_selector_terms_match, normalize_to_max, queue_if,
};
use super::names;
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, decode, invalid, not_supported, required, typed};
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, NodeScore, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo,
    QueueingHint, Snapshot, objects,
};

pub(crate) const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
pub(crate) const ERR_REASON_ENFORCED: &str =
    "node(s) didn't match scheduler-enforced node affinity";
pub(crate) const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const PRE_FILTER_STATE_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_STATE_KEY: &str = "PreScoreNodeAffinity";

/// Upstream's `NodeAffinityArgs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct NodeAffinityArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_affinity: Option<NodeAffinitySpec>,
}

impl PluginArgs for NodeAffinityArgs {
    const KIND: &'static str = "NodeAffinityArgs";

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let Some(a) = &self.added_affinity else {
            return errs;
        };
        if let Some(req) = &a.required_during_scheduling_ignored_during_execution {
            let p =
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
            if req.node_selector_terms.is_empty() {
                errs.push(required(p, "must have at least one node selector term"));
            }
            for (i, t) in req.node_selector_terms.iter().enumerate() {
                validate_term(t, &format!("{p}[{i}]"), &mut errs);
            }
        }
        for (i, t) in a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let p = format!("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&t.weight) {
                errs.push(invalid(
                    format!("{p}.weight"),
                    t.weight,
                    "must be in the range 1-100",
                ));
            }
            validate_term(&t.preference, &format!("{p}.preference"), &mut errs);
        }
        errs
    }
}

fn validate_term(t: &NodeSelectorTerm, path: &str, errs: &mut Vec<FieldError>) {
    for (i, r) in t.match_expressions.iter().flatten().enumerate() {
        validate_requirement(r, &format!("{path}.matchExpressions[{i}]"), false, errs);
    }
    for (i, r) in t.match_fields.iter().flatten().enumerate() {
        validate_requirement(r, &format!("{path}.matchFields[{i}]"), true, errs);
    }
}

fn validate_requirement(
    r: &NodeSelectorRequirement,
    path: &str,
    field: bool,
    errs: &mut Vec<FieldError>,
) {
    let values = r.values.as_deref().unwrap_or(&[]);
    if field {
        if r.key != "metadata.name" {
            errs.push(not_supported(
                format!("{path}.key"),
                &r.key,
                &["metadata.name"],
            ));
        }
        if r.operator != "In" && r.operator != "NotIn" {
            errs.push(not_supported(
                format!("{path}.operator"),
                &r.operator,
                &["In", "NotIn"],
            ));
        } else if values.len() != 1 {
            errs.push(required(
                format!("{path}.values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            ));
        }
        return;
    }
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            errs.push(required(
                format!("{path}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ));
        }
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            errs.push(FieldError::new(
                format!("{path}.values"),
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ));
        }
        "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            errs.push(required(
                format!("{path}.values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            ));
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
        other => errs.push(not_supported(
            format!("{path}.operator"),
            other,
            &["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"],
        )),
    }
    if r.key.is_empty() {
        errs.push(required(
            format!("{path}.key"),
            "name part must be non-empty",
        ));
    }
}

pub(crate) struct NodeAffinity {
    added_required: Option<Vec<NodeSelectorTerm>>,
    added_preferred: Vec<PreferredSchedulingTerm>,
}

impl NodeAffinity {
    pub(crate) fn new(args: NodeAffinityArgs) -> NodeAffinity {
        let (added_required, added_preferred) = match args.added_affinity {
            None => (None, Vec::new()),
            Some(a) => (
                a.required_during_scheduling_ignored_during_execution
                    .map(|s| s.node_selector_terms),
                a.preferred_during_scheduling_ignored_during_execution
                    .unwrap_or_default(),
            ),
        };
        NodeAffinity {
            added_required,
            added_preferred,
        }
    }
}

/// The pod's required node selector and affinity (upstream's `GetRequiredNodeAffinity(pod).Match`).
pub(crate) fn pod_matches_node_selector_and_affinity(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod_matches_node(pod, node.labels(), node.name())
}

/// [`pod_matches_node_selector_and_affinity`] for a node's labels and name.
fn pod_matches_node(pod: &PodInfo, labels: Option<&BTreeMap<String, String>>, name: &str) -> bool {
    if let Some(sel) = pod.node_selector() {
        let ok = sel
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !ok {
            return false;
        }
    }
    match pod.required_node_affinity_terms() {
        None => true,
        Some(terms) => node_selector_terms_match(terms, labels, name),
    }
}

fn node_labels_and_name(node: &Node) -> (Option<&BTreeMap<String, String>>, &str) {
    (
        node.metadata.labels.as_ref(),
        node.metadata.name.as_deref().unwrap_or_default(),
    )
}

impl EnqueueExtensions for NodeAffinity {
    /// A node added, or whose labels changed so that it now matches the pod.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let added = self.added_required.clone();
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ),
            move |pod, old, new| is_schedulable_after_node_change(added.as_deref(), pod, old, new),
        )]
    }
}

/// Upstream's `isSchedulableAfterNodeChange`: Queue when the node (added, or changed from not
/// matching) matches the scheduler-enforced affinity and the pod's.
fn is_schedulable_after_node_change(
    added_required: Option<&[NodeSelectorTerm]>,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<Node>(old, new)?;
    let Some(new) = new else {
        return Ok(QueueingHint::QueueSkip);
    };
    let (labels, name) = node_labels_and_name(new);
    if let Some(terms) = added_required
        && !node_selector_terms_match(terms, labels, name)
    {
        return Ok(QueueingHint::QueueSkip);
    }
    if !pod_matches_node(pod, labels, name) {
        return Ok(QueueingHint::QueueSkip);
    }
    let was_matched = old.is_some_and(|old| {
        let (labels, name) = node_labels_and_name(old);
        pod_matches_node(pod, labels, name)
    });
    Ok(queue_if(!was_matched))
}

/// The sum of the weights of the preferred terms matching the node.
fn preferred_score(terms: &[PreferredSchedulingTerm], node: &NodeInfo) -> i64 {
    terms
        .iter()
        .filter(|t| {
            t.weight != 0 && node_selector_term_matches(&t.preference, node.labels(), node.name())
        })
        .map(|t| i64::from(t.weight))
        .sum()
}

fn pod_preferred_terms(pod: &PodInfo) -> &[PreferredSchedulingTerm] {
    pod.affinity()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

#[derive(Debug, Clone, Copy)]
struct PreFilterState;

impl_plugin!(
    NodeAffinity,
    names::NODE_AFFINITY,
    [PreFilter, Filter, PreScore, Score],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for NodeAffinity {
    /// The pod's node affinity and node selector, as written (the profile's `addedAffinity` is the
    /// same for every pod).
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let node_affinity = pod.affinity().and_then(|a| a.node_affinity.as_ref());
        Ok(vec![
            SignFragment::json(signer_names::NODE_AFFINITY, &node_affinity)?,
            SignFragment::json(signer_names::NODE_SELECTOR, &pod.node_selector())?,
        ])
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let required = pod
            .affinity()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        if required.is_none() && self.added_required.is_none() && pod.node_selector().is_none() {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_STATE_KEY, PreFilterState);
        let Some(required) = required else {
            return (None, Status::success());
        };
        if required.node_selector_terms.is_empty() {
            return (None, Status::success());
        }
        // Terms pinning metadata.name restrict the candidate nodes.
        let mut node_names: Option<BTreeSet<String>> = None;
        for t in &required.node_selector_terms {
            let mut term_names: Option<BTreeSet<String>> = None;
            for r in t.match_fields.iter().flatten() {
                if r.key == "metadata.name" && r.operator == "In" {
                    let s: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            let Some(term_names) = term_names else {
                // A term without a name restriction: every node is eligible (terms are ORed).
                return (None, Status::success());
            };
            node_names
                .get_or_insert_with(BTreeSet::new)
                .extend(term_names);
        }
        match node_names {
            Some(n) if n.is_empty() => (None, Status::unresolvable(ERR_REASON_CONFLICT)),
            Some(n) => (
                Some(PreFilterResult {
                    node_names: Some(n),
                }),
                Status::success(),
            ),
            None => (None, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node().is_none() {
            return Status::error("node not found");
        }
        if let Some(terms) = &self.added_required
            && !node_selector_terms_match(terms, node.labels(), node.name())
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        if !pod_matches_node_selector_and_affinity(pod, node) {
            return Status::unresolvable(ERR_REASON_POD);
        }
        Status::success()
    }
}

#[derive(Debug, Clone, Copy)]
struct PreScoreState;

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        if pod_preferred_terms(pod).is_empty() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_STATE_KEY, PreScoreState);
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(preferred_score(&self.added_preferred, node)
            + preferred_score(pod_preferred_terms(pod), node))
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
        normalize_to_max(false, scores);
        Status::success()
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        NodeAffinity::EXTENSION_POINTS,
        decode::<NodeAffinityArgs>,
        |args, _| {
            Ok(Arc::new(NodeAffinity::new(typed::<NodeAffinityArgs>(
                args,
            )?)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, registered};
    use crate::framework::testing::{NodeBuilder, PodBuilder, score_nodes, score_values, term};
    use serde_json::json;

    /// Upstream's `Test_isSchedulableAfterNodeChange` cases.
    #[test]
    fn hints() {
        use ActionType as A;
        use EventResource as R;
        use QueueingHint::{Queue, QueueSkip};
        assert_eq!(registered(&plugin()), ["Node/Add|UpdateNodeLabel"]);
        let node = |labels: &[(&str, &str)]| {
            let mut b = NodeBuilder::new("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            Some(node_obj(b.build()))
        };
        let selector = PodBuilder::new("p").node_selector("foo", "bar").info();
        let affinity = PodBuilder::new("p")
            .required_term(term(&[("foo", "In", &["bar"])], &[]))
            .info();
        let no_affinity = PodBuilder::new("p").info();
        let enforced = NodeAffinity::new(NodeAffinityArgs {
            added_affinity: Some(NodeAffinitySpec {
                required_during_scheduling_ignored_during_execution: Some(
                    k8s_openapi::api::core::v1::NodeSelector {
                        node_selector_terms: vec![term(&[("zone", "In", &["a"])], &[])],
                    },
                ),
                ..NodeAffinitySpec::default()
            }),
        });
        let add = event(R::Node, A::ADD);
        let label = event(R::Node, A::UPDATE_NODE_LABEL);
        let matching = &[("foo", "bar")][..];
        let cases = [
            (
                "added, selector matches",
                &plugin(),
                &selector,
                add,
                None,
                node(matching),
                Some(Queue),
            ),
            (
                "added, selector does not match",
                &plugin(),
                &selector,
                add,
                None,
                node(&[("foo", "x")]),
                Some(QueueSkip),
            ),
            (
                "added, affinity matches",
                &plugin(),
                &affinity,
                add,
                None,
                node(matching),
                Some(Queue),
            ),
            (
                "added, no affinity",
                &plugin(),
                &no_affinity,
                add,
                None,
                node(&[]),
                Some(Queue),
            ),
            (
                "label makes it match",
                &plugin(),
                &selector,
                label,
                node(&[]),
                node(matching),
                Some(Queue),
            ),
            (
                "affinity label makes it match",
                &plugin(),
                &affinity,
                label,
                node(&[("foo", "x")]),
                node(matching),
                Some(Queue),
            ),
            (
                "matched already",
                &plugin(),
                &selector,
                label,
                node(matching),
                node(&[("foo", "bar"), ("a", "b")]),
                Some(QueueSkip),
            ),
            (
                "still no match",
                &plugin(),
                &selector,
                label,
                node(&[]),
                node(&[("a", "b")]),
                Some(QueueSkip),
            ),
            (
                "enforced affinity does not match",
                &enforced,
                &no_affinity,
                add,
                None,
                node(&[("zone", "b")]),
                Some(QueueSkip),
            ),
            (
                "enforced affinity matches",
                &enforced,
                &no_affinity,
                add,
                None,
                node(&[("zone", "a")]),
                Some(Queue),
            ),
            (
                "annotation change",
                &plugin(),
                &selector,
                event(R::Node, A::UPDATE_NODE_ANNOTATION),
                node(&[]),
                node(matching),
                None,
            ),
            (
                "condition change",
                &plugin(),
                &selector,
                event(R::Node, A::UPDATE_NODE_CONDITION),
                node(&[]),
                node(matching),
                None,
            ),
        ];
        for (name, pl, pod, incoming, old, new, want) in cases {
            assert_eq!(hint(pl, incoming, pod, old, new), want, "{name}");
        }
    }

    fn plugin() -> NodeAffinity {
        NodeAffinity::new(NodeAffinityArgs::default())
    }

    #[test]
    fn filter() {
        let node = || {
            NodeBuilder::new("node1")
                .label("foo", "bar")
                .label("zone", "a")
                .label("gpus", "4")
        };
        let cases = [
            (
                "no selector, no affinity",
                PodBuilder::new("p"),
                Code::Success,
            ),
            (
                "nodeSelector matches",
                PodBuilder::new("p").node_selector("foo", "bar"),
                Code::Success,
            ),
            (
                "nodeSelector misses",
                PodBuilder::new("p").node_selector("foo", "baz"),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "nodeSelector and affinity must both match",
                PodBuilder::new("p")
                    .node_selector("foo", "bar")
                    .required_term(term(&[("zone", "In", &["b"])], &[])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "In",
                PodBuilder::new("p").required_term(term(&[("zone", "In", &["a", "b"])], &[])),
                Code::Success,
            ),
            (
                "NotIn",
                PodBuilder::new("p").required_term(term(&[("zone", "NotIn", &["a"])], &[])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "Exists",
                PodBuilder::new("p").required_term(term(&[("foo", "Exists", &[])], &[])),
                Code::Success,
            ),
            (
                "DoesNotExist",
                PodBuilder::new("p").required_term(term(&[("foo", "DoesNotExist", &[])], &[])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "Gt",
                PodBuilder::new("p").required_term(term(&[("gpus", "Gt", &["2"])], &[])),
                Code::Success,
            ),
            (
                "Lt",
                PodBuilder::new("p").required_term(term(&[("gpus", "Lt", &["2"])], &[])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "terms are ORed",
                PodBuilder::new("p")
                    .required_term(term(&[("zone", "In", &["b"])], &[]))
                    .required_term(term(&[("foo", "In", &["bar"])], &[])),
                Code::Success,
            ),
            (
                "matchFields metadata.name",
                PodBuilder::new("p")
                    .required_term(term(&[], &[("metadata.name", "In", &["node1"])])),
                Code::Success,
            ),
            (
                "matchFields other name",
                PodBuilder::new("p")
                    .required_term(term(&[], &[("metadata.name", "In", &["node2"])])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "empty term matches nothing",
                PodBuilder::new("p").required_term(term(&[], &[])),
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, pod, want) in cases {
            let s = plugin().filter(&CycleState::new(), &pod.info(), &node().info(vec![]));
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON_POD, "{name}");
            }
        }
    }

    #[test]
    fn added_affinity_is_enforced() {
        let args: NodeAffinityArgs = serde_json::from_value(json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
            ]}
        }}))
        .expect("args");
        let p = NodeAffinity::new(args);
        let pod = PodBuilder::new("p").info();
        let s = p.filter(
            &CycleState::new(),
            &pod,
            &NodeBuilder::new("n").info(vec![]),
        );
        assert_eq!(s.message(), ERR_REASON_ENFORCED);
        assert!(
            p.filter(
                &CycleState::new(),
                &pod,
                &NodeBuilder::new("n").label("pool", "batch").info(vec![])
            )
            .is_success()
        );
        // Added affinity makes PreFilter run (not Skip) even for a pod without affinity.
        let (_, s) = p.pre_filter(&mut CycleState::new(), &pod, &Snapshot::new());
        assert!(s.is_success());
    }

    #[test]
    fn pre_filter() {
        let names = |v: &[&str]| Some(PreFilterResult::nodes(v.iter().map(|s| s.to_string())));
        let cases: Vec<(&str, PodBuilder, Option<PreFilterResult>, Code)> = vec![
            (
                "nothing to do: Skip",
                PodBuilder::new("p"),
                None,
                Code::Skip,
            ),
            (
                "nodeSelector only",
                PodBuilder::new("p").node_selector("a", "b"),
                None,
                Code::Success,
            ),
            (
                "metadata.name pins nodes",
                PodBuilder::new("p")
                    .required_term(term(&[], &[("metadata.name", "In", &["n1", "n2"])])),
                names(&["n1", "n2"]),
                Code::Success,
            ),
            (
                "terms are unioned",
                PodBuilder::new("p")
                    .required_term(term(&[], &[("metadata.name", "In", &["n1"])]))
                    .required_term(term(&[], &[("metadata.name", "In", &["n2"])])),
                names(&["n1", "n2"]),
                Code::Success,
            ),
            (
                "fields within a term are intersected",
                PodBuilder::new("p").required_term(term(
                    &[],
                    &[
                        ("metadata.name", "In", &["n1", "n2"]),
                        ("metadata.name", "In", &["n2", "n3"]),
                    ],
                )),
                names(&["n2"]),
                Code::Success,
            ),
            (
                "a term without names: all nodes",
                PodBuilder::new("p")
                    .required_term(term(&[], &[("metadata.name", "In", &["n1"])]))
                    .required_term(term(&[("zone", "In", &["a"])], &[])),
                None,
                Code::Success,
            ),
            (
                "conflicting names",
                PodBuilder::new("p").required_term(term(
                    &[],
                    &[
                        ("metadata.name", "In", &["n1"]),
                        ("metadata.name", "In", &["n2"]),
                    ],
                )),
                None,
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, pod, want, code) in cases {
            let (r, s) = plugin().pre_filter(&mut CycleState::new(), &pod.info(), &Snapshot::new());
            assert_eq!((r, s.code()), (want, code), "{name}");
            if code == Code::UnschedulableAndUnresolvable {
                assert_eq!(s.message(), ERR_REASON_CONFLICT);
            }
        }
    }

    #[test]
    fn score_and_normalize() {
        let pod = PodBuilder::new("p")
            .preferred_term(2, term(&[("foo", "In", &["bar"])], &[]))
            .preferred_term(5, term(&[("zone", "In", &["a"])], &[]))
            .preferred_term(0, term(&[("foo", "In", &["bar"])], &[]))
            .info();
        let nodes = [
            NodeBuilder::new("n1").label("foo", "bar").info(vec![]),
            NodeBuilder::new("n2")
                .label("foo", "bar")
                .label("zone", "a")
                .info(vec![]),
            NodeBuilder::new("n3").info(vec![]),
        ];
        let p = plugin();
        let mut state = CycleState::new();
        assert!(
            p.pre_score(&mut state, &pod, &Snapshot::new(), &[])
                .is_success()
        );
        let mut scores = score_nodes(&p, &state, &pod, &nodes);
        assert_eq!(score_values(&scores), [2, 7, 0]);
        p.normalize_score(&state, &pod, &mut scores);
        assert_eq!(score_values(&scores), [28, 100, 0]);
        // No preferred terms at all: Skip.
        assert!(
            p.pre_score(
                &mut CycleState::new(),
                &PodBuilder::new("q").info(),
                &Snapshot::new(),
                &[]
            )
            .is_skip()
        );
    }

    #[test]
    fn args() {
        assert_eq!(decode::<NodeAffinityArgs>(None), Ok(json!({})));
        let ok = json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
        ]}});
        assert!(decode::<NodeAffinityArgs>(Some(&ok)).is_ok());
        let bad_weight = json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
        ]}});
        let e = decode::<NodeAffinityArgs>(Some(&bad_weight)).unwrap_err();
        assert_eq!(
            e[0].path,
            "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
        );
        let bad_op = json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}
        ]}}});
        let e = decode::<NodeAffinityArgs>(Some(&bad_op)).unwrap_err();
        assert_eq!(
            e[0].path,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator"
        );
        let no_terms = json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}});
        assert!(decode::<NodeAffinityArgs>(Some(&no_terms)).is_err());
        assert!(decode::<NodeAffinityArgs>(Some(&json!({"addedAffinty": {}}))).is_err());
    }
}
