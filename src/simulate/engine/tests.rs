use serde_json::{Value, json};

use super::*;
use crate::operator::render_cli::Input;
use crate::simulate::profile;
use crate::simulate::report::{NodeExplanation, Preemption};

fn node(name: &str, cpu: &str, labels: Value, extra: Value) -> Value {
    let mut n = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
    });
    if let Some(spec) = extra.get("spec") {
        n["spec"] = spec.clone();
    }
    n
}

fn pod(name: &str, cpu: &str, spec: Value) -> Value {
    let mut s = json!({
        "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]
    });
    if let (Some(s), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
           "spec": s})
}

fn with_labels(mut p: Value, labels: Value) -> Value {
    p["metadata"]["labels"] = labels;
    p
}

fn state(items: Vec<Value>) -> ClusterState {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    ClusterState::parse("test", &list.to_string()).expect("state")
}

fn default_profile() -> SimulatedProfile {
    profile::load(None, &[], &Registry::in_tree(), &[]).expect("default profile")
}

fn run(items: Vec<Value>, profile: &SimulatedProfile, request: Request) -> Report {
    simulate(
        state(items),
        profile,
        &offline_registry(Registry::in_tree()),
        &request,
        &mut |_, _| {},
    )
    .expect("simulate")
}

fn pending(items: Vec<Value>) -> Report {
    run(items, &default_profile(), Request::Pending { all: false })
}

fn placements(r: &Report) -> Vec<(String, Outcome, Option<String>)> {
    r.pods
        .iter()
        .map(|p| (p.name.clone(), p.result, p.node.clone()))
        .collect()
}

fn placed(name: &str, node: &str) -> (String, Outcome, Option<String>) {
    (name.into(), Outcome::Scheduled, Some(node.into()))
}

#[test]
fn assumed_pods_count_for_later_ones_and_failures_name_each_node() {
    let r = pending(vec![
        node("a", "2", json!({}), json!({})),
        node("b", "2", json!({}), json!({})),
        pod("p1", "1500m", json!({})),
        pod("p2", "1500m", json!({})),
        pod("p3", "1500m", json!({})),
    ]);
    let got = placements(&r);
    assert_eq!(got[2], ("p3".into(), Outcome::Unschedulable, None));
    let nodes: HashSet<Option<String>> = got[..2].iter().map(|g| g.2.clone()).collect();
    assert_eq!(
        nodes.len(),
        2,
        "the second pod sees the first on its node: {got:?}"
    );
    let p3 = &r.pods[2];
    assert_eq!(
        p3.message,
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    assert_eq!(p3.node_reasons.len(), 2);
    assert!(
        p3.node_reasons
            .iter()
            .all(|n| n.plugin == "NodeResourcesFit" && n.reasons == ["Insufficient cpu"])
    );
    assert_eq!((r.summary.scheduled, r.summary.unschedulable), (2, 1));
    assert!(r.has_pending());
    assert_eq!(
        r.summary.on_leaf_nodes, None,
        "no leaf nodes, no host/leaf split"
    );
}

#[test]
fn a_pod_whose_affinity_target_comes_later_is_placed_on_a_retry() {
    let affinity = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}},
         "topologyKey": "kubernetes.io/hostname"}]}});
    let host = |name: &str| {
        node(
            name,
            "2",
            json!({"kubernetes.io/hostname": name}),
            json!({}),
        )
    };
    let r = pending(vec![
        host("a"),
        host("b"),
        // Popped first (higher priority), when no db pod exists anywhere yet.
        pod(
            "web",
            "100m",
            json!({"priority": 100, "affinity": affinity}),
        ),
        with_labels(pod("db", "100m", json!({})), json!({"app": "db"})),
    ]);
    let got = placements(&r);
    assert_eq!(got[0].0, "web");
    assert_eq!(got[1].0, "db");
    let db_node = got[1].2.clone().expect("db placed");
    assert_eq!(
        got[0],
        placed("web", &db_node),
        "web joins db once db is placed"
    );
    assert!(r.pods[0].message.is_empty(), "{}", r.pods[0].message);

    // A pod that fits nowhere stays unschedulable with its message after the passes end.
    let r = pending(vec![host("a"), pod("huge", "4", json!({}))]);
    assert_eq!(
        placements(&r),
        [("huge".into(), Outcome::Unschedulable, None)]
    );
    assert!(
        r.pods[0].message.contains("Insufficient cpu"),
        "{}",
        r.pods[0].message
    );
}

#[test]
fn queue_order_is_priority_first_and_other_schedulers_are_left_alone() {
    let r = pending(vec![
        node("a", "2", json!({}), json!({})),
        pod("a-low", "1500m", json!({"priority": 1})),
        pod("z-high", "1500m", json!({"priority": 100})),
        pod("theirs", "1", json!({"schedulerName": "other"})),
        pod("bound", "100m", json!({"nodeName": "a"})),
    ]);
    let got = placements(&r);
    assert_eq!(got[0], placed("z-high", "a"));
    assert_eq!(got[1].0, "a-low");
    assert_ne!(got[1].1, Outcome::Scheduled);
    assert_eq!(got.len(), 2);
    let all = run(
        vec![
            node("a", "2", json!({}), json!({})),
            pod("theirs", "1", json!({"schedulerName": "other"})),
        ],
        &default_profile(),
        Request::Pending { all: true },
    );
    assert_eq!(placements(&all), [placed("theirs", "a")]);
    assert_eq!(all.pods[0].scheduler_name, "other");
}

#[test]
fn preemption_is_reported_not_done() {
    let r = pending(vec![
        node("a", "2", json!({}), json!({})),
        pod("victim", "1500m", json!({"nodeName": "a", "priority": 0})),
        pod("vip", "1500m", json!({"priority": 1000})),
        pod("later", "1500m", json!({"priority": 10})),
    ]);
    let vip = &r.pods[0];
    assert_eq!(vip.result, Outcome::WouldPreempt);
    assert_eq!(
        vip.preemption,
        Some(Preemption {
            node: "a".into(),
            victims: vec!["ns/victim".into()]
        })
    );
    assert!(!vip.result.stays_pending());
    // The victim is not evicted: the next pod still finds the node full.
    assert_eq!(r.pods[1].result, Outcome::Unschedulable);
    assert_eq!(r.summary.would_preempt, 1);
}

#[test]
fn gates_keep_pods_out() {
    let r = pending(vec![
        node("a", "2", json!({}), json!({})),
        pod(
            "gated",
            "1",
            json!({"schedulingGates": [{"name": "example.com/wait"}]}),
        ),
    ]);
    assert_eq!(r.pods[0].result, Outcome::Gated);
    assert!(
        r.pods[0].message.contains("example.com/wait"),
        "{}",
        r.pods[0].message
    );
    assert!(!r.has_pending());
}

fn gang_profile() -> SimulatedProfile {
    let ksc = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: gang\n  plugins:\n    multiPoint:\n      enabled: [{name: Coscheduling}]\n    queueSort:\n      enabled: [{name: Coscheduling}]\n      disabled: [{name: '*'}]\n";
    let input = Input {
        name: "gang.yaml".into(),
        text: ksc.into(),
    };
    profile::load(Some(&input), &[], &Registry::in_tree(), &[]).expect("gang profile")
}

fn member(name: &str, group: &str, cpu: &str) -> Value {
    with_labels(
        pod(name, cpu, json!({"schedulerName": "gang"})),
        json!({"scheduling.x-k8s.io/pod-group": group}),
    )
}

fn group(name: &str, min: i32) -> Value {
    json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
           "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2024-01-01T00:00:00Z"},
           "spec": {"minMember": min}})
}

#[test]
fn a_gang_is_placed_once_its_last_member_is_permitted() {
    let profile = gang_profile();
    let gang = |last_cpu: &str| {
        run(
            vec![
                node("a", "4", json!({}), json!({})),
                group("g", 3),
                member("m1", "g", "1"),
                member("m2", "g", "1"),
                member("m3", "g", last_cpu),
            ],
            &profile,
            Request::Pending { all: false },
        )
    };
    assert_eq!(
        placements(&gang("1")),
        [placed("m1", "a"), placed("m2", "a"), placed("m3", "a")]
    );
    // A member that cannot fit: the others were held at Permit and are rejected with it.
    let r = gang("8");
    let got = placements(&r);
    assert!(
        got.iter()
            .all(|(_, o, n)| *o == Outcome::Unschedulable && n.is_none()),
        "{got:?}"
    );
    assert!(
        r.pods[0]
            .message
            .contains("optimistic rejection in PostFilter"),
        "{:?}",
        r.pods[0]
    );
    // Too few members exist at all: PreFilter says so.
    let r = run(
        vec![
            node("a", "4", json!({}), json!({})),
            group("g", 3),
            member("m1", "g", "1"),
        ],
        &profile,
        Request::Pending { all: false },
    );
    assert!(
        r.pods[0]
            .message
            .contains("cannot find enough sibling pods"),
        "{:?}",
        r.pods[0]
    );
}

/// The default profile with GenericWorkload on (GangScheduling joins it; group cycles).
fn workload_profile() -> SimulatedProfile {
    profile::load(
        None,
        &[],
        &Registry::in_tree(),
        &["GenericWorkload=true".into()],
    )
    .expect("profile with GenericWorkload")
}

fn workload_member(name: &str, group: &str, cpu: &str) -> Value {
    pod(
        name,
        cpu,
        json!({"schedulingGroup": {"podGroupName": group}}),
    )
}

fn workload_gang(name: &str, min: i32) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
           "metadata": {"name": name, "namespace": "ns"},
           "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}})
}

#[test]
fn a_workload_gang_is_placed_whole_or_not_at_all_in_one_group_cycle() {
    let profile = workload_profile();
    let gang = |members: usize, cpu: &str| {
        let mut items = vec![
            node("a", "2", json!({}), json!({})),
            node("b", "2", json!({}), json!({})),
            workload_gang("g", 4),
        ];
        items.extend((0..members).map(|i| workload_member(&format!("m{i}"), "g", cpu)));
        run(items, &profile, Request::Pending { all: false })
    };
    // Four 1-CPU members on two 2-CPU nodes: all placed.
    let r = gang(4, "1");
    assert!(
        r.pods.iter().all(|p| p.result == Outcome::Scheduled),
        "{:?}",
        placements(&r)
    );
    // Four 2-CPU members: two would fit, so none is placed; the group's message says why.
    let r = gang(4, "2");
    assert!(
        r.pods
            .iter()
            .all(|p| p.result == Outcome::Unschedulable && p.node.is_none()),
        "{:?}",
        placements(&r)
    );
    let messages: Vec<&str> = r.pods.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages.contains(&"pod group is unschedulable, minCount (4) cannot be satisfied: 2 scheduled, 1 remaining, pod group preemption: No preemption victims found for incoming preemptor"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"minCount (4) cannot be satisfied: 2 scheduled, 1 remaining"),
        "{messages:?}"
    );
    // Without the gate the members are pods like any other: two are placed.
    let r = run(
        vec![
            node("a", "2", json!({}), json!({})),
            node("b", "2", json!({}), json!({})),
            workload_gang("g", 4),
            workload_member("m0", "g", "2"),
            workload_member("m1", "g", "2"),
            workload_member("m2", "g", "2"),
        ],
        &default_profile(),
        Request::Pending { all: false },
    );
    let placed = r
        .pods
        .iter()
        .filter(|p| p.result == Outcome::Scheduled)
        .count();
    assert_eq!(placed, 2, "{:?}", placements(&r));
}

/// Racks `r1` (nodes a1, a2) and `r2` (b1, b2, b3) of `cpu` each, and a gang of `members`
/// members of `member_cpu` that must land in one rack.
fn racks(cpu: &str, members: usize, member_cpu: &str) -> Vec<Value> {
    let mut items: Vec<Value> = [
        ("a1", "r1"),
        ("a2", "r1"),
        ("b1", "r2"),
        ("b2", "r2"),
        ("b3", "r2"),
    ]
    .into_iter()
    .map(|(name, rack)| node(name, cpu, json!({"rack": rack}), json!({})))
    .collect();
    let mut gang = workload_gang("g", i32::try_from(members).unwrap_or(i32::MAX));
    gang["spec"]["schedulingConstraints"] = json!({"topology": [{"key": "rack"}]});
    items.push(gang);
    items.extend((0..members).map(|i| workload_member(&format!("m{i}"), "g", member_cpu)));
    items
}

/// The default profile with topology-aware workload scheduling on.
fn topology_profile() -> SimulatedProfile {
    profile::load(
        None,
        &[],
        &Registry::in_tree(),
        &["GenericWorkload=true,TopologyAwareWorkloadScheduling=true".into()],
    )
    .expect("profile with TopologyAwareWorkloadScheduling")
}

#[test]
fn a_gang_with_a_topology_constraint_is_placed_in_one_domain() {
    let profile = topology_profile();
    let nodes_of = |r: &Report| {
        let mut nodes: Vec<String> = r.pods.iter().filter_map(|p| p.node.clone()).collect();
        nodes.sort();
        nodes
    };
    let explain = Request::ExplainGroup {
        group: "ns/g".into(),
    };
    // Five 1-CPU members: r1 holds four, so all go to r2.
    let g = run(racks("2", 5, "1"), &profile, explain.clone()).explain_group;
    assert_eq!(
        g.map(|g| g.placement),
        Some("rack=r2 (one domain of rack, ranked best by PlacementScore)".to_string())
    );
    let r = run(
        racks("2", 5, "1"),
        &profile,
        Request::Pending { all: false },
    );
    assert_eq!(r.pods.len(), 5);
    assert!(
        nodes_of(&r).iter().all(|n| n.starts_with('b')) && nodes_of(&r).len() == 5,
        "{:?}",
        placements(&r)
    );
    // Four members fit either rack; with 2 CPU already used in r1 it is the fuller one
    // (NodeResourcesFit's MostAllocated over the placement), and the counts tie.
    let mut items = racks("4", 4, "1");
    items.push(pod("busy", "2", json!({"nodeName": "a1"})));
    let r = run(items, &profile, Request::Pending { all: false });
    let nodes = nodes_of(&r);
    assert!(
        nodes.len() == 4 && nodes.iter().all(|n| n.starts_with('a')),
        "{:?}",
        placements(&r)
    );
    // Five 2-CPU members fit the cluster (five nodes) but no rack: none is placed.
    let g = run(racks("2", 5, "2"), &profile, explain).explain_group;
    assert_eq!(
        g.map(|g| g.placement),
        Some("none: no domain of rack holds the group".to_string())
    );
    let r = run(
        racks("2", 5, "2"),
        &profile,
        Request::Pending { all: false },
    );
    assert!(nodes_of(&r).is_empty(), "{:?}", placements(&r));
    let messages: Vec<&str> = r.pods.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages.iter().any(|m| m.starts_with(
            "pod group is unschedulable, 0/2 placements are available, first placement status: minCount (5) cannot be satisfied"
        )),
        "{messages:?}"
    );
}

/// TopologyPlacementGenerator's `percentageOfPlacementsToScore`: the cycle scores only the first
/// placements it finds feasible. Four 1-CPU members fit either rack and r2 is the fuller (7 of
/// its 12 CPUs against 4 of r1's 8, no tie for NodeResourcesFit's placement score): scoring
/// both picks r2; scoring one (1 % of two placements, rounded up) keeps r1, tried first.
#[test]
fn the_placement_limit_scores_only_the_first_feasible_placements() {
    let limited = |percentage: i32| {
        let ksc = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: TopologyPlacementGenerator\n    args: {{percentageOfPlacementsToScore: {percentage}}}\n"
        );
        let input = Input {
            name: "limited.yaml".into(),
            text: ksc,
        };
        profile::load(
            Some(&input),
            &[],
            &Registry::in_tree(),
            &["GenericWorkload=true,TopologyAwareWorkloadScheduling=true".into()],
        )
        .expect("profile with a placement limit")
    };
    let racks_used = |profile: &SimulatedProfile| {
        let mut items = racks("4", 4, "1");
        items.push(pod("busy", "3", json!({"nodeName": "b1"})));
        let r = run(items, profile, Request::Pending { all: false });
        let mut prefixes: Vec<char> = r
            .pods
            .iter()
            .filter(|p| p.name != "busy")
            .map(|p| {
                p.node
                    .as_deref()
                    .and_then(|n| n.chars().next())
                    .unwrap_or('-')
            })
            .collect();
        prefixes.dedup();
        prefixes
    };
    assert_eq!(racks_used(&topology_profile()), ['b']);
    assert_eq!(racks_used(&limited(100)), ['b']);
    assert_eq!(racks_used(&limited(1)), ['a']);
}

/// Workload-aware preemption tries the group in its placements too: a gang bound to one rack
/// takes its victims in a rack that can hold it all.
#[test]
fn a_topology_constrained_gang_preempts_within_one_domain() {
    let profile = topology_profile();
    // Every node full of a low-priority pod; a gang of three 2-CPU members at priority 1000.
    let mut items = racks("2", 3, "2");
    for (i, node_name) in ["a1", "a2", "b1", "b2", "b3"].into_iter().enumerate() {
        items.push(pod(
            &format!("busy-{i}-{node_name}"),
            "2",
            json!({"nodeName": node_name, "priority": 10}),
        ));
    }
    for item in &mut items {
        let incoming = item["kind"] == "Pod" && item["spec"].get("nodeName").is_none();
        if item["kind"] == "PodGroup" || incoming {
            item["spec"]["priority"] = json!(1000);
        }
    }
    let r = run(items, &profile, Request::Pending { all: false });
    let mut victims: Vec<String> = r
        .pods
        .iter()
        .filter_map(|p| p.preemption.as_ref())
        .flat_map(|p| p.victims.clone())
        .collect();
    victims.sort();
    victims.dedup();
    // r1 has two nodes: the gang can only go to r2, whose three pods go.
    assert_eq!(
        victims,
        ["ns/busy-2-b1", "ns/busy-3-b2", "ns/busy-4-b3"],
        "{:?}",
        r.pods
            .iter()
            .map(|p| (&p.name, p.result, &p.message))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_higher_priority_gang_would_preempt_a_whole_lower_gang() {
    let running = |name: &str, node: &str| {
        pod(
            name,
            "2",
            json!({"schedulingGroup": {"podGroupName": "low"}, "nodeName": node, "priority": 10}),
        )
    };
    let incoming = |name: &str| {
        pod(
            name,
            "2",
            json!({"schedulingGroup": {"podGroupName": "high"}, "priority": 1000}),
        )
    };
    let with = |mut group: Value, fields: Value| {
        for (k, v) in fields.as_object().into_iter().flatten() {
            group["spec"][k] = v.clone();
        }
        group
    };
    let mut items = vec![
        node("a", "2", json!({}), json!({})),
        node("b", "2", json!({}), json!({})),
        node("c", "2", json!({}), json!({})),
        with(
            workload_gang("low", 3),
            json!({"priority": 10, "disruptionMode": {"all": {}}}),
        ),
        with(workload_gang("high", 1), json!({"priority": 1000})),
        running("low-0", "a"),
        running("low-1", "b"),
        running("low-2", "c"),
    ];
    items.push(incoming("high-0"));
    let r = run(items, &workload_profile(), Request::Pending { all: false });
    let high = &r.pods[0];
    assert_eq!(high.result, Outcome::WouldPreempt, "{}", high.message);
    // One node is needed, but the lower gang goes whole.
    let preemption = high.preemption.clone().expect("a preemption");
    assert_eq!(
        preemption.victims,
        vec!["ns/low-0", "ns/low-1", "ns/low-2"],
        "{}",
        high.message
    );
    // A member that did not fit keeps its own reason, as upstream's.
    assert_eq!(high.message, "0/3 nodes are available: 3 Insufficient cpu.");
}

#[test]
fn a_pod_preempting_one_member_of_a_disruption_all_gang_takes_the_whole_gang() {
    let items = |gate: bool| {
        let mut gang = workload_gang("low", 3);
        gang["spec"]["priority"] = json!(10);
        gang["spec"]["disruptionMode"] = json!({"all": {}});
        let running = |name: &str, node_name: &str| {
            let spec = json!({"schedulingGroup": {"podGroupName": "low"},
                              "nodeName": node_name, "priority": 10});
            pod(name, "2", spec)
        };
        let profile = if gate {
            workload_profile()
        } else {
            default_profile()
        };
        let items = vec![
            node("a", "2", json!({}), json!({})),
            node("b", "2", json!({}), json!({})),
            node("c", "2", json!({}), json!({})),
            gang,
            running("low-0", "a"),
            running("low-1", "b"),
            running("low-2", "c"),
            pod("vip", "2", json!({"priority": 1000})),
        ];
        run(items, &profile, Request::Pending { all: false })
    };
    let victims = |r: &Report| {
        let vip = &r.pods[0];
        assert_eq!(vip.result, Outcome::WouldPreempt, "{}", vip.message);
        vip.preemption.clone().map(|p| p.victims.len())
    };
    // With workload-aware scheduling the gang goes whole, whichever node is chosen.
    assert_eq!(victims(&items(true)), Some(3));
    // Without it, one pod.
    assert_eq!(victims(&items(false)), Some(1));
}

#[test]
fn explain_of_a_pod_group_says_what_became_of_it_and_each_member() {
    let items = vec![
        node("a", "2", json!({}), json!({})),
        node("b", "2", json!({}), json!({})),
        workload_gang("g", 4),
        workload_member("m0", "g", "2"),
        workload_member("m1", "g", "2"),
        workload_member("m2", "g", "2"),
        workload_member("m3", "g", "2"),
        pod("other", "1", json!({})),
    ];
    let explain = Request::ExplainGroup {
        group: "ns/g".into(),
    };
    let r = run(items.clone(), &workload_profile(), explain.clone());
    let g = r.explain_group.as_ref().expect("the group explained");
    assert_eq!(g.policy, "gang (minCount 4)");
    assert_eq!(g.result, "Unschedulable");
    assert!(
        g.message
            .starts_with("minCount (4) cannot be satisfied: 2 scheduled, 1 remaining"),
        "{}",
        g.message
    );
    // Only the group's pending members were simulated, each with its reason.
    let pods: Vec<&str> = g.members.iter().map(|m| m.pod.as_str()).collect();
    assert_eq!(pods.len(), 4, "{pods:?}");
    assert!(
        g.members
            .iter()
            .all(|m| m.node.is_none() && !m.message.is_empty())
    );
    let table = r.to_table();
    assert!(
        table.contains("PodGroup ns/g (gang (minCount 4))"),
        "{table}"
    );
    // Without the gate the group is not grouped, and says why.
    let r = run(items, &default_profile(), explain);
    assert_eq!(
        r.explain_group.as_ref().map(|g| g.result.as_str()),
        Some("NotGrouped")
    );
    // A group the state does not have is an error that says how to name one.
    let err = simulate(
        state(vec![node("a", "2", json!({}), json!({}))]),
        &workload_profile(),
        &Registry::in_tree(),
        &Request::ExplainGroup {
            group: "ns/none".into(),
        },
        &mut |_, _| {},
    )
    .expect_err("no such group");
    assert!(err.to_string().contains("podgroup/NAMESPACE/NAME"), "{err}");
}

#[test]
fn a_gang_that_never_completes_waits() {
    let profile = gang_profile();
    // Two members exist (PreFilter passes), but one of them is bound to another scheduler's
    // queue: only one is simulated, and Permit holds it.
    let r = run(
        vec![
            node("a", "4", json!({}), json!({})),
            group("g", 2),
            member("m1", "g", "1"),
            with_labels(
                pod("m2", "1", json!({"schedulerName": "elsewhere"})),
                json!({"scheduling.x-k8s.io/pod-group": "g"}),
            ),
        ],
        &profile,
        Request::Pending { all: false },
    );
    assert_eq!(r.pods.len(), 1);
    assert_eq!(r.pods[0].result, Outcome::Waiting);
    assert!(
        r.pods[0]
            .message
            .contains("waiting at Permit for Coscheduling on node a"),
        "{}",
        r.pods[0].message
    );
    assert!(r.has_pending());
}

#[test]
fn reschedule_places_running_pods_anew_with_a_host_leaf_split() {
    let leaf = json!({"kosmos.io/node": "true"});
    let taint = json!({"spec": {"taints": [{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}]}});
    let items = vec![
        node("host", "2", json!({}), json!({})),
        node("leaf", "8", leaf.clone(), taint.clone()),
        pod("web-1", "1", json!({"nodeName": "host"})),
        pod("web-2", "1", json!({"nodeName": "host"})),
        pod(
            "web-3",
            "1",
            json!({"nodeName": "leaf",
            "tolerations": [{"key": "kosmos.io/node", "operator": "Exists"}]}),
        ),
    ];
    let r = run(
        items,
        &default_profile(),
        Request::Reschedule { namespace: None },
    );
    assert_eq!(r.mode, Mode::Reschedule);
    assert_eq!(r.summary.scheduled, 3);
    assert_eq!(r.summary.on_host_nodes, Some(2));
    assert_eq!(r.summary.on_leaf_nodes, Some(1));
    let r2 = run(
        vec![
            node("host", "2", json!({}), json!({})),
            pod("x", "1", json!({"nodeName": "host"})),
        ],
        &default_profile(),
        Request::Reschedule {
            namespace: Some("elsewhere".into()),
        },
    );
    assert_eq!(r2.pods.len(), 0);
}

#[test]
fn explain_gives_every_plugin_its_verdict() {
    let items = vec![
        node("big", "8", json!({"disk": "ssd"}), json!({})),
        node("small", "1", json!({"disk": "ssd"}), json!({})),
        node(
            "tainted",
            "8",
            json!({}),
            json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
        ),
        node("medium", "4", json!({"disk": "ssd"}), json!({})),
        pod("p", "2", json!({})),
    ];
    let r = run(
        items.clone(),
        &default_profile(),
        Request::Explain {
            pod: "ns/p".into(),
            node: None,
        },
    );
    assert_eq!(r.pods.len(), 1);
    assert_eq!(r.pods[0].node.as_deref(), Some("big"));
    let e = r.explain.as_ref().expect("explanation");
    assert_eq!(e.pod, "ns/p");
    assert!(
        e.pre_filter
            .iter()
            .any(|s| s.plugin == "NodeResourcesFit" && s.code == "Success")
    );
    let by: HashMap<&str, &NodeExplanation> =
        e.nodes.iter().map(|n| (n.node.as_str(), n)).collect();
    let verdict = |node: &str, plugin: &str| {
        by[node]
            .filters
            .iter()
            .find(|f| f.plugin == plugin)
            .map(|f| (f.code.clone(), f.reasons.clone()))
    };
    // More than the node has at all: upstream 1.36 calls that unresolvable.
    assert_eq!(
        verdict("small", "NodeResourcesFit"),
        Some((
            "UnschedulableAndUnresolvable".into(),
            vec!["Insufficient cpu".into()]
        ))
    );
    assert_eq!(
        verdict("tainted", "TaintToleration").map(|v| v.0),
        Some("UnschedulableAndUnresolvable".into())
    );
    // Every filter runs, not only up to the first rejection.
    assert_eq!(
        verdict("tainted", "NodeResourcesFit").map(|v| v.0),
        Some("Success".into())
    );
    assert!(!by["small"].feasible && !by["tainted"].feasible);
    assert!(by["small"].scores.is_empty());
    let big = by["big"];
    let medium = by["medium"];
    assert!(big.feasible && medium.feasible);
    assert!(big.total_score > medium.total_score, "{big:?} {medium:?}");
    let fit = big
        .scores
        .iter()
        .find(|s| s.plugin == "NodeResourcesFit")
        .expect("fit score");
    assert_eq!(fit.weighted, fit.score * fit.weight);
    assert_eq!(
        big.total_score,
        Some(big.scores.iter().map(|s| s.weighted).sum())
    );
    let only = run(
        items,
        &default_profile(),
        Request::Explain {
            pod: "ns/p".into(),
            node: Some("small".into()),
        },
    );
    let e = only.explain.expect("explanation");
    assert_eq!(e.nodes.len(), 1);
    assert_eq!(e.nodes[0].node, "small");
}

#[test]
fn explain_names_what_is_missing() {
    let profile = default_profile();
    let reg = offline_registry(Registry::in_tree());
    let err = simulate(
        state(vec![node("a", "1", json!({}), json!({}))]),
        &profile,
        &reg,
        &Request::Explain {
            pod: "ns/ghost".into(),
            node: None,
        },
        &mut |_, _| {},
    )
    .expect_err("no such pod");
    assert!(
        err.to_string()
            .contains("pod ns/ghost is not in the cluster state")
    );
    let err = simulate(
        state(vec![
            node("a", "1", json!({}), json!({})),
            pod("p", "1", json!({})),
        ]),
        &profile,
        &reg,
        &Request::Explain {
            pod: "ns/p".into(),
            node: Some("b".into()),
        },
        &mut |_, _| {},
    )
    .expect_err("no such node");
    assert!(
        err.to_string()
            .contains("node b is not in the cluster state")
    );
}
