//! The simulation: `ksched scheduler`'s own parts — the frameworks of [`build_frameworks`], the
//! [`scheduling_queue`], the [`Cache`] with its assumed pods, the [`Nominator`] and
//! [`Algorithm::schedule_pod`] — over a [`ClusterState`] instead of informers, with an in-memory
//! API ([`RecordingApi`]) so nothing is ever written.
//!
//! Each pod goes through the scheduler's own scheduling cycle ([`Cycle`]) up to
//! Permit: the chosen node is assumed (later pods see it), Reserve and Permit run; PreBind and
//! Bind, the places for API writes, never do. A pod Permit holds (a gang) counts as placed once
//! another member's Permit allows it. PostFilter runs as well: DefaultPreemption's evictions land
//! in the recording API and are reported as "would preempt", the victims stay, and the preemptor
//! stays nominated to its node (as it would be while the victims terminate). Every pod is tried
//! once, in queue order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{Selector, SelectorExt};

use super::profile::SimulatedProfile;
use super::report::{
    Explanation, GroupExplanation, MemberExplanation, Mode, NodeExplanation, NodeReason, Outcome,
    PluginScore, PluginStatus, PodResult, Preemption, Report, Summary,
};
use super::snapshot::{ClusterState, is_finished, pod_key};
use crate::config::ExtensionPoint;
use crate::framework::api_calls::{ApiClient, RecordingApi, Verb};
use crate::framework::interface::{CycleState, Status};
use crate::framework::listers::{
    BySchedulingGroup, GroupOf, SCHEDULING_GROUP_MEMBERS, WORKLOAD_POD_GROUPS,
};
use crate::framework::plugins::names;
use crate::framework::plugins::network_traffic;
use crate::framework::registry::{Handle, Registry};
use crate::framework::runtime::{Framework, FrameworkError};
use crate::framework::schedule::Algorithm;
use crate::framework::types::{PodInfo, QueuedEntity, QueuedPodGroup, QueuedPodInfo, Snapshot};
use crate::scheduler::cache::Cache;
use crate::scheduler::cycle::{Cycle, Failure, GroupOutcome, PodDecision, Reserved, pod_group_of};
use crate::scheduler::queue::Nominator;
use crate::scheduler::run::{SchedulerError, build_frameworks, scheduling_queue};
use crate::scheduler::trim::{assigned_pod, trim_pod};

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

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(crate::operator::DEFAULT_SCHEDULER)
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Pods the scheduler would try: not bound, not finished, not being deleted.
fn is_pending(pod: &Pod) -> bool {
    node_name(pod).is_empty() && !is_finished(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// A static pod's mirror: the kubelet runs it where it is, no scheduler places it.
fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Hand-written snapshots may leave UIDs out; the cache and Permit tell pods apart by UID.
fn give_uids(pods: &mut [Pod]) {
    for pod in pods {
        if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
            pod.metadata.uid = Some(format!("simulated-{}", pod_key(pod)));
        }
    }
}

/// Makes `pod` pending again for `scheduler` (rescheduling it from scratch).
fn unbind(pod: &mut Pod, scheduler: &str) {
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
        spec.scheduler_name = Some(scheduler.to_string());
    }
    if let Some(status) = pod.status.as_mut() {
        status.nominated_node_name = None;
    }
}

/// Prepares `state` for `request` and returns the pods to schedule, sorted by key (the order a
/// freshly started scheduler lists them in, which breaks QueueSort ties).
pub(super) fn select(
    state: &mut ClusterState,
    request: &Request,
    profiles: &[String],
    first: &str,
) -> Result<Vec<Arc<PodInfo>>, SimulateError> {
    let mut chosen: Vec<Pod> = Vec::new();
    match request {
        Request::Pending { all } => {
            for pod in &mut state.pods {
                if !is_pending(pod) {
                    continue;
                }
                let ours = profiles.iter().any(|p| p == scheduler_name(pod));
                if !ours && !all {
                    continue;
                }
                if !ours {
                    unbind(pod, first);
                }
                chosen.push(pod.clone());
            }
        }
        Request::Reschedule { namespace } => {
            for pod in &mut state.pods {
                let in_scope = namespace
                    .as_deref()
                    .is_none_or(|ns| pod.metadata.namespace.as_deref() == Some(ns));
                if !in_scope
                    || node_name(pod).is_empty()
                    || is_finished(pod)
                    || pod.metadata.deletion_timestamp.is_some()
                    || is_mirror(pod)
                {
                    continue;
                }
                unbind(pod, first);
                chosen.push(pod.clone());
            }
        }
        Request::ExplainGroup { group } => {
            let (namespace, name) = group.split_once('/').unwrap_or(("default", group));
            let known = state
                .listers
                .store(&WORKLOAD_POD_GROUPS)
                .get(namespace, name)
                .is_some();
            for pod in &mut state.pods {
                let member = pod.metadata.namespace.as_deref() == Some(namespace)
                    && BySchedulingGroup::group(pod) == Some(name);
                if !member || !is_pending(pod) {
                    continue;
                }
                if !profiles.iter().any(|p| p == scheduler_name(pod)) {
                    unbind(pod, first);
                }
                chosen.push(pod.clone());
            }
            if !known || chosen.is_empty() {
                return Err(SimulateError::PodGroupNotFound(format!(
                    "{namespace}/{name}"
                )));
            }
        }
        Request::Explain { pod: key, .. } => {
            let key = if key.contains('/') {
                key.clone()
            } else {
                format!("default/{key}")
            };
            let pod = state
                .pods
                .iter_mut()
                .find(|p| pod_key(p) == key && !is_finished(p))
                .ok_or_else(|| SimulateError::PodNotFound(key.clone()))?;
            let ours = profiles.iter().any(|p| p == scheduler_name(pod));
            if !node_name(pod).is_empty() || !ours {
                unbind(pod, first);
            }
            chosen.push(pod.clone());
        }
    }
    chosen.sort_by_key(pod_key);
    Ok(chosen
        .into_iter()
        .map(|mut p| {
            trim_pod(&mut p);
            Arc::new(PodInfo::new(Arc::new(p)))
        })
        .collect())
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

    /// Every candidate through the queue, one cycle each, as the scheduler pops them.
    fn run(
        &mut self,
        config: &crate::config::Config,
        candidates: Vec<Arc<PodInfo>>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(), SimulateError> {
        let total = candidates.len();
        let popped = self.first_pass(config, &candidates, &mut |done| progress(done, total))?;
        let tried: HashSet<String> = popped.iter().map(|qpi| qpi.pod_info.key()).collect();
        self.retry_unschedulable(&popped);
        // Pods a PreEnqueue plugin keeps out of the queue (scheduling gates).
        for pod in candidates.iter().filter(|p| !tried.contains(&p.key())) {
            let status = self.framework_for(pod).run_pre_enqueue_plugins(pod);
            let mut r = result(pod, Outcome::Gated, None, status.message());
            if status.is_success() {
                r.message = "not popped from the queue".into();
            }
            self.results.push(r);
            progress(self.results.len(), total);
        }
        for w in std::mem::take(&mut self.waiting) {
            let plugins = w
                .fwk
                .waiting_pods()
                .get(w.reserved.assumed.uid())
                .map(|wp| wp.pending_plugins().join(", "))
                .unwrap_or_default();
            self.results[w.index].message = format!(
                "waiting at Permit for {plugins} on node {}: nothing allowed it, so the scheduler rejects it when the wait times out",
                w.reserved.host
            );
        }
        Ok(())
    }

    /// Every candidate through the queue once, in the order the scheduler pops them; returns the
    /// popped pods (`self.results[i]` is the result of the `i`th). `progress(done)` after each.
    pub(super) fn first_pass(
        &mut self,
        config: &crate::config::Config,
        candidates: &[Arc<PodInfo>],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<QueuedPodInfo>, SimulateError> {
        let queue =
            scheduling_queue(config, &self.frameworks)?.with_nominator(self.nominator.clone());
        for pod in candidates {
            queue.add(pod.clone());
        }
        let mut popped: Vec<QueuedPodInfo> = Vec::new();
        while queue.counts().active > 0 {
            let Some(qpi) = futures::executor::block_on(queue.pop()) else {
                break;
            };
            // A member of a PodGroup brings its group's waiting members, as in the scheduler.
            let entity = match pod_group_of(&self.handle, &qpi.pod_info) {
                Some((group, others)) => {
                    let mut members = queue.take(&others);
                    members.push(qpi);
                    QueuedEntity::Group(QueuedPodGroup::new(group, members))
                }
                None => QueuedEntity::Pod(qpi),
            };
            let first = self.results.len();
            let indexes: Vec<usize> = (first..first + entity.pods().count()).collect();
            let results = self.try_entity(&entity, &indexes);
            self.results.extend(results);
            let (members, _) = entity.into_members();
            for qpi in members {
                queue.done(&qpi.pod_info.key());
                popped.push(qpi);
            }
            self.settle_waiting();
            progress(self.results.len());
        }
        Ok(popped)
    }

    /// The scheduler tries an unschedulable pod again once the cluster changes, and pods placed
    /// after it are such changes (a pod whose affinity target came later in the queue fits now):
    /// the unschedulable pods are tried again against what the others left, pass after pass, until
    /// a pass places none. `popped[i]` is the pod of `self.results[i]`.
    fn retry_unschedulable(&mut self, popped: &[QueuedPodInfo]) {
        let unschedulable = |results: &[PodResult]| {
            results
                .iter()
                .filter(|r| r.result == Outcome::Unschedulable)
                .count()
        };
        let mut before = unschedulable(&self.results);
        // A pass goes on only when the previous one left fewer pods unschedulable (a gang member
        // may turn back when Permit rejects its group), so the passes end.
        while before > 0 {
            let mut index = 0;
            while index < popped.len() {
                if self.results[index].result != Outcome::Unschedulable {
                    index += 1;
                    continue;
                }
                // A group's unschedulable members are tried again together.
                let (entity, indexes) = self.retried_entity(popped, index);
                let retried = self.try_entity(&entity, &indexes);
                for (i, r) in indexes.iter().zip(retried) {
                    self.results[*i] = r;
                }
                self.settle_waiting();
                index += 1;
            }
            let after = unschedulable(&self.results);
            if after >= before {
                return;
            }
            before = after;
        }
    }

    /// The entity to retry for the unschedulable pod `popped[index]`: the pod alone, or with the
    /// other unschedulable members of its PodGroup (they come after it, their results go to
    /// their own indexes); and those indexes.
    fn retried_entity(&self, popped: &[QueuedPodInfo], index: usize) -> (QueuedEntity, Vec<usize>) {
        let qpi = &popped[index];
        let Some((group, others)) = pod_group_of(&self.handle, &qpi.pod_info) else {
            return (QueuedEntity::Pod(qpi.clone()), vec![index]);
        };
        let mut indexes = vec![index];
        indexes.extend((0..popped.len()).filter(|&i| {
            i != index
                && self.results[i].result == Outcome::Unschedulable
                && others.contains(&popped[i].pod_info.key())
        }));
        let group =
            QueuedPodGroup::new(group, indexes.iter().map(|&i| popped[i].clone()).collect());
        // The group's order decides; the indexes follow it.
        let indexes = group
            .members
            .iter()
            .filter_map(|m| {
                indexes
                    .iter()
                    .copied()
                    .find(|&i| popped[i].pod_info.key() == m.pod_info.key())
            })
            .collect();
        (QueuedEntity::Group(group), indexes)
    }

    /// One scheduling cycle (the scheduler's, up to Permit) for `entity`; the result of its `i`th
    /// pod goes to `self.results[indexes[i]]`. What PostFilter hands over
    /// (preemption's evictions) lands in the recording API, and is reported as what the
    /// preemption would do.
    fn try_entity(&mut self, entity: &QueuedEntity, indexes: &[usize]) -> Vec<PodResult> {
        let pods: Vec<Arc<PodInfo>> = entity.pods().cloned().collect();
        let Some(first) = pods.first() else {
            return Vec::new();
        };
        let fwk = self.framework_for(first);
        self.api.clear();
        let (decisions, outcome) = self
            .cycle
            .schedule(&fwk, entity, Instant::now())
            .into_parts();
        if let (QueuedEntity::Group(group), Some(outcome)) = (entity, outcome) {
            self.group_outcomes.insert(group.key(), outcome);
        }
        pods.iter()
            .zip(decisions)
            .zip(indexes)
            .map(|((pod, decision), &index)| match decision {
                PodDecision::Assumed(reserved) if reserved.waiting => {
                    self.waiting.push(Waiting {
                        index,
                        fwk: fwk.clone(),
                        reserved,
                    });
                    // The message is written once the simulation ends and the pod still waits.
                    result(pod, Outcome::Waiting, None, String::new())
                }
                PodDecision::Assumed(reserved) => {
                    result(pod, Outcome::Scheduled, Some(reserved.host), String::new())
                }
                PodDecision::Failed(failure) => self.failed(pod, failure),
            })
            .collect()
    }

    /// What became of the PodGroup `group` (`namespace/name`) and each of its members simulated.
    fn explain_group(&self, group: &str) -> GroupExplanation {
        let (namespace, name) = group.split_once('/').unwrap_or(("default", group));
        let pg = self
            .handle
            .listers
            .store(&WORKLOAD_POD_GROUPS)
            .get(namespace, name);
        let policy = match pg
            .as_ref()
            .and_then(|g| g.spec.scheduling_policy.gang.as_ref())
        {
            Some(gang) => format!("gang (minCount {})", gang.min_count),
            None => "basic".into(),
        };
        let key = format!("{namespace}/{name}");
        let (result, message) = match self.group_outcomes.get(&key) {
            Some(outcome) => {
                let (_, reason, message) = outcome.condition();
                (reason.to_string(), message.to_string())
            }
            // Without GenericWorkload the members are pods like any other.
            None => (
                "NotGrouped".into(),
                "no group cycle ran: workload-aware scheduling is off (--feature-gates=GenericWorkload=true, or a SchedulerProfile's workloadAwareScheduling)".into(),
            ),
        };
        let members: HashSet<String> = self
            .handle
            .listers
            .store(&SCHEDULING_GROUP_MEMBERS)
            .members(namespace, name)
            .iter()
            .map(|p| pod_key(p))
            .collect();
        let members = self
            .results
            .iter()
            .filter(|r| members.contains(&r.key()))
            .map(|r| MemberExplanation {
                pod: r.key(),
                node: r.node.clone(),
                message: r.message.clone(),
            })
            .collect();
        GroupExplanation {
            group: key,
            policy,
            placement: "every node (no topology constraint)".into(),
            result,
            message,
            members,
        }
    }

    /// A pod not placed: the message the FailedScheduling event would carry, every node's
    /// rejecting plugin when no node fit, and the preemption PostFilter would start.
    fn failed(&mut self, pod: &PodInfo, failure: Failure) -> PodResult {
        let api: Arc<dyn ApiClient> = self.api.clone();
        self.handle.dispatcher.run_queued(&api);
        let preemption = failure
            .nominated
            .clone()
            .filter(|node| !node.is_empty())
            .map(|node| Preemption {
                node,
                victims: self.api.keys::<Pod>(Verb::Delete, None),
            });
        let Some(fit) = failure.fit else {
            // Rejected at Reserve or Permit, an error, or a member of a group (its group's
            // preemption nominates it).
            let outcome = match (&preemption, failure.unschedulable) {
                (Some(_), _) => Outcome::WouldPreempt,
                (None, true) => Outcome::Unschedulable,
                (None, false) => Outcome::Error,
            };
            let message = match &failure.plugin {
                Some(p) => format!("{p}: {}", failure.message),
                None => failure.message,
            };
            let mut r = result(pod, outcome, None, message);
            r.preemption = preemption;
            return r;
        };
        let snapshot = self.handle.snapshot.load();
        let mut node_reasons: Vec<NodeReason> = snapshot
            .nodes()
            .iter()
            .map(|n| {
                let s = fit.diagnosis.node_to_status.get(n.name());
                NodeReason {
                    node: n.name().to_string(),
                    plugin: s.plugin().unwrap_or("").to_string(),
                    reasons: s.reasons().to_vec(),
                }
            })
            .collect();
        node_reasons.sort_by(|a, b| a.node.cmp(&b.node));
        let outcome = if preemption.is_some() {
            Outcome::WouldPreempt
        } else {
            Outcome::Unschedulable
        };
        let mut r = result(pod, outcome, None, failure.message);
        r.preemption = preemption;
        r.node_reasons = node_reasons;
        r
    }

    /// Pods Permit held that another pod's Permit allowed (placed) or a plugin rejected (their
    /// reservation undone, as the binding cycle would).
    fn settle_waiting(&mut self) {
        let mut still = Vec::new();
        for mut w in std::mem::take(&mut self.waiting) {
            let uid = w.reserved.assumed.uid().to_string();
            let outcome = w.fwk.waiting_pods().get(&uid).and_then(|wp| wp.outcome());
            match outcome {
                None => still.push(w),
                Some(s) => {
                    w.fwk.waiting_pods().remove(&uid);
                    let r = &mut self.results[w.index];
                    if s.is_success() {
                        r.result = Outcome::Scheduled;
                        r.node = Some(w.reserved.host.clone());
                        r.message.clear();
                    } else {
                        self.cycle.undo(&w.fwk, &mut w.reserved);
                        let failed = self.failed(&w.reserved.assumed, Failure::from_status(&s));
                        let r = &mut self.results[w.index];
                        r.result = failed.result;
                        r.message = failed.message;
                    }
                }
            }
        }
        self.waiting = still;
    }

    /// Every plugin's verdict for `pod` on every node (or `only`), on the cluster as it is.
    fn explain(&self, fwk: &Framework, pod: &PodInfo, only: Option<&str>) -> Explanation {
        let snapshot = self.snapshot();
        let plugins = fwk.list_plugins();
        let at = |ep: ExtensionPoint| plugins.get(&ep).cloned().unwrap_or_default();
        let fresh = || {
            let mut s = CycleState::new();
            s.set_num_all_nodes(snapshot.num_nodes());
            s
        };
        // Each PreFilter plugin's own verdict (the framework stops at the first rejection).
        let pre_filter: Vec<PluginStatus> = at(ExtensionPoint::PreFilter)
            .iter()
            .filter_map(|(name, _)| {
                let p = fwk.plugin(name)?.as_pre_filter()?;
                let (res, s) = p.pre_filter(&mut fresh(), pod, &snapshot);
                let mut ps = PluginStatus::new(name, &s);
                if let Some(nodes) = res.and_then(|r| r.node_names) {
                    let list: Vec<&str> = nodes.iter().map(String::as_str).collect();
                    ps.reasons.push(format!("only nodes: {}", list.join(", ")));
                }
                Some(ps)
            })
            .collect();
        let mut state = fresh();
        let (res, pre_status, _) = fwk.run_pre_filter_plugins(&mut state, pod, &snapshot);
        let allowed = res.and_then(|r| r.node_names);
        let filters = at(ExtensionPoint::Filter);
        let mut nodes: Vec<NodeExplanation> = Vec::with_capacity(snapshot.num_nodes());
        let mut feasible = Vec::new();
        for node in snapshot.nodes() {
            let mut statuses = Vec::new();
            if !pre_status.is_success() {
                statuses.push(PluginStatus::new("PreFilter", &pre_status));
            } else if allowed.as_ref().is_some_and(|a| !a.contains(node.name())) {
                let s = Status::unresolvable("node(s) didn't satisfy PreFilter's node set");
                statuses.push(PluginStatus::new("PreFilter", &s));
            } else {
                for (name, _) in &filters {
                    let s = if state.skip_filter_plugins().iter().any(|p| &**p == name) {
                        Status::skip()
                    } else {
                        match fwk.plugin(name).and_then(|p| p.as_filter()) {
                            Some(p) => p.filter(&state, pod, node),
                            None => continue,
                        }
                    };
                    statuses.push(PluginStatus::new(name, &s));
                }
            }
            let ok = statuses
                .iter()
                .all(|s| s.code == "Success" || s.code == "Skip");
            if ok {
                feasible.push(node.clone());
            }
            nodes.push(NodeExplanation {
                node: node.name().to_string(),
                feasible: ok,
                filters: statuses,
                scores: Vec::new(),
                total_score: None,
            });
        }
        // Scores over every feasible node: normalization is relative to the whole set.
        if !feasible.is_empty()
            && fwk.has_score_plugins()
            && fwk
                .run_pre_score_plugins(&mut state, pod, &snapshot, &feasible)
                .is_success()
            && let Ok(scores) = fwk.run_score_plugins(&state, pod, &feasible)
        {
            let weights: BTreeMap<String, i32> = at(ExtensionPoint::Score).into_iter().collect();
            let by_node: HashMap<&str, usize> = scores
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (&**n, i))
                .collect();
            for n in &mut nodes {
                let Some(&i) = by_node.get(n.node.as_str()) else {
                    continue;
                };
                n.total_score = Some(scores.totals[i]);
                n.scores = scores
                    .plugin_scores(i)
                    .map(|(plugin, weighted)| {
                        let weight = i64::from(weights.get(plugin).copied().unwrap_or(1).max(1));
                        PluginScore {
                            plugin: plugin.to_string(),
                            score: weighted / weight,
                            weight,
                            weighted,
                        }
                    })
                    .collect();
            }
        }
        if let Some(only) = only {
            nodes.retain(|n| n.node == only);
        }
        Explanation {
            pod: pod.key(),
            pre_filter,
            nodes,
        }
    }
}

fn result(pod: &PodInfo, outcome: Outcome, node: Option<String>, message: String) -> PodResult {
    PodResult {
        namespace: pod.namespace().to_string(),
        name: pod.name().to_string(),
        scheduler_name: pod.scheduler_name().to_string(),
        result: outcome,
        node,
        message,
        preemption: None,
        node_reasons: Vec::new(),
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
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::operator::render_cli::Input;
    use crate::simulate::profile;

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
}
