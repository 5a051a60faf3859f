use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use serde_json::json;

use super::*;
use crate::framework::interface::{Code, EnqueueExtensions};
use crate::framework::testing::handle;
use crate::framework::testing::hints::{event, hint, pod_obj};
use crate::framework::types::{ActionType, EventObject, EventResource, QueueingHint};

fn member(name: &str, group: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"schedulingGroup": {"podGroupName": group}, "nodeName": node,
                 "containers": [{"name": "c", "image": "i"}]},
    }))
    .expect("pod")
}

fn gang(name: &str, min_count: i32) -> PodGroup {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }))
    .expect("pod group")
}

fn plugin() -> GangScheduling {
    let (h, _) = handle();
    GangScheduling::new(h)
}

fn info(pod: Pod) -> PodInfo {
    PodInfo::new(Arc::new(pod))
}

#[test]
fn pre_enqueue_waits_for_the_pod_group_and_min_count_members() {
    let p = plugin();
    let lone: Pod =
        serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "ns"}})).expect("pod");
    assert!(p.pre_enqueue(&info(lone)).is_success());

    let a = member("a", "g", None);
    let s = p.pre_enqueue(&info(a.clone()));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "waiting for pods's pod group \"g\" to appear in scheduling queue"
    );

    p.listers().store(&WORKLOAD_POD_GROUPS).apply(gang("g", 2));
    p.members().apply(a.clone());
    let s = p.pre_enqueue(&info(a.clone()));
    assert_eq!(
        s.message(),
        "waiting for minCount pods from a gang to appear in scheduling queue"
    );
    // A second member (bound already counts too): the quorum of pods is there.
    p.members().apply(member("b", "g", Some("n1")));
    assert!(p.pre_enqueue(&info(a)).is_success());

    // A basic group does not hold its pods.
    let basic: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }))
    .expect("pod group");
    p.listers().store(&WORKLOAD_POD_GROUPS).apply(basic);
    assert!(p.pre_enqueue(&info(member("c", "b", None))).is_success());
}

#[test]
fn permit_waits_until_min_count_are_scheduled() {
    let p = plugin();
    p.listers().store(&WORKLOAD_POD_GROUPS).apply(gang("g", 2));
    let a = info(member("a", "g", None));
    p.members().apply(member("a", "g", None));
    p.members().apply(member("b", "g", None));
    let (s, wait) = p.permit(&mut CycleState::new(), &a, "n1");
    assert_eq!(s.code(), Code::Wait);
    assert_eq!(
        s.message(),
        "waiting for minCount pods from a gang to be scheduled"
    );
    assert_eq!(wait, PERMIT_TIMEOUT);
    // b bound: with a, the gang has its two.
    p.members().apply(member("b", "g", Some("n2")));
    let (s, _) = p.permit(&mut CycleState::new(), &a, "n1");
    assert!(s.is_success(), "{s:?}");
    // A pod outside any gang passes.
    let lone = info(
        serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "ns"}})).expect("pod"),
    );
    assert!(p.permit(&mut CycleState::new(), &lone, "n1").0.is_success());
}

#[test]
fn permit_in_a_group_cycle_takes_the_cycles_count() {
    let p = plugin();
    p.listers().store(&WORKLOAD_POD_GROUPS).apply(gang("g", 3));
    let a = info(member("a", "g", None));
    let placed = |scheduled| {
        let mut state = CycleState::new();
        state.write(
            PLACEMENT_PROGRESS,
            PlacementProgress {
                remaining: 0,
                scheduled,
            },
        );
        state
    };
    // The cycle placed all three: through at once, though no member is bound yet.
    assert!(p.permit(&mut placed(3), &a, "n1").0.is_success());
    assert_eq!(p.permit(&mut placed(2), &a, "n1").0.code(), Code::Wait);
}

#[test]
fn hints() {
    let p = plugin();
    let a = info(member("a", "g", None));
    let pending = |pod: Pod| Some(pod_obj(pod));
    let added = event(EventResource::UnscheduledPod, ActionType::ADD);
    assert_eq!(
        hint(&p, added, &a, None, pending(member("b", "g", None))),
        Some(QueueingHint::Queue)
    );
    assert_eq!(
        hint(&p, added, &a, None, pending(member("c", "other", None))),
        Some(QueueingHint::QueueSkip)
    );
    let group = |min: i32| Some(EventObject::new(Arc::new(gang("g", min))));
    let created = event(EventResource::WorkloadPodGroup, ActionType::ADD);
    assert_eq!(
        hint(&p, created, &a, None, group(3)),
        Some(QueueingHint::Queue)
    );
    let updated = event(EventResource::WorkloadPodGroup, ActionType::UPDATE);
    assert_eq!(
        hint(&p, updated, &a, group(3), group(2)),
        Some(QueueingHint::Queue)
    );
    assert_eq!(
        hint(&p, updated, &a, group(2), group(3)),
        Some(QueueingHint::QueueSkip)
    );
    assert!(!p.events_to_register().is_empty());
}

#[test]
fn placement_feasible_waits_for_min_count_and_stops_when_it_cannot_be_met() {
    let p = plugin();
    let g = gang("g", 8);
    let at = |remaining, scheduled| {
        p.placement_feasible(
            &g,
            PlacementProgress {
                remaining,
                scheduled,
            },
        )
    };
    let s = at(8, 0);
    assert_eq!(s.code(), Code::Wait);
    assert_eq!(
        s.message(),
        "minCount (8) is not yet satisfied: 0 scheduled, 8 remaining"
    );
    let s = at(3, 4);
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "minCount (8) cannot be satisfied: 4 scheduled, 3 remaining"
    );
    assert!(at(0, 8).is_success());
    // A basic group (no gang policy) needs one member.
    let basic: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }))
    .expect("pod group");
    let s = p.placement_feasible(
        &basic,
        PlacementProgress {
            remaining: 1,
            scheduled: 0,
        },
    );
    assert_eq!(s.code(), Code::Wait);
}
