//! TopologyPlacementGenerator (upstream 1.37's `topologyaware`, gate
//! `TopologyAwareWorkloadScheduling`): a PodGroup with `schedulingConstraints.topology[0].key`
//! is tried in each domain of that node label, one placement per value, so all its members land
//! in one domain. Nodes without the label are in none. Once members are scheduled, only their
//! domain is a placement. A group without the constraint gets every node.

use std::sync::Arc;

use super::helper::{impl_plugin, registration_without_args};
use super::names;
use crate::framework::interface::{GroupInCycle, Placement, PlacementGeneratePlugin, Status};
use crate::framework::types::{NodeInfo, Snapshot};

#[derive(Default)]
pub(crate) struct TopologyPlacementGenerator;

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
        for node in &parent.nodes {
            let Some(value) = domain(node, key) else {
                continue;
            };
            if required.as_deref().is_some_and(|r| r != value) {
                continue;
            }
            match placements.iter_mut().find(|p| p.name == value) {
                Some(p) => p.nodes.push(Arc::clone(node)),
                None => placements.push(Placement {
                    name: value.to_string(),
                    nodes: vec![Arc::clone(node)],
                }),
            }
        }
        Ok(placements)
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

pub(crate) fn registration() -> crate::framework::registry::PluginRegistration {
    registration_without_args::<TopologyPlacementGenerator>(
        TopologyPlacementGenerator::EXTENSION_POINTS,
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
        let placements = TopologyPlacementGenerator
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
        let placements = TopologyPlacementGenerator
            .generate_placements(&view, &all, &snapshot)
            .expect("placements");
        assert_eq!(placements.len(), 1);
        assert_eq!(placements[0].nodes.len(), 4);
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
        let placements = TopologyPlacementGenerator
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
        let err = TopologyPlacementGenerator
            .generate_placements(&view, &all, &snapshot)
            .expect_err("no domain");
        assert_eq!(
            err.message(),
            "cannot determine domain for already scheduled pods: no topology domain found for pod ns/m0"
        );
    }
}
