//! The search for feasible nodes: PreFilter, the nominated node, Filter from the rotating start
//! (in parallel, reusing a batch's statuses), then the extenders' filters.

use std::sync::Arc;

use rayon::prelude::*;

use super::{Algorithm, Diagnosis, FeasibleNodes, ScheduleError};
use crate::framework::batch::BatchCycle;
use crate::framework::extender::{EXTENDER_NAME, find_nodes_that_pass_extenders};
use crate::framework::interface::{Code, CycleState, FrameworkHandle, PARALLEL_THRESHOLD, Status};
use crate::framework::metrics::Point;
use crate::framework::runtime::Framework;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

impl Algorithm {
    /// PreFilter then Filter; upstream's `findNodesThatFitPod`. Returns the feasible nodes, their
    /// positions in the list searched, and why the others were rejected.
    pub(super) fn find_nodes_that_fit_pod(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        all_nodes: &[Arc<NodeInfo>],
        mut batch: Option<&mut BatchCycle<'_>>,
    ) -> Result<(FeasibleNodes, Diagnosis), ScheduleError> {
        let mut diagnosis = Diagnosis::default();
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
            && let Some(node) = self.candidate(snapshot, nominated)
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
                    .filter_map(|n| self.candidate(snapshot, n).cloned())
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

#[cfg(test)]
mod tests {
    use super::super::tests::{fake_a, fwk, schedule};
    use super::*;
    use crate::config::ExtensionPoint::*;
    use crate::framework::runtime::ProfileSpec;
    use crate::framework::testing::{PodBuilder, handle, profile, registry_with, snapshot_of};

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
