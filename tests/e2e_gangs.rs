//! Gang scheduling of `scheduling.k8s.io/v1beta1` PodGroups (Kubernetes 1.37's workload-aware
//! scheduling, beta) on the real control plane, kube-apiserver serving the API
//! (`--feature-gates=GenericWorkload=true`, `--runtime-config=scheduling.k8s.io/v1beta1=true`):
//! `ksched scheduler --feature-gates=GenericWorkload=true` (GangScheduling joins its default
//! profile, members are scheduled in one group cycle) binds a gang of 8 that fits completely, and
//! none of a gang of 8 of which only 4 fit; for that gang, its PodGroup's condition and its pods'
//! messages are those upstream kube-scheduler 1.37 writes with the same gate, on the same nodes.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Api, PostParams};
use serde_json::json;

use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config, upstream_scheduler};
use support::wait::{node, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane_with_apiserver_args};

const APISERVER_ARGS: &[&str] = &[
    "--feature-gates=GenericWorkload=true",
    "--runtime-config=scheduling.k8s.io/v1beta1=true",
];

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
async fn a_gang_that_fits_binds_completely_and_one_that_cannot_binds_none() {
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

    // Room for the second gang: the first one goes.
    for i in 0..8 {
        let _ = pods.delete(&format!("fits-{i}"), &Default::default()).await;
    }
    poll(
        "gang fits deleted",
        Duration::from_secs(60),
        logs,
        async || members(&pods, "fits", 8).await.is_empty().then_some(()),
    )
    .await;

    // A gang of 8 of which only 4 can be placed (2 CPUs each, one per node): none is bound;
    // upstream first, then ksched, on the same four empty nodes.
    let upstream_name = "gangs-upstream";
    let upstream = upstream_scheduler(cp, upstream_name, &["--feature-gates=GenericWorkload=true"]);
    let up_ns = cp.namespace(&client, "gangs-upstream").await;
    let theirs = too_big_gang(&client, &up_ns, upstream_name, &|| {
        support::wait::tail(&upstream.logs(), 80)
    })
    .await;
    drop(upstream);
    eprintln!("upstream: {theirs:?}");
    let ours = too_big_gang(&client, &ns, name, &logs).await;
    assert_eq!(ours, theirs, "ksched (left) and upstream (right) differ");
}

/// What a scheduler made of a gang of 8 two-CPU pods on the four nodes: its PodGroup's
/// `PodGroupInitiallyScheduled` condition (status, reason, message) and its pods' messages,
/// sorted; asserts that none was bound.
async fn too_big_gang(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    logs: &dyn Fn() -> String,
) -> (Vec<String>, Vec<String>) {
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    groups
        .create(&PostParams::default(), &gang("too-big", 8))
        .await
        .expect("PodGroup");
    for i in 0..8 {
        pods.create(
            &PostParams::default(),
            &member("too-big", i, scheduler, "2"),
        )
        .await
        .expect("create pod");
    }
    let condition = poll(
        "gang too-big's PodGroup condition",
        Duration::from_secs(90),
        logs,
        async || {
            let pg = groups.get("too-big").await.ok()?;
            let c = pg
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled")?;
            Some(vec![c.status, c.reason, c.message])
        },
    )
    .await;
    let messages = poll(
        "every member of gang too-big unschedulable",
        Duration::from_secs(90),
        logs,
        async || {
            let all = members(&pods, "too-big", 8).await;
            let mut m: Vec<String> = all.iter().filter_map(unschedulable_message).collect();
            m.sort();
            (m.len() == 8).then_some(m)
        },
    )
    .await;
    // A while later, still none bound: the group was never placed in part.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = members(&pods, "too-big", 8).await;
    let bound: Vec<String> = all.iter().filter_map(node).collect();
    assert!(bound.is_empty(), "{scheduler} bound {bound:?}\n{}", logs());
    (condition, messages)
}
