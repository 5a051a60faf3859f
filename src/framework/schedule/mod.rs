//! The pure "find nodes that fit, prioritize, select host" pipeline of upstream's
//! `schedule_one.go`, and [`FitError`] with upstream's exact message.
//!
//! `fit_error` holds why a pod fits nowhere ([`FitError`], [`ScheduleError`]), `filter` the
//! search for feasible nodes (PreFilter, Filter, the extenders' filters), `score` the
//! prioritizing and the selection of the host; here is the [`Algorithm`] that runs them.

mod filter;
mod fit_error;
mod score;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::batch::{BatchCycle, World};
use super::extender::Extender;
use super::interface::{CycleState, Status};
use super::metrics::Point;
use super::runtime::Framework;
use super::types::{NodeInfo, PodInfo, Snapshot};

pub use fit_error::{Diagnosis, FitError, ScheduleError};
pub use score::{heap_top, prioritize_nodes, select_host};

/// Upstream's `minFeasibleNodesToFind`.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream's `minFeasibleNodesPercentageToFind`.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i32 = 5;

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
    /// The pod group placement the search is limited to, while a group cycle tries one.
    placement: Option<PlacementNodes>,
}

/// The nodes of a pod group's placement (upstream's `Snapshot.AssumePlacement`): only they are
/// filtered and scored; plugins still see the whole snapshot.
#[derive(Debug, Clone)]
pub struct PlacementNodes {
    /// Unique to this placement's try: the batch of its members' results is keyed by it.
    id: u64,
    names: Vec<String>,
    set: HashSet<String>,
}

/// The ids of placements (0 is "no placement").
static PLACEMENT_IDS: AtomicU64 = AtomicU64::new(1);

impl PlacementNodes {
    pub fn new(nodes: &[Arc<NodeInfo>]) -> PlacementNodes {
        let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        let set = names.iter().cloned().collect();
        PlacementNodes {
            id: PLACEMENT_IDS.fetch_add(1, Ordering::Relaxed),
            names,
            set,
        }
    }

    /// The placement's nodes as `snapshot` has them now, in the placement's order.
    fn nodes_in(&self, snapshot: &Snapshot) -> Vec<Arc<NodeInfo>> {
        self.names
            .iter()
            .filter_map(|n| snapshot.get(n).cloned())
            .collect()
    }
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
            placement: None,
        }
    }

    /// Limits the search to a pod group's placement (`None`: every node again).
    pub fn set_placement(&mut self, placement: Option<PlacementNodes>) {
        self.placement = placement;
    }

    /// `name`'s NodeInfo when it is a candidate: in the snapshot, and in the placement if any
    /// (upstream's `GetNodeInPlacement`).
    fn candidate<'a>(&self, snapshot: &'a Snapshot, name: &str) -> Option<&'a Arc<NodeInfo>> {
        if self
            .placement
            .as_ref()
            .is_some_and(|p| !p.set.contains(name))
        {
            return None;
        }
        snapshot.get(name)
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
        // Within a group's placement the members batch too, positions in the placement's list.
        let placement = self.placement.as_ref().map_or(0, |p| p.id);
        let world = || World::now(snapshot, fwk.handle()).map(|w| w.in_placement(placement));
        let mut batch = fwk.batch().lock();
        let mut cycle = batch.begin(
            pod,
            signers,
            self.cycle,
            world(),
            fwk.num_score_plugins(),
            snapshot.num_nodes(),
        );
        let result = self.schedule(fwk, state, pod, snapshot, Some(&mut cycle));
        let errored = matches!(result, Err(ScheduleError::Internal(_)));
        cycle.finish(errored, world());
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
        let candidates: Cow<'_, [Arc<NodeInfo>]> = match &self.placement {
            Some(p) => Cow::Owned(p.nodes_in(snapshot)),
            None => Cow::Borrowed(snapshot.nodes()),
        };
        if candidates.is_empty() {
            return Err(ScheduleError::NoNodesAvailable);
        }
        // Plugins (ImageLocality's spread) count the whole cluster, placement or not.
        state.set_num_all_nodes(snapshot.num_nodes());
        let ((feasible, positions), diagnosis) = self.find_nodes_that_fit_pod(
            fwk,
            state,
            pod,
            snapshot,
            &candidates,
            batch.as_deref_mut(),
        )?;
        if feasible.is_empty() {
            return Err(ScheduleError::Fit(Box::new(FitError {
                pod: pod.key(),
                num_all_nodes: candidates.len(),
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ExtensionPoint::{self, *};
    use crate::framework::interface::Code;
    use crate::framework::testing::{
        Fake, NodeBuilder, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use parking_lot::Mutex;

    /// `schedule_pod` with a fresh CycleState.
    pub(super) fn schedule(
        alg: &mut Algorithm,
        fwk: &Framework,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> Result<ScheduleResult, ScheduleError> {
        alg.schedule_pod(fwk, &mut CycleState::new(), pod, snap)
    }

    /// A fake plugin "A" with its own call log.
    pub(super) fn fake_a() -> Fake {
        Fake::new("A", &Arc::new(Mutex::new(Vec::new())))
    }

    pub(super) fn fwk(fakes: Vec<Fake>, points: &[(ExtensionPoint, &[&str])]) -> Framework {
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
}
