//! DefaultPreemption's table tests: the whole PostFilter on small clusters.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use super::evaluator::*;
use super::executor::REASON_PREEMPTION_BY_SCHEDULER;
use super::plugin::*;
use super::*;
use crate::config::ExtensionPoint::{Filter, PostFilter, PreFilter};
use crate::framework::api_calls::{ApiClient, ApiError, RecordingApi, Verb};
use crate::framework::interface::{
    Code, CycleState, PostFilterPlugin, PostFilterResult, PreEnqueuePlugin, Status,
};
use crate::framework::listers::POD_DISRUPTION_BUDGETS;
use crate::framework::plugins::names;
use crate::framework::registry::{PodNominator, Registry};
use crate::framework::runtime::Framework;
use crate::framework::schedule::{Algorithm, ScheduleError};
use crate::framework::testing::{NodeBuilder, PodBuilder, handle, profile};
use crate::framework::types::{DISRUPTION_TARGET, PodInfo, Snapshot};

struct Nominated(Vec<Arc<PodInfo>>);

impl PodNominator for Nominated {
    fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
        self.0
            .iter()
            .filter(|p| p.nominated_node_name() == node_name)
            .cloned()
            .collect()
    }
}

/// A cluster: nodes of 2 cpu (`taint`ed ones untolerable), pods on them, nominated pods, PDBs.
#[derive(Default)]
struct Cluster {
    nodes: Vec<(&'static str, bool)>,
    pods: Vec<Pod>,
    nominated: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    /// minCandidateNodesPercentage, minCandidateNodesAbsolute and a fixed offset, instead of
    /// the profile's plugin (defaults, random offset).
    candidates: Option<(i32, i32, usize)>,
    extenders: Vec<Arc<dyn crate::framework::extender::Extender>>,
    /// The minor the framework emulates (default: the newest).
    minor: Option<crate::emulation::Minor>,
}

impl Cluster {
    /// Untainted nodes named `nodes` with `pods` on them.
    fn of(nodes: &[&'static str], pods: Vec<Pod>) -> Cluster {
        Cluster {
            nodes: nodes.iter().map(|n| (*n, false)).collect(),
            pods,
            ..Default::default()
        }
    }
}

struct Outcome {
    result: Option<PostFilterResult>,
    status: Status,
    /// The FailedScheduling message as the scheduler renders it.
    message: String,
    api: Arc<RecordingApi>,
}

/// The pod status patches sent, in order: the pod's key, the condition set, and the nominated
/// node set (`Some("")`: cleared).
fn status_patches(api: &RecordingApi) -> Vec<(String, Option<PodCondition>, Option<String>)> {
    api.sent::<Pod>(Verb::Patch, Some("status"))
        .into_iter()
        .map(|r| {
            let status = r.body.as_ref().and_then(|b| b.get("status"));
            let condition = status
                .and_then(|s| s.pointer("/conditions/0"))
                .and_then(|c| serde_json::from_value(c.clone()).ok());
            let nominated = status
                .and_then(|s| s.get("nominatedNodeName"))
                .map(|n| n.as_str().unwrap_or_default().to_string());
            (r.key(), condition, nominated)
        })
        .collect()
}

impl Outcome {
    fn nominated(&self) -> Option<&str> {
        self.result
            .as_ref()
            .map(|r| r.nominating_info.nominated_node_name.as_str())
    }

    fn deleted(&self) -> Vec<String> {
        let mut d = self.api.keys::<Pod>(Verb::Delete, None);
        d.sort();
        d
    }

    /// The preemptor is nominated to `node` and exactly `victims` (in "default") go.
    fn assert_preempted(&self, node: &str, victims: &[&str]) {
        assert_eq!(self.nominated(), Some(node));
        let want: Vec<String> = victims.iter().map(|v| format!("default/{v}")).collect();
        assert_eq!(self.deleted(), want);
    }
}

fn pod(name: &str, priority: i32, cpu: &str) -> PodBuilder {
    PodBuilder::new(name)
        .priority(priority)
        .container(&[("cpu", cpu)])
}

fn on(node: &str, name: &str, priority: i32, cpu: &str) -> Pod {
    pod(name, priority, cpu).node(node).build()
}

/// A pod of priority 1 labelled app=db (the PDBs' selector) on `node`.
fn db_on(node: &str, name: &str, cpu: &str) -> Pod {
    pod(name, 1, cpu).label("app", "db").node(node).build()
}

/// The preemptor of most cases: priority 100, requesting `cpu`.
fn preemptor(cpu: &str) -> Pod {
    pod("p", 100, cpu).build()
}

fn started(mut p: Pod, rfc3339: &str) -> Pod {
    let t: Timestamp = rfc3339.parse().expect("time");
    p.status.get_or_insert_with(Default::default).start_time = Some(Time(t));
    p
}

fn never(mut p: Pod) -> Pod {
    if let Some(s) = p.spec.as_mut() {
        s.preemption_policy = Some("Never".into());
    }
    p
}

pub(super) fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: Some(allowed),
            ..Default::default()
        }),
    }
}

fn preempt(cluster: Cluster, preemptor: Pod) -> Outcome {
    let (h, api) = handle();
    let nominated = cluster
        .nominated
        .into_iter()
        .map(|p| Arc::new(PodInfo::from_pod(p)))
        .collect();
    let mut h = h.with_nominator(Arc::new(Nominated(nominated)));
    if let Some(minor) = cluster.minor {
        h = h.with_emulation(Arc::new(crate::emulation::Emulation::of(minor)));
    }
    h.extenders = cluster.extenders.clone();
    for p in cluster.pdbs {
        h.listers.store(&POD_DISRUPTION_BUDGETS).apply(p);
    }
    let spec = profile(&[
        (PreFilter, &[names::NODE_RESOURCES_FIT]),
        (
            Filter,
            &[names::TAINT_TOLERATION, names::NODE_RESOURCES_FIT],
        ),
        (PostFilter, &[names::DEFAULT_PREEMPTION]),
    ]);
    let fwk = Framework::new(&spec, &Registry::in_tree(), h).expect("framework");
    let nodes: Vec<Arc<k8s_openapi::api::core::v1::Node>> = cluster
        .nodes
        .iter()
        .map(|(name, tainted)| {
            let b = NodeBuilder::new(name).allocatable(&[("cpu", "2"), ("pods", "110")]);
            let b = if *tainted {
                b.taint("k", "v", "NoSchedule")
            } else {
                b
            };
            Arc::new(b.build())
        })
        .collect();
    let pods: Vec<Arc<Pod>> = cluster.pods.into_iter().map(Arc::new).collect();
    let snapshot = Snapshot::from_objects(&nodes, &pods);
    let preemptor = PodInfo::from_pod(preemptor);
    let mut state = CycleState::new();
    let mut fit = match Algorithm::new(0).schedule_pod(&fwk, &mut state, &preemptor, &snapshot) {
        Err(ScheduleError::Fit(fit)) => fit,
        other => panic!("expected a fit error, got {other:?}"),
    };
    let filtered = &fit.diagnosis.node_to_status;
    let (result, status) = match cluster.candidates {
        None => fwk.run_post_filter_plugins(&state, &preemptor, &snapshot, filtered),
        Some((percentage, absolute, offset)) => {
            let args = DefaultPreemptionArgs {
                min_candidate_nodes_percentage: Some(percentage),
                min_candidate_nodes_absolute: Some(absolute),
            };
            DefaultPreemption::new(&args, fwk.handle().clone())
                .with_offset(move |_| offset)
                .post_filter_with_framework(&fwk, &state, &preemptor, &snapshot, filtered)
        }
    };
    if !status.message().is_empty() {
        fit.set_post_filter_message(status.message());
    }
    // The evictions wait in the dispatcher until it runs them (here, at once).
    let queued = fwk.handle().dispatcher.clone();
    queued.run_queued(&(api.clone() as Arc<dyn ApiClient>));
    Outcome {
        result,
        status,
        message: fit.to_string(),
        api,
    }
}

#[test]
fn no_victims_found_and_not_helpful() {
    // n1: full with a pod of the same priority; n2, n3: untolerated taint.
    let out = preempt(
        Cluster {
            nodes: vec![("n1", false), ("n2", true), ("n3", true)],
            pods: vec![on("n1", "same", 100, "2")],
            ..Default::default()
        },
        preemptor("1"),
    );
    assert_eq!(out.status.code(), Code::Unschedulable);
    assert_eq!(
        out.message,
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s). \
         preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
         2 Preemption is not helpful for scheduling."
    );
    // Upstream clears any nomination in this case.
    assert_eq!(out.nominated(), Some(""));
    assert!(out.deleted().is_empty());
}

#[test]
fn unresolvable_everywhere_is_not_helpful() {
    let out = preempt(
        Cluster {
            nodes: vec![("n1", true), ("n2", true)],
            pods: vec![on("n1", "low", 1, "1")],
            ..Default::default()
        },
        preemptor("1"),
    );
    assert_eq!(
        out.status.message(),
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn victims_that_do_not_make_room_leave_the_filter_reason() {
    // Removing the low pod frees 1 cpu of 2; the pod wants 3.
    let out = preempt(
        Cluster::of(
            &["n1"],
            vec![on("n1", "low", 1, "1"), on("n1", "high", 200, "1")],
        ),
        preemptor("2"),
    );
    assert_eq!(
        out.status.message(),
        "preemption: 0/1 nodes are available: 1 Insufficient cpu."
    );
    assert!(out.deleted().is_empty());
}

#[test]
fn preemption_policy_never_is_not_eligible() {
    let out = preempt(
        Cluster::of(&["n1"], vec![on("n1", "low", 1, "2")]),
        never(preemptor("1")),
    );
    assert_eq!(out.status.code(), Code::Unschedulable);
    assert_eq!(
        out.status.message(),
        "preemption: not eligible due to preemptionPolicy=Never."
    );
    assert_eq!(
        out.message,
        "0/1 nodes are available: 1 Insufficient cpu. \
         preemption: not eligible due to preemptionPolicy=Never."
    );
    assert!(out.result.is_none());
    assert!(out.deleted().is_empty());
}

#[test]
fn terminating_victim_on_the_nominated_node_waits() {
    let mut victim = on("n1", "low", 1, "2");
    victim.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    victim
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some(REASON_PREEMPTION_BY_SCHEDULER.into()),
        ..Default::default()
    }]);
    let out = preempt(
        Cluster::of(&["n1", "n2"], vec![victim, on("n2", "low2", 1, "2")]),
        pod("p", 100, "1").nominated_node("n1").build(),
    );
    assert_eq!(
        out.status.message(),
        "preemption: not eligible due to a terminating pod on the nominated node."
    );
    assert!(out.deleted().is_empty());
}

#[test]
fn lowest_priority_victims_first_and_the_rest_reprieved() {
    // n1 (2 cpu): three pods of 0.5, 0.5 and 1 cpu; the pod needs 1 cpu: removing the two
    // least important is enough, the 1-cpu pod of priority 3 is reprieved.
    let out = preempt(
        Cluster::of(
            &["n1"],
            vec![
                on("n1", "p1", 1, "500m"),
                on("n1", "p2", 2, "500m"),
                on("n1", "p3", 3, "1"),
            ],
        ),
        pod("p", 100, "1").scheduler_name("my-sched").build(),
    );
    assert!(out.status.is_success(), "{:?}", out.status);
    out.assert_preempted("n1", &["p1", "p2"]);
    // Victims get DisruptionTarget before deletion.
    let patches = status_patches(&out.api);
    let disrupted: Vec<&str> = patches
        .iter()
        .filter(|(_, c, _)| {
            c.as_ref().is_some_and(|c| {
                c.type_ == "DisruptionTarget"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
                    && c.message.as_deref()
                        == Some("my-sched: preempting to accommodate a higher priority pod")
            })
        })
        .map(|(k, _, _)| k.as_str())
        .collect();
    assert_eq!(disrupted.len(), 2);
}

/// 1.37's `Preempt` says where it placed the pod (in the FailedScheduling message and the
/// PodScheduled condition, after "preemption: "); 1.36's said nothing.
#[test]
fn a_successful_preemption_names_the_placement_from_1_37() {
    use crate::emulation::Minor;
    let out = |minor| {
        preempt(
            Cluster {
                minor: Some(minor),
                ..Cluster::of(
                    &["n1", "n2"],
                    vec![on("n1", "low", 1, "2"), on("n2", "same", 100, "2")],
                )
            },
            preemptor("1"),
        )
    };
    let new = out(Minor::V1_37);
    new.assert_preempted("n1", &["low"]);
    assert_eq!(
        new.message,
        "0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for pod on node n1, preempting 1 victims"
    );
    let old = out(Minor::V1_36);
    old.assert_preempted("n1", &["low"]);
    assert_eq!(old.message, "0/2 nodes are available: 2 Insufficient cpu.");
}

#[test]
fn higher_priority_pods_are_never_victims() {
    // Only the 1-cpu low pod may go; it is enough.
    let out = preempt(
        Cluster::of(
            &["n1"],
            vec![on("n1", "low", 1, "1"), on("n1", "higher", 500, "1")],
        ),
        preemptor("1"),
    );
    out.assert_preempted("n1", &["low"]);
}

#[test]
fn pdb_violations_are_avoided_where_possible() {
    // Same victims' priority on both nodes; n1's victim is protected by a PDB allowing none.
    let out = preempt(
        Cluster {
            pdbs: vec![pdb("db", "db", 0)],
            ..Cluster::of(
                &["n1", "n2"],
                vec![db_on("n1", "a", "2"), on("n2", "b", 1, "2")],
            )
        },
        preemptor("1"),
    );
    out.assert_preempted("n2", &["b"]);
}

#[test]
fn pdb_violating_victims_when_nothing_else_helps() {
    // Two db pods on one node, the PDB allows one disruption: both must go, one violates.
    let out = preempt(
        Cluster {
            pdbs: vec![pdb("db", "db", 1)],
            ..Cluster::of(&["n1"], vec![db_on("n1", "a", "1"), db_on("n1", "b", "1")])
        },
        preemptor("2"),
    );
    out.assert_preempted("n1", &["a", "b"]);
}

#[test]
fn reprieves_pdb_violators_before_others() {
    // n1: a (PDB, allows 0) and b (no PDB), same priority, 1 cpu each; the pod needs 1 cpu.
    // Violating `a` is reprieved first, so `b` is the victim.
    let out = preempt(
        Cluster {
            pdbs: vec![pdb("db", "db", 0)],
            ..Cluster::of(&["n1"], vec![db_on("n1", "a", "1"), on("n1", "b", 1, "1")])
        },
        preemptor("1"),
    );
    assert_eq!(out.deleted(), ["default/b"]);
}

#[test]
fn candidate_with_lowest_highest_victim_priority() {
    let out = preempt(
        Cluster::of(
            &["n1", "n2"],
            vec![on("n1", "five", 5, "2"), on("n2", "three", 3, "2")],
        ),
        preemptor("1"),
    );
    out.assert_preempted("n2", &["three"]);
}

#[test]
fn candidate_with_smallest_priority_sum_then_fewest_victims() {
    // n1: two victims of priority 1; n2: one victim of priority 1 (and a reprieved-free node).
    let out = preempt(
        Cluster::of(
            &["n1", "n2"],
            vec![
                on("n1", "a", 1, "1"),
                on("n1", "b", 1, "1"),
                on("n2", "c", 1, "2"),
            ],
        ),
        preemptor("2"),
    );
    out.assert_preempted("n2", &["c"]);
}

#[test]
fn extenders_narrow_the_candidates() {
    use crate::framework::extender::tests::FakeExtender;
    let cluster = |ext: FakeExtender| Cluster {
        extenders: vec![Arc::new(ext)],
        ..Cluster::of(
            &["n1", "n2"],
            vec![
                on("n1", "a", 1, "1"),
                on("n1", "b", 1, "1"),
                on("n2", "c", 1, "2"),
            ],
        )
    };
    // Alone, n2 (one victim) wins; the extender allows only n1.
    let mut ext = FakeExtender::new("http://ext");
    ext.preempt = Some(Ok(vec!["n1".into()]));
    preempt(cluster(ext), preemptor("2")).assert_preempted("n1", &["a", "b"]);
    // It allows none: no candidate.
    let mut ext = FakeExtender::new("http://ext");
    ext.preempt = Some(Ok(vec![]));
    let out = preempt(cluster(ext), preemptor("2"));
    assert_eq!(
        (out.status.code(), out.status.message()),
        (
            Code::Unschedulable,
            "preemption: no candidate node for preemption".into()
        )
    );
    assert!(out.deleted().is_empty());
    // It fails: an error, unless it is ignorable.
    let mut ext = FakeExtender::new("http://ext");
    ext.preempt = Some(Err("extender down".into()));
    let out = preempt(cluster(ext), preemptor("2"));
    assert_eq!(
        (out.status.code(), out.status.message()),
        (Code::Error, "preemption: extender down".into())
    );
    let mut ext = FakeExtender::new("http://ext");
    ext.preempt = Some(Err("extender down".into()));
    ext.ignorable = true;
    preempt(cluster(ext), preemptor("2")).assert_preempted("n2", &["c"]);
}

#[test]
fn candidate_with_latest_start_time() {
    let out = preempt(
        Cluster::of(
            &["n1", "n2"],
            vec![
                started(on("n1", "old", 1, "2"), "2024-01-01T00:00:00Z"),
                started(on("n2", "new", 1, "2"), "2025-01-01T00:00:00Z"),
            ],
        ),
        preemptor("1"),
    );
    assert_eq!(out.nominated(), Some("n2"));
}

#[test]
fn higher_priority_nominated_pods_keep_their_room() {
    // A pod of priority 200 is nominated to n1 and takes its 2 cpu: preempting there cannot
    // help, so n2 is chosen.
    let out = preempt(
        Cluster {
            nominated: vec![pod("big", 200, "2").nominated_node("n1").build()],
            ..Cluster::of(
                &["n1", "n2"],
                vec![
                    on("n1", "low1", 1, "2"),
                    started(on("n2", "low2", 1, "2"), "2020-01-01T00:00:00Z"),
                ],
            )
        },
        preemptor("1"),
    );
    out.assert_preempted("n2", &["low2"]);
}

#[test]
fn lower_priority_nominations_on_the_node_are_cleared() {
    let out = preempt(
        Cluster {
            nominated: vec![pod("small", 5, "1").nominated_node("n1").build()],
            ..Cluster::of(&["n1"], vec![on("n1", "low", 1, "2")])
        },
        preemptor("1"),
    );
    assert_eq!(out.nominated(), Some("n1"));
    let patches = status_patches(&out.api);
    let cleared: Vec<&str> = patches
        .iter()
        .filter(|(_, _, n)| n.as_deref() == Some(""))
        .map(|(k, _, _)| k.as_str())
        .collect();
    assert_eq!(cleared, ["default/small"]);
}

#[test]
fn min_candidate_nodes_stop_the_dry_run_from_the_offset() {
    // Four equal nodes but n3's victim is the least important: with every node a candidate,
    // n3 wins; with one candidate from offset 1, the dry run stops at n2.
    let cluster = |candidates| Cluster {
        candidates,
        ..Cluster::of(
            &["n1", "n2", "n3", "n4"],
            vec![
                on("n1", "v1", 5, "2"),
                on("n2", "v2", 5, "2"),
                on("n3", "v3", 1, "2"),
                on("n4", "v4", 5, "2"),
            ],
        )
    };
    let all = preempt(cluster(Some((100, 0, 1))), preemptor("1"));
    assert_eq!(all.nominated(), Some("n3"));
    let one = preempt(cluster(Some((0, 1, 1))), preemptor("1"));
    one.assert_preempted("n2", &["v2"]);
    // 25% of 4 nodes is one candidate too; from offset 3 the scan starts at n4.
    let pct = preempt(cluster(Some((25, 0, 3))), preemptor("1"));
    assert_eq!(pct.nominated(), Some("n4"));
}

#[test]
fn pre_enqueue_holds_the_preemptor_only_while_it_preempts() {
    let (h, api) = handle();
    let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h.clone());
    let p = pod("p", 100, "1").info();
    assert!(pl.pre_enqueue(&p).is_success());
    let victim = Arc::new(pod("low", 1, "1").node("n1").assigned());
    pl.evaluator.executor().actuate(&p, "n1", &[victim]);
    // PostFilter returned; the eviction waits in the dispatcher and the preemptor is held.
    let s = pl.pre_enqueue(&p);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), WAITING_FOR_PREEMPTION);
    assert!(api.keys::<Pod>(Verb::Delete, None).is_empty());
    h.dispatcher
        .run_queued(&(api.clone() as Arc<dyn ApiClient>));
    assert_eq!(api.keys::<Pod>(Verb::Delete, None), ["default/low"]);
    assert!(pl.pre_enqueue(&p).is_success());
}

#[test]
fn a_failed_eviction_ends_the_preemption_before_the_last_victim() {
    let (h, api) = handle();
    let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h.clone());
    let p = pod("p", 100, "1").info();
    let victims: Vec<_> = ["v1", "v2", "v3"]
        .iter()
        .map(|n| Arc::new(pod(n, 1, "1").node("n1").assigned()))
        .collect();
    api.fail::<Pod>(
        Verb::Delete,
        ApiError::Other("the API server is down".into()),
    );
    pl.evaluator.executor().actuate(&p, "n1", &victims);
    h.dispatcher
        .run_queued(&(api.clone() as Arc<dyn ApiClient>));
    // The preemptor's nomination first; the first two were tried (condition, then delete); the
    // last was not; the preemptor may try again.
    let patched: Vec<String> = status_patches(&api)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(patched, ["default/p", "default/v1", "default/v2"]);
    // Nothing was preempted: no event.
    assert!(api.events().is_empty());
    assert!(pl.pre_enqueue(&p).is_success());
    // A victim already being deleted is left alone: nothing to wait for.
    let terminating = Arc::new(pod("t", 1, "1").node("n1").terminating().assigned());
    pl.evaluator.executor().actuate(&p, "n1", &[terminating]);
    assert!(pl.pre_enqueue(&p).is_success());
}

/// Before any victim goes, the preemptor's nomination is written (other schedulers respect it
/// and must see it before the room); each victim gets upstream's `Preempted` event, no more pods
/// are deleted than were chosen.
#[test]
fn the_nomination_comes_first_and_each_victim_gets_a_preempted_event() {
    let (h, api) = handle();
    let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h.clone());
    let p = pod("p", 100, "1").info();
    let victims: Vec<_> = ["v1", "v2"]
        .iter()
        .map(|n| Arc::new(pod(n, 1, "1").node("n1").assigned()))
        .collect();
    pl.evaluator.executor().actuate(&p, "n1", &victims);
    h.dispatcher
        .run_queued(&(api.clone() as Arc<dyn ApiClient>));
    let patches = status_patches(&api);
    let (first, condition, nominated) = &patches[0];
    assert_eq!(first, "default/p");
    assert!(condition.is_none());
    assert_eq!(nominated.as_deref(), Some("n1"));
    let mut deleted = api.keys::<Pod>(Verb::Delete, None);
    deleted.sort();
    assert_eq!(deleted, ["default/v1", "default/v2"]);
    let events = api.events();
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(
            (e.type_, e.reason, e.action),
            ("Normal", "Preempted", "Preempting")
        );
        assert_eq!(e.note, format!("Preempted by pod {} on node n1", p.uid()));
        assert_eq!(
            e.related.as_ref().and_then(|r| r.name.as_deref()),
            Some("p")
        );
        assert_eq!(e.reporting_controller, p.scheduler_name());
    }
    let regarding: std::collections::BTreeSet<_> = events
        .iter()
        .filter_map(|e| e.regarding.name.clone())
        .collect();
    assert_eq!(regarding, ["v1".to_string(), "v2".to_string()].into());
    // A preemptor that shows its nomination already is not patched again.
    let (h, api) = handle();
    let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h.clone());
    let nominated = pod("q", 100, "1").nominated_node("n1").info();
    pl.evaluator.executor().actuate(
        &nominated,
        "n1",
        &[Arc::new(pod("v3", 1, "1").node("n1").assigned())],
    );
    h.dispatcher
        .run_queued(&(api.clone() as Arc<dyn ApiClient>));
    let patched: Vec<String> = status_patches(&api)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(patched, ["default/v3"]);
}

#[test]
fn num_candidates_and_pick() {
    let (h, _) = handle();
    let args = |p, a| DefaultPreemptionArgs {
        min_candidate_nodes_percentage: Some(p),
        min_candidate_nodes_absolute: Some(a),
    };
    let pl = DefaultPreemption::new(&args(10, 100), h.clone());
    assert_eq!(pl.num_candidates(50), 50);
    assert_eq!(pl.num_candidates(5000), 500);
    let pl = DefaultPreemption::new(&args(40, 0), h.clone()).with_offset(|_| 0);
    assert_eq!(pl.num_candidates(10), 4);
    assert_eq!(pl.num_candidates(1), 0);
    let pl = DefaultPreemption::new(&args(0, 3), h);
    assert_eq!(pl.num_candidates(10), 3);

    let c = |name: &str, prios: &[i32], pdb: usize| Candidate {
        name: name.into(),
        victims: prios
            .iter()
            .enumerate()
            .map(|(i, p)| Arc::new(pod(&format!("{name}-{i}"), *p, "1").assigned()))
            .collect(),
        num_pdb_violations: pdb,
    };
    // Fewest PDB violations wins over everything else.
    assert_eq!(
        pick_one_node_for_preemption(&[c("a", &[1], 1), c("b", &[50, 40], 0)]),
        1
    );
    // Then the lowest highest priority, then the smallest sum, then fewest victims.
    assert_eq!(
        pick_one_node_for_preemption(&[c("a", &[10, 1], 0), c("b", &[9, 8, 7], 0)]),
        1
    );
    assert_eq!(
        pick_one_node_for_preemption(&[c("a", &[10, 5], 0), c("b", &[10, 1], 0)]),
        1
    );
    assert_eq!(
        pick_one_node_for_preemption(&[c("a", &[10, 5], 0), c("b", &[10], 0), c("c", &[10], 0)]),
        1
    );
    let unit = |p: crate::framework::types::AssignedPod| super::victims::Victim {
        priority: p.priority(),
        pods: vec![("n".into(), Arc::new(p))],
        grouped: false,
    };
    let (a, b) = (
        unit(pod("a", 2, "1").assigned()),
        unit(pod("b", 1, "1").assigned()),
    );
    assert_eq!(
        super::victims::more_important(&a, &b, Timestamp::now()),
        std::cmp::Ordering::Less
    );
}

/// Upstream's hint: a pod deletion is registered, and always QueueSkip (the pod's other rejecting
/// plugins decide; the gate lifts when the preemption is over).
#[test]
fn a_pod_deletion_is_registered_and_skipped() {
    use crate::framework::testing::hints::{assigned_obj, event, hint, registered};
    use crate::framework::types::{ActionType, EventResource, QueueingHint};
    let (h, _) = handle();
    let pl = DefaultPreemption::new(&DefaultPreemptionArgs::default(), h);
    assert_eq!(registered(&pl), ["Pod/Delete"]);
    let victim = assigned_obj(pod("v", 0, "1").node("n").build());
    let deleted = event(EventResource::AssignedPod, ActionType::DELETE);
    let p = pod("p", 100, "1").info();
    assert_eq!(
        hint(&pl, deleted, &p, Some(victim), None),
        Some(QueueingHint::QueueSkip)
    );
}
