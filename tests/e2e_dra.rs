//! Dynamic resource allocation on the real control plane: kube-controller-manager's resourceclaim
//! controller creates the pods' claims from their templates, the test publishes the DeviceClass
//! and ResourceSlices a driver would (kwok nodes run no driver), and `ksched scheduler` and
//! upstream kube-scheduler run the same workload one after the other, on nodes of their own with
//! the same devices: same feasibility, same allocations, same messages, and the same devices
//! kept off limits by DeviceTaintRules.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, config, upstream_scheduler};
use support::wait::{node_of, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const DRIVER: &str = "gpu.e2e.ksched.io";
const PAUSE: &str = "registry.k8s.io/pause:3.10";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

fn object<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("object literal")
}

/// Upstream kube-scheduler serving `name` with its default profile; killed when dropped.
fn kube_scheduler(cp: &ControlPlane, name: &str) -> LoggedChild {
    upstream_scheduler(cp, name, &[])
}

/// The scheduler under test or upstream's, for the logs a failure shows.
enum Contender {
    Ksched(SchedulerProcess),
    Upstream(LoggedChild),
}

impl Contender {
    fn logs(&self) -> String {
        let logs = match self {
            Contender::Ksched(s) => s.logs(),
            Contender::Upstream(c) => c.logs(),
        };
        support::wait::tail(&logs, 60)
    }
}

/// The DeviceClass `class` of the driver's devices.
fn device_class(class: &str) -> DeviceClass {
    object(json!({
        "metadata": {"name": class},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}
    }))
}

/// The one slice of pool `node`: `gpus` devices with a model and an index.
fn node_slice(node: &str, gpus: usize) -> ResourceSlice {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
                "model": {"string": "a100"}, "index": {"int": i}, "driverVersion": {"version": "1.2.3"}
            }, "capacity": {"memory": {"value": "40Gi"}}})
        })
        .collect();
    object(json!({
        "metadata": {"name": format!("{node}-{DRIVER}")},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    }))
}

/// A template for one device of `class` matching `selector`.
fn template(name: &str, class: &str, selector: &str) -> ResourceClaimTemplate {
    object(json!({
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": class,
            "selectors": [{"cel": {"expression": selector}}]
        }}]}}}
    }))
}

/// A pod of `scheduler` with one claim from `template`.
fn pod(name: &str, scheduler: &str, template: &str) -> Pod {
    pod_with_claim(
        name,
        scheduler,
        json!({"name": "gpu", "resourceClaimTemplateName": template}),
    )
}

/// A pod of `scheduler` with the pod claim `claim` (named `gpu`).
fn pod_with_claim(name: &str, scheduler: &str, claim: Value) -> Pod {
    object(json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": PAUSE, "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [claim],
        }
    }))
}

/// The claim generated for the pod's `gpu` claim.
async fn claim_of(client: &Client, ns: &str, pod: &str) -> ResourceClaim {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let p = pods.get(pod).await.expect("pod");
    let name = p
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().find(|s| s.name == "gpu"))
        .and_then(|s| s.resource_claim_name)
        .expect("generated claim name");
    claims.get(&name).await.expect("claim")
}

/// The claim's allocation and reservation with the contender's node prefix replaced by `node-`
/// and the allocation time dropped: what must be equal for both schedulers.
fn normalized(claim: &ResourceClaim, prefix: &str) -> Value {
    let status = claim.status.clone().expect("claim status");
    let mut v = json!({
        "allocation": status.allocation,
        "reservedFor": status.reserved_for.map(|r| r.into_iter().map(|c| c.name).collect::<Vec<_>>()),
        "finalizers": claim.metadata.finalizers,
    });
    if let Some(a) = v["allocation"].as_object_mut() {
        a.remove("allocationTimestamp");
    }
    let text = v.to_string().replace(prefix, "node-");
    serde_json::from_str(&text).expect("json")
}

/// What one scheduler did with the workload.
#[derive(Debug, PartialEq)]
struct Observed {
    /// Pod -> node (normalized), for the pods bound.
    bound: BTreeMap<String, String>,
    /// Pod -> its claim's normalized allocation, for the pods bound.
    allocations: BTreeMap<String, Value>,
    /// The claim two pods share: its nodes and its normalized allocation and reservation.
    shared: (Vec<String>, Value),
    /// The message of the pod left without a device after two pods raced for the last one.
    lost_race: String,
    /// The message of the pod whose selector no device matches.
    no_match: String,
}

/// Runs the workload under `scheduler` (already started as `contender`) on two fresh nodes
/// `<test>-<tag>-0` (three devices) and `<test>-<tag>-1` (none).
async fn workload(client: &Client, tag: &str, scheduler: &str, contender: &Contender) -> Observed {
    let test = format!("dra-{}", std::process::id());
    let nodes = Nodes::new(cp(), &format!("{test}-{tag}")).waiting_on_drop();
    let with_devices = nodes.create("0", "8", &[]);
    nodes.create("1", "8", &[]);
    nodes.wait_ready();
    let prefix = format!("{test}-{tag}-");
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice = node_slice(&with_devices, 3);
    slices
        .create(&PostParams::default(), &slice)
        .await
        .expect("slice");
    let class = format!("gpu-{test}");

    let ns = cp().namespace(client, &format!("dra-{tag}")).await;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &ns);
    for t in [
        template(
            "gpu",
            &class,
            "device.attributes[\"gpu.e2e.ksched.io\"].model == \"a100\" && device.capacity[\"gpu.e2e.ksched.io\"].memory.compareTo(quantity(\"32Gi\")) >= 0",
        ),
        template(
            "h100",
            &class,
            "device.attributes[\"gpu.e2e.ksched.io\"].model == \"h100\"",
        ),
    ] {
        templates
            .create(&PostParams::default(), &t)
            .await
            .expect("template");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let logs = || contender.logs();
    let create = async |name: &str, template: &str| {
        pods.create(&PostParams::default(), &pod(name, scheduler, template))
            .await
            .expect("create pod");
    };
    let mut observed = Observed {
        bound: BTreeMap::new(),
        allocations: BTreeMap::new(),
        shared: (Vec::new(), Value::Null),
        lost_race: String::new(),
        no_match: String::new(),
    };

    // One pod: the first device of the node that has devices.
    create("a", "gpu").await;
    let node = poll("pod a bound", Duration::from_secs(90), logs, async || {
        node_of(&pods, "a").await
    })
    .await;
    observed
        .bound
        .insert("a".into(), node.replace(&prefix, "node-"));

    // A claim shared by two pods: allocated once, reserved for both, both on its node.
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let shared: ResourceClaim = object(json!({
        "metadata": {"name": "shared"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}}
    }));
    claims
        .create(&PostParams::default(), &shared)
        .await
        .expect("shared claim");
    let mut shared_nodes = Vec::new();
    for name in ["s1", "s2"] {
        let p = pod_with_claim(
            name,
            scheduler,
            json!({"name": "gpu", "resourceClaimName": "shared"}),
        );
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create pod");
        let node = poll(
            &format!("pod {name} bound"),
            Duration::from_secs(90),
            logs,
            async || node_of(&pods, name).await,
        )
        .await;
        shared_nodes.push(node.replace(&prefix, "node-"));
    }
    let shared = claims.get("shared").await.expect("shared claim");
    let reserved: Vec<String> = shared
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .map(|r| r.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    assert_eq!(reserved, ["s1", "s2"]);
    observed.shared = (shared_nodes, normalized(&shared, &prefix));

    // Two pods race for the last device: exactly one gets it.
    create("b", "gpu").await;
    create("c", "gpu").await;
    let (winner, loser, message) = poll(
        "one of b and c bound, the other unschedulable",
        Duration::from_secs(90),
        logs,
        async || {
            let (b, c) = (pods.get("b").await.ok()?, pods.get("c").await.ok()?);
            let bound = |p: &Pod| support::wait::node(p).is_some();
            match (bound(&b), bound(&c)) {
                (true, false) => Some(("b", "c", unschedulable_message(&c)?)),
                (false, true) => Some(("c", "b", unschedulable_message(&b)?)),
                (true, true) => panic!("both pods got the last device\n{}", logs()),
                (false, false) => None,
            }
        },
    )
    .await;
    let node = node_of(&pods, winner).await.expect("winner's node");
    // The winner is named "b" in the record, whichever it was.
    observed
        .bound
        .insert("b".into(), node.replace(&prefix, "node-"));
    observed.lost_race = message;
    for (record, pod) in [("a", "a"), ("b", winner)] {
        let claim = claim_of(client, &ns, pod).await;
        let mut v = normalized(&claim, &prefix);
        // The reservation names the pod: record it under the record's name.
        v["reservedFor"] = json!([record]);
        observed.allocations.insert(record.into(), v);
    }
    // The loser's claim got nothing.
    let lost = claim_of(client, &ns, loser).await;
    assert!(
        lost.status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none(),
        "{loser}'s claim is allocated: {:?}",
        lost.status
    );

    // No device matches the selector.
    create("d", "h100").await;
    observed.no_match = poll(
        "pod d unschedulable",
        Duration::from_secs(90),
        logs,
        async || unschedulable_message(&pods.get("d").await.ok()?),
    )
    .await;
    assert_eq!(node_of(&pods, "d").await, None);

    // Let everything go: the namespace (pods, claims), the slice; the nodes when dropped.
    let_go(client, &ns, &slices, &slice).await;
    observed
}

/// Deletes the namespace (pods, claims) and the slice of a workload.
async fn let_go(client: &Client, ns: &str, slices: &Api<ResourceSlice>, slice: &ResourceSlice) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    let _ = slices
        .delete(
            slice.metadata.name.as_deref().unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_claims_are_allocated_like_upstream() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let test = format!("dra-{}", std::process::id());
    let classes: Api<DeviceClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &device_class(&format!("gpu-{test}")),
        )
        .await
        .expect("device class");

    let ksched = Contender::Ksched(SchedulerProcess::start(
        cp,
        "dra-ksched",
        &config("dra-ksched", None),
    ));
    let ours = workload(&client, "ksched", "dra-ksched", &ksched).await;
    drop(ksched);
    let upstream = Contender::Upstream(kube_scheduler(cp, "dra-upstream"));
    let theirs = workload(&client, "upstream", "dra-upstream", &upstream).await;
    drop(upstream);
    let _ = classes
        .delete(&format!("gpu-{test}"), &DeleteParams::default())
        .await;

    // What ksched did, spelled out.
    assert_eq!(ours.bound.get("a").map(String::as_str), Some("node-0"));
    assert_eq!(ours.bound.get("b").map(String::as_str), Some("node-0"));
    let device = |who: &str| {
        ours.allocations[who]["allocation"]["devices"]["results"][0]["device"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!((device("a"), device("b")), ("gpu-0".into(), "gpu-2".into()));
    assert_eq!(ours.shared.0, ["node-0", "node-0"]);
    assert_eq!(
        ours.shared.1["allocation"]["devices"]["results"][0]["device"],
        json!("gpu-1")
    );
    assert_eq!(
        ours.allocations["a"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    assert!(
        ours.lost_race.contains("cannot allocate all claims"),
        "{}",
        ours.lost_race
    );
    assert!(
        ours.no_match.contains("cannot allocate all claims"),
        "{}",
        ours.no_match
    );
    // And upstream did the same.
    assert_eq!(ours, theirs);
}

/// The DeviceClass `name` of the driver's devices whose `kind` attribute is `kind`.
fn kind_class(name: &str, kind: &str) -> DeviceClass {
    object(json!({
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!(
            "device.driver == \"{DRIVER}\" && device.attributes[\"{DRIVER}\"].kind == \"{kind}\""
        )}}]}
    }))
}

/// The slices of `node` for the features kube-scheduler has on by default since 1.36:
/// partitionable devices (a 40Gi counter set; one device taking all of it, two taking half),
/// a device shared by claims (40Gi of memory in steps of 10Gi) and a device with binding
/// conditions.
fn feature_slices(node: &str) -> Vec<ResourceSlice> {
    let pool = |name: &str, count: i64| json!({"name": format!("{node}-{name}"), "generation": 1, "resourceSliceCount": count});
    let kind = |k: &str| json!({"kind": {"string": k}});
    let part = |name: &str, memory: &str| {
        json!({"name": name, "attributes": kind("part"),
        "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": memory}}}]})
    };
    vec![
        object(
            json!({"metadata": {"name": format!("{node}-part-counters")},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": pool("part", 2),
                     "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "40Gi"}}}]}}),
        ),
        object(json!({"metadata": {"name": format!("{node}-part-devices")},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": pool("part", 2),
                     "devices": [part("whole", "40Gi"), part("half-0", "20Gi"), part("half-1", "20Gi")]}})),
        object(json!({"metadata": {"name": format!("{node}-shared")},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": pool("shared", 1),
                     "devices": [{"name": "shared", "attributes": kind("shared"), "allowMultipleAllocations": true,
                                  "capacity": {"memory": {"value": "40Gi", "requestPolicy": {
                                      "default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}}}}]}})),
        object(json!({"metadata": {"name": format!("{node}-fabric")},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": pool("fabric", 1),
                     "devices": [{"name": "fabric", "attributes": kind("fabric"),
                                  "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"]}]}})),
    ]
}

/// A claim `name` for `count` devices of `class`, each taking `memory` when given.
fn direct_claim(name: &str, class: &str, count: i64, memory: Option<&str>) -> ResourceClaim {
    let mut exactly = json!({"deviceClassName": class, "count": count});
    if let Some(m) = memory {
        exactly["capacity"] = json!({"requests": {"memory": m}});
    }
    object(
        json!({"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}}),
    )
}

/// What one scheduler did with the features' workload: pod -> node (normalized) or its
/// unschedulable message, claim -> normalized allocation (share IDs dropped: they are random).
#[derive(Debug, PartialEq)]
struct FeatureObserved {
    pods: BTreeMap<String, String>,
    claims: BTreeMap<String, Value>,
}

async fn feature_workload(
    client: &Client,
    tag: &str,
    scheduler: &str,
    contender: &Contender,
    classes: &str,
) -> FeatureObserved {
    let test = format!("dra-features-{}", std::process::id());
    let nodes = Nodes::new(cp(), &format!("{test}-{tag}")).waiting_on_drop();
    let node = nodes.create("0", "8", &[]);
    nodes.wait_ready();
    let prefix = format!("{test}-{tag}-");
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let created = feature_slices(&node);
    for s in &created {
        slices
            .create(&PostParams::default(), s)
            .await
            .expect("slice");
    }
    let ns = cp().namespace(client, &format!("dra-features-{tag}")).await;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let logs = || contender.logs();
    let mut observed = FeatureObserved {
        pods: BTreeMap::new(),
        claims: BTreeMap::new(),
    };
    let claim_for = async |pod: &str, claim: ResourceClaim| {
        claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("claim");
        let name = claim.metadata.name.clone().unwrap_or_default();
        let p = pod_with_claim(
            pod,
            scheduler,
            json!({"name": "gpu", "resourceClaimName": name}),
        );
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create pod");
    };
    let bound = async |pod: &str| {
        poll(
            &format!("pod {pod} bound"),
            Duration::from_secs(90),
            logs,
            async || node_of(&pods, pod).await,
        )
        .await
        .replace(&prefix, "node-")
    };

    // Partitionable devices: two devices that share the counter set.
    claim_for(
        "halves",
        direct_claim("halves", &format!("part-{classes}"), 2, None),
    )
    .await;
    let n = bound("halves").await;
    observed.pods.insert("halves".into(), n);
    // Consumable capacity: two claims share the device (15Gi rounds up to 20Gi); a third
    // does not fit.
    for name in ["share-1", "share-2"] {
        claim_for(
            name,
            direct_claim(name, &format!("shared-{classes}"), 1, Some("15Gi")),
        )
        .await;
        let n = bound(name).await;
        observed.pods.insert(name.into(), n);
    }
    claim_for(
        "share-3",
        direct_claim("share-3", &format!("shared-{classes}"), 1, Some("15Gi")),
    )
    .await;
    let full = poll(
        "pod share-3 unschedulable",
        Duration::from_secs(90),
        logs,
        async || unschedulable_message(&pods.get("share-3").await.ok()?),
    )
    .await;
    observed.pods.insert("share-3".into(), full);
    // Binding conditions: the pod waits until the driver says the device is attached.
    claim_for(
        "fabric",
        direct_claim("fabric", &format!("fabric-{classes}"), 1, None),
    )
    .await;
    let mut allocated = poll(
        "claim fabric allocated",
        Duration::from_secs(90),
        logs,
        async || {
            let c = claims.get("fabric").await.ok()?;
            c.status.as_ref()?.allocation.as_ref()?;
            Some(c)
        },
    )
    .await;
    assert_eq!(
        node_of(&pods, "fabric").await,
        None,
        "bound before its device was attached"
    );
    allocated.status.get_or_insert_default().devices = Some(vec![object(json!({
        "driver": DRIVER, "pool": format!("{node}-fabric"), "device": "fabric",
        "conditions": [{"type": "Attached", "status": "True", "reason": "Attached", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }))]);
    claims
        .replace_status("fabric", &PostParams::default(), &allocated)
        .await
        .expect("device status");
    let n = bound("fabric").await;
    observed.pods.insert("fabric".into(), n);

    for name in ["halves", "share-1", "share-2", "fabric"] {
        let c = claims.get(name).await.expect("claim");
        let mut v = normalized(&c, &prefix);
        for r in v["allocation"]["devices"]["results"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if let Some(r) = r.as_object_mut() {
                assert_eq!(
                    r.remove("shareID").is_some(),
                    name.starts_with("share"),
                    "{name}"
                );
            }
        }
        observed.claims.insert(name.into(), v);
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    for s in &created {
        let _ = slices
            .delete(
                s.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await;
    }
    observed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitionable_shared_and_conditional_devices_like_upstream() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let suffix = format!("features-{}", std::process::id());
    let classes: Api<DeviceClass> = Api::all(client.clone());
    for kind in ["part", "shared", "fabric"] {
        classes
            .create(
                &PostParams::default(),
                &kind_class(&format!("{kind}-{suffix}"), kind),
            )
            .await
            .expect("device class");
    }
    let ksched = Contender::Ksched(SchedulerProcess::start(
        cp,
        "dra-features-ksched",
        &config("dra-features-ksched", None),
    ));
    let ours = feature_workload(&client, "ksched", "dra-features-ksched", &ksched, &suffix).await;
    drop(ksched);
    let upstream = Contender::Upstream(kube_scheduler(cp, "dra-features-upstream"));
    let theirs = feature_workload(
        &client,
        "upstream",
        "dra-features-upstream",
        &upstream,
        &suffix,
    )
    .await;
    drop(upstream);
    for kind in ["part", "shared", "fabric"] {
        let _ = classes
            .delete(&format!("{kind}-{suffix}"), &DeleteParams::default())
            .await;
    }

    // What ksched did, spelled out.
    let devices = |claim: &str| -> Vec<String> {
        ours.claims[claim]["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["device"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(devices("halves"), ["half-0", "half-1"]);
    assert_eq!(devices("share-1"), ["shared"]);
    assert_eq!(devices("share-2"), ["shared"]);
    assert_eq!(
        ours.claims["share-1"]["allocation"]["devices"]["results"][0]["consumedCapacity"],
        json!({"memory": "20Gi"})
    );
    assert_eq!(
        ours.claims["fabric"]["allocation"]["devices"]["results"][0]["bindingConditions"],
        json!(["Attached"])
    );
    assert!(
        ours.pods["share-3"].contains("cannot allocate all claims"),
        "{}",
        ours.pods["share-3"]
    );
    // And upstream did the same.
    assert_eq!(ours, theirs);
}

/// A DRA feature ksched does not implement leaves the pod pending with the feature named: an
/// extended resource backed by a DeviceClass (`DRAExtendedResource`) on a node whose device
/// plugin does not provide it. (kube-scheduler would allocate a device for it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_resources_backed_by_dra_are_left_pending_with_the_feature_named() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let test = format!("dra-ext-{}", std::process::id());
    let resource = format!("{test}.example.com/gpu");
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let class: DeviceClass = object(json!({"metadata": {"name": test},
        "spec": {"extendedResourceName": resource,
                 "selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}}));
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("class");
    let nodes = Nodes::new(cp, &test).waiting_on_drop();
    let node = nodes.create("0", "8", &[]);
    nodes.wait_ready();
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice = node_slice(&node, 1);
    slices
        .create(&PostParams::default(), &slice)
        .await
        .expect("slice");
    let ksched = SchedulerProcess::start(cp, "dra-ext-ksched", &config("dra-ext-ksched", None));
    let ns = cp.namespace(&client, "dra-ext").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = object(json!({
        "metadata": {"name": "wants-gpu"},
        "spec": {"schedulerName": "dra-ext-ksched", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": PAUSE, "resources": {
                     "requests": {resource.as_str(): "1"}, "limits": {resource.as_str(): "1"}}}]}
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let message = poll(
        "pod wants-gpu unschedulable",
        Duration::from_secs(60),
        || ksched.logs(),
        async || unschedulable_message(&pods.get("wants-gpu").await.ok()?),
    )
    .await;
    assert!(
        message.contains(&format!(
            "extended resource(s) {resource} backed by DRA (DRAExtendedResource) are not supported by ksched"
        )),
        "{message}"
    );
    assert_eq!(node_of(&pods, "wants-gpu").await, None);
    drop(ksched);
    let_go(&client, &ns, &slices, &slice).await;
    let _ = classes.delete(&test, &DeleteParams::default()).await;
}

/// What one scheduler did with a device a DeviceTaintRule taints: the device the first pod got,
/// the second pod's message while the rule is there, and its device once the rule is deleted.
#[derive(Debug, PartialEq)]
struct TaintObserved {
    first: String,
    tainted: String,
    after_rule_deleted: String,
}

/// Node `<test>-<tag>-0` with two devices, a rule tainting `gpu-0` (NoSchedule), then the
/// scheduler `start` gives: two pods of one device each.
async fn taint_workload(
    client: &Client,
    tag: &str,
    scheduler: &str,
    start: impl FnOnce() -> Contender,
    class: &str,
) -> TaintObserved {
    let test = format!("dra-taints-{}", std::process::id());
    let nodes = Nodes::new(cp(), &format!("{test}-{tag}")).waiting_on_drop();
    let node = nodes.create("0", "8", &[]);
    nodes.wait_ready();
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice = node_slice(&node, 2);
    slices
        .create(&PostParams::default(), &slice)
        .await
        .expect("slice");
    let rules: Api<DeviceTaintRule> = Api::all(client.clone());
    let rule_name = format!("{test}-{tag}");
    let rule: DeviceTaintRule = object(json!({
        "metadata": {"name": rule_name},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-0"},
                 "taint": {"key": "e2e.ksched.io/broken", "value": "true", "effect": "NoSchedule"}}
    }));
    rules
        .create(&PostParams::default(), &rule)
        .await
        .expect("DeviceTaintRule (resource.k8s.io/v1, served from 1.37)");
    // The scheduler starts with the rule in place: its first list has it. kube-scheduler applies
    // rules to slices in a tracker of its own, after its caches sync and without saying when:
    // its first attempts may see no devices (the pod is then retried) or unpatched ones, so the
    // pods come a moment later.
    let contender = start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logs = || contender.logs();
    let ns = cp().namespace(client, &format!("dra-taints-{tag}")).await;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &ns);
    templates
        .create(
            &PostParams::default(),
            &template(
                "gpu",
                class,
                "device.attributes[\"gpu.e2e.ksched.io\"].model == \"a100\"",
            ),
        )
        .await
        .expect("template");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let device = async |pod: &str| {
        claim_of(client, &ns, pod)
            .await
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .and_then(|r| r.into_iter().next())
            .map(|r| r.device)
            .unwrap_or_default()
    };
    // One after the other: kube-scheduler's slice tracker may not have applied the rule yet when
    // its first pod is tried (it then retries), so two pods at once could swap their devices.
    pods.create(&PostParams::default(), &pod("first", scheduler, "gpu"))
        .await
        .expect("create pod");
    poll(
        "pod first bound",
        Duration::from_secs(90),
        logs,
        async || node_of(&pods, "first").await,
    )
    .await;
    pods.create(&PostParams::default(), &pod("second", scheduler, "gpu"))
        .await
        .expect("create pod");
    let tainted = poll(
        "pod second unschedulable",
        Duration::from_secs(90),
        logs,
        async || unschedulable_message(&pods.get("second").await.ok()?),
    )
    .await;
    assert_eq!(node_of(&pods, "second").await, None);
    // The rule goes: the device is free again and the pending pod is tried again at once.
    rules
        .delete(&rule_name, &DeleteParams::default())
        .await
        .expect("delete rule");
    poll(
        "pod second bound",
        Duration::from_secs(60),
        logs,
        async || node_of(&pods, "second").await,
    )
    .await;
    let observed = TaintObserved {
        first: device("first").await,
        tainted,
        after_rule_deleted: device("second").await,
    };
    drop(contender);
    let_go(client, &ns, &slices, &slice).await;
    observed
}

/// DeviceTaintRules (GA in 1.37): a device a rule taints is not allocated to a claim that does
/// not tolerate it, and deleting the rule lets the pending pod have it, as with kube-scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taint_rules_keep_claims_off_tainted_devices_like_upstream() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let class = format!("gpu-taints-{}", std::process::id());
    let classes: Api<DeviceClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &device_class(&class))
        .await
        .expect("device class");
    let ours = taint_workload(
        &client,
        "ksched",
        "dra-taints-ksched",
        || {
            Contender::Ksched(SchedulerProcess::start(
                cp,
                "dra-taints-ksched",
                &config("dra-taints-ksched", None),
            ))
        },
        &class,
    )
    .await;
    let theirs = taint_workload(
        &client,
        "upstream",
        "dra-taints-upstream",
        || Contender::Upstream(kube_scheduler(cp, "dra-taints-upstream")),
        &class,
    )
    .await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;

    // What ksched did, spelled out.
    assert_eq!(ours.first, "gpu-1");
    assert!(
        ours.tainted.contains("cannot allocate all claims"),
        "{}",
        ours.tainted
    );
    assert_eq!(ours.after_rule_deleted, "gpu-0");
    // And upstream did the same.
    assert_eq!(ours, theirs);
}
