//! PreFilter (with its AddPod/RemovePod extensions) and Filter, and Filter with the nominated pods
//! counted as running: the [`FrameworkHandle`] the framework offers its plugins.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Framework;
use crate::config::ExtensionPoint;
use crate::framework::interface::{
    Code, CycleState, FrameworkHandle, PreFilterExtensions, PreFilterResult, Status,
};
use crate::framework::metrics::Point;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, Snapshot};

impl Framework {
    pub fn has_filter_plugins(&self) -> bool {
        !self.at(ExtensionPoint::Filter).is_empty()
    }

    /// PreFilter: results are intersected; `Skip` skips the plugin's Filter for this pod;
    /// UnschedulableAndUnresolvable stops at once, Unschedulable runs the rest first.
    /// Returns the merged result, the status and the plugins that narrowed the node set.
    pub fn run_pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        self.at_point(
            Point::PreFilter,
            || self.pre_filter_each(state, pod, snapshot),
            |r| r.1.code(),
        )
    }

    fn pre_filter_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, BTreeSet<String>) {
        let sampled = state.record_plugin_metrics();
        let mut skip: BTreeSet<Arc<str>> = BTreeSet::new();
        let mut result: Option<PreFilterResult> = None;
        let mut plugins_with_nodes: BTreeSet<String> = BTreeSet::new();
        let mut return_status = Status::success();
        for e in self.at(ExtensionPoint::PreFilter) {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            let timer = e.timer(Point::PreFilter, sampled);
            let (r, s) = p.pre_filter(state, pod, snapshot);
            timer.stop(s.code());
            if s.is_skip() {
                skip.insert(e.name.clone());
                continue;
            }
            e.evaluated();
            if !s.is_success() {
                let s = s.with_plugin(e.name.clone());
                match s.code() {
                    Code::UnschedulableAndUnresolvable => {
                        self.set_skip_filter_plugins(state, skip);
                        return (None, s, BTreeSet::new());
                    }
                    Code::Unschedulable => {
                        return_status = s;
                        continue;
                    }
                    _ => {
                        self.set_skip_filter_plugins(state, skip);
                        let msg = format!("running PreFilter plugin {:?}: {}", e.name, s.message());
                        return (
                            None,
                            Status::error(msg).with_plugin(e.name.clone()),
                            BTreeSet::new(),
                        );
                    }
                }
            }
            let r = r.unwrap_or_default();
            if !r.is_all_nodes() {
                plugins_with_nodes.insert(e.name.to_string());
            }
            let merged = match result.take() {
                Some(prev) => prev.merge(r),
                None => r,
            };
            if merged.node_names.as_ref().is_some_and(BTreeSet::is_empty) {
                let list: Vec<&str> = plugins_with_nodes.iter().map(String::as_str).collect();
                let msg = if list.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", list[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        list.join(" ")
                    )
                };
                self.set_skip_filter_plugins(state, skip);
                return (Some(merged), Status::unresolvable(msg), plugins_with_nodes);
            }
            result = Some(merged);
        }
        self.set_skip_filter_plugins(state, skip);
        (result, return_status, plugins_with_nodes)
    }

    /// Records the plugins whose PreFilter skipped, with their bits over the Filter list.
    fn set_skip_filter_plugins(&self, state: &mut CycleState, skip: BTreeSet<Arc<str>>) {
        let filters = self.at(ExtensionPoint::Filter);
        let mask = (filters.len() <= 64).then(|| {
            filters
                .iter()
                .enumerate()
                .filter(|(_, e)| skip.contains(&e.name))
                .fold(0u64, |m, (i, _)| m | 1 << i)
        });
        state.set_skip_filter_plugins_masked(skip, mask);
    }

    /// Runs `call` on the PreFilter extensions of the plugins not skipped, stopping at the first
    /// failure (an Error naming the plugin and the extension `what`).
    fn run_pre_filter_extension(
        &self,
        state: &mut CycleState,
        point: Point,
        call: impl Fn(&dyn PreFilterExtensions, &mut CycleState) -> Status,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        for e in self.at(ExtensionPoint::PreFilter) {
            if state.skip_filter_plugins().contains(&e.name) {
                continue;
            }
            let Some(ext) = e
                .plugin
                .as_pre_filter()
                .and_then(|p| p.pre_filter_extensions())
            else {
                continue;
            };
            let timer = e.timer(point, sampled);
            let s = call(ext, state);
            timer.stop(s.code());
            if !s.is_success() {
                let what = match point {
                    Point::PreFilterExtensionAddPod => "AddPod",
                    _ => "RemovePod",
                };
                return Status::error(format!(
                    "running {what} on PreFilter plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        Status::success()
    }

    /// Filter on one node: plugins in order, stopping at the first non-success (which carries the
    /// plugin's name). Plugins skipped at PreFilter do not run.
    pub fn run_filter_plugins(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut clock = self.plugin_clock(state);
        let skip = state.skip_filter_plugins();
        let mask = state.skip_filter_mask();
        for (i, e) in self.at(ExtensionPoint::Filter).iter().enumerate() {
            let skipped = match mask {
                Some(m) => m & (1 << i) != 0,
                None => !skip.is_empty() && skip.contains(&e.name),
            };
            if skipped {
                continue;
            }
            let Some(p) = e.plugin.as_filter() else {
                continue;
            };
            e.evaluated();
            let s = p.filter(state, pod, node);
            clock = e.lap(Point::Filter, s.code(), clock);
            if !s.is_success() {
                if !s.is_rejected() {
                    let msg = format!("running {:?} filter plugin: {}", e.name, s.message());
                    return Status::error(msg).with_plugin(e.name.clone());
                }
                return s.with_plugin(e.name.clone());
            }
        }
        Status::success()
    }
}

impl FrameworkHandle for Framework {
    /// PreFilter extensions' AddPod, for plugins not skipped.
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        self.run_pre_filter_extension(state, Point::PreFilterExtensionAddPod, |ext, state| {
            ext.add_pod(state, pod_to_schedule, pod_to_add, node)
        })
    }

    /// PreFilter extensions' RemovePod, for plugins not skipped.
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status {
        self.run_pre_filter_extension(state, Point::PreFilterExtensionRemovePod, |ext, state| {
            ext.remove_pod(state, pod_to_schedule, pod_to_remove, node)
        })
    }

    /// Filter with the pods nominated to this node at equal or higher priority counted as running
    /// (first pass), and, if that passes, without them (second pass) — upstream's
    /// `RunFilterPluginsWithNominatedPods`. Without a nominator this is `run_filter_plugins`. A
    /// nominated pod the node already holds (another scheduler's, bound) counts once.
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let nominated = match &self.handle.nominator {
            Some(n) => n.nominated_pods_for_node(node.name()),
            None => Vec::new(),
        };
        let to_add: Vec<&Arc<PodInfo>> = nominated
            .iter()
            .filter(|p| {
                p.priority() >= pod.priority() && p.uid() != pod.uid() && !node.holds(p.uid())
            })
            .collect();
        if to_add.is_empty() {
            return self.run_filter_plugins(state, pod, node);
        }
        let mut state_out = state.clone();
        let mut node_out = node.clone();
        for p in to_add {
            let p = Arc::new(AssignedPod::from_pod_info(p));
            node_out.add_pod(p.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_out, pod, &p, &node_out);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_plugins(&state_out, pod, &node_out);
        if !s.is_success() {
            return s;
        }
        self.run_filter_plugins(state, pod, node)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fwk_with, log};
    use super::*;
    use crate::framework::testing::{
        Fake, NodeBuilder, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use ExtensionPoint::*;

    /// A fake's PreFilter answer: `None` a plain success, else the result's nodes and the code.
    type PreFilterAnswer = Option<(Option<&'static [&'static str]>, Code)>;

    /// PreFilter with one fake per answer, named A, B, ...: the status and the call log.
    fn pre_filter_answers(answers: &[PreFilterAnswer]) -> (Status, Vec<String>) {
        let l = log();
        let names = ["A", "B", "C"];
        let fakes = answers
            .iter()
            .zip(names)
            .map(|(answer, name)| {
                let mut f = Fake::new(name, &l);
                f.pre_filter = answer.map(|(nodes, code)| {
                    (
                        nodes.map(|n| n.iter().map(|n| n.to_string()).collect()),
                        code,
                    )
                });
                f
            })
            .collect();
        let fwk = fwk_with(fakes, &[(PreFilter, &names[..answers.len()])]);
        let (_, s, _) = fwk.run_pre_filter_plugins(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &snapshot_of(&[]),
        );
        (s, l.lock().clone())
    }

    #[test]
    fn pre_filter_results_intersect_and_skip() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.pre_filter = Some((Some(vec!["n1".into(), "n2".into()]), Code::Success));
        let mut b = Fake::new("B", &l);
        b.pre_filter = Some((Some(vec!["n2".into(), "n3".into()]), Code::Success));
        let mut c = Fake::new("C", &l);
        c.pre_filter = Some((None, Code::Skip));
        let fwk = fwk_with(vec![a, b, c], &[(PreFilter, &["A", "B", "C"])]);
        let mut state = CycleState::new();
        let pod = PodBuilder::new("p").info();
        let (r, s, with_nodes) = fwk.run_pre_filter_plugins(&mut state, &pod, &snapshot_of(&[]));
        assert!(s.is_success());
        assert_eq!(r, Some(PreFilterResult::nodes(["n2".to_string()])));
        assert_eq!(with_nodes.into_iter().collect::<Vec<_>>(), ["A", "B"]);
        assert!(state.skip_filter_plugins().contains("C"));
    }

    #[test]
    fn pre_filter_disjoint_results_are_unresolvable() {
        let (s, _) = pre_filter_answers(&[
            Some((Some(&["n1"]), Code::Success)),
            Some((Some(&["n2"]), Code::Success)),
        ]);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "node(s) didn't satisfy plugin(s) [A B] simultaneously"
        );

        let (s, _) = pre_filter_answers(&[Some((Some(&[]), Code::Success))]);
        assert_eq!(s.message(), "node(s) didn't satisfy plugin A");
    }

    #[test]
    fn pre_filter_unschedulable_runs_the_rest_unresolvable_stops() {
        let (s, log) = pre_filter_answers(&[Some((None, Code::Unschedulable)), None]);
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("A")));
        assert_eq!(log, ["A.PreFilter", "B.PreFilter"]);

        let (s, log) =
            pre_filter_answers(&[Some((None, Code::UnschedulableAndUnresolvable)), None]);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(log, ["A.PreFilter"]);
    }

    #[test]
    fn filter_stops_at_first_failure_and_skips() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.filter
            .insert("n1".into(), (Code::Unschedulable, "A says no".into()));
        let mut b = Fake::new("B", &l);
        b.filter
            .insert("n1".into(), (Code::Unschedulable, "B says no".into()));
        b.filter.insert("n2".into(), (Code::Error, "boom".into()));
        let fwk = fwk_with(vec![a, b], &[(Filter, &["A", "B"])]);
        let pod = PodBuilder::new("p").info();
        let n1 = NodeBuilder::new("n1").info(vec![]);
        let n2 = NodeBuilder::new("n2").info(vec![]);
        let mut state = CycleState::new();
        let s = fwk.run_filter_plugins(&state, &pod, &n1);
        assert_eq!(
            (s.message(), s.plugin()),
            ("A says no".to_string(), Some("A"))
        );
        let s = fwk.run_filter_plugins(&state, &pod, &n2);
        assert_eq!(s.code(), Code::Error);
        assert_eq!(s.message(), "running \"B\" filter plugin: boom");
        state.set_skip_filter_plugins([Arc::from("A")].into());
        let s = fwk.run_filter_plugins(&state, &pod, &n1);
        assert_eq!(s.plugin(), Some("B"));
    }

    #[test]
    fn filter_skips_what_pre_filter_skipped_by_position_in_the_filter_list() {
        let l = log();
        // Filter runs A, B, C, in that order; PreFilter lists them otherwise and B skips. Each
        // rejects the node named after it.
        let fakes = ["A", "B", "C"].map(|name| {
            let mut f = Fake::new(name, &l);
            let pre_filter = if name == "B" {
                Code::Skip
            } else {
                Code::Success
            };
            f.pre_filter = Some((None, pre_filter));
            f.filter.insert(
                format!("n{name}"),
                (Code::Unschedulable, format!("{name} says no")),
            );
            f
        });
        let fwk = fwk_with(
            fakes.into(),
            &[(PreFilter, &["C", "B", "A"]), (Filter, &["A", "B", "C"])],
        );
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        let (_, s, _) = fwk.run_pre_filter_plugins(&mut state, &pod, &snapshot_of(&[]));
        assert!(s.is_success());
        assert_eq!(state.skip_filter_mask(), Some(0b010));
        let rejected_by = |state: &CycleState, node: &str| {
            let s = fwk.run_filter_plugins(state, &pod, &NodeBuilder::new(node).info(vec![]));
            s.plugin().map(str::to_string)
        };
        for state in [state.clone(), state] {
            assert_eq!(rejected_by(&state, "nA").as_deref(), Some("A"));
            assert_eq!(rejected_by(&state, "nB"), None);
            assert_eq!(rejected_by(&state, "nC").as_deref(), Some("C"));
        }
    }

    struct Nominated(Vec<Arc<PodInfo>>);

    impl crate::framework::registry::PodNominator for Nominated {
        fn nominated_pods_for_node(&self, node_name: &str) -> Vec<Arc<PodInfo>> {
            self.0
                .iter()
                .filter(|p| p.nominated_node_name() == node_name)
                .cloned()
                .collect()
        }
    }

    #[test]
    fn nominated_pods_of_equal_or_higher_priority_count_as_running() {
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let preemptor = PodBuilder::new("preemptor")
            .priority(100)
            .nominated_node("n1")
            .container(&[("cpu", "3")])
            .arc_info();
        let h = h.with_nominator(Arc::new(Nominated(vec![preemptor])));
        let fwk = Framework::new(&profile(&[(Filter, &["NodeResourcesFit"])]), &reg, h)
            .expect("framework");
        let node = NodeBuilder::new("n1")
            .allocatable(&[("cpu", "4"), ("memory", "1Gi"), ("pods", "10")])
            .info(vec![]);
        let state = CycleState::new();
        let low = PodBuilder::new("low")
            .priority(10)
            .container(&[("cpu", "2")])
            .info();
        let s = fwk.run_filter_plugins_with_nominated_pods(&state, &low, &node);
        assert_eq!(s.reasons(), ["Insufficient cpu"]);
        let high = PodBuilder::new("high")
            .priority(1000)
            .container(&[("cpu", "2")])
            .info();
        assert!(
            fwk.run_filter_plugins_with_nominated_pods(&state, &high, &node)
                .is_success()
        );
    }

    /// Another scheduler's pod seen bound while its nomination is still kept is on the node
    /// once, not twice.
    #[test]
    fn a_nominated_pod_the_node_holds_counts_once() {
        let (reg, _) = registry_with(vec![]);
        let (h, _) = handle();
        let preemptor = || {
            PodBuilder::new("preemptor")
                .priority(100)
                .container(&[("cpu", "3")])
        };
        let nominated = preemptor().nominated_node("n1").arc_info();
        let h = h.with_nominator(Arc::new(Nominated(vec![nominated])));
        let fwk = Framework::new(&profile(&[(Filter, &["NodeResourcesFit"])]), &reg, h)
            .expect("framework");
        let node = NodeBuilder::new("n1")
            .allocatable(&[("cpu", "4"), ("memory", "1Gi"), ("pods", "10")])
            .info(vec![preemptor().node("n1").build()]);
        let low = PodBuilder::new("low")
            .priority(10)
            .container(&[("cpu", "1")])
            .info();
        let state = CycleState::new();
        assert!(
            fwk.run_filter_plugins_with_nominated_pods(&state, &low, &node)
                .is_success()
        );
    }
}
