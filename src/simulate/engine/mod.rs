//! The simulation: `ksched scheduler`'s own parts — the frameworks of [`build_frameworks`], the
//! [`scheduling_queue`](crate::scheduler::run::scheduling_queue), the [`Cache`] with its assumed
//! pods, the [`Nominator`] and [`Algorithm::schedule_pod`] — over a [`ClusterState`] instead of
//! informers, with an in-memory API ([`RecordingApi`]) so nothing is ever written.
//!
//! Each pod goes through the scheduler's own scheduling cycle ([`Cycle`]) up to
//! Permit: the chosen node is assumed (later pods see it), Reserve and Permit run; PreBind and
//! Bind, the places for API writes, never do. A pod Permit holds (a gang) counts as placed once
//! another member's Permit allows it. PostFilter runs as well: DefaultPreemption's evictions land
//! in the recording API and are reported as "would preempt", the victims stay, and the preemptor
//! stays nominated to its node (as it would be while the victims terminate). Every pod is tried
//! once, in queue order.
//!
//! This module holds the request, [`simulate`] and the [`Simulation`] itself (the scheduler's
//! parts and their construction); the rest is grouped by what it does:
//!
//! - `candidates`: which pods a request schedules, made pending as the scheduler would see them.
//! - `cycles`: the candidates through the queue and the scheduling cycle, the retries of
//!   unschedulable pods, pods Permit holds, and what a pod not placed reports.
//! - `explain`: every plugin's verdict for one pod, and what became of a PodGroup.

mod candidates;
mod cycles;
mod explain;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::core::{Selector, SelectorExt};

use super::profile::SimulatedProfile;
use super::report::{Mode, Outcome, PodResult, Report, Summary};
use super::snapshot::{ClusterState, is_finished, pod_key};
use crate::framework::api_calls::RecordingApi;
use crate::framework::plugins::names;
use crate::framework::plugins::network_traffic;
use crate::framework::registry::{Handle, Registry};
use crate::framework::runtime::{Framework, FrameworkError};
use crate::framework::schedule::Algorithm;
use crate::framework::types::{PodInfo, Snapshot};
use crate::scheduler::cache::Cache;
use crate::scheduler::cycle::{Cycle, GroupOutcome, Reserved};
use crate::scheduler::queue::Nominator;
use crate::scheduler::run::{SchedulerError, build_frameworks};
use crate::scheduler::trim::assigned_pod;
use candidates::{give_uids, node_name, scheduler_name};

pub(super) use candidates::select;

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The pending pods of the profiles' scheduler names; `all`: every pending pod (those of other
    /// schedulers go to the first profile).
    Pending { all: bool },
    /// The running pods of `namespace` (all namespaces: `None`) placed anew, the other pods of
    /// those namespaces gone.
    Reschedule { namespace: Option<String> },
    /// One pod (`namespace/name`), every plugin's verdict per node; only `node` when given.
    Explain { pod: String, node: Option<String> },
    /// One `scheduling.k8s.io` PodGroup (`namespace/name`): its pending members placed in its
    /// group cycle (with GenericWorkload), and what became of each.
    ExplainGroup { group: String },
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Framework(#[from] FrameworkError),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    #[error("pod {0} is not in the cluster state (give it as NAMESPACE/NAME)")]
    PodNotFound(String),
    #[error(
        "PodGroup {0} (scheduling.k8s.io) is not in the cluster state, or none of its pods is pending (give it as podgroup/NAMESPACE/NAME)"
    )]
    PodGroupNotFound(String),
    #[error("node {0} is not in the cluster state")]
    NodeNotFound(String),
    #[error("leaf node selector: {0}")]
    Selector(String),
}

/// The registry a simulation runs: the given one, with plugins that reach outside the cluster
/// swapped for offline versions (NetworkTraffic asks Prometheus; here every node scores the same).
pub fn offline_registry(mut registry: Registry) -> Registry {
    registry.replace(
        names::NETWORK_TRAFFIC,
        network_traffic::offline_registration(),
    );
    registry
}

/// A pod that Permit holds, and what its cycle reserved.
struct Waiting {
    index: usize,
    fwk: Arc<Framework>,
    reserved: Reserved,
}

pub(super) struct Simulation {
    frameworks: HashMap<String, Arc<Framework>>,
    handle: Handle,
    cycle: Cycle,
    nominator: Arc<Nominator>,
    api: Arc<RecordingApi>,
    pub(super) results: Vec<PodResult>,
    waiting: Vec<Waiting>,
    /// The last group cycle's outcome per PodGroup (`namespace/name`).
    group_outcomes: HashMap<String, GroupOutcome>,
}

/// Runs `request` on `state` under `profile`; `progress(done, total)` after every pod.
pub fn simulate(
    mut state: ClusterState,
    profile: &SimulatedProfile,
    registry: &Registry,
    request: &Request,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, SimulateError> {
    let config = &profile.config;
    let profiles: Vec<String> = config
        .profiles
        .iter()
        .map(|p| p.scheduler_name.clone())
        .collect();
    let first = profiles.first().cloned().unwrap_or_default();
    let mut warnings = profile.warnings.clone();
    let unknown = state.resolve_priorities();
    if !unknown.is_empty() {
        warnings.push(format!(
            "pods name a PriorityClass the snapshot does not have (priority 0 assumed): {}",
            unknown.join(", ")
        ));
    }
    give_uids(&mut state.pods);
    let original: HashMap<String, String> = state
        .pods
        .iter()
        .map(|p| (pod_key(p), scheduler_name(p).to_string()))
        .collect();
    let candidates = select(&mut state, request, &profiles, &first)?;
    if let Request::Explain {
        node: Some(node), ..
    } = request
        && !state
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_ref() == Some(node))
    {
        return Err(SimulateError::NodeNotFound(node.clone()));
    }
    let leaf_selectors = profile
        .leaf_selectors
        .iter()
        .map(|s| Selector::try_from(s.clone()).map_err(|e| SimulateError::Selector(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let leaf_nodes: HashSet<String> = state
        .nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            leaf_selectors.iter().any(|s| s.matches(&labels))
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let num_nodes = state.nodes.len();

    let mut sim = Simulation::new(state, config, registry)?;
    for fwk in sim.frameworks.values() {
        if fwk.plugin(names::NETWORK_TRAFFIC).is_some() {
            warnings.push(format!(
                "profile {}: NetworkTraffic does not ask Prometheus in a simulation; every node gets the same NetworkTraffic score",
                fwk.profile_name()
            ));
        }
    }
    let explain = match request {
        Request::Explain { pod, node } => {
            let info = candidates
                .first()
                .ok_or_else(|| SimulateError::PodNotFound(pod.clone()))?;
            let fwk = sim.framework_for(info);
            Some(sim.explain(&fwk, info, node.as_deref()))
        }
        _ => None,
    };
    sim.run(config, candidates, progress)?;
    for r in &mut sim.results {
        if let Some(name) = original.get(&r.key()) {
            r.scheduler_name = name.clone();
        }
    }
    let summary = summarize(&sim.results, &leaf_nodes);
    Ok(Report {
        api_version: "ksched.io/v1alpha1".into(),
        kind: "SimulationReport".into(),
        mode: match request {
            Request::Pending { .. } => Mode::Pending,
            Request::Reschedule { .. } => Mode::Reschedule,
            Request::Explain { .. } | Request::ExplainGroup { .. } => Mode::Explain,
        },
        profiles,
        kubernetes_version: config.emulation.minor().to_string(),
        nodes: num_nodes,
        warnings,
        summary,
        explain_group: match request {
            Request::ExplainGroup { group } => Some(sim.explain_group(group)),
            _ => None,
        },
        pods: sim.results,
        explain,
    })
}

impl Simulation {
    /// The scheduler's parts, filled from `state` as its informers would fill them.
    pub(super) fn new(
        state: ClusterState,
        config: &crate::config::Config,
        registry: &Registry,
    ) -> Result<Simulation, SimulateError> {
        let ClusterState {
            mut nodes,
            pods,
            listers,
            ..
        } = state;
        let api = Arc::new(RecordingApi::default());
        let nominator = Arc::new(Nominator::new());
        let mut handle = Handle::new(api.clone())
            .with_nominator(nominator.clone())
            .with_emulation(config.emulation.clone());
        handle.listers = Arc::new(listers);
        let (frameworks, informers) = build_frameworks(config, registry, &handle)?;
        let cache = Arc::new(Cache::default());
        // The API lists nodes by name; the snapshot's order (and the rotating start) follows.
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for node in nodes {
            cache.add_node(Arc::new(node));
        }
        let mut live = Vec::with_capacity(pods.len());
        for pod in pods {
            if is_finished(&pod) {
                continue;
            }
            let node = node_name(&pod).to_string();
            if !node.is_empty() {
                cache.add_or_update_pod(&node, Arc::new(assigned_pod(pod.clone())));
            }
            live.push(pod);
        }
        // A kind of pods the plugins read (Coscheduling's members index) is filled as its
        // informer fills it, from the pods.
        for kind in informers {
            kind.replace_pods(&handle.listers, live.clone());
        }
        let algorithm = Algorithm::new(config.percentage_of_nodes_to_score);
        let cycle = Cycle::new(cache, nominator.clone(), handle.snapshot.clone(), algorithm);
        Ok(Simulation {
            frameworks,
            handle,
            cycle,
            nominator,
            api,
            results: Vec::new(),
            waiting: Vec::new(),
            group_outcomes: HashMap::new(),
        })
    }

    fn framework_for(&self, pod: &PodInfo) -> Arc<Framework> {
        match self.frameworks.get(pod.scheduler_name()) {
            Some(f) => f.clone(),
            // `select` gives every candidate a profile's scheduler name.
            None => self
                .frameworks
                .values()
                .next()
                .cloned()
                .unwrap_or_else(|| unreachable!("a configuration has at least one profile")),
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.cycle.snapshot()
    }
}

fn summarize(results: &[PodResult], leaf_nodes: &HashSet<String>) -> Summary {
    let mut s = Summary {
        pods: results.len(),
        ..Summary::default()
    };
    let (mut host, mut leaf) = (0, 0);
    for r in results {
        match r.result {
            Outcome::Scheduled => s.scheduled += 1,
            Outcome::Unschedulable => s.unschedulable += 1,
            Outcome::WouldPreempt => s.would_preempt += 1,
            Outcome::Waiting => s.waiting += 1,
            Outcome::Gated => s.gated += 1,
            Outcome::Error => s.errors += 1,
        }
        if let Some(node) = &r.node {
            if leaf_nodes.contains(node) {
                leaf += 1;
            } else {
                host += 1;
            }
        }
    }
    if !leaf_nodes.is_empty() {
        s.on_host_nodes = Some(host);
        s.on_leaf_nodes = Some(leaf);
    }
    s
}

#[cfg(test)]
mod tests;
