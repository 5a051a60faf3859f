//! LeafNodeDistribution: which pods may use which leaf nodes, and whether host or leaf nodes are
//! preferred (Filter and Score).
//!
//! Args list placement policies (rendered by the operator from `LeafClusterPolicy.spec.placement`,
//! one per policy naming the profile). Each has a `leafNodeSelector` (the nodes standing for its
//! leaf cluster(s); default `kosmos.io/node=true`), a `mode` (Mix, HostOnly, LeafOnly, PreferHost,
//! PreferLeaf), a `weight` (1-100, Prefer modes only, default 100) and the pods it applies to:
//! `namespaceSelector` (matched against the labels of the pod's namespace) and `podSelector`, both
//! with full label-selector semantics. A node is a *leaf node* when it matches some policy's
//! `leafNodeSelector`; every other node is a *host node*.
//!
//! The outcome for a pod never depends on the order of the policies. With the policies that select
//! the pod (*its policies*):
//! - Filter, most restrictive wins: a HostOnly policy rejects every leaf node; a LeafOnly policy
//!   rejects every node outside its own leaf nodes (so several LeafOnly policies intersect, and
//!   HostOnly with LeafOnly leaves no node — the conflict is visible in the pod's FailedScheduling
//!   message); and a leaf node must be opened by one of its policies (its `leafNodeSelector`
//!   matches the node). So a pod that no policy selects stays on host nodes.
//! - Score (0-100, no normalization): a host node scores the highest weight among its PreferHost
//!   policies, a leaf node the highest weight among its PreferLeaf policies whose leaf nodes include
//!   it; everything else scores 0. When both preferences apply, the heavier one wins.
//! - DaemonSet pods (an owner reference of kind DaemonSet) never go to leaf nodes.
//!
//! Without policies (Kosmos's configuration, whose `kubeConfigPath` is accepted and unused: ksched
//! reads no CRDs) every pod but DaemonSet pods may use every node, as Kosmos does without
//! DistributionPolicies; leaf nodes are then those labelled `kosmos.io/node=true`.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::{LabelMatcher, PodMatcher, default_leaf_node_selector, is_daemonset_pod, matcher};
use super::{validate_pod_selection, validate_selector};
use crate::api::leaf_cluster_policy::PlacementMode;
use crate::config::FieldError;
use crate::config::error::join_path;
use crate::framework::args::{PluginArgs, forbidden, invalid};
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, ScorePlugin, SignFragment,
    SignPlugin, Status, signer_names,
};
use crate::framework::listers::{Listers, NAMESPACES};
use crate::framework::plugins::helper::{
    impl_plugin, namespace_rules, own_update, queue_if, registration_with_listers,
};
use crate::framework::plugins::names;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{ActionType, ClusterEvent, EventResource, NodeInfo, PodInfo};

/// The weight of a PreferHost/PreferLeaf policy that sets none.
pub const DEFAULT_PREFER_WEIGHT: i32 = 100;

pub const REASON_HOST_ONLY: &str = "node(s) are leaf nodes and the pod's placement is HostOnly";
pub const REASON_LEAF_ONLY: &str = "node(s) are host nodes and the pod's placement is LeafOnly";
pub const REASON_OTHER_LEAF: &str = "node(s) are leaf nodes outside the pod's LeafOnly placement";
pub const REASON_NOT_SELECTED: &str =
    "node(s) are leaf nodes and no leaf placement policy selects the pod";
pub const REASON_DAEMONSET: &str = "node(s) are leaf nodes and DaemonSet pods stay on host nodes";

/// `LeafNodeDistributionArgs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LeafNodeDistributionArgs {
    /// Kosmos's field (its plugin watched DistributionPolicy CRDs with it); accepted and unused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_config_path: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<DistributionPolicy>,
}

/// One placement policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DistributionPolicy {
    /// The LeafClusterPolicy it was rendered from (informational).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default = "default_leaf_node_selector")]
    pub leaf_node_selector: LabelSelector,
    #[serde(default)]
    pub mode: PlacementMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

fn is_prefer(mode: PlacementMode) -> bool {
    matches!(mode, PlacementMode::PreferHost | PlacementMode::PreferLeaf)
}

impl PluginArgs for LeafNodeDistributionArgs {
    const KIND: &'static str = "LeafNodeDistributionArgs";

    fn set_defaults(&mut self) {
        for p in &mut self.policies {
            if is_prefer(p.mode) && p.weight.is_none() {
                p.weight = Some(DEFAULT_PREFER_WEIGHT);
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, p) in self.policies.iter().enumerate() {
            let path = format!("policies[{i}]");
            validate_selector(
                &join_path(&path, "leafNodeSelector"),
                Some(&p.leaf_node_selector),
                &mut errs,
            );
            match (p.weight, is_prefer(p.mode)) {
                (Some(w), true) if !(1..=100).contains(&w) => errs.push(invalid(
                    join_path(&path, "weight"),
                    w,
                    "must be in the range 1-100",
                )),
                (Some(_), false) => errs.push(forbidden(
                    join_path(&path, "weight"),
                    "only applies to mode PreferHost or PreferLeaf",
                )),
                _ => {}
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
    leaf_nodes: LabelMatcher,
    mode: PlacementMode,
    weight: i64,
    pods: PodMatcher,
}

/// The plugin.
#[derive(Debug)]
pub struct LeafNodeDistribution {
    policies: Vec<CompiledPolicy>,
    /// Leaf nodes when there are no policies: Kosmos's label.
    default_leaf_nodes: LabelMatcher,
    listers: Arc<Listers>,
}

impl LeafNodeDistribution {
    pub fn new(
        args: &LeafNodeDistributionArgs,
        listers: Arc<Listers>,
    ) -> Result<LeafNodeDistribution, String> {
        let mut args = args.clone();
        args.set_defaults();
        let policies = args
            .policies
            .iter()
            .map(|p| {
                Ok(CompiledPolicy {
                    leaf_nodes: matcher(Some(&p.leaf_node_selector))?,
                    mode: p.mode,
                    weight: i64::from(p.weight.unwrap_or(0)),
                    pods: PodMatcher::new(p.namespace_selector.as_ref(), p.pod_selector.as_ref())?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(LeafNodeDistribution {
            policies,
            default_leaf_nodes: matcher(Some(&default_leaf_node_selector()))?,
            listers,
        })
    }

    fn is_leaf(&self, node: &NodeInfo) -> bool {
        if self.policies.is_empty() {
            return self.default_leaf_nodes.matches(node.labels());
        }
        self.policies
            .iter()
            .any(|p| p.leaf_nodes.matches(node.labels()))
    }

    /// The policies that select the pod.
    fn policies_of<'a>(&'a self, pod: &PodInfo) -> Vec<&'a CompiledPolicy> {
        self.policies
            .iter()
            .filter(|p| p.pods.matches(pod, &self.listers))
            .collect()
    }
}

impl_plugin!(
    LeafNodeDistribution,
    names::LEAF_NODE_DISTRIBUTION,
    [Filter, Score],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for LeafNodeDistribution {
    /// Whether a node is a (permitted) leaf node follows its labels: a node added or relabeled
    /// (no hint); which policies select the pod follows its labels: its own relabeling.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_LABEL),
                |pod, old, new| Ok(queue_if(own_update(pod, old, new)?.is_some())),
            ),
        ]
    }
}

impl SignPlugin for LeafNodeDistribution {
    /// Policies select pods by labels and namespace (in every signature); DaemonSet pods never go
    /// to leaf nodes.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![
            SignFragment::json(signer_names::LABELS, &pod.labels())?,
            SignFragment::new(SIGN_DAEMONSET, is_daemonset_pod(pod).to_string()),
        ])
    }
}

/// Whether the pod belongs to a DaemonSet, in its signature.
const SIGN_DAEMONSET: &str = "v1.Pod.OwnerReferences.IsDaemonSet()";

impl FilterPlugin for LeafNodeDistribution {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node().is_none() {
            return Status::error("node not found");
        }
        let leaf = self.is_leaf(node);
        if is_daemonset_pod(pod) {
            return if leaf {
                Status::unresolvable(REASON_DAEMONSET)
            } else {
                Status::success()
            };
        }
        if self.policies.is_empty() {
            return Status::success();
        }
        let mine = self.policies_of(pod);
        for p in &mine {
            match p.mode {
                PlacementMode::HostOnly if leaf => return Status::unresolvable(REASON_HOST_ONLY),
                PlacementMode::LeafOnly if !p.leaf_nodes.matches(node.labels()) => {
                    return Status::unresolvable(if leaf {
                        REASON_OTHER_LEAF
                    } else {
                        REASON_LEAF_ONLY
                    });
                }
                _ => {}
            }
        }
        if leaf && !mine.iter().any(|p| p.leaf_nodes.matches(node.labels())) {
            return Status::unresolvable(REASON_NOT_SELECTED);
        }
        Status::success()
    }
}

impl ScorePlugin for LeafNodeDistribution {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if self.policies.is_empty() || is_daemonset_pod(pod) {
            return Ok(0);
        }
        let leaf = self.is_leaf(node);
        Ok(self
            .policies_of(pod)
            .iter()
            .filter(|p| match p.mode {
                PlacementMode::PreferHost => !leaf,
                PlacementMode::PreferLeaf => leaf && p.leaf_nodes.matches(node.labels()),
                _ => false,
            })
            .map(|p| p.weight)
            .max()
            .unwrap_or(0))
    }
}

pub fn registration() -> PluginRegistration {
    registration_with_listers(
        LeafNodeDistribution::EXTENSION_POINTS,
        &[&NAMESPACES],
        |args: LeafNodeDistributionArgs, listers| LeafNodeDistribution::new(&args, listers),
    )
    .with_rbac_rules(namespace_rules())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::framework::args::{decode, typed};
    use crate::framework::interface::Code;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use serde_json::{Value, json};

    #[test]
    fn hints() {
        use crate::framework::testing::hints::{event, hint, node_obj, pod_obj, registered};
        use crate::framework::types::QueueingHint::{Queue, QueueSkip};
        let pl = LeafNodeDistribution::new(
            &LeafNodeDistributionArgs::default(),
            Arc::new(Listers::default()),
        )
        .expect("plugin");
        assert_eq!(
            registered(&pl),
            ["Node/Add|UpdateNodeLabel", "Pod/UpdatePodLabel"]
        );
        let pod = PodBuilder::new("p").uid("p").info();
        let node = || Some(node_obj(NodeBuilder::new("n").build()));
        let label = event(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        assert_eq!(hint(&pl, label, &pod, node(), node()), Some(Queue));
        let taint = event(EventResource::Node, ActionType::UPDATE_NODE_TAINT);
        assert_eq!(hint(&pl, taint, &pod, node(), node()), None);
        let relabel = event(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL);
        let own = |uid: &str| Some(pod_obj(PodBuilder::new("p").uid(uid).build()));
        assert_eq!(hint(&pl, relabel, &pod, own("p"), own("p")), Some(Queue));
        assert_eq!(
            hint(&pl, relabel, &pod, own("q"), own("q")),
            Some(QueueSkip)
        );
    }

    fn plugin(policies: Value) -> LeafNodeDistribution {
        let listers =
            listers_with_namespaces(&[("prod", &[("env", "prod")]), ("dev", &[("env", "dev")])]);
        let args = decode::<LeafNodeDistributionArgs>(Some(&json!({"policies": policies})))
            .expect("valid args");
        LeafNodeDistribution::new(&typed(&args).expect("typed"), Arc::new(listers)).expect("plugin")
    }

    fn host() -> NodeInfo {
        NodeBuilder::new("host").info(vec![])
    }
    fn leaf(cluster: &str) -> NodeInfo {
        let mut node = leaf_node(&format!("leaf-{cluster}"), cluster);
        node.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("cluster".into(), cluster.into());
        NodeInfo::with_node(Arc::new(node), [])
    }
    fn policy(mode: &str) -> Value {
        json!({"mode": mode})
    }
    fn web() -> PodBuilder {
        PodBuilder::new("web").namespace("prod").label("app", "web")
    }

    #[test]
    fn args() {
        assert_eq!(decode::<LeafNodeDistributionArgs>(None), Ok(json!({})));
        // Kosmos's args load.
        assert_eq!(
            decode::<LeafNodeDistributionArgs>(Some(&json!({"kubeConfigPath": "/etc/k"}))),
            Ok(json!({"kubeConfigPath": "/etc/k"}))
        );
        assert_eq!(
            decode::<LeafNodeDistributionArgs>(Some(
                &json!({"policies": [{"mode": "PreferHost"}]})
            )),
            Ok(json!({"policies": [{
                "leafNodeSelector": {"matchLabels": {"kosmos.io/node": "true"}},
                "mode": "PreferHost", "weight": 100
            }]}))
        );
        let e = decode::<LeafNodeDistributionArgs>(Some(&json!({"policies": [
            {"mode": "PreferLeaf", "weight": 0},
            {"mode": "HostOnly", "weight": 5},
            {"mode": "Mix", "leafNodeSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}
        ]})))
        .unwrap_err();
        let got: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got[0].starts_with("policies[0].weight: Invalid value: 0"),
            "{got:?}"
        );
        assert!(
            got[1].starts_with("policies[1].weight: Forbidden"),
            "{got:?}"
        );
        assert!(
            got[2].starts_with("policies[2].leafNodeSelector"),
            "{got:?}"
        );
        assert!(
            decode::<LeafNodeDistributionArgs>(Some(&json!({"policies": [{"mode": "Leaf"}]})))
                .is_err()
        );
    }

    #[test]
    fn filter_each_mode() {
        let only_web =
            |mode: &str| json!([{"mode": mode, "podSelector": {"matchLabels": {"app": "web"}}}]);
        let ok = (Code::Success, "");
        let no = |r: &'static str| (Code::UnschedulableAndUnresolvable, r);
        let ds = || PodInfo::from_pod(owned_by_daemonset(web().build()));
        type Case = (&'static str, Value, PodInfo, NodeInfo, (Code, &'static str));
        let cases: Vec<Case> = vec![
            (
                "no policies: Kosmos's Mix, host",
                json!([]),
                web().info(),
                host(),
                ok,
            ),
            (
                "no policies: Kosmos's Mix, leaf",
                json!([]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "no policies: DaemonSet pod off leaf",
                json!([]),
                ds(),
                leaf("c1"),
                no(REASON_DAEMONSET),
            ),
            (
                "Mix: host",
                json!([policy("Mix")]),
                web().info(),
                host(),
                ok,
            ),
            (
                "Mix: leaf",
                json!([policy("Mix")]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "HostOnly: host",
                json!([policy("HostOnly")]),
                web().info(),
                host(),
                ok,
            ),
            (
                "HostOnly: leaf",
                json!([policy("HostOnly")]),
                web().info(),
                leaf("c1"),
                no(REASON_HOST_ONLY),
            ),
            (
                "LeafOnly: host",
                json!([policy("LeafOnly")]),
                web().info(),
                host(),
                no(REASON_LEAF_ONLY),
            ),
            (
                "LeafOnly: leaf",
                json!([policy("LeafOnly")]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "PreferHost: both feasible (host)",
                json!([policy("PreferHost")]),
                web().info(),
                host(),
                ok,
            ),
            (
                "PreferHost: both feasible (leaf)",
                json!([policy("PreferHost")]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "PreferLeaf: both feasible (host)",
                json!([policy("PreferLeaf")]),
                web().info(),
                host(),
                ok,
            ),
            (
                "PreferLeaf: both feasible (leaf)",
                json!([policy("PreferLeaf")]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "outside podSelector: host",
                only_web("LeafOnly"),
                PodBuilder::new("api").namespace("prod").info(),
                host(),
                ok,
            ),
            (
                "outside podSelector: leaf",
                only_web("Mix"),
                PodBuilder::new("api").namespace("prod").info(),
                leaf("c1"),
                no(REASON_NOT_SELECTED),
            ),
            (
                "podSelector needs every label",
                json!([{"mode": "Mix", "podSelector": {"matchLabels": {"app": "web", "tier": "front"}}}]),
                web().info(),
                leaf("c1"),
                no(REASON_NOT_SELECTED),
            ),
            (
                "podSelector matchExpressions hold",
                json!([{"mode": "Mix", "podSelector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}]),
                web().label("tier", "front").info(),
                leaf("c1"),
                ok,
            ),
            (
                "podSelector matchExpressions fail",
                json!([{"mode": "Mix", "podSelector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}]),
                web().info(),
                leaf("c1"),
                no(REASON_NOT_SELECTED),
            ),
            (
                "namespaceSelector matches",
                json!([{"mode": "Mix", "namespaceSelector": {"matchLabels": {"env": "prod"}}}]),
                web().info(),
                leaf("c1"),
                ok,
            ),
            (
                "namespaceSelector excludes",
                json!([{"mode": "Mix", "namespaceSelector": {"matchLabels": {"env": "prod"}}}]),
                PodBuilder::new("p").namespace("dev").info(),
                leaf("c1"),
                no(REASON_NOT_SELECTED),
            ),
            (
                "leaf of another cluster, not opened",
                json!([{"mode": "Mix", "leafNodeSelector": {"matchLabels": {"cluster": "c1"}}},
                {"mode": "Mix", "leafNodeSelector": {"matchLabels": {"cluster": "c2"}}, "podSelector": {"matchLabels": {"app": "db"}}}]),
                web().info(),
                leaf("c2"),
                no(REASON_NOT_SELECTED),
            ),
            (
                "LeafOnly of c1: leaf of c2",
                json!([{"mode": "LeafOnly", "leafNodeSelector": {"matchLabels": {"cluster": "c1"}}},
                {"mode": "Mix", "leafNodeSelector": {"matchLabels": {"cluster": "c2"}}}]),
                web().info(),
                leaf("c2"),
                no(REASON_OTHER_LEAF),
            ),
            (
                "HostOnly and LeafOnly intersect to nothing (host)",
                json!([policy("HostOnly"), policy("LeafOnly")]),
                web().info(),
                host(),
                no(REASON_LEAF_ONLY),
            ),
            (
                "HostOnly and LeafOnly intersect to nothing (leaf)",
                json!([policy("LeafOnly"), policy("HostOnly")]),
                web().info(),
                leaf("c1"),
                no(REASON_HOST_ONLY),
            ),
            (
                "HostOnly wins over Mix in either order",
                json!([policy("Mix"), policy("HostOnly")]),
                web().info(),
                leaf("c1"),
                no(REASON_HOST_ONLY),
            ),
            (
                "DaemonSet pod: never leaf",
                json!([policy("LeafOnly")]),
                ds(),
                leaf("c1"),
                no(REASON_DAEMONSET),
            ),
            (
                "DaemonSet pod: host even under LeafOnly",
                json!([policy("LeafOnly")]),
                ds(),
                host(),
                ok,
            ),
        ];
        for (name, policies, pod, node, want) in cases {
            let s = plugin(policies).filter(&CycleState::new(), &pod, &node);
            assert_eq!((s.code(), s.message().as_str()), want, "{name}");
        }
        // Order never matters.
        let a = json!([policy("HostOnly"), policy("LeafOnly"), policy("Mix")]);
        let b = json!([policy("Mix"), policy("LeafOnly"), policy("HostOnly")]);
        for node in [host(), leaf("c1")] {
            let fa = plugin(a.clone()).filter(&CycleState::new(), &web().info(), &node);
            let fb = plugin(b.clone()).filter(&CycleState::new(), &web().info(), &node);
            assert_eq!(fa.code(), fb.code());
            assert!(fa.is_rejected());
        }
    }

    #[test]
    fn score_each_mode() {
        let cases: Vec<(&str, Value, PodBuilder, [i64; 2])> = vec![
            ("no policies", json!([]), web(), [0, 0]),
            ("Mix", json!([policy("Mix")]), web(), [0, 0]),
            ("HostOnly", json!([policy("HostOnly")]), web(), [0, 0]),
            ("LeafOnly", json!([policy("LeafOnly")]), web(), [0, 0]),
            (
                "PreferHost default weight",
                json!([policy("PreferHost")]),
                web(),
                [100, 0],
            ),
            (
                "PreferLeaf weight 30",
                json!([{"mode": "PreferLeaf", "weight": 30}]),
                web(),
                [0, 30],
            ),
            (
                "PreferHost outside podSelector",
                json!([{"mode": "PreferHost", "podSelector": {"matchLabels": {"app": "db"}}}]),
                web(),
                [0, 0],
            ),
            (
                "two PreferHost: max weight",
                json!([{"mode": "PreferHost", "weight": 20}, {"mode": "PreferHost", "weight": 70}]),
                web(),
                [70, 0],
            ),
            (
                "PreferHost and PreferLeaf: each side its weight",
                json!([{"mode": "PreferHost", "weight": 20}, {"mode": "PreferLeaf", "weight": 60}]),
                web(),
                [20, 60],
            ),
            (
                "PreferLeaf for another cluster's leaf nodes",
                json!([{"mode": "PreferLeaf", "leafNodeSelector": {"matchLabels": {"cluster": "c2"}}},
                {"mode": "Mix"}]),
                web(),
                [0, 0],
            ),
        ];
        for (name, policies, pod, want) in cases {
            let pl = plugin(policies.clone());
            let pod = pod.info();
            let got = [host(), leaf("c1")]
                .map(|n| pl.score(&CycleState::new(), &pod, &n).expect("score"));
            assert_eq!(got, want, "{name}");
            // Reversed policy order: same scores.
            let mut rev = policies.as_array().cloned().unwrap_or_default();
            rev.reverse();
            let pl = plugin(Value::Array(rev));
            let got = [host(), leaf("c1")]
                .map(|n| pl.score(&CycleState::new(), &pod, &n).expect("score"));
            assert_eq!(got, want, "{name} (reversed)");
        }
        let ds = PodInfo::from_pod(owned_by_daemonset(web().build()));
        assert_eq!(
            plugin(json!([policy("PreferLeaf")])).score(&CycleState::new(), &ds, &leaf("c1")),
            Ok(0)
        );
    }
}
