//! [`Resource`]: an amount of compute resources in the units the scheduler computes with, and
//! a pod's requests as upstream's `resourcehelper.PodRequests` computes them (once per pod, in
//! [`PodInfo::new`](super::pod_info::PodInfo::new)).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;

/// The CPU request assumed for scoring a container that requests none (upstream's
/// `DefaultMilliCPURequest`, 0.1 core).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory request assumed for scoring a container that requests none (upstream's
/// `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const RESOURCE_PODS: &str = "pods";

/// Whether a resource is kept in [`Resource::scalar_resources`]: extended resources
/// (`example.com/gpu`), `hugepages-*`, `attachable-volumes-*` and prefixed native resources
/// (`kubernetes.io/...`) — upstream's `IsScalarResourceName`.
pub fn is_scalar_resource_name(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("requests."))
}

/// An amount of compute resources in the units the scheduler computes with: millicores, bytes,
/// counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar_resources: BTreeMap<String, i64>,
}

impl Resource {
    /// Sums a resource list (`requests`, `allocatable`...). Unparseable quantities (the API server
    /// never lets one through) are logged and count as zero.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resource {
        let mut r = Resource::default();
        r.add_list(list);
        r
    }

    pub fn add_list(&mut self, list: &BTreeMap<String, Quantity>) {
        for (name, q) in list {
            self.add_named(name, parse_or_zero(name, q));
        }
    }

    /// Adds `v` (millicores for cpu, else units) to resource `name`.
    pub fn add_named(&mut self, name: &str, v: i64) {
        match name {
            RESOURCE_CPU => self.milli_cpu += v,
            RESOURCE_MEMORY => self.memory += v,
            RESOURCE_PODS => self.allowed_pod_number += v,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage += v,
            _ if is_scalar_resource_name(name) => {
                *self.scalar_resources.entry(name.to_string()).or_insert(0) += v;
            }
            _ => {}
        }
    }

    /// Sets resource `name` to `v` (a present entry, even zero, is kept).
    pub fn set_named(&mut self, name: &str, v: i64) {
        match name {
            RESOURCE_CPU => self.milli_cpu = v,
            RESOURCE_MEMORY => self.memory = v,
            RESOURCE_PODS => self.allowed_pod_number = v,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            _ if is_scalar_resource_name(name) => {
                self.scalar_resources.insert(name.to_string(), v);
            }
            _ => {}
        }
    }

    /// The amount of resource `name` (millicores for cpu).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            RESOURCE_CPU => self.milli_cpu,
            RESOURCE_MEMORY => self.memory,
            RESOURCE_PODS => self.allowed_pod_number,
            RESOURCE_EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self.scalar_resources.get(name).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (k, v) in &other.scalar_resources {
            *self.scalar_resources.entry(k.clone()).or_insert(0) += v;
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (k, v) in &other.scalar_resources {
            *self.scalar_resources.entry(k.clone()).or_insert(0) -= v;
        }
    }

    /// Per-resource maximum of the two.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let e = self.scalar_resources.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar_resources.values().all(|v| *v == 0)
    }
}

fn parse_or_zero(name: &str, q: &Quantity) -> i64 {
    match quantity::resource_value(name, q) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(resource = name, quantity = %q.0, error = %e, "ignoring unparseable quantity");
            0
        }
    }
}

/// A resource list in computing units, remembering which names were present (upstream's
/// non-missing logic distinguishes "absent" from "zero").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ResList {
    values: BTreeMap<String, i64>,
}

impl ResList {
    fn from_quantities(list: Option<&BTreeMap<String, Quantity>>) -> ResList {
        let mut values = BTreeMap::new();
        if let Some(list) = list {
            for (name, q) in list {
                values.insert(name.clone(), parse_or_zero(name, q));
            }
        }
        ResList { values }
    }

    fn add(&mut self, other: &ResList) {
        for (k, v) in &other.values {
            *self.values.entry(k.clone()).or_insert(0) += v;
        }
    }

    fn max(&mut self, other: &ResList) {
        for (k, v) in &other.values {
            let e = self.values.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    }

    fn with_defaults(mut self, defaults: &[(&str, i64)]) -> ResList {
        for (k, v) in defaults {
            self.values.entry((*k).to_string()).or_insert(*v);
        }
        self
    }

    fn to_resource(&self) -> Resource {
        let mut r = Resource::default();
        for (k, v) in &self.values {
            r.add_named(k, *v);
        }
        r
    }
}

pub(super) fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn is_supported_pod_level_resource(name: &str) -> bool {
    name == RESOURCE_CPU || name == RESOURCE_MEMORY || name.starts_with("hugepages-")
}

fn is_pod_resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
}

fn find_container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)
}

#[derive(Clone, Copy)]
enum RequestSource {
    Spec,
    Allocated,
    Actuated,
}

/// The requests one container contributes, from the spec or its status (in-place resize).
fn container_requests(
    c: &Container,
    status: Option<&ContainerStatus>,
    source: RequestSource,
    resize_infeasible: bool,
) -> Option<ResList> {
    let spec = || c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let list = match source {
        RequestSource::Spec => spec(),
        RequestSource::Allocated => match status.and_then(|s| s.allocated_resources.as_ref()) {
            Some(a) => Some(a),
            None if resize_infeasible => return None,
            None => spec(),
        },
        RequestSource::Actuated => {
            if let Some(r) = status
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
            {
                Some(r)
            } else if let Some(a) = status.and_then(|s| s.allocated_resources.as_ref()) {
                Some(a)
            } else if resize_infeasible {
                return None;
            } else {
                spec()
            }
        }
    };
    Some(ResList::from_quantities(list))
}

/// Upstream's `aggregateContainerResourcesByFn`: containers summed, restartable init containers
/// (sidecars) summed into both the total and every later init container, then the max with the
/// largest init container.
fn aggregate_containers(
    pod: &Pod,
    spec: &PodSpec,
    source: RequestSource,
    non_missing: &[(&str, i64)],
) -> ResList {
    let resize_infeasible = is_pod_resize_infeasible(pod);
    let use_status = !matches!(source, RequestSource::Spec);
    let get = |c: &Container| -> ResList {
        let status = if use_status {
            find_container_status(pod, &c.name)
        } else {
            None
        };
        let list = container_requests(c, status, source, resize_infeasible).unwrap_or_default();
        if non_missing.is_empty() {
            list
        } else {
            list.with_defaults(non_missing)
        }
    };
    let mut result = ResList::default();
    for c in &spec.containers {
        result.add(&get(c));
    }
    let mut restartable = ResList::default();
    let mut init_max = ResList::default();
    for c in spec.init_containers.iter().flatten() {
        let r = get(c);
        let effective = if is_restartable_init_container(c) {
            result.add(&r);
            restartable.add(&r);
            restartable.clone()
        } else {
            let mut combined = r;
            combined.add(&restartable);
            combined
        };
        init_max.max(&effective);
    }
    result.max(&init_max);
    result
}

/// Upstream's `resourcehelper.PodRequests` with in-place resize (status resources) and pod-level
/// resources on, as in Kubernetes 1.36: max(spec, allocated, actuated) per container aggregate,
/// pod-level requests for cpu/memory/hugepages, plus overhead.
fn pod_requests(pod: &Pod, non_missing: &[(&str, i64)]) -> ResList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResList::default();
    };
    let spec_reqs = aggregate_containers(pod, spec, RequestSource::Spec, non_missing);
    let allocated = aggregate_containers(pod, spec, RequestSource::Allocated, non_missing);
    let actuated = aggregate_containers(pod, spec, RequestSource::Actuated, non_missing);
    let mut reqs = if is_pod_resize_infeasible(pod) {
        let mut r = actuated;
        r.max(&allocated);
        r
    } else {
        let mut r = spec_reqs;
        r.max(&actuated);
        r.max(&allocated);
        r
    };
    if let Some(pod_level) = pod_level_requests(spec) {
        for (name, q) in pod_level {
            if is_supported_pod_level_resource(name) {
                reqs.values.insert(name.clone(), parse_or_zero(name, q));
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&ResList::from_quantities(Some(overhead)));
    }
    reqs
}

/// The pod-level requests when at least one supported resource is set there.
fn pod_level_requests(spec: &PodSpec) -> Option<&BTreeMap<String, Quantity>> {
    let reqs = spec.resources.as_ref()?.requests.as_ref()?;
    reqs.keys()
        .any(|k| is_supported_pod_level_resource(k))
        .then_some(reqs)
}

/// The pod's requests as upstream 1.36 scores them for NodeResourcesFit: its containers' (missing
/// cpu/memory count as the non-zero defaults) plus overhead, without pod-level resources or
/// in-place resize status. Upstream builds that plugin's scorer without those features (unlike
/// its filter and NodeResourcesBalancedAllocation), so a pod-level request does not move its score.
pub fn fit_scoring_requests(pod: &Pod) -> Resource {
    let Some(spec) = pod.spec.as_ref() else {
        return Resource::default();
    };
    let non_missing = [
        (RESOURCE_CPU, DEFAULT_MILLI_CPU_REQUEST),
        (RESOURCE_MEMORY, DEFAULT_MEMORY_REQUEST),
    ];
    let mut reqs = aggregate_containers(pod, spec, RequestSource::Spec, &non_missing);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&ResList::from_quantities(Some(overhead)));
    }
    reqs.to_resource()
}

/// Computes (requests, non-zero cpu, non-zero memory) as upstream's `PodInfo.CalculateResource`.
pub fn calculate_pod_resource(pod: &Pod) -> (Resource, i64, i64) {
    let requests = pod_requests(pod, &[]);
    let pod_level_set = pod.spec.as_ref().and_then(pod_level_requests).is_some();
    let mut non_missing: Vec<(&str, i64)> = Vec::with_capacity(2);
    if !pod_level_set || !requests.values.contains_key(RESOURCE_CPU) {
        non_missing.push((RESOURCE_CPU, DEFAULT_MILLI_CPU_REQUEST));
    }
    if !pod_level_set || !requests.values.contains_key(RESOURCE_MEMORY) {
        non_missing.push((RESOURCE_MEMORY, DEFAULT_MEMORY_REQUEST));
    }
    let non_zero = if non_missing.is_empty() {
        requests.clone()
    } else {
        pod_requests(pod, &non_missing)
    };
    let non0_cpu = non_zero.values.get(RESOURCE_CPU).copied().unwrap_or(0);
    let non0_mem = non_zero.values.get(RESOURCE_MEMORY).copied().unwrap_or(0);
    (requests.to_resource(), non0_cpu, non0_mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn scalar_resource_names() {
        for (name, want) in [
            ("example.com/gpu", true),
            ("nvidia.com/gpu", true),
            ("hugepages-2Mi", true),
            ("attachable-volumes-aws-ebs", true),
            ("kubernetes.io/batch-cpu", true),
            ("requests.example.com/gpu", false),
            ("cpu", false),
            ("foo", false),
        ] {
            assert_eq!(is_scalar_resource_name(name), want, "{name}");
        }
    }

    #[test]
    fn pod_requests_as_upstream() {
        struct Case {
            name: &'static str,
            pod: Pod,
            cpu: i64,
            mem: i64,
            non0_cpu: i64,
            non0_mem: i64,
        }
        let mi = 1024 * 1024;
        let cases = vec![
            Case {
                name: "no requests: non-zero defaults for scoring",
                pod: PodBuilder::new("p").container(&[]).build(),
                cpu: 0,
                mem: 0,
                non0_cpu: 100,
                non0_mem: 200 * mi,
            },
            Case {
                name: "containers summed",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1"), ("memory", "1Gi")])
                    .container(&[("cpu", "500m")])
                    .build(),
                cpu: 1500,
                mem: 1024 * mi,
                non0_cpu: 1500,
                non0_mem: 1024 * mi + 200 * mi,
            },
            Case {
                name: "explicit zero is not missing",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "0"), ("memory", "0")])
                    .build(),
                cpu: 0,
                mem: 0,
                non0_cpu: 0,
                non0_mem: 0,
            },
            Case {
                name: "init container larger than containers",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "2")], false)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2000,
                mem: 0,
                non0_cpu: 2000,
                non0_mem: 200 * mi,
            },
            Case {
                // sidecar 1 + containers 1 = 2; init after sidecar: 1 + 1.5 = 2.5 -> 2.5
                name: "sidecars count in both the sum and later init containers",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "1")], true)
                    .init_container(&[("cpu", "1500m")], false)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2500,
                mem: 0,
                non0_cpu: 2500,
                // the sidecar's 200Mi default counts in the sum too
                non0_mem: 400 * mi,
            },
            Case {
                name: "init container before the sidecar does not include it",
                pod: PodBuilder::new("p")
                    .init_container(&[("cpu", "1500m")], false)
                    .init_container(&[("cpu", "1")], true)
                    .container(&[("cpu", "1")])
                    .build(),
                cpu: 2000,
                mem: 0,
                non0_cpu: 2000,
                non0_mem: 400 * mi,
            },
            Case {
                name: "overhead added",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .overhead(&[("cpu", "250m"), ("memory", "10Mi")])
                    .build(),
                cpu: 1250,
                mem: 10 * mi,
                non0_cpu: 1250,
                non0_mem: 210 * mi,
            },
            Case {
                name: "pod-level requests override cpu/memory",
                pod: PodBuilder::new("p")
                    .container(&[("cpu", "1")])
                    .pod_level_requests(&[("cpu", "3")])
                    .build(),
                cpu: 3000,
                mem: 0,
                non0_cpu: 3000,
                non0_mem: 200 * mi,
            },
        ];
        for c in cases {
            let (r, n0c, n0m) = calculate_pod_resource(&c.pod);
            assert_eq!(
                (r.milli_cpu, r.memory, n0c, n0m),
                (c.cpu, c.mem, c.non0_cpu, c.non0_mem),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn extended_resources_and_ephemeral_storage() {
        let pod = PodBuilder::new("p")
            .container(&[
                ("example.com/gpu", "2"),
                ("ephemeral-storage", "1Gi"),
                ("hugepages-2Mi", "4Mi"),
            ])
            .build();
        let (r, _, _) = calculate_pod_resource(&pod);
        assert_eq!(r.get("example.com/gpu"), 2);
        assert_eq!(r.ephemeral_storage, 1 << 30);
        assert_eq!(r.get("hugepages-2Mi"), 4 << 20);
    }

    #[test]
    fn resized_pod_uses_max_of_spec_and_allocated() {
        let mut pod = PodBuilder::new("p").container(&[("cpu", "1")]).build();
        let status = k8s_openapi::api::core::v1::PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "c0".into(),
                allocated_resources: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        pod.status = Some(status);
        let (r, _, _) = calculate_pod_resource(&pod);
        assert_eq!(r.milli_cpu, 2000);
    }
}
