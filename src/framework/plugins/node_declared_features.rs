//! NodeDeclaredFeatures (beta and on in 1.36, GA in 1.37): a pod that needs a node feature runs
//! only on nodes that list it in `node.status.declaredFeatures`. With the feature gate off the
//! plugin does nothing (and is not among the default plugins), as upstream's.
//!
//! A pod's required features are inferred as upstream's registry
//! (`k8s.io/component-helpers/nodedeclaredfeatures/features`) does. Most of its features are never
//! required for scheduling (in 1.36 `InPlacePodLevelResourcesVerticalScaling`,
//! `ExtendWebSocketsToKubelet`, `InPlacePodVerticalScalingExclusiveInitContainers`; 1.37 adds the
//! memory-backed volume resize and two DRA node features, none inferred for scheduling); these are:
//! - `RestartAllContainersOnContainerExits`: a container or init container with a
//!   `restartPolicyRules` entry whose action is `RestartAllContainers`;
//! - `UserNamespacesHostNetworkSupport`: `hostNetwork: true` with `hostUsers: false`;
//! - `VolumeBindMountOptions` (1.37's registry): a volume mount of any container with
//!   `bindMountOptions`. The field is new in 1.37 (alpha, dropped by the API server unless its gate
//!   is on): a 1.36 API server never serves it, so inferring it at every minor is 1.36's behaviour
//!   too.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::names;
use crate::framework::args::no_args;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, PreFilterPlugin,
    PreFilterResult, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::plugins::helper::{impl_plugin, own_update, queue_if};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo, PodObject,
    QueueingHint, Snapshot, objects,
};

pub(crate) const ERR_REASON_UNSATISFIED_REQUIREMENTS: &str =
    "node(s) didn't match Pod's required features";
pub(crate) const RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS: &str =
    "RestartAllContainersOnContainerExits";
pub(crate) const USER_NAMESPACES_HOST_NETWORK_SUPPORT: &str = "UserNamespacesHostNetworkSupport";
pub(crate) const VOLUME_BIND_MOUNT_OPTIONS: &str = "VolumeBindMountOptions";
/// The feature gate that turns the plugin on.
const GATE: &str = "NodeDeclaredFeatures";

const PRE_FILTER_STATE_KEY: &str = "PreFilterNodeDeclaredFeatures";

/// The features a pod needs, in upstream's registry order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RequiredFeatures(Vec<&'static str>);

#[derive(Debug)]
pub(crate) struct NodeDeclaredFeatures {
    /// The feature gate: off, the plugin skips every pod.
    enabled: bool,
}

impl Default for NodeDeclaredFeatures {
    fn default() -> NodeDeclaredFeatures {
        NodeDeclaredFeatures { enabled: true }
    }
}

impl_plugin!(
    NodeDeclaredFeatures,
    names::NODE_DECLARED_FEATURES,
    [PreFilter, Filter],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for NodeDeclaredFeatures {
    /// A node added or whose declared features changed; the pod's own update changing the
    /// features it needs.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_DECLARED_FEATURE,
                ),
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE),
                is_schedulable_after_pod_update,
            ),
        ]
    }
}

/// Upstream's `isSchedulableAfterNodeChange`: a new node, or other declared features.
fn is_schedulable_after_node_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<Node>(old, new)?;
    let features = |n: &Node| n.status.as_ref().and_then(|s| s.declared_features.clone());
    Ok(queue_if(old.is_none_or(|o| {
        new.is_none_or(|n| features(o) != features(n))
    })))
}

/// Upstream's `isSchedulableAfterPodUpdate`: the pod's own update changed what it needs.
fn is_schedulable_after_pod_update(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let Some(updated) = own_update(pod, old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    let (before, _) = objects::<PodObject>(old, new)?;
    let before = before.and_then(PodObject::pod_info).map(required_features);
    Ok(queue_if(before != Some(required_features(updated))))
}

impl SignPlugin for NodeDeclaredFeatures {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        Ok(vec![SignFragment::new(
            signer_names::FEATURES,
            required_features(pod).join(","),
        )])
    }
}

/// The node features `pod` needs to be scheduled (upstream's `InferForPodScheduling`).
pub(crate) fn required_features(pod: &PodInfo) -> Vec<&'static str> {
    let mut features = Vec::new();
    let Some(spec) = pod.spec() else {
        return features;
    };
    let restarts_all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.restart_policy_rules.iter().flatten())
        .any(|rule| rule.action == "RestartAllContainers");
    if restarts_all {
        features.push(RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS);
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        features.push(USER_NAMESPACES_HOST_NETWORK_SUPPORT);
    }
    let bind_mount_options = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .flat_map(|c| c.volume_mounts.iter().flatten()),
        )
        .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()));
    if bind_mount_options {
        features.push(VOLUME_BIND_MOUNT_OPTIONS);
    }
    features
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if !self.enabled {
            return (None, Status::skip());
        }
        let features = required_features(pod);
        if features.is_empty() {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_STATE_KEY, Arc::new(RequiredFeatures(features)));
        (None, Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        if !self.enabled {
            return Status::success();
        }
        let Some(required) = state.read::<Arc<RequiredFeatures>>(PRE_FILTER_STATE_KEY) else {
            return Status::error(format!(
                "error reading {PRE_FILTER_STATE_KEY:?} from cycle-state: not found"
            ));
        };
        let declared = node
            .node()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.declared_features.as_deref())
            .unwrap_or_default();
        if required.0.iter().all(|f| declared.iter().any(|d| d == f)) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        NodeDeclaredFeatures::EXTENSION_POINTS,
        no_args,
        |_, handle| {
            Ok(Arc::new(NodeDeclaredFeatures {
                enabled: handle.emulation.enabled(GATE),
            }))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, pod_obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, Pod};

    /// Upstream's `TestIsSchedulableAfterNodeChange` and `TestIsSchedulableAfterPodUpdate`.
    #[test]
    fn hints() {
        use QueueingHint::{Queue, QueueSkip};
        let pl = NodeDeclaredFeatures::default();
        let pod = PodBuilder::new("p").uid("p").info();
        let node = |features: &[&str]| {
            let mut n = NodeBuilder::new("n").build();
            if let Some(s) = n.status.as_mut() {
                s.declared_features = Some(features.iter().map(|f| f.to_string()).collect());
            }
            Some(node_obj(n))
        };
        let add = event(EventResource::Node, ActionType::ADD);
        let features = event(
            EventResource::Node,
            ActionType::UPDATE_NODE_DECLARED_FEATURE,
        );
        assert_eq!(hint(&pl, add, &pod, None, node(&[])), Some(Queue));
        assert_eq!(
            hint(&pl, features, &pod, node(&[]), node(&["A"])),
            Some(Queue)
        );
        assert_eq!(
            hint(&pl, features, &pod, node(&["A"]), node(&["A"])),
            Some(QueueSkip)
        );
        let label = event(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        assert_eq!(hint(&pl, label, &pod, node(&[]), node(&["A"])), None);

        let update = event(EventResource::UnscheduledPod, ActionType::UPDATE);
        let plain = || Some(pod_obj(PodBuilder::new("p").uid("p").build()));
        let needs_feature = Some(pod_obj(with_restart_rule(
            PodBuilder::new("p").uid("p").build(),
            false,
        )));
        assert_eq!(hint(&pl, update, &pod, plain(), needs_feature), Some(Queue));
        assert_eq!(hint(&pl, update, &pod, plain(), plain()), Some(QueueSkip));
        let other = Some(pod_obj(PodBuilder::new("q").uid("q").build()));
        assert_eq!(hint(&pl, update, &pod, plain(), other), Some(QueueSkip));
        // Upstream's registration for Pod/Update covers the specific kinds too.
        let labels = event(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL);
        assert_eq!(hint(&pl, labels, &pod, plain(), plain()), Some(QueueSkip));
    }

    fn restart_all_rule() -> ContainerRestartRule {
        serde_json::from_value(serde_json::json!({
            "action": "RestartAllContainers",
            "exitCodes": {"operator": "In", "values": [42]}
        }))
        .expect("rule")
    }

    fn with_restart_rule(mut pod: Pod, init: bool) -> Pod {
        let spec = pod.spec.get_or_insert_with(Default::default);
        let c = Container {
            name: "c".into(),
            restart_policy: Some("Never".into()),
            restart_policy_rules: Some(vec![restart_all_rule()]),
            ..Default::default()
        };
        if init {
            spec.init_containers.get_or_insert_with(Vec::new).push(c);
        } else {
            spec.containers.push(c);
        }
        pod
    }

    fn host_network_user_ns(mut pod: Pod, host_users: Option<bool>) -> Pod {
        let spec = pod.spec.get_or_insert_with(Default::default);
        spec.host_network = Some(true);
        spec.host_users = host_users;
        pod
    }

    fn node_declaring(features: &[&str]) -> NodeInfo {
        let mut node: Node = NodeBuilder::new("n").build();
        node.status
            .get_or_insert_with(Default::default)
            .declared_features = Some(features.iter().map(|f| f.to_string()).collect());
        NodeInfo::with_node(Arc::new(node), vec![])
    }

    #[test]
    fn infers_the_features_upstream_infers() {
        let plain = PodBuilder::new("p").build();
        let cases: Vec<(&str, Pod, Vec<&str>)> = vec![
            ("no feature", plain.clone(), vec![]),
            (
                "restart rule on a container",
                with_restart_rule(plain.clone(), false),
                vec![RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS],
            ),
            (
                "restart rule on an init container",
                with_restart_rule(plain.clone(), true),
                vec![RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS],
            ),
            (
                "host network with a user namespace",
                host_network_user_ns(plain.clone(), Some(false)),
                vec![USER_NAMESPACES_HOST_NETWORK_SUPPORT],
            ),
            (
                "host network with host users",
                host_network_user_ns(plain.clone(), Some(true)),
                vec![],
            ),
            (
                "host network, hostUsers unset",
                host_network_user_ns(plain.clone(), None),
                vec![],
            ),
            (
                "both",
                host_network_user_ns(with_restart_rule(plain, false), Some(false)),
                vec![
                    RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS,
                    USER_NAMESPACES_HOST_NETWORK_SUPPORT,
                ],
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(required_features(&PodInfo::from_pod(pod)), want, "{name}");
        }
        // 1.37's registry: a mount with bindMountOptions, in any kind of container.
        let mut bind = PodBuilder::new("p").build();
        if let Some(spec) = bind.spec.as_mut() {
            spec.init_containers = Some(vec![Container {
                name: "init".into(),
                volume_mounts: Some(vec![k8s_openapi::api::core::v1::VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    bind_mount_options: Some(vec!["nosuid".into()]),
                    ..Default::default()
                }]),
                ..Default::default()
            }]);
        }
        assert_eq!(
            required_features(&PodInfo::from_pod(bind)),
            vec![VOLUME_BIND_MOUNT_OPTIONS]
        );
    }

    #[test]
    fn the_gate_off_makes_the_plugin_skip_every_pod() {
        let pod = PodInfo::from_pod(with_restart_rule(PodBuilder::new("p").build(), false));
        let off = NodeDeclaredFeatures { enabled: false };
        let mut state = CycleState::new();
        let (_, s) = off.pre_filter(&mut state, &pod, &Snapshot::new());
        assert!(s.is_skip());
        assert!(off.filter(&state, &pod, &node_declaring(&[])).is_success());
        // Locked on from 1.37 (GA): off only at 1.36.
        let emulation = crate::emulation::Emulation::with_gates(
            crate::emulation::Minor::V1_36,
            &["NodeDeclaredFeatures=false".into()],
        )
        .expect("known gate");
        let handle = crate::framework::registry::Handle::new(std::sync::Arc::new(
            crate::framework::api_calls::RecordingApi::default(),
        ))
        .with_emulation(std::sync::Arc::new(emulation));
        let built = (registration().factory)(&serde_json::Value::Null, &handle).expect("built");
        let filter = built.as_filter().expect("a filter plugin");
        assert!(
            filter
                .filter(&state, &pod, &node_declaring(&[]))
                .is_success()
        );
    }

    #[test]
    fn filters_nodes_by_declared_features() {
        let pod = PodInfo::from_pod(with_restart_rule(PodBuilder::new("p").build(), false));
        let pl = NodeDeclaredFeatures::default();
        let mut state = CycleState::new();
        let (_, s) = pl.pre_filter(&mut state, &pod, &Snapshot::new());
        assert!(s.is_success());
        let cases = [
            (
                "nothing declared",
                node_declaring(&[]),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "another feature declared",
                node_declaring(&[USER_NAMESPACES_HOST_NETWORK_SUPPORT]),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "the feature declared",
                node_declaring(&[
                    USER_NAMESPACES_HOST_NETWORK_SUPPORT,
                    RESTART_ALL_CONTAINERS_ON_CONTAINER_EXITS,
                ]),
                Code::Success,
            ),
        ];
        for (name, node, want) in cases {
            let s = pl.filter(&state, &pod, &node);
            assert_eq!(s.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(s.message(), ERR_REASON_UNSATISFIED_REQUIREMENTS, "{name}");
            }
        }
    }

    #[test]
    fn pods_needing_no_feature_skip_the_filter() {
        let (_, s) = NodeDeclaredFeatures::default().pre_filter(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &Snapshot::new(),
        );
        assert!(s.is_skip());
    }
}
