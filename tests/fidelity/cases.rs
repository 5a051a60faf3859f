//! The corpus: a seeded generator per family of scheduling behaviour. The same seed gives the same
//! cases, so a disagreement can be replayed (`KSCHED_FIDELITY_CASE=<name>`).

use fastrand::Rng;
use serde_json::{Value, json};

use crate::objects::*;

pub const SCHEDULER_NAME: &str = "fidelity";
pub const FIDELITY_LABEL: &str = "ksched.io/fidelity";
/// Namespaces every case may use (created once; their labels feed namespaceSelectors).
pub const NAMESPACES: &[(&str, &[(&str, &str)])] = &[
    ("fid-a", &[("team", "a"), ("env", "prod")]),
    ("fid-b", &[("team", "b"), ("env", "dev")]),
    ("fid-c", &[("team", "c")]),
];

/// A cluster state and the pods to schedule on it, one after the other.
#[derive(Debug, Clone)]
pub struct Case {
    pub family: &'static str,
    pub name: String,
    /// Created in this order before the scheduler starts.
    pub objects: Vec<Value>,
    pub incoming: Vec<Value>,
}

/// A family: its name and a generator of one case from a random source.
pub type Family = (
    &'static str,
    fn(&mut fastrand::Rng) -> (Vec<Value>, Vec<Value>),
);

pub const FAMILIES: &[Family] = &[
    ("resources", resources),
    ("taints", taints),
    ("node-affinity", node_affinity),
    ("node-order", node_order),
    ("host-ports", host_ports),
    ("pod-affinity", pod_affinity),
    ("topology-spread", topology_spread),
    ("volumes", volumes),
    ("image-locality", image_locality),
    ("scoring", scoring),
    ("preemption", preemption),
    ("gates", scheduling_gates),
    ("fill", fill),
    ("dra", dra),
    ("dra-shared", dra_shared),
    (GROUPS, groups),
    // Appended: the seeds of the families above stay as they were.
    ("volume-capacity", volume_capacity),
    ("volume-drivers", volume_drivers),
    ("declared-features", declared_features),
    (GROUPS_TOPOLOGY, groups_topology),
];

pub const GROUPS: &str = "groups";
pub const GROUPS_TOPOLOGY: &str = "groups-topology";

/// The families whose cases create PodGroups: they need the API server to serve
/// `scheduling.k8s.io/v1beta1` (Kubernetes 1.37+).
pub fn needs_pod_groups(family: &str) -> bool {
    matches!(family, GROUPS | GROUPS_TOPOLOGY)
}

/// Command-line arguments both schedulers get for a case of `family`.
pub fn scheduler_args(family: &str) -> &'static [&'static str] {
    match family {
        GROUPS => &["--feature-gates=GenericWorkload=true"],
        GROUPS_TOPOLOGY => {
            &["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"]
        }
        _ => &[],
    }
}

/// `per_family` cases of every family, from `seed`.
pub fn corpus(seed: u64, per_family: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for (fi, (family, generate)) in FAMILIES.iter().enumerate() {
        for i in 0..per_family {
            let mut rng = fastrand::Rng::with_seed(seed ^ ((fi as u64) << 32) ^ i as u64);
            let (objects, incoming) = generate(&mut rng);
            out.push(Case {
                family,
                name: format!("{family}-{i:03}"),
                objects,
                incoming,
            });
        }
    }
    out
}

/// `pod` and `n - 1` copies of it (`incoming-1`, ...), scheduled one after the other.
fn copies(pod: &Value, n: usize) -> Vec<Value> {
    (0..n.max(1))
        .map(|k| {
            let mut p = pod.clone();
            p["metadata"]["name"] = json!(format!("incoming-{k}"));
            p
        })
        .collect()
}

fn pick<T: Clone>(rng: &mut Rng, xs: &[T]) -> T {
    xs[rng.usize(..xs.len())].clone()
}

/// True with probability `percent` %.
fn chance(rng: &mut Rng, percent: u32) -> bool {
    rng.u32(..100) < percent
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

/// `n` nodes from `min`..=`max`.
fn count(rng: &mut Rng, min: usize, max: usize) -> usize {
    rng.usize(min..=max)
}

/// In 40 % of cases, `p` prefers nodes labelled `disk=ssd` with a random weight.
fn maybe_prefer_ssd(rng: &mut Rng, p: PodB) -> PodB {
    if !chance(rng, 40) {
        return p;
    }
    p.set(
        "affinity",
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": rng.i32(1..=100), "preference": {"matchExpressions": [
            {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}),
    )
}

fn milli(m: u64) -> String {
    format!("{m}m")
}

fn mebi(m: u64) -> String {
    format!("{m}Mi")
}

/// A container named `name` requesting `cpu` millicores and `mem` MiB (0: not requested).
fn ctr(name: &str, cpu: u64, mem: u64) -> Value {
    let mut r = serde_json::Map::new();
    if cpu > 0 {
        r.insert("cpu".into(), json!(milli(cpu)));
    }
    if mem > 0 {
        r.insert("memory".into(), json!(mebi(mem)));
    }
    json!({"name": name, "image": PAUSE_IMAGE, "resources": {"requests": r}})
}

// ---------------------------------------------------------------------------------------------
// resources: NodeResourcesFit's filter and the scorers, with init and sidecar containers,
// overhead, pod-level resources, extended resources and exact-fit boundaries.

const GPU: &str = "example.com/gpu";

fn resources(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![runtime_class()];
    let n = count(rng, 2, 5);
    // Free millicores and MiB per node, for exact-fit requests.
    let mut free = Vec::new();
    let mut existing = Vec::new();
    for i in 0..n {
        let name = node_name(i);
        let cpu = pick(rng, &[1000u64, 2000, 4000, 8000]);
        let mem = pick(rng, &[2048u64, 4096, 8192]);
        let mut nb = node(&name).cpu(&milli(cpu)).memory(&mebi(mem));
        if chance(rng, 20) {
            nb = nb.pods(pick(rng, &[1u32, 2, 3]));
        }
        let gpus = if chance(rng, 40) { rng.u64(1..=4) } else { 0 };
        if gpus > 0 {
            nb = nb.alloc(GPU, &gpus.to_string());
        }
        if chance(rng, 30) {
            nb = nb.alloc(
                "ephemeral-storage",
                &format!("{}Gi", pick(rng, &[5, 10, 20])),
            );
        }
        objects.push(nb.build());
        let (mut used_cpu, mut used_mem) = (0, 0);
        for j in 0..rng.usize(..=3) {
            let c = rng.u64(1..=12) * 100;
            let m = rng.u64(1..=16) * 128;
            let mut p = pod(&format!("e{i}-{j}")).on(&name, rng.u32(..60));
            if gpus > 0 && chance(rng, 40) {
                p = p
                    .requests(json!({"cpu": milli(c), "memory": mebi(m), GPU: "1"}))
                    .container(
                        "resources",
                        json!({"requests": {"cpu": milli(c),
                        "memory": mebi(m), GPU: "1"}, "limits": {GPU: "1"}}),
                    );
            } else {
                p = p.req(&milli(c), &mebi(m));
            }
            existing.push(p.build());
            used_cpu += c;
            used_mem += m;
        }
        free.push((cpu.saturating_sub(used_cpu), mem.saturating_sub(used_mem)));
    }
    objects.extend(existing);
    // The pod's cpu: random, or exactly what one node has free (give or take a millicore).
    let (target_cpu, target_mem) = pick(rng, &free);
    let cpu = match rng.u32(..4) {
        0 => target_cpu.max(1),
        1 => target_cpu + 1,
        _ => rng.u64(1..=30) * 100,
    };
    let mem = if chance(rng, 25) {
        target_mem.max(1)
    } else {
        rng.u64(1..=24) * 128
    };
    let mut p = pod("incoming-0");
    match rng.u32(..8) {
        0 => {
            // Two app containers share the request.
            p = p.set(
                "containers",
                json!([
                    ctr("a", cpu / 2, mem / 2),
                    ctr("b", cpu - cpu / 2, mem - mem / 2)
                ]),
            );
        }
        1 => {
            // A regular init container bigger than the app container: the max counts.
            p = p
                .set("containers", json!([ctr("a", cpu / 2, mem / 2)]))
                .set("initContainers", json!([ctr("init", cpu, mem)]));
        }
        2 => {
            // A sidecar (restartable init container) adds to the app containers.
            let mut side = ctr("side", cpu / 3, mem / 3);
            side["restartPolicy"] = json!("Always");
            p = p
                .set(
                    "containers",
                    json!([ctr("a", cpu - cpu / 3, mem - mem / 3)]),
                )
                .set("initContainers", json!([side, ctr("init", cpu / 2, mem)]));
        }
        3 => {
            // Overhead from the RuntimeClass adds 250m / 64Mi.
            p = p.set("runtimeClassName", json!("fidelity")).set(
                "containers",
                json!([ctr("a", cpu.saturating_sub(250).max(1), mem)]),
            );
        }
        4 => {
            // Pod-level requests override the containers' sum.
            p = p
                .set("containers", json!([ctr("a", cpu / 4, mem / 4)]))
                .set(
                    "resources",
                    json!({"requests": {"cpu": milli(cpu), "memory": mebi(mem)}}),
                );
        }
        5 => {
            let g = rng.u64(1..=3);
            p = p.container(
                "resources",
                json!({"requests": {"cpu": milli(cpu), "memory": mebi(mem),
                GPU: g.to_string()}, "limits": {GPU: g.to_string()}}),
            );
        }
        6 => {
            let e = pick(rng, &["1Gi", "8Gi", "30Gi"]);
            p = p.requests(json!({"cpu": milli(cpu), "ephemeral-storage": e}));
        }
        _ => p = p.req(&milli(cpu), &mebi(mem)),
    }
    if chance(rng, 10) {
        // Best effort: nothing requested.
        p = p.set("containers", json!([ctr("a", 0, 0)]));
    }
    (objects, vec![p.build()])
}

fn runtime_class() -> Value {
    json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "fidelity", "labels": {FIDELITY_LABEL: "case"}},
        "handler": "fidelity", "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}}})
}

// ---------------------------------------------------------------------------------------------
// taints: every effect and toleration operator, NodeUnschedulable, PreferNoSchedule scoring.

const TAINT_KEYS: &[&str] = &[
    "dedicated",
    "gpu",
    "spot",
    "node-role.kubernetes.io/control-plane",
];
const TAINT_VALUES: &[&str] = &["", "a", "b"];
const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn taints(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    for i in 0..count(rng, 2, 5) {
        let mut nb = node(&node_name(i));
        for _ in 0..rng.usize(..=2) {
            nb = nb.taint(
                pick(rng, TAINT_KEYS),
                pick(rng, TAINT_VALUES),
                pick(rng, EFFECTS),
            );
        }
        if chance(rng, 15) {
            nb = nb.unschedulable();
        }
        objects.push(nb.build());
    }
    let mut tolerations = Vec::new();
    for _ in 0..rng.usize(..=3) {
        let mut t = serde_json::Map::new();
        match rng.u32(..5) {
            0 => {
                // Empty key with Exists tolerates everything (of the effect, if given).
                t.insert("operator".into(), json!("Exists"));
            }
            1 | 2 => {
                t.insert("key".into(), json!(pick(rng, TAINT_KEYS)));
                t.insert("operator".into(), json!("Exists"));
            }
            _ => {
                t.insert("key".into(), json!(pick(rng, TAINT_KEYS)));
                t.insert("operator".into(), json!("Equal"));
                t.insert("value".into(), json!(pick(rng, TAINT_VALUES)));
            }
        }
        if chance(rng, 70) {
            let e = pick(rng, EFFECTS);
            if e == "NoExecute" && chance(rng, 50) {
                t.insert("tolerationSeconds".into(), json!(60));
            }
            t.insert("effect".into(), json!(e));
        }
        tolerations.push(Value::Object(t));
    }
    if chance(rng, 15) {
        tolerations.push(
            json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
            "effect": "NoSchedule"}),
        );
    }
    let p = pod("incoming-0")
        .req("100m", "64Mi")
        .set("tolerations", json!(tolerations));
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// node-affinity: nodeSelector, required terms with every operator and matchFields, preferred
// weights; nodeName pods (never scheduled: both must leave them alone).

const DISKS: &[&str] = &["ssd", "hdd"];
const ZONES: &[&str] = &["z1", "z2", "z3"];

/// Node `i`, in one of `zones` with probability `percent` %.
fn zoned_node(rng: &mut Rng, i: usize, percent: u32, zones: &[&str]) -> NodeB {
    let nb = node(&node_name(i));
    if chance(rng, percent) {
        nb.zone(pick(rng, zones))
    } else {
        nb
    }
}

fn affinity_nodes(rng: &mut Rng, objects: &mut Vec<Value>, n: usize) {
    for i in 0..n {
        let mut nb = zoned_node(rng, i, 85, ZONES);
        if chance(rng, 70) {
            nb = nb.label("disk", pick(rng, DISKS));
        }
        if chance(rng, 60) {
            nb = nb.label("cores", &rng.u32(1..=16).to_string());
        }
        if chance(rng, 30) {
            nb = nb.label("gpu", "true");
        }
        objects.push(nb.build());
    }
}

fn node_requirement(rng: &mut Rng) -> Value {
    match rng.u32(..7) {
        0 => json!({"key": "topology.kubernetes.io/zone", "operator": "In",
            "values": [pick(rng, ZONES), pick(rng, ZONES)]}),
        1 => json!({"key": "disk", "operator": "NotIn", "values": [pick(rng, DISKS)]}),
        2 => json!({"key": "gpu", "operator": "Exists"}),
        3 => json!({"key": "gpu", "operator": "DoesNotExist"}),
        4 => json!({"key": "cores", "operator": "Gt", "values": [rng.u32(1..=12).to_string()]}),
        5 => json!({"key": "cores", "operator": "Lt", "values": [rng.u32(2..=16).to_string()]}),
        _ => json!({"key": "disk", "operator": "In", "values": [pick(rng, DISKS)]}),
    }
}

/// A term: label expressions, or (sometimes) matchFields on the node's name.
fn node_term(rng: &mut Rng, n: usize) -> Value {
    if chance(rng, 20) {
        // The API allows one value for a field selector.
        let op = pick(rng, &["In", "NotIn"]);
        let name = node_name(rng.usize(..n + 1));
        return json!({"matchFields": [{"key": "metadata.name", "operator": op, "values": [name]}]});
    }
    let exprs: Vec<Value> = (0..rng.usize(1..=2))
        .map(|_| node_requirement(rng))
        .collect();
    json!({"matchExpressions": exprs})
}

fn node_affinity(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 2, 6);
    affinity_nodes(rng, &mut objects, n);
    let mut p = pod("incoming-0").req("100m", "64Mi");
    if chance(rng, 5) {
        // A pod that names its node is not the scheduler's: it stays as created.
        p = p.set("nodeName", json!(node_name(rng.usize(..n + 1))));
        return (objects, vec![p.build()]);
    }
    if chance(rng, 40) {
        let mut sel = serde_json::Map::new();
        match rng.u32(..3) {
            0 => sel.insert("disk".into(), json!(pick(rng, DISKS))),
            1 => sel.insert(
                "topology.kubernetes.io/zone".into(),
                json!(pick(rng, ZONES)),
            ),
            _ => sel.insert(
                "kubernetes.io/hostname".into(),
                json!(node_name(rng.usize(..n))),
            ),
        };
        p = p.set("nodeSelector", Value::Object(sel));
    }
    let mut aff = serde_json::Map::new();
    if chance(rng, 60) {
        let terms: Vec<Value> = (0..rng.usize(1..=2)).map(|_| node_term(rng, n)).collect();
        aff.insert(
            "requiredDuringSchedulingIgnoredDuringExecution".into(),
            json!({"nodeSelectorTerms": terms}),
        );
    }
    if chance(rng, 60) {
        let prefs: Vec<Value> = (0..rng.usize(1..=3))
            .map(|_| {
                let mut term = node_term(rng, n);
                if term.get("matchFields").is_some() && chance(rng, 50) {
                    term = json!({"matchExpressions": [node_requirement(rng)]});
                }
                json!({"weight": rng.i32(1..=100), "preference": term})
            })
            .collect();
        aff.insert(
            "preferredDuringSchedulingIgnoredDuringExecution".into(),
            json!(prefs),
        );
    }
    if !aff.is_empty() {
        p = p.set("affinity", json!({"nodeAffinity": aff}));
    }
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// node-order: identical, empty nodes that all pass the pod's required node affinity, so the
// scores tie and the node is chosen by the order of the feasible nodes: upstream's node tree
// (zones round robin, nodes of a zone in the order they were added), searched from where the
// previous cycle stopped. Labelled nodes among unlabelled ones, in zones or not, created in a
// random order, and several pods one after the other.

fn node_order(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let colors = ["red", "blue", "green"];
    let labelled = count(rng, 2, 3);
    let unlabelled = count(rng, 0, 3);
    let zoned = chance(rng, 50);
    let mut nodes: Vec<Value> = (0..labelled + unlabelled)
        .map(|i| {
            let mut b = node(&node_name(i)).cpu("4").memory("8Gi");
            if i < labelled {
                b = b.label("color", colors[i]);
            }
            if zoned {
                b = b.zone(ZONES[i % ZONES.len()]);
            }
            b.build()
        })
        .collect();
    // The order the API server sees them added in.
    rng.shuffle(&mut nodes);
    let requirement = match rng.u32(..3) {
        0 => json!([{"key": "color", "operator": "Exists"}]),
        1 => json!([
            {"key": "color", "operator": "In", "values": ["red", "blue", "green"]},
            {"key": "color", "operator": "NotIn", "values": ["black"]}
        ]),
        _ => {
            // Numeric labels for Gt: every labelled node passes.
            for n in nodes.iter_mut() {
                if n["metadata"]["labels"].get("color").is_some() {
                    n["metadata"]["labels"]["rank"] = json!("5");
                }
            }
            json!([{"key": "rank", "operator": "Gt", "values": ["1"]}])
        }
    };
    let p = pod("incoming-0").req("100m", "64Mi").set(
        "affinity",
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": requirement}]}}}),
    );
    (nodes, copies(&p.build(), count(rng, 1, 4)))
}

// ---------------------------------------------------------------------------------------------
// host-ports: NodePorts with protocols and host IPs.

fn port(rng: &mut Rng) -> Value {
    let mut p = json!({"containerPort": 8080, "hostPort": pick(rng, &[80, 443, 8080])});
    if chance(rng, 30) {
        p["protocol"] = json!(pick(rng, &["TCP", "UDP"]));
    }
    if chance(rng, 30) {
        p["hostIP"] = json!(pick(rng, &["0.0.0.0", "127.0.0.1", "10.0.0.1"]));
    }
    p
}

fn host_ports(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 2, 4);
    let mut existing = Vec::new();
    for i in 0..n {
        objects.push(node(&node_name(i)).build());
        for j in 0..rng.usize(..=2) {
            let ports: Vec<Value> = (0..rng.usize(1..=2)).map(|_| port(rng)).collect();
            existing.push(
                pod(&format!("e{i}-{j}"))
                    .on(&node_name(i), rng.u32(..60))
                    .req("100m", "64Mi")
                    .container("ports", dedup_ports(ports))
                    .build(),
            );
        }
    }
    objects.extend(existing);
    let ports: Vec<Value> = (0..rng.usize(1..=2)).map(|_| port(rng)).collect();
    let p = pod("incoming-0")
        .req("100m", "64Mi")
        .container("ports", dedup_ports(ports));
    (objects, vec![p.build()])
}

/// One container may not list the same protocol, host IP and host port twice (validation); keep
/// the first.
fn dedup_ports(ports: Vec<Value>) -> Value {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (i, mut p) in ports.into_iter().enumerate() {
        let key = (
            p["protocol"].as_str().unwrap_or("TCP").to_string(),
            p["hostIP"].as_str().unwrap_or_default().to_string(),
            p["hostPort"].clone(),
        );
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        p["containerPort"] = json!(8080 + i);
        out.push(p);
    }
    json!(out)
}

// ---------------------------------------------------------------------------------------------
// pod-affinity: required and preferred affinity and anti-affinity, namespaces and
// namespaceSelector, existing pods' anti-affinity (symmetry), the first-pod rule, matchLabelKeys.

const APPS: &[&str] = &["web", "db", "cache"];
const NS: &[&str] = &["fid-a", "fid-b", "fid-c"];

fn pod_term(rng: &mut Rng, own_app: &str) -> Value {
    let app = if chance(rng, 30) {
        own_app.to_string()
    } else {
        pick(rng, APPS).to_string()
    };
    let key = pick(
        rng,
        &["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
    );
    let mut t = json!({"topologyKey": key});
    if chance(rng, 80) {
        t["labelSelector"] = json!({"matchLabels": {"app": app}});
    } else {
        t["labelSelector"] = json!({"matchExpressions": [{"key": "app", "operator": "In",
            "values": [app, pick(rng, APPS)]}]});
    }
    match rng.u32(..6) {
        0 => t["namespaces"] = json!([pick(rng, NS)]),
        1 => t["namespaceSelector"] = json!({"matchLabels": {"env": pick(rng, &["prod", "dev"])}}),
        2 => t["namespaceSelector"] = json!({}),
        _ => {}
    }
    if chance(rng, 15) {
        t["matchLabelKeys"] = json!(["tier"]);
    }
    t
}

fn affinity_block(rng: &mut Rng, own_app: &str, required_only: bool) -> Value {
    let mut block = serde_json::Map::new();
    if chance(rng, 60) {
        let terms: Vec<Value> = (0..rng.usize(1..=2))
            .map(|_| pod_term(rng, own_app))
            .collect();
        block.insert(
            "requiredDuringSchedulingIgnoredDuringExecution".into(),
            json!(terms),
        );
    }
    if !required_only && chance(rng, 50) {
        let prefs: Vec<Value> = (0..rng.usize(1..=2))
            .map(|_| json!({"weight": rng.i32(1..=100), "podAffinityTerm": pod_term(rng, own_app)}))
            .collect();
        block.insert(
            "preferredDuringSchedulingIgnoredDuringExecution".into(),
            json!(prefs),
        );
    }
    Value::Object(block)
}

fn pod_affinity(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 2, 5);
    for i in 0..n {
        objects.push(zoned_node(rng, i, 90, &ZONES[..2]).build());
    }
    let mut existing = Vec::new();
    for j in 0..rng.usize(..=5) {
        let app = pick(rng, APPS);
        let mut p = pod(&format!("e{j}"))
            .ns(pick(rng, NS))
            .on(&node_name(rng.usize(..n)), rng.u32(..60))
            .req("100m", "64Mi")
            .label("app", app)
            .label("tier", pick(rng, &["front", "back"]));
        if chance(rng, 25) {
            // Symmetry: an existing pod's anti-affinity keeps the incoming pod away.
            let mut aff = serde_json::Map::new();
            aff.insert("podAntiAffinity".into(), affinity_block(rng, app, false));
            if chance(rng, 30) {
                aff.insert("podAffinity".into(), affinity_block(rng, app, false));
            }
            p = p.set("affinity", Value::Object(aff));
        }
        existing.push(p.build());
    }
    objects.extend(existing);
    let app = pick(rng, APPS);
    let mut aff = serde_json::Map::new();
    if chance(rng, 65) {
        aff.insert("podAffinity".into(), affinity_block(rng, app, false));
    }
    if chance(rng, 65) {
        aff.insert("podAntiAffinity".into(), affinity_block(rng, app, false));
    }
    let p = pod("incoming-0")
        .ns(pick(rng, NS))
        .req("100m", "64Mi")
        .label("app", app)
        .label("tier", pick(rng, &["front", "back"]))
        .set("affinity", Value::Object(aff));
    // Sometimes a second pod of the same kind, scheduled after the first (the first-pod rule and
    // anti-affinity against the first).
    let n = if chance(rng, 30) { 2 } else { 1 };
    (objects, copies(&p.build(), n))
}

// ---------------------------------------------------------------------------------------------
// topology-spread: maxSkew, minDomains, nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys,
// nodes missing the key, ScheduleAnyway scoring.

fn topology_spread(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 3, 6);
    for i in 0..n {
        let mut nb = zoned_node(rng, i, 85, ZONES);
        if chance(rng, 20) {
            nb = nb.taint("dedicated", "a", "NoSchedule");
        }
        if chance(rng, 50) {
            nb = nb.label("disk", pick(rng, DISKS));
        }
        objects.push(nb.build());
    }
    for j in 0..rng.usize(..=6) {
        let app = pick(rng, &["web", "web", "db"]);
        objects.push(
            pod(&format!("e{j}"))
                .on(&node_name(rng.usize(..n)), rng.u32(..60))
                .req("100m", "64Mi")
                .label("app", app)
                .label("pod-template-hash", pick(rng, &["h1", "h2"]))
                .build(),
        );
    }
    let mut constraints = Vec::new();
    for _ in 0..rng.usize(1..=2) {
        let key = pick(
            rng,
            &["topology.kubernetes.io/zone", "kubernetes.io/hostname"],
        );
        if constraints.iter().any(|c: &Value| c["topologyKey"] == key) {
            continue;
        }
        let mut c = json!({
            "maxSkew": rng.i32(1..=2),
            "topologyKey": key,
            "whenUnsatisfiable": pick(rng, &["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]),
            "labelSelector": {"matchLabels": {"app": "web"}},
        });
        if c["whenUnsatisfiable"] == "DoNotSchedule" && chance(rng, 25) {
            c["minDomains"] = json!(rng.i32(1..=4));
        }
        if chance(rng, 30) {
            c["nodeAffinityPolicy"] = json!(pick(rng, &["Honor", "Ignore"]));
        }
        if chance(rng, 30) {
            c["nodeTaintsPolicy"] = json!(pick(rng, &["Honor", "Ignore"]));
        }
        if chance(rng, 25) {
            c["matchLabelKeys"] = json!(["pod-template-hash"]);
        }
        constraints.push(c);
    }
    let mut p = pod("incoming-0")
        .req("100m", "64Mi")
        .label("app", "web")
        .label("pod-template-hash", pick(rng, &["h1", "h2"]))
        .set("topologySpreadConstraints", json!(constraints));
    if chance(rng, 30) {
        p = p.set("nodeSelector", json!({"disk": pick(rng, DISKS)}));
    }
    if chance(rng, 20) {
        p = p.set(
            "tolerations",
            json!([{"key": "dedicated", "operator": "Exists"}]),
        );
    }
    (objects, copies(&p.build(), rng.usize(1..=3)))
}

// ---------------------------------------------------------------------------------------------
// volumes: bound claims with PV node affinity, WaitForFirstConsumer with static PVs and dynamic
// provisioning, zones, ReadWriteOncePod, CSI attach limits, missing and unbound claims.

const DRIVER: &str = "fidelity.csi.example.com";

fn claim_volume(claim: &str) -> Value {
    json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
}

/// Claim `claim` in fid-a bound to its own 1Gi PV `pv-<claim>` (with `affinity` and `labels`).
fn bound_claim(
    claim: &str,
    modes: &[&str],
    affinity: Option<(&str, &[&str])>,
    labels: &[(&str, &str)],
) -> [Value; 2] {
    let pvname = format!("pv-{claim}");
    [
        pv(
            &pvname,
            "fid-wffc",
            "1Gi",
            modes,
            affinity,
            labels,
            Some(("fid-a", claim)),
        ),
        pvc(claim, "fid-a", "fid-wffc", "1Gi", modes, Some(&pvname)),
    ]
}

fn volumes(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![
        storage_class("fid-wffc", DRIVER, true),
        storage_class("fid-immediate", DRIVER, false),
        csi_driver(DRIVER),
    ];
    let n = count(rng, 2, 4);
    let limit = if chance(rng, 40) {
        Some(rng.i32(1..=2))
    } else {
        None
    };
    for i in 0..n {
        let name = node_name(i);
        objects.push(node(&name).zone(ZONES[i % 2]).build());
        objects.push(csi_node(&name, DRIVER, limit));
    }
    let mut claims = Vec::new();
    let mut existing = Vec::new();
    let rwo = ["ReadWriteOnce"];
    for c in 0..rng.usize(1..=3) {
        let claim = format!("c{c}");
        match rng.u32(..7) {
            0 | 1 => {
                // Bound to a PV pinned to one node or zone (VolumeBinding, VolumeZone).
                let host = node_name(rng.usize(..n));
                let zone = pick(rng, &ZONES[..2]);
                let by_host = chance(rng, 50);
                let (affinity, labels) = if by_host {
                    (Some(("kubernetes.io/hostname", [host.as_str()])), vec![])
                } else {
                    (None, vec![("topology.kubernetes.io/zone", zone)])
                };
                objects.extend(bound_claim(
                    &claim,
                    &rwo,
                    affinity.as_ref().map(|(k, v)| (*k, v.as_slice())),
                    &labels,
                ));
            }
            2 => {
                // WaitForFirstConsumer with static PVs on some nodes.
                for k in 0..rng.usize(..=2) {
                    let on = node_name(rng.usize(..n));
                    objects.push(pv(
                        &format!("pv-{claim}-{k}"),
                        "fid-wffc",
                        pick(rng, &["1Gi", "5Gi"]),
                        &rwo,
                        Some(("kubernetes.io/hostname", &[on.as_str()])),
                        &[],
                        None,
                    ));
                }
                objects.push(pvc(&claim, "fid-a", "fid-wffc", "2Gi", &rwo, None));
            }
            3 => {
                // WaitForFirstConsumer, dynamically provisioned: the node is chosen, then PreBind
                // waits for a provisioner that never comes.
                objects.push(pvc(&claim, "fid-a", "fid-wffc", "1Gi", &rwo, None));
            }
            4 => {
                // ReadWriteOncePod, maybe in use by an existing pod.
                objects.extend(bound_claim(&claim, &["ReadWriteOncePod"], None, &[]));
                if chance(rng, 60) {
                    existing.push(
                        pod(&format!("user-{claim}"))
                            .on(&node_name(rng.usize(..n)), 1)
                            .req("100m", "64Mi")
                            .set("volumes", json!([claim_volume(&claim)]))
                            .build(),
                    );
                }
            }
            5 => {
                if chance(rng, 50) {
                    // Immediate binding, not bound yet.
                    objects.push(pvc(&claim, "fid-a", "fid-immediate", "1Gi", &rwo, None));
                }
                // else: missing entirely.
            }
            _ => {
                // A bound claim without node affinity, counted against CSI limits.
                objects.extend(bound_claim(&claim, &rwo, None, &[]));
            }
        }
        claims.push(claim);
    }
    // Existing pods using other bound volumes of the driver (attach limits).
    if limit.is_some() {
        for i in 0..n {
            for k in 0..rng.usize(..=2) {
                let claim = format!("used-{i}-{k}");
                objects.extend(bound_claim(&claim, &rwo, None, &[]));
                existing.push(
                    pod(&format!("user-{claim}"))
                        .on(&node_name(i), 2)
                        .req("100m", "64Mi")
                        .set("volumes", json!([claim_volume(&claim)]))
                        .build(),
                );
            }
        }
    }
    objects.extend(existing);
    let vols: Vec<Value> = claims.iter().map(|c| claim_volume(c)).collect();
    let p = pod("incoming-0")
        .req("100m", "64Mi")
        .set("volumes", json!(vols));
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// image-locality: nodes holding the pod's images, sizes around the plugin's thresholds.

fn image_locality(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    const MB: i64 = 1024 * 1024;
    let images = [
        "fidelity/app:1",
        "fidelity/sidecar:2",
        "docker.io/library/fidelity:latest",
    ];
    let mut objects = Vec::new();
    for i in 0..count(rng, 2, 5) {
        let mut nb = node(&node_name(i));
        for img in images {
            if chance(rng, 45) {
                nb = nb.image(
                    img,
                    pick(rng, &[10 * MB, 30 * MB, 200 * MB, 600 * MB, 1500 * MB]),
                );
            }
        }
        objects.push(nb.build());
    }
    let mut containers = vec![json!({"name": "a", "image": pick(rng, &images),
        "resources": {"requests": {"cpu": "100m"}}})];
    if chance(rng, 50) {
        containers.push(
            json!({"name": "b", "image": pick(rng, &["fidelity/sidecar:2", "fidelity:latest"])}),
        );
    }
    let p = pod("incoming-0").set("containers", json!(containers));
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// scoring: several scorers at once on otherwise equal nodes, including exact ties.

fn scoring(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 2, 6);
    let identical = chance(rng, 25);
    for i in 0..n {
        let mut nb = node(&node_name(i));
        if !identical {
            nb = nb
                .cpu(&milli(pick(rng, &[2000u64, 4000, 8000])))
                .memory(&mebi(pick(rng, &[4096u64, 8192, 16384])));
            if chance(rng, 30) {
                nb = nb.taint("spot", "", "PreferNoSchedule");
            }
            if chance(rng, 50) {
                nb = nb.label("disk", pick(rng, DISKS));
            }
        }
        nb = nb.zone(ZONES[i % 3]);
        objects.push(nb.build());
        if !identical {
            for j in 0..rng.usize(..=2) {
                objects.push(
                    pod(&format!("e{i}-{j}"))
                        .on(&node_name(i), rng.u32(..60))
                        .req(&milli(rng.u64(1..=10) * 100), &mebi(rng.u64(1..=8) * 256))
                        .label("app", pick(rng, APPS))
                        .build(),
                );
            }
        }
    }
    let mut p = pod("incoming-0")
        .req(&milli(rng.u64(1..=10) * 100), &mebi(rng.u64(1..=8) * 256))
        .label("app", "web");
    p = maybe_prefer_ssd(rng, p);
    if chance(rng, 30) {
        p = p.set("topologySpreadConstraints", json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]));
    }
    (objects, copies(&p.build(), rng.usize(1..=3)))
}

// ---------------------------------------------------------------------------------------------
// preemption: priorities, PDBs, preemptionPolicy Never, equal priorities, several candidates.

fn preemption(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![
        priority_class("fid-low", 10, false),
        priority_class("fid-mid", 100, false),
        priority_class("fid-high", 1000, false),
        priority_class("fid-high-never", 1000, true),
    ];
    let n = count(rng, 1, 4);
    let mut existing = Vec::new();
    let mut pdb_apps = Vec::new();
    for i in 0..n {
        let name = node_name(i);
        objects.push(node(&name).cpu("2").memory("4Gi").build());
        for j in 0..rng.usize(1..=3) {
            let app = pick(rng, &["a", "b", "c"]);
            if !pdb_apps.contains(&app) {
                pdb_apps.push(app);
            }
            existing.push(
                pod(&format!("e{i}-{j}"))
                    .ns(pick(rng, &NS[..2]))
                    .on(&name, rng.u32(..60))
                    .req(&milli(pick(rng, &[500u64, 700, 1000])), "256Mi")
                    .priority(pick(rng, &["fid-low", "fid-low", "fid-mid", "fid-high"]))
                    .label("app", app)
                    .build(),
            );
        }
    }
    for app in pdb_apps {
        if chance(rng, 35) {
            let ns = pick(rng, &NS[..2]);
            objects.push(pdb(&format!("pdb-{app}"), ns, app, rng.i32(0..=1)));
        }
    }
    objects.extend(existing);
    let class = pick(
        rng,
        &[
            "fid-high",
            "fid-high",
            "fid-mid",
            "fid-high-never",
            "fid-low",
        ],
    );
    let p = pod("incoming-0")
        .req(
            &milli(pick(rng, &[800u64, 1200, 1500, 2000, 2500])),
            "256Mi",
        )
        .priority(class);
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// gates: a gated pod is not scheduled and holds nothing; ungated, it is.

fn scheduling_gates(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let n = count(rng, 1, 3);
    let objects: Vec<Value> = (0..n)
        .map(|i| node(&node_name(i)).cpu("2").build())
        .collect();
    let gated = pod("incoming-0")
        .req(&milli(pick(rng, &[1500u64, 2000])), "64Mi")
        .set("schedulingGates", json!([{"name": "example.com/wait"}]))
        .build();
    let next = pod("incoming-1")
        .req(&milli(pick(rng, &[1000u64, 2000])), "64Mi")
        .build();
    let mut incoming = vec![gated, next];
    if chance(rng, 60) {
        incoming.push(json!({"kind": "Ungate", "namespace": "fid-a", "name": "incoming-0"}));
    }
    (objects, incoming)
}

// ---------------------------------------------------------------------------------------------
// fill: identical pods one after the other until nodes are full (upstream 1.35+ may reuse the
// previous cycle's ranking for the next identical pod: OpportunisticBatching).

fn fill(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let cpu = pick(rng, &[1000u64, 1500, 2000]);
    for i in 0..count(rng, 2, 5) {
        let mut nb = node(&node_name(i))
            .cpu(&milli(pick(rng, &[2000u64, 3000, 4000])))
            .memory(&mebi(pick(rng, &[4096u64, 8192])));
        if chance(rng, 40) {
            nb = nb.label("disk", pick(rng, DISKS));
        }
        if chance(rng, 20) {
            nb = nb.taint("spot", "", "PreferNoSchedule");
        }
        objects.push(nb.build());
    }
    let mut p = pod("incoming-0").req(&milli(cpu), &mebi(rng.u64(1..=8) * 256));
    p = maybe_prefer_ssd(rng, p);
    (objects, copies(&p.build(), rng.usize(3..=5)))
}

// ---------------------------------------------------------------------------------------------
// dra: DynamicResources with direct ResourceClaims (the control plane runs no resourceclaim
// controller, so no templates): per-node slices, ExactCount and All, class and request selectors,
// claims shared by two pods, claims no node can satisfy (the PostFilter message).

const MODELS: &[&str] = &["a100", "t4"];

fn dra(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![
        device_class("gpu", None),
        device_class(
            "a100",
            Some(&format!(
                "device.attributes[\"{DRA_DRIVER}\"].model == \"a100\""
            )),
        ),
    ];
    for i in 0..count(rng, 2, 4) {
        let n = node_name(i);
        objects.push(node(&n).build());
        let devices: Vec<(String, &str, u32)> = (0..rng.usize(0..=3))
            .map(|d| {
                (
                    format!("gpu-{d}"),
                    pick(rng, MODELS),
                    pick(rng, &[16u32, 40, 80]),
                )
            })
            .collect();
        if !devices.is_empty() {
            objects.push(resource_slice(&n, &devices));
        }
    }
    let mut incoming = Vec::new();
    let mut last_claim = None;
    for k in 0..count(rng, 1, 3) {
        let claim = match last_claim.clone() {
            // Shares the previous pod's claim: same node, no second allocation.
            Some(c) if chance(rng, 25) => c,
            _ => {
                let name = format!("claim-{k}");
                let class = pick(rng, &["gpu", "gpu", "a100"]);
                let count = if chance(rng, 20) {
                    None
                } else {
                    Some(rng.u32(1..=3))
                };
                let selector = chance(rng, 30).then(|| {
                    format!(
                        "device.capacity[\"{DRA_DRIVER}\"].memory.compareTo(quantity(\"{}Gi\")) >= 0",
                        pick(rng, &[40u32, 80])
                    )
                });
                objects.push(resource_claim(&name, class, count, selector.as_deref()));
                name
            }
        };
        last_claim = Some(claim.clone());
        incoming.push(
            pod(&format!("incoming-{k}"))
                .req("100m", "")
                .claim(&claim)
                .build(),
        );
    }
    (objects, incoming)
}

// ---------------------------------------------------------------------------------------------
// dra-shared: the DRA features on by default since 1.36 that share hardware: partitionable
// devices (parts of a GPU consuming a pool's counter set) and devices shared by claims
// (consumable capacity, requests rounded up to the device's steps); claims for counts of parts,
// or for memory on the shared devices, until some do not fit.

fn dra_shared(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![device_class("gpu", None)];
    for i in 0..count(rng, 1, 3) {
        let n = node_name(i);
        objects.push(node(&n).build());
        if chance(rng, 50) {
            let parts: Vec<(String, u32)> = [("whole", 80u32), ("half-0", 40), ("half-1", 40)]
                .iter()
                .chain(&[("quarter-0", 20), ("quarter-1", 20)])
                .filter(|_| chance(rng, 80))
                .map(|(name, gi)| (name.to_string(), *gi))
                .collect();
            objects.extend(partitioned_slices(&n, 80, &parts));
        } else {
            objects.push(shared_slice(
                &n,
                pick(rng, &[40u32, 80]),
                pick(rng, &[10u32, 20]),
            ));
        }
    }
    let mut incoming = Vec::new();
    for k in 0..count(rng, 2, 4) {
        let name = format!("claim-{k}");
        if chance(rng, 50) {
            objects.push(resource_claim(&name, "gpu", Some(rng.u32(1..=2)), None));
        } else {
            objects.push(capacity_claim(&name, "gpu", pick(rng, &[5u32, 15, 30])));
        }
        incoming.push(
            pod(&format!("incoming-{k}"))
                .req("100m", "")
                .claim(&name)
                .build(),
        );
    }
    (objects, incoming)
}

// ---------------------------------------------------------------------------------------------
// groups: `scheduling.k8s.io/v1beta1` PodGroups with GenericWorkload on in both schedulers: gangs
// that fit and bind whole, gangs of which fewer than minCount fit and bind none, basic groups
// that bind what fits, gangs of a higher priority preempting single pods or a lower gang
// (`disruptionMode` single or all).

/// The step that creates a PodGroup's members and then the PodGroup, or (`group_first`) the
/// PodGroup and then its members, one by one as a controller would (see `cluster.rs`).
fn group_step(group: Value, members: Vec<Value>, group_first: bool) -> Value {
    json!({"kind": "Group", "podGroup": group, "members": members, "podGroupFirst": group_first})
}

fn groups(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![
        priority_class("fid-low", 10, false),
        priority_class("fid-high", 1000, false),
    ];
    let n = count(rng, 2, 4);
    // Nodes of distinct sizes: fewer ties, so the members' nodes compare.
    let mut sizes = vec![2000u64, 3000, 4000, 5000];
    rng.shuffle(&mut sizes);
    for (i, size) in sizes.iter().take(n).enumerate() {
        objects.push(node(&node_name(i)).cpu(&milli(*size)).memory("8Gi").build());
    }
    let preempting = chance(rng, 40);
    if preempting && chance(rng, 50) {
        // A lower gang bound across the nodes.
        let all = chance(rng, 50);
        let min = i32::try_from(n).unwrap_or(2);
        objects.push(pod_group("low", "fid-a", Some(min), all, Some("fid-low")));
        for i in 0..n {
            objects.push(
                pod(&format!("low-{i}"))
                    .on(&node_name(i), rng.u32(..60))
                    .req(&milli(pick(rng, &[1000u64, 1500])), "256Mi")
                    .priority("fid-low")
                    .group("low")
                    .build(),
            );
        }
    } else if preempting {
        for i in 0..n {
            for j in 0..rng.usize(1..=2) {
                objects.push(
                    pod(&format!("e{i}-{j}"))
                        .on(&node_name(i), rng.u32(..60))
                        .req(&milli(pick(rng, &[500u64, 1000])), "256Mi")
                        .priority("fid-low")
                        .build(),
                );
            }
        }
    }
    let steps = if preempting { 1 } else { count(rng, 1, 2) };
    let class = preempting.then_some("fid-high");
    let incoming: Vec<(Value, Vec<Value>)> = (0..steps)
        .map(|g| {
            let name = format!("g{g}");
            let min = count(rng, 2, 5);
            let gang = !chance(rng, 20);
            let size = min + usize::from(chance(rng, 30));
            let cpu = milli(pick(rng, &[500u64, 1000, 1500]));
            let group = pod_group(
                &name,
                "fid-a",
                gang.then(|| i32::try_from(min).unwrap_or(2)),
                chance(rng, 30),
                class,
            );
            let members = group_members(&name, size, &cpu)
                .map(|p| class.map_or(p.clone(), |c| p.priority(c)).build())
                .collect();
            (group, members)
        })
        .collect();
    (objects, group_steps(rng, incoming))
}

/// The `size` identical members `<group>-<i>` of `group`, each requesting `cpu` and 256Mi.
fn group_members(group: &str, size: usize, cpu: &str) -> impl Iterator<Item = PodB> {
    (0..size).map(move |i| pod(&format!("{group}-{i}")).req(cpu, "256Mi").group(group))
}

/// The steps creating `groups` (each a PodGroup and its members), in order. Draws whether each
/// PodGroup comes before its members: last, so the cases drawn before it stay as they were. Only
/// for a gang of exactly minCount members: its cycle starts with the last of them, whereas a
/// basic group or a member beyond minCount joins a cycle or not by milliseconds, in either
/// scheduler.
fn group_steps(rng: &mut Rng, groups: Vec<(Value, Vec<Value>)>) -> Vec<Value> {
    let mut steps: Vec<Value> = groups
        .into_iter()
        .map(|(group, members)| {
            let exact_gang = group["spec"]["schedulingPolicy"]["gang"]["minCount"].as_u64()
                == Some(members.len() as u64);
            let group_first = chance(rng, 40) && exact_gang;
            group_step(group, members, group_first)
        })
        .collect();
    if steps.first().is_some_and(|s| s["podGroupFirst"] == true) {
        // The scheduler starts after the first step is created: a small pod first, so it runs
        // (its informers synced) when the members come.
        steps.insert(0, pod("warm-up").req("10m", "16Mi").build());
    }
    steps
}

/// `n` nodes of distinct CPU sizes (fewer ties: LeastAllocated ranks them when nothing else does).
fn sized_nodes(rng: &mut Rng, n: usize) -> Vec<NodeB> {
    let mut sizes = vec![2000u64, 3000, 4000, 5000];
    rng.shuffle(&mut sizes);
    sizes
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, size)| node(&node_name(i)).cpu(&milli(*size)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// volume-capacity: WaitForFirstConsumer classes of a CSI driver with `storageCapacity: true`,
// CSIStorageCapacity pools of different sizes per node or per zone, claims to provision of one or
// both classes. With StorageCapacityScoring (on from 1.37) VolumeBinding scores the emptiest pool
// highest (against the node sizes LeastAllocated ranks); a pool too small refuses its nodes; a
// static PV on one node makes that node score by the PV instead.

const CAPACITY_DRIVER: &str = "capacity.csi.example.com";
const CAPACITY_CLASSES: [&str; 2] = ["fid-cap-a", "fid-cap-b"];

fn volume_capacity(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = vec![
        storage_class(CAPACITY_CLASSES[0], CAPACITY_DRIVER, true),
        storage_class(CAPACITY_CLASSES[1], CAPACITY_DRIVER, true),
        csi_driver_with(CAPACITY_DRIVER, &[("storageCapacity", true)]),
        // A class whose driver tracks no capacity: its claims are not scored.
        storage_class("fid-wffc", DRIVER, true),
        csi_driver(DRIVER),
    ];
    let n = count(rng, 2, 4);
    for (i, nb) in sized_nodes(rng, n).into_iter().enumerate() {
        objects.push(nb.zone(ZONES[i % 2]).build());
    }
    // Pools per node, or per zone (the nodes of a zone share one).
    let topology: Vec<(&str, String)> = if chance(rng, 25) {
        ZONES[..2]
            .iter()
            .map(|z| ("topology.kubernetes.io/zone", z.to_string()))
            .collect()
    } else {
        (0..n)
            .map(|i| ("kubernetes.io/hostname", node_name(i)))
            .collect()
    };
    let sizes = ["1Gi", "2Gi", "3Gi", "4Gi", "5Gi", "8Gi", "10Gi", "20Gi"];
    for (t, (key, value)) in topology.iter().enumerate() {
        for class in CAPACITY_CLASSES {
            // Some places have no pool of a class.
            if chance(rng, 10) {
                continue;
            }
            let capacity = pick(rng, &sizes);
            // The largest volume, below the capacity: what the filter compares a claim with.
            let max = chance(rng, 20).then(|| pick(rng, &["1Gi", "2Gi"]));
            objects.push(storage_capacity(
                &format!("{class}-{t}"),
                class,
                (key, value),
                capacity,
                max,
            ));
        }
    }
    let mut claim = 0;
    let incoming: Vec<Value> = (0..count(rng, 1, 2))
        .map(|p| {
            let vols: Vec<Value> = (0..count(rng, 1, 2))
                .map(|_| {
                    let name = format!("c{claim}");
                    claim += 1;
                    let class = match rng.u32(..10) {
                        0 => "fid-wffc",
                        1..=5 => CAPACITY_CLASSES[0],
                        _ => CAPACITY_CLASSES[1],
                    };
                    let size = pick(rng, &["1Gi", "2Gi"]);
                    objects.push(pvc(&name, "fid-a", class, size, &["ReadWriteOnce"], None));
                    claim_volume(&name)
                })
                .collect();
            pod(&format!("incoming-{p}"))
                .req("500m", "256Mi")
                .set("volumes", json!(vols))
                .build()
        })
        .collect();
    if chance(rng, 25) {
        // A static PV for the first claim on one node: that node scores by it.
        objects.push(pv(
            "pv-static",
            CAPACITY_CLASSES[0],
            pick(rng, &["2Gi", "5Gi"]),
            &["ReadWriteOnce"],
            Some((
                "kubernetes.io/hostname",
                &[node_name(rng.usize(..n)).as_str()],
            )),
            &[],
            None,
        ));
    }
    (objects, incoming)
}

// ---------------------------------------------------------------------------------------------
// volume-drivers: VolumeLimitScaling (on from 1.37): a CSIDriver setting
// `preventPodSchedulingIfMissing` refuses a pod with a new volume of it on nodes whose CSINode is
// missing or does not list the driver; unset or false (or no CSIDriver) it does not. Volumes bound
// to PVs of either driver, or claims its class would provision; attach limits on some nodes.

const OTHER_DRIVER: &str = "other.csi.example.com";

fn volume_drivers(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let prevent = pick(rng, &[None, Some(false), Some(true), Some(true)]);
    let fields: Vec<(&str, bool)> = prevent
        .map(|p| ("preventPodSchedulingIfMissing", p))
        .into_iter()
        .collect();
    let mut objects = vec![
        storage_class("fid-wffc", DRIVER, true),
        storage_class("fid-other", OTHER_DRIVER, true),
        csi_driver_with(DRIVER, &fields),
    ];
    // The other driver never opts in (else a pod missing both would get either message).
    if chance(rng, 50) {
        objects.push(csi_driver_with(
            OTHER_DRIVER,
            &[("preventPodSchedulingIfMissing", false)],
        ));
    }
    let n = count(rng, 2, 4);
    let limit = chance(rng, 30).then(|| rng.i32(1..=2));
    // How far the driver is rolled out: on no node, about half of them, or all of them.
    let rollout = pick(rng, &[0u32, 50, 100]);
    for (i, nb) in sized_nodes(rng, n).into_iter().enumerate() {
        let name = node_name(i);
        objects.push(nb.build());
        // Some nodes have no CSINode at all.
        if chance(rng, 20) {
            continue;
        }
        let mut drivers = Vec::new();
        if chance(rng, rollout) {
            drivers.push((DRIVER, limit));
        }
        if chance(rng, 50) {
            drivers.push((OTHER_DRIVER, None));
        }
        objects.push(csi_node_drivers(&name, &drivers));
    }
    let rwo = ["ReadWriteOnce"];
    let vols: Vec<Value> = (0..count(rng, 1, 2))
        .map(|c| {
            let claim = format!("c{c}");
            match rng.u32(..4) {
                0 => objects.extend(bound_claim(&claim, &rwo, None, &[])),
                1 => {
                    let [mut v, c] = bound_claim(&claim, &rwo, None, &[]);
                    v["spec"]["csi"]["driver"] = json!(OTHER_DRIVER);
                    objects.extend([v, c]);
                }
                2 => objects.push(pvc(&claim, "fid-a", "fid-wffc", "1Gi", &rwo, None)),
                _ => objects.push(pvc(&claim, "fid-a", "fid-other", "1Gi", &rwo, None)),
            }
            claim_volume(&claim)
        })
        .collect();
    let p = pod("incoming-0")
        .req("500m", "256Mi")
        .set("volumes", json!(vols));
    (objects, vec![p.build()])
}

// ---------------------------------------------------------------------------------------------
// declared-features: NodeDeclaredFeatures (GA in 1.37): nodes declaring features in
// `status.declaredFeatures`; pods whose container (or sidecar) restarts all containers on an
// exit code need `RestartAllContainersOnContainerExits` and run only where it is declared; a
// plain `Restart` rule needs nothing.

const RESTART_ALL: &str = "RestartAllContainersOnContainerExits";

fn declared_features(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let mut objects = Vec::new();
    let n = count(rng, 2, 4);
    for nb in sized_nodes(rng, n) {
        let mut nb = nb;
        if chance(rng, 35) {
            nb = nb.declared_feature(RESTART_ALL);
        }
        for other in [
            "GuaranteedQoSPodCPUResize",
            "UserNamespacesHostNetworkSupport",
        ] {
            if chance(rng, 30) {
                nb = nb.declared_feature(other);
            }
        }
        objects.push(nb.build());
    }
    let rule =
        |action: &str| json!([{"action": action, "exitCodes": {"operator": "In", "values": [42]}}]);
    let incoming = (0..count(rng, 1, 2))
        .map(|p| {
            let pb = pod(&format!("incoming-{p}")).req(&milli(pick(rng, &[500u64, 1500])), "256Mi");
            match rng.u32(..5) {
                0 | 1 => pb
                    .container("restartPolicy", json!("Never"))
                    .container("restartPolicyRules", rule("RestartAllContainers")),
                2 => pb.set(
                    "initContainers",
                    json!([{"name": "sidecar", "image": PAUSE_IMAGE, "restartPolicy": "Always",
                        "restartPolicyRules": rule("RestartAllContainers")}]),
                ),
                3 => pb
                    .container("restartPolicy", json!("Never"))
                    .container("restartPolicyRules", rule("Restart")),
                _ => pb,
            }
            .build()
        })
        .collect();
    (objects, incoming)
}

// ---------------------------------------------------------------------------------------------
// groups-topology: TopologyAwareWorkloadScheduling (alpha in 1.37, on GenericWorkload) in both
// schedulers: PodGroups whose `schedulingConstraints.topology` names the rack label are placed
// whole inside one rack (one placement per rack; a node without the label is in none). Racks of
// 1-3 nodes of distinct sizes, some partly filled; a group aimed to fit in exactly one rack, in
// several (the placement scorers decide: members placed, then MostAllocated over the whole rack),
// or in none. Sometimes a group without constraints (one placement of all nodes) and a plain pod.

/// The node label the constrained groups' topology names.
pub const RACK_LABEL: &str = "fidelity.ksched.io/rack";

/// How many racks a constrained group is aimed to fit in (whole, as the generator counts room).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RackFit {
    One,
    Several,
    None,
}

fn groups_topology(rng: &mut Rng) -> (Vec<Value>, Vec<Value>) {
    let first_aim = pick(rng, &[RackFit::One, RackFit::Several, RackFit::None]);
    // A group that fits nowhere reports the status of upstream's first placement, in Go's map
    // order: with one rack that is deterministic.
    let racks = if first_aim == RackFit::None && chance(rng, 70) {
        1
    } else {
        count(rng, 2, 4)
    };
    // Distinct sizes: fewer ties, within a rack and between racks.
    let mut sizes = vec![1000u64, 1500, 2000, 2500, 3000, 3500, 4000, 5000, 6000];
    rng.shuffle(&mut sizes);
    let mut sizes = sizes.into_iter();
    let mut objects = Vec::new();
    let mut existing = Vec::new();
    // The free millicores of each node, per rack.
    let mut free: Vec<Vec<u64>> = Vec::new();
    for rack in 0..racks {
        let nodes = count(rng, 1, if racks == 4 { 2 } else { 3 });
        // A partly filled rack: MostAllocated prefers it for a group that fits elsewhere too.
        let loaded = chance(rng, 40);
        let mut rack_free = Vec::new();
        for _ in 0..nodes {
            let name = node_name(objects.len());
            let size = sizes.next().unwrap_or(2000);
            objects.push(
                node(&name)
                    .cpu(&milli(size))
                    .memory("8Gi")
                    .label(RACK_LABEL, &format!("r{rack}"))
                    .build(),
            );
            let used = if loaded {
                pick(rng, &[500u64, 1000, 1500]).min(size)
            } else {
                0
            };
            if used > 0 {
                existing.push(
                    pod(&format!("e-{name}"))
                        .on(&name, rng.u32(..60))
                        .req(&milli(used), "256Mi")
                        .build(),
                );
            }
            rack_free.push(size - used);
        }
        free.push(rack_free);
    }
    // A node in no rack, with room the constrained groups cannot use; always when one rack
    // alone is short of room.
    if racks == 1 || chance(rng, 25) {
        objects.push(
            node(&node_name(objects.len()))
                .cpu("8000m")
                .memory("8Gi")
                .build(),
        );
    }
    objects.extend(existing);

    let mut groups: Vec<(Value, Vec<Value>)> = (0..count(rng, 1, 2))
        .map(|g| {
            let name = format!("g{g}");
            // The second group is aimed at the racks as they were before the first.
            let aim = if g == 0 {
                first_aim
            } else {
                pick(rng, &[RackFit::One, RackFit::Several, RackFit::None])
            };
            let (cpu, min) = aimed_group(rng, &free, aim);
            let gang = !chance(rng, 20);
            let size = min + usize::from(chance(rng, 30));
            let group = topology_constrained(
                pod_group(
                    &name,
                    "fid-a",
                    gang.then(|| i32::try_from(min).unwrap_or(2)),
                    false,
                    None,
                ),
                RACK_LABEL,
            );
            let members = group_members(&name, size, &milli(cpu))
                .map(|p| p.build())
                .collect();
            (group, members)
        })
        .collect();
    if chance(rng, 20) {
        // Without constraints: with the gate on, one placement of every node.
        let name = format!("g{}", groups.len());
        let min = count(rng, 2, 3);
        let group = pod_group(
            &name,
            "fid-a",
            Some(i32::try_from(min).unwrap_or(2)),
            false,
            None,
        );
        let members = group_members(&name, min, "500m")
            .map(|p| p.build())
            .collect();
        groups.push((group, members));
    }
    let mut incoming = group_steps(rng, groups);
    if chance(rng, 25) {
        incoming.push(pod("incoming-0").req("500m", "256Mi").build());
    }
    (objects, incoming)
}

/// Each member's millicores and the group's minCount (2-5) for a group aimed at `aim`, given the
/// free millicores of each node per rack: the members of one size a rack holds are the sum over
/// its nodes. The first size (in random order) that allows the aim; else a random group.
fn aimed_group(rng: &mut Rng, free: &[Vec<u64>], aim: RackFit) -> (u64, usize) {
    let mut cpus = vec![500u64, 1000, 1500, 2000];
    rng.shuffle(&mut cpus);
    for cpu in cpus {
        let mut held: Vec<usize> = free
            .iter()
            .map(|rack| rack.iter().map(|f| (f / cpu) as usize).sum())
            .collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let most = held.first().copied().unwrap_or(0);
        let second = held.get(1).copied().unwrap_or(0);
        let (low, high) = match aim {
            RackFit::One => ((second + 1).max(2), most.min(5)),
            RackFit::Several => (2, second.min(5)),
            RackFit::None => ((most + 1).max(2), 5),
        };
        if low <= high {
            return (cpu, rng.usize(low..=high));
        }
    }
    (1000, count(rng, 2, 5))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream makes no placement for a constrained group when no node has the rack label (and
    /// then has no status to report): every case has a rack, and a group confined to it.
    #[test]
    fn every_groups_topology_case_has_a_rack_and_a_group_confined_to_it() {
        for case in corpus(17, crate::FULL_PER_FAMILY)
            .into_iter()
            .filter(|c| c.family == GROUPS_TOPOLOGY)
        {
            let racked = case
                .objects
                .iter()
                .any(|o| o["kind"] == "Node" && o["metadata"]["labels"][RACK_LABEL].is_string());
            let confined = case.incoming.iter().any(|s| {
                s["podGroup"]["spec"]["schedulingConstraints"]["topology"][0]["key"] == RACK_LABEL
            });
            assert!(racked && confined, "{}: {:?}", case.name, case.objects);
        }
    }
}
