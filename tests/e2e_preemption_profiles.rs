//! Preemption with several schedulers on full nodes (issue 31, reproduction 5): two ksched
//! profiles, each its own `ksched scheduler` process as the operator's Deployments run them, beside
//! upstream kube-scheduler as the default scheduler, with StatefulSets that recreate every deleted
//! pod at once. One high-priority pod must cost exactly the victims one upstream kube-scheduler
//! serving all three scheduler names chooses on the same cluster state (run first, on the same
//! control plane), each deleted once with upstream's `Preempted` event; and `ksched simulate`
//! predicts that node and those victims.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, ksched_bin, kube_scheduler_command};
use support::wait::{poll, tail};
use support::{Components, ControlPlane, control_plane, path_str};

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// The two ksched profiles' scheduler names.
const A: &str = "churn-a";
const B: &str = "churn-b";

/// One run's cluster: two 4-CPU nodes filled by StatefulSets (Parallel, each pod 1 CPU, pinned to
/// its node): on `n1` one low-priority pod of each ksched profile and two mid-priority pods of the
/// default scheduler, on `n2` one low-priority pod of profile A and three mid-priority default
/// pods. A 2-CPU high-priority pod of profile A then needs two victims; upstream's choice is the
/// node whose most important victim is the least important: `n1`.
struct Cluster {
    ns: String,
    _nodes: Nodes,
    n1: String,
    n2: String,
}

impl Cluster {
    async fn new(client: &Client, run: &str) -> Cluster {
        let cp = cp();
        let ns = cp.namespace(client, run).await;
        let nodes = Nodes::new(cp, run).with_memory("16Gi");
        let n1 = nodes.add("n1", "4", &[]);
        let n2 = nodes.add("n2", "4", &[]);
        let classes: Api<PriorityClass> = Api::all(client.clone());
        for (class, value) in [("low", 10), ("mid", 100), ("high", 1000)] {
            let pc: PriorityClass = serde_json::from_value(json!({
                "metadata": {"name": format!("{run}-{class}")},
                "value": value,
            }))
            .expect("priority class");
            let _ = classes.create(&PostParams::default(), &pc).await;
        }
        Cluster {
            ns,
            _nodes: nodes,
            n1,
            n2,
        }
    }

    /// The StatefulSets, every pod Running on its node.
    async fn fill(&self, client: &Client, run: &str) {
        for (name, scheduler, class, node, replicas) in [
            ("a1", A, "low", &self.n1, 1),
            ("b1", B, "low", &self.n1, 1),
            ("d1", "default-scheduler", "mid", &self.n1, 2),
            ("a2", A, "low", &self.n2, 1),
            ("d2", "default-scheduler", "mid", &self.n2, 3),
        ] {
            let sts = json!({
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {
                    "replicas": replicas,
                    "podManagementPolicy": "Parallel",
                    "serviceName": name,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "schedulerName": scheduler,
                            "priorityClassName": format!("{run}-{class}"),
                            "terminationGracePeriodSeconds": 0,
                            "nodeSelector": {"kubernetes.io/hostname": node},
                            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
                        },
                    },
                },
            });
            cp().apply(&sts.to_string());
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
        poll(
            "every StatefulSet pod running",
            Duration::from_secs(180),
            || self.describe(),
            async || {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let running = list
                    .items
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                (running == 8).then_some(())
            },
        )
        .await;
    }

    fn describe(&self) -> String {
        let (_, pods, _) = cp().kubectl_run(&["get", "pods", "-n", &self.ns, "-o", "wide"]);
        let (_, events, _) = cp().kubectl_run(&[
            "get",
            "events.events.k8s.io",
            "-n",
            &self.ns,
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "custom-columns=TIME:.metadata.creationTimestamp,REASON:.reason,OBJECT:.regarding.name,BY:.reportingController,NOTE:.note",
        ]);
        format!("--- pods\n{pods}\n--- events\n{events}")
    }

    /// The high-priority preemptor of profile A.
    fn preemptor(&self, run: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "preemptor", "namespace": self.ns},
            "spec": {
                "schedulerName": A,
                "priorityClassName": format!("{run}-high"),
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}],
            }
        }))
        .expect("pod")
    }

    /// Creates the preemptor, and waits until it is bound with no preemption of its left
    /// undone; the node, and the names of every pod deleted meanwhile (by uid: a recreated pod
    /// deleted again counts again).
    async fn preempt(
        &self,
        client: &Client,
        run: &str,
        logs: impl Fn() -> String,
    ) -> (String, Vec<String>) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
        let deleted: Arc<Mutex<Vec<String>>> = Arc::default();
        let (listed_tx, mut listed) = tokio::sync::watch::channel(false);
        let watching = {
            let deleted = deleted.clone();
            let pods = pods.clone();
            tokio::spawn(async move {
                let mut events = watcher(pods, watcher::Config::default()).boxed();
                while let Some(e) = events.next().await {
                    match e {
                        Ok(watcher::Event::InitDone) => {
                            let _ = listed_tx.send(true);
                        }
                        // Preemption marks its victims before it deletes them. kwok, standing in
                        // for the kubelet, deletes a terminating pod by name, not by UID as a
                        // kubelet does, and now and then takes a victim's fresh replacement
                        // with it: not a preemption.
                        Ok(watcher::Event::Delete(p)) if preempted(&p) => {
                            if let Ok(mut d) = deleted.lock() {
                                d.push(p.name_any());
                            }
                        }
                        Ok(watcher::Event::Delete(p)) => {
                            eprintln!(
                                "{} (uid {}) deleted, not by preemption",
                                p.name_any(),
                                p.uid().unwrap_or_default()
                            );
                        }
                        _ => {}
                    }
                }
            })
        };
        // Only once the watch has listed does it see every deletion (upstream preempts within
        // milliseconds of the preemptor's creation).
        tokio::time::timeout(Duration::from_secs(30), listed.wait_for(|l| *l))
            .await
            .expect("the deletion watch lists within 30 s")
            .expect("the deletion watch runs");
        pods.create(&PostParams::default(), &self.preemptor(run))
            .await
            .expect("create the preemptor");
        let node = poll(
            "the preemptor bound",
            Duration::from_secs(120),
            || format!("{}\n{}", self.describe(), logs()),
            async || pods.get("preemptor").await.ok()?.spec?.node_name,
        )
        .await;
        // Every victim's replacement is pending, unschedulable: nothing preempts any more.
        let victims = poll(
            "the victims' replacements pending",
            Duration::from_secs(60),
            || format!("{}\n{}", self.describe(), logs()),
            async || {
                let d = deleted.lock().ok()?.clone();
                for name in &d {
                    let p = pods.get_opt(name).await.ok()??;
                    let unschedulable = p.status.as_ref()?.conditions.as_ref()?.iter().any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    });
                    if !unschedulable || p.spec.as_ref()?.node_name.is_some() {
                        return None;
                    }
                }
                (!d.is_empty()).then_some(d)
            },
        )
        .await;
        watching.abort();
        (node, victims)
    }

    /// Deletes the run's pods and StatefulSets.
    fn clean(&self) {
        cp().kubectl_run(&[
            "delete",
            "statefulsets,pods",
            "--all",
            "-n",
            &self.ns,
            "--wait=false",
        ]);
    }
}

/// Whether `pod` carries the condition a scheduler puts on the victims it preempts.
fn preempted(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "DisruptionTarget"
                && c.status == "True"
                && c.reason.as_deref() == Some("PreemptionByScheduler")
        })
    })
}

/// Upstream kube-scheduler serving all three scheduler names in one process.
fn upstream_for_all(cp: &ControlPlane) -> LoggedChild {
    let config = cp.dir.join("churn-upstream.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: default-scheduler\n- schedulerName: {A}\n- schedulerName: {B}\n",
            path_str(&cp.kubeconfig)
        ),
    )
    .expect("write config");
    let mut cmd = kube_scheduler_command(cp);
    cmd.args([format!("--config={}", path_str(&config)), "--v=2".into()]);
    LoggedChild::spawn(cmd, cp.dir.join("kube-scheduler-churn.log"))
}

fn ksched_config(name: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n"
    )
}

/// `Preempted` events about pod `name`.
async fn preempted_events(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    support::events::about(client, ns, "Preempted", name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_preemption_across_profiles_costs_exactly_upstreams_victims() {
    let cp = cp();
    let client = cp.client().await;

    // Upstream: one kube-scheduler for the three names.
    let upstream = Cluster::new(&client, "churn-up").await;
    let kube_scheduler = upstream_for_all(cp);
    upstream.fill(&client, "churn-up").await;
    let (up_node, up_victims) = upstream
        .preempt(&client, "churn-up", || tail(&kube_scheduler.logs(), 40))
        .await;
    let up_victims: BTreeSet<String> = up_victims.into_iter().collect();
    let up_node_is_n1 = up_node == upstream.n1;
    upstream.clean();
    drop(kube_scheduler);
    drop(upstream);

    // ksched: each profile its own process, kube-scheduler the default scheduler.
    let run = Cluster::new(&client, "churn-ks").await;
    let default = support::scheduler::default_scheduler(cp);
    let b = SchedulerProcess::start(cp, "churn-b", &ksched_config(B));
    let a_config = ksched_config(A);
    let a = SchedulerProcess::start(cp, "churn-a", &a_config);
    let logs = || {
        format!(
            "--- churn-a\n{}\n--- churn-b\n{}",
            tail(&a.logs(), 40),
            tail(&b.logs(), 200)
        )
    };
    run.fill(&client, "churn-ks").await;
    // What `ksched simulate` predicts on this state, with the preemptor pending.
    let snapshot = cp.dir.join("churn-snapshot.yaml");
    let out = std::process::Command::new(ksched_bin())
        .args([
            "simulate",
            "--kubeconfig",
            path_str(&cp.kubeconfig),
            "--save-snapshot",
            path_str(&snapshot),
            "--fail-on-pending",
        ])
        .output()
        .expect("ksched simulate --save-snapshot");
    assert!(
        snapshot.exists(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut state = std::fs::read_to_string(&snapshot).expect("snapshot");
    state.push_str("\n---\n");
    state.push_str(&serde_json::to_string(&run.preemptor("churn-ks")).expect("json"));
    std::fs::write(&snapshot, state).expect("snapshot with the preemptor");
    let profile = cp.dir.join("churn-a.yaml");
    std::fs::write(&profile, &a_config).expect("profile");
    let out = std::process::Command::new(ksched_bin())
        .args([
            "simulate",
            "--snapshot",
            path_str(&snapshot),
            "--profile",
            path_str(&profile),
            "-o",
            "json",
        ])
        .output()
        .expect("ksched simulate");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));

    let (node, victims) = run.preempt(&client, "churn-ks", logs).await;
    let victims_set: BTreeSet<String> = victims.iter().cloned().collect();
    eprintln!(
        "preemption across profiles: upstream chose {up_node} and {up_victims:?}; ksched bound on {node} after deleting {victims:?}; simulate: {}",
        report["pods"]
    );
    assert!(up_node_is_n1, "upstream chose {up_node}");
    assert_eq!(node, run.n1, "{}", logs());
    // Each victim deleted once, and exactly upstream's.
    assert_eq!(
        victims.len(),
        victims_set.len(),
        "a victim was deleted twice: {victims:?}\n{}\n{}",
        run.describe(),
        logs()
    );
    assert_eq!(victims_set, up_victims, "{}", logs());
    let preemptor = Api::<Pod>::namespaced(client.clone(), &run.ns)
        .get("preemptor")
        .await
        .expect("preemptor");
    for v in &victims_set {
        let events = preempted_events(&client, &run.ns, v).await;
        let expected = format!(
            "Preempted by pod {} on node {node}",
            preemptor.uid().unwrap_or_default()
        );
        assert!(
            events
                .iter()
                .any(|e| e.note.as_deref() == Some(expected.as_str())
                    && e.type_.as_deref() == Some("Normal")),
            "{v}: {events:?}"
        );
    }
    // simulate predicted the node and the victims.
    let pods = report["pods"].as_array().expect("pods");
    let predicted = pods
        .iter()
        .find(|p| p["name"] == "preemptor")
        .expect("the preemptor in the report");
    assert_eq!(predicted["result"], "WouldPreempt", "{predicted}");
    assert_eq!(predicted["preemption"]["node"], json!(node), "{predicted}");
    // `namespace/name` each.
    let predicted_victims: BTreeSet<String> = predicted["preemption"]["victims"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x.as_str()?.rsplit('/').next().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(predicted_victims, up_victims, "{predicted}");

    run.clean();
    drop((a, b, default));
    let _ = Api::<Pod>::namespaced(client.clone(), &run.ns)
        .delete("preemptor", &DeleteParams::default())
        .await;
}
