use super::common::default_selector;
use super::filtering::{ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH};
use super::*;
use crate::framework::args::decode;
use serde_json::json;

#[test]
fn args() {
    assert_eq!(
        decode::<PodTopologySpreadArgs>(None),
        Ok(json!({"defaultConstraints": [], "defaultingType": "System"}))
    );
    let c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"});
    assert!(
        decode::<PodTopologySpreadArgs>(Some(
            &json!({"defaultingType": "List", "defaultConstraints": [c]})
        ))
        .is_ok()
    );
    let e = decode::<PodTopologySpreadArgs>(Some(&json!({"defaultConstraints": [c]}))).unwrap_err();
    assert_eq!(e[0].path, "defaultingType");
    let e = decode::<PodTopologySpreadArgs>(Some(
        &json!({"defaultingType": "List", "defaultConstraints": [c, c]}),
    ))
    .unwrap_err();
    assert_eq!(
        e[0].to_string(),
        "defaultConstraints[1]: Duplicate value: {zone, ScheduleAnyway}"
    );
    let bad = json!({"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Never"});
    let e = decode::<PodTopologySpreadArgs>(Some(
        &json!({"defaultingType": "List", "defaultConstraints": [bad]}),
    ))
    .unwrap_err();
    assert_eq!(e.len(), 3);
    assert!(decode::<PodTopologySpreadArgs>(Some(&json!({"defaultingType": "Other"}))).is_err());
}

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::framework::interface::{
    Code, CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, Status,
};
use crate::framework::listers::{REPLICA_SETS, SERVICES};
use crate::framework::testing::{
    HOSTNAME as HOST, NodeBuilder, PodBuilder, ZONE, label_selector, pre_score_and_score,
    score_values, snapshot_with as snapshot, spread_constraint, string_map, zone_nodes as nodes,
};
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, Snapshot};
const WEB: &[(&str, &str)] = &[("app", "web")];

fn plugin() -> PodTopologySpread {
    PodTopologySpread::new(
        PodTopologySpreadArgs {
            defaulting_type: SYSTEM_DEFAULTING.into(),
            ..Default::default()
        },
        Arc::new(Listers::default()),
    )
}

fn zone_node(name: &str, zone: &str) -> NodeBuilder {
    NodeBuilder::new(name).label(ZONE, zone)
}

/// The incoming pod "p", labelled app=web.
fn web_pod() -> PodBuilder {
    PodBuilder::new("p").label("app", "web")
}

fn web_on(name: &str, node: &str) -> Pod {
    PodBuilder::new(name).label("app", "web").node(node).build()
}

fn run_filter(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Result<Vec<Code>, Status> {
    let mut state = CycleState::new();
    let (_, s) = pl.pre_filter(&mut state, pod, snap);
    if !s.is_success() {
        return Err(s);
    }
    Ok(filter_codes(pl, &state, pod, snap))
}

/// Filter codes for n1..n4, checking the messages match the codes.
fn filter_codes(
    pl: &PodTopologySpread,
    state: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Vec<Code> {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| {
            let s = pl.filter(state, pod, snap.get(n).expect("node"));
            let want_msg = match s.code() {
                Code::Success => "",
                Code::Unschedulable => ERR_REASON_CONSTRAINTS_NOT_MATCH,
                Code::UnschedulableAndUnresolvable => ERR_REASON_NODE_LABEL_NOT_MATCH,
                other => panic!("{n}: {other:?} {s:?}"),
            };
            assert_eq!(s.message(), want_msg, "{n}");
            s.code()
        })
        .collect()
}

const OK: Code = Code::Success;
const NO: Code = Code::Unschedulable;
const LBL: Code = Code::UnschedulableAndUnresolvable;

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        nodes: Vec<Node>,
        existing: Vec<Pod>,
        want: [Code; 4],
    }
    let zone1 = || spread_constraint(1, ZONE, "DoNotSchedule", Some(WEB));
    let with_nodes = |n1: NodeBuilder, n3: NodeBuilder| {
        vec![
            n1.build(),
            zone_node("n2", "a").build(),
            n3.build(),
            NodeBuilder::new("n4").build(),
        ]
    };
    let cases = vec![
        Case {
            name: "maxSkew 1 by zone: the fuller zone is rejected, a node without the key is unresolvable",
            pod: web_pod().spread(zone1()),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w2", "n2"), web_on("w3", "n3")],
            want: [NO, NO, OK, LBL],
        },
        Case {
            name: "a pod not matching its own selector does not add itself",
            pod: PodBuilder::new("p").spread(zone1()),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w2", "n2"), web_on("w3", "n3")],
            want: [OK, OK, OK, LBL],
        },
        Case {
            name: "minDomains above the number of domains makes the global minimum 0",
            pod: web_pod().spread(TopologySpreadConstraint {
                min_domains: Some(3),
                ..zone1()
            }),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w3", "n3")],
            want: [NO, NO, NO, LBL],
        },
        Case {
            name: "minDomains met: the usual minimum",
            pod: web_pod().spread(TopologySpreadConstraint {
                min_domains: Some(2),
                ..zone1()
            }),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w3", "n3")],
            want: [OK, OK, OK, LBL],
        },
        Case {
            name: "nodeAffinityPolicy Honor (default): zones the pod cannot go to are not domains",
            pod: web_pod().node_selector(ZONE, "a").spread(zone1()),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w2", "n1")],
            want: [OK, OK, OK, LBL],
        },
        Case {
            name: "nodeAffinityPolicy Ignore: the empty zone b counts",
            pod: web_pod()
                .node_selector(ZONE, "a")
                .spread(TopologySpreadConstraint {
                    node_affinity_policy: Some("Ignore".into()),
                    ..zone1()
                }),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1"), web_on("w2", "n1")],
            want: [NO, NO, OK, LBL],
        },
        Case {
            name: "nodeTaintsPolicy Ignore (default): a tainted empty zone counts",
            pod: web_pod().spread(zone1()),
            nodes: with_nodes(
                zone_node("n1", "a"),
                zone_node("n3", "b").taint("k", "v", "NoSchedule"),
            ),
            existing: vec![web_on("w1", "n1")],
            want: [NO, NO, OK, LBL],
        },
        Case {
            name: "nodeTaintsPolicy Honor: an untolerated tainted node is not a domain",
            pod: web_pod().spread(TopologySpreadConstraint {
                node_taints_policy: Some("Honor".into()),
                ..zone1()
            }),
            nodes: with_nodes(
                zone_node("n1", "a"),
                zone_node("n3", "b").taint("k", "v", "NoSchedule"),
            ),
            existing: vec![web_on("w1", "n1")],
            want: [OK, OK, OK, LBL],
        },
        Case {
            name: "nodeTaintsPolicy Honor with a toleration: the node counts again",
            pod: web_pod()
                .toleration("k", "Exists", "", "")
                .spread(TopologySpreadConstraint {
                    node_taints_policy: Some("Honor".into()),
                    ..zone1()
                }),
            nodes: with_nodes(
                zone_node("n1", "a"),
                zone_node("n3", "b").taint("k", "v", "NoSchedule"),
            ),
            existing: vec![web_on("w1", "n1")],
            want: [NO, NO, OK, LBL],
        },
        Case {
            name: "matchLabelKeys: only pods of the same revision count",
            pod: web_pod()
                .label("rev", "2")
                .spread(TopologySpreadConstraint {
                    match_label_keys: Some(vec!["rev".into()]),
                    ..zone1()
                }),
            nodes: nodes(),
            existing: vec![
                PodBuilder::new("o1")
                    .label("app", "web")
                    .label("rev", "1")
                    .node("n1")
                    .build(),
                PodBuilder::new("o2")
                    .label("app", "web")
                    .label("rev", "1")
                    .node("n2")
                    .build(),
                PodBuilder::new("c1")
                    .label("app", "web")
                    .label("rev", "2")
                    .node("n3")
                    .build(),
            ],
            want: [OK, OK, NO, LBL],
        },
        Case {
            name: "terminating pods and pods of other namespaces are not counted",
            pod: web_pod().spread(zone1()),
            nodes: nodes(),
            existing: vec![
                PodBuilder::new("t")
                    .label("app", "web")
                    .node("n1")
                    .terminating()
                    .build(),
                PodBuilder::new("o")
                    .namespace("other")
                    .label("app", "web")
                    .node("n1")
                    .build(),
            ],
            want: [OK, OK, OK, LBL],
        },
        Case {
            name: "zone and hostname constraints together",
            pod: web_pod().spread(zone1()).spread(spread_constraint(
                1,
                HOST,
                "DoNotSchedule",
                Some(WEB),
            )),
            nodes: nodes(),
            existing: vec![web_on("w1", "n1")],
            want: [NO, NO, OK, LBL],
        },
        Case {
            name: "ScheduleAnyway constraints never filter",
            pod: web_pod()
                .spread(spread_constraint(1, ZONE, "ScheduleAnyway", Some(WEB)))
                .spread(zone1()),
            nodes: nodes(),
            existing: vec![web_on("w1", "n3")],
            want: [OK, OK, NO, LBL],
        },
    ];
    let pl = plugin();
    for c in cases {
        let snap = snapshot(c.nodes, c.existing);
        let got = run_filter(&pl, &c.pod.info(), &snap)
            .unwrap_or_else(|s| panic!("{}: prefilter {s:?}", c.name));
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn pre_filter_skips_without_hard_constraints() {
    let pl = plugin();
    let snap = snapshot(nodes(), vec![]);
    let only_soft = PodBuilder::new("p")
        .spread(spread_constraint(1, ZONE, "ScheduleAnyway", Some(WEB)))
        .info();
    assert_eq!(
        run_filter(&pl, &only_soft, &snap).unwrap_err().code(),
        Code::Skip
    );
    assert_eq!(
        run_filter(&pl, &PodBuilder::new("p").info(), &snap)
            .unwrap_err()
            .code(),
        Code::Skip
    );
}

#[test]
fn add_and_remove_pod_move_the_critical_paths() {
    let pl = plugin();
    let w1 = web_on("w1", "n1");
    let snap = snapshot(
        nodes(),
        vec![w1.clone(), web_on("w2", "n2"), web_on("w3", "n3")],
    );
    let pod = web_pod()
        .spread(spread_constraint(1, ZONE, "DoNotSchedule", Some(WEB)))
        .info();
    let mut state = CycleState::new();
    assert!(pl.pre_filter(&mut state, &pod, &snap).1.is_success());
    assert_eq!(filter_codes(&pl, &state, &pod, &snap), [NO, NO, OK, LBL]);

    let n1 = snap.get("n1").expect("n1").clone();
    let mut sim = state.clone();
    assert!(
        pl.remove_pod(&mut sim, &pod, &AssignedPod::new(w1.clone()), &n1)
            .is_success()
    );
    assert_eq!(filter_codes(&pl, &sim, &pod, &snap), [OK, OK, OK, LBL]);
    // The original state is unchanged.
    assert_eq!(filter_codes(&pl, &state, &pod, &snap), [NO, NO, OK, LBL]);

    // Adding two pods in zone b makes zone a the emptier one.
    let n3 = snap.get("n3").expect("n3").clone();
    for name in ["x1", "x2"] {
        let p = AssignedPod::new(web_on(name, "n3"));
        assert!(pl.add_pod(&mut sim, &pod, &p, &n3).is_success());
    }
    assert_eq!(filter_codes(&pl, &sim, &pod, &snap), [OK, OK, NO, LBL]);

    // A pod of another namespace changes nothing.
    let other = AssignedPod::new(
        PodBuilder::new("o")
            .namespace("x")
            .label("app", "web")
            .build(),
    );
    assert!(pl.remove_pod(&mut sim, &pod, &other, &n3).is_success());
    assert_eq!(filter_codes(&pl, &sim, &pod, &snap), [OK, OK, NO, LBL]);
}

#[test]
fn critical_paths_keep_the_two_smallest() {
    let mut p = filtering::CriticalPaths::default();
    for (v, n) in [("a", 3), ("b", 1), ("c", 2)] {
        p.update(v, n);
    }
    assert_eq!(p.min(), 1);
    p.update("b", 5);
    // "b" was tracked: its new count moves it behind "c".
    assert_eq!(p.min(), 2);
}

/// PreScore, Score and NormalizeScore on n1..n4; `None` when PreScore skipped.
fn run_score(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Option<Vec<i64>> {
    let nodes: Vec<Arc<NodeInfo>> = ["n1", "n2", "n3", "n4"]
        .iter()
        .filter_map(|n| snap.get(n).cloned())
        .collect();
    pre_score_and_score(pl, pod, snap, &nodes).map(|s| score_values(&s))
}

#[test]
fn score_table() {
    let pl = plugin();
    // Zone: weight ln(2 zones + 2); n1, n2 (zone a, 2 pods) round(2*1.386)=3, n3 0; n4 lacks the
    // key and is ignored (0). Normalized: 100*(3+0-s)/3.
    let pod = web_pod()
        .spread(spread_constraint(1, ZONE, "ScheduleAnyway", Some(WEB)))
        .info();
    let snap = snapshot(nodes(), vec![web_on("w1", "n1"), web_on("w2", "n1")]);
    assert_eq!(run_score(&pl, &pod, &snap), Some(vec![0, 0, 100, 0]));

    // Hostname, maxSkew 2: weight ln(4 nodes + 2); counts 2,1,0,0 -> round(2*1.79+1)=5,
    // round(1.79+1)=3, 1, 1 -> 100*(5+1-s)/5.
    let pod = web_pod()
        .spread(spread_constraint(2, HOST, "ScheduleAnyway", Some(WEB)))
        .info();
    let snap = snapshot(
        nodes(),
        vec![web_on("w1", "n1"), web_on("w2", "n1"), web_on("w3", "n2")],
    );
    assert_eq!(run_score(&pl, &pod, &snap), Some(vec![20, 60, 100, 100]));

    // No matching pods anywhere: every node gets 100.
    let snap = snapshot(nodes(), vec![]);
    assert_eq!(run_score(&pl, &pod, &snap), Some(vec![100, 100, 100, 100]));

    // Only DoNotSchedule constraints: nothing to score.
    let hard = PodBuilder::new("p")
        .spread(spread_constraint(1, ZONE, "DoNotSchedule", Some(WEB)))
        .info();
    assert_eq!(run_score(&pl, &hard, &snap), None);
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

fn replica_set(name: &str, labels: &[(&str, &str)]) -> ReplicaSet {
    ReplicaSet {
        metadata: meta(name),
        spec: ReplicaSetSpec {
            selector: label_selector(labels, &[]),
            ..Default::default()
        },
        status: None,
    }
}

fn service(name: &str, selector: &[(&str, &str)]) -> Service {
    Service {
        metadata: meta(name),
        spec: Some(ServiceSpec {
            selector: Some(string_map(selector)),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn default_selector_from_services_and_controller() {
    let listers = Listers::default();
    listers
        .store(&REPLICA_SETS)
        .apply(replica_set("rs1", &[("app", "web"), ("hash", "h1")]));
    listers
        .store(&SERVICES)
        .apply(service("svc", &[("tier", "front")]));
    listers
        .store(&SERVICES)
        .apply(service("unrelated", &[("app", "db")]));
    let pod = web_pod()
        .label("hash", "h1")
        .label("tier", "front")
        .controller("apps/v1", "ReplicaSet", "rs1")
        .build();
    let sel = default_selector(&pod, &listers);
    let labels = string_map;
    assert!(sel.matches(Some(&labels(&[
        ("app", "web"),
        ("hash", "h1"),
        ("tier", "front")
    ]))));
    assert!(!sel.matches(Some(&labels(&[("app", "web"), ("hash", "h1")]))));
    assert!(!sel.matches(Some(&labels(&[("hash", "h1"), ("tier", "front")]))));
    // A pod without services or a known controller has an empty selector.
    assert!(default_selector(&PodBuilder::new("q").build(), &listers).is_empty());
    let orphan = PodBuilder::new("q")
        .controller("apps/v1", "ReplicaSet", "gone")
        .build();
    assert!(default_selector(&orphan, &listers).is_empty());
}

#[test]
fn system_default_constraints_score_replica_set_pods() {
    let listers = Arc::new(Listers::default());
    listers.store(&REPLICA_SETS).apply(replica_set("rs1", WEB));
    let pl = PodTopologySpread::new(
        PodTopologySpreadArgs {
            defaulting_type: SYSTEM_DEFAULTING.into(),
            ..Default::default()
        },
        listers,
    );
    let sibling = |name: &str, node: &str| {
        PodBuilder::new(name)
            .label("app", "web")
            .controller("apps/v1", "ReplicaSet", "rs1")
            .node(node)
            .build()
    };
    let snap = snapshot(nodes(), vec![sibling("s1", "n1")]);
    let pod = web_pod().controller("apps/v1", "ReplicaSet", "rs1").info();
    // Only ScheduleAnyway defaults: no filtering.
    assert_eq!(run_filter(&pl, &pod, &snap).unwrap_err().code(), Code::Skip);
    // hostname (maxSkew 3, weight ln 6) + zone (maxSkew 5, weight ln 5: zones a, b and "" since
    // system defaults do not require every key): n1 round(1.79+2 + 1.61+4)=9, n2 round(2+5.61)=8,
    // n3 2+4=6, n4 2 (no zone) -> 100*(9+2-s)/9.
    assert_eq!(run_score(&pl, &pod, &snap), Some(vec![22, 33, 55, 100]));

    // A pod with its own constraints ignores the defaults.
    let own = web_pod()
        .controller("apps/v1", "ReplicaSet", "rs1")
        .spread(spread_constraint(1, ZONE, "DoNotSchedule", Some(WEB)))
        .info();
    assert_eq!(run_score(&pl, &own, &snap), None);

    // A pod without a controller or service gets no default constraints.
    assert_eq!(run_score(&pl, &PodBuilder::new("x").info(), &snap), None);
}

#[test]
fn list_defaulting_applies_hard_default_constraints() {
    let listers = Arc::new(Listers::default());
    listers.store(&SERVICES).apply(service("svc", WEB));
    let pl = PodTopologySpread::new(
        PodTopologySpreadArgs {
            defaulting_type: LIST_DEFAULTING.into(),
            default_constraints: vec![spread_constraint(1, ZONE, "DoNotSchedule", None)],
        },
        listers,
    );
    let snap = snapshot(
        nodes(),
        vec![web_on("w1", "n1"), web_on("w2", "n2"), web_on("w3", "n3")],
    );
    let pod = web_pod().info();
    assert_eq!(run_filter(&pl, &pod, &snap), Ok(vec![NO, NO, OK, LBL]));
}

#[test]
fn registered_with_the_owner_informers() {
    let r = crate::framework::registry::Registry::in_tree();
    let informers = r.informers_for([names::POD_TOPOLOGY_SPREAD]);
    use crate::framework::listers::{
        Informer, REPLICA_SETS, REPLICATION_CONTROLLERS, SERVICES, STATEFUL_SETS,
    };
    let owners: [Informer; 4] = [
        &SERVICES,
        &REPLICATION_CONTROLLERS,
        &REPLICA_SETS,
        &STATEFUL_SETS,
    ];
    for i in owners {
        assert!(informers.contains(&i), "{i:?}");
    }
}
