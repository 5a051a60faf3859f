//! LeafNodeTaintToleration: TaintToleration, plus the leaf-node taints tolerated for the pods a
//! policy allows.
//!
//! Args list policies, each with the leaf taints it tolerates and the pods (`namespaceSelector`,
//! `podSelector`) allowed to tolerate them; a pod tolerates the union of the taints of every policy
//! that selects it (order does not matter). A taint given with a value is tolerated as by an
//! `Equal` toleration; one given without a value is tolerated whatever its value (`Exists`, as
//! Kosmos's `MatchTaint`: key and effect). Without args it behaves as Kosmos's plugin: the
//! `kosmos.io/node` NoSchedule taint is tolerated for every pod. Every other taint is judged
//! exactly as TaintToleration does (Filter, and PreScore/Score for PreferNoSchedule taints): the
//! plugin runs TaintToleration's logic on the pod's tolerations plus the granted ones.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::{PodMatcher, validate_pod_selection};
use crate::api::leaf_cluster_policy::LeafTaint;
use crate::config::FieldError;
use crate::config::error::join_path;
use crate::framework::args::{PluginArgs, invalid, not_supported, required};
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, NodeScore, PreScorePlugin,
    ScorePlugin, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::listers::{Listers, NAMESPACES};
use crate::framework::plugins::helper::normalize_to_max;
use crate::framework::plugins::helper::{impl_plugin, namespace_rules, registration_with_listers};
use crate::framework::plugins::names;
use crate::framework::plugins::taint_toleration::{
    filter_tolerations, is_schedulable_after_node_change,
    is_schedulable_after_pod_toleration_change, pre_score_tolerations, score_tolerations,
    sign_tolerations,
};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventResource, NodeInfo, PodInfo, Snapshot,
};

const PRE_SCORE_STATE_KEY: &str = "PreScoreLeafNodeTaintToleration";
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `LeafNodeTaintTolerationArgs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LeafNodeTaintTolerationArgs {
    /// Unset: Kosmos's behaviour (one policy tolerating the `kosmos.io/node` NoSchedule taint for
    /// all pods). An empty list tolerates no leaf taint (what a profile whose policies are all
    /// HostOnly gets).
    pub policies: Option<Vec<LeafTaintPolicy>>,
}

/// Leaf taints and the pods that may tolerate them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeafTaintPolicy {
    /// The taints tolerated (empty: the `kosmos.io/node` NoSchedule taint, any value).
    #[serde(default)]
    pub taints: Vec<LeafTaint>,
    /// Namespaces whose pods may tolerate them (unset: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods that may tolerate them (unset: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

impl PluginArgs for LeafNodeTaintTolerationArgs {
    const KIND: &'static str = "LeafNodeTaintTolerationArgs";

    fn set_defaults(&mut self) {
        for p in self
            .policies
            .get_or_insert_with(|| vec![LeafTaintPolicy::default()])
        {
            if p.taints.is_empty() {
                p.taints.push(kosmos_taint());
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, p) in self.policies.iter().flatten().enumerate() {
            let path = format!("policies[{i}]");
            for (j, t) in p.taints.iter().enumerate() {
                let tpath = join_path(&path, &format!("taints[{j}]"));
                if t.key.is_empty() {
                    errs.push(required(join_path(&tpath, "key"), "taint key is required"));
                }
                if !EFFECTS.contains(&t.effect.as_str()) {
                    errs.push(not_supported(
                        join_path(&tpath, "effect"),
                        &t.effect,
                        &EFFECTS,
                    ));
                }
                if t.effect == "NoExecute" && t.value.contains('\n') {
                    errs.push(invalid(
                        join_path(&tpath, "value"),
                        &t.value,
                        "must be one line",
                    ));
                }
            }
            validate_pod_selection(
                &path,
                p.namespace_selector.as_ref(),
                p.pod_selector.as_ref(),
                &mut errs,
            );
        }
        errs
    }
}

#[derive(Debug)]
struct CompiledPolicy {
    tolerations: Vec<Toleration>,
    pods: PodMatcher,
}

/// The plugin.
#[derive(Debug)]
pub struct LeafNodeTaintToleration {
    policies: Arc<Vec<CompiledPolicy>>,
    listers: Arc<Listers>,
}

impl LeafNodeTaintToleration {
    /// Builds the plugin from defaulted, validated args.
    pub fn new(
        args: &LeafNodeTaintTolerationArgs,
        listers: Arc<Listers>,
    ) -> Result<LeafNodeTaintToleration, String> {
        let mut args = args.clone();
        args.set_defaults();
        let policies = args
            .policies
            .iter()
            .flatten()
            .map(|p| {
                Ok(CompiledPolicy {
                    tolerations: p.taints.iter().map(toleration_for).collect(),
                    pods: PodMatcher::new(p.namespace_selector.as_ref(), p.pod_selector.as_ref())?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(LeafNodeTaintToleration {
            policies: Arc::new(policies),
            listers,
        })
    }

    /// The pod's tolerations plus those granted by every policy selecting it.
    fn tolerations(&self, pod: &PodInfo) -> Vec<Toleration> {
        granted_tolerations(&self.policies, &self.listers, pod)
    }
}

fn granted_tolerations(
    policies: &[CompiledPolicy],
    listers: &Listers,
    pod: &PodInfo,
) -> Vec<Toleration> {
    let mut out = pod.tolerations().to_vec();
    for p in policies {
        if p.pods.matches(pod, listers) {
            out.extend(p.tolerations.iter().cloned());
        }
    }
    out
}

impl EnqueueExtensions for LeafNodeTaintToleration {
    /// TaintToleration's events, judged with the granted tolerations; and the pod's own new
    /// labels, which may make a policy's `podSelector` select it.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let (policies, listers) = (self.policies.clone(), self.listers.clone());
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                move |pod, old, new| {
                    let tolerations = granted_tolerations(&policies, &listers, pod);
                    is_schedulable_after_node_change(&tolerations, old, new)
                },
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::UPDATE_POD_TOLERATION | ActionType::UPDATE_POD_LABEL,
                ),
                is_schedulable_after_pod_toleration_change,
            ),
        ]
    }
}

/// Kosmos's leaf taint as its plugin matches it: key `kosmos.io/node`, effect NoSchedule, any value.
fn kosmos_taint() -> LeafTaint {
    LeafTaint {
        value: String::new(),
        ..LeafTaint::default()
    }
}

fn toleration_for(t: &LeafTaint) -> Toleration {
    let any_value = t.value.is_empty();
    Toleration {
        key: Some(t.key.clone()),
        operator: Some(if any_value { "Exists" } else { "Equal" }.into()),
        value: (!any_value).then(|| t.value.clone()),
        effect: Some(t.effect.clone()),
        toleration_seconds: None,
    }
}

impl_plugin!(
    LeafNodeTaintToleration,
    names::LEAF_NODE_TAINT_TOLERATION,
    [Filter, PreScore, Score],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for LeafNodeTaintToleration {
    /// The pod's tolerations, and its labels (policies select pods by them; by namespace too,
    /// which every signature holds).
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![
            sign_tolerations(pod.tolerations())?,
            SignFragment::json(signer_names::LABELS, &pod.labels())?,
        ])
    }
}

impl FilterPlugin for LeafNodeTaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // Most nodes pass on the pod's own tolerations; only the others need the policies.
        let own = filter_tolerations(node, pod.tolerations());
        if !own.is_rejected() {
            return own;
        }
        filter_tolerations(node, &self.tolerations(pod))
    }
}

impl PreScorePlugin for LeafNodeTaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        pre_score_tolerations(state, PRE_SCORE_STATE_KEY, &self.tolerations(pod))
    }
}

impl ScorePlugin for LeafNodeTaintToleration {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(score_tolerations(state, PRE_SCORE_STATE_KEY, node, || {
            self.tolerations(pod)
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

pub fn registration() -> PluginRegistration {
    registration_with_listers(
        LeafNodeTaintToleration::EXTENSION_POINTS,
        &[&NAMESPACES],
        |args: LeafNodeTaintTolerationArgs, listers| LeafNodeTaintToleration::new(&args, listers),
    )
    .with_rbac_rules(namespace_rules())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::framework::args::{decode, typed};
    use crate::framework::interface::Code;
    use crate::framework::testing::{NodeBuilder, PodBuilder, score_nodes, score_values};
    use crate::framework::types::NodeInfo;
    use serde_json::json;

    fn plugin(args: serde_json::Value) -> LeafNodeTaintToleration {
        let listers = listers_with_namespaces(&[("leafy", &[("leaf", "ok")])]);
        let normalized = decode::<LeafNodeTaintTolerationArgs>(Some(&args)).expect("valid args");
        LeafNodeTaintToleration::new(&typed(&normalized).expect("typed"), Arc::new(listers))
            .expect("plugin")
    }

    fn info(node: k8s_openapi::api::core::v1::Node) -> NodeInfo {
        NodeInfo::with_node(Arc::new(node), [])
    }

    /// TaintToleration's hints with the granted tolerations: a leaf node added is worth a retry
    /// only for the pods a policy lets tolerate its taint.
    #[test]
    fn hints() {
        use crate::framework::testing::hints::{event, hint, node_obj, pod_obj};
        use crate::framework::types::QueueingHint::{Queue, QueueSkip};
        let pl = plugin(json!({"policies": [{
            "taints": [{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}],
            "namespaceSelector": {"matchLabels": {"leaf": "ok"}}
        }]}));
        let add = event(EventResource::Node, ActionType::ADD);
        let leaf = || Some(node_obj(leaf_node("leaf", "c1")));
        let allowed = PodBuilder::new("p").namespace("leafy").info();
        let other = PodBuilder::new("p").namespace("default").info();
        assert_eq!(hint(&pl, add, &allowed, None, leaf()), Some(Queue));
        assert_eq!(hint(&pl, add, &other, None, leaf()), Some(QueueSkip));
        let relabel = event(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL);
        let own = || Some(pod_obj(PodBuilder::new("p").namespace("default").build()));
        assert_eq!(hint(&pl, relabel, &other, own(), own()), Some(Queue));
    }

    #[test]
    fn args_defaults_and_validation() {
        assert_eq!(
            decode::<LeafNodeTaintTolerationArgs>(None),
            Ok(json!({"policies": [{"taints": [
                {"key": "kosmos.io/node", "effect": "NoSchedule"}
            ]}]}))
        );
        let e = decode::<LeafNodeTaintTolerationArgs>(Some(&json!({"policies": [
            {"taints": [{"key": "", "effect": "NoScheduled"}],
             "podSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}
        ]})))
        .unwrap_err();
        let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "policies[0].taints[0].key",
                "policies[0].taints[0].effect",
                "policies[0].podSelector.matchExpressions[0].operator"
            ]
        );
        assert!(decode::<LeafNodeTaintTolerationArgs>(Some(&json!({"taint": {}}))).is_err());
    }

    #[test]
    fn filter() {
        let kosmos = || info(leaf_node("leaf", "c1"));
        let restricted = json!({"policies": [{
            "taints": [{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}],
            "namespaceSelector": {"matchLabels": {"leaf": "ok"}},
            "podSelector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]}]}
        }]});
        let web = || PodBuilder::new("p").namespace("leafy").label("app", "web");
        let untolerated = "node(s) had untolerated taint(s)";
        let cases: Vec<(&str, serde_json::Value, PodBuilder, NodeInfo, Code, &str)> = vec![
            (
                "no args: leaf taint tolerated for every pod (Kosmos)",
                json!({}),
                PodBuilder::new("p"),
                kosmos(),
                Code::Success,
                "",
            ),
            (
                "no args: PreferNoSchedule taints never filter",
                json!({}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("x", "y", "PreferNoSchedule")
                    .info(vec![]),
                Code::Success,
                "",
            ),
            (
                "no args: a second untolerated taint still rejects",
                json!({}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("kosmos.io/node", "true", "NoSchedule")
                    .taint("gpu", "yes", "NoExecute")
                    .info(vec![]),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "no args: any value of the leaf taint (Kosmos matches key and effect)",
                json!({}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("kosmos.io/node", "member-2", "NoSchedule")
                    .info(vec![]),
                Code::Success,
                "",
            ),
            (
                "no args: the leaf key with NoExecute is not the leaf taint",
                json!({}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("kosmos.io/node", "true", "NoExecute")
                    .info(vec![]),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "policy with a value: only that value",
                json!({"policies": [{"taints": [{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}]}]}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("kosmos.io/node", "false", "NoSchedule")
                    .info(vec![]),
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            (
                "policy: selected pod tolerates",
                restricted.clone(),
                web(),
                kosmos(),
                Code::Success,
                "",
            ),
            (
                "policy: pod outside podSelector",
                restricted.clone(),
                PodBuilder::new("p").namespace("leafy").label("app", "api"),
                kosmos(),
                Code::UnschedulableAndUnresolvable,
                untolerated,
            ),
            (
                "policy: matchExpression excludes",
                restricted.clone(),
                web().label("tier", "db"),
                kosmos(),
                Code::UnschedulableAndUnresolvable,
                untolerated,
            ),
            (
                "policy: namespace outside namespaceSelector",
                restricted.clone(),
                PodBuilder::new("p").namespace("other").label("app", "web"),
                kosmos(),
                Code::UnschedulableAndUnresolvable,
                untolerated,
            ),
            (
                "policy: the pod's own toleration still counts",
                restricted.clone(),
                PodBuilder::new("p").toleration("kosmos.io/node", "Exists", "", ""),
                kosmos(),
                Code::Success,
                "",
            ),
            (
                "host node without taints",
                restricted.clone(),
                PodBuilder::new("p"),
                NodeBuilder::new("h").info(vec![]),
                Code::Success,
                "",
            ),
            (
                "custom leaf taint",
                json!({"policies": [{"taints": [{"key": "leaf.example.com/cluster", "effect": "NoExecute"}]}]}),
                PodBuilder::new("p"),
                NodeBuilder::new("n")
                    .taint("leaf.example.com/cluster", "", "NoExecute")
                    .info(vec![]),
                Code::Success,
                "",
            ),
            (
                "custom leaf taint does not tolerate kosmos taint",
                json!({"policies": [{"taints": [{"key": "leaf.example.com/cluster", "effect": "NoExecute"}]}]}),
                PodBuilder::new("p"),
                kosmos(),
                Code::UnschedulableAndUnresolvable,
                untolerated,
            ),
            (
                "several policies: union, order-independent",
                json!({"policies": [
                {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}], "podSelector": {"matchLabels": {"x": "1"}}},
                {"taints": [{"key": "b", "value": "2", "effect": "NoSchedule"}], "podSelector": {"matchLabels": {"y": "1"}}}]}),
                PodBuilder::new("p").label("x", "1").label("y", "1"),
                NodeBuilder::new("n")
                    .taint("b", "2", "NoSchedule")
                    .taint("a", "1", "NoSchedule")
                    .info(vec![]),
                Code::Success,
                "",
            ),
        ];
        for (name, args, pod, node, code, msg) in cases {
            let s = plugin(args).filter(&CycleState::new(), &pod.info(), &node);
            assert_eq!((s.code(), s.message().as_str()), (code, msg), "{name}");
        }
    }

    #[test]
    fn score_counts_prefer_no_schedule_taints_after_granted_tolerations() {
        let pl = plugin(json!({"policies": [{
            "taints": [{"key": "kosmos.io/node", "value": "true", "effect": "PreferNoSchedule"}],
            "podSelector": {"matchLabels": {"app": "web"}}
        }]}));
        let nodes = [
            NodeBuilder::new("host").info(vec![]),
            NodeBuilder::new("leaf")
                .taint("kosmos.io/node", "true", "PreferNoSchedule")
                .info(vec![]),
            NodeBuilder::new("busy")
                .taint("kosmos.io/node", "true", "PreferNoSchedule")
                .taint("x", "y", "PreferNoSchedule")
                .info(vec![]),
        ];
        for (pod, want_raw, want_normalized) in [
            (
                PodBuilder::new("web").label("app", "web").info(),
                [0, 0, 1],
                [100, 100, 0],
            ),
            (PodBuilder::new("other").info(), [0, 1, 2], [100, 50, 0]),
        ] {
            let mut state = CycleState::new();
            assert!(
                pl.pre_score(&mut state, &pod, &Snapshot::new(), &[])
                    .is_success()
            );
            let mut scores = score_nodes(&pl, &state, &pod, &nodes);
            assert_eq!(score_values(&scores), want_raw);
            // Without PreScore the same counts come out.
            let fresh = score_nodes(&pl, &CycleState::new(), &pod, &nodes);
            assert_eq!(score_values(&fresh), want_raw);
            pl.normalize_score(&state, &pod, &mut scores);
            assert_eq!(score_values(&scores), want_normalized);
        }
    }
}
