//! Explanations: every plugin's verdict for one pod on every node, and what became of a
//! PodGroup and each of its members.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::Simulation;
use crate::config::ExtensionPoint;
use crate::emulation::TOPOLOGY_AWARE_WORKLOAD_SCHEDULING;
use crate::framework::interface::{CycleState, Status};
use crate::framework::listers::{SCHEDULING_GROUP_MEMBERS, WORKLOAD_POD_GROUPS};
use crate::framework::runtime::Framework;
use crate::framework::types::PodInfo;
use crate::simulate::report::{
    Explanation, GroupExplanation, MemberExplanation, NodeExplanation, PluginScore, PluginStatus,
};
use crate::simulate::snapshot::pod_key;

impl Simulation {
    /// What became of the PodGroup `group` (`namespace/name`) and each of its members simulated.
    pub(super) fn explain_group(&self, group: &str) -> GroupExplanation {
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
        let members: Vec<MemberExplanation> = self
            .results
            .iter()
            .filter(|r| members.contains(&r.key()))
            .map(|r| MemberExplanation {
                pod: r.key(),
                node: r.node.clone(),
                message: r.message.clone(),
            })
            .collect();
        let placement = self.placement_of(pg.as_deref(), &members);
        GroupExplanation {
            group: key,
            policy,
            placement,
            result,
            message,
            members,
        }
    }

    /// Where the group went: with a topology constraint (TopologyAwareWorkloadScheduling), the
    /// domain its members landed in, or that none held it.
    fn placement_of(&self, group: Option<&PodGroup>, members: &[MemberExplanation]) -> String {
        let key = group
            .and_then(|g| g.spec.scheduling_constraints.as_ref())
            .and_then(|c| c.topology.as_ref())
            .and_then(|t| t.first())
            .map(|t| t.key.as_str());
        let Some(key) = key else {
            return "every node (no topology constraint)".into();
        };
        if !self
            .handle
            .emulation
            .enabled(TOPOLOGY_AWARE_WORKLOAD_SCHEDULING)
        {
            return format!(
                "every node: the topology constraint ({key}) needs --feature-gates=TopologyAwareWorkloadScheduling=true (or a SchedulerProfile's topologyAwareScheduling)"
            );
        }
        let snapshot = self.snapshot();
        let domain = members
            .iter()
            .filter_map(|m| m.node.as_deref())
            .find_map(|n| {
                snapshot
                    .get(n)?
                    .node()?
                    .metadata
                    .labels
                    .as_ref()?
                    .get(key)
                    .cloned()
            });
        match domain {
            Some(value) => {
                format!("{key}={value} (one domain of {key}, ranked best by PlacementScore)")
            }
            None => format!("none: no domain of {key} holds the group"),
        }
    }

    /// Every plugin's verdict for `pod` on every node (or `only`), on the cluster as it is.
    pub(super) fn explain(
        &self,
        fwk: &Framework,
        pod: &PodInfo,
        only: Option<&str>,
    ) -> Explanation {
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
