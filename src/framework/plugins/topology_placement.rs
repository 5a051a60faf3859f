//! TopologyPlacementGenerator (upstream 1.37's `topologyaware`, gate
//! `TopologyAwareWorkloadScheduling`): a PodGroup with `schedulingConstraints.topology[0].key`
//! is tried in each domain of that node label, one placement per value, so all its members land
//! in one domain. Nodes without the label are in none. Once members are scheduled, only their
//! domain is a placement. A group without the constraint gets every node.
//!
//! Beyond 1.37: the group cycle stops trying placements once it found
//! [`TopologyPlacementArgs::percentage_of_placements_to_score`] of them feasible, as the scheduler
//! stops looking for feasible nodes (upstream's beta design of KEP-5732; 1.37 tries them all).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::helper::impl_plugin;
use super::names;
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, decode, invalid, typed};
use crate::framework::interface::{GroupInCycle, Placement, PlacementGeneratePlugin, Status};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{NodeInfo, Snapshot};

/// The plugin's args (ksched's own: upstream 1.37's plugin takes none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct TopologyPlacementArgs {
    /// The share of a group's placements (in percent) the cycle finds feasible before it scores
    /// them and stops trying others. 0 (the default): adaptive, from 100 % when the placements
    /// hold at most 100 nodes down to 10 % at 5000 nodes, never below 5 %. 100: every
    /// placement, as upstream 1.37.
    pub percentage_of_placements_to_score: i32,
}

impl PluginArgs for TopologyPlacementArgs {
    const KIND: &'static str = "TopologyPlacementArgs";

    fn validate(&self) -> Vec<FieldError> {
        let p = self.percentage_of_placements_to_score;
        if !(0..=100).contains(&p) {
            return vec![invalid(
                "percentageOfPlacementsToScore",
                p,
                "not in valid range [0-100]",
            )];
        }
        Vec::new()
    }
}

/// Placements summing at most this many nodes are all tried under the adaptive limit.
const ADAPTIVE_ALL_UP_TO_NODES: usize = 100;
/// Where the adaptive percentage reaches [`ADAPTIVE_AT_REFERENCE`].
const ADAPTIVE_REFERENCE_NODES: usize = 5000;
const ADAPTIVE_AT_REFERENCE: f64 = 10.0;
const ADAPTIVE_FLOOR: f64 = 5.0;

/// The adaptive percentage of placements to score for placements summing `nodes` nodes: 100
/// up to [`ADAPTIVE_ALL_UP_TO_NODES`], falling linearly to 10 at 5000, at least 5.
fn adaptive_percentage(nodes: usize) -> f64 {
    if nodes <= ADAPTIVE_ALL_UP_TO_NODES {
        return 100.0;
    }
    let span = (ADAPTIVE_REFERENCE_NODES - ADAPTIVE_ALL_UP_TO_NODES) as f64;
    let beyond = (nodes - ADAPTIVE_ALL_UP_TO_NODES) as f64;
    (100.0 - (100.0 - ADAPTIVE_AT_REFERENCE) * beyond / span).max(ADAPTIVE_FLOOR)
}

#[derive(Default)]
pub(crate) struct TopologyPlacementGenerator {
    args: TopologyPlacementArgs,
}

impl_plugin!(
    TopologyPlacementGenerator,
    names::TOPOLOGY_PLACEMENT_GENERATOR,
    [PlacementGenerate]
);

/// The group's topology key (the API allows one constraint).
fn topology_key<'a>(group: &'a GroupInCycle<'_>) -> Option<&'a str> {
    group
        .group
        .spec
        .scheduling_constraints
        .as_ref()?
        .topology
        .as_ref()?
        .first()
        .map(|t| t.key.as_str())
}

fn domain<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a str> {
    node.node()?
        .metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

impl PlacementGeneratePlugin for TopologyPlacementGenerator {
    fn generate_placements(
        &self,
        group: &GroupInCycle<'_>,
        parent: &Placement,
        snapshot: &Snapshot,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = topology_key(group) else {
            return Ok(vec![parent.clone()]);
        };
        let required = scheduled_domain(group, key, snapshot).map_err(|e| {
            Status::error(format!(
                "cannot determine domain for already scheduled pods: {e}"
            ))
        })?;
        // Domains in the order their first node comes (upstream's come from a map, in any order).
        let mut placements: Vec<Placement> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for node in &parent.nodes {
            let Some(value) = domain(node, key) else {
                continue;
            };
            if required.as_deref().is_some_and(|r| r != value) {
                continue;
            }
            let i = *index.entry(value).or_insert_with(|| {
                placements.push(Placement {
                    name: value.to_string(),
                    nodes: Vec::new(),
                });
                placements.len() - 1
            });
            placements[i].nodes.push(Arc::clone(node));
        }
        Ok(placements)
    }

    fn placements_to_score(&self, placements: &[Placement]) -> usize {
        let percentage = match self.args.percentage_of_placements_to_score {
            0 => adaptive_percentage(placements.iter().map(|p| p.nodes.len()).sum()),
            p => f64::from(p),
        };
        let n = placements.len();
        ((n as f64 * percentage / 100.0).ceil() as usize).clamp(1.min(n), n)
    }
}

/// The domain of the group's members already scheduled, if any (upstream's
/// `getScheduledPodsTopologyDomain`).
fn scheduled_domain(
    group: &GroupInCycle<'_>,
    key: &str,
    snapshot: &Snapshot,
) -> Result<Option<String>, String> {
    let mut found: Option<&str> = None;
    for (pod, node_name) in group.scheduled {
        let node = snapshot
            .get(node_name)
            .ok_or_else(|| format!("getting node for pod {pod}: node {node_name:?} not found"))?;
        let value =
            domain(node, key).ok_or_else(|| format!("no topology domain found for pod {pod}"))?;
        if let Some(other) = found
            && other != value
        {
            return Err(format!(
                "more than 1 domain found for pod group: {other}, {value}"
            ));
        }
        found = Some(value);
    }
    Ok(found.map(str::to_string))
}

/// Args given are decoded strictly; none stay none, so the effective configuration prints no
/// args for the plugin, as upstream's (which has none).
fn decode_args(args: Option<&Value>) -> Result<Value, Vec<FieldError>> {
    match args {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(given) => decode::<TopologyPlacementArgs>(Some(given)),
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        TopologyPlacementGenerator::EXTENSION_POINTS,
        decode_args,
        |args, _| Ok(Arc::new(TopologyPlacementGenerator { args: typed(args)? })),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;
    use serde_json::json;

    use super::*;
    use crate::framework::testing::NodeBuilder;

    fn group(key: Option<&str>) -> PodGroup {
        let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": 2}}});
        if let Some(key) = key {
            spec["schedulingConstraints"] = json!({"topology": [{"key": key}]});
        }
        serde_json::from_value(json!({"metadata": {"name": "g", "namespace": "ns"}, "spec": spec}))
            .expect("pod group")
    }

    fn cluster() -> (Snapshot, Placement) {
        let nodes: Vec<Arc<NodeInfo>> = [
            ("n0", Some("a")),
            ("n1", Some("b")),
            ("n2", None),
            ("n3", Some("a")),
        ]
        .into_iter()
        .map(|(name, rack)| {
            let mut b = NodeBuilder::new(name).allocatable(&[("cpu", "4")]);
            if let Some(rack) = rack {
                b = b.label("rack", rack);
            }
            Arc::new(b.info(vec![]))
        })
        .collect();
        let snapshot = Snapshot::from_node_infos(nodes.iter().cloned());
        let all = Placement {
            name: String::new(),
            nodes,
        };
        (snapshot, all)
    }

    fn names(placements: &[Placement]) -> Vec<(String, Vec<String>)> {
        placements
            .iter()
            .map(|p| {
                let nodes = p.nodes.iter().map(|n| n.name().to_string()).collect();
                (p.name.clone(), nodes)
            })
            .collect()
    }

    #[test]
    fn one_placement_per_domain_of_the_groups_topology_key() {
        let (snapshot, all) = cluster();
        let g = group(Some("rack"));
        let view = GroupInCycle {
            group: &g,
            scheduled: &[],
        };
        let placements = TopologyPlacementGenerator::default()
            .generate_placements(&view, &all, &snapshot)
            .expect("placements");
        // n2 has no rack: it is in no placement.
        assert_eq!(
            names(&placements),
            [
                ("a".to_string(), vec!["n0".to_string(), "n3".to_string()]),
                ("b".to_string(), vec!["n1".to_string()]),
            ]
        );
        // Without the constraint: every node, as one placement.
        let free = group(None);
        let view = GroupInCycle {
            group: &free,
            scheduled: &[],
        };
        let placements = TopologyPlacementGenerator::default()
            .generate_placements(&view, &all, &snapshot)
            .expect("placements");
        assert_eq!(placements.len(), 1);
        assert_eq!(placements[0].nodes.len(), 4);
    }

    fn generator(percentage: i32) -> TopologyPlacementGenerator {
        TopologyPlacementGenerator {
            args: TopologyPlacementArgs {
                percentage_of_placements_to_score: percentage,
            },
        }
    }

    /// `count` placements of `nodes_each` nodes (the nodes are not looked at).
    fn placements(count: usize, nodes_each: usize) -> Vec<Placement> {
        let node = Arc::new(NodeBuilder::new("n").info(vec![]));
        (0..count)
            .map(|i| Placement {
                name: format!("rack-{i}"),
                nodes: vec![Arc::clone(&node); nodes_each],
            })
            .collect()
    }

    #[test]
    fn the_adaptive_limit_scores_every_placement_of_a_small_cluster_and_a_tenth_at_5000_nodes() {
        let adaptive = generator(0);
        // Five racks of 20 nodes: 100 nodes, every placement.
        assert_eq!(adaptive.placements_to_score(&placements(5, 20)), 5);
        // upstream's TAS bench: 50 racks of 100 nodes, 10 %.
        assert_eq!(adaptive.placements_to_score(&placements(50, 100)), 5);
        // 5 racks of 100: 92.7 % of 5, rounded up.
        assert_eq!(adaptive.placements_to_score(&placements(5, 100)), 5);
        // 200 racks of 100 (20000 nodes): the 5 % floor.
        assert_eq!(adaptive.placements_to_score(&placements(200, 100)), 10);
        // At least one, and none of none.
        assert_eq!(adaptive.placements_to_score(&placements(3, 10000)), 1);
        assert_eq!(adaptive.placements_to_score(&[]), 0);
        // A fixed percentage; 100 is upstream 1.37's every placement.
        assert_eq!(generator(100).placements_to_score(&placements(50, 100)), 50);
        assert_eq!(generator(30).placements_to_score(&placements(50, 100)), 15);
    }

    #[test]
    fn args_are_checked_and_left_out_when_not_given() {
        assert_eq!(decode_args(None), Ok(Value::Null));
        assert_eq!(
            decode_args(Some(&json!({"percentageOfPlacementsToScore": 40}))),
            Ok(json!({"percentageOfPlacementsToScore": 40}))
        );
        let errors = decode_args(Some(&json!({"percentageOfPlacementsToScore": 101})))
            .expect_err("out of range");
        assert_eq!(errors[0].path, "percentageOfPlacementsToScore");
        assert!(
            errors[0].reason.contains("not in valid range [0-100]"),
            "{errors:?}"
        );
        let errors =
            decode_args(Some(&json!({"percentageOfPlacementToScore": 40}))).expect_err("misspelt");
        assert_eq!(errors[0].path, "percentageOfPlacementToScore");
    }

    #[test]
    fn scheduled_members_pin_the_group_to_their_domain() {
        let (snapshot, all) = cluster();
        let g = group(Some("rack"));
        let scheduled = [("ns/m0".to_string(), "n1".to_string())];
        let view = GroupInCycle {
            group: &g,
            scheduled: &scheduled,
        };
        let placements = TopologyPlacementGenerator::default()
            .generate_placements(&view, &all, &snapshot)
            .expect("placements");
        assert_eq!(
            names(&placements),
            [("b".to_string(), vec!["n1".to_string()])]
        );
        // A member on a node without the label: upstream's error.
        let scheduled = [("ns/m0".to_string(), "n2".to_string())];
        let view = GroupInCycle {
            group: &g,
            scheduled: &scheduled,
        };
        let err = TopologyPlacementGenerator::default()
            .generate_placements(&view, &all, &snapshot)
            .expect_err("no domain");
        assert_eq!(
            err.message(),
            "cannot determine domain for already scheduled pods: no topology domain found for pod ns/m0"
        );
    }
}
