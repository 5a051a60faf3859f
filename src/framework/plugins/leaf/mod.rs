//! Kosmos's leaf-node plugins: [`LeafNodeTaintToleration`](taint_toleration),
//! [`LeafNodeDistribution`](distribution) and [`LeafNodeVolumeBinding`](volume_binding).
//!
//! Leaf (member) clusters appear in the host cluster as virtual nodes labelled `kosmos.io/node=true`
//! and tainted `kosmos.io/node=true:NoSchedule`. The operator renders the `LeafClusterPolicy`s
//! naming a profile into these plugins' args (`operator::leaf_render`); the scheduler
//! reads only those args, never the CRDs. Without args each plugin behaves as Kosmos's.

pub mod distribution;
pub mod taint_toleration;
pub mod volume_binding;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::leaf_cluster_policy::KOSMOS_NODE_KEY;
use crate::config::FieldError;
use crate::config::error::join_path;
use crate::framework::args::{forbidden, not_supported, required};
use crate::framework::listers::{Listers, NAMESPACES};
use crate::framework::types::PodInfo;
use kube::core::{Selector, SelectorExt};

pub use distribution::{LeafNodeDistribution, LeafNodeDistributionArgs};
pub use taint_toleration::{LeafNodeTaintToleration, LeafNodeTaintTolerationArgs};
pub use volume_binding::{LeafNodeVolumeBinding, LeafNodeVolumeBindingArgs};

/// Annotation on a PV or PVC naming the leaf cluster(s) that own it (comma-separated).
pub const CLUSTER_OWNERS_ANNOTATION: &str = "kosmos-io/cluster-owners";
/// Annotation on a leaf node naming the leaf cluster it stands for.
pub const OWNED_BY_CLUSTER_ANNOTATION: &str = "kosmos-io/owned-by-cluster";
/// The label every namespace carries with its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Kosmos's leaf-node selector: `kosmos.io/node=true`.
pub fn default_leaf_node_selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            KOSMOS_NODE_KEY.to_string(),
            "true".to_string(),
        )])),
        match_expressions: None,
    }
}

/// A compiled label selector: every matchLabels entry and every matchExpression must hold.
#[derive(Debug, Clone, Default)]
pub struct LabelMatcher(Selector);

impl LabelMatcher {
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.0.matches(labels.unwrap_or(&EMPTY))
    }

    /// Selects everything (no requirement).
    pub fn is_empty(&self) -> bool {
        self.0.selects_all()
    }
}

/// A label selector from args: unset matches everything (args never carry "match nothing").
fn matcher(sel: Option<&LabelSelector>) -> Result<LabelMatcher, String> {
    match sel {
        None => Ok(LabelMatcher::default()),
        Some(s) => Selector::try_from(s.clone())
            .map(LabelMatcher)
            .map_err(|e| e.to_string()),
    }
}

/// Validation of an optional label selector, as upstream's `ValidateLabelSelector` words it: each
/// matchExpression by its index, its operator one of In, NotIn, Exists, DoesNotExist, values
/// required for In/NotIn and forbidden for Exists/DoesNotExist.
pub fn validate_selector(path: &str, sel: Option<&LabelSelector>, errs: &mut Vec<FieldError>) {
    let Some(sel) = sel else { return };
    let before = errs.len();
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let at = format!("{}[{i}]", join_path(path, "matchExpressions"));
        if req.key.is_empty() {
            errs.push(required(join_path(&at, "key"), "a label key"));
        }
        let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
        match req.operator.as_str() {
            "In" | "NotIn" if !has_values => errs.push(required(
                join_path(&at, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if has_values => errs.push(forbidden(
                join_path(&at, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(not_supported(
                join_path(&at, "operator"),
                other,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            )),
        }
    }
    if errs.len() == before
        && let Err(e) = matcher(Some(sel))
    {
        errs.push(FieldError::new(path, format!("Invalid value: {e}")));
    }
}

/// Validates a policy's `namespaceSelector` and `podSelector` (paths under `path`).
fn validate_pod_selection(
    path: &str,
    namespace_selector: Option<&LabelSelector>,
    pod_selector: Option<&LabelSelector>,
    errs: &mut Vec<FieldError>,
) {
    validate_selector(
        &join_path(path, "namespaceSelector"),
        namespace_selector,
        errs,
    );
    validate_selector(&join_path(path, "podSelector"), pod_selector, errs);
}

/// Which pods a policy applies to: namespaces by their labels and pods by theirs, each with full
/// label-selector semantics (every matchLabels entry and every matchExpression must hold; an unset
/// selector selects all).
#[derive(Debug, Clone)]
struct PodMatcher {
    namespaces: LabelMatcher,
    pods: LabelMatcher,
}

impl PodMatcher {
    fn new(
        namespace_selector: Option<&LabelSelector>,
        pod_selector: Option<&LabelSelector>,
    ) -> Result<PodMatcher, String> {
        Ok(PodMatcher {
            namespaces: matcher(namespace_selector)?,
            pods: matcher(pod_selector)?,
        })
    }

    /// Whether the pod is selected. The namespace's labels come from the Namespace cache; a
    /// namespace not (yet) cached has only its `kubernetes.io/metadata.name` label.
    fn matches(&self, pod: &PodInfo, listers: &Listers) -> bool {
        if !self.pods.matches(pod.labels()) {
            return false;
        }
        if self.namespaces.is_empty() {
            return true;
        }
        let ns = pod.namespace();
        match listers.store(&NAMESPACES).get("", ns) {
            Some(n) if n.metadata.labels.is_some() => {
                self.namespaces.matches(n.metadata.labels.as_ref())
            }
            _ => {
                let own = BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), ns.to_string())]);
                self.namespaces.matches(Some(&own))
            }
        }
    }
}

/// Whether the pod belongs to a DaemonSet (upstream's and Kosmos's `IsDaemonSetPod`: an owner
/// reference of kind DaemonSet).
pub fn is_daemonset_pod(pod: &PodInfo) -> bool {
    pod.pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.kind == "DaemonSet"))
}

/// The leaf cluster a node stands for (`kosmos-io/owned-by-cluster`).
pub fn node_cluster(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNED_BY_CLUSTER_ANNOTATION))
        .map(String::as_str)
        .filter(|c| !c.is_empty())
}

/// The leaf clusters named by a `kosmos-io/cluster-owners` annotation value.
pub fn cluster_owners(annotations: Option<&BTreeMap<String, String>>) -> Option<Vec<String>> {
    let value = annotations?.get(CLUSTER_OWNERS_ANNOTATION)?;
    let owners: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    (!owners.is_empty()).then_some(owners)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Small object tweaks the leaf plugins' tests share (on top of `framework::testing`).

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
    use serde_json::json;

    use crate::framework::testing::NodeBuilder;
    pub(crate) use crate::framework::testing::listers_with_namespaces;

    /// A Kosmos leaf node of `cluster`: labelled, annotated and tainted as Kosmos does.
    pub(crate) fn leaf_node(name: &str, cluster: &str) -> Node {
        let mut node = NodeBuilder::new(name)
            .label("kosmos.io/node", "true")
            .taint("kosmos.io/node", "true", "NoSchedule")
            .build();
        node.metadata.annotations = Some(BTreeMap::from([(
            super::OWNED_BY_CLUSTER_ANNOTATION.to_string(),
            cluster.to_string(),
        )]));
        node
    }

    pub(crate) fn owned_by_daemonset(mut pod: Pod) -> Pod {
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "ds".into(),
            uid: "ds-uid".into(),
            ..Default::default()
        }]);
        pod
    }

    pub(crate) fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).expect("label selector")
    }

    pub(crate) fn match_labels(k: &str, v: &str) -> LabelSelector {
        selector(json!({"matchLabels": {k: v}}))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::framework::testing::PodBuilder;
    use serde_json::json;

    #[test]
    fn pod_selection_uses_full_label_selector_semantics() {
        let listers = listers_with_namespaces(&[("prod", &[("env", "prod"), ("team", "a")])]);
        let sel = PodMatcher::new(
            Some(&selector(json!({
                "matchLabels": {"env": "prod"},
                "matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]
            }))),
            Some(&selector(json!({
                "matchLabels": {"app": "db", "tier": "data"},
                "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]
            }))),
        )
        .expect("compile");
        let pod = |ns: &str, labels: &[(&str, &str)]| {
            labels
                .iter()
                .fold(PodBuilder::new("p").namespace(ns), |b, (k, v)| {
                    b.label(k, v)
                })
                .info()
        };
        let cases = [
            (
                "all labels and expressions hold",
                pod("prod", &[("app", "db"), ("tier", "data")]),
                true,
            ),
            // Kosmos matches any single label: we need all of them.
            (
                "one matchLabels entry is not enough",
                pod("prod", &[("app", "db")]),
                false,
            ),
            (
                "a matchExpression fails",
                pod("prod", &[("app", "db"), ("tier", "data"), ("canary", "1")]),
                false,
            ),
            (
                "namespace does not match",
                pod("dev", &[("app", "db"), ("tier", "data")]),
                false,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(sel.matches(&p, &listers), want, "{name}");
        }
        // Unset selectors select every pod; a namespace not cached still has its name label.
        let all = PodMatcher::new(None, None).expect("compile");
        assert!(all.matches(&pod("x", &[]), &listers));
        let by_name = PodMatcher::new(
            Some(&match_labels("kubernetes.io/metadata.name", "uncached")),
            None,
        )
        .expect("compile");
        assert!(by_name.matches(&pod("uncached", &[]), &listers));
        assert!(!by_name.matches(&pod("prod", &[]), &listers));
    }

    #[test]
    fn owners_and_daemonsets() {
        let ann = BTreeMap::from([(CLUSTER_OWNERS_ANNOTATION.to_string(), "c1, c2".to_string())]);
        assert_eq!(
            cluster_owners(Some(&ann)),
            Some(vec!["c1".into(), "c2".into()])
        );
        assert_eq!(cluster_owners(None), None);
        let empty = BTreeMap::from([(CLUSTER_OWNERS_ANNOTATION.to_string(), " ".to_string())]);
        assert_eq!(cluster_owners(Some(&empty)), None);
        assert_eq!(node_cluster(&leaf_node("l", "c1")), Some("c1"));
        let ds = PodBuilder::new("d").build();
        assert!(is_daemonset_pod(&PodInfo::from_pod(owned_by_daemonset(ds))));
        assert!(!is_daemonset_pod(&PodBuilder::new("p").info()));
    }
}
