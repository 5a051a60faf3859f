//! NodeResourcesFit: Filter checks the node has room for the pod's requests (`Insufficient cpu`,
//! `Insufficient memory`, `Too many pods`, `Insufficient <extended resource>`); Score ranks nodes
//! with the scoring strategy LeastAllocated (default), MostAllocated or RequestedToCapacityRatio.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    ResourceSpec, for_each_allocatable_and_requested, pod_resource_requests, set_default_resources,
    sign_requests, sign_scoring_requests, validate_resources,
};
use crate::config::FieldError;
use crate::framework::args::{
    PluginArgs, UtilizationShapePoint, decode, invalid, not_supported, required, typed,
    validate_shape,
};
use crate::framework::interface::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{DEVICE_CLASSES, Listers};
use crate::framework::plugins::dynamic_resources::claims::backed_by_dra;
use crate::framework::plugins::helper::{
    MAX_CUSTOM_PRIORITY_SCORE, broken_linear, impl_plugin, scaled_shape,
};
use crate::framework::plugins::names;
use crate::framework::registry::{PluginRegistration, policy_rule};
use crate::framework::types::{NodeInfo, PodInfo, Resource, Snapshot};

pub(crate) const LEAST_ALLOCATED: &str = "LeastAllocated";
pub(crate) const MOST_ALLOCATED: &str = "MostAllocated";
pub(crate) const REQUESTED_TO_CAPACITY_RATIO: &str = "RequestedToCapacityRatio";

const PRE_SCORE_STATE_KEY: &str = "PreScoreNodeResourcesFit";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RequestedToCapacityRatioParam {
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct ScoringStrategy {
    #[serde(rename = "type")]
    pub type_: String,
    pub resources: Vec<ResourceSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

/// Upstream's `NodeResourcesFitArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct NodeResourcesFitArgs {
    pub ignored_resources: Vec<String>,
    pub ignored_resource_groups: Vec<String>,
    pub scoring_strategy: Option<ScoringStrategy>,
}

impl PluginArgs for NodeResourcesFitArgs {
    const KIND: &'static str = "NodeResourcesFitArgs";

    fn set_defaults(&mut self) {
        let s = self
            .scoring_strategy
            .get_or_insert_with(|| ScoringStrategy {
                type_: LEAST_ALLOCATED.into(),
                resources: Vec::new(),
                requested_to_capacity_ratio: None,
            });
        set_default_resources(&mut s.resources);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, r) in self.ignored_resources.iter().enumerate() {
            if !is_qualified_name(r) {
                errs.push(invalid(
                    format!("ignoredResources[{i}]"),
                    format!("\"{r}\""),
                    QUALIFIED_NAME_MSG,
                ));
            }
        }
        for (i, g) in self.ignored_resource_groups.iter().enumerate() {
            let p = format!("ignoredResourceGroups[{i}]");
            if g.contains('/') {
                errs.push(invalid(
                    &p,
                    format!("\"{g}\""),
                    "resource group name can't contain '/'",
                ));
            } else if !is_qualified_name(g) {
                errs.push(invalid(&p, format!("\"{g}\""), QUALIFIED_NAME_MSG));
            }
        }
        if let Some(s) = &self.scoring_strategy {
            let t = s.type_.as_str();
            let supported = [LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO];
            if !supported.contains(&t) {
                errs.push(not_supported("scoringStrategy.type", t, &supported));
            }
            errs.extend(validate_resources(
                &s.resources,
                "scoringStrategy.resources",
            ));
            match &s.requested_to_capacity_ratio {
                Some(r) => errs.extend(validate_shape(
                    &r.shape,
                    "scoringStrategy.requestedToCapacityRatio.shape",
                    MAX_CUSTOM_PRIORITY_SCORE as i32,
                )),
                None if t == REQUESTED_TO_CAPACITY_RATIO => {
                    errs.push(required(
                        "scoringStrategy.requestedToCapacityRatio",
                        "a shape is needed for RequestedToCapacityRatio",
                    ));
                }
                None => {}
            }
        }
        errs
    }
}

const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// A Kubernetes qualified name (`[prefix/]name`), as label keys and resource names are.
pub(crate) fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

#[derive(Debug, Clone)]
enum Strategy {
    Least,
    Most,
    /// Shape points with scores scaled to 0..=100.
    Ratio(Vec<(i64, i64)>),
}

pub(crate) struct Fit {
    ignored_resources: BTreeSet<String>,
    ignored_resource_groups: BTreeSet<String>,
    resources: Vec<ResourceSpec>,
    strategy: Strategy,
    /// The DeviceClasses, for extended resources backed by DRA (`DRAExtendedResource`).
    listers: Option<Arc<Listers>>,
}

const DRA_STATE_KEY: &str = "PreFilterNodeResourcesFitDRA";

impl Fit {
    pub(crate) fn new(args: NodeResourcesFitArgs) -> Result<Fit, String> {
        let mut args = args;
        args.set_defaults();
        let s = args.scoring_strategy.unwrap_or_default();
        let strategy = match s.type_.as_str() {
            LEAST_ALLOCATED => Strategy::Least,
            MOST_ALLOCATED => Strategy::Most,
            REQUESTED_TO_CAPACITY_RATIO => {
                let shape = s
                    .requested_to_capacity_ratio
                    .map(|r| r.shape)
                    .unwrap_or_default();
                if shape.is_empty() {
                    return Err("RequestedToCapacityRatio needs a shape".into());
                }
                Strategy::Ratio(scaled_shape(&shape))
            }
            other => return Err(format!("scoring strategy {other} is not supported")),
        };
        Ok(Fit {
            ignored_resources: args.ignored_resources.into_iter().collect(),
            ignored_resource_groups: args.ignored_resource_groups.into_iter().collect(),
            resources: s.resources,
            strategy,
            listers: None,
        })
    }

    /// Reads DeviceClasses from `listers`: an extended resource a class provides is left to
    /// DynamicResources on nodes whose device plugin does not provide it (upstream's
    /// `shouldDelegateResourceToDRA`).
    pub(crate) fn with_listers(mut self, listers: Arc<Listers>) -> Fit {
        self.listers = Some(listers);
        self
    }

    /// The pod's extended resources that a DeviceClass provides.
    fn dra_backed(&self, pod: &PodInfo) -> BTreeSet<String> {
        let Some(listers) = &self.listers else {
            return BTreeSet::new();
        };
        backed_by_dra(
            pod.requests.scalar_resources.keys(),
            listers.store(&DEVICE_CLASSES),
        )
        .into_iter()
        .collect()
    }

    /// The resources (and weights) the scoring strategy scores.
    pub(super) fn scoring_resources(&self) -> &[ResourceSpec] {
        &self.resources
    }

    /// The strategy's score of `node` for a pod requesting `pod_requests` (per resource).
    fn score_node(&self, node: &NodeInfo, pod_requests: &[i64]) -> i64 {
        let mut node_score = 0i64;
        let mut weight_sum = 0i64;
        for_each_allocatable_and_requested(
            node,
            &self.resources,
            pod_requests,
            false,
            |i, alloc, req| {
                let w = self.resources[i].weight;
                let s = match &self.strategy {
                    Strategy::Least => least_requested_score(req, alloc),
                    Strategy::Most => most_requested_score(req, alloc),
                    Strategy::Ratio(shape) => {
                        let s = if req > alloc {
                            broken_linear(shape, 100)
                        } else {
                            broken_linear(shape, req * 100 / alloc)
                        };
                        // RequestedToCapacityRatio counts only resources scoring above zero.
                        if s <= 0 {
                            return;
                        }
                        s
                    }
                };
                node_score += s * w;
                weight_sum += w;
            },
        );
        if weight_sum == 0 {
            return 0;
        }
        match self.strategy {
            Strategy::Ratio(_) => (node_score as f64 / weight_sum as f64).round() as i64,
            _ => node_score / weight_sum,
        }
    }
}

fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

pub(super) fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// One resource the node lacks for the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InsufficientResource {
    pub resource_name: String,
    pub reason: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
    /// The pod asks for more than the node has at all: preemption cannot help.
    pub unresolvable: bool,
}

/// Upstream's `fitsRequest`.
pub(crate) fn fits_request(
    pod_request: &Resource,
    node: &NodeInfo,
    ignored_resources: &BTreeSet<String>,
    ignored_groups: &BTreeSet<String>,
) -> Vec<InsufficientResource> {
    let used = (&node.requested, node.pods.len() as i64);
    fits(
        pod_request,
        &node.allocatable,
        used,
        ignored_resources,
        ignored_groups,
    )
}

/// [`fits_request`] on a node with `allocatable`, of which `used` (requests, pods) is taken.
pub(super) fn fits(
    pod_request: &Resource,
    allocatable: &Resource,
    (requested, pods): (&Resource, i64),
    ignored_resources: &BTreeSet<String>,
    ignored_groups: &BTreeSet<String>,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    let allowed = allocatable.allowed_pod_number;
    if pods + 1 > allowed {
        out.push(InsufficientResource {
            resource_name: "pods".into(),
            reason: "Too many pods".into(),
            requested: 1,
            used: pods,
            capacity: allowed,
            unresolvable: false,
        });
    }
    if pod_request.milli_cpu == 0
        && pod_request.memory == 0
        && pod_request.ephemeral_storage == 0
        && pod_request.scalar_resources.is_empty()
    {
        return out;
    }
    let (a, r) = (allocatable, requested);
    let mut check = |name: &str, want: i64, alloc: i64, used: i64| {
        if want > 0 && want > alloc - used {
            out.push(InsufficientResource {
                resource_name: name.to_string(),
                reason: format!("Insufficient {name}"),
                requested: want,
                used,
                capacity: alloc,
                unresolvable: want > alloc,
            });
        }
    };
    check("cpu", pod_request.milli_cpu, a.milli_cpu, r.milli_cpu);
    check("memory", pod_request.memory, a.memory, r.memory);
    check(
        "ephemeral-storage",
        pod_request.ephemeral_storage,
        a.ephemeral_storage,
        r.ephemeral_storage,
    );
    for (name, want) in &pod_request.scalar_resources {
        if *want == 0 {
            continue;
        }
        if is_extended_resource_name(name) {
            let group = name.split('/').next().unwrap_or("");
            if ignored_resources.contains(name) || ignored_groups.contains(group) {
                continue;
            }
        }
        let alloc = a.scalar_resources.get(name).copied().unwrap_or(0);
        let used = r.scalar_resources.get(name).copied().unwrap_or(0);
        check(name, *want, alloc, used);
    }
    out
}

/// Extended resources: a domain-prefixed name outside `kubernetes.io/` (upstream's
/// `IsExtendedResourceName`).
pub(crate) fn is_extended_resource_name(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

impl_plugin!(
    Fit,
    names::NODE_RESOURCES_FIT,
    [PreFilter, Filter, PreScore, Score, PlacementScore],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for Fit {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![sign_requests(pod), sign_scoring_requests(pod)])
    }
}

impl PreFilterPlugin for Fit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        // The pod's requests are computed once in PodInfo; what DRA may provide is stored.
        let backed = self.dra_backed(pod);
        if !backed.is_empty() {
            state.write(DRA_STATE_KEY, backed);
        }
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let delegated = state
            .read::<BTreeSet<String>>(DRA_STATE_KEY)
            .into_iter()
            .flatten()
            .filter(|r| {
                node.allocatable
                    .scalar_resources
                    .get(*r)
                    .is_none_or(|v| *v == 0)
            });
        let mut requests = std::borrow::Cow::Borrowed(&pod.requests);
        for r in delegated {
            requests.to_mut().scalar_resources.remove(r);
        }
        let insufficient = fits_request(
            &requests,
            node,
            &self.ignored_resources,
            &self.ignored_resource_groups,
        );
        if insufficient.is_empty() {
            return Status::success();
        }
        let code = if insufficient.iter().any(|r| r.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, insufficient.into_iter().map(|r| r.reason).collect())
    }
}

#[derive(Debug, Clone)]
struct PreScoreState {
    pod_requests: Vec<i64>,
}

impl PreScorePlugin for Fit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                pod_requests: pod_resource_requests(pod, &self.resources, false),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for Fit {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let computed;
        let pod_requests = match state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) {
            Some(s) => &s.pod_requests,
            None => {
                computed = pod_resource_requests(pod, &self.resources, false);
                &computed
            }
        };
        Ok(self.score_node(node, pod_requests))
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        Fit::EXTENSION_POINTS,
        decode::<NodeResourcesFitArgs>,
        |args, handle| {
            let fit = Fit::new(typed::<NodeResourcesFitArgs>(args)?)?;
            Ok(Arc::new(fit.with_listers(handle.listers.clone())))
        },
    )
    .with_informers(&[&DEVICE_CLASSES])
    .with_rbac_rules(vec![policy_rule(
        &["resource.k8s.io"],
        &["deviceclasses"],
        &["get", "list", "watch"],
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder, scoring_node, scoring_pod};
    use serde_json::json;

    fn fit(args: serde_json::Value) -> Fit {
        let v = decode::<NodeResourcesFitArgs>(Some(&args)).expect("valid args");
        Fit::new(typed(&v).expect("typed")).expect("fit")
    }

    fn node(alloc: &[(&str, &str)], pods: Vec<k8s_openapi::api::core::v1::Pod>) -> NodeInfo {
        NodeBuilder::new("n").allocatable(alloc).info(pods)
    }

    fn used(cpu: &str, mem: &str) -> k8s_openapi::api::core::v1::Pod {
        PodBuilder::new(&format!("used-{cpu}-{mem}"))
            .node("n")
            .container(&[("cpu", cpu), ("memory", mem)])
            .build()
    }

    #[test]
    fn filter() {
        let alloc: &[(&str, &str)] = &[
            ("cpu", "10"),
            ("memory", "20"),
            ("pods", "32"),
            ("example.com/gpu", "2"),
        ];
        type Case = (
            &'static str,
            PodBuilder,
            Vec<k8s_openapi::api::core::v1::Pod>,
            Code,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "no resources requested always fits",
                PodBuilder::new("p").container(&[]),
                vec![used("10", "20")],
                Code::Success,
                vec![],
            ),
            (
                "fits",
                PodBuilder::new("p").container(&[("cpu", "1"), ("memory", "1")]),
                vec![used("5", "5")],
                Code::Success,
                vec![],
            ),
            (
                "insufficient cpu",
                PodBuilder::new("p").container(&[("cpu", "1"), ("memory", "1")]),
                vec![used("10", "5")],
                Code::Unschedulable,
                vec!["Insufficient cpu"],
            ),
            (
                "insufficient cpu and memory, both reported",
                PodBuilder::new("p").container(&[("cpu", "6"), ("memory", "16")]),
                vec![used("5", "5")],
                Code::Unschedulable,
                vec!["Insufficient cpu", "Insufficient memory"],
            ),
            (
                "more than the node has: unresolvable",
                PodBuilder::new("p").container(&[("cpu", "11")]),
                vec![],
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient cpu"],
            ),
            (
                "init container counts (max)",
                PodBuilder::new("p")
                    .init_container(&[("cpu", "6")], false)
                    .container(&[("cpu", "1")]),
                vec![used("5", "5")],
                Code::Unschedulable,
                vec!["Insufficient cpu"],
            ),
            (
                "extended resource",
                PodBuilder::new("p").container(&[("example.com/gpu", "2")]),
                vec![
                    PodBuilder::new("g")
                        .node("n")
                        .container(&[("example.com/gpu", "1")])
                        .build(),
                ],
                Code::Unschedulable,
                vec!["Insufficient example.com/gpu"],
            ),
            (
                "extended resource the node lacks",
                PodBuilder::new("p").container(&[("example.com/fpga", "1")]),
                vec![],
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient example.com/fpga"],
            ),
            (
                "overhead counts",
                PodBuilder::new("p")
                    .container(&[("cpu", "4")])
                    .overhead(&[("cpu", "2")]),
                vec![used("5", "5")],
                Code::Unschedulable,
                vec!["Insufficient cpu"],
            ),
        ];
        let f = fit(json!({}));
        for (name, pod, pods, code, reasons) in cases {
            let s = f.filter(&CycleState::new(), &pod.info(), &node(alloc, pods));
            assert_eq!(s.code(), code, "{name}");
            assert_eq!(
                s.reasons(),
                reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
                "{name}"
            );
        }
    }

    #[test]
    fn extended_resources_a_device_class_provides_are_left_to_dra() {
        let listers = Arc::new(Listers::default());
        listers.store(&DEVICE_CLASSES).apply(
            serde_json::from_value(json!({"metadata": {"name": "gpu"},
                "spec": {"extendedResourceName": "example.com/gpu"}}))
            .expect("class"),
        );
        let f = fit(json!({})).with_listers(listers);
        let pod = |r: &str| PodBuilder::new("p").container(&[(r, "1")]).info();
        let lacking = node(&[("cpu", "10"), ("pods", "10")], vec![]);
        let plugin_has_none = node(&[("pods", "10"), ("example.com/gpu", "0")], vec![]);
        let plugin_has_some = node(&[("pods", "10"), ("example.com/gpu", "1")], vec![]);
        let full = node(
            &[("pods", "10"), ("example.com/gpu", "1")],
            vec![
                PodBuilder::new("g")
                    .node("n")
                    .container(&[("example.com/gpu", "1")])
                    .build(),
            ],
        );
        for (name, r, n, want) in [
            (
                "by extendedResourceName, node lacks it",
                "example.com/gpu",
                &lacking,
                vec![],
            ),
            (
                "by the class's implicit name",
                "deviceclass.resource.kubernetes.io/gpu",
                &lacking,
                vec![],
            ),
            (
                "device plugin provides none",
                "example.com/gpu",
                &plugin_has_none,
                vec![],
            ),
            (
                "device plugin provides it",
                "example.com/gpu",
                &plugin_has_some,
                vec![],
            ),
            (
                "device plugin's is taken",
                "example.com/gpu",
                &full,
                vec!["Insufficient example.com/gpu"],
            ),
            (
                "no class provides it",
                "example.com/fpga",
                &lacking,
                vec!["Insufficient example.com/fpga"],
            ),
        ] {
            let p = pod(r);
            let mut cs = CycleState::new();
            let (_, s) = f.pre_filter(&mut cs, &p, &Snapshot::new());
            assert!(s.is_success(), "{name}");
            let s = f.filter(&cs, &p, n);
            assert_eq!(
                s.reasons(),
                want.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
                "{name}"
            );
        }
    }

    #[test]
    fn too_many_pods() {
        let n = node(
            &[("cpu", "10"), ("memory", "20"), ("pods", "1")],
            vec![used("1", "1")],
        );
        let s = fit(json!({})).filter(
            &CycleState::new(),
            &PodBuilder::new("p").container(&[("cpu", "1")]).info(),
            &n,
        );
        assert_eq!(s.reasons(), ["Too many pods"]);
        assert_eq!(s.code(), Code::Unschedulable);
    }

    #[test]
    fn ignored_resources_and_groups() {
        let n = node(&[("cpu", "10"), ("memory", "20"), ("pods", "32")], vec![]);
        let pod = PodBuilder::new("p")
            .container(&[("example.com/aaa", "1"), ("other.io/bbb", "1")])
            .info();
        let s = fit(json!({"ignoredResources": ["example.com/aaa"]})).filter(
            &CycleState::new(),
            &pod,
            &n,
        );
        assert_eq!(s.reasons(), ["Insufficient other.io/bbb"]);
        let s = fit(
            json!({"ignoredResources": ["example.com/aaa"], "ignoredResourceGroups": ["other.io"]}),
        )
        .filter(&CycleState::new(), &pod, &n);
        assert!(s.is_success());
    }

    fn scores(f: &Fit, pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<i64> {
        let mut state = CycleState::new();
        assert!(
            f.pre_score(&mut state, pod, &Snapshot::new(), &[])
                .is_success()
        );
        nodes
            .iter()
            .map(|n| f.score(&state, pod, n).expect("score"))
            .collect()
    }

    #[test]
    fn least_allocated() {
        // Upstream's example: node1 4000m/10000, node2 6000m/10000; pod 3000m/5000 (two containers).
        let pod = scoring_pod();
        let nodes = [
            scoring_node("n1", "4000m", vec![]),
            scoring_node("n2", "6000m", vec![]),
        ];
        // n1: cpu (4000-3000)*100/4000 = 25, mem (10000-5000)*100/10000 = 50 -> 37
        // n2: cpu (6000-3000)*100/6000 = 50, mem 50 -> 50
        assert_eq!(scores(&fit(json!({})), &pod, &nodes), [37, 50]);
        // Best-effort pod: non-zero defaults (100m, 200Mi) are scored.
        let be = PodBuilder::new("be").container(&[]).info();
        let big = [NodeBuilder::new("n")
            .allocatable(&[("cpu", "1000m"), ("memory", "2000Mi"), ("pods", "32")])
            .info(vec![])];
        // cpu (1000-100)*100/1000 = 90, mem (2000-200)*100/2000 = 90
        assert_eq!(scores(&fit(json!({})), &be, &big), [90]);
    }

    #[test]
    fn pod_level_requests_do_not_move_the_score() {
        // Upstream 1.36's Fit scorer is built without pod-level resources (its filter and
        // BalancedAllocation use them): a 1900m pod-level request over a 475m container scores as
        // 475m. Found by the differential test (resources-017).
        let pod = PodBuilder::new("p")
            .container(&[("cpu", "475m"), ("memory", "416Mi")])
            .pod_level_requests(&[("cpu", "1900m"), ("memory", "1664Mi")])
            .info();
        assert_eq!(
            pod.requests.milli_cpu, 1900,
            "the filter sees the pod level"
        );
        let nodes = [NodeBuilder::new("n1")
            .allocatable(&[("cpu", "8000m"), ("memory", "2048Mi"), ("pods", "32")])
            .info(vec![
                PodBuilder::new("e")
                    .node("n1")
                    .container(&[("cpu", "400m"), ("memory", "256Mi")])
                    .build(),
            ])];
        // cpu (8000-875)*100/8000 = 89, mem (2048-672)*100/2048 = 67 -> 78 (upstream's score)
        assert_eq!(scores(&fit(json!({})), &pod, &nodes), [78]);
    }

    #[test]
    fn most_allocated_and_weights() {
        let pod = PodBuilder::new("p")
            .container(&[("cpu", "1000m"), ("memory", "2000")])
            .info();
        let nodes = [scoring_node("n", "4000m", vec![])];
        // cpu 1000*100/4000 = 25, mem 2000*100/10000 = 20 -> (25*1 + 20*1)/2 = 22
        let most = fit(json!({"scoringStrategy": {"type": "MostAllocated"}}));
        assert_eq!(scores(&most, &pod, &nodes), [22]);
        // weights cpu 3, memory 1: (75 + 20)/4 = 23
        let weighted = fit(
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [
            {"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}}),
        );
        assert_eq!(scores(&weighted, &pod, &nodes), [23]);
        // Over-committed requests are capped at capacity for MostAllocated.
        let hog = PodBuilder::new("h")
            .container(&[("cpu", "8000m"), ("memory", "20000")])
            .info();
        assert_eq!(scores(&most, &hog, &nodes), [100]);
        assert_eq!(scores(&fit(json!({})), &hog, &nodes), [0]);
    }

    #[test]
    fn requested_to_capacity_ratio() {
        let args = json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]}}});
        let f = fit(args);
        let pod = PodBuilder::new("p")
            .container(&[("cpu", "3000m"), ("memory", "5000")])
            .info();
        let nodes = [
            scoring_node("n1", "4000m", vec![]),
            scoring_node("n2", "6000m", vec![]),
        ];
        // n1: cpu 75% -> 25, mem 50% -> 50 -> round(37.5) = 38; n2: 50, 50 -> 50
        assert_eq!(scores(&f, &pod, &nodes), [38, 50]);
        assert_eq!(broken_linear(&[(10, 0), (50, 100)], 5), 0);
        assert_eq!(broken_linear(&[(10, 0), (50, 100)], 30), 50);
        assert_eq!(broken_linear(&[(10, 0), (50, 100)], 90), 100);
    }

    #[test]
    fn extended_resources_are_scored_only_when_requested() {
        let f = fit(
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "example.com/gpu", "weight": 1}]}}),
        );
        let alloc: &[(&str, &str)] = &[
            ("cpu", "4000m"),
            ("memory", "10000"),
            ("pods", "32"),
            ("example.com/gpu", "4"),
        ];
        let nodes = [NodeBuilder::new("n").allocatable(alloc).info(vec![])];
        let no_gpu = PodBuilder::new("p").container(&[("cpu", "1000m")]).info();
        assert_eq!(scores(&f, &no_gpu, &nodes), [75]);
        let gpu = PodBuilder::new("q")
            .container(&[("cpu", "1000m"), ("example.com/gpu", "2")])
            .info();
        // cpu 75, gpu 50 -> 62
        assert_eq!(scores(&f, &gpu, &nodes), [62]);
    }

    #[test]
    fn args() {
        assert_eq!(
            decode::<NodeResourcesFitArgs>(None),
            Ok(
                json!({"ignoredResources": [], "ignoredResourceGroups": [], "scoringStrategy": {
                "type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}})
            )
        );
        let e =
            decode::<NodeResourcesFitArgs>(Some(&json!({"scoringStrategy": {"type": "Random"}})))
                .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "scoringStrategy.type: Unsupported value: \"Random\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
        );
        let e = decode::<NodeResourcesFitArgs>(Some(
            &json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
        ))
        .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range (0, 100]"
        );
        let e = decode::<NodeResourcesFitArgs>(Some(
            &json!({"ignoredResourceGroups": ["example.com/aaa"]}),
        ))
        .unwrap_err();
        assert_eq!(e[0].path, "ignoredResourceGroups[0]");
        let e = decode::<NodeResourcesFitArgs>(Some(
            &json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
        ))
        .unwrap_err();
        assert_eq!(e[0].path, "scoringStrategy.requestedToCapacityRatio");
        let e = decode::<NodeResourcesFitArgs>(Some(
            &json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]}}}),
        ))
        .unwrap_err();
        assert_eq!(
            e[0].path,
            "scoringStrategy.requestedToCapacityRatio.shape[0].score"
        );
        let e = decode::<NodeResourcesFitArgs>(Some(&json!({"scoringStrategy": {"typo": "x"}})))
            .unwrap_err();
        assert_eq!(e[0].path, "scoringStrategy.typo");
        assert!(is_qualified_name("example.com/gpu"));
        assert!(!is_qualified_name("-bad"));
    }
}
