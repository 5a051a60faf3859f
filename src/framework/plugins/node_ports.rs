//! NodePorts: a pod's host ports must be free on the node (`0.0.0.0` conflicts with every address).

use super::names;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, PreFilterPlugin,
    PreFilterResult, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::plugins::helper::{impl_plugin, queue_if, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, HostPort, HostPortInfo,
    NodeInfo, PodInfo, PodObject, QueueingHint, Snapshot, objects,
};

pub(crate) const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

#[derive(Debug, Default)]
pub(crate) struct NodePorts;

impl_plugin!(
    NodePorts,
    names::NODE_PORTS,
    [PreFilter, Filter],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for NodePorts {
    /// A pod holding one of the ports deleted; a new node (no hint: any may have the ports
    /// free). Host ports cannot change on an existing pod.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::Node, ActionType::ADD)),
        ]
    }
}

/// Upstream's `isSchedulableAfterPodDeleted`: Queue when the deleted pod was on a node (or
/// nominated to one) and held a port the pod wants.
fn is_schedulable_after_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (Some(deleted), _) = objects::<PodObject>(old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    if !deleted.on_or_nominated_to_node() {
        return Ok(QueueingHint::QueueSkip);
    }
    let mut in_use = HostPortInfo::default();
    for p in deleted.host_ports() {
        in_use.add(p);
    }
    Ok(queue_if(
        pod.host_ports.iter().any(|p| in_use.check_conflict(p)),
    ))
}

impl SignPlugin for NodePorts {
    /// The ports with their address and protocol (upstream's `HostPortsSigner` keeps the numbers
    /// only, so 53/TCP and 53/UDP would look alike though they conflict differently).
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let mut ports: Vec<&HostPort> = pod.host_ports.iter().collect();
        ports.sort();
        Ok(vec![SignFragment::new(
            signer_names::HOST_PORTS,
            format!("{ports:?}"),
        )])
    }
}

/// Whether all `wanted` ports are free on `node`.
pub(crate) fn fits_ports(wanted: &[HostPort], node: &NodeInfo) -> bool {
    wanted.iter().all(|p| !node.used_ports.check_conflict(p))
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        // The wanted ports are precomputed in PodInfo; nothing to do for pods without host ports.
        if pod.host_ports.is_empty() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits_ports(&pod.host_ports, node) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_without_args::<NodePorts>(NodePorts::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{assigned_obj, event, hint, node_obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    /// Upstream's `Test_isSchedulableAfterPodDeleted` cases.
    #[test]
    fn hints() {
        use QueueingHint::{Queue, QueueSkip};
        let pod = PodBuilder::new("p").host_port(8080).info();
        let deleted = event(EventResource::AssignedPod, ActionType::DELETE);
        let cases = [
            (
                "deleted pod held the port",
                assigned_obj(PodBuilder::new("d").node("n").host_port(8080).build()),
                Queue,
            ),
            (
                "deleted pod held another port",
                assigned_obj(PodBuilder::new("d").node("n").host_port(9090).build()),
                QueueSkip,
            ),
            (
                "deleted pod held no port",
                assigned_obj(PodBuilder::new("d").node("n").build()),
                QueueSkip,
            ),
            (
                "deleted pod was unscheduled",
                pod_obj(PodBuilder::new("d").host_port(8080).build()),
                QueueSkip,
            ),
            (
                "deleted pod was nominated",
                pod_obj(
                    PodBuilder::new("d")
                        .nominated_node("n")
                        .host_port(8080)
                        .build(),
                ),
                Queue,
            ),
        ];
        for (name, old, want) in cases {
            assert_eq!(
                hint(&NodePorts, deleted, &pod, Some(old), None),
                Some(want),
                "{name}"
            );
        }
        let new_node = Some(node_obj(NodeBuilder::new("n").build()));
        let add = event(EventResource::Node, ActionType::ADD);
        assert_eq!(
            hint(&NodePorts, add, &pod, None, new_node.clone()),
            Some(Queue)
        );
        let label = event(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        assert_eq!(
            hint(&NodePorts, label, &pod, new_node.clone(), new_node),
            None
        );
    }

    #[test]
    fn filter() {
        let existing = |ip: &str, proto: &str, port: i32| {
            PodBuilder::new("e")
                .node("n")
                .host_port_full(ip, proto, port)
                .build()
        };
        let cases = [
            ("no ports", PodBuilder::new("p"), vec![], Code::Success),
            (
                "other port",
                PodBuilder::new("p").host_port(8080),
                vec![existing("", "", 9090)],
                Code::Success,
            ),
            (
                "same port",
                PodBuilder::new("p").host_port(8080),
                vec![existing("", "", 8080)],
                Code::Unschedulable,
            ),
            (
                "same port, other protocol",
                PodBuilder::new("p").host_port_full("", "UDP", 8080),
                vec![existing("", "TCP", 8080)],
                Code::Success,
            ),
            (
                "same port, different specific IPs",
                PodBuilder::new("p").host_port_full("127.0.0.1", "TCP", 8001),
                vec![existing("127.0.0.2", "TCP", 8001)],
                Code::Success,
            ),
            (
                "0.0.0.0 wanted conflicts with a specific IP",
                PodBuilder::new("p").host_port_full("0.0.0.0", "TCP", 8001),
                vec![existing("127.0.0.1", "TCP", 8001)],
                Code::Unschedulable,
            ),
            (
                "specific IP wanted conflicts with 0.0.0.0 used",
                PodBuilder::new("p").host_port_full("127.0.0.1", "TCP", 8001),
                vec![existing("0.0.0.0", "TCP", 8001)],
                Code::Unschedulable,
            ),
            (
                "one of several ports conflicts",
                PodBuilder::new("p").host_port(8001).host_port(8002),
                vec![existing("", "", 8002)],
                Code::Unschedulable,
            ),
        ];
        for (name, pod, pods, want) in cases {
            let node = NodeBuilder::new("n").info(pods);
            let s = NodePorts.filter(&CycleState::new(), &pod.info(), &node);
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON);
            }
        }
    }

    #[test]
    fn pre_filter_skips_pods_without_host_ports() {
        let (_, s) = NodePorts.pre_filter(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &Snapshot::new(),
        );
        assert!(s.is_skip());
        let (_, s) = NodePorts.pre_filter(
            &mut CycleState::new(),
            &PodBuilder::new("p").host_port(80).info(),
            &Snapshot::new(),
        );
        assert!(s.is_success());
    }
}
