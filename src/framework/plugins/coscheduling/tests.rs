//! Coscheduling's tests: queue order, PreFilter, Permit's quorum, rejections, and the status
//! loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::controller::*;
use super::plugin::*;
use super::*;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::api::{PodGroup, PodGroupSpec};
use crate::framework::api_calls::{ApiClient, ApiError, RecordingApi, Verb};
use crate::framework::background::{BackgroundTask, TaskContext};
use crate::framework::interface::{
    Code, CycleState, NodeToStatus, PermitPlugin, PostFilterPlugin, PreFilterPlugin,
    QueueSortPlugin, ReservePlugin, Status,
};
use crate::framework::listers::{POD_GROUP_MEMBERS, POD_GROUPS};
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

fn phase(mut pod: Pod, phase: &str) -> Pod {
    pod.status.get_or_insert_with(Default::default).phase = Some(phase.into());
    pod
}

struct Env {
    plugin: Coscheduling,
    handle: Handle,
    api: Arc<RecordingApi>,
}

fn env(groups: &[PodGroup], args: CoschedulingArgs) -> Env {
    let (handle, api) = handle();
    for g in groups {
        handle.listers.store(&POD_GROUPS).apply(g.clone());
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

#[test]
fn pre_filter_cases() {
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
    // Too few members: two of three (a finished one does not count).
    let members = e.handle.listers.store(&POD_GROUP_MEMBERS);
    members.apply(member("p1", "pg").build());
    members.apply(member("p2", "pg").build());
    members.apply(phase(member("old", "pg").build(), "Succeeded"));
    let s = pre_filter(&e, member("p1", "pg"), &snap);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "pre-filter pod p1 cannot find enough sibling pods, current pods number: 2, minMember of group: 3"
    );
    // Enough members.
    members.apply(member("p3", "pg").build());
    assert!(pre_filter(&e, member("p1", "pg"), &snap).is_success());
    // minResources beyond the cluster.
    members.apply(member("b1", "big").build());
    members.apply(member("b2", "big").build());
    let s = pre_filter(&e, member("b1", "big"), &snap);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "resource gap: map[cpu:4000m]");
    // The cycle wrote nothing: statuses are the loop's.
    assert!(written(&e).is_empty());
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
    assert_eq!(e.plugin.progress.started("ns/pg"), None);
    let (s, wait) = e
        .plugin
        .permit(&mut state, &member("p1", "pg").info(), "n1");
    assert_eq!((s.code(), wait), (Code::Wait, Duration::from_secs(7)));
    // The group's scheduling started: noted for the status loop.
    let started = e.plugin.progress.started("ns/pg");
    assert!(started.is_some());
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
    assert_eq!(
        e.plugin.progress.started("ns/pg"),
        started,
        "the first Permit counts"
    );
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

/// `n` members of group `pg`, in `phase`, bound to n1 when `bound`, owned by Job `job`.
fn members(n: usize, phase_of: &str, bound: bool) -> Vec<Arc<Pod>> {
    (0..n)
        .map(|i| {
            let mut b = member(&format!("m{i}"), "pg").controller("batch/v1", "Job", "job");
            if bound {
                b = b.node("n1");
            }
            Arc::new(phase(b.build(), phase_of))
        })
        .collect()
}

/// The PodGroup statuses written so far: `namespace/name` and the status.
fn written(e: &Env) -> Vec<(String, crate::api::PodGroupStatus)> {
    e.api
        .bodies::<PodGroup, PodGroup>(Verb::Replace, Some("status"))
        .into_iter()
        .map(|pg| {
            let key = format!(
                "{}/{}",
                pg.metadata.namespace.as_deref().unwrap_or_default(),
                pg.metadata.name.as_deref().unwrap_or_default()
            );
            (key, pg.status.unwrap_or_default())
        })
        .collect()
}

fn phase_of(s: &crate::api::PodGroupStatus) -> &str {
    s.phase.as_deref().unwrap_or_default()
}

#[test]
fn desired_status_follows_the_members() {
    let pg = pod_group("pg", 3, 1);
    let t = Timestamp::from_second(1000).unwrap();
    let status = |members: &[Arc<Pod>], since| desired_status(&pg, members, since);
    let mixed = |phases: &[&str]| -> Vec<Arc<Pod>> {
        phases
            .iter()
            .enumerate()
            .map(|(i, p)| Arc::new(phase(member(&format!("m{i}"), "pg").node("n1").build(), p)))
            .collect()
    };
    // Fewer members than minMember.
    let s = status(&members(2, "Pending", false), None);
    assert_eq!(phase_of(&s), PHASE_PENDING);
    assert_eq!(
        (s.running, s.succeeded, s.failed),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(
        (s.schedule_start_time.as_ref(), s.occupied_by.as_deref()),
        (None, None)
    );
    // Enough members, none at Permit yet: the owner is recorded.
    let s = status(&members(3, "Pending", false), None);
    assert_eq!(phase_of(&s), PHASE_PRE_SCHEDULING);
    assert_eq!(s.occupied_by.as_deref(), Some("ns/job"));
    // A member reached Permit.
    let s = status(&members(3, "Pending", false), Some(t));
    assert_eq!(phase_of(&s), PHASE_SCHEDULING);
    assert_eq!(s.schedule_start_time, Some(Time(t)));
    // minMember bound, then running (or done), then one failed, then all succeeded.
    assert_eq!(
        phase_of(&status(&members(3, "Pending", true), Some(t))),
        PHASE_SCHEDULED
    );
    let s = status(&members(3, "Running", true), Some(t));
    assert_eq!((phase_of(&s), s.running), (PHASE_RUNNING, Some(3)));
    let s = status(&mixed(&["Running", "Running", "Succeeded"]), Some(t));
    assert_eq!((phase_of(&s), s.succeeded), (PHASE_RUNNING, Some(1)));
    let s = status(&mixed(&["Running", "Failed", "Succeeded"]), Some(t));
    assert_eq!((phase_of(&s), s.failed), (PHASE_FAILED, Some(1)));
    assert_eq!(
        phase_of(&status(&members(3, "Succeeded", true), None)),
        PHASE_FINISHED
    );
    // A running group that lost members waits for them again.
    assert_eq!(
        phase_of(&status(&members(2, "Running", true), Some(t))),
        PHASE_PENDING
    );
    // The first start time stays; final phases stay whatever the members do.
    let mut started = pod_group("pg", 3, 1);
    started.status = Some(crate::api::PodGroupStatus {
        schedule_start_time: Some(Time(Timestamp::from_second(5).unwrap())),
        ..Default::default()
    });
    let s = desired_status(&started, &members(3, "Pending", false), Some(t));
    assert_eq!(
        s.schedule_start_time,
        Some(Time(Timestamp::from_second(5).unwrap()))
    );
    let mut done = pod_group("pg", 3, 1);
    done.status = Some(status(&members(3, "Succeeded", true), None));
    let finished = done.status.clone();
    assert_eq!(Some(desired_status(&done, &[], None)), finished);
}

/// A status loop for profile `default-scheduler` over `e`'s listers, with the API it writes to.
fn controller(e: &Env) -> (Arc<PodGroupController>, Arc<dyn ApiClient>) {
    let progress = e.plugin.progress.clone();
    let c = PodGroupController::new("default-scheduler", e.handle.listers.clone(), progress);
    (Arc::new(c), e.api.clone())
}

/// Group `pg` (minMember 1) with one pending member of `default-scheduler`, and its status loop.
fn one_member_group() -> (Env, Arc<PodGroupController>, Arc<dyn ApiClient>) {
    let e = env(&[pod_group("pg", 1, 1)], args());
    let (c, api) = controller(&e);
    e.handle
        .listers
        .store(&POD_GROUP_MEMBERS)
        .apply(member("a", "pg").build());
    (e, c, api)
}

fn stored_phase(e: &Env, name: &str) -> Option<String> {
    e.handle
        .listers
        .store(&POD_GROUPS)
        .get("ns", name)
        .and_then(|g| g.status.clone())
        .and_then(|s| s.phase)
}

#[tokio::test]
async fn the_loop_writes_what_changed_in_its_own_groups() {
    let e = env(&[pod_group("pg", 2, 1), pod_group("theirs", 1, 1)], args());
    let (c, api) = controller(&e);
    let listers = &e.handle.listers;
    listers
        .store(&POD_GROUP_MEMBERS)
        .apply(member("a", "pg").build());
    // Another scheduler's group is left alone.
    listers
        .store(&POD_GROUP_MEMBERS)
        .apply(member("t", "theirs").scheduler_name("other").build());
    assert_eq!(
        c.pass(&api).await,
        Pass {
            written: 1,
            failed: 0
        }
    );
    assert_eq!(stored_phase(&e, "pg").as_deref(), Some(PHASE_PENDING));
    assert_eq!(stored_phase(&e, "theirs"), None);
    // Written through to the store: nothing more to do until something changes.
    assert_eq!(c.pass(&api).await, Pass::default());
    listers
        .store(&POD_GROUP_MEMBERS)
        .apply(member("b", "pg").build());
    e.plugin.progress.scheduling("ns/pg");
    assert_eq!(c.pass(&api).await.written, 1);
    assert_eq!(stored_phase(&e, "pg").as_deref(), Some(PHASE_SCHEDULING));
    let written: Vec<String> = written(&e)
        .iter()
        .map(|(k, s)| format!("{k} {}", phase_of(s)))
        .collect();
    assert_eq!(written, ["ns/pg Pending", "ns/pg Scheduling"]);
    // Each write carried the resourceVersion it was computed from (the recorder's next one is
    // stored).
    let rv = listers
        .store(&POD_GROUPS)
        .get("ns", "pg")
        .and_then(|g| g.metadata.resource_version.clone());
    assert_eq!(rv.as_deref(), Some("2"));
}

#[tokio::test]
async fn a_conflict_waits_for_the_next_version_and_errors_are_retried() {
    let (e, c, api) = one_member_group();
    e.api
        .fail_once::<PodGroup>(Verb::Replace, ApiError::Conflict("modified".into()));
    assert_eq!(c.pass(&api).await, Pass::default());
    e.api
        .fail_once::<PodGroup>(Verb::Replace, ApiError::Other("unavailable".into()));
    assert_eq!(
        c.pass(&api).await,
        Pass {
            written: 0,
            failed: 1
        }
    );
    assert_eq!(c.pass(&api).await.written, 1);
    assert_eq!(
        stored_phase(&e, "pg").as_deref(),
        Some(PHASE_PRE_SCHEDULING)
    );
}

#[tokio::test]
async fn a_standby_writes_nothing_until_it_leads() {
    let (e, c, api) = one_member_group();
    let (lead, leading) = watch::channel(false);
    let task = tokio::spawn(c.run(TaskContext { api, leading }));
    tokio::time::sleep(PASS_INTERVAL * 2).await;
    assert!(written(&e).is_empty());
    lead.send_replace(true);
    let mut phases = Vec::new();
    for _ in 0..100 {
        phases = written(&e)
            .iter()
            .map(|(_, s)| phase_of(s).to_string())
            .collect();
        if !phases.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(phases, [PHASE_PRE_SCHEDULING]);
    // Members change: the loop wakes and writes the next status.
    e.handle
        .listers
        .store(&POD_GROUP_MEMBERS)
        .apply(phase(member("a", "pg").node("n1").build(), "Running"));
    for _ in 0..100 {
        if written(&e).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stored_phase(&e, "pg").as_deref(), Some(PHASE_RUNNING));
    task.abort();
}
