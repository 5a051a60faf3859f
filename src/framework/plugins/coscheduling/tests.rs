//! Coscheduling's tests: queue order, PreFilter, Permit's quorum, rejections, statuses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

use super::plugin::*;
use super::status::*;
use super::*;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::api::{PodGroup, PodGroupSpec};
use crate::framework::interface::{
    Code, CycleState, NodeToStatus, PermitPlugin, PostFilterPlugin, PreFilterPlugin,
    QueueSortPlugin, ReservePlugin, Status,
};
use crate::framework::plugins::names;
use crate::framework::registry::Handle;
use crate::framework::testing::{NodeBuilder, PodBuilder, handle};
use crate::framework::types::{QueuedPodInfo, Snapshot};
use crate::framework::waiting_pods::WaitingPod;

fn pod_group(name: &str, min: i32, created: i64) -> PodGroup {
    PodGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
            ..Default::default()
        },
        spec: PodGroupSpec {
            min_member: Some(min),
            ..Default::default()
        },
        status: None,
    }
}

fn member(name: &str, group: &str) -> PodBuilder {
    PodBuilder::new(name)
        .namespace("ns")
        .label(POD_GROUP_LABEL, group)
}

struct Env {
    plugin: Coscheduling,
    handle: Handle,
    api: Arc<crate::framework::registry::RecordingApi>,
}

fn env(groups: &[PodGroup], args: CoschedulingArgs) -> Env {
    let (handle, api) = handle();
    for g in groups {
        handle.listers.pod_groups.apply(g.clone());
    }
    Env {
        plugin: Coscheduling::new(&args, handle.clone()),
        handle,
        api,
    }
}

fn args() -> CoschedulingArgs {
    CoschedulingArgs {
        permit_waiting_time_seconds: Some(10),
        ..Default::default()
    }
}

fn queued(p: PodBuilder) -> QueuedPodInfo {
    QueuedPodInfo::new(p.arc_info(), tokio::time::Instant::now().into_std())
}

#[test]
fn queue_sort_priority_then_group_time_then_group() {
    let e = env(
        &[pod_group("old", 3, 100), pod_group("new", 3, 200)],
        args(),
    );
    let less = |a: PodBuilder, b: PodBuilder| e.plugin.less(&queued(a), &queued(b));
    // Priority first.
    assert!(less(member("z", "new").priority(10), member("a", "old")));
    // Older group first.
    assert!(less(member("z", "old"), member("a", "new")));
    assert!(!less(member("a", "new"), member("z", "old")));
    // Same creation time: by group, then pod; members stay together.
    let e2 = env(&[pod_group("g1", 2, 100), pod_group("g2", 2, 100)], args());
    let less2 = |a: PodBuilder, b: PodBuilder| e2.plugin.less(&queued(a), &queued(b));
    assert!(less2(member("z", "g1"), member("a", "g2")));
    assert!(less2(member("a", "g1"), member("b", "g1")));
}

fn pre_filter(e: &Env, pod: PodBuilder, snapshot: &Snapshot) -> Status {
    let mut state = CycleState::new();
    e.plugin.pre_filter(&mut state, &pod.info(), snapshot).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_filter_cases() {
    let snap = Snapshot::from_objects(
        &[Arc::new(
            NodeBuilder::new("n1")
                .allocatable(&[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")])
                .build(),
        )],
        &[],
    );
    let mut big = pod_group("big", 2, 1);
    big.spec.min_resources = Some(
        [("cpu".to_string(), Quantity("8".into()))]
            .into_iter()
            .collect(),
    );
    let e = env(&[pod_group("pg", 3, 1), big], args());
    // No group: nothing to check.
    assert!(pre_filter(&e, PodBuilder::new("solo"), &snap).is_success());
    // Missing PodGroup.
    let s = pre_filter(&e, member("p", "missing"), &snap);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "PodGroup not found");
    // Too few members.
    *e.api.pods.lock() = vec![member("p1", "pg").build(), member("p2", "pg").build()];
    let s = pre_filter(&e, member("p1", "pg"), &snap);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "pre-filter pod p1 cannot find enough sibling pods, current pods number: 2, minMember of group: 3"
    );
    // Enough members.
    e.api.pods.lock().push(member("p3", "pg").build());
    assert!(pre_filter(&e, member("p1", "pg"), &snap).is_success());
    // minResources beyond the cluster.
    *e.api.pods.lock() = vec![member("b1", "big").build(), member("b2", "big").build()];
    let s = pre_filter(&e, member("b1", "big"), &snap);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "resource gap: map[cpu:4000m]");
    // Status: Pending, then PreScheduling, written through the API.
    for _ in 0..50 {
        if e.api.pod_group_statuses.lock().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let phases: Vec<(String, Option<String>)> = e
        .api
        .pod_group_statuses
        .lock()
        .iter()
        .map(|(k, s)| (k.clone(), s.phase.clone()))
        .collect();
    assert!(
        phases.contains(&("ns/pg".into(), Some(PHASE_PENDING.into()))),
        "{phases:?}"
    );
    assert!(
        phases.contains(&("ns/pg".into(), Some(PHASE_PRE_SCHEDULING.into()))),
        "{phases:?}"
    );
}

fn waiting(e: &Env, pod: PodBuilder) -> Arc<WaitingPod> {
    let wp = Arc::new(WaitingPod::new(
        pod.arc_info(),
        [(names::COSCHEDULING.to_string(), Duration::from_secs(10))]
            .into_iter()
            .collect(),
    ));
    e.handle.waiting_pods.add(wp.clone());
    wp
}

fn snapshot_with(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Arc<Snapshot> {
    let nodes = [Arc::new(NodeBuilder::new("n1").build())];
    let pods: Vec<_> = pods.into_iter().map(Arc::new).collect();
    Arc::new(Snapshot::from_objects(&nodes, &pods))
}

#[tokio::test]
async fn permit_waits_for_the_quorum_then_allows_all() {
    let mut pg = pod_group("pg", 3, 1);
    pg.spec.schedule_timeout_seconds = Some(7);
    let e = env(&[pg], args());
    let mut state = CycleState::new();
    // No group: allowed.
    let (s, _) = e
        .plugin
        .permit(&mut state, &PodBuilder::new("solo").info(), "n1");
    assert!(s.is_success());
    // Missing group: rejected.
    let (s, _) = e
        .plugin
        .permit(&mut state, &member("x", "nope").info(), "n1");
    assert_eq!(s.message(), "PodGroup not found");
    // First member: nothing assigned yet -> wait, with the group's timeout.
    let (s, wait) = e
        .plugin
        .permit(&mut state, &member("p1", "pg").info(), "n1");
    assert_eq!((s.code(), wait), (Code::Wait, Duration::from_secs(7)));
    let w1 = waiting(&e, member("p1", "pg").node("n1"));
    // Second: one assigned (+1) = 2 < 3 -> wait.
    e.handle
        .snapshot
        .store(snapshot_with(vec![member("p1", "pg").node("n1").build()]));
    let (s, _) = e
        .plugin
        .permit(&mut state, &member("p2", "pg").info(), "n1");
    assert_eq!(s.code(), Code::Wait);
    let w2 = waiting(&e, member("p2", "pg").node("n1"));
    let other = waiting(&e, member("o", "other").node("n1"));
    // Third: 2 assigned + 1 = 3 -> allowed, and the waiting members too (not other groups').
    e.handle.snapshot.store(snapshot_with(vec![
        member("p1", "pg").node("n1").build(),
        member("p2", "pg").node("n1").build(),
    ]));
    let (s, _) = e
        .plugin
        .permit(&mut state, &member("p3", "pg").info(), "n1");
    assert!(s.is_success());
    assert!(w1.wait().await.is_success());
    assert!(w2.wait().await.is_success());
    assert_eq!(
        other.pending_plugins(),
        vec![names::COSCHEDULING.to_string()]
    );
}

#[tokio::test]
async fn post_filter_rejects_the_waiting_group() {
    let e = env(&[pod_group("pg", 3, 1), pod_group("huge", 20, 1)], args());
    let w1 = waiting(&e, member("p1", "pg").node("n1"));
    let other = waiting(&e, member("o", "other").node("n1"));
    let snap = snapshot_with(vec![member("p1", "pg").node("n1").build()]);
    let (_, s) = e.plugin.post_filter(
        &CycleState::new(),
        &member("p3", "pg").info(),
        &snap,
        &NodeToStatus::new(),
    );
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "PodGroup ns/pg gets rejected due to Pod p3 is unschedulable even after PostFilter"
    );
    let r = w1.wait().await;
    assert_eq!(r.message(), "optimistic rejection in PostFilter");
    assert_eq!(r.plugin(), Some(names::COSCHEDULING));
    assert!(other.pending_plugins().len() == 1);

    // Quorum already reached, or a gap of at most 10%: no group rejection.
    let snap = snapshot_with(
        (0..18)
            .map(|i| member(&format!("h{i}"), "huge").node("n1").build())
            .collect(),
    );
    let hw = waiting(&e, member("h18", "huge").node("n1"));
    let (_, s) = e.plugin.post_filter(
        &CycleState::new(),
        &member("h19", "huge").info(),
        &snap,
        &NodeToStatus::new(),
    );
    assert_eq!(
        (s.code(), s.message()),
        (Code::Unschedulable, String::new())
    );
    assert!(hw.pending_plugins().len() == 1);
    // No group at all.
    let (_, s) = e.plugin.post_filter(
        &CycleState::new(),
        &member("x", "nope").info(),
        &snap,
        &NodeToStatus::new(),
    );
    assert_eq!(s.message(), "can not find pod group");
}

#[tokio::test]
async fn unreserve_rejects_the_group_and_backoff_denies_it() {
    let e = env(&[pod_group("pg", 2, 1)], args());
    let w = waiting(&e, member("p1", "pg").node("n1"));
    e.plugin
        .unreserve(&mut CycleState::new(), &member("p2", "pg").info(), "n1");
    assert_eq!(w.wait().await.message(), "rejection in Unreserve");

    let e = env(
        &[pod_group("pg", 3, 1)],
        CoschedulingArgs {
            pod_group_backoff_seconds: Some(30),
            ..args()
        },
    );
    e.plugin
        .pg_mgr
        .backed_off
        .lock()
        .insert("ns/pg".into(), Instant::now() + Duration::from_secs(30));
    let s = pre_filter(&e, member("p1", "pg"), &Snapshot::new());
    assert_eq!(s.message(), "podGroup ns/pg failed recently");
}

#[test]
fn status_follows_the_pods() {
    let pg = pod_group("pg", 2, 1);
    let cache = Mutex::new(HashMap::new());
    let bound = |phase: &str| {
        let mut p = member("p", "pg").node("n1").build();
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    };
    let s = next_status(&cache, &pg, |s| s.phase = Some(PHASE_SCHEDULING.into())).unwrap();
    assert_eq!(s.phase.as_deref(), Some(PHASE_SCHEDULING));
    // Unchanged: nothing to write.
    assert!(next_status(&cache, &pg, |s| s.phase = Some(PHASE_SCHEDULING.into())).is_none());
    let api = Arc::new(crate::framework::registry::RecordingApi::default());
    let writer = StatusWriter::new(api.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let done = refresh_bound_status(&cache, &pg, &[bound("Pending"), bound("Pending")], &writer);
    assert!(!done);
    let done = refresh_bound_status(&cache, &pg, &[bound("Running"), bound("Running")], &writer);
    assert!(done);
    rt.block_on(async {
        for _ in 0..50 {
            if api.pod_group_statuses.lock().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let written: Vec<_> = api
        .pod_group_statuses
        .lock()
        .iter()
        .map(|(_, s)| (s.phase.clone().unwrap_or_default(), s.running))
        .collect();
    assert_eq!(
        written,
        vec![
            (PHASE_SCHEDULED.to_string(), Some(0)),
            (PHASE_RUNNING.to_string(), Some(2))
        ]
    );
}
