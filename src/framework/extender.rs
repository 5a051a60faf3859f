//! Scheduler extenders (upstream's `framework.Extender`): external processes the scheduler consults
//! over HTTP to filter nodes, add scores, pick preemption victims or bind. This is the pure side:
//! the trait and what the algorithm does with the answers (upstream's `findNodesThatPassExtenders`
//! and the extender part of `prioritizeNodes`). The HTTP client lives in `scheduler::extender`.
//!
//! As upstream's, extender calls are synchronous: the scheduling cycle waits for them (each call
//! bounded by the extender's `httpTimeout`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::interface::{Code, NodeToStatus, Status};
use super::types::{AssignedPod, NodeInfo, PodInfo};

/// The plugin name recorded when extenders filtered nodes out (upstream's `framework.ExtenderName`):
/// such a pod is retried on any cluster event.
pub(crate) const EXTENDER_NAME: &str = "Extender";
/// Extenders score 0..=10 (upstream's `MaxExtenderPriority`); scores are scaled to 0..=100.
pub(crate) const MAX_EXTENDER_PRIORITY: i64 = 10;

/// What a filter call answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtenderFilterResult {
    /// The nodes that passed. An extender that is not `nodeCacheCapable` returns Node objects:
    /// upstream schedules on fresh NodeInfos holding only those (no pods), and so does ksched.
    pub nodes: ExtenderNodes,
    /// Node -> reason, for nodes that failed (preemption may help).
    pub failed: BTreeMap<String, String>,
    /// Node -> reason, for nodes that failed for good.
    pub failed_and_unresolvable: BTreeMap<String, String>,
}

/// The nodes a filter call let through.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ExtenderNodes {
    /// Names (a `nodeCacheCapable` extender).
    Names(Vec<String>),
    /// Node objects.
    Objects(Vec<Node>),
    /// Neither was set in the answer: no node passed.
    #[default]
    None,
}

/// The victims chosen on one node.
#[derive(Debug, Clone, Default)]
pub struct Victims {
    pub pods: Vec<Arc<AssignedPod>>,
    pub num_pdb_violations: i64,
}

/// An extender, as the algorithm and DefaultPreemption see it. Errors are the text upstream would
/// print (they end up in the pod's condition).
pub trait Extender: Send + Sync + fmt::Debug {
    /// The URL prefix (upstream names extenders by it).
    fn name(&self) -> &str;
    /// Errors from an ignorable extender are skipped.
    fn is_ignorable(&self) -> bool;
    /// Whether the extender cares about `pod`: with `managedResources`, only pods requesting or
    /// limiting one of them (in any container or init container).
    fn is_interested(&self, pod: &PodInfo) -> bool;
    fn is_filter(&self) -> bool;
    fn is_prioritizer(&self) -> bool;
    fn is_binder(&self) -> bool;
    fn supports_preemption(&self) -> bool;
    fn filter(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ExtenderFilterResult, String>;
    /// Scores (0..=10) per node name, and the extender's weight.
    fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<(String, i64)>, i64), String>;
    /// Narrows the preemption candidates; victims are given back as pods of the snapshot.
    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: BTreeMap<String, Victims>,
        node_pods: &dyn Fn(&str) -> Option<Vec<Arc<AssignedPod>>>,
    ) -> Result<BTreeMap<String, Victims>, String>;
    /// Binds the pod (`namespace`, `name`, `uid`) to `node`.
    fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Result<(), String>;
}

/// Upstream's `findNodesThatPassExtenders`: each interested filter extender in turn narrows the
/// feasible nodes; the nodes it rejects get its reason in `statuses` (unresolvable ones win).
pub(crate) fn find_nodes_that_pass_extenders(
    extenders: &[Arc<dyn Extender>],
    pod: &PodInfo,
    mut feasible: Vec<Arc<NodeInfo>>,
    statuses: &mut NodeToStatus,
) -> Result<Vec<Arc<NodeInfo>>, Status> {
    for extender in extenders {
        if feasible.is_empty() {
            break;
        }
        if !extender.is_interested(pod) {
            continue;
        }
        let answer = extender.filter(pod, &feasible).and_then(|r| {
            let nodes = resolve(extender.name(), &feasible, r.nodes)?;
            Ok((nodes, r.failed, r.failed_and_unresolvable))
        });
        let (nodes, failed, failed_and_unresolvable) = match answer {
            Ok(a) => a,
            Err(e) if extender.is_ignorable() => {
                tracing::info!(extender = extender.name(), error = %e,
                    "skipping extender as it returned error and has ignorable flag set");
                continue;
            }
            Err(e) => return Err(Status::error(e)),
        };
        for (node, msg) in &failed_and_unresolvable {
            statuses.set(node, Status::new(Code::UnschedulableAndUnresolvable, msg));
        }
        for (node, msg) in &failed {
            if !failed_and_unresolvable.contains_key(node) {
                statuses.set(node, Status::new(Code::Unschedulable, msg));
            }
        }
        feasible = nodes;
    }
    Ok(feasible)
}

/// The NodeInfos an extender let through: by name from `input`, or fresh ones holding only the
/// returned Node objects (as upstream builds them).
fn resolve(
    extender: &str,
    input: &[Arc<NodeInfo>],
    nodes: ExtenderNodes,
) -> Result<Vec<Arc<NodeInfo>>, String> {
    match nodes {
        ExtenderNodes::Names(names) => {
            let by_name: BTreeMap<&str, &Arc<NodeInfo>> =
                input.iter().map(|n| (n.name(), n)).collect();
            names
                .iter()
                .map(|name| {
                    by_name.get(name.as_str()).map(|n| Arc::clone(n)).ok_or_else(|| {
                        format!(
                            "extender {extender:?} claims a filtered node {name:?} which is not found in the input node list"
                        )
                    })
                })
                .collect()
        }
        ExtenderNodes::Objects(nodes) => Ok(nodes
            .into_iter()
            .map(|n| {
                let mut info = NodeInfo::new();
                info.set_node(Arc::new(n));
                Arc::new(info)
            })
            .collect()),
        ExtenderNodes::None => Ok(Vec::new()),
    }
}

/// Upstream's extender scoring in `prioritizeNodes`: every interested extender's scores, times its
/// weight, scaled to 0..=100, per node name. Failed calls add nothing. The nodes that got a score
/// are the ones upstream gives a random tie-breaker.
pub(crate) fn extender_scores(
    extenders: &[Arc<dyn Extender>],
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
) -> BTreeMap<String, i64> {
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for extender in extenders {
        if !extender.is_interested(pod) {
            continue;
        }
        match extender.prioritize(pod, nodes) {
            Ok((scores, weight)) => {
                for (host, score) in scores {
                    let scaled =
                        score * weight * (super::interface::MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY);
                    *totals.entry(host).or_insert(0) += scaled;
                }
            }
            Err(e) => {
                tracing::debug!(extender = extender.name(), error = %e,
                    "failed to run extender's priority function; no score given by this extender");
            }
        }
    }
    totals
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use parking_lot::Mutex;

    /// An extender answering from tables, recording its calls.
    #[derive(Debug, Default)]
    pub(crate) struct FakeExtender {
        pub name: String,
        pub ignorable: bool,
        /// Only pods requesting this resource interest it.
        pub managed: Option<String>,
        /// Filter: node -> rejection (unresolvable when the flag is set); `Err` fails the call.
        pub reject: BTreeMap<String, (String, bool)>,
        pub filter_error: Option<String>,
        /// Names it claims passed beyond the input.
        pub phantom: Option<String>,
        /// Return Node objects (not nodeCacheCapable).
        pub objects: bool,
        pub scores: Option<(BTreeMap<String, i64>, i64)>,
        pub prioritize_error: Option<String>,
        /// Preemption: the candidate nodes it keeps, or its error (`None`: no preempt verb).
        pub preempt: Option<Result<Vec<String>, String>>,
        pub calls: Mutex<Vec<String>>,
    }

    impl FakeExtender {
        pub(crate) fn new(name: &str) -> FakeExtender {
            FakeExtender {
                name: name.into(),
                ..Default::default()
            }
        }
    }

    impl Extender for FakeExtender {
        fn name(&self) -> &str {
            &self.name
        }
        fn is_ignorable(&self) -> bool {
            self.ignorable
        }
        fn is_interested(&self, pod: &PodInfo) -> bool {
            self.managed
                .as_ref()
                .is_none_or(|r| pod.requests.get(r) > 0)
        }
        fn is_filter(&self) -> bool {
            true
        }
        fn is_prioritizer(&self) -> bool {
            self.scores.is_some()
        }
        fn is_binder(&self) -> bool {
            false
        }
        fn supports_preemption(&self) -> bool {
            self.preempt.is_some()
        }
        fn filter(
            &self,
            _pod: &PodInfo,
            nodes: &[Arc<NodeInfo>],
        ) -> Result<ExtenderFilterResult, String> {
            self.calls.lock().push("filter".into());
            if let Some(e) = &self.filter_error {
                return Err(e.clone());
            }
            let mut r = ExtenderFilterResult::default();
            let mut passed = Vec::new();
            for n in nodes {
                match self.reject.get(n.name()) {
                    Some((msg, true)) => {
                        r.failed_and_unresolvable
                            .insert(n.name().into(), msg.clone());
                    }
                    Some((msg, false)) => {
                        r.failed.insert(n.name().into(), msg.clone());
                    }
                    None => passed.push(n.clone()),
                }
            }
            r.nodes = if self.objects {
                ExtenderNodes::Objects(passed.iter().filter_map(|n| n.node().cloned()).collect())
            } else {
                let mut names: Vec<String> = passed.iter().map(|n| n.name().into()).collect();
                names.extend(self.phantom.clone());
                ExtenderNodes::Names(names)
            };
            Ok(r)
        }
        fn prioritize(
            &self,
            _pod: &PodInfo,
            _nodes: &[Arc<NodeInfo>],
        ) -> Result<(Vec<(String, i64)>, i64), String> {
            self.calls.lock().push("prioritize".into());
            if let Some(e) = &self.prioritize_error {
                return Err(e.clone());
            }
            let (scores, weight) = self.scores.clone().unwrap_or_default();
            Ok((scores.into_iter().collect(), weight))
        }
        fn process_preemption(
            &self,
            _pod: &PodInfo,
            victims: BTreeMap<String, Victims>,
            _node_pods: &dyn Fn(&str) -> Option<Vec<Arc<AssignedPod>>>,
        ) -> Result<BTreeMap<String, Victims>, String> {
            match &self.preempt {
                Some(Ok(keep)) => Ok(victims
                    .into_iter()
                    .filter(|(n, _)| keep.contains(n))
                    .collect()),
                Some(Err(e)) => Err(e.clone()),
                None => Ok(victims),
            }
        }
        fn bind(&self, _ns: &str, _name: &str, _uid: &str, _node: &str) -> Result<(), String> {
            Ok(())
        }
    }

    fn nodes(names: &[&str]) -> Vec<Arc<NodeInfo>> {
        names
            .iter()
            .map(|n| {
                let pod = PodBuilder::new(&format!("on-{n}"))
                    .node(n)
                    .container(&[("cpu", "1")])
                    .build();
                Arc::new(NodeBuilder::new(n).info(vec![pod]))
            })
            .collect()
    }

    fn names(nodes: &[Arc<NodeInfo>]) -> Vec<&str> {
        nodes.iter().map(|n| n.name()).collect()
    }

    fn run(
        extenders: Vec<FakeExtender>,
        pod: &PodInfo,
    ) -> (Result<Vec<Arc<NodeInfo>>, Status>, NodeToStatus) {
        let extenders: Vec<Arc<dyn Extender>> = extenders
            .into_iter()
            .map(|e| Arc::new(e) as Arc<dyn Extender>)
            .collect();
        let mut statuses = NodeToStatus::new();
        let r = find_nodes_that_pass_extenders(
            &extenders,
            pod,
            nodes(&["n1", "n2", "n3"]),
            &mut statuses,
        );
        (r, statuses)
    }

    #[test]
    fn filters_narrow_in_turn_and_record_reasons() {
        let pod = PodBuilder::new("p").info();
        let mut a = FakeExtender::new("a");
        a.reject.insert("n1".into(), ("a: no".into(), false));
        let mut b = FakeExtender::new("b");
        b.reject.insert("n2".into(), ("b: never".into(), true));
        let (r, statuses) = run(vec![a, b], &pod);
        assert_eq!(names(&r.expect("passes")), ["n3"]);
        let s1 = statuses.get("n1");
        assert_eq!(
            (s1.code(), s1.message()),
            (Code::Unschedulable, "a: no".into())
        );
        let s2 = statuses.get("n2");
        assert_eq!(
            (s2.code(), s2.message()),
            (Code::UnschedulableAndUnresolvable, "b: never".into())
        );
    }

    #[test]
    fn errors_stop_scheduling_unless_ignorable() {
        let pod = PodBuilder::new("p").info();
        let mut down = FakeExtender::new("http://down");
        down.filter_error = Some("Post \"http://down/filter\": connection refused".into());
        let (r, _) = run(vec![down], &pod);
        assert_eq!(
            r.expect_err("error").message(),
            "Post \"http://down/filter\": connection refused"
        );
        let mut down = FakeExtender::new("http://down");
        down.filter_error = Some("boom".into());
        down.ignorable = true;
        let mut after = FakeExtender::new("after");
        after.reject.insert("n3".into(), ("no".into(), false));
        let (r, _) = run(vec![down, after], &pod);
        assert_eq!(names(&r.expect("skipped")), ["n1", "n2"]);
        // A node the extender made up is an error too.
        let mut liar = FakeExtender::new("liar");
        liar.phantom = Some("n9".into());
        let (r, _) = run(vec![liar], &pod);
        assert_eq!(
            r.expect_err("error").message(),
            "extender \"liar\" claims a filtered node \"n9\" which is not found in the input node list"
        );
    }

    #[test]
    fn managed_resources_decide_interest_and_objects_give_bare_nodes() {
        let mut gpu_only = FakeExtender::new("gpu");
        gpu_only.managed = Some("example.com/gpu".into());
        gpu_only.filter_error = Some("unreachable".into());
        // Not interested: not called, nothing filtered.
        let (r, _) = run(vec![gpu_only], &PodBuilder::new("p").info());
        assert_eq!(names(&r.expect("passes")), ["n1", "n2", "n3"]);
        // Node objects come back as NodeInfos holding only the node (upstream's behaviour).
        let mut objects = FakeExtender::new("objects");
        objects.objects = true;
        let (r, _) = run(vec![objects], &PodBuilder::new("p").info());
        let r = r.expect("passes");
        assert_eq!(names(&r), ["n1", "n2", "n3"]);
        assert!(r.iter().all(|n| n.pods.is_empty()));
    }

    #[test]
    fn scores_are_weighted_and_scaled_and_failures_ignored() {
        let pod = PodBuilder::new("p").info();
        let mut a = FakeExtender::new("a");
        a.scores = Some(([("n1".to_string(), 3), ("n2".to_string(), 10)].into(), 2));
        let mut b = FakeExtender::new("b");
        b.prioritize_error = Some("down".into());
        let mut c = FakeExtender::new("c");
        c.scores = Some(([("n2".to_string(), 1)].into(), 1));
        let extenders: Vec<Arc<dyn Extender>> = vec![Arc::new(a), Arc::new(b), Arc::new(c)];
        let scores = extender_scores(&extenders, &pod, &nodes(&["n1", "n2"]));
        // score * weight * (100 / 10)
        assert_eq!(
            scores,
            [("n1".to_string(), 60), ("n2".to_string(), 210)].into()
        );
    }
}
