//! Gang scheduling of `scheduling.k8s.io/v1beta1` PodGroups (Kubernetes 1.37's workload-aware
//! scheduling, beta) on the real control plane, kube-apiserver serving the API
//! (`--feature-gates=GenericWorkload=true`, `--runtime-config=scheduling.k8s.io/v1beta1=true`):
//! `ksched scheduler --feature-gates=GenericWorkload=true` (GangScheduling joins its default
//! profile, a group's members are scheduled in one group cycle) binds a gang of 8 that fits
//! completely, and a gang of 100; binds none of a gang of 8 of which only 4 fit; binds what fits
//! of a basic group. For the last two, the PodGroup's condition and the members' messages are
//! those upstream kube-scheduler 1.37 writes with the same gate, on the same nodes. With
//! `TopologyAwareWorkloadScheduling` too (alpha; the API server keeps `schedulingConstraints`
//! with it), a gang confined to a rack label binds inside one rack, or not at all, as upstream.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Api, PostParams};
use serde_json::json;

use support::nodes::Nodes;
use support::scheduler::{
    DEFAULT_LEASE, SchedulerProcess, config, config_with_lease, upstream_scheduler,
};
use support::wait::{node, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane_with_apiserver_args};

const APISERVER_ARGS: &[&str] = support::WORKLOAD_API_ARGS;

/// The tests count nodes in their messages: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane_with_apiserver_args(Components::WITH_KWOK, APISERVER_ARGS)
}

fn gang(name: &str, min_count: i32) -> PodGroup {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }))
    .expect("pod group")
}

/// Member `i` of gang `group`, asking for `cpu`.
fn member(group: &str, i: usize, scheduler: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{group}-{i}")},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}}}],
        }
    }))
    .expect("pod")
}

/// The gang's pods, listed.
async fn members(pods: &Api<Pod>, group: &str, size: usize) -> Vec<Pod> {
    let mut found = Vec::new();
    for i in 0..size {
        if let Ok(p) = pods.get(&format!("{group}-{i}")).await {
            found.push(p);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_bind_whole_or_not_at_all_and_groups_read_as_upstream_writes_them() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    // Four nodes of 2 CPUs: eight 1-CPU pods fit exactly; of eight 2-CPU pods, four.
    let nodes = Nodes::new(cp, &format!("gangs-{}", std::process::id())).waiting_on_drop();
    for i in 0..4 {
        nodes.create(&i.to_string(), "2", &[]);
    }
    nodes.wait_ready();
    let ns = cp.namespace(&client, "gangs").await;
    let name = "gangs";
    let scheduler = SchedulerProcess::start_with_args(
        cp,
        name,
        &config(name, None),
        &["--feature-gates=GenericWorkload=true"],
    );
    let logs = || support::wait::tail(&scheduler.logs(), 80);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // A gang of 8 that fits: its members arrive one by one; all are bound.
    groups
        .create(&PostParams::default(), &gang("fits", 8))
        .await
        .expect("PodGroup (scheduling.k8s.io/v1beta1 served?)");
    for i in 0..8 {
        pods.create(&PostParams::default(), &member("fits", i, name, "1"))
            .await
            .expect("create pod");
    }
    let bound = poll(
        "all 8 of gang fits bound",
        Duration::from_secs(90),
        logs,
        async || {
            let all = members(&pods, "fits", 8).await;
            let bound: Vec<String> = all.iter().filter_map(node).collect();
            (bound.len() == 8).then_some(bound)
        },
    )
    .await;
    assert_eq!(bound.len(), 8);
    // Its PodGroup says so, as upstream's group cycle writes it.
    let pg = groups.get("fits").await.expect("PodGroup fits");
    let condition = pg
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled")
        })
        .map(|c| (c.status, c.reason, c.message));
    assert_eq!(
        condition,
        Some(("True".into(), "Scheduled".into(), String::new()))
    );

    // Room for the next groups: the first one goes.
    delete_members(&pods, "fits", 8, &logs).await;

    // A gang of 8 of which only 4 can be placed (2 CPUs each, one per node): none is bound;
    // and a basic group of 6 such pods: 4 are bound, the group needs no quorum. Upstream first,
    // then ksched, on the same four empty nodes.
    let upstream_name = "gangs-upstream";
    let upstream = upstream_scheduler(cp, upstream_name, &["--feature-gates=GenericWorkload=true"]);
    let up_ns = cp.namespace(&client, "gangs-upstream").await;
    let upstream_logs = || support::wait::tail(&upstream.logs(), 80);
    let theirs_gang = group_outcome(
        &client,
        &up_ns,
        upstream_name,
        &upstream_logs,
        gang("too-big", 8),
        8,
        "2",
    )
    .await;
    let theirs_basic = group_outcome(
        &client,
        &up_ns,
        upstream_name,
        &upstream_logs,
        basic("basic"),
        6,
        "2",
    )
    .await;
    drop(upstream);
    eprintln!("upstream: {theirs_gang:?}\n{theirs_basic:?}");
    assert_eq!(theirs_gang.bound, 0, "upstream bound part of a gang");
    // The nodes free again for ksched.
    let up_pods: Api<Pod> = Api::namespaced(client.clone(), &up_ns);
    delete_members(&up_pods, "basic", 6, &logs).await;
    let ours_gang = group_outcome(&client, &ns, name, &logs, gang("too-big", 8), 8, "2").await;
    assert_eq!(
        ours_gang, theirs_gang,
        "gang: ksched (left) and upstream (right) differ"
    );
    let ours_basic = group_outcome(&client, &ns, name, &logs, basic("basic"), 6, "2").await;
    assert_eq!(
        ours_basic, theirs_basic,
        "basic group: ksched (left) and upstream (right) differ"
    );
    delete_members(&pods, "basic", 6, &logs).await;

    // A gang of 100 small pods that fits: all bound, in group cycles.
    groups
        .create(&PostParams::default(), &gang("hundred", 100))
        .await
        .expect("PodGroup hundred");
    for i in 0..100 {
        pods.create(&PostParams::default(), &member("hundred", i, name, "50m"))
            .await
            .expect("create pod");
    }
    poll(
        "all 100 of gang hundred bound",
        Duration::from_secs(120),
        logs,
        async || {
            let all = members(&pods, "hundred", 100).await;
            (all.iter().filter_map(node).count() == 100).then_some(())
        },
    )
    .await;
    // Group cycles are counted as upstream counts them (GenericWorkload on).
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = support::https::As::Cert(&cert, &key);
    let ca = cp.dir.join("ca.crt");
    let (status, metrics) = support::https::get_as(&ca, scheduler.secure_port, "/metrics", admin)
        .await
        .expect("metrics");
    assert_eq!(status, 200);
    for result in ["scheduled", "unschedulable"] {
        let series = format!(
            r#"scheduler_podgroup_schedule_attempts_total{{result="{result}",profile="{name}"}}"#
        );
        assert!(metrics.contains(&series), "no {series}");
    }
    assert!(metrics.contains("scheduler_podgroup_scheduling_algorithm_duration_seconds_count"));
    // The group's points are timed as upstream's: PlacementFeasible ran in every group cycle,
    // PodGroupPostFilter for the gang that did not fit.
    for point in ["PlacementFeasible", "PodGroupPostFilter"] {
        let series = format!(
            r#"scheduler_framework_extension_point_duration_seconds_count{{extension_point="{point}","#
        );
        assert!(metrics.contains(&series), "no {series}:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_whose_leader_dies_while_binding_ends_bound_whole_by_the_next_leader() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let nodes = Nodes::new(cp, &format!("gangs-ha-{}", std::process::id())).waiting_on_drop();
    for i in 0..4 {
        nodes.create(&i.to_string(), "8", &[]);
    }
    nodes.wait_ready();
    let ns = cp.namespace(&client, "gangs-ha").await;
    let name = "gangs-ha";
    // The new leader binds ~250 pods at once right after taking over; with the 3 s renew deadline
    // of the fast lease a loaded API server made it lose the lease (and exit) in one CI run.
    let ha = config_with_lease(name, Some(&ns), DEFAULT_LEASE);
    let gate = ["--feature-gates=GenericWorkload=true"];
    let mut first = SchedulerProcess::start_with_args(cp, "gangs-ha-1", &ha, &gate);
    let mut second = SchedulerProcess::start_with_args(cp, "gangs-ha-2", &ha, &gate);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns);
    let logs = || {
        format!(
            "{}\n---\n{}",
            support::wait::tail(&first.logs(), 40),
            support::wait::tail(&second.logs(), 40)
        )
    };
    let leader = poll("a leader", Duration::from_secs(60), &logs, async || {
        let lease = leases.get(name).await.ok()?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;

    // A gang of 300 small pods; its leader dies once the first member is bound.
    let size = 300;
    groups
        .create(
            &PostParams::default(),
            &gang("big", i32::try_from(size).unwrap_or(i32::MAX)),
        )
        .await
        .expect("PodGroup big");
    for i in 0..size {
        pods.create(&PostParams::default(), &member("big", i, name, "10m"))
            .await
            .expect("create pod");
    }
    poll(
        "a member of gang big bound",
        Duration::from_secs(90),
        &logs,
        async || (bound(&pods).await > 0).then_some(()),
    )
    .await;
    let leader_is_first = first.logs().contains(&format!("identity={leader}"));
    let bound_at_kill = {
        if leader_is_first {
            first.kill()
        } else {
            second.kill()
        }
        bound(&pods).await
    };
    let standby = if leader_is_first { &second } else { &first };
    let logs = || support::wait::tail(&standby.logs(), 60);
    eprintln!("{bound_at_kill} of {size} bound when the leader was killed");
    assert!(
        bound_at_kill < size,
        "the whole gang was bound before the leader died: nothing was left for the next one"
    );

    // The standby takes over and binds the rest: the whole gang, each member once.
    poll(
        "the whole gang big bound",
        Duration::from_secs(120),
        &logs,
        async || (bound(&pods).await == size).then_some(()),
    )
    .await;
    let pg = groups.get("big").await.expect("PodGroup big");
    let scheduled = pg
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled")
        })
        .map(|c| c.status);
    assert_eq!(scheduled.as_deref(), Some("True"));
}

/// How many pods of the namespace are bound (one list).
async fn bound(pods: &Api<Pod>) -> usize {
    pods.list(&Default::default())
        .await
        .map(|l| l.items.iter().filter_map(node).count())
        .unwrap_or(0)
}

/// Deletes the `size` members of `group` and waits until they are gone.
async fn delete_members(pods: &Api<Pod>, group: &str, size: usize, logs: &dyn Fn() -> String) {
    for i in 0..size {
        let _ = pods
            .delete(&format!("{group}-{i}"), &Default::default())
            .await;
    }
    poll(
        &format!("group {group} deleted"),
        Duration::from_secs(60),
        logs,
        async || members(pods, group, size).await.is_empty().then_some(()),
    )
    .await;
}

/// A PodGroup `name` without a gang policy.
fn basic(name: &str) -> PodGroup {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }))
    .expect("pod group")
}

/// What a scheduler made of `group` with `size` members of `cpu` each.
#[derive(Debug, PartialEq, Eq)]
struct GroupOutcome {
    /// The PodGroup's `PodGroupInitiallyScheduled` condition: status, reason, message.
    condition: Vec<String>,
    /// The messages of the members not bound, sorted.
    messages: Vec<String>,
    bound: usize,
}

/// Creates `group` and its `size` members for `scheduler` and waits until every member is bound
/// or says why not, then (a while later, so nothing is bound in part after) reads the outcome.
async fn group_outcome(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    logs: &dyn Fn() -> String,
    group: PodGroup,
    size: usize,
    cpu: &str,
) -> GroupOutcome {
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = group.metadata.name.clone().unwrap_or_default();
    groups
        .create(&PostParams::default(), &group)
        .await
        .expect("PodGroup");
    for i in 0..size {
        pods.create(&PostParams::default(), &member(&name, i, scheduler, cpu))
            .await
            .expect("create pod");
    }
    let read = async || {
        let pg = groups.get(&name).await.ok()?;
        let c = pg
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodGroupInitiallyScheduled")?;
        let all = members(&pods, &name, size).await;
        let bound = all.iter().filter_map(node).count();
        let mut messages: Vec<String> = all
            .iter()
            .filter(|p| node(p).is_none())
            .filter_map(unschedulable_message)
            .collect();
        messages.sort();
        (bound + messages.len() == size).then_some(GroupOutcome {
            condition: vec![c.status, c.reason, c.message],
            messages,
            bound,
        })
    };
    poll(
        &format!("every member of group {name} decided"),
        Duration::from_secs(90),
        logs,
        read,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    poll(
        &format!("group {name} read"),
        Duration::from_secs(30),
        logs,
        read,
    )
    .await
}

/// Both schedulers' feature gates for topology-aware workload scheduling.
const TOPOLOGY_GATES: &[&str] =
    &["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"];
/// The node label the confined gangs' topology names.
const RACK: &str = "ksched.io/e2e-rack";

/// A gang of `min_count` whose members must all run in one domain of the node label `key`.
fn confined_gang(name: &str, min_count: i32, key: &str) -> PodGroup {
    let mut group = gang(name, min_count);
    group.spec.scheduling_constraints =
        Some(serde_json::from_value(json!({"topology": [{"key": key}]})).expect("constraints"));
    group
}

/// Upstream kube-scheduler first, then ksched (both with TopologyAwareWorkloadScheduling), on the
/// same nodes of 2 CPUs: rack `a` of two, rack `b` of three, one in no rack. A gang of five 1-CPU
/// members fits in rack `b` alone: all five bind there, none in `a` or outside the racks. With a
/// third node in `a` (6 CPUs in each rack, 14 in all), a gang of seven fits in no rack: none binds
/// and its PodGroup is not scheduled, "0/2 placements are available" (both racks fail alike, so
/// which one upstream reports first does not change the message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_with_a_topology_constraint_binds_within_one_domain_as_upstream_does() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let nodes = Nodes::new(cp, &format!("gangs-tas-{}", std::process::id())).waiting_on_drop();
    let mut rack_of = BTreeMap::new();
    for (suffix, rack) in [
        ("a0", Some("a")),
        ("a1", Some("a")),
        ("b0", Some("b")),
        ("b1", Some("b")),
        ("b2", Some("b")),
        ("x0", None),
    ] {
        let labels: Vec<(&str, &str)> = rack.map(|r| (RACK, r)).into_iter().collect();
        rack_of.insert(nodes.create(suffix, "2", &labels), rack.unwrap_or("none"));
    }
    nodes.wait_ready();
    let upstream_name = "gangs-tas-upstream";
    let upstream = upstream_scheduler(cp, upstream_name, TOPOLOGY_GATES);
    let upstream_logs = || support::wait::tail(&upstream.logs(), 80);
    let up_ns = cp.namespace(&client, upstream_name).await;
    let name = "gangs-tas";
    let scheduler =
        SchedulerProcess::start_with_args(cp, name, &config(name, None), TOPOLOGY_GATES);
    let logs = || support::wait::tail(&scheduler.logs(), 80);
    let ns = cp.namespace(&client, name).await;

    let fits = || confined_gang("rack-fit", 5, RACK);
    let theirs = rack_outcome(
        &client,
        &up_ns,
        upstream_name,
        &upstream_logs,
        fits(),
        5,
        &rack_of,
    )
    .await;
    let ours = rack_outcome(&client, &ns, name, &logs, fits(), 5, &rack_of).await;
    eprintln!("upstream: {theirs:?}\nksched:   {ours:?}");
    assert_eq!(ours.group.bound, 5, "{ours:?}");
    assert_eq!(ours.racks, ["b"], "{ours:?}");
    assert_eq!(
        ours, theirs,
        "gang fitting rack b: ksched (left) and upstream (right) differ"
    );

    rack_of.insert(nodes.add("a2", "2", &[(RACK, "a")]), "a");
    let fits_nowhere = || confined_gang("no-rack", 7, RACK);
    let theirs = rack_outcome(
        &client,
        &up_ns,
        upstream_name,
        &upstream_logs,
        fits_nowhere(),
        7,
        &rack_of,
    )
    .await;
    let ours = rack_outcome(&client, &ns, name, &logs, fits_nowhere(), 7, &rack_of).await;
    eprintln!("upstream: {theirs:?}\nksched:   {ours:?}");
    assert_eq!(ours.group.bound, 0, "{ours:?}");
    let condition = &ours.group.condition;
    assert_eq!(
        condition.first().map(String::as_str),
        Some("False"),
        "{ours:?}"
    );
    assert!(
        condition
            .last()
            .is_some_and(|m| m.contains("placements are available")),
        "{ours:?}"
    );
    assert_eq!(
        ours, theirs,
        "gang fitting no rack: ksched (left) and upstream (right) differ"
    );
    // Upstream's placement families, with the gate: the racks each gang was tried in.
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = support::https::As::Cert(&cert, &key);
    let ca = cp.dir.join("ca.crt");
    let (status, metrics) = support::https::get_as(&ca, scheduler.secure_port, "/metrics", admin)
        .await
        .expect("metrics");
    assert_eq!(status, 200);
    // The placements each gang was tried in, as many times as its cycles ran (timing decides).
    for series in [
        format!(r#"scheduler_generated_placements_total{{profile="{name}"}} "#),
        format!(r#"scheduler_placement_evaluations_total{{result="feasible",profile="{name}"}} "#),
        format!(
            r#"scheduler_placement_evaluations_total{{result="infeasible",profile="{name}"}} "#
        ),
        format!(
            r#"scheduler_placement_evaluation_duration_seconds_count{{result="feasible",profile="{name}"}} "#
        ),
        format!(
            r#"scheduler_framework_extension_point_duration_seconds_count{{extension_point="PlacementGenerate",status="Success",profile="{name}"}} "#
        ),
    ] {
        assert!(metrics.contains(&series), "no {series}:\n{metrics}");
    }
}

/// What a scheduler made of a gang confined to a rack.
#[derive(Debug, PartialEq, Eq)]
struct RackOutcome {
    group: GroupOutcome,
    /// The racks its bound members run in, sorted.
    racks: Vec<String>,
}

/// The outcome of `group` with `size` 1-CPU members (see [`group_outcome`]), the racks per
/// `rack_of` (by node); the members are deleted after.
async fn rack_outcome(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    logs: &dyn Fn() -> String,
    group: PodGroup,
    size: usize,
    rack_of: &BTreeMap<String, &str>,
) -> RackOutcome {
    let name = group.metadata.name.clone().unwrap_or_default();
    let outcome = group_outcome(client, ns, scheduler, logs, group, size, "1").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let racks: BTreeSet<String> = members(&pods, &name, size)
        .await
        .iter()
        .filter_map(node)
        .map(|n| {
            rack_of
                .get(&n)
                .map_or(format!("unknown node {n}"), |r| r.to_string())
        })
        .collect();
    delete_members(&pods, &name, size, logs).await;
    RackOutcome {
        group: outcome,
        racks: racks.into_iter().collect(),
    }
}

/// A high-priority gang preempts a lower one whose `disruptionMode` is `all`: every pod of the
/// lower gang goes (even those on nodes the new gang does not need), the new gang binds whole,
/// and the victims' `Preempted` events name the preempting PodGroup. With `single`, only the
/// pods it needs go. A high-priority pod of no group that needs one node takes a whole `all`
/// gang too. Upstream kube-scheduler 1.37 first, then ksched, on the same four nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_gang_preempts_a_whole_lower_gang_as_upstream_does() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let test = format!("gangs-preempt-{}", std::process::id());
    let nodes = Nodes::new(cp, &test).waiting_on_drop();
    for i in 0..4 {
        nodes.create(&i.to_string(), "2", &[]);
    }
    nodes.wait_ready();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (suffix, value) in [("low", 100), ("high", 1000)] {
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": format!("{test}-{suffix}")},
            "value": value,
        }))
        .expect("priority class");
        classes
            .create(&PostParams::default(), &pc)
            .await
            .expect("create priority class");
    }
    let gate = ["--feature-gates=GenericWorkload=true"];

    let upstream_name = "gangs-preempt-upstream";
    let upstream = upstream_scheduler(cp, upstream_name, &gate);
    let upstream_logs = || support::wait::tail(&upstream.logs(), 80);
    let up_ns = cp.namespace(&client, "gangs-preempt-upstream").await;
    // A gang preempting a gang of each disruption mode, and a pod (of no group) preempting one
    // pod's room from a gang with `disruptionMode: all`.
    let cases = [
        ("all", Preemptor::Gang),
        ("single", Preemptor::Gang),
        ("all", Preemptor::Pod),
    ];
    let mut theirs = Vec::new();
    for (mode, by) in cases {
        let outcome = preemption_outcome(
            &client,
            &up_ns,
            upstream_name,
            &test,
            mode,
            by,
            &upstream_logs,
        );
        theirs.push(outcome.await);
    }
    drop(upstream);
    eprintln!("upstream: {theirs:#?}");

    let name = "gangs-preempt";
    let scheduler = SchedulerProcess::start_with_args(cp, name, &config(name, None), &gate);
    let logs = || support::wait::tail(&scheduler.logs(), 80);
    let ns = cp.namespace(&client, "gangs-preempt").await;
    for ((mode, by), mut theirs) in cases.into_iter().zip(theirs) {
        let mut ours = preemption_outcome(&client, &ns, name, &test, mode, by, &logs).await;
        if mode == "all" {
            // The lower gang goes whole, even from nodes the preemptor does not need.
            assert_eq!(ours.victims, vec!["low-0", "low-1", "low-2", "low-3"]);
        } else {
            // Only the two pods the new gang needs go; which two is up to the start times
            // (kwok starts them within a second): the rest must agree.
            assert_eq!(ours.victims.len(), 2, "{ours:?}");
            ours.victims.clear();
            theirs.victims.clear();
        }
        assert_eq!(
            ours, theirs,
            "disruptionMode {mode}, preempted by {by:?}: ksched (left) and upstream (right) differ"
        );
    }
    let (cert, key) = (cp.dir.join("admin.crt"), cp.dir.join("admin.key"));
    let admin = support::https::As::Cert(&cert, &key);
    let (_, metrics) = support::https::get_as(
        &cp.dir.join("ca.crt"),
        scheduler.secure_port,
        "/metrics",
        admin,
    )
    .await
    .expect("metrics");
    for series in [
        r#"scheduler_workload_preemption_attempts_total{result="Success"}"#,
        // Four pods, then two.
        "scheduler_workload_preemption_victims_sum 6",
        "scheduler_workload_preemption_victims_count 2",
        // One whole gang, then two single pods of a gang.
        r#"scheduler_preemption_workload_disruptions_sum{preemptor="podgroup"} 3"#,
        // The group cycles that made room, counted as upstream counts them.
        r#"scheduler_podgroup_schedule_attempts_total{result="waiting_on_preemption",profile="gangs-preempt"}"#,
    ] {
        assert!(metrics.contains(series), "no {series} in\n{metrics}");
    }
    for suffix in ["low", "high"] {
        let _ = classes
            .delete(&format!("{test}-{suffix}"), &Default::default())
            .await;
    }
}

/// What a scheduler did when gang `high` (2 pods of 2 CPUs, class `<classes>-high`), or one such
/// pod of no group, came to four 2-CPU nodes full with gang `low` (4 such pods, class
/// `<classes>-low`, `disruptionMode` `mode`). Both are gone after.
#[derive(Debug, PartialEq, Eq)]
struct PreemptionOutcome {
    /// The pods of `low` preempted (a `Preempted` event each), sorted.
    victims: Vec<String>,
    /// The events' notes, the preemptor's UID left out, sorted.
    notes: Vec<String>,
    /// `high`'s `PodGroupInitiallyScheduled`: status, reason, message.
    condition: Vec<String>,
    high_bound: usize,
}

async fn preemption_outcome(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    classes: &str,
    mode: &str,
    by: Preemptor,
    logs: &dyn Fn() -> String,
) -> PreemptionOutcome {
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let class = |suffix: &str| format!("{classes}-{suffix}");
    // Each case has gangs of its own: a PodGroup outlives its pods for a while.
    let case = match by {
        Preemptor::Gang => mode.to_string(),
        Preemptor::Pod => format!("{mode}-by-pod"),
    };
    let (low_name, high_name) = (format!("low-{case}"), format!("high-{case}"));
    let mut low = gang(&low_name, 4);
    low.spec.priority_class_name = Some(class("low"));
    low.spec.disruption_mode = serde_json::from_value(json!({ mode: {} })).ok();
    groups
        .create(&PostParams::default(), &low)
        .await
        .expect("PodGroup low");
    for i in 0..4 {
        let pod = with_class(member(&low_name, i, scheduler, "2"), &class("low"));
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    poll(
        "gang low bound",
        Duration::from_secs(90),
        logs,
        async || {
            (members(&pods, &low_name, 4)
                .await
                .iter()
                .filter_map(node)
                .count()
                == 4)
                .then_some(())
        },
    )
    .await;
    let high_size = match by {
        Preemptor::Gang => {
            let mut high = gang(&high_name, 2);
            high.spec.priority_class_name = Some(class("high"));
            groups
                .create(&PostParams::default(), &high)
                .await
                .expect("PodGroup high");
            2
        }
        Preemptor::Pod => 1,
    };
    for i in 0..high_size {
        let mut pod = with_class(member(&high_name, i, scheduler, "2"), &class("high"));
        if by == Preemptor::Pod
            && let Some(spec) = pod.spec.as_mut()
        {
            spec.scheduling_group = None;
        }
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    let victims = match (mode, by) {
        ("all", _) => 4,
        (_, Preemptor::Gang) => 2,
        (_, Preemptor::Pod) => 1,
    };
    poll(
        "the preemptor bound, its victims gone",
        Duration::from_secs(120),
        logs,
        async || {
            let high = members(&pods, &high_name, high_size).await;
            let low = members(&pods, &low_name, 4).await;
            let bound = high.iter().filter_map(node).count();
            (bound == high_size && low.len() == 4 - victims).then_some(())
        },
    )
    .await;
    let preempted = async || {
        let mut events = support::events::with_reason(client, ns, "Preempted").await;
        events.retain(|e| support::events::regarding(e).starts_with(&low_name));
        (events.len() >= victims).then_some(events)
    };
    let events = poll(
        "the victims' events",
        Duration::from_secs(30),
        logs,
        preempted,
    )
    .await;
    let preemptor_uid = match by {
        Preemptor::Gang => groups
            .get(&high_name)
            .await
            .ok()
            .and_then(|g| g.metadata.uid),
        Preemptor::Pod => pods
            .get(&format!("{high_name}-0"))
            .await
            .ok()
            .and_then(|p| p.metadata.uid),
    }
    .unwrap_or_default();
    let mut victims: Vec<String> = events
        .iter()
        .map(|e| support::events::regarding(e).replacen(&low_name, "low", 1))
        .collect();
    victims.sort();
    let mut notes: Vec<String> = events
        .iter()
        .filter_map(|e| e.note.as_deref())
        // The node a pod preempted on is its choice among equals.
        .map(|n| {
            let n = n.replace(&preemptor_uid, "<uid>");
            match n.split_once(" on node ") {
                Some((head, _)) if by == Preemptor::Pod => format!("{head} on node <node>"),
                _ => n,
            }
        })
        .collect();
    notes.sort();
    let condition = groups
        .get(&high_name)
        .await
        .ok()
        .and_then(|g| g.status?.conditions)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled")
        })
        .map(|c| vec![c.status, c.reason, c.message])
        .unwrap_or_default();
    let high_bound = members(&pods, &high_name, high_size)
        .await
        .iter()
        .filter_map(node)
        .count();
    delete_members(&pods, &high_name, high_size, logs).await;
    delete_members(&pods, &low_name, 4, logs).await;
    PreemptionOutcome {
        victims,
        notes,
        condition,
        high_bound,
    }
}

/// What preempts the lower gang: a gang of two, or one pod of no group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Preemptor {
    Gang,
    Pod,
}

/// `pod` with PriorityClass `class`.
fn with_class(mut pod: Pod, class: &str) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        spec.priority_class_name = Some(class.to_string());
    }
    pod
}
