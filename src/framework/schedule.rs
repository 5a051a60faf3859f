//! The pure "find nodes that fit, prioritize, select host" pipeline of upstream's
//! `schedule_one.go`, and [`FitError`] with upstream's exact message.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use rayon::prelude::*;

use super::batch::{BatchCycle, World};
use super::extender::{EXTENDER_NAME, Extender, extender_scores, find_nodes_that_pass_extenders};
use super::interface::{Code, CycleState, FrameworkHandle, NodeToStatus, Status};
use super::metrics::Point;
use super::runtime::{Framework, NodeScores, PARALLEL_THRESHOLD, RawScores};
use super::types::{NodeInfo, PodInfo, Snapshot};

/// Upstream's `minFeasibleNodesToFind`.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream's `minFeasibleNodesPercentageToFind`.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i32 = 5;

/// Why no node fits: per-node statuses and the plugins that rejected the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub node_to_status: NodeToStatus,
    /// Plugins that returned Unschedulable or UnschedulableAndUnresolvable (their cluster events
    /// requeue the pod).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending.
    pub pending_plugins: BTreeSet<String>,
    /// The PreFilter rejection message, when PreFilter rejected the pod.
    pub pre_filter_msg: String,
    /// The PostFilter (preemption) message.
    pub post_filter_msg: String,
}

impl Diagnosis {
    /// Records a rejecting status's plugin (upstream's `AddPluginStatus`).
    pub fn add_plugin_status(&mut self, s: &Status) {
        let Some(p) = s.plugin() else { return };
        if s.is_rejected() {
            self.unschedulable_plugins.insert(p.to_string());
        }
        if s.code() == Code::Pending {
            self.pending_plugins.insert(p.to_string());
        }
    }
}

/// No node fits the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    pub pod: String,
    pub num_all_nodes: usize,
    pub diagnosis: Diagnosis,
}

impl FitError {
    /// Sets the message PostFilter (preemption) returned: it ends the rendered message.
    pub fn set_post_filter_message(&mut self, msg: impl Into<String>) {
        self.diagnosis.post_filter_msg = msg.into();
    }
}

impl fmt::Display for FitError {
    /// `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        let d = &self.diagnosis;
        if !d.pre_filter_msg.is_empty() {
            write!(f, " {}.", d.pre_filter_msg)?;
        } else {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, s) in d.node_to_status.explicit() {
                for r in s.reasons() {
                    *reasons.entry(r.as_str()).or_insert(0) += 1;
                }
            }
            let explicit = d.node_to_status.len();
            if explicit < self.num_all_nodes {
                for r in d.node_to_status.absent_nodes_status().reasons() {
                    *reasons.entry(r.as_str()).or_insert(0) += self.num_all_nodes - explicit;
                }
            }
            let mut lines: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            // Go's sort.Strings: byte-wise ascending ("10 x" before "2 y").
            lines.sort();
            if !lines.is_empty() {
                write!(f, " {}.", lines.join(", "))?;
            }
        }
        if !d.post_filter_msg.is_empty() {
            write!(f, " {}", d.post_filter_msg)?;
        }
        Ok(())
    }
}

impl std::error::Error for FitError {}

/// Why scheduling a pod failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The snapshot has no nodes.
    #[error("no nodes available to schedule pods")]
    NoNodesAvailable,
    /// No node fits.
    #[error("{0}")]
    Fit(Box<FitError>),
    /// A plugin failed (code Error).
    #[error("{}", .0.message())]
    Internal(Status),
}

impl ScheduleError {
    /// The status for the pod's condition and requeueing: Unschedulable for fit errors, Error else.
    pub fn to_status(&self) -> Status {
        match self {
            ScheduleError::Fit(e) => Status::new(Code::Unschedulable, e.to_string()),
            other => Status::error(other.to_string()),
        }
    }
}

/// The feasible nodes and their positions in the list searched.
type FeasibleNodes = (Vec<Arc<NodeInfo>>, Vec<usize>);

/// Where the pod goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    pub suggested_host: String,
    /// Nodes the filters ran on (feasible + rejected).
    pub evaluated_nodes: usize,
    pub feasible_nodes: usize,
}

/// The scheduler-wide state of the algorithm: the rotating start index (so every node gets its turn
/// when only a percentage of nodes is searched), the global `percentageOfNodesToScore`, and the
/// cycle count opportunistic batching goes by.
#[derive(Debug, Clone)]
pub struct Algorithm {
    next_start_node_index: usize,
    /// The configuration's top-level `percentageOfNodesToScore` (0: adaptive).
    pub percentage_of_nodes_to_score: i32,
    /// The configuration's extenders, consulted after the Filter and Score plugins.
    pub extenders: Vec<Arc<dyn Extender>>,
    /// The `OpportunisticBatching` feature gate (on by default, as in upstream 1.36).
    opportunistic_batching: bool,
    /// Pods scheduled so far: a batch serves consecutive pods only.
    cycle: u64,
}

impl Default for Algorithm {
    fn default() -> Algorithm {
        Algorithm::new(0)
    }
}

impl Algorithm {
    pub fn new(percentage_of_nodes_to_score: i32) -> Algorithm {
        Algorithm {
            next_start_node_index: 0,
            percentage_of_nodes_to_score,
            extenders: Vec::new(),
            opportunistic_batching: true,
            cycle: 0,
        }
    }

    pub fn with_extenders(mut self, extenders: Vec<Arc<dyn Extender>>) -> Algorithm {
        self.extenders = extenders;
        self
    }

    /// Turns opportunistic batching on or off (`--feature-gates OpportunisticBatching=...`).
    pub fn with_opportunistic_batching(mut self, enabled: bool) -> Algorithm {
        self.opportunistic_batching = enabled;
        self
    }

    /// Whether scores decide among feasible nodes (Score plugins or a prioritizing extender).
    fn has_scoring(&self, fwk: &Framework) -> bool {
        fwk.has_score_plugins() || self.extenders.iter().any(|e| e.is_prioritizer())
    }

    pub fn next_start_node_index(&self) -> usize {
        self.next_start_node_index
    }

    /// Upstream's `numFeasibleNodesToFind`.
    pub fn num_feasible_nodes_to_find(
        &self,
        profile_percentage: Option<i32>,
        num_all_nodes: usize,
    ) -> usize {
        if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
            return num_all_nodes;
        }
        let mut percentage = profile_percentage.unwrap_or(self.percentage_of_nodes_to_score);
        if percentage == 0 {
            let n = i32::try_from(num_all_nodes).unwrap_or(i32::MAX);
            percentage = (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
        }
        let num = (num_all_nodes as u128 * percentage.max(0) as u128 / 100) as usize;
        num.max(MIN_FEASIBLE_NODES_TO_FIND)
    }

    /// Runs PreFilter, Filter (from the rotating start, in parallel, until enough nodes fit),
    /// PreScore and Score, and selects the host as upstream does (see [`heap_top`]). With
    /// opportunistic batching, per-node results of the previous pods of the same signature are
    /// reused where that is exact (see [`super::batch`]); the decision is the same.
    pub fn schedule_pod(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<ScheduleResult, ScheduleError> {
        self.cycle += 1;
        let signers = fwk.signers();
        if !self.opportunistic_batching || !self.extenders.is_empty() || signers.is_none() {
            return self.schedule(fwk, state, pod, snapshot, None);
        }
        let mut batch = fwk.batch().lock();
        let mut cycle = batch.begin(
            pod,
            signers,
            self.cycle,
            World::now(snapshot, fwk.handle()),
            fwk.num_score_plugins(),
            snapshot.num_nodes(),
        );
        let result = self.schedule(fwk, state, pod, snapshot, Some(&mut cycle));
        let errored = matches!(result, Err(ScheduleError::Internal(_)));
        cycle.finish(errored, World::now(snapshot, fwk.handle()));
        if let Some(metrics) = fwk.metrics() {
            let report = batch.take_report();
            if let Some((took, code)) = report.sign {
                fwk.observe_point_duration(Point::Sign, code, took);
            }
            report.record(metrics, fwk.profile_name());
        }
        result
    }

    fn schedule(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        mut batch: Option<&mut BatchCycle<'_>>,
    ) -> Result<ScheduleResult, ScheduleError> {
        if snapshot.num_nodes() == 0 {
            return Err(ScheduleError::NoNodesAvailable);
        }
        state.set_num_all_nodes(snapshot.num_nodes());
        let ((feasible, positions), diagnosis) =
            self.find_nodes_that_fit_pod(fwk, state, pod, snapshot, batch.as_deref_mut())?;
        if feasible.is_empty() {
            return Err(ScheduleError::Fit(Box::new(FitError {
                pod: pod.key(),
                num_all_nodes: snapshot.num_nodes(),
                diagnosis,
            })));
        }
        let evaluated = feasible.len() + diagnosis.node_to_status.len();
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                suggested_host: feasible[0].name().to_string(),
                evaluated_nodes: evaluated,
                feasible_nodes: 1,
            });
        }
        let recorded = batch.map(|b| (b, positions.as_slice()));
        let scores = prioritize_nodes(
            fwk,
            &self.extenders,
            state,
            pod,
            snapshot,
            &feasible,
            recorded,
        )?;
        let host = select_host(&scores)
            .ok_or_else(|| ScheduleError::Internal(Status::error("empty priority list")))?;
        Ok(ScheduleResult {
            suggested_host: host,
            evaluated_nodes: evaluated,
            feasible_nodes: feasible.len(),
        })
    }

    /// PreFilter then Filter; upstream's `findNodesThatFitPod`. Returns the feasible nodes, their
    /// positions in the list searched, and why the others were rejected.
    fn find_nodes_that_fit_pod(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        mut batch: Option<&mut BatchCycle<'_>>,
    ) -> Result<(FeasibleNodes, Diagnosis), ScheduleError> {
        let mut diagnosis = Diagnosis::default();
        let all_nodes = snapshot.nodes();
        let (pre_res, s, unscheduled_plugins) = fwk.run_pre_filter_plugins(state, pod, snapshot);
        diagnosis.unschedulable_plugins = unscheduled_plugins.clone();
        if !s.is_success() {
            if !s.is_rejected() {
                return Err(ScheduleError::Internal(s));
            }
            diagnosis.pre_filter_msg = s.message();
            diagnosis.add_plugin_status(&s);
            diagnosis.node_to_status.set_absent_nodes_status(s);
            return Ok(((Vec::new(), Vec::new()), diagnosis));
        }
        if let Some(b) = batch.as_deref_mut() {
            b.pre_filter_skipped(state.skip_filter_plugins());
        }

        // A nominated node (from an earlier preemption) is tried first.
        let nominated = pod.nominated_node_name();
        if !nominated.is_empty()
            && let Some(node) = snapshot.get(nominated)
        {
            let (feasible, _) = self.find_nodes_that_pass_filters(
                fwk,
                state,
                pod,
                &mut diagnosis,
                std::slice::from_ref(node),
                false,
                None,
            )?;
            let feasible = find_nodes_that_pass_extenders(
                &self.extenders,
                pod,
                feasible,
                &mut diagnosis.node_to_status,
            );
            match feasible {
                Ok(f) if !f.is_empty() => {
                    if let Some(b) = batch {
                        b.pass();
                    }
                    return Ok(((f, vec![0]), diagnosis));
                }
                Ok(_) => {}
                Err(s) => {
                    tracing::warn!(pod = %pod.key(), node = nominated, error = %s.message(),
                        "evaluation failed on nominated node");
                }
            }
        }

        let restricted: Vec<Arc<NodeInfo>>;
        let nodes: &[Arc<NodeInfo>] = match pre_res.as_ref().and_then(|r| r.node_names.as_ref()) {
            None => all_nodes,
            Some(names) => {
                // Positions in a narrowed list are not the snapshot's: nothing to reuse.
                if let Some(b) = batch.as_deref_mut() {
                    b.pass();
                }
                restricted = names
                    .iter()
                    .filter_map(|n| snapshot.get(n).cloned())
                    .collect();
                let list: Vec<&str> = unscheduled_plugins.iter().map(String::as_str).collect();
                diagnosis
                    .node_to_status
                    .set_absent_nodes_status(Status::unresolvable(format!(
                        "node(s) didn't satisfy plugin(s) [{}]",
                        list.join(" ")
                    )));
                &restricted
            }
        };
        let feasible =
            self.find_nodes_that_pass_filters(fwk, state, pod, &mut diagnosis, nodes, true, batch);
        // Always advance the start index, also on error, so every node gets searched in turn.
        let processed =
            feasible.as_ref().map_or(0, |(f, _)| f.len()) + diagnosis.node_to_status.len();
        self.next_start_node_index =
            (self.next_start_node_index + processed) % all_nodes.len().max(1);
        let (feasible, positions) = feasible?;
        let before = feasible.len();
        let feasible = find_nodes_that_pass_extenders(
            &self.extenders,
            pod,
            feasible,
            &mut diagnosis.node_to_status,
        )
        .map_err(ScheduleError::Internal)?;
        if feasible.len() != before {
            // Extenders have no cluster events of their own: any event retries the pod.
            diagnosis
                .unschedulable_plugins
                .insert(EXTENDER_NAME.to_string());
        }
        Ok(((feasible, positions), diagnosis))
    }

    /// Filters `nodes` starting at the rotating index until enough feasible nodes are found.
    /// Nodes are checked in parallel, chunk by chunk, and results are consumed in rotation order,
    /// so the outcome equals a sequential scan. Returns the feasible nodes and their positions in
    /// `nodes`. With a batch, a node's recorded status is taken instead of running the plugins.
    #[allow(clippy::too_many_arguments)]
    fn find_nodes_that_pass_filters(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        diagnosis: &mut Diagnosis,
        nodes: &[Arc<NodeInfo>],
        rotate: bool,
        batch: Option<&mut BatchCycle<'_>>,
    ) -> Result<FeasibleNodes, ScheduleError> {
        let n = nodes.len();
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut to_find = self.num_feasible_nodes_to_find(fwk.percentage_of_nodes_to_score(), n);
        if !self.extenders.iter().any(|e| e.is_filter()) && !self.has_scoring(fwk) {
            to_find = 1;
        }
        let start = if rotate {
            self.next_start_node_index % n
        } else {
            0
        };
        if !fwk.has_filter_plugins() {
            let positions: Vec<usize> = (0..to_find.min(n)).map(|i| (start + i) % n).collect();
            let feasible = positions.iter().map(|&p| nodes[p].clone()).collect();
            return Ok((feasible, positions));
        }
        // The Filter extension point is timed here, over every node, as upstream does.
        let since = fwk.point_clock();
        let batch = batch.filter(|b| b.is_active());
        let feasible = self.filter_nodes(fwk, state, pod, diagnosis, nodes, start, to_find, batch);
        let code = feasible.as_ref().map_or(Code::Error, |_| Code::Success);
        fwk.observe_point(Point::Filter, code, since);
        feasible
    }

    /// Runs the Filter plugins on `nodes` from `start` on, in parallel chunks, until `to_find`
    /// nodes fit; with a batch, a node's recorded status is taken instead.
    #[allow(clippy::too_many_arguments)]
    fn filter_nodes(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        diagnosis: &mut Diagnosis,
        nodes: &[Arc<NodeInfo>],
        start: usize,
        to_find: usize,
        mut batch: Option<&mut BatchCycle<'_>>,
    ) -> Result<FeasibleNodes, ScheduleError> {
        let n = nodes.len();
        let mut feasible: Vec<Arc<NodeInfo>> = Vec::with_capacity(to_find.min(n));
        let mut positions: Vec<usize> = Vec::with_capacity(to_find.min(n));
        let mut next = 0usize;
        while next < n && feasible.len() < to_find {
            let remaining = to_find - feasible.len();
            let chunk = if n >= PARALLEL_THRESHOLD {
                remaining.clamp(PARALLEL_THRESHOLD, 1024)
            } else {
                n
            };
            let end = (next + chunk).min(n);
            let check = |i: usize| -> Status {
                let node = &nodes[(start + i) % n];
                fwk.run_filter_plugins_with_nominated_pods(state, pod, node)
            };
            let statuses: Vec<Status> = match batch.as_deref_mut() {
                Some(b) => filter_reusing(fwk, b, nodes, start, next..end, check),
                None => check_nodes(fwk, next..end, check),
            };
            for (offset, s) in statuses.into_iter().enumerate() {
                let pos = (start + next + offset) % n;
                let node = &nodes[pos];
                if s.is_success() {
                    feasible.push(node.clone());
                    positions.push(pos);
                    if feasible.len() >= to_find {
                        break;
                    }
                } else if s.code() == Code::Error {
                    return Err(ScheduleError::Internal(s));
                } else {
                    diagnosis.add_plugin_status(&s);
                    diagnosis.node_to_status.set(node.name(), s);
                }
            }
            next = end;
        }
        Ok((feasible, positions))
    }
}

/// `check` of each of `offsets`, in order: in parallel when there are many.
fn check_nodes(
    fwk: &Framework,
    offsets: impl ExactSizeIterator<Item = usize>,
    check: impl Fn(usize) -> Status + Sync,
) -> Vec<Status> {
    let count = offsets.len();
    if count >= PARALLEL_THRESHOLD {
        let _running = fwk.running("Filter", rayon::current_num_threads().min(count));
        let offsets: Vec<usize> = offsets.collect();
        offsets.into_par_iter().map(&check).collect()
    } else {
        offsets.map(check).collect()
    }
}

/// The Filter statuses of the nodes at `range` (offsets from `start` in `nodes`): those the batch
/// recorded, and the plugins' for the others (in parallel when there are many), which are
/// recorded in turn. Errors are not recorded: the cycle ends on them.
fn filter_reusing(
    fwk: &Framework,
    batch: &mut BatchCycle<'_>,
    nodes: &[Arc<NodeInfo>],
    start: usize,
    range: std::ops::Range<usize>,
    check: impl Fn(usize) -> Status + Sync,
) -> Vec<Status> {
    let n = nodes.len();
    let first = range.start;
    let mut statuses: Vec<Option<Status>> = range
        .clone()
        .map(|i| {
            let pos = (start + i) % n;
            batch.filter_status(pos, &nodes[pos])
        })
        .collect();
    let missing: Vec<usize> = range.filter(|i| statuses[i - first].is_none()).collect();
    let computed = check_nodes(fwk, missing.iter().copied(), check);
    for (i, s) in missing.into_iter().zip(computed) {
        let pos = (start + i) % n;
        if s.code() != Code::Error {
            batch.record_filter_status(pos, &nodes[pos], &s);
        }
        statuses[i - first] = Some(s);
    }
    statuses.into_iter().flatten().collect()
}

/// A batch's raw scores, for the feasible nodes by their index (see [`RawScores`]).
struct RecordedScores<'a, 'b> {
    batch: &'a mut BatchCycle<'b>,
    positions: &'a [usize],
    nodes: &'a [Arc<NodeInfo>],
}

impl RawScores for RecordedScores<'_, '_> {
    fn get(&mut self, i: usize, len: usize) -> Option<&[i64]> {
        self.batch
            .raw_scores(self.positions[i], &self.nodes[i], len)
    }

    fn put(&mut self, i: usize, row: &[i64]) {
        self.batch
            .record_raw_scores(self.positions[i], &self.nodes[i], row);
    }
}

/// PreScore and Score over the feasible nodes, plus the extenders' scores (all score 1 without
/// Score plugins and extenders). With a batch (and the nodes' snapshot positions), recorded raw
/// scores are reused.
pub fn prioritize_nodes(
    fwk: &Framework,
    extenders: &[Arc<dyn Extender>],
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    nodes: &[Arc<NodeInfo>],
    batch: Option<(&mut BatchCycle<'_>, &[usize])>,
) -> Result<NodeScores, ScheduleError> {
    if extenders.is_empty() && !fwk.has_score_plugins() {
        return Ok(NodeScores::uniform(nodes, 1));
    }
    let s = fwk.run_pre_score_plugins(state, pod, snapshot, nodes);
    if !s.is_success() {
        return Err(ScheduleError::Internal(s));
    }
    let mut recorded = batch.and_then(|(b, positions)| {
        b.pre_score_skipped(state.skip_score_plugins());
        b.is_active().then_some(RecordedScores {
            batch: b,
            positions,
            nodes,
        })
    });
    let mut scores = fwk
        .run_score_plugins_reusing(
            state,
            pod,
            nodes,
            recorded.as_mut().map(|r| r as &mut dyn RawScores),
        )
        .map_err(ScheduleError::Internal)?;
    if !extenders.is_empty() {
        scores.add_extender_scores(&extender_scores(extenders, pod, nodes));
    }
    Ok(scores)
}

/// The node upstream's `selectHost` picks among `scores` (in evaluation order); see [`heap_top`].
pub fn select_host(scores: &NodeScores) -> Option<String> {
    heap_top(&scores.totals, &scores.randomizers).map(|i| scores.nodes[i].to_string())
}

/// The index upstream 1.36 pops first from its node-score heap: Go's `container/heap` `Init` over
/// the nodes in evaluation order, ordered by total score, then by `randomizers` (upstream draws one
/// per node only when extenders scored; missing ones are 0). Among equal top scores this is a node
/// fixed by the heap's layout, neither random nor always the first (scores [1, 5, 9, 9] pick the
/// last), so the same cluster state gives the same node as upstream.
pub fn heap_top(totals: &[i64], randomizers: &[u64]) -> Option<usize> {
    let key = |i: usize| (totals[i], randomizers.get(i).copied().unwrap_or(0));
    // Go's heap.Less: a strictly better node sorts first.
    let less = |h: &[usize], a: usize, b: usize| key(h[a]) > key(h[b]);
    let n = totals.len();
    let mut h: Vec<usize> = (0..n).collect();
    // heap.Init: down(i) for i from n/2-1 down to 0.
    for start in (0..n / 2).rev() {
        let mut i = start;
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let mut j = left;
            if left + 1 < n && less(&h, left + 1, left) {
                j = left + 1;
            }
            if !less(&h, j, i) {
                break;
            }
            h.swap(i, j);
            i = j;
        }
    }
    // heap.Pop returns the root.
    h.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ExtensionPoint::{self, *};
    use crate::framework::runtime::ProfileSpec;
    use crate::framework::testing::{
        Fake, NodeBuilder, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use parking_lot::Mutex;

    /// `schedule_pod` with a fresh CycleState.
    fn schedule(
        alg: &mut Algorithm,
        fwk: &Framework,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> Result<ScheduleResult, ScheduleError> {
        alg.schedule_pod(fwk, &mut CycleState::new(), pod, snap)
    }

    /// A fake plugin "A" with its own call log.
    fn fake_a() -> Fake {
        Fake::new("A", &Arc::new(Mutex::new(Vec::new())))
    }

    fn fwk(fakes: Vec<Fake>, points: &[(ExtensionPoint, &[&str])]) -> Framework {
        let (reg, _) = registry_with(fakes);
        let (h, _) = handle();
        Framework::new(&profile(points), &reg, h).expect("framework")
    }

    #[test]
    fn num_feasible_nodes_to_find() {
        let a = Algorithm::new(0);
        let cases = [
            (None, 10, 10),
            (None, 99, 99),
            (None, 100, 100),
            (None, 1000, 420), // 50 - 1000/125 = 42%
            (None, 5000, 500), // 50 - 40 = 10%
            (None, 6000, 300), // 50 - 48 = 2% -> 5%
            (Some(30), 1000, 300),
            (Some(1), 1000, 100), // at least 100
            (Some(100), 1000, 1000),
        ];
        for (pct, n, want) in cases {
            assert_eq!(a.num_feasible_nodes_to_find(pct, n), want, "{pct:?} {n}");
        }
        assert_eq!(
            Algorithm::new(20).num_feasible_nodes_to_find(None, 1000),
            200
        );
    }

    #[test]
    fn fit_error_message_as_upstream() {
        let mut d = Diagnosis::default();
        d.node_to_status
            .set("n1", Status::unschedulable("Insufficient cpu"));
        d.node_to_status
            .set("n2", Status::unschedulable("Insufficient cpu"));
        for n in ["n3", "n4", "n5"] {
            d.node_to_status
                .set(n, Status::unresolvable("node(s) had untolerated taint(s)"));
        }
        let mut e = FitError {
            pod: "default/p".into(),
            num_all_nodes: 5,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s)."
        );
        e.set_post_filter_message(
            "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
        );
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn fit_error_sorts_as_strings_and_counts_absent_nodes() {
        let mut d = Diagnosis::default();
        for i in 0..10 {
            d.node_to_status.set(
                format!("a{i}"),
                Status::unschedulable("Insufficient memory"),
            );
        }
        d.node_to_status.set(
            "b",
            Status::with_reasons(
                Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        d.node_to_status
            .set_absent_nodes_status(Status::unresolvable(
                "node(s) didn't satisfy plugin(s) [NodeAffinity]",
            ));
        let e = FitError {
            pod: "p".into(),
            num_all_nodes: 13,
            diagnosis: d,
        };
        // "11 ..." sorts before "1 ..." is false: byte order puts "1 " (space) before "11".
        assert_eq!(
            e.to_string(),
            "0/13 nodes are available: 1 Insufficient cpu, 11 Insufficient memory, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        );
        let mut d = Diagnosis {
            pre_filter_msg: "node(s) didn't satisfy plugin A".into(),
            ..Default::default()
        };
        d.node_to_status
            .set("x", Status::unschedulable("ignored when PreFilter failed"));
        let e = FitError {
            pod: "p".into(),
            num_all_nodes: 3,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: node(s) didn't satisfy plugin A."
        );
        assert_eq!(
            ScheduleError::NoNodesAvailable.to_string(),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn schedule_pod_end_to_end_with_real_plugins() {
        let nodes = vec![
            Arc::new(
                NodeBuilder::new("cp")
                    .taint("node-role.kubernetes.io/control-plane", "", "NoSchedule")
                    .build(),
            ),
            Arc::new(NodeBuilder::new("cordoned").unschedulable().build()),
            Arc::new(NodeBuilder::new("ok").build()),
            Arc::new(
                NodeBuilder::new("gpu")
                    .taint("dedicated", "gpu", "NoExecute")
                    .build(),
            ),
        ];
        let snap = Snapshot::from_objects(&nodes, &[]);
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let spec = profile(&[(
            Filter,
            &["NodeUnschedulable", "NodeName", "TaintToleration"],
        )]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let mut alg = Algorithm::new(0);
        let pod = PodBuilder::new("p").info();
        let r = schedule(&mut alg, &fwk, &pod, &snap).expect("fits");
        // No score plugins: the first feasible node is enough.
        assert_eq!(r.suggested_host, "ok");
        assert_eq!(r.feasible_nodes, 1);

        let pinned = PodBuilder::new("q").node("cordoned").info();
        let e = schedule(&mut alg, &fwk, &pinned, &snap).expect_err("no fit");
        assert_eq!(
            e.to_string(),
            "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) didn't match the requested node name."
        );
        match e {
            ScheduleError::Fit(f) => assert_eq!(
                f.diagnosis
                    .unschedulable_plugins
                    .into_iter()
                    .collect::<Vec<_>>(),
                ["NodeName", "NodeUnschedulable"]
            ),
            other => panic!("{other:?}"),
        }
        // Different taints count as one reason: upstream 1.35+ names no taint.
        let tainted = Snapshot::from_objects(&[nodes[0].clone(), nodes[3].clone()], &[]);
        assert_eq!(
            schedule(&mut alg, &fwk, &pod, &tainted)
                .expect_err("no fit")
                .to_string(),
            "0/2 nodes are available: 2 node(s) had untolerated taint(s)."
        );
        let empty = Snapshot::new();
        assert_eq!(
            schedule(&mut alg, &fwk, &pod, &empty),
            Err(ScheduleError::NoNodesAvailable)
        );
    }

    #[test]
    fn prefilter_restricts_nodes_and_absent_nodes_get_a_status() {
        let mut a = fake_a();
        a.pre_filter = Some((Some(vec!["n2".into(), "gone".into()]), Code::Success));
        a.filter
            .insert("n2".into(), (Code::Unschedulable, "n2 is full".into()));
        let f = fwk(vec![a], &[(PreFilter, &["A"]), (Filter, &["A"])]);
        let snap = snapshot_of(&["n1", "n2", "n3"]);
        let e = schedule(
            &mut Algorithm::new(0),
            &f,
            &PodBuilder::new("p").info(),
            &snap,
        )
        .expect_err("no fit");
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 n2 is full, 2 node(s) didn't satisfy plugin(s) [A]."
        );
    }

    #[test]
    fn scoring_picks_the_best_and_rotation_advances() {
        let mut a = fake_a();
        a.filter
            .insert("n1".into(), (Code::Unschedulable, "no".into()));
        a.score = [
            ("n2".to_string(), 10),
            ("n3".to_string(), 50),
            ("n4".to_string(), 20),
        ]
        .into();
        let f = fwk(vec![a], &[(Filter, &["A"]), (Score, &["A"])]);
        let snap = snapshot_of(&["n1", "n2", "n3", "n4"]);
        let mut alg = Algorithm::new(0);
        let r = schedule(&mut alg, &f, &PodBuilder::new("p").info(), &snap).expect("fits");
        assert_eq!(
            r,
            ScheduleResult {
                suggested_host: "n3".into(),
                evaluated_nodes: 4,
                feasible_nodes: 3
            }
        );
        // All 4 nodes processed: the start index wraps back to 0.
        assert_eq!(alg.next_start_node_index(), 0);
    }

    #[test]
    fn nominated_node_is_tried_first() {
        let mut a = fake_a();
        a.score = [("n1".to_string(), 100)].into();
        let f = fwk(vec![a], &[(Filter, &["A"]), (Score, &["A"])]);
        let snap = snapshot_of(&["n1", "n2", "n3"]);
        let pod = PodBuilder::new("p").nominated_node("n3").info();
        let r = schedule(&mut Algorithm::new(0), &f, &pod, &snap).expect("fits");
        assert_eq!(r.suggested_host, "n3");
    }

    #[test]
    fn select_host_takes_the_top_of_gos_heap() {
        let mut scores = NodeScores::default();
        scores.nodes = ["a", "b", "c", "d"].into_iter().map(Arc::from).collect();
        scores.totals = vec![5, 9, 9, 1];
        // Deterministic: every call picks the same node.
        for _ in 0..20 {
            assert_eq!(select_host(&scores).as_deref(), Some("b"));
        }
        assert_eq!(select_host(&NodeScores::default()), None);
        // Worked through Go's heap.Init by hand: the tie does not always go to the first node.
        let cases: [(&[i64], usize); 7] = [
            (&[7], 0),
            (&[3, 3, 3, 3, 3], 0),
            (&[1, 5, 9, 9], 3),
            (&[5, 9, 9, 1], 1),
            (&[1, 9, 2, 9, 9], 1),
            (&[0, 1, 9, 2, 3, 9], 2),
            (&[2, 1, 3, 9, 1, 1, 9], 3),
        ];
        for (totals, want) in cases {
            assert_eq!(heap_top(totals, &[]), Some(want), "{totals:?}");
        }
        // With extenders upstream breaks ties by a random number per node.
        assert_eq!(heap_top(&[9, 9, 9], &[4, 7, 1]), Some(1));
        assert_eq!(heap_top(&[9, 8, 9], &[4, 70, 1]), Some(0));
    }

    #[test]
    fn extenders_filter_and_score_after_the_plugins() {
        use crate::framework::extender::tests::FakeExtender;
        let mut a = fake_a();
        a.score = [("n1".to_string(), 90), ("n2".to_string(), 10)].into();
        let f = fwk(vec![a], &[(Filter, &["A"]), (Score, &["A"])]);
        let snap = snapshot_of(&["n1", "n2", "n3"]);
        let pod = PodBuilder::new("p").info();
        // The plugins prefer n1; the extender rejects it.
        let mut ext = FakeExtender::new("http://ext");
        ext.reject
            .insert("n1".into(), ("n1 is reserved".into(), false));
        let mut alg = Algorithm::new(0).with_extenders(vec![Arc::new(ext)]);
        let r = schedule(&mut alg, &f, &pod, &snap).expect("fits");
        assert_eq!(r.suggested_host, "n2");
        // A prioritizing extender's score (x weight x 10) outweighs the plugins' 80 points.
        let mut ext = FakeExtender::new("http://prio");
        ext.scores = Some(([("n3".to_string(), 10)].into(), 1));
        let mut alg = Algorithm::new(0).with_extenders(vec![Arc::new(ext)]);
        assert_eq!(
            schedule(&mut alg, &f, &pod, &snap)
                .expect("fits")
                .suggested_host,
            "n3"
        );
        // Everything rejected: the extender's reasons are in the message and the pod is retried on
        // any event ("Extender" among the rejecting plugins).
        let mut ext = FakeExtender::new("http://ext");
        for n in ["n1", "n2", "n3"] {
            ext.reject.insert(n.into(), ("no room".into(), true));
        }
        let mut alg = Algorithm::new(0).with_extenders(vec![Arc::new(ext)]);
        match schedule(&mut alg, &f, &pod, &snap) {
            Err(ScheduleError::Fit(fit)) => {
                assert_eq!(fit.to_string(), "0/3 nodes are available: 3 no room.");
                assert!(fit.diagnosis.unschedulable_plugins.contains("Extender"));
            }
            other => panic!("{other:?}"),
        }
        // An unreachable extender is an error with its text.
        let mut ext = FakeExtender::new("http://down");
        ext.filter_error = Some("Post \"http://down/filter\": connection refused".into());
        let mut alg = Algorithm::new(0).with_extenders(vec![Arc::new(ext)]);
        assert_eq!(
            schedule(&mut alg, &f, &pod, &snap)
                .expect_err("error")
                .to_string(),
            "Post \"http://down/filter\": connection refused"
        );
    }

    #[test]
    fn a_filtering_extender_sees_every_feasible_node() {
        use crate::framework::extender::tests::FakeExtender;
        // No Score plugins: without extenders the first feasible node is enough...
        let f = fwk(vec![fake_a()], &[(Filter, &["A"])]);
        let snap = snapshot_of(&["n1", "n2", "n3"]);
        let pod = PodBuilder::new("p").info();
        let r = schedule(&mut Algorithm::new(0), &f, &pod, &snap).expect("fits");
        assert_eq!(r.feasible_nodes, 1);
        // ...a filtering extender gets them all (it may reject the first).
        let mut ext = FakeExtender::new("http://ext");
        ext.reject.insert("n1".into(), ("no".into(), false));
        let mut alg = Algorithm::new(0).with_extenders(vec![Arc::new(ext)]);
        let r = schedule(&mut alg, &f, &pod, &snap).expect("fits");
        assert_eq!((r.suggested_host.as_str(), r.feasible_nodes), ("n2", 2));
    }

    #[test]
    fn filters_in_parallel_equal_a_sequential_scan() {
        // 300 nodes, every third infeasible; percentage 50 -> 150 nodes to find.
        let mut a = fake_a();
        let names: Vec<String> = (0..300).map(|i| format!("n{i:03}")).collect();
        for (i, n) in names.iter().enumerate() {
            if i % 3 == 0 {
                a.filter
                    .insert(n.clone(), (Code::Unschedulable, "no".into()));
            }
            a.score.insert(n.clone(), (i % 100) as i64);
        }
        let (reg, _) = registry_with(vec![a]);
        let (h, _) = handle();
        let mut spec: ProfileSpec = profile(&[(Filter, &["A"]), (Score, &["A"])]);
        spec.percentage_of_nodes_to_score = Some(50);
        let f = Framework::new(&spec, &reg, h).expect("framework");
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let snap = snapshot_of(&refs);
        let mut alg = Algorithm::new(0);
        let r = schedule(&mut alg, &f, &PodBuilder::new("p").info(), &snap).expect("fits");
        assert_eq!(r.feasible_nodes, 150);
        // Sequentially: 150 feasible need 225 nodes (n000..n224), 75 of them rejected.
        assert_eq!(r.evaluated_nodes, 225);
        assert_eq!(alg.next_start_node_index(), 225);
    }
}
