//! Table tests of the DynamicResources plugin: the extension points over plain values.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};

use super::plugin::{
    ERR_CANNOT_ALLOCATE, ERR_NOT_AVAILABLE, FINALIZER, NO_NEW_CLAIMS_TO_DEALLOCATE,
};
use super::testing::{claim, class, device, exact, node_slice};
use super::tracker::ClaimTracker;
use super::*;
use crate::framework::api_calls::{ApiClient, RecordingApi, Verb};
use crate::framework::args::decode;
use crate::framework::background::ApiDispatcher;
use crate::framework::interface::{
    Code, CycleState, FilterPlugin, NodeScore, NodeToStatus, PostFilterPlugin, PreBindPlugin,
    PreEnqueuePlugin, PreFilterPlugin, ReservePlugin, ScorePlugin,
};
use crate::framework::listers::{DEVICE_CLASSES, Listers, RESOURCE_CLAIMS, RESOURCE_SLICES};
use crate::framework::testing::NodeBuilder;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

/// Pod `name` (uid `name-uid`) using claim `claim` from a template (generated when `generated`).
fn pod_with_template_claim(name: &str, claim: &str, generated: bool) -> PodInfo {
    let statuses = if generated {
        json!([{"name": "gpu", "resourceClaimName": claim}])
    } else {
        json!([])
    };
    PodInfo::from_pod(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]},
            "status": {"resourceClaimStatuses": statuses}
        }))
        .expect("pod"),
    )
}

/// A claim generated for pod `pod` from a template.
fn generated_claim(name: &str, pod: &str, devices: Value) -> ResourceClaim {
    let mut c = (*claim(name, devices)).clone();
    c.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": format!("{pod}-uid"), "controller": true}))
            .expect("owner"),
    ]);
    c
}

struct Env {
    listers: Arc<Listers>,
    api: Arc<RecordingApi>,
    dispatcher: Arc<ApiDispatcher>,
    plugin: DynamicResources,
}

/// Node n1 with `gpus` devices (n2 has a slice without devices), class `gpu`, and `claims`.
fn env(gpus: usize, claims: Vec<ResourceClaim>) -> Env {
    let listers = Arc::new(Listers::default());
    let devices = (0..gpus)
        .map(|i| device(&format!("gpu-{i}"), json!({})))
        .collect();
    listers
        .store(&RESOURCE_SLICES)
        .apply((*node_slice("n1", devices)).clone());
    listers
        .store(&RESOURCE_SLICES)
        .apply((*node_slice("n2", vec![])).clone());
    listers
        .store(&DEVICE_CLASSES)
        .apply((*class("gpu", &[])).clone());
    let api = Arc::new(RecordingApi::default());
    for c in claims {
        api.store(&c);
        listers.store(&RESOURCE_CLAIMS).apply(c);
    }
    let dispatcher = Arc::new(ApiDispatcher::default());
    let plugin = DynamicResources::new(listers.clone(), api.clone(), dispatcher.clone(), None);
    Env {
        listers,
        api,
        dispatcher,
        plugin,
    }
}

fn node(name: &str) -> NodeInfo {
    NodeBuilder::new(name).info(vec![])
}

fn pre_filter(e: &Env, pod: &PodInfo) -> (CycleState, Code, String) {
    let mut cs = CycleState::new();
    let (_, s) = e.plugin.pre_filter(&mut cs, pod, &Snapshot::new());
    (cs, s.code(), s.message())
}

fn filter(e: &Env, cs: &CycleState, pod: &PodInfo, node_name: &str) -> (Code, String) {
    let s = e.plugin.filter(cs, pod, &node(node_name));
    (s.code(), s.message())
}

#[test]
fn pre_enqueue_waits_for_generated_claims() {
    let e = env(1, vec![generated_claim("p-gpu", "p", exact("gpu", 1))]);
    let s = e
        .plugin
        .pre_enqueue(&pod_with_template_claim("p", "p-gpu", false));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "pod \"ns/p\": ResourceClaim not created yet");
    assert!(
        e.plugin
            .pre_enqueue(&pod_with_template_claim("p", "p-gpu", true))
            .is_success()
    );
    // Pods without claims pass.
    assert!(
        e.plugin
            .pre_enqueue(&crate::framework::testing::PodBuilder::new("x").info())
            .is_success()
    );
}

#[test]
fn pods_without_claims_skip_and_have_nothing_to_deallocate() {
    let e = env(1, vec![]);
    let pod = crate::framework::testing::PodBuilder::new("x").info();
    let (cs, code, _) = pre_filter(&e, &pod);
    assert_eq!(code, Code::Skip);
    let (_, s) = e
        .plugin
        .post_filter(&cs, &pod, &Snapshot::new(), &NodeToStatus::new());
    // 1.37 rejects without a reason; 1.36 says there is nothing to deallocate.
    assert_eq!(s.code(), Code::Unschedulable);
    assert!(s.reasons().is_empty(), "{:?}", s.reasons());
    let (_, s) =
        DynamicResources::new(e.listers.clone(), e.api.clone(), e.dispatcher.clone(), None)
            .at(crate::emulation::Minor::V1_36)
            .post_filter(&cs, &pod, &Snapshot::new(), &NodeToStatus::new());
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(s.message(), NO_NEW_CLAIMS_TO_DEALLOCATE);
    // PreFilter never ran (an earlier one rejected the pod): upstream's "not found" error.
    let (_, s) = e.plugin.post_filter(
        &CycleState::new(),
        &pod,
        &Snapshot::new(),
        &NodeToStatus::new(),
    );
    assert_eq!(s.code(), Code::Error);
    assert_eq!(s.message(), "not found");
}

#[test]
fn pre_filter_refusals() {
    let cases = [
        (
            "missing device class",
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "nope", "count": 1}}]}),
            "request r: device class nope does not exist",
        ),
        (
            "missing device class of a subrequest",
            json!({"requests": [{"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "nope"}]}]}),
            "request r/s: device class nope does not exist",
        ),
    ];
    for (name, devices, want) in cases {
        let e = env(2, vec![generated_claim("p-gpu", "p", devices)]);
        let (_, code, msg) = pre_filter(&e, &pod_with_template_claim("p", "p-gpu", true));
        assert_eq!(
            (code, msg.as_str()),
            (Code::UnschedulableAndUnresolvable, want),
            "{name}"
        );
    }
}

#[test]
fn filter_finds_devices_per_node() {
    let e = env(1, vec![generated_claim("p-gpu", "p", exact("gpu", 1))]);
    let pod = pod_with_template_claim("p", "p-gpu", true);
    let (cs, code, _) = pre_filter(&e, &pod);
    assert_eq!(code, Code::Success);
    assert_eq!(filter(&e, &cs, &pod, "n1"), (Code::Success, String::new()));
    assert_eq!(
        filter(&e, &cs, &pod, "n2"),
        (
            Code::UnschedulableAndUnresolvable,
            ERR_CANNOT_ALLOCATE.to_string()
        )
    );
}

#[tokio::test]
async fn two_pods_in_flight_never_get_the_same_device() {
    let e = env(
        1,
        vec![
            generated_claim("a-gpu", "a", exact("gpu", 1)),
            generated_claim("b-gpu", "b", exact("gpu", 1)),
        ],
    );
    let a = pod_with_template_claim("a", "a-gpu", true);
    let b = pod_with_template_claim("b", "b-gpu", true);
    let (mut cs_a, _, _) = pre_filter(&e, &a);
    assert!(e.plugin.filter(&cs_a, &a, &node("n1")).is_success());
    assert!(e.plugin.reserve(&mut cs_a, &a, "n1").is_success());
    // b's cycle starts while a's allocation is in flight: the only device is taken.
    let (cs_b, code, _) = pre_filter(&e, &b);
    assert_eq!(code, Code::Success);
    assert_eq!(
        filter(&e, &cs_b, &b, "n1"),
        (
            Code::UnschedulableAndUnresolvable,
            ERR_CANNOT_ALLOCATE.to_string()
        )
    );
    // a is unreserved (its binding failed): the device is free again.
    e.plugin.unreserve(&mut cs_a, &a, "n1");
    let (cs_b, _, _) = pre_filter(&e, &b);
    assert!(e.plugin.filter(&cs_b, &b, &node("n1")).is_success());
    // a is reserved again and bound: PreBind writes the allocation, and the assumed claim keeps
    // the device taken before the informer sees the update.
    let (mut cs_a, _, _) = pre_filter(&e, &a);
    assert!(e.plugin.filter(&cs_a, &a, &node("n1")).is_success());
    assert!(e.plugin.reserve(&mut cs_a, &a, "n1").is_success());
    let s = e.plugin.pre_bind(&cs_a, &a, "n1").await;
    assert!(s.is_success(), "{s:?}");
    let (cs_b, _, _) = pre_filter(&e, &b);
    assert_eq!(
        filter(&e, &cs_b, &b, "n1").0,
        Code::UnschedulableAndUnresolvable
    );
}

#[tokio::test]
async fn pre_bind_writes_finalizer_allocation_and_reservation() {
    let e = env(2, vec![generated_claim("p-gpu", "p", exact("gpu", 2))]);
    let pod = pod_with_template_claim("p", "p-gpu", true);
    let (mut cs, _, _) = pre_filter(&e, &pod);
    assert!(e.plugin.filter(&cs, &pod, &node("n1")).is_success());
    assert!(e.plugin.reserve(&mut cs, &pod, "n1").is_success());
    // Claims to write: PreBind will act (the scheduler nominates the node first).
    assert!(e.plugin.pre_bind_pre_flight(&cs, &pod, "n1").is_success());
    assert!(e.plugin.pre_bind(&cs, &pod, "n1").await.is_success());
    let writes = claim_writes(&e.api);
    let kinds: Vec<&str> = writes.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["update", "status"]);
    assert!(
        writes[0]
            .1
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER)
    );
    let status = writes[1].1.status.clone().expect("status");
    let allocation = status.allocation.expect("allocation");
    let devices: Vec<String> = allocation
        .devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| format!("{}/{}/{}", r.driver, r.pool, r.device))
        .collect();
    assert_eq!(
        devices,
        ["gpu.example.com/n1/gpu-0", "gpu.example.com/n1/gpu-1"]
    );
    assert!(allocation.allocation_timestamp.is_some());
    assert_eq!(
        serde_json::to_value(allocation.node_selector).expect("json"),
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
    );
    let reserved = status.reserved_for.expect("reservedFor");
    assert_eq!(
        serde_json::to_value(&reserved).expect("json"),
        json!([{"resource": "pods", "name": "p", "uid": "p-uid"}])
    );
    // The allocation left the in-flight set and lives on in the assume cache.
    assert!(
        e.listers
            .plugin_state
            .get_or_default::<ClaimTracker>()
            .pending_allocation("p-gpu-uid")
            .is_none()
    );
    let known = e.listers.plugin_state.get_or_default::<ClaimTracker>().get(
        e.listers.store(&RESOURCE_CLAIMS),
        "ns",
        "p-gpu",
    );
    assert!(known.is_some_and(|c| is_allocated_for_test(&c)));
}

/// Every ResourceClaim written, in order: `update` (the claim) or `status`, and the claim sent.
fn claim_writes(api: &RecordingApi) -> Vec<(&'static str, ResourceClaim)> {
    let kind = |sub: Option<&str>| {
        if sub == Some("status") {
            "status"
        } else {
            "update"
        }
    };
    api.requests()
        .into_iter()
        .filter(|r| r.verb == Verb::Replace && r.resource.kind == "ResourceClaim")
        .filter_map(|r| Some((kind(r.subresource), serde_json::from_value(r.body?).ok()?)))
        .collect()
}

/// The API server's copy of the claim `ns/p-gpu`.
fn stored_claim(e: &Env) -> ResourceClaim {
    e.api
        .stored::<ResourceClaim>("ns", "p-gpu")
        .expect("the claim is stored")
}

fn is_allocated_for_test(c: &ResourceClaim) -> bool {
    super::claims::is_allocated(c)
}

#[tokio::test]
async fn pre_bind_retries_conflicts_with_the_latest_claim() {
    let e = env(1, vec![generated_claim("p-gpu", "p", exact("gpu", 1))]);
    let pod = pod_with_template_claim("p", "p-gpu", true);
    let (mut cs, _, _) = pre_filter(&e, &pod);
    assert!(e.plugin.filter(&cs, &pod, &node("n1")).is_success());
    assert!(e.plugin.reserve(&mut cs, &pod, "n1").is_success());
    // Someone else changed the claim meanwhile (a label): our first write conflicts.
    let mut changed = stored_claim(&e);
    changed.metadata.resource_version = Some("7".into());
    e.api.store(&changed);
    assert!(e.plugin.pre_bind(&cs, &pod, "n1").await.is_success());
    let stored = stored_claim(&e);
    assert!(stored.status.and_then(|s| s.allocation).is_some());
}

#[tokio::test]
async fn allocated_claims_pin_the_pod_and_post_filter_deallocates() {
    let mut c = generated_claim("p-gpu", "p", exact("gpu", 1));
    c.status = Some(
        serde_json::from_value(json!({"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
        }}))
        .expect("status"),
    );
    let e = env(1, vec![c]);
    let pod = pod_with_template_claim("p", "p-gpu", true);
    let (cs, code, _) = pre_filter(&e, &pod);
    assert_eq!(code, Code::Success);
    assert!(e.plugin.filter(&cs, &pod, &node("n1")).is_success());
    assert_eq!(
        filter(&e, &cs, &pod, "n2"),
        (
            Code::UnschedulableAndUnresolvable,
            ERR_NOT_AVAILABLE.to_string()
        )
    );
    let (_, s) = e
        .plugin
        .post_filter(&cs, &pod, &Snapshot::new(), &NodeToStatus::new());
    assert_eq!(s.message(), "deallocation of ResourceClaim completed");
    assert!(
        claim_writes(&e.api).is_empty(),
        "nothing written in the cycle"
    );
    e.dispatcher
        .run_queued(&(e.api.clone() as Arc<dyn ApiClient>));
    let writes = claim_writes(&e.api);
    assert_eq!(writes.len(), 1);
    assert!(
        writes[0]
            .1
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_none() && s.reserved_for.is_none())
    );
}

#[test]
fn post_filter_keeps_claims_other_pods_use() {
    let mut c = generated_claim("shared", "p", exact("gpu", 1));
    c.status = Some(
        serde_json::from_value(json!({
            "allocation": {"devices": {"results": []},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}]
        }))
        .expect("status"),
    );
    let e = env(1, vec![c]);
    let pod = PodInfo::from_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}
        }))
        .expect("pod"),
    );
    let (cs, _, _) = pre_filter(&e, &pod);
    // The shared claim is usable where its allocation is, and not elsewhere.
    assert!(e.plugin.filter(&cs, &pod, &node("n1")).is_success());
    assert_eq!(filter(&e, &cs, &pod, "n2").1, ERR_NOT_AVAILABLE);
    let (_, s) = e
        .plugin
        .post_filter(&cs, &pod, &Snapshot::new(), &NodeToStatus::new());
    // 1.37 rejects without a reason; 1.36 says it is still not schedulable.
    assert_eq!(s.code(), Code::Unschedulable);
    assert!(s.reasons().is_empty(), "{:?}", s.reasons());
    let (_, s) =
        DynamicResources::new(e.listers.clone(), e.api.clone(), e.dispatcher.clone(), None)
            .at(crate::emulation::Minor::V1_36)
            .post_filter(&cs, &pod, &Snapshot::new(), &NodeToStatus::new());
    assert_eq!(s.message(), "still not schedulable");
    assert!(claim_writes(&e.api).is_empty());
}

#[test]
fn score_prefers_earlier_subrequests() {
    let devices = json!({"requests": [{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "count": 2},
        {"name": "small", "deviceClassName": "gpu", "count": 1}]}]});
    let e = env(1, vec![generated_claim("p-gpu", "p", devices.clone())]);
    // n3 has two devices, n1 one.
    e.listers
        .store(&RESOURCE_SLICES)
        .apply((*node_slice("n3", vec![device("a", json!({})), device("b", json!({}))])).clone());
    let pod = pod_with_template_claim("p", "p-gpu", true);
    let (cs, _, _) = pre_filter(&e, &pod);
    assert!(e.plugin.filter(&cs, &pod, &node("n1")).is_success());
    assert!(e.plugin.filter(&cs, &pod, &node("n3")).is_success());
    let s1 = e.plugin.score(&cs, &pod, &node("n1")).expect("score");
    let s3 = e.plugin.score(&cs, &pod, &node("n3")).expect("score");
    assert_eq!((s1, s3), (7, 8));
    let mut scores = vec![
        NodeScore {
            name: "n1".into(),
            score: s1,
        },
        NodeScore {
            name: "n3".into(),
            score: s3,
        },
    ];
    assert!(
        e.plugin
            .normalize_score(&cs, &pod, &mut scores)
            .is_success()
    );
    assert_eq!(scores[1].score, 100);
}

#[test]
fn dra_backed_extended_resources_are_refused_where_no_device_plugin_provides_them() {
    let e = env(1, vec![]);
    let mut gpu_class = (*class("gpu", &[])).clone();
    gpu_class
        .spec
        .get_or_insert_default()
        .extended_resource_name = Some("example.com/gpu".into());
    e.listers.store(&DEVICE_CLASSES).apply(gpu_class);
    let pod = crate::framework::testing::PodBuilder::new("x")
        .container(&[("example.com/gpu", "1")])
        .info();
    let (cs, code, _) = pre_filter(&e, &pod);
    assert_eq!(code, Code::Success);
    let (code, msg) = filter(&e, &cs, &pod, "n1");
    assert_eq!(code, Code::UnschedulableAndUnresolvable);
    assert!(
        msg.contains(
            "example.com/gpu backed by DRA (DRAExtendedResource) are not supported by ksched"
        ),
        "{msg}"
    );
    let with_plugin = NodeBuilder::new("dp")
        .allocatable(&[("example.com/gpu", "4")])
        .info(vec![]);
    assert!(e.plugin.filter(&cs, &pod, &with_plugin).is_success());
}

#[test]
fn args_defaults_and_validation() {
    assert_eq!(
        decode::<DynamicResourcesArgs>(None),
        Ok(json!({"filterTimeout": "10s", "bindingTimeout": "10m0s"}))
    );
    assert_eq!(
        decode::<DynamicResourcesArgs>(Some(&json!({"filterTimeout": "0s"}))),
        Ok(json!({"filterTimeout": "0s", "bindingTimeout": "10m0s"}))
    );
    let errs = decode::<DynamicResourcesArgs>(Some(
        &json!({"filterTimeout": "-1s", "bindingTimeout": "500ms"}),
    ))
    .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["filterTimeout", "bindingTimeout"]);
    assert!(decode::<DynamicResourcesArgs>(Some(&json!({"timeout": "1s"}))).is_err());
}

#[test]
fn pre_bind_pre_flight_skips_a_pod_without_claims() {
    let e = env(1, vec![]);
    let pod = crate::framework::testing::PodBuilder::new("x").info();
    let (cs, code, _) = pre_filter(&e, &pod);
    assert_eq!(code, Code::Skip);
    assert!(e.plugin.pre_bind_pre_flight(&cs, &pod, "n1").is_skip());
    // Without PreFilter's state: an error, as upstream.
    assert_eq!(
        e.plugin
            .pre_bind_pre_flight(&CycleState::new(), &pod, "n1")
            .code(),
        Code::Error
    );
}

#[test]
fn capacity_requests_share_a_device_through_the_plugin() {
    let listers = Arc::new(Listers::default());
    listers.store(&RESOURCE_SLICES).apply(
        (*node_slice(
            "n1",
            vec![json!({"name": "shared", "allowMultipleAllocations": true,
                        "capacity": {"memory": {"value": "40Gi"}}})],
        ))
        .clone(),
    );
    listers
        .store(&DEVICE_CLASSES)
        .apply((*class("gpu", &[])).clone());
    let request = json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu",
        "capacity": {"requests": {"memory": "30Gi"}}}}]});
    listers
        .store(&RESOURCE_CLAIMS)
        .apply(generated_claim("p-gpu", "p", request.clone()));
    listers
        .store(&RESOURCE_CLAIMS)
        .apply(generated_claim("q-gpu", "q", request));
    let api = Arc::new(RecordingApi::default());
    let plugin = DynamicResources::new(listers, api, Arc::new(ApiDispatcher::default()), None);
    let e = Env {
        listers: Arc::new(Listers::default()),
        api: Arc::new(RecordingApi::default()),
        dispatcher: Arc::new(ApiDispatcher::default()),
        plugin,
    };
    let p = pod_with_template_claim("p", "p-gpu", true);
    let (mut cs, code, msg) = pre_filter(&e, &p);
    assert_eq!(code, Code::Success, "{msg}");
    assert_eq!(filter(&e, &cs, &p, "n1"), (Code::Success, String::new()));
    assert!(e.plugin.reserve(&mut cs, &p, "n1").is_success());
    // The in-flight share takes 30Gi: a second 30Gi share does not fit.
    let q = pod_with_template_claim("q", "q-gpu", true);
    let (cs, code, _) = pre_filter(&e, &q);
    assert_eq!(code, Code::Success);
    assert_eq!(
        filter(&e, &cs, &q, "n1"),
        (
            Code::UnschedulableAndUnresolvable,
            ERR_CANNOT_ALLOCATE.to_string()
        )
    );
}
