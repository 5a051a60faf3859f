//! [`PodInfo`]: a pod with what the scheduler computes from it once.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Affinity, NodeSelectorTerm, Pod, PodSpec, Toleration, Volume};

use super::host_ports::{HostPort, pod_host_ports};
use super::pod_view::PodView;
use super::resource::{Resource, calculate_pod_resource};

/// A pod with what the scheduler computes from it once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// Requests as upstream's `PodRequests` computes them (containers, sidecars, init containers,
    /// pod-level resources, overhead).
    pub requests: Resource,
    /// CPU request for scoring: containers that request none count as 100m.
    pub non_zero_cpu: i64,
    /// Memory request for scoring: containers that request none count as 200Mi.
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    has_affinity: bool,
    has_required_anti_affinity: bool,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let (requests, non_zero_cpu, non_zero_memory) = calculate_pod_resource(&pod);
        let host_ports = pod_host_ports(&pod);
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let has_affinity = has_pod_affinity(affinity);
        let has_required_anti_affinity = has_required_anti_affinity(affinity);
        PodInfo {
            pod,
            requests,
            non_zero_cpu,
            non_zero_memory,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
        }
    }

    pub fn from_pod(pod: Pod) -> PodInfo {
        PodInfo::new(Arc::new(pod))
    }

    pub fn name(&self) -> &str {
        self.pod.name()
    }

    pub fn namespace(&self) -> &str {
        self.pod.namespace()
    }

    pub fn uid(&self) -> &str {
        self.pod.uid()
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    pub fn spec(&self) -> Option<&PodSpec> {
        self.pod.spec.as_ref()
    }

    /// `.spec.priority`, 0 when unset (upstream's `PodPriority`).
    pub fn priority(&self) -> i32 {
        self.spec().and_then(|s| s.priority).unwrap_or(0)
    }

    pub fn node_name(&self) -> &str {
        self.spec()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    pub fn scheduler_name(&self) -> &str {
        self.spec()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("")
    }

    pub fn nominated_node_name(&self) -> &str {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .unwrap_or("")
    }

    pub fn tolerations(&self) -> &[Toleration] {
        self.spec()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[])
    }

    pub fn affinity(&self) -> Option<&Affinity> {
        self.spec().and_then(|s| s.affinity.as_ref())
    }

    /// The required node affinity terms (`requiredDuringSchedulingIgnoredDuringExecution`).
    pub fn required_node_affinity_terms(&self) -> Option<&[NodeSelectorTerm]> {
        self.affinity()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|s| s.node_selector_terms.as_slice())
    }

    pub fn node_selector(&self) -> Option<&BTreeMap<String, String>> {
        self.spec().and_then(|s| s.node_selector.as_ref())
    }

    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.pod.labels()
    }

    /// Whether the pod has pod affinity or anti-affinity.
    pub fn has_affinity(&self) -> bool {
        self.has_affinity
    }

    pub fn has_required_anti_affinity(&self) -> bool {
        self.has_required_anti_affinity
    }

    /// The container images (containers and init containers).
    pub fn images(&self) -> impl Iterator<Item = &str> {
        self.spec()
            .into_iter()
            .flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
            })
            .filter_map(|c| c.image.as_deref())
    }
}

impl PodView for PodInfo {
    fn name(&self) -> &str {
        self.pod.name()
    }

    fn namespace(&self) -> &str {
        self.pod.namespace()
    }

    fn uid(&self) -> &str {
        self.pod.uid()
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.pod.labels()
    }

    fn volumes(&self) -> &[Volume] {
        self.pod.volumes()
    }
}

/// Whether `affinity` has pod affinity or anti-affinity terms.
pub fn has_pod_affinity(affinity: Option<&Affinity>) -> bool {
    affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// Whether `affinity` has required pod anti-affinity terms.
pub fn has_required_anti_affinity(affinity: Option<&Affinity>) -> bool {
    affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|t| !t.is_empty())
}
