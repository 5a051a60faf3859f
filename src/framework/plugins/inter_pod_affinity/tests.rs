use super::filtering::{
    ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};
use super::*;
use crate::framework::args::decode;
use k8s_openapi::api::core::v1::PodAffinityTerm;
use serde_json::json;

#[test]
fn args() {
    assert_eq!(
        decode::<InterPodAffinityArgs>(None),
        Ok(json!({"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": false}))
    );
    assert_eq!(
        decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeight": 0}))),
        Ok(json!({"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": false}))
    );
    let e =
        decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeight": 101}))).unwrap_err();
    assert_eq!(
        e[0].to_string(),
        "hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]"
    );
    assert!(decode::<InterPodAffinityArgs>(Some(&json!({"hardPodAffinityWeigth": 1}))).is_err());
}

use k8s_openapi::api::core::v1::Pod;

use super::filtering::PRE_FILTER_STATE_KEY;
use crate::framework::interface::{
    Code, CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, Status,
};
use crate::framework::testing::{
    HOSTNAME as HOST, PodBuilder, ZONE, label_selector, listers_with_namespaces, pod_term,
    pre_score_and_score, snapshot_with as snapshot, zone_nodes as nodes,
};
use crate::framework::types::{AssignedPod, PodInfo, Snapshot};

/// A node's Filter outcome: (node, code, message).
type NodeOutcome = (String, Code, String);

fn plugin(args: InterPodAffinityArgs) -> InterPodAffinity {
    InterPodAffinity::new(args, Arc::new(Listers::default()))
}

/// PreFilter then Filter on every node, in node-name order: (code, message) per node, or the
/// PreFilter status when it did not succeed.
fn run_filter(
    pl: &InterPodAffinity,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Result<Vec<NodeOutcome>, Status> {
    let mut state = CycleState::new();
    let (_, s) = pl.pre_filter(&mut state, pod, snap);
    if !s.is_success() {
        return Err(s);
    }
    Ok(filter_nodes(pl, &state, pod, snap))
}

fn filter_nodes(
    pl: &InterPodAffinity,
    state: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Vec<NodeOutcome> {
    let mut out: Vec<NodeOutcome> = snap
        .nodes()
        .iter()
        .map(|n| {
            let s = pl.filter(state, pod, n);
            (n.name().to_string(), s.code(), s.message())
        })
        .collect();
    out.sort();
    out
}

fn ok(n: &str) -> NodeOutcome {
    (n.to_string(), Code::Success, String::new())
}

fn affinity_miss(n: &str) -> NodeOutcome {
    (
        n.to_string(),
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_AFFINITY_RULES_NOT_MATCH.to_string(),
    )
}

fn anti_miss(n: &str) -> NodeOutcome {
    (
        n.to_string(),
        Code::Unschedulable,
        ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH.to_string(),
    )
}

fn existing_miss(n: &str) -> NodeOutcome {
    (
        n.to_string(),
        Code::Unschedulable,
        ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH.to_string(),
    )
}

/// The Filter outcome on n1..n4, one of `ok`, `affinity_miss`, `anti_miss`, `existing_miss` each.
fn want(per_node: [fn(&str) -> NodeOutcome; 4]) -> Vec<NodeOutcome> {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .zip(per_node)
        .map(|(n, f)| f(n))
        .collect()
}

/// A term selecting app=web pods by `topology_key`.
fn web_term(topology_key: &str) -> PodAffinityTerm {
    pod_term(&[("app", "web")], topology_key)
}

fn web_on(name: &str, node: &str) -> Pod {
    PodBuilder::new(name).label("app", "web").node(node).build()
}

#[test]
fn pre_filter_skips_pods_without_terms_when_no_existing_anti_affinity() {
    let pl = plugin(InterPodAffinityArgs::default());
    let snap = snapshot(nodes(), vec![web_on("w1", "n1")]);
    let s = run_filter(&pl, &PodBuilder::new("p").info(), &snap).unwrap_err();
    assert_eq!(s.code(), Code::Skip);

    // An existing pod's anti-affinity in another namespace does not apply to this pod.
    let snap = snapshot(
        nodes(),
        vec![
            PodBuilder::new("e")
                .namespace("other")
                .node("n3")
                .required_pod_anti_affinity(web_term(HOST))
                .build(),
        ],
    );
    let pod = PodBuilder::new("p").label("app", "web").info();
    assert_eq!(run_filter(&pl, &pod, &snap).unwrap_err().code(), Code::Skip);
}

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        pod: Pod,
        existing: Vec<Pod>,
        want: Vec<NodeOutcome>,
    }
    let cases = vec![
        Case {
            name: "required affinity on hostname: only the node hosting a match",
            pod: PodBuilder::new("p")
                .required_pod_affinity(web_term(HOST))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: want([ok, affinity_miss, affinity_miss, affinity_miss]),
        },
        Case {
            name: "required affinity on zone: every node of the matching pod's zone",
            pod: PodBuilder::new("p")
                .required_pod_affinity(web_term(ZONE))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: want([ok, ok, affinity_miss, affinity_miss]),
        },
        Case {
            name: "affinity with two terms needs one pod matching both",
            pod: PodBuilder::new("p")
                .required_pod_affinity(web_term(ZONE))
                .required_pod_affinity(pod_term(&[("tier", "front")], ZONE))
                .build(),
            existing: vec![
                web_on("w1", "n1"),
                PodBuilder::new("f1")
                    .label("tier", "front")
                    .node("n3")
                    .build(),
            ],
            // No pod matches both terms, and the incoming pod does not match them itself.
            want: want([affinity_miss, affinity_miss, affinity_miss, affinity_miss]),
        },
        Case {
            name: "first pod of a self-affine group may go anywhere with the topology label",
            pod: PodBuilder::new("p")
                .label("app", "web")
                .required_pod_affinity(web_term(ZONE))
                .build(),
            existing: vec![],
            want: want([ok, ok, ok, affinity_miss]),
        },
        Case {
            name: "self-affinity does not apply once a matching pod exists",
            pod: PodBuilder::new("p")
                .label("app", "web")
                .required_pod_affinity(web_term(ZONE))
                .build(),
            existing: vec![web_on("w1", "n3")],
            want: want([affinity_miss, affinity_miss, ok, affinity_miss]),
        },
        Case {
            name: "a matching pod in another namespace does not count",
            pod: PodBuilder::new("p")
                .required_pod_affinity(web_term(HOST))
                .build(),
            existing: vec![
                PodBuilder::new("w1")
                    .namespace("other")
                    .label("app", "web")
                    .node("n1")
                    .build(),
            ],
            want: want([affinity_miss, affinity_miss, affinity_miss, affinity_miss]),
        },
        Case {
            name: "term namespaces select the other namespace",
            pod: PodBuilder::new("p")
                .required_pod_affinity(PodAffinityTerm {
                    namespaces: Some(vec!["other".into()]),
                    ..web_term(HOST)
                })
                .build(),
            existing: vec![
                PodBuilder::new("w1")
                    .namespace("other")
                    .label("app", "web")
                    .node("n2")
                    .build(),
            ],
            want: want([affinity_miss, ok, affinity_miss, affinity_miss]),
        },
        Case {
            name: "required anti-affinity on hostname",
            pod: PodBuilder::new("p")
                .required_pod_anti_affinity(web_term(HOST))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: want([anti_miss, ok, ok, ok]),
        },
        Case {
            name: "required anti-affinity on zone; a node without the key is fine",
            pod: PodBuilder::new("p")
                .required_pod_anti_affinity(web_term(ZONE))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: want([anti_miss, anti_miss, ok, ok]),
        },
        Case {
            name: "anti-affinity with an Exists expression",
            pod: PodBuilder::new("p")
                .required_pod_anti_affinity(PodAffinityTerm {
                    label_selector: Some(label_selector(&[], &[("app", "Exists", &[])])),
                    topology_key: HOST.into(),
                    ..Default::default()
                })
                .build(),
            existing: vec![
                web_on("w1", "n1"),
                PodBuilder::new("x").label("app", "db").node("n3").build(),
                PodBuilder::new("y").label("other", "1").node("n2").build(),
            ],
            want: want([anti_miss, ok, anti_miss, ok]),
        },
        Case {
            name: "an existing pod's anti-affinity keeps the incoming pod out of its zone",
            pod: PodBuilder::new("p").label("app", "web").build(),
            existing: vec![
                PodBuilder::new("e")
                    .node("n3")
                    .required_pod_anti_affinity(web_term(ZONE))
                    .build(),
            ],
            want: want([ok, ok, existing_miss, ok]),
        },
        Case {
            name: "affinity is checked before anti-affinity",
            pod: PodBuilder::new("p")
                .required_pod_affinity(web_term(ZONE))
                .required_pod_anti_affinity(web_term(HOST))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: want([anti_miss, ok, affinity_miss, affinity_miss]),
        },
        Case {
            name: "matchLabelKeys narrows the term to the pod's own value",
            pod: PodBuilder::new("p")
                .label("rev", "2")
                .required_pod_anti_affinity(PodAffinityTerm {
                    match_label_keys: Some(vec!["rev".into()]),
                    ..web_term(HOST)
                })
                .build(),
            existing: vec![
                PodBuilder::new("old")
                    .label("app", "web")
                    .label("rev", "1")
                    .node("n1")
                    .build(),
                PodBuilder::new("new")
                    .label("app", "web")
                    .label("rev", "2")
                    .node("n2")
                    .build(),
            ],
            want: want([ok, anti_miss, ok, ok]),
        },
        Case {
            name: "mismatchLabelKeys excludes the pod's own value",
            pod: PodBuilder::new("p")
                .label("tenant", "t1")
                .required_pod_anti_affinity(PodAffinityTerm {
                    mismatch_label_keys: Some(vec!["tenant".into()]),
                    ..PodAffinityTerm {
                        label_selector: Some(label_selector(&[], &[("tenant", "Exists", &[])])),
                        topology_key: HOST.into(),
                        ..Default::default()
                    }
                })
                .build(),
            existing: vec![
                PodBuilder::new("a")
                    .label("tenant", "t1")
                    .node("n1")
                    .build(),
                PodBuilder::new("b")
                    .label("tenant", "t2")
                    .node("n2")
                    .build(),
            ],
            want: want([ok, anti_miss, ok, ok]),
        },
    ];
    let pl = plugin(InterPodAffinityArgs::default());
    for c in cases {
        let snap = snapshot(nodes(), c.existing);
        let got = run_filter(&pl, &PodInfo::from_pod(c.pod), &snap)
            .unwrap_or_else(|s| panic!("{}: prefilter {s:?}", c.name));
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn namespace_selector_uses_the_namespace_lister() {
    let listers = Arc::new(listers_with_namespaces(&[
        ("default", &[("team", "a")]),
        ("prod", &[("env", "prod")]),
        ("dev", &[("env", "dev")]),
    ]));
    let pl = InterPodAffinity::new(InterPodAffinityArgs::default(), listers);
    let in_ns = |name: &str, ns: &str, node: &str| {
        PodBuilder::new(name)
            .namespace(ns)
            .label("app", "web")
            .node(node)
            .build()
    };
    let snap = snapshot(
        nodes(),
        vec![in_ns("w1", "prod", "n1"), in_ns("w2", "dev", "n3")],
    );
    // The incoming pod's term selects namespaces labelled env=prod.
    let pod = PodBuilder::new("p")
        .required_pod_anti_affinity(PodAffinityTerm {
            namespace_selector: Some(label_selector(&[("env", "prod")], &[])),
            ..web_term(HOST)
        })
        .info();
    let got = run_filter(&pl, &pod, &snap).expect("prefilter");
    assert_eq!(got, want([anti_miss, ok, ok, ok]));

    // An empty namespaceSelector selects every namespace.
    let pod = PodBuilder::new("p")
        .required_pod_anti_affinity(PodAffinityTerm {
            namespace_selector: Some(label_selector(&[], &[])),
            ..web_term(HOST)
        })
        .info();
    let got = run_filter(&pl, &pod, &snap).expect("prefilter");
    assert_eq!(got, want([anti_miss, ok, anti_miss, ok]));

    // An existing pod's namespaceSelector is matched against the incoming pod's namespace
    // labels (default: team=a).
    let snap = snapshot(
        nodes(),
        vec![
            PodBuilder::new("e")
                .namespace("prod")
                .node("n2")
                .required_pod_anti_affinity(PodAffinityTerm {
                    namespace_selector: Some(label_selector(&[("team", "a")], &[])),
                    ..web_term(HOST)
                })
                .build(),
        ],
    );
    let pod = PodBuilder::new("p").label("app", "web").info();
    let got = run_filter(&pl, &pod, &snap).expect("prefilter");
    assert_eq!(got, want([ok, existing_miss, ok, ok]));
}

#[test]
fn add_and_remove_pod_update_the_state() {
    let pl = plugin(InterPodAffinityArgs::default());
    let victim = web_on("w1", "n1");
    let snap = snapshot(nodes(), vec![victim.clone()]);
    let pod = PodBuilder::new("p")
        .required_pod_anti_affinity(web_term(HOST))
        .info();
    let mut state = CycleState::new();
    assert!(pl.pre_filter(&mut state, &pod, &snap).1.is_success());
    let n1 = snap.get("n1").expect("n1").clone();
    let victim = AssignedPod::new(victim);

    // Preemption's what-if on a clone: removing the victim frees n1; the original is untouched.
    let mut sim = state.clone();
    assert!(pl.remove_pod(&mut sim, &pod, &victim, &n1).is_success());
    assert!(pl.filter(&sim, &pod, &n1).is_success());
    assert_eq!(pl.filter(&state, &pod, &n1).code(), Code::Unschedulable);

    // Adding it back (a nominated pod) restores the rejection; adding a matching pod on n3
    // rejects n3 too.
    assert!(pl.add_pod(&mut sim, &pod, &victim, &n1).is_success());
    assert_eq!(pl.filter(&sim, &pod, &n1).code(), Code::Unschedulable);
    let n3 = snap.get("n3").expect("n3").clone();
    let other = AssignedPod::new(web_on("w3", "n3"));
    assert!(pl.add_pod(&mut sim, &pod, &other, &n3).is_success());
    assert_eq!(pl.filter(&sim, &pod, &n3).code(), Code::Unschedulable);

    // An existing pod with anti-affinity against the incoming pod, removed.
    let incoming = PodBuilder::new("q").label("app", "web").info();
    let hater = PodBuilder::new("h")
        .node("n2")
        .required_pod_anti_affinity(web_term(ZONE))
        .build();
    let snap = snapshot(nodes(), vec![hater.clone()]);
    let mut state = CycleState::new();
    assert!(pl.pre_filter(&mut state, &incoming, &snap).1.is_success());
    let n1 = snap.get("n1").expect("n1").clone();
    assert_eq!(
        pl.filter(&state, &incoming, &n1).code(),
        Code::Unschedulable
    );
    let n2 = snap.get("n2").expect("n2").clone();
    assert!(
        pl.remove_pod(&mut state, &incoming, &AssignedPod::new(hater), &n2)
            .is_success()
    );
    assert!(pl.filter(&state, &incoming, &n1).is_success());

    // Without PreFilter state the extensions report an error.
    let mut empty = CycleState::new();
    assert_eq!(
        pl.add_pod(&mut empty, &incoming, &other, &n3).code(),
        Code::Error
    );
    assert!(empty.read::<u8>(PRE_FILTER_STATE_KEY).is_none());
}

#[test]
fn unparseable_selector_is_unresolvable() {
    let pl = plugin(InterPodAffinityArgs::default());
    let pod = PodBuilder::new("p")
        .required_pod_affinity(PodAffinityTerm {
            label_selector: Some(label_selector(&[], &[("app", "Bogus", &["x"])])),
            topology_key: HOST.into(),
            ..Default::default()
        })
        .info();
    let s = run_filter(&pl, &pod, &snapshot(nodes(), vec![])).unwrap_err();
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert!(s.message().starts_with("parsing pod: "), "{}", s.message());
}

/// PreScore, Score and NormalizeScore over every node, in node-name order; `None` when PreScore
/// skipped.
fn run_score(pl: &InterPodAffinity, pod: &PodInfo, snap: &Snapshot) -> Option<Vec<(String, i64)>> {
    let scores = pre_score_and_score(pl, pod, snap, snap.nodes())?;
    let mut out: Vec<(String, i64)> = scores
        .into_iter()
        .map(|s| (s.name.to_string(), s.score))
        .collect();
    out.sort();
    Some(out)
}

fn scores(v: &[(&str, i64)]) -> Option<Vec<(String, i64)>> {
    Some(v.iter().map(|(n, s)| (n.to_string(), *s)).collect())
}

#[test]
fn score_table() {
    struct Case {
        name: &'static str,
        args: InterPodAffinityArgs,
        pod: Pod,
        existing: Vec<Pod>,
        want: Option<Vec<(String, i64)>>,
    }
    let db_on =
        |name: &str, node: &str| PodBuilder::new(name).label("app", "db").node(node).build();
    let cases = vec![
        Case {
            name: "no terms anywhere: skipped",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p").build(),
            existing: vec![web_on("w1", "n1")],
            want: None,
        },
        Case {
            name: "preferred affinity by zone, weighted terms",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p")
                .preferred_pod_affinity(5, web_term(ZONE))
                .preferred_pod_affinity(3, pod_term(&[("app", "db")], ZONE))
                .build(),
            existing: vec![web_on("w1", "n1"), db_on("d1", "n3")],
            // zone a: 5, zone b: 3, n4: 0 -> 100, 100, 60, 0
            want: scores(&[("n1", 100), ("n2", 100), ("n3", 60), ("n4", 0)]),
        },
        Case {
            name: "preferred anti-affinity goes negative; the least repelled node gets 100",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p")
                .preferred_pod_anti_affinity(10, web_term(HOST))
                .build(),
            existing: vec![web_on("w1", "n1"), web_on("w2", "n1"), web_on("w3", "n2")],
            // n1: -20, n2: -10, n3/n4: 0
            want: scores(&[("n1", 0), ("n2", 50), ("n3", 100), ("n4", 100)]),
        },
        Case {
            name: "existing pods' required affinity counts with hardPodAffinityWeight",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p").label("app", "web").build(),
            existing: vec![
                PodBuilder::new("e")
                    .node("n3")
                    .required_pod_affinity(web_term(ZONE))
                    .build(),
            ],
            want: scores(&[("n1", 0), ("n2", 0), ("n3", 100), ("n4", 0)]),
        },
        Case {
            name: "hardPodAffinityWeight 0 ignores existing pods' required affinity",
            args: InterPodAffinityArgs {
                hard_pod_affinity_weight: 0,
                ..Default::default()
            },
            pod: PodBuilder::new("p").label("app", "web").build(),
            existing: vec![
                PodBuilder::new("e")
                    .node("n3")
                    .required_pod_affinity(web_term(ZONE))
                    .build(),
            ],
            want: None,
        },
        Case {
            name: "existing pods' preferred affinity and anti-affinity towards the incoming pod",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p").label("app", "web").build(),
            existing: vec![
                PodBuilder::new("likes")
                    .node("n1")
                    .preferred_pod_affinity(8, web_term(HOST))
                    .build(),
                PodBuilder::new("hates")
                    .node("n3")
                    .preferred_pod_anti_affinity(8, web_term(ZONE))
                    .build(),
            ],
            // n1: 8, n2: 0, n3: -8, n4: 0 -> (x+8)*100/16
            want: scores(&[("n1", 100), ("n2", 50), ("n3", 0), ("n4", 50)]),
        },
        Case {
            name: "ignorePreferredTermsOfExistingPods skips a pod without preferred terms",
            args: InterPodAffinityArgs {
                ignore_preferred_terms_of_existing_pods: true,
                ..Default::default()
            },
            pod: PodBuilder::new("p").label("app", "web").build(),
            existing: vec![
                PodBuilder::new("likes")
                    .node("n1")
                    .preferred_pod_affinity(8, web_term(HOST))
                    .build(),
            ],
            want: None,
        },
        Case {
            name: "ignorePreferredTermsOfExistingPods still scores the pod's own terms",
            args: InterPodAffinityArgs {
                ignore_preferred_terms_of_existing_pods: true,
                ..Default::default()
            },
            pod: PodBuilder::new("p")
                .label("app", "web")
                .preferred_pod_affinity(1, pod_term(&[("app", "db")], HOST))
                .build(),
            existing: vec![db_on("d1", "n2")],
            want: scores(&[("n1", 0), ("n2", 100), ("n3", 0), ("n4", 0)]),
        },
        Case {
            name: "all nodes equal: all 0",
            args: InterPodAffinityArgs::default(),
            pod: PodBuilder::new("p")
                .preferred_pod_affinity(1, web_term("no-such-key"))
                .build(),
            existing: vec![web_on("w1", "n1")],
            want: None,
        },
    ];
    for c in cases {
        let pl = plugin(c.args);
        let snap = snapshot(nodes(), c.existing);
        assert_eq!(
            run_score(&pl, &PodInfo::from_pod(c.pod), &snap),
            c.want,
            "{}",
            c.name
        );
    }
}

/// Past the parallel threshold PreScore splits the nodes among the workers and adds up their
/// maps: a zone's pods on nodes of every part still count together.
#[test]
fn scores_over_many_nodes_add_up_each_domain_across_the_parts() {
    use crate::framework::testing::NodeBuilder;
    const NODES: usize = 150;
    let zone = |i: usize| ["z0", "z1", "z2"][i % 3];
    let nodes = (0..NODES).map(|i| {
        NodeBuilder::new(&format!("n{i:03}"))
            .label(ZONE, zone(i))
            .build()
    });
    // z0: a web pod on each of its 50 nodes (in every part); z1: on its first 10; z2: none.
    let existing = (0..NODES)
        .filter(|i| i % 3 == 0 || (i % 3 == 1 && *i < 30))
        .map(|i| web_on(&format!("w{i}"), &format!("n{i:03}")));
    let snap = snapshot(nodes, existing);
    let pod = PodBuilder::new("p")
        .preferred_pod_affinity(1, web_term(ZONE))
        .build();
    let got = run_score(
        &plugin(InterPodAffinityArgs::default()),
        &PodInfo::from_pod(pod),
        &snap,
    )
    .expect("scored");
    // Raw 50, 10 and 0, normalized to the highest.
    let want: Vec<(String, i64)> = (0..NODES)
        .map(|i| (format!("n{i:03}"), [100, 20, 0][i % 3]))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn registered_as_built_with_the_namespace_informer() {
    let r = crate::framework::registry::Registry::in_tree();
    let informers = r.informers_for([names::INTER_POD_AFFINITY]);
    let namespaces: crate::framework::listers::Informer = &crate::framework::listers::NAMESPACES;
    assert!(informers.contains(&namespaces));
}
