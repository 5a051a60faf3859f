//! Constraints as the plugin evaluates them, node inclusion policies, default constraints and the
//! selector they derive from a pod's Services and controller.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, TopologySpreadConstraint};
use kube::core::{Expression, Selector};

use super::PodTopologySpread;
use crate::framework::listers::{
    Listers, REPLICA_SETS, REPLICATION_CONTROLLERS, SERVICES, STATEFUL_SETS,
};
use crate::framework::plugins::helper::find_matching_untolerated_taint;
use crate::framework::plugins::node_affinity::pod_matches_node_selector_and_affinity;
use crate::framework::types::LabelMatcher;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView};

pub(super) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub(super) const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
pub(super) const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";

type Labels = BTreeMap<String, String>;

/// One constraint, processed (upstream's internal `topologySpreadConstraint`).
#[derive(Debug, Clone)]
pub(super) struct Constraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub selector: LabelMatcher,
    pub min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default).
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore).
    pub honor_node_taints: bool,
}

impl Constraint {
    /// Whether the node counts for this constraint under its inclusion policies.
    pub(super) fn matches_node_inclusion_policies(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        if self.honor_node_affinity && !pod_matches_node_selector_and_affinity(pod, node) {
            return false;
        }
        if self.honor_node_taints
            && find_matching_untolerated_taint(node.taints(), pod.tolerations(), |t| {
                t.effect == "NoSchedule" || t.effect == "NoExecute"
            })
            .is_some()
        {
            return false;
        }
        true
    }
}

/// The node has every constraint's topology key.
pub(super) fn node_labels_match_spread_constraints(
    labels: Option<&Labels>,
    constraints: &[Constraint],
) -> bool {
    constraints
        .iter()
        .all(|c| labels.is_some_and(|l| l.contains_key(&c.topology_key)))
}

/// Pods in `namespace`, not being deleted, matching `selector` (an empty selector counts none).
pub(super) fn count_pods_match_selector(
    pods: &[std::sync::Arc<AssignedPod>],
    selector: &LabelMatcher,
    namespace: &str,
) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    pods.iter()
        .filter(|p| {
            !p.is_terminating() && p.namespace() == namespace && selector.matches(p.labels())
        })
        .count() as i64
}

/// The constraints with `whenUnsatisfiable == action`, their selectors extended with
/// `matchLabelKeys` (the pod's values for those keys).
pub(super) fn filter_constraints(
    constraints: &[TopologySpreadConstraint],
    pod_labels: Option<&Labels>,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    let mut out = Vec::new();
    for c in constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
    {
        let mut selector = LabelMatcher::from_label_selector(c.label_selector.as_ref())?;
        let match_labels: Vec<Expression> = c
            .match_label_keys
            .iter()
            .flatten()
            .filter_map(|k| {
                pod_labels
                    .and_then(|l| l.get(k))
                    .map(|v| Expression::Equal(k.clone(), v.clone()))
            })
            .collect();
        if !match_labels.is_empty() {
            // A missing selector stays "nothing" (upstream's nothingSelector has no requirements
            // to merge).
            let mut merged = Selector::from_iter(match_labels);
            if let LabelMatcher::Selector(s) = selector {
                merged.extend(s);
                selector = LabelMatcher::Selector(merged);
            }
        }
        out.push(Constraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.unwrap_or(1),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(out)
}

/// Upstream's `helper.DefaultSelector`: the union of the selectors of the Services selecting the
/// pod, plus its controlling ReplicationController's, ReplicaSet's or StatefulSet's selector.
pub(crate) fn default_selector(pod: &Pod, listers: &Listers) -> LabelMatcher {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let pod_labels = pod.metadata.labels.as_ref();
    let mut set: Labels = Labels::new();
    for svc in listers.store(&SERVICES).list_namespace(ns) {
        let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        let matches = sel
            .iter()
            .all(|(k, v)| pod_labels.and_then(|l| l.get(k)) == Some(v));
        if matches {
            set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let mut extra: Option<Selector> = None;
    if let Some(o) = owner {
        match (o.api_version.as_str(), o.kind.as_str()) {
            ("v1", "ReplicationController") => {
                if let Some(sel) = listers
                    .store(&REPLICATION_CONTROLLERS)
                    .get(ns, &o.name)
                    .and_then(|rc| rc.spec.as_ref().and_then(|s| s.selector.clone()))
                {
                    set.extend(sel);
                }
            }
            ("apps/v1", "ReplicaSet") => {
                extra = listers
                    .store(&REPLICA_SETS)
                    .get(ns, &o.name)
                    .map(|rs| rs.spec.selector.clone())
                    .and_then(|s| Selector::try_from(s).ok());
            }
            ("apps/v1", "StatefulSet") => {
                extra = listers
                    .store(&STATEFUL_SETS)
                    .get(ns, &o.name)
                    .map(|ss| ss.spec.selector.clone())
                    .and_then(|s| Selector::try_from(s).ok());
            }
            _ => {}
        }
    }
    let mut selector: Selector = set.into_iter().collect();
    if let Some(e) = extra {
        selector.extend(e);
    }
    LabelMatcher::Selector(selector)
}

impl PodTopologySpread {
    /// The default constraints with `action`, selecting the pod's siblings; none when the pod has
    /// no Service or controller to derive a selector from.
    pub(super) fn build_default_constraints(
        &self,
        pod: &Pod,
        action: &str,
    ) -> Result<Vec<Constraint>, String> {
        let mut constraints = filter_constraints(
            &self.default_constraints,
            pod.metadata.labels.as_ref(),
            action,
        )?;
        if constraints.is_empty() {
            return Ok(constraints);
        }
        let selector = default_selector(pod, &self.listers);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        for c in &mut constraints {
            c.selector = selector.clone();
        }
        Ok(constraints)
    }

    /// The pod's own constraints with `action`, or the default ones when it has none at all.
    pub(super) fn constraints(&self, pod: &Pod, action: &str) -> Result<Vec<Constraint>, String> {
        match pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
        {
            Some(own) if !own.is_empty() => {
                filter_constraints(own, pod.metadata.labels.as_ref(), action)
            }
            _ => self.build_default_constraints(pod, action),
        }
    }
}

/// The node's value for the constraint's key.
pub(super) fn topology_value<'a>(node: &'a Node, key: &str) -> Option<&'a String> {
    node.metadata.labels.as_ref().and_then(|l| l.get(key))
}
