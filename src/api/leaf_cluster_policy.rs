//! `LeafClusterPolicy`: which virtual nodes stand for leaf (member) clusters, the taint that keeps
//! them opt-in, and which profiles may place which pods on them.
// kube's printcolumn(...) repeats `type_ = ...` per column, which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Label (and taint key) Kosmos puts on the virtual nodes of leaf clusters.
pub const KOSMOS_NODE_KEY: &str = "kosmos.io/node";
/// Annotation the operator keeps on a policy: its spec as last seen valid (JSON). A profile keeps
/// rendering that spec while the current one is invalid.
pub const LAST_VALID_SPEC_ANNOTATION: &str = "ksched.io/last-valid-spec";

/// Spec of a `LeafClusterPolicy`: which nodes stand for leaf clusters, the taint that keeps other
/// schedulers off them, and which profiles may place which pods there.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ksched.io",
    version = "v1alpha1",
    kind = "LeafClusterPolicy",
    plural = "leafclusterpolicies",
    shortname = "lcp",
    category = "ksched",
    status = "LeafClusterPolicyStatus",
    derive = "PartialEq",
    doc = "Leaf-cluster nodes: their taint, and which scheduler profiles may place pods on them.",
    printcolumn(
        name = "LEAF-NODES",
        type_ = "integer",
        json_path = ".status.leafNodes"
    ),
    printcolumn(
        name = "TAINTED",
        type_ = "integer",
        json_path = ".status.taintedNodes"
    ),
    printcolumn(name = "MODE", type_ = "string", json_path = ".spec.placement.mode"),
    printcolumn(name = "PROFILES", type_ = "string", json_path = ".status.profiles"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("(has(self.selectAllNodes) && self.selectAllNodes) || (has(self.leafNodeSelector.matchLabels) && self.leafNodeSelector.matchLabels.size() > 0) || (has(self.leafNodeSelector.matchExpressions) && self.leafNodeSelector.matchExpressions.size() > 0)").message("leafNodeSelector: {} selects every node of the cluster, host nodes included, and would taint them all: give a selector that matches only the leaf (virtual) nodes, such as matchLabels: {kosmos.io/node: \"true\"}, or set selectAllNodes: true if every node really is a leaf node"))]
#[x_kube(validation = Rule::new("!(has(self.selectAllNodes) && self.selectAllNodes) || ((!has(self.leafNodeSelector.matchLabels) || self.leafNodeSelector.matchLabels.size() == 0) && (!has(self.leafNodeSelector.matchExpressions) || self.leafNodeSelector.matchExpressions.size() == 0))").message("selectAllNodes: true goes only with leafNodeSelector: {}: remove selectAllNodes to use the selector, or empty the selector"))]
#[serde(rename_all = "camelCase")]
pub struct LeafClusterPolicySpec {
    /// Which nodes are virtual nodes standing for leaf clusters, a label selector (default
    /// `matchLabels: {kosmos.io/node: "true"}`, the label Kosmos puts on them). An empty selector
    /// (`{}`) matches every node and is refused unless `selectAllNodes` is true.
    #[serde(default = "default_leaf_node_selector")]
    pub leaf_node_selector: LabelSelector,

    /// Opt-in for `leafNodeSelector: {}`: every node of the cluster is a leaf node (and gets the
    /// taint). Default false: an empty selector is refused, as it would taint the host nodes too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub select_all_nodes: bool,

    /// The taint kept on every leaf node while `manageTaint` is true (default
    /// `kosmos.io/node=true:NoSchedule`, Kosmos's own). Pods of the profiles in `profiles` may
    /// go there; every other scheduler keeps respecting it.
    #[serde(default)]
    pub taint: LeafTaint,

    /// Keep `taint` on exactly the matching nodes (default true): add it, and remove the taints
    /// the operator added when nodes stop matching or the policy goes. A taint that was there
    /// before is never removed. false: node taints are left alone (placement only).
    #[serde(default = "default_true")]
    pub manage_taint: bool,

    /// SchedulerProfiles that may place pods on these leaf nodes, by name (1-32 names); `["*"]`
    /// means every profile. Required.
    #[schemars(schema_with = "super::schema::name_list")]
    #[x_kube(validation = Rule::new("!self.exists(p, p == '*') || self.size() == 1").message("profiles: '*' already means every profile; list either '*' alone or profile names"))]
    #[x_kube(validation = Rule::new("self.all(p, self.exists_one(q, q == p))").message("profiles lists the same profile more than once: remove the duplicate"))]
    pub profiles: Vec<String>,

    /// Which pods of those profiles go to leaf nodes, host nodes or either (default: mode `Mix`,
    /// every pod).
    #[serde(default)]
    pub placement: Placement,

    /// How volumes of pods placed on leaf nodes are provisioned (default: mode `LeafProvisioned`).
    #[serde(default)]
    pub volumes: Volumes,
}

fn default_true() -> bool {
    true
}

fn default_leaf_node_selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            KOSMOS_NODE_KEY.to_string(),
            "true".to_string(),
        )])),
        match_expressions: None,
    }
}

/// A node taint (no `timeAdded`: the policy keeps it, it does not evict).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct LeafTaint {
    /// The taint's key, a qualified name such as `kosmos.io/node` (required).
    #[x_kube(validation = Rule::new("self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')").message("taint.key must be a qualified name such as kosmos.io/node (an optional DNS prefix and '/', then letters, digits, '-', '_' or '.')"))]
    #[schemars(length(min = 1, max = 316))]
    pub key: String,
    /// The taint's value, at most 63 characters (default empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 63))]
    pub value: String,
    /// The taint's effect: `NoSchedule`, `PreferNoSchedule` or `NoExecute` (required; `NoExecute`
    /// also evicts running pods that do not tolerate it).
    #[x_kube(validation = Rule::new("self in ['NoSchedule', 'PreferNoSchedule', 'NoExecute']").message("taint.effect must be one of NoSchedule, PreferNoSchedule or NoExecute (case matters)"))]
    pub effect: String,
}

impl Default for LeafTaint {
    fn default() -> Self {
        Self {
            key: KOSMOS_NODE_KEY.to_string(),
            value: "true".to_string(),
            effect: "NoSchedule".to_string(),
        }
    }
}

/// Placement of the selected pods between host and leaf nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.weight) || self.mode == 'PreferHost' || self.mode == 'PreferLeaf'").message("placement.weight only applies to mode PreferHost or PreferLeaf: remove weight or change the mode"))]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Where the selected pods of the profiles may go (default `Mix`):
    /// `Mix`: host and leaf nodes alike, no preference (Kosmos's default);
    /// `HostOnly`: never on leaf nodes;
    /// `LeafOnly`: only on this policy's leaf nodes, never on host nodes;
    /// `PreferHost`: anywhere, host nodes score `weight` more;
    /// `PreferLeaf`: anywhere, this policy's leaf nodes score `weight` more.
    /// Pods outside `namespaceSelector`/`podSelector` stay on host nodes; DaemonSet pods never
    /// go to leaf nodes. When several policies select a pod, the most restrictive filter wins
    /// (HostOnly with LeafOnly leaves no node, and the pod's FailedScheduling event says so).
    #[serde(default)]
    pub mode: PlacementMode,
    /// Score weight of the preference (1-100; default 100), a node score added to the preferred
    /// nodes; PreferHost/PreferLeaf only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("placement.weight must be between 1 and 100"))]
    pub weight: Option<i32>,
    /// Namespaces whose pods this placement applies to, a label selector over the namespaces'
    /// labels (default: unset, every namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods this placement applies to, a label selector over the pods' labels (default: unset,
    /// every pod). Pods outside the selectors stay on host nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum PlacementMode {
    /// Host and leaf nodes alike.
    #[default]
    Mix,
    HostOnly,
    LeafOnly,
    PreferHost,
    PreferLeaf,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct Volumes {
    /// How a pod's volumes are bound when it goes to a leaf node (default `LeafProvisioned`):
    /// `LeafProvisioned`: the leaf cluster provisions them, so the host-side volume binding is
    /// skipped on leaf nodes (Kosmos's LeafNodeVolumeBinding); only a bound host PV's node
    /// affinity is still checked. `Default`: volumes bind on the host side as for any node.
    /// In both modes a claim owned by a leaf cluster (annotation `kosmos-io/cluster-owners`)
    /// pins its pod to that cluster's leaf nodes (`kosmos-io/owned-by-cluster`).
    #[serde(default)]
    pub mode: VolumeMode,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum VolumeMode {
    /// On a leaf node the leaf cluster provisions the volume; host-side binding is skipped.
    #[default]
    LeafProvisioned,
    /// Volumes bind on the host side as for any node.
    Default,
}

/// Observed state, kstatus-compatible: `Ready` always present; `Reconciling` and `Stalled` only
/// while true.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeafClusterPolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (always; reason TaintsApplied, TaintNotManaged, Conflict, ForeignTaint,
    /// ProfileNotFound, InvalidSpec, ...), `ProfilesResolved`, and `Reconciling` or `Stalled`
    /// while true (kstatus).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Nodes matching leafNodeSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_nodes: Option<i32>,
    /// Matching nodes that carry the policy's taint (whoever put it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tainted_nodes: Option<i32>,
    /// Matching nodes that already carried the policy's taint when the operator came to them (put
    /// there by someone else, e.g. Kosmos): the operator never removes these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preexisting_taints: Option<i32>,
    /// Matching nodes this policy leaves alone because an older policy also selects them
    /// (condition `Conflict` names the policy and the nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicting_nodes: Option<i32>,
    /// Names in spec.profiles for which no SchedulerProfile exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_profiles: Vec<String>,
    /// Profiles resolved from spec.profiles (`*` expanded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<String>,
}
