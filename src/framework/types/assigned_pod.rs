//! What the scheduler keeps of a pod assigned to a node ([`AssignedPod`]).
//!
//! A pod on a node is only ever read as an existing pod: its identity and labels (selectors), its
//! pod (anti-)affinity, its volumes, its priority and start time (preemption), and what it
//! requests (computed once). Keeping just that instead of the whole `Pod` matters because most
//! pods of a cluster are assigned: k8s-openapi's `Pod` is a 2.4 KB struct before any of its strings,
//! an `AssignedPod` a few hundred bytes.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Affinity, Pod, PodCondition, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::affinity_terms::PodTerms;
use super::host_ports::{HostPort, pod_host_ports};
use super::pod_info::{PodInfo, has_pod_affinity, has_required_anti_affinity};
use super::pod_view::PodView;
use super::resource::{Resource, calculate_pod_resource};

/// A pod bound to a node, or assumed on it while its binding is in flight, as the node's
/// `NodeInfo` keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssignedPod {
    name: String,
    namespace: String,
    uid: String,
    labels: Option<BTreeMap<String, String>>,
    priority: i32,
    start_time: Option<Time>,
    terminating: bool,
    disruption_target: Option<Box<PodCondition>>,
    /// Pod affinity and anti-affinity only (node affinity matters only while a pod looks for a
    /// node); `None` when the pod has neither.
    affinity: Option<Box<DeclaredAffinity>>,
    volumes: Box<[Volume]>,
    /// Requests as [`PodInfo::requests`].
    pub requests: Resource,
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
}

/// The condition preemption marks its victims with.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

impl AssignedPod {
    /// Takes what is kept out of `pod` (a pod the informer sees with `spec.nodeName` set).
    pub fn new(pod: Pod) -> AssignedPod {
        let (requests, non_zero_cpu, non_zero_memory) = calculate_pod_resource(&pod);
        let host_ports = pod_host_ports(&pod);
        AssignedPod::keep(
            pod,
            AssignedPod {
                requests,
                non_zero_cpu,
                non_zero_memory,
                host_ports,
                ..AssignedPod::default()
            },
        )
    }

    /// The pod being scheduled as it will sit on its node (assumed pods, nominated pods counted
    /// as running); its requests are not computed again.
    pub fn from_pod_info(info: &PodInfo) -> AssignedPod {
        AssignedPod::keep(
            Pod::clone(&info.pod),
            AssignedPod {
                requests: info.requests.clone(),
                non_zero_cpu: info.non_zero_cpu,
                non_zero_memory: info.non_zero_memory,
                host_ports: info.host_ports.clone(),
                ..AssignedPod::default()
            },
        )
    }

    /// Moves what is kept of `pod` into `computed` (which carries the requests and host ports).
    fn keep(mut pod: Pod, mut computed: AssignedPod) -> AssignedPod {
        let meta = &mut pod.metadata;
        computed.name = meta.name.take().unwrap_or_default();
        computed.namespace = meta.namespace.take().unwrap_or_default();
        computed.uid = meta.uid.take().unwrap_or_default();
        computed.labels = meta.labels.take();
        computed.terminating = meta.deletion_timestamp.is_some();
        if let Some(spec) = pod.spec.as_mut() {
            computed.priority = spec.priority.unwrap_or(0);
            computed.affinity = spec.affinity.take().and_then(pod_affinity_only);
            computed.volumes = spec.volumes.take().unwrap_or_default().into_boxed_slice();
        }
        if let Some(status) = pod.status.as_mut() {
            computed.start_time = status.start_time.take();
            computed.disruption_target = status
                .conditions
                .take()
                .into_iter()
                .flatten()
                .find(|c| c.type_ == DISRUPTION_TARGET)
                .map(Box::new);
        }
        computed
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `.spec.priority`, 0 when unset.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// `.status.startTime`; `None` for a pod the kubelet has not started.
    pub fn start_time(&self) -> Option<&Time> {
        self.start_time.as_ref()
    }

    /// Whether the pod is being deleted (`metadata.deletionTimestamp` set).
    pub fn is_terminating(&self) -> bool {
        self.terminating
    }

    /// The pod's `DisruptionTarget` condition, if any.
    pub fn disruption_target(&self) -> Option<&PodCondition> {
        self.disruption_target.as_deref()
    }

    /// The pod's pod affinity and anti-affinity.
    pub fn affinity(&self) -> Option<&Affinity> {
        self.affinity.as_deref().map(|a| &a.declared)
    }

    /// The pod's affinity terms, parsed the first time a cycle asks; `None` for a pod without
    /// pod affinity. A pod the API server accepted always parses, so a failure (hand-made data)
    /// is logged and the pod counts as having no terms.
    pub fn affinity_terms(&self) -> Option<&PodTerms> {
        let a = self.affinity.as_deref()?;
        Some(a.terms.get_or_init(|| {
            PodTerms::declared(self, Some(&a.declared)).unwrap_or_else(|e| {
                tracing::warn!(
                    pod = self.name(),
                    error = %e,
                    "ignoring unparseable pod affinity terms"
                );
                PodTerms::default()
            })
        }))
    }

    /// Whether the pod has pod affinity or anti-affinity.
    pub fn has_affinity(&self) -> bool {
        self.affinity.is_some()
    }

    pub fn has_required_anti_affinity(&self) -> bool {
        has_required_anti_affinity(self.affinity())
    }
}

impl PodView for AssignedPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn uid(&self) -> &str {
        &self.uid
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_ref()
    }

    fn volumes(&self) -> &[Volume] {
        &self.volumes
    }
}

/// A pod's pod affinity and anti-affinity, and their terms once parsed (upstream parses them
/// into its `PodInfo` when the pod is added; here the first cycle that reads them does, so pods
/// no profile looks at cost nothing more).
#[derive(Debug, Clone)]
struct DeclaredAffinity {
    declared: Affinity,
    terms: OnceLock<PodTerms>,
}

/// Equal when declared the same: whether the terms were parsed yet is no difference.
impl PartialEq for DeclaredAffinity {
    fn eq(&self, other: &DeclaredAffinity) -> bool {
        self.declared == other.declared
    }
}

/// `affinity` without its node affinity; `None` when nothing is left.
fn pod_affinity_only(affinity: Affinity) -> Option<Box<DeclaredAffinity>> {
    has_pod_affinity(Some(&affinity)).then(|| {
        Box::new(DeclaredAffinity {
            declared: Affinity {
                node_affinity: None,
                ..affinity
            },
            terms: OnceLock::new(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn keeps_pod_affinity_and_drops_node_affinity() {
        let node_affinity = json!({"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}});
        let only_node = AssignedPod::new(pod(json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": node_affinity}}
        })));
        assert!(only_node.affinity().is_none() && !only_node.has_affinity());

        let anti = AssignedPod::new(pod(json!({
            "metadata": {"name": "b"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": node_affinity, "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}}}
        })));
        assert!(anti.has_affinity() && anti.has_required_anti_affinity());
        let affinity = anti.affinity().expect("pod anti-affinity kept");
        assert!(affinity.node_affinity.is_none() && affinity.pod_affinity.is_none());
    }

    #[test]
    fn a_pods_affinity_terms_are_parsed_once_and_compare_as_declared() {
        let declared = json!({"metadata": {"name": "w", "namespace": "ns", "labels": {"tier": "a"}},
            "spec": {"containers": [], "affinity": {"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["tier"],
                    "topologyKey": "zone"}}]}}}});
        let parsed = AssignedPod::new(pod(declared.clone()));
        let terms = parsed.affinity_terms().expect("pod affinity");
        assert!(std::ptr::eq(terms, parsed.affinity_terms().expect("kept")));
        let [preferred] = terms.preferred_affinity.as_slice() else {
            panic!("one preferred term: {terms:?}");
        };
        assert_eq!(preferred.weight, 3);
        // The owner's namespace by default, and its `tier` value merged into the selector.
        assert!(preferred.term.namespaces.contains("ns"));
        let web = |tier: &str| {
            AssignedPod::new(pod(json!({"metadata": {"name": "x", "namespace": "ns",
                "labels": {"app": "web", "tier": tier}}, "spec": {"containers": []}})))
        };
        assert!(preferred.term.matches(&web("a"), None));
        assert!(!preferred.term.matches(&web("b"), None));
        // Parsed or not, the same declaration.
        assert_eq!(parsed, AssignedPod::new(pod(declared)));

        let none = AssignedPod::new(pod(
            json!({"metadata": {"name": "n"}, "spec": {"containers": []}}),
        ));
        assert!(none.affinity_terms().is_none());
        let bad = AssignedPod::new(pod(
            json!({"metadata": {"name": "b"}, "spec": {"containers": [],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]},
                 "topologyKey": "zone"}]}}}}),
        ));
        let ignored = bad.affinity_terms().expect("declared");
        assert!(ignored.required_anti_affinity.is_empty(), "{ignored:?}");
    }

    #[test]
    fn a_pod_being_evicted_keeps_its_disruption_target() {
        let victim = AssignedPod::new(pod(json!({
            "metadata": {"name": "v", "namespace": "ns", "uid": "u1", "labels": {"app": "db"},
                "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [], "priority": 5},
            "status": {"startTime": "2025-12-31T00:00:00Z", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}
        })));
        assert!(victim.is_terminating());
        let condition = victim.disruption_target().expect("DisruptionTarget kept");
        assert_eq!(condition.reason.as_deref(), Some("PreemptionByScheduler"));
        assert_eq!(victim.priority(), 5);
        assert!(victim.start_time().is_some());
        assert_eq!(
            (victim.namespace(), victim.name(), victim.uid()),
            ("ns", "v", "u1")
        );
        assert_eq!(victim.key(), "ns/v");
        assert_eq!(
            victim
                .labels()
                .and_then(|l| l.get("app"))
                .map(String::as_str),
            Some("db")
        );
    }
}
