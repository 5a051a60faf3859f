//! NodeResourcesFit and NodeResourcesBalancedAllocation, and the resource-allocation scoring they
//! share (upstream's `resource_allocation.go`).

pub(crate) mod balanced_allocation;
pub(crate) mod fit;
mod fit_events;
mod placement_score;

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::invalid;
use crate::framework::interface::{SignFragment, signer_names};
use crate::framework::types::{
    NodeInfo, PodInfo, RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY,
    fit_scoring_requests, is_scalar_resource_name,
};

/// The pod's requests as Filter and BalancedAllocation read them (upstream signs the same
/// `computePodResourceRequest`).
pub(crate) fn sign_requests(pod: &PodInfo) -> SignFragment {
    SignFragment::new(signer_names::RESOURCES, format!("{:?}", pod.requests))
}

/// The requests Fit scores with (containers requesting nothing count 100m CPU and 200Mi): two pods
/// with equal requests may differ here, so ksched signs both.
pub(crate) fn sign_scoring_requests(pod: &PodInfo) -> SignFragment {
    SignFragment::new(
        signer_names::NON_ZERO_REQUESTS,
        format!("{:?}", fit_scoring_requests(&pod.pod)),
    )
}

/// A resource and its weight in scoring (upstream's `ResourceSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ResourceSpec {
    pub name: String,
    #[serde(default)]
    pub weight: i64,
}

/// Upstream's defaulting of a resources list: empty is `cpu: 1, memory: 1`, a weight of 0 is 1.
pub(crate) fn set_default_resources(resources: &mut Vec<ResourceSpec>) {
    if resources.is_empty() {
        *resources = default_resources();
    }
    for r in resources {
        if r.weight == 0 {
            r.weight = 1;
        }
    }
}

/// `cpu: 1, memory: 1`.
pub(crate) fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: RESOURCE_CPU.into(),
            weight: 1,
        },
        ResourceSpec {
            name: RESOURCE_MEMORY.into(),
            weight: 1,
        },
    ]
}

/// Upstream's `validateResources`: weights in (0, 100].
pub(crate) fn validate_resources(resources: &[ResourceSpec], path: &str) -> Vec<FieldError> {
    resources
        .iter()
        .enumerate()
        .filter(|(_, r)| r.weight <= 0 || r.weight > 100)
        .map(|(i, r)| {
            invalid(
                format!("{path}[{i}].weight"),
                r.weight,
                &format!("resource weight of {} not in valid range (0, 100]", r.name),
            )
        })
        .collect()
}

/// The pod's request of each resource for scoring. With `use_requested` (BalancedAllocation) its
/// requests; without (NodeResourcesFit) what upstream's Fit scorer computes: containers that request
/// no cpu/memory count as 100m/200Mi, pod-level resources are not looked at
/// ([`fit_scoring_requests`]).
pub(crate) fn pod_resource_requests(
    pod: &PodInfo,
    resources: &[ResourceSpec],
    use_requested: bool,
) -> Vec<i64> {
    let fit = (!use_requested).then(|| fit_scoring_requests(&pod.pod));
    resources
        .iter()
        .map(|r| match &fit {
            Some(f) => f.get(&r.name),
            None => pod.requests.get(&r.name),
        })
        .collect()
}

/// Calls `f(i, allocatable, requested)` for each resource `i` that counts on `node`: requested
/// includes the pod. Skipped: an extended resource the pod does not request, or one the node does
/// not have (upstream returns (0, 0) for those). Allocates nothing (scoring runs per node).
pub(crate) fn for_each_allocatable_and_requested(
    node: &NodeInfo,
    resources: &[ResourceSpec],
    pod_requests: &[i64],
    use_requested: bool,
    mut f: impl FnMut(usize, i64, i64),
) {
    let requested = if use_requested {
        &node.requested
    } else {
        &node.non_zero_requested
    };
    for (i, r) in resources.iter().enumerate() {
        let pod_req = pod_requests.get(i).copied().unwrap_or(0);
        let name = r.name.as_str();
        if pod_req == 0 && is_scalar_resource_name(name) {
            continue;
        }
        let (a, q) = match name {
            RESOURCE_CPU => (node.allocatable.milli_cpu, requested.milli_cpu + pod_req),
            RESOURCE_MEMORY => (node.allocatable.memory, requested.memory + pod_req),
            RESOURCE_EPHEMERAL_STORAGE => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage + pod_req,
            ),
            _ => match node.allocatable.scalar_resources.get(name) {
                Some(a) => (*a, node.requested.get(name) + pod_req),
                None => (0, 0),
            },
        };
        if a != 0 {
            f(i, a, q);
        }
    }
}
