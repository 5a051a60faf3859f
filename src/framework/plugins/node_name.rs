//! NodeName: a pod with `spec.nodeName` set fits only that node.

use super::names;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, SignFragment, SignPlugin,
    Status, signer_names,
};
use crate::framework::plugins::helper::{impl_plugin, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{ActionType, ClusterEvent, EventResource, NodeInfo, PodInfo};

pub(crate) const ERR_REASON: &str = "node(s) didn't match the requested node name";

#[derive(Debug, Default)]
pub(crate) struct NodeName;

impl_plugin!(
    NodeName,
    names::NODE_NAME,
    [Filter],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for NodeName {
    /// Only a new node can be the one the pod names (no hint: any new node is worth a retry).
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD,
        ))]
    }
}

impl SignPlugin for NodeName {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![SignFragment::new(
            signer_names::NODE_NAME,
            pod.node_name(),
        )])
    }
}

/// Whether the pod may run on `node` as far as `spec.nodeName` is concerned.
pub(crate) fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    let want = pod.node_name();
    want.is_empty() || want == node.name()
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_without_args::<NodeName>(NodeName::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, registered};
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use crate::framework::types::QueueingHint;

    #[test]
    fn a_new_node_requeues_and_nothing_else() {
        use ActionType as A;
        use EventResource as R;
        assert_eq!(registered(&NodeName), ["Node/Add"]);
        let pod = PodBuilder::new("p").node("foo").info();
        let new = || Some(node_obj(NodeBuilder::new("foo").build()));
        assert_eq!(
            hint(&NodeName, event(R::Node, A::ADD), &pod, None, new()),
            Some(QueueingHint::Queue)
        );
        for update in [A::UPDATE_NODE_LABEL, A::UPDATE_NODE_ANNOTATION] {
            assert_eq!(
                hint(&NodeName, event(R::Node, update), &pod, new(), new()),
                None
            );
        }
    }

    #[test]
    fn filter() {
        let node = NodeBuilder::new("foo").info(vec![]);
        let cases = [
            (
                "no host specified",
                PodBuilder::new("p").info(),
                Code::Success,
            ),
            (
                "host matches",
                PodBuilder::new("p").node("foo").info(),
                Code::Success,
            ),
            (
                "host doesn't match",
                PodBuilder::new("p").node("bar").info(),
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, pod, want) in cases {
            let s = NodeName.filter(&CycleState::new(), &pod, &node);
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON);
            }
        }
    }
}
