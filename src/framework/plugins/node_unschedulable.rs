//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods tolerating the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use super::helper::tolerations_tolerate_taint;
use super::names;
use super::taint_toleration::sign_tolerations;
use crate::framework::interface::{CycleState, FilterPlugin, SignFragment, SignPlugin, Status};
use crate::framework::plugins::helper::{impl_plugin, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{NodeInfo, PodInfo};

pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

#[derive(Debug, Default)]
pub struct NodeUnschedulable;

impl_plugin!(NodeUnschedulable, names::NODE_UNSCHEDULABLE, [Filter], Sign);

impl SignPlugin for NodeUnschedulable {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![sign_tolerations(pod.tolerations())?])
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::unresolvable("node(s) had unknown conditions");
        };
        if !n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
        {
            return Status::success();
        }
        let taint = Taint {
            key: TAINT_NODE_UNSCHEDULABLE.to_string(),
            effect: "NoSchedule".to_string(),
            value: None,
            time_added: None,
        };
        if tolerations_tolerate_taint(pod.tolerations(), &taint) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        }
    }
}

pub fn registration() -> PluginRegistration {
    registration_without_args::<NodeUnschedulable>(NodeUnschedulable::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter() {
        let cases = [
            (
                "schedulable node",
                PodBuilder::new("p"),
                NodeBuilder::new("n"),
                Code::Success,
            ),
            (
                "cordoned node",
                PodBuilder::new("p"),
                NodeBuilder::new("n").unschedulable(),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "cordoned node, pod tolerates the taint",
                PodBuilder::new("p").toleration(
                    TAINT_NODE_UNSCHEDULABLE,
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                NodeBuilder::new("n").unschedulable(),
                Code::Success,
            ),
            (
                "cordoned node, pod tolerates everything",
                PodBuilder::new("p").toleration("", "Exists", "", ""),
                NodeBuilder::new("n").unschedulable(),
                Code::Success,
            ),
        ];
        for (name, pod, node, want) in cases {
            let s = NodeUnschedulable.filter(&CycleState::new(), &pod.info(), &node.info(vec![]));
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON_UNSCHEDULABLE);
            }
        }
    }
}
