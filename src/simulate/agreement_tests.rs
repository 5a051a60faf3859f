//! The scheduler and the simulation run the same scheduling cycle: random clusters and streams of
//! pending pods go through `ksched scheduler`'s wrapper (its queue, its failure handler, binding
//! cycles through a recording API) and through `ksched simulate`'s (its first pass over the
//! queue), and every pod must get the same decision: the same node, or the same failure message
//! and the same nomination.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;

use super::engine::{Simulation, offline_registry, select};
use super::profile;
use super::report::Outcome;
use super::snapshot::ClusterState;
use crate::framework::api_calls::{ApiClient, RecordingApi};
use crate::framework::registry::{Handle, Registry};
use crate::framework::schedule::Algorithm;
use crate::framework::testing::{NodeBuilder, PodBuilder, pod_term, spread_constraint};
use crate::framework::types::QueuedEntity;
use crate::scheduler::cache::Cache;
use crate::scheduler::cycle::Cycle;
use crate::scheduler::events::{REASON_UNSCHEDULABLE, Reporter};
use crate::scheduler::leader_election::Leadership;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::queue::Nominator;
use crate::scheduler::run::{build_frameworks, scheduling_queue};
use crate::scheduler::schedule_one::Scheduler;
use crate::scheduler::trim::{assigned_pod, trim_pod};

const ZONE: &str = "topology.kubernetes.io/zone";

/// What became of a pod, as either wrapper reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decided {
    Bound(String),
    Unschedulable {
        message: String,
        nominated: Option<String>,
    },
    Error(String),
}

/// The scheduler's reports of one profile, kept.
#[derive(Default)]
struct Recorder {
    decided: Mutex<BTreeMap<String, Decided>>,
}

#[async_trait::async_trait]
impl Reporter for Recorder {
    fn scheduled(&self, pod: &Pod, node: &str) {
        self.decided
            .lock()
            .insert(key(pod), Decided::Bound(node.to_string()));
    }

    async fn failed(&self, pod: &Pod, reason: &str, message: &str, nominated: Option<&str>) {
        let decided = if reason == REASON_UNSCHEDULABLE {
            Decided::Unschedulable {
                message: message.to_string(),
                nominated: nominated.filter(|n| !n.is_empty()).map(str::to_string),
            }
        } else {
            Decided::Error(message.to_string())
        };
        self.decided.lock().insert(key(pod), decided);
    }

    async fn nominate(&self, _pod: &Pod, _node: &str) {}
}

fn key(pod: &Pod) -> String {
    crate::scheduler::informers::pod_key(pod)
}

/// A random cluster: nodes of a few sizes over three zones, some tainted or cordoned, and pods
/// running on them at two priorities.
fn random_cluster(rng: &mut fastrand::Rng) -> (Vec<Node>, Vec<Pod>) {
    let n = rng.usize(3..24);
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let cpu = ["1", "2", "4", "8"][rng.usize(..4)];
        let memory = ["2Gi", "4Gi", "16Gi"][rng.usize(..3)];
        let mut b = NodeBuilder::new(&format!("n{i:02}"))
            .label(ZONE, &format!("zone-{}", rng.usize(..3)))
            .label("disk", if rng.bool() { "ssd" } else { "hdd" })
            .allocatable(&[("cpu", cpu), ("memory", memory), ("pods", "20")]);
        match rng.usize(..8) {
            0 => b = b.taint("dedicated", "batch", "NoSchedule"),
            1 => b = b.taint("spot", "", "PreferNoSchedule"),
            2 => b = b.unschedulable(),
            _ => {}
        }
        nodes.push(b.build());
    }
    let running = (0..rng.usize(..2 * n))
        .map(|j| {
            PodBuilder::new(&format!("running-{j:02}"))
                .uid(&format!("uid-running-{j}"))
                .node(&format!("n{:02}", rng.usize(..n)))
                .label("app", ["web", "db"][rng.usize(..2)])
                .priority([0, 100][rng.usize(..2)])
                .container(&[("cpu", "500m"), ("memory", "512Mi")])
                .build()
        })
        .collect();
    (nodes, running)
}

/// A random pending pod: requests, priority (a high one may preempt), tolerations, zone
/// selectors and preferences, anti-affinity and spreading among its app's pods.
fn random_pod(rng: &mut fastrand::Rng, i: usize) -> Pod {
    let app = ["web", "db", "batch"][rng.usize(..3)];
    let cpu = ["100m", "500m", "1", "2", "6"][rng.usize(..5)];
    let mut b = PodBuilder::new(&format!("p{i:03}"))
        .uid(&format!("uid-p{i}"))
        .scheduler_name("default-scheduler")
        .label("app", app)
        .priority([0, 0, 50, 1000][rng.usize(..4)])
        .container(&[("cpu", cpu), ("memory", ["256Mi", "1Gi"][rng.usize(..2)])]);
    if rng.usize(..4) == 0 {
        b = b.toleration("dedicated", "Equal", "batch", "NoSchedule");
    }
    if rng.usize(..6) == 0 {
        b = b.node_selector(ZONE, &format!("zone-{}", rng.usize(..3)));
    }
    if rng.usize(..4) == 0 {
        let ssd = crate::framework::testing::term(&[("disk", "In", &["ssd"])], &[]);
        b = b.preferred_term(rng.i32(1..100), ssd);
    }
    match rng.usize(..6) {
        0 => b = b.required_pod_anti_affinity(pod_term(&[("app", app)], "kubernetes.io/hostname")),
        1 => {
            b = b.spread(spread_constraint(
                1,
                ZONE,
                "DoNotSchedule",
                Some(&[("app", app)]),
            ))
        }
        2 => {
            b = b.spread(spread_constraint(
                2,
                ZONE,
                "ScheduleAnyway",
                Some(&[("app", app)]),
            ))
        }
        _ => {}
    }
    b.build()
}

/// The decisions of `ksched simulate`'s first pass.
fn simulated(nodes: &[Node], running: &[Pod], pending: &[Pod]) -> HashMap<String, Decided> {
    let profile = profile::load(None, &[], &Registry::in_tree(), &[]).expect("default profile");
    let registry = offline_registry(Registry::in_tree());
    let mut state = ClusterState {
        nodes: nodes.to_vec(),
        pods: running.iter().chain(pending).cloned().collect(),
        ..ClusterState::default()
    };
    let names = vec!["default-scheduler".to_string()];
    let request = super::engine::Request::Pending { all: false };
    let candidates = select(&mut state, &request, &names, &names[0]).expect("select");
    let mut sim = Simulation::new(state, &profile.config, &registry).expect("simulation");
    sim.first_pass(&profile.config, &candidates, &mut |_| {})
        .expect("first pass");
    sim.results
        .iter()
        .map(|r| {
            let decided = match r.result {
                Outcome::Scheduled => Decided::Bound(r.node.clone().unwrap_or_default()),
                Outcome::Unschedulable | Outcome::WouldPreempt => Decided::Unschedulable {
                    message: r.message.clone(),
                    nominated: r.preemption.as_ref().map(|p| p.node.clone()),
                },
                Outcome::Error => Decided::Error(r.message.clone()),
                other => panic!("{}: {other:?}", r.key()),
            };
            (r.key(), decided)
        })
        .collect()
}

/// The decisions of `ksched scheduler`: its queue, cycles and failure handler, binding through
/// a recording API, over a cache filled as its informers fill it.
async fn scheduled(nodes: &[Node], running: &[Pod], pending: &[Pod]) -> HashMap<String, Decided> {
    let profile = profile::load(None, &[], &Registry::in_tree(), &[]).expect("default profile");
    let config = &profile.config;
    let registry = offline_registry(Registry::in_tree());
    let api = Arc::new(RecordingApi::default());
    let nominator = Arc::new(Nominator::new());
    let handle = Handle::new(api.clone()).with_nominator(nominator.clone());
    let (frameworks, _) = build_frameworks(config, &registry, &handle).expect("frameworks");
    let queue = Arc::new(
        scheduling_queue(config, &frameworks)
            .expect("queue")
            .with_nominator(nominator.clone()),
    );
    let cache = Arc::new(Cache::default());
    let mut sorted: Vec<Node> = nodes.to_vec();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for node in sorted {
        cache.add_node(Arc::new(node));
    }
    for pod in running {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        cache.add_or_update_pod(
            &node.unwrap_or_default(),
            Arc::new(assigned_pod(pod.clone())),
        );
    }
    let recorder = Arc::new(Recorder::default());
    let reporters = frameworks
        .keys()
        .map(|name| (name.clone(), recorder.clone() as Arc<dyn Reporter>))
        .collect();
    let algorithm = Algorithm::new(config.percentage_of_nodes_to_score);
    let cycle = Cycle::new(cache, nominator, handle.snapshot.clone(), algorithm);
    let scheduler = Arc::new(Scheduler {
        cycle,
        queue: queue.clone(),
        frameworks,
        reporters,
        handle,
        metrics: Arc::new(Metrics::new()),
        leadership: Leadership::always(),
        scheduled_groups: Arc::default(),
    });
    let mut sorted: Vec<Pod> = pending.to_vec();
    sorted.sort_by_key(key);
    for mut pod in sorted {
        trim_pod(&mut pod);
        queue.add(Arc::new(crate::framework::types::PodInfo::new(Arc::new(
            pod,
        ))));
    }
    let mut popped = 0;
    let dispatched: Arc<dyn ApiClient> = api.clone();
    while queue.counts().active > 0 {
        let Some(qpi) = queue.pop().await else { break };
        popped += 1;
        scheduler.schedule_one(QueuedEntity::Pod(qpi)).await;
        // What the cycle handed to the dispatcher (preemption's evictions) is done before the
        // next cycle, as in the simulation.
        scheduler.handle.dispatcher.run_queued(&dispatched);
    }
    // The binding cycles run on this thread, between the scheduling cycles and after them.
    for _ in 0..10_000 {
        if recorder.decided.lock().len() == popped {
            break;
        }
        tokio::task::yield_now().await;
    }
    let decided = recorder.decided.lock().clone();
    assert_eq!(decided.len(), popped, "every popped pod was decided");
    decided.into_iter().collect()
}

#[tokio::test]
async fn scheduler_and_simulation_decide_alike() {
    let mut decisions = BTreeMap::<&str, usize>::new();
    for seed in 0..40 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (nodes, running) = random_cluster(&mut rng);
        let pending: Vec<Pod> = (0..rng.usize(5..40))
            .map(|i| random_pod(&mut rng, i))
            .collect();
        // Preemption starts its search at a random node (as upstream); both runs draw the same.
        fastrand::seed(seed);
        let want = simulated(&nodes, &running, &pending);
        fastrand::seed(seed);
        let got = scheduled(&nodes, &running, &pending).await;
        assert_eq!(
            want.len(),
            pending.len(),
            "seed {seed}: every pod simulated"
        );
        let mut sorted: Vec<_> = want.iter().collect();
        sorted.sort_by_key(|(k, _)| k.as_str());
        for (pod, decided) in sorted {
            assert_eq!(got.get(pod), Some(decided), "seed {seed}, pod {pod}");
            let kind = match decided {
                Decided::Bound(_) => "bound",
                Decided::Unschedulable {
                    nominated: Some(_), ..
                } => "nominated",
                Decided::Unschedulable { .. } => "unschedulable",
                Decided::Error(_) => "error",
            };
            *decisions.entry(kind).or_default() += 1;
        }
    }
    // The streams exercise every kind of decision but errors.
    for kind in ["bound", "nominated", "unschedulable"] {
        assert!(decisions.get(kind).is_some_and(|n| *n > 5), "{decisions:?}");
    }
}
