//! Table tests of the allocator over plain values.

use super::super::testing::{DRIVER, claim, class, device, exact, node_slice, slice};
use super::*;
use crate::framework::testing::NodeBuilder;
use serde_json::{Value, json};

fn gpus(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| device(&format!("gpu-{i}"), json!({"index": {"int": i}})))
        .collect()
}

/// Name, allocator, claims, the devices each claim gets (`request=pool/device`).
type Case = (
    &'static str,
    Allocator,
    Vec<Arc<ResourceClaim>>,
    Option<Vec<Vec<&'static str>>>,
);

fn allocator(slices: Vec<Arc<ResourceSlice>>, allocated: &[&str]) -> Allocator {
    let classes = [
        class("gpu", &[]),
        class(
            "big",
            &["device.attributes[\"gpu.example.com\"].index >= 2"],
        ),
    ]
    .into_iter()
    .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
    .collect();
    let devices = allocated
        .iter()
        .map(|d| {
            let (pool, dev) = d.split_once('/').expect("pool/device");
            DeviceId::new(DRIVER, pool, dev)
        })
        .collect();
    let state = AllocatedState {
        devices,
        ..AllocatedState::default()
    };
    with(state, classes, slices, OLD)
}

/// An allocator with the given state, classes, slices and minor's behaviour.
fn with(
    allocated: AllocatedState,
    classes: HashMap<String, Arc<DeviceClass>>,
    slices: Vec<Arc<ResourceSlice>>,
    behaviour: Behaviour,
) -> Allocator {
    Allocator::new(
        Inputs {
            allocated,
            classes,
            taint_rules: Vec::new(),
            cel: Arc::new(Cache::default()),
            timeout: None,
            behaviour,
        },
        slices,
    )
}

fn node(name: &str) -> Node {
    NodeBuilder::new(name).label("zone", "a").build()
}

/// The devices allocated per claim as `request=pool/device`, or None.
fn picked(outcome: &Option<Vec<AllocationResult>>) -> Option<Vec<Vec<String>>> {
    outcome.as_ref().map(|results| {
        results
            .iter()
            .map(|r| {
                r.devices
                    .iter()
                    .flat_map(|d| d.results.iter().flatten())
                    .map(|d| format!("{}={}/{}", d.request, d.pool, d.device))
                    .collect()
            })
            .collect()
    })
}

fn run(
    a: &Allocator,
    node_name: &str,
    claims: &[Arc<ResourceClaim>],
) -> Option<Vec<AllocationResult>> {
    a.allocate(&node(node_name), claims).expect("allocate")
}

#[test]
fn allocation_table() {
    let n1 = || node_slice("n1", gpus(4));
    let cases: Vec<Case> = vec![
        (
            "one device: the first",
            allocator(vec![n1()], &[]),
            vec![claim("c", exact("gpu", 1))],
            Some(vec![vec!["gpu=n1/gpu-0"]]),
        ),
        (
            "allocated devices are skipped",
            allocator(vec![n1()], &["n1/gpu-0", "n1/gpu-1"]),
            vec![claim("c", exact("gpu", 1))],
            Some(vec![vec!["gpu=n1/gpu-2"]]),
        ),
        (
            "more devices than the node has",
            allocator(vec![n1()], &[]),
            vec![claim("c", exact("gpu", 5))],
            None,
        ),
        (
            "another node's slice is not used",
            allocator(vec![node_slice("n2", gpus(4))], &[]),
            vec![claim("c", exact("gpu", 1))],
            None,
        ),
        (
            "two claims get different devices",
            allocator(vec![n1()], &["n1/gpu-1"]),
            vec![claim("a", exact("gpu", 1)), claim("b", exact("gpu", 2))],
            Some(vec![
                vec!["gpu=n1/gpu-0"],
                vec!["gpu=n1/gpu-2", "gpu=n1/gpu-3"],
            ]),
        ),
        (
            "class selector",
            allocator(vec![n1()], &[]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "count": 1}}]}),
            )],
            Some(vec![vec!["r=n1/gpu-2"]]),
        ),
        (
            "request selector",
            allocator(vec![n1()], &[]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                "selectors": [{"cel": {"expression": "device.attributes[\"gpu.example.com\"].index == 3"}}]}}]}),
            )],
            Some(vec![vec!["r=n1/gpu-3"]]),
        ),
        (
            "allocation mode All takes every matching device",
            allocator(vec![n1()], &[]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "allocationMode": "All"}}]}),
            )],
            Some(vec![vec!["r=n1/gpu-2", "r=n1/gpu-3"]]),
        ),
        (
            "allocation mode All fails when one is taken",
            allocator(vec![n1()], &["n1/gpu-3"]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "allocationMode": "All"}}]}),
            )],
            None,
        ),
        (
            "firstAvailable: the first subrequest that fits",
            allocator(vec![n1()], &[]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "firstAvailable": [
                {"name": "eight", "deviceClassName": "gpu", "count": 8},
                {"name": "two", "deviceClassName": "gpu", "count": 2},
                {"name": "one", "deviceClassName": "gpu", "count": 1}]}]}),
            )],
            Some(vec![vec!["r/two=n1/gpu-0", "r/two=n1/gpu-1"]]),
        ),
        (
            "admin access may use allocated devices",
            allocator(vec![n1()], &["n1/gpu-0"]),
            vec![claim(
                "c",
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1, "adminAccess": true}}]}),
            )],
            Some(vec![vec!["r=n1/gpu-0"]]),
        ),
    ];
    for (name, a, claims, want) in cases {
        let want = want.map(|w| {
            w.into_iter()
                .map(|c| c.into_iter().map(String::from).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        });
        assert_eq!(picked(&run(&a, "n1", &claims)), want, "{name}");
    }
}

#[test]
fn match_attribute_backtracks_to_devices_sharing_the_value() {
    let devices = vec![
        device("gpu-0", json!({"numa": {"int": 0}})),
        device("gpu-1", json!({"numa": {"int": 1}})),
        device("gpu-2", json!({"numa": {"int": 1}})),
    ];
    let a = allocator(vec![node_slice("n1", devices)], &[]);
    let c = claim(
        "c",
        json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}],
               "constraints": [{"matchAttribute": "gpu.example.com/numa"}]}),
    );
    assert_eq!(
        picked(&run(&a, "n1", &[c])),
        Some(vec![vec![
            "r=n1/gpu-1".to_string(),
            "r=n1/gpu-2".to_string()
        ]])
    );
    // No two devices share a value: no allocation.
    let devices = vec![
        device("gpu-0", json!({"numa": {"int": 0}})),
        device("gpu-1", json!({"numa": {"int": 1}})),
    ];
    let a = allocator(vec![node_slice("n1", devices)], &[]);
    let c = claim(
        "c",
        json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}],
               "constraints": [{"requests": ["r"], "matchAttribute": "gpu.example.com/numa"}]}),
    );
    assert_eq!(picked(&run(&a, "n1", &[c])), None);
}

#[test]
fn taints_need_tolerations() {
    let tainted = json!({"name": "gpu-0", "taints": [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]});
    let a = allocator(vec![node_slice("n1", vec![tainted])], &[]);
    assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])), None);
    let tolerating = claim(
        "c",
        json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
            "tolerations": [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]}}]}),
    );
    let out = run(&a, "n1", &[tolerating]);
    let result = &out.expect("allocated")[0];
    let first = &result
        .devices
        .as_ref()
        .and_then(|d| d.results.clone())
        .expect("results")[0];
    assert_eq!(first.device, "gpu-0");
    assert_eq!(first.tolerations.as_ref().map(Vec::len), Some(1));
}

#[test]
fn node_selectors_of_the_result() {
    let c = || vec![claim("c", exact("gpu", 1))];
    // A node-local slice pins the claim to the node.
    let out = run(&allocator(vec![node_slice("n1", gpus(1))], &[]), "n1", &c());
    let sel = out.expect("allocated")[0]
        .node_selector
        .clone()
        .expect("selector");
    assert_eq!(
        serde_json::to_value(&sel).expect("json"),
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
    );
    // A slice for all nodes: available everywhere.
    let all = slice(
        "net",
        json!({"driver": DRIVER, "allNodes": true, "pool": {"name": "net", "generation": 1, "resourceSliceCount": 1}, "devices": gpus(1)}),
    );
    let out = run(&allocator(vec![all], &[]), "n1", &c());
    assert_eq!(out.expect("allocated")[0].node_selector, None);
    // A slice for nodes matching a selector: that selector.
    let zoned = slice(
        "zoned",
        json!({"driver": DRIVER, "pool": {"name": "zone-a", "generation": 1, "resourceSliceCount": 1}, "devices": gpus(1),
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}),
    );
    let a = allocator(vec![zoned], &[]);
    let out = run(&a, "n1", &c());
    let sel = out.expect("allocated")[0]
        .node_selector
        .clone()
        .expect("selector");
    assert_eq!(
        sel.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .map(Vec::len),
        Some(1)
    );
    let other_zone = NodeBuilder::new("n9").label("zone", "b").build();
    assert_eq!(a.allocate(&other_zone, &c()), Ok(None));
    // Per-device node selection.
    let per_device = slice(
        "pd",
        json!({"driver": DRIVER, "perDeviceNodeSelection": true, "pool": {"name": "pd", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "d-n2", "nodeName": "n2"}, {"name": "d-n1", "nodeName": "n1"}]}),
    );
    let out = run(&allocator(vec![per_device], &[]), "n1", &c());
    assert_eq!(picked(&out), Some(vec![vec!["gpu=pd/d-n1".to_string()]]));
}

#[test]
fn pools_old_generations_incomplete_and_invalid() {
    let spec = |generation: i64, count: i64, devices: Vec<Value>| json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": generation, "resourceSliceCount": count}, "devices": devices});
    // The newer generation replaces the older one.
    let a = allocator(
        vec![
            slice("old", spec(1, 1, gpus(1))),
            slice("new", spec(2, 1, vec![device("fresh", json!({}))])),
        ],
        &[],
    );
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
        Some(vec![vec!["gpu=p/fresh".to_string()]])
    );
    // An incomplete pool is not allocated from; "All" over it is an error.
    let a = allocator(vec![slice("half", spec(1, 2, gpus(2)))], &[]);
    assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])), None);
    let all = claim(
        "c",
        json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]}),
    );
    assert!(matches!(
        a.allocate(&node("n1"), &[all]),
        Err(AllocateError::Fatal(e)) if e.contains("resource pool gpu.example.com/p is currently being updated")
    ));
    // Duplicate device names make the pool invalid: an error for this node only.
    let a = allocator(
        vec![
            slice("a", spec(1, 2, gpus(1))),
            slice("b", spec(1, 2, gpus(1))),
        ],
        &[],
    );
    assert_eq!(
        a.allocate(&node("n1"), &[claim("c", exact("gpu", 1))]),
        Err(AllocateError::Node(
            "invalid resource pools were encountered".into()
        ))
    );
}

#[test]
fn configuration_from_class_and_claim() {
    let mut class_with_config = (*class("gpu", &[])).clone();
    class_with_config.spec.get_or_insert_default().config = Some(vec![
        serde_json::from_value(
            json!({"opaque": {"driver": DRIVER, "parameters": {"mode": "class"}}}),
        )
        .expect("config"),
    ]);
    let classes = [("gpu".to_string(), Arc::new(class_with_config))]
        .into_iter()
        .collect();
    let a = with(
        AllocatedState::default(),
        classes,
        vec![node_slice("n1", gpus(2))],
        OLD,
    );
    let c = claim(
        "c",
        json!({"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "count": 1}},
                            {"name": "b", "exactly": {"deviceClassName": "gpu", "count": 1}}],
               "config": [{"requests": ["b"], "opaque": {"driver": DRIVER, "parameters": {"mode": "claim"}}}]}),
    );
    let out = run(&a, "n1", &[c]);
    let config = out.expect("allocated")[0]
        .devices
        .clone()
        .and_then(|d| d.config)
        .expect("config");
    let summary: Vec<(String, Vec<String>)> = config
        .iter()
        .map(|c| (c.source.clone(), c.requests.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "FromClass".to_string(),
                vec!["a".to_string(), "b".to_string()]
            ),
            ("FromClaim".to_string(), vec!["b".to_string()]),
        ]
    );
}

#[test]
fn broken_claims_are_errors() {
    let a = allocator(vec![node_slice("n1", gpus(1))], &[]);
    let cases = [
        (
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                "selectors": [{"cel": {"expression": "device.attributes[\"gpu.example.com\"].missing == 1"}}]}}]}),
            "claim ns/c: selector #0: CEL runtime error",
        ),
        (
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                "selectors": [{"cel": {"expression": "ip('1.2.3.4') == 1"}}]}}]}),
            "claim ns/c: selector #0: CEL compile error",
        ),
        (
            exact("gpu", 33),
            "claim ns/c: number of requested devices 33 exceeds the claim limit of 32",
        ),
        (
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "nope", "count": 1}}]}),
            "could not retrieve device class nope",
        ),
    ];
    for (devices, want) in cases {
        match a.allocate(&node("n1"), &[claim("c", devices)]) {
            Err(AllocateError::Fatal(e)) => assert!(e.contains(want), "{e}"),
            other => panic!("{want}: {other:?}"),
        }
    }
}

#[test]
fn the_filter_timeout_stops_the_search() {
    let a = Allocator::new(
        Inputs {
            allocated: AllocatedState::default(),
            classes: [("gpu".to_string(), class("gpu", &[]))]
                .into_iter()
                .collect(),
            taint_rules: Vec::new(),
            cel: Arc::new(Cache::default()),
            timeout: Some(Duration::ZERO),
            behaviour: OLD,
        },
        vec![node_slice("n1", gpus(2))],
    );
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(
        a.allocate(&node("n1"), &[claim("c", exact("gpu", 1))]),
        Err(AllocateError::Timeout)
    );
}

/// The tests above describe 1.36 (where the two minors differ, the tests below compare them).
const OLD: Behaviour = Behaviour::of_minor(crate::emulation::Minor::V1_36);
const NEW: Behaviour = Behaviour::of_minor(crate::emulation::Minor::V1_37);

fn gpu_classes() -> HashMap<String, Arc<DeviceClass>> {
    [("gpu".to_string(), class("gpu", &[]))]
        .into_iter()
        .collect()
}

/// Pool `p` on n1: a counter set `mem` of `total` and devices consuming `each` of it.
fn partitioned(total: &str, devices: &[(&str, &str)]) -> Vec<Arc<ResourceSlice>> {
    let counters = slice(
        "p-counters",
        json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
               "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": total}}}]}),
    );
    let devices: Vec<Value> = devices
        .iter()
        .map(|(name, each)| json!({"name": name, "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": each}}}]}))
        .collect();
    let devs = slice(
        "p-devices",
        json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2}, "devices": devices}),
    );
    vec![counters, devs]
}

#[test]
fn partitionable_devices_share_their_pool_counters() {
    let slices = partitioned(
        "40Gi",
        &[
            ("whole", "40Gi"),
            ("half-0", "20Gi"),
            ("half-1", "20Gi"),
            ("half-2", "20Gi"),
        ],
    );
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        slices.clone(),
        NEW,
    );
    // One device: the first in order, the whole GPU.
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
        Some(vec![vec!["gpu=p/whole".to_string()]])
    );
    // Two devices: the whole GPU leaves no memory, so two halves.
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 2))])),
        Some(vec![vec![
            "gpu=p/half-0".to_string(),
            "gpu=p/half-1".to_string()
        ]])
    );
    // Three halves exceed the counter.
    assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 3))])), None);
    // An allocated half consumes its share: only one half is left, the whole GPU does not fit.
    let state = AllocatedState {
        devices: [DeviceId::new(DRIVER, "p", "half-2")].into(),
        ..AllocatedState::default()
    };
    let a = with(state, gpu_classes(), slices, NEW);
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
        Some(vec![vec!["gpu=p/half-0".to_string()]])
    );
    assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 2))])), None);
}

#[test]
fn counter_pools_that_do_not_add_up_are_invalid_or_incomplete() {
    // A device consuming a counter set the pool does not have: the pool is invalid.
    let mut slices = partitioned("40Gi", &[("half-0", "20Gi")]);
    let bad = slice(
        "p-devices",
        json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
               "devices": [{"name": "x", "consumesCounters": [{"counterSet": "other", "counters": {"memory": {"value": "1Gi"}}}]}]}),
    );
    slices[1] = bad;
    let a = with(AllocatedState::default(), gpu_classes(), slices, NEW);
    assert_eq!(
        a.allocate(&node("n1"), &[claim("c", exact("gpu", 1))]),
        Err(AllocateError::Node(
            "invalid resource pools were encountered".into()
        ))
    );
    // The counter slice not published yet: incomplete, nothing allocated.
    let slices = partitioned("40Gi", &[("half-0", "20Gi")]);
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![slices[1].clone()],
        NEW,
    );
    assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])), None);
    // Counters published for another node still count (the pool is complete).
    let counters_elsewhere = slice(
        "p-counters",
        json!({"driver": DRIVER, "nodeName": "n9", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
               "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "40Gi"}}}]}),
    );
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![counters_elsewhere, slices[1].clone()],
        NEW,
    );
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
        Some(vec![vec!["gpu=p/half-0".to_string()]])
    );
}

/// A device that several claims share, with 40Gi of memory in steps of 10Gi.
fn shared_gpu() -> Arc<ResourceSlice> {
    node_slice(
        "n1",
        vec![
            json!({"name": "shared", "allowMultipleAllocations": true, "capacity": {"memory": {"value": "40Gi",
            "requestPolicy": {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}}}}),
        ],
    )
}

fn capacity_claim(name: &str, memory: Option<&str>) -> Arc<ResourceClaim> {
    let mut exactly = json!({"deviceClassName": "gpu", "count": 1});
    if let Some(m) = memory {
        exactly["capacity"] = json!({"requests": {"memory": m}});
    }
    claim(
        name,
        json!({"requests": [{"name": "gpu", "exactly": exactly}]}),
    )
}

#[test]
fn consumable_capacity_shares_a_device() {
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![shared_gpu()],
        NEW,
    );
    // Two claims share the device: 15Gi rounds up to 20Gi, no request takes the default.
    let out = run(
        &a,
        "n1",
        &[capacity_claim("a", Some("15Gi")), capacity_claim("b", None)],
    )
    .expect("allocated");
    let results: Vec<_> = out
        .iter()
        .map(|r| r.devices.clone().and_then(|d| d.results).expect("results")[0].clone())
        .collect();
    let consumed = |i: usize| {
        results[i].consumed_capacity.clone().expect("consumed")["memory"]
            .0
            .clone()
    };
    assert_eq!(
        (consumed(0).as_str(), consumed(1).as_str()),
        ("20Gi", "10Gi")
    );
    let (s0, s1) = (
        results[0].share_id.clone().expect("share"),
        results[1].share_id.clone().expect("share"),
    );
    assert_ne!(s0, s1);
    assert_eq!(s0.len(), 36, "a UUID: {s0}");
    // Beside 30Gi allocated, 15Gi (20Gi) does not fit, 5Gi (10Gi) does.
    let id = DeviceId::new(DRIVER, "n1", "shared");
    let gi = 1i128 << 30;
    let state = AllocatedState {
        shared: [id.clone()].into(),
        capacity: [(id, [("memory".to_string(), 30 * gi * 1_000_000_000)].into())].into(),
        ..AllocatedState::default()
    };
    let a = with(state, gpu_classes(), vec![shared_gpu()], NEW);
    assert_eq!(run(&a, "n1", &[capacity_claim("a", Some("15Gi"))]), None);
    assert!(run(&a, "n1", &[capacity_claim("a", Some("5Gi"))]).is_some());
    // A capacity the device does not have: no device.
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![shared_gpu()],
        NEW,
    );
    let other = claim(
        "c",
        json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"cores": "1"}}}}]}),
    );
    assert_eq!(run(&a, "n1", &[other]), None);
}

#[test]
fn distinct_attribute_spreads_devices() {
    let devices = vec![
        device("gpu-0", json!({"numa": {"int": 0}})),
        device("gpu-1", json!({"numa": {"int": 0}})),
        device("gpu-2", json!({"numa": {"int": 1}})),
    ];
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![node_slice("n1", devices)],
        NEW,
    );
    let c = claim(
        "c",
        json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}],
               "constraints": [{"distinctAttribute": "gpu.example.com/numa"}]}),
    );
    assert_eq!(
        picked(&run(&a, "n1", &[c])),
        Some(vec![vec![
            "r=n1/gpu-0".to_string(),
            "r=n1/gpu-2".to_string()
        ]])
    );
}

#[test]
fn devices_with_binding_conditions_come_last_and_carry_them() {
    let waiting = slice(
        "a-pool",
        json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "a-pool", "generation": 1, "resourceSliceCount": 1},
               "devices": [{"name": "fabric", "bindingConditions": ["Attached"], "bindingFailureConditions": ["Failed"], "bindsToNode": true}]}),
    );
    let plain = slice(
        "b-pool",
        json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "b-pool", "generation": 1, "resourceSliceCount": 1},
               "devices": [{"name": "local"}]}),
    );
    let a = with(
        AllocatedState::default(),
        gpu_classes(),
        vec![waiting.clone(), plain],
        NEW,
    );
    // The pool without binding conditions first, though it sorts after.
    assert_eq!(
        picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
        Some(vec![vec!["gpu=b-pool/local".to_string()]])
    );
    let a = with(AllocatedState::default(), gpu_classes(), vec![waiting], NEW);
    let out = run(&a, "n1", &[claim("c", exact("gpu", 1))]).expect("allocated");
    let result = &out[0]
        .devices
        .clone()
        .and_then(|d| d.results)
        .expect("results")[0];
    assert_eq!(
        result.binding_conditions,
        Some(vec!["Attached".to_string()])
    );
    assert_eq!(
        result.binding_failure_conditions,
        Some(vec!["Failed".to_string()])
    );
    // A device that binds to its node pins the allocation to the node.
    let terms = out[0]
        .node_selector
        .clone()
        .expect("selector")
        .node_selector_terms;
    assert_eq!(
        terms[0].match_fields.as_ref().map(|f| f[0].values.clone()),
        Some(Some(vec!["n1".to_string()]))
    );
}

#[test]
fn device_taint_rules_taint_from_1_37() {
    let slices = vec![node_slice("n1", gpus(2))];
    let rule = TaintRule {
        driver: Some(DRIVER.into()),
        pool: None,
        device: Some("gpu-0".into()),
        taint: serde_json::from_value(json!({"key": "maintenance", "effect": "NoSchedule"}))
            .expect("taint"),
    };
    let allocator = |behaviour| {
        Allocator::new(
            Inputs {
                allocated: AllocatedState::default(),
                classes: gpu_classes(),
                taint_rules: vec![rule.clone()],
                cel: Arc::new(Cache::default()),
                timeout: None,
                behaviour,
            },
            slices.clone(),
        )
    };
    let c = || vec![claim("c", exact("gpu", 1))];
    assert_eq!(
        picked(&run(&allocator(NEW), "n1", &c())),
        Some(vec![vec!["gpu=n1/gpu-1".to_string()]])
    );
    // 1.36 does not read DeviceTaintRules (off by default there).
    assert_eq!(
        picked(&run(&allocator(OLD), "n1", &c())),
        Some(vec![vec!["gpu=n1/gpu-0".to_string()]])
    );
}

#[test]
fn claim_configuration_for_every_request_from_1_37() {
    let c = claim(
        "c",
        json!({"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "count": 1}},
                            {"name": "b", "exactly": {"deviceClassName": "gpu", "count": 1}}],
               "config": [{"requests": ["a", "b"], "opaque": {"driver": DRIVER, "parameters": {}}}]}),
    );
    let summary = |behaviour| {
        let a = with(
            AllocatedState::default(),
            gpu_classes(),
            vec![node_slice("n1", gpus(2))],
            behaviour,
        );
        let out = run(&a, "n1", std::slice::from_ref(&c)).expect("allocated");
        out[0]
            .devices
            .clone()
            .and_then(|d| d.config)
            .expect("config")
            .iter()
            .map(|c| c.requests.clone())
            .collect::<Vec<_>>()
    };
    // 1.37: once, for all requests. 1.36: once per request it names.
    assert_eq!(summary(NEW), vec![None]);
    let both = Some(vec!["a".to_string(), "b".to_string()]);
    assert_eq!(summary(OLD), vec![both.clone(), both]);
}

#[test]
fn the_claim_limit_message_follows_the_minor() {
    let c = || {
        vec![claim(
            "c",
            json!({"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "count": 20}},
                                {"name": "b", "exactly": {"deviceClassName": "gpu", "count": 20}}]}),
        )]
    };
    let message = |behaviour| match with(
        AllocatedState::default(),
        gpu_classes(),
        vec![node_slice("n1", gpus(2))],
        behaviour,
    )
    .allocate(&node("n1"), &c())
    {
        Err(AllocateError::Fatal(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        message(NEW),
        "claim ns/c, request b: adding 20 devices exceeds the claim limit of 32, with 20 already accounted for"
    );
    assert_eq!(
        message(OLD),
        "claim ns/c: number of requested devices 40 exceeds the claim limit of 32"
    );
}
