//! The DefaultPreemption plugin (upstream's `plugins/defaultpreemption/default_preemption.go`):
//! its args and candidate counts, which pods may preempt (`PodEligibleToPreemptOthers`), the
//! victims on one node (`SelectVictimsOnNode`, PDB violations first reprieved), and its PreEnqueue
//! and PostFilter.

use std::sync::Arc;

use super::DefaultPreemptionArgs;
use super::evaluator::{Evaluator, Interface};
use super::executor::REASON_PREEMPTION_BY_SCHEDULER;
use super::victims::{Victim, VictimCluster, VictimIndex, choose_victims, extend};
use crate::emulation::GENERIC_WORKLOAD;
use crate::framework::args::{decode, typed};
use crate::framework::interface::{
    ClusterEventWithHint, Code, CycleState, EnqueueExtensions, FrameworkHandle, NodeToStatus,
    PostFilterPlugin, PostFilterResult, PreEnqueuePlugin, Status,
};
use crate::framework::listers::{
    BySchedulingGroup, GroupOf, POD_DISRUPTION_BUDGETS, WORKLOAD_POD_GROUPS,
};
use crate::framework::metrics::FrameworkMetrics;
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::{Handle, PluginRegistration, policy_rule};
use crate::framework::types::{
    ActionType, AssignedPod, ClusterEvent, EventResource, NodeInfo, PodInfo, QueueingHint, Snapshot,
};

/// A node where every lower-priority pod was removed and the pod still does not fit.
pub(crate) const ERR_NO_VICTIMS: &str = "No preemption victims found for incoming pod";

pub(crate) const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";

pub(crate) const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";

/// PreEnqueue's reason while the pod's own preemption is still evicting.
pub(crate) const WAITING_FOR_PREEMPTION: &str =
    "waiting for the preemption for this pod to be finished";

/// PreEnqueue's reason while the preemption of the pod's group is still evicting.
pub(crate) const WAITING_FOR_GROUP_PREEMPTION: &str =
    "waiting for the preemption for this pod group to be finished";

/// Picks the random start among `n` potential nodes (upstream's `getOffsetRand`).
type OffsetFn = Box<dyn Fn(usize) -> usize + Send + Sync>;

pub(crate) struct DefaultPreemption {
    min_candidate_nodes_percentage: i32,
    min_candidate_nodes_absolute: i32,
    offset: OffsetFn,
    pub(super) evaluator: Evaluator,
    pub(super) metrics: Option<Arc<FrameworkMetrics>>,
}

impl DefaultPreemption {
    pub(crate) fn new(args: &DefaultPreemptionArgs, handle: Handle) -> DefaultPreemption {
        DefaultPreemption {
            min_candidate_nodes_percentage: args.min_candidate_nodes_percentage.unwrap_or(10),
            min_candidate_nodes_absolute: args.min_candidate_nodes_absolute.unwrap_or(100),
            offset: Box::new(|n| if n == 0 { 0 } else { fastrand::usize(..n) }),
            metrics: handle.metrics.clone(),
            evaluator: Evaluator::new(handle),
        }
    }

    /// Replaces the random offset (tests).
    #[cfg(test)]
    pub(crate) fn with_offset(
        mut self,
        offset: impl Fn(usize) -> usize + Send + Sync + 'static,
    ) -> Self {
        self.offset = Box::new(offset);
        self
    }

    /// How many candidates to find among `num_nodes` potential nodes (upstream's
    /// `calculateNumCandidates`).
    pub(crate) fn num_candidates(&self, num_nodes: usize) -> usize {
        let pct = usize::try_from(self.min_candidate_nodes_percentage).unwrap_or(0);
        let abs = usize::try_from(self.min_candidate_nodes_absolute).unwrap_or(0);
        (num_nodes * pct / 100).max(abs).min(num_nodes)
    }
}

impl Interface for DefaultPreemption {
    fn offset_and_num_candidates(&self, num_nodes: usize) -> (usize, usize) {
        ((self.offset)(num_nodes), self.num_candidates(num_nodes))
    }

    fn pod_eligible_to_preempt_others(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        index: &VictimIndex,
        nominated_status: &Status,
    ) -> Result<(), &'static str> {
        let policy = pod.spec().and_then(|s| s.preemption_policy.as_deref());
        if policy == Some("Never") {
            return Err(NOT_ELIGIBLE_NEVER);
        }
        let nominated = pod.nominated_node_name();
        if nominated.is_empty() || nominated_status.code() == Code::UnschedulableAndUnresolvable {
            return Ok(());
        }
        if let Some(node) = snapshot.get(nominated)
            && node
                .pods
                .iter()
                .any(|p| index.priority_of(p) < pod.priority() && terminating_by_preemption(p))
        {
            return Err(NOT_ELIGIBLE_TERMINATING);
        }
        Ok(())
    }

    /// Lower-priority units only (a pod, or a whole PodGroup with `disruptionMode: all` that has
    /// a pod here); PDB violators are reprieved first. Only `node` changes: a whole group's pods
    /// on other nodes go through the PreFilter extensions with their own node, as upstream's.
    fn select_victims_on_node(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &mut NodeInfo,
        cluster: &VictimCluster<'_>,
    ) -> Result<(Vec<Arc<AssignedPod>>, usize), Status> {
        let main = node.name().to_string();
        let change = |state: &mut CycleState, node: &mut NodeInfo, v: &Victim, add: bool| {
            for (on, p) in &v.pods {
                let status = if *on == main {
                    if add {
                        node.add_pod(p.clone());
                    } else {
                        node.remove_pod(p)
                            .map_err(|e| Status::error(e.to_string()))?;
                    }
                    extend(fwk, state, pod, p, node, add)
                } else if let Some(remote) = cluster.snapshot.get(on) {
                    extend(fwk, state, pod, p, remote, add)
                } else {
                    continue;
                };
                if !status.is_success() {
                    return Err(status);
                }
            }
            Ok(())
        };
        let potential: Vec<Victim> = cluster
            .index
            .units(std::iter::once(&*node))
            .into_iter()
            .filter(|v| v.priority < pod.priority())
            .collect();
        for v in &potential {
            change(state, node, v, false)?;
        }
        if potential.is_empty() {
            return Err(Status::unresolvable(ERR_NO_VICTIMS));
        }
        let s = fwk.run_filter_plugins_with_nominated_pods(state, pod, node);
        if !s.is_success() {
            return Err(s);
        }
        let (victims, num_violating) = choose_victims(potential, cluster.pdbs, |v| {
            change(state, node, v, true)?;
            let fits = fwk
                .run_filter_plugins_with_nominated_pods(state, pod, node)
                .is_success();
            if !fits {
                change(state, node, v, false)?;
            }
            Ok(fits)
        })?;
        let pods = victims
            .into_iter()
            .flat_map(|v| v.pods.into_iter().map(|(_, p)| p))
            .collect();
        Ok((pods, num_violating))
    }
}

/// A victim the scheduler is already evicting: deleted, with `DisruptionTarget=True` by
/// `PreemptionByScheduler`.
pub(super) fn terminating_by_preemption(p: &AssignedPod) -> bool {
    p.is_terminating()
        && p.disruption_target().is_some_and(|c| {
            c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
        })
}

impl_plugin!(
    DefaultPreemption,
    names::DEFAULT_PREEMPTION,
    [PreEnqueue, PostFilter, PodGroupPostFilter],
    EnqueueExtensions
);

impl EnqueueExtensions for DefaultPreemption {
    /// As upstream with asynchronous preemption: a pod deletion is registered so that the queue
    /// looks at the pods this plugin holds back, but the hint always says QueueSkip: the other
    /// plugins that rejected the pod decide when it is retried, and the gate lifts when the
    /// preemption is over.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
            |_, _, _| Ok(QueueingHint::QueueSkip),
        )]
    }
}

/// Keeps a preemptor out of the active queue while its victims are being evicted (asynchronous
/// preemption), so it does not preempt again meanwhile.
impl PreEnqueuePlugin for DefaultPreemption {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let handle = self.evaluator.handle();
        let executor = self.evaluator.executor();
        // With workload-aware scheduling a group's member waits for its group's preemption
        // instead of its own (a group not known yet holds nothing back here).
        if handle.emulation.enabled(GENERIC_WORKLOAD)
            && BySchedulingGroup::group(&pod.pod).is_some()
        {
            if pod_group_uid(handle, pod).is_some_and(|uid| executor.is_preempting(&uid)) {
                return Status::unresolvable(WAITING_FOR_GROUP_PREEMPTION);
            }
            return Status::success();
        }
        if executor.is_preempting(pod.uid()) {
            return Status::unresolvable(WAITING_FOR_PREEMPTION);
        }
        Status::success()
    }
}

impl PostFilterPlugin for DefaultPreemption {
    /// Preemption simulates with the framework: see `post_filter_with_framework`.
    fn post_filter(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        _filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        (
            None,
            Status::error("DefaultPreemption runs only through its framework"),
        )
    }

    fn post_filter_with_framework(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if let Some(m) = &self.metrics {
            m.preemption_attempts.inc();
        }
        let (result, status) = self
            .evaluator
            .preempt(self, fwk, state, pod, snapshot, filtered);
        let msg = status.message();
        if msg.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), format!("preemption: {msg}")),
        )
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        DefaultPreemption::EXTENSION_POINTS,
        decode::<DefaultPreemptionArgs>,
        |args, handle| {
            let args = typed::<DefaultPreemptionArgs>(args)?;
            Ok(Arc::new(DefaultPreemption::new(&args, handle.clone())))
        },
    )
    .with_informers(&[&POD_DISRUPTION_BUDGETS])
    // Evicting victims, and reading the disruption budgets that protect them.
    .with_rbac_rules(vec![
        policy_rule(&[""], &["pods"], &["delete"]),
        policy_rule(
            &["policy"],
            &["poddisruptionbudgets"],
            &["get", "list", "watch"],
        ),
    ])
}

/// The UID of the PodGroup `pod` is a member of, when it names a known one: a member waits for
/// its group's preemption (upstream's PreEnqueue with GenericWorkload).
fn pod_group_uid(handle: &Handle, pod: &PodInfo) -> Option<String> {
    let name = BySchedulingGroup::group(&pod.pod)?;
    let group = handle
        .listers
        .store(&WORKLOAD_POD_GROUPS)
        .get(pod.namespace(), name)?;
    group.metadata.uid.clone()
}
