//! LeafNodeVolumeBinding: VolumeBinding that knows leaf nodes (PreFilter, Filter,
//! Reserve/Unreserve, PreBind).
//!
//! - On a leaf node in `LeafProvisioned` mode (Kosmos's behaviour, the default) the host-side
//!   binding is skipped: the leaf cluster provisions the pod's volumes. Only a bound host PV's node
//!   affinity is still checked (a local host volume cannot follow the pod into a leaf cluster).
//! - A claim owned by a leaf cluster (`kosmos-io/cluster-owners` on the PVC, or on the PV it is bound
//!   to) pins the pod to that cluster's leaf nodes (`kosmos-io/owned-by-cluster` on the node) and
//!   keeps it off host nodes; such claims are never bound host-side.
//! - Everything else — host nodes, and leaf nodes in `Default` mode — is delegated to the host
//!   volume binder (the VolumeBinding plugin, built with the same `bindTimeoutSeconds`).
//!
//! Args: upstream's `VolumeBindingArgs` (`bindTimeoutSeconds`, default 600; seed 000 sets 5) plus
//! `policies` rendered from `LeafClusterPolicy.spec.volumes`: `{leafNodeSelector, mode}`. A node
//! is a leaf node when a policy's selector matches it; it is in `LeafProvisioned` mode when every
//! policy matching it says so (host-side binding wins a disagreement, so the outcome does not
//! depend on the order). Without policies: leaf nodes are those labelled `kosmos.io/node=true`,
//! in `LeafProvisioned` mode.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::{
    LabelMatcher, cluster_owners, default_leaf_node_selector, matcher, node_cluster,
    validate_selector,
};
use crate::api::leaf_cluster_policy::VolumeMode;
use crate::config::FieldError;
use crate::config::error::join_path;
use crate::emulation::Emulation;
use crate::framework::args::{PluginArgs, UtilizationShapePoint, decode, typed};
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, Plugin, PreBindPlugin,
    PreFilterPlugin, PreFilterResult, ReservePlugin, SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{Listers, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES};
use crate::framework::plugins::helper::{
    impl_plugin, node_selector_terms_match, queue_if, volume_rules,
};
use crate::framework::plugins::names;
use crate::framework::plugins::volume_binding::{
    DEFAULT_BIND_TIMEOUT_SECONDS, INFORMERS, VolumeBinding, VolumeBindingArgs,
    validate_volume_binding, volume_binding_events,
};
use crate::framework::registry::{Handle, PluginRegistration, SharedSnapshot};
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo,
    QueueingHint, Snapshot, objects,
};

const STATE_KEY: &str = "PreFilterLeafNodeVolumeBinding";

/// A node outside the leaf cluster that owns one of the pod's claims.
pub const REASON_NOT_OWNER: &str =
    "node(s) are not in the leaf cluster that owns the pod's volumes";
/// Upstream's `ErrReasonNodeConflict`.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";

/// `LeafNodeVolumeBindingArgs`: upstream's `VolumeBindingArgs` plus the leaf-node policies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LeafNodeVolumeBindingArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_timeout_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<UtilizationShapePoint>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<VolumePolicy>,
}

/// How volumes are handled on the nodes a selector picks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VolumePolicy {
    /// The LeafClusterPolicy it was rendered from (informational).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default = "default_leaf_node_selector")]
    pub leaf_node_selector: LabelSelector,
    #[serde(default)]
    pub mode: VolumeMode,
}

impl LeafNodeVolumeBindingArgs {
    /// The host binder's args.
    pub fn volume_binding_args(&self) -> VolumeBindingArgs {
        VolumeBindingArgs {
            bind_timeout_seconds: self.bind_timeout_seconds,
            shape: self.shape.clone(),
        }
    }
}

impl PluginArgs for LeafNodeVolumeBindingArgs {
    const KIND: &'static str = "LeafNodeVolumeBindingArgs";

    fn set_defaults(&mut self) {
        self.bind_timeout_seconds
            .get_or_insert(DEFAULT_BIND_TIMEOUT_SECONDS);
    }

    fn validate_at(&self, emulation: &Emulation) -> Vec<FieldError> {
        let mut errs = validate_volume_binding(&self.volume_binding_args(), emulation);
        for (i, p) in self.policies.iter().enumerate() {
            validate_selector(
                &join_path(&format!("policies[{i}]"), "leafNodeSelector"),
                Some(&p.leaf_node_selector),
                &mut errs,
            );
        }
        errs
    }
}

/// Per-cycle state.
#[derive(Debug, Default)]
struct LeafVolumeState {
    /// The pod uses no claims.
    no_claims: bool,
    /// The clusters that own all of the pod's owned claims (`None`: no owned claims).
    owners: Option<BTreeSet<String>>,
    /// PVs bound to the pod's claims that no leaf cluster owns.
    host_pvs: Vec<Arc<PersistentVolume>>,
    /// The host binder's PreFilter returned Skip (its Filter must not run).
    delegate_skipped: bool,
}

/// Where the pod's volumes go on one node.
#[derive(Debug, PartialEq, Eq)]
enum NodeKind {
    /// A host node, or a leaf node in `Default` mode: the host binder decides.
    HostBinding,
    /// A leaf node in `LeafProvisioned` mode.
    LeafProvisioned,
}

/// The plugin.
pub struct LeafNodeVolumeBinding {
    policies: Vec<(LabelMatcher, VolumeMode)>,
    default_leaf_nodes: LabelMatcher,
    listers: Arc<Listers>,
    snapshot: Arc<SharedSnapshot>,
    /// The host volume binder (the VolumeBinding plugin); `None` leaves host claims alone.
    host: Option<Arc<dyn Plugin>>,
}

impl std::fmt::Debug for LeafNodeVolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeafNodeVolumeBinding")
            .field("policies", &self.policies.len())
            .field("host", &self.host.as_ref().map(|h| h.name().to_string()))
            .finish()
    }
}

impl LeafNodeVolumeBinding {
    /// Builds the plugin; `host` is the host volume binder it delegates host claims to.
    pub fn new(
        args: &LeafNodeVolumeBindingArgs,
        handle: &Handle,
        host: Option<Arc<dyn Plugin>>,
    ) -> Result<LeafNodeVolumeBinding, String> {
        let policies = args
            .policies
            .iter()
            .map(|p| Ok((matcher(Some(&p.leaf_node_selector))?, p.mode)))
            .collect::<Result<_, String>>()?;
        Ok(LeafNodeVolumeBinding {
            policies,
            default_leaf_nodes: matcher(Some(&default_leaf_node_selector()))?,
            listers: handle.listers.clone(),
            snapshot: handle.snapshot.clone(),
            host,
        })
    }

    fn kind(&self, node: &NodeInfo) -> (bool, NodeKind) {
        let labels = node.labels();
        if self.policies.is_empty() {
            let leaf = self.default_leaf_nodes.matches(labels);
            let kind = if leaf {
                NodeKind::LeafProvisioned
            } else {
                NodeKind::HostBinding
            };
            return (leaf, kind);
        }
        let modes: Vec<VolumeMode> = self
            .policies
            .iter()
            .filter(|(m, _)| m.matches(labels))
            .map(|(_, mode)| *mode)
            .collect();
        let leaf = !modes.is_empty();
        let provisioned = leaf && modes.iter().all(|m| *m == VolumeMode::LeafProvisioned);
        let kind = if provisioned {
            NodeKind::LeafProvisioned
        } else {
            NodeKind::HostBinding
        };
        (leaf, kind)
    }

    /// Whether the host binder handles this pod on `node_name` (Reserve, Unreserve, PreBind).
    fn host_handles(&self, state: &CycleState, node_name: &str) -> bool {
        let Some(s) = state.read::<LeafVolumeState>(STATE_KEY) else {
            return true;
        };
        if s.no_claims {
            return true;
        }
        if s.owners.is_some() {
            return false;
        }
        let snapshot = self.snapshot.load();
        match snapshot.get(node_name) {
            Some(node) => self.kind(node).1 == NodeKind::HostBinding,
            None => true,
        }
    }

    /// The claims the pod's volumes name (`persistentVolumeClaim`, and generic ephemeral volumes'
    /// `<pod>-<volume>` claims).
    fn claim_names(pod: &PodInfo) -> Vec<String> {
        pod.spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(c), _) => Some(c.claim_name.clone()),
                (None, Some(_)) => Some(format!("{}-{}", pod.name(), v.name)),
                _ => None,
            })
            .collect()
    }

    fn leaf_state(&self, pod: &PodInfo) -> LeafVolumeState {
        let names = Self::claim_names(pod);
        let mut state = LeafVolumeState {
            no_claims: names.is_empty(),
            ..LeafVolumeState::default()
        };
        for name in names {
            // A missing claim is the host binder's to report.
            let Some(pvc) = self
                .listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), &name)
            else {
                continue;
            };
            let pv = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .filter(|n| !n.is_empty())
                .and_then(|n| self.listers.store(&PERSISTENT_VOLUMES).get("", n));
            let owners = cluster_owners(pvc.metadata.annotations.as_ref()).or_else(|| {
                pv.as_ref()
                    .and_then(|pv| cluster_owners(pv.metadata.annotations.as_ref()))
            });
            match owners {
                Some(owners) => {
                    let owners: BTreeSet<String> = owners.into_iter().collect();
                    state.owners = Some(match state.owners.take() {
                        None => owners,
                        Some(prev) => prev.intersection(&owners).cloned().collect(),
                    });
                }
                None => state.host_pvs.extend(pv),
            }
        }
        state
    }
}

fn pv_fits(pv: &PersistentVolume, node: &NodeInfo) -> bool {
    match pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        Some(sel) => {
            node_selector_terms_match(&sel.node_selector_terms, node.labels(), node.name())
        }
        None => true,
    }
}

impl_plugin!(
    LeafNodeVolumeBinding,
    names::LEAF_NODE_VOLUME_BINDING,
    [PreFilter, Filter, Reserve, PreBind],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for LeafNodeVolumeBinding {
    /// VolumeBinding's events, and a node's leaf cluster (`kosmos-io/owned-by-cluster`)
    /// changing: claims owned by a leaf cluster pin pods to its nodes.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let mut events = volume_binding_events();
        events.push(ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ANNOTATION),
            is_schedulable_after_node_cluster_change,
        ));
        events
    }
}

/// Queue when the leaf cluster a node stands for changed.
fn is_schedulable_after_node_cluster_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<Node>(old, new)?;
    Ok(queue_if(
        old.and_then(node_cluster) != new.and_then(node_cluster),
    ))
}

impl SignPlugin for LeafNodeVolumeBinding {
    /// Pods with claims are not signable (their claims are bound here or in a leaf cluster as
    /// they are placed); others it skips.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        if Self::claim_names(pod).is_empty() {
            Ok(Vec::new())
        } else {
            Err(Status::unschedulable(
                "pods with volume claims are not signable on leaf-aware profiles",
            ))
        }
    }
}

impl PreFilterPlugin for LeafNodeVolumeBinding {
    fn pre_filter(
        &self,
        cs: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let mut state = self.leaf_state(pod);
        let mut result = None;
        if let Some(host) = self.host.as_ref().and_then(|h| h.as_pre_filter()) {
            let (host_result, status) = host.pre_filter(cs, pod, snapshot);
            if status.is_skip() {
                state.delegate_skipped = true;
            } else if !status.is_success() {
                return (None, status);
            } else if state.owners.is_none() {
                // With owned claims the pod goes to its leaf cluster whatever host PVs say.
                result = host_result;
            }
        } else {
            state.delegate_skipped = true;
        }
        let no_claims = state.no_claims;
        cs.write(STATE_KEY, state);
        if no_claims {
            return (None, Status::skip());
        }
        (result, Status::success())
    }
}

impl FilterPlugin for LeafNodeVolumeBinding {
    fn filter(&self, cs: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let Some(state) = cs.read::<LeafVolumeState>(STATE_KEY) else {
            return Status::error(format!("reading {STATE_KEY:?} from cycleState: not found"));
        };
        if state.no_claims {
            return Status::success();
        }
        let (leaf, kind) = self.kind(node);
        if let Some(owners) = &state.owners {
            return match node_cluster(n) {
                Some(c) if leaf && owners.contains(c) => Status::success(),
                _ => Status::unresolvable(REASON_NOT_OWNER),
            };
        }
        match kind {
            NodeKind::LeafProvisioned => {
                if state.host_pvs.iter().all(|pv| pv_fits(pv, node)) {
                    Status::success()
                } else {
                    Status::unresolvable(REASON_NODE_CONFLICT)
                }
            }
            NodeKind::HostBinding => match self.host.as_ref().and_then(|h| h.as_filter()) {
                Some(host) if !state.delegate_skipped => host.filter(cs, pod, node),
                _ => Status::success(),
            },
        }
    }
}

impl ReservePlugin for LeafNodeVolumeBinding {
    fn reserve(&self, cs: &mut CycleState, pod: &PodInfo, node_name: &str) -> Status {
        match self.host.as_ref().and_then(|h| h.as_reserve()) {
            Some(host) if self.host_handles(cs, node_name) => host.reserve(cs, pod, node_name),
            _ => Status::success(),
        }
    }

    fn unreserve(&self, cs: &mut CycleState, pod: &PodInfo, node_name: &str) {
        if let Some(host) = self.host.as_ref().and_then(|h| h.as_reserve())
            && self.host_handles(cs, node_name)
        {
            host.unreserve(cs, pod, node_name);
        }
    }
}

#[async_trait]
impl PreBindPlugin for LeafNodeVolumeBinding {
    /// The host binding's answer where it handles the node; nothing to do on a leaf node.
    fn pre_bind_pre_flight(&self, cs: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        match self.host.as_ref().and_then(|h| h.as_pre_bind()) {
            Some(host) if self.host_handles(cs, node_name) => {
                host.pre_bind_pre_flight(cs, pod, node_name)
            }
            _ => Status::skip(),
        }
    }

    async fn pre_bind(&self, cs: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        match self.host.as_ref().and_then(|h| h.as_pre_bind()) {
            Some(host) if self.host_handles(cs, node_name) => {
                host.pre_bind(cs, pod, node_name).await
            }
            _ => Status::success(),
        }
    }
}

/// The host volume binder LeafNodeVolumeBinding delegates to: the VolumeBinding plugin with the
/// same args (its cycle state is its own; enable only one of the two in a profile).
fn host_volume_binding(args: &VolumeBindingArgs, handle: &Handle) -> Arc<dyn Plugin> {
    Arc::new(VolumeBinding::from_args(args, handle))
}

pub fn registration() -> PluginRegistration {
    PluginRegistration::new(
        LeafNodeVolumeBinding::EXTENSION_POINTS,
        decode::<LeafNodeVolumeBindingArgs>,
        |args, handle| {
            let args: LeafNodeVolumeBindingArgs = typed(args)?;
            let host = host_volume_binding(&args.volume_binding_args(), handle);
            Ok(Arc::new(LeafNodeVolumeBinding::new(
                &args,
                handle,
                Some(host),
            )?))
        },
    )
    .with_emulated_args::<LeafNodeVolumeBindingArgs>()
    .with_informers(INFORMERS)
    .with_rbac_rules(volume_rules(true))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::listers::STORAGE_CLASSES;
    use crate::framework::testing::hints::node_obj;
    use crate::framework::testing::{Fake, NodeBuilder, PodBuilder, handle};
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;

    #[test]
    fn a_node_changing_leaf_cluster_requeues() {
        let pod = PodBuilder::new("p").info();
        let hint = |old: Node, new: Node| {
            let (old, new) = (node_obj(old), node_obj(new));
            is_schedulable_after_node_cluster_change(&pod, Some(&old), Some(&new))
        };
        assert_eq!(
            hint(leaf_node("n", "a"), leaf_node("n", "b")),
            Ok(QueueingHint::Queue)
        );
        let mut other_annotation = leaf_node("n", "a");
        if let Some(a) = other_annotation.metadata.annotations.as_mut() {
            a.insert("x".into(), "y".into());
        }
        assert_eq!(
            hint(leaf_node("n", "a"), other_annotation),
            Ok(QueueingHint::QueueSkip)
        );
    }
    use parking_lot::Mutex;
    use serde_json::{Value, json};

    #[test]
    fn args() {
        // Seed 000's args, and the default timeout.
        assert_eq!(
            decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"bindTimeoutSeconds": 5}))),
            Ok(json!({"bindTimeoutSeconds": 5}))
        );
        assert_eq!(
            decode::<LeafNodeVolumeBindingArgs>(None),
            Ok(json!({"bindTimeoutSeconds": 600}))
        );
        assert_eq!(
            decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"policies": [{"mode": "Default"}]}))),
            Ok(json!({"bindTimeoutSeconds": 600, "policies": [{
                "leafNodeSelector": {"matchLabels": {"kosmos.io/node": "true"}}, "mode": "Default"}]}))
        );
        assert!(decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"bindTimeout": 5}))).is_err());
        let e = decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"bindTimeoutSeconds": -1})))
            .unwrap_err();
        assert_eq!(e[0].path, "bindTimeoutSeconds");
        assert!(
            decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"policies": [{"mode": "Leaf"}]})))
                .is_err()
        );
    }

    fn pvc(name: &str, owners: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"]}});
        if let Some(o) = owners {
            v["metadata"]["annotations"] = json!({CLUSTER_OWNERS: o});
        }
        if let Some(pv) = volume {
            v["spec"]["volumeName"] = json!(pv);
        }
        serde_json::from_value(v).expect("pvc")
    }
    const CLUSTER_OWNERS: &str = super::super::CLUSTER_OWNERS_ANNOTATION;

    fn pv(name: &str, owners: Option<&str>, host: Option<&str>) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name}, "spec": {}});
        if let Some(o) = owners {
            v["metadata"]["annotations"] = json!({CLUSTER_OWNERS: o});
        }
        if let Some(h) = host {
            v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}]}});
        }
        serde_json::from_value(v).expect("pv")
    }

    struct Env {
        plugin: LeafNodeVolumeBinding,
        log: Arc<Mutex<Vec<String>>>,
        nodes: Vec<Arc<NodeInfo>>,
    }

    /// Nodes: host-1, host-2 (the host binder rejects host-2), leaf-a (cluster a), leaf-b (b).
    fn env(policies: Value, claims: Vec<PersistentVolumeClaim>, pvs: Vec<PersistentVolume>) -> Env {
        let (h, _) = handle();
        for c in claims {
            h.listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(c);
        }
        for v in pvs {
            h.listers.store(&PERSISTENT_VOLUMES).apply(v);
        }
        let nodes: Vec<Node> = vec![
            NodeBuilder::new("host-1").build(),
            NodeBuilder::new("host-2").build(),
            leaf_node("leaf-a", "a"),
            {
                let mut n = leaf_node("leaf-b", "b");
                n.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("cluster".into(), "b".into());
                n
            },
        ];
        let nodes: Vec<Arc<Node>> = nodes.into_iter().map(Arc::new).collect();
        let snapshot = Snapshot::from_objects(&nodes, &[]);
        let infos = snapshot.nodes().to_vec();
        h.snapshot.store(Arc::new(snapshot));
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut host = Fake::new("VolumeBinding", &log);
        host.filter.insert(
            "host-2".into(),
            (
                Code::UnschedulableAndUnresolvable,
                "node(s) didn't find available persistent volumes to bind".into(),
            ),
        );
        let args = decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"policies": policies})))
            .expect("args");
        let plugin =
            LeafNodeVolumeBinding::new(&typed(&args).expect("typed"), &h, Some(Arc::new(host)))
                .expect("plugin");
        Env {
            plugin,
            log,
            nodes: infos,
        }
    }

    fn pod_with(claims: &[&str]) -> PodInfo {
        let mut pod = PodBuilder::new("p").build();
        let volumes = claims
            .iter()
            .enumerate()
            .map(|(i, c)| {
                serde_json::from_value(json!({"name": format!("v{i}"),
                    "persistentVolumeClaim": {"claimName": c}}))
                .expect("volume")
            })
            .collect();
        if let Some(spec) = pod.spec.as_mut() {
            spec.volumes = Some(volumes);
        }
        PodInfo::from_pod(pod)
    }

    /// Filter codes per node (host-1, host-2, leaf-a, leaf-b) after PreFilter.
    fn filter_all(env: &Env, pod: &PodInfo) -> (Vec<String>, CycleState) {
        let mut cs = CycleState::new();
        let (_, s) = env.plugin.pre_filter(&mut cs, pod, &Snapshot::new());
        assert!(s.is_success(), "{s:?}");
        let got = env
            .nodes
            .iter()
            .map(|n| {
                let s = env.plugin.filter(&cs, pod, n);
                if s.is_success() {
                    "ok".to_string()
                } else {
                    s.message()
                }
            })
            .collect();
        (got, cs)
    }

    #[test]
    fn filter_by_node_kind_and_ownership() {
        let host_reject = "node(s) didn't find available persistent volumes to bind";
        type Case = (
            &'static str,
            Value,
            Vec<PersistentVolumeClaim>,
            Vec<PersistentVolume>,
            [&'static str; 4],
        );
        let cases: Vec<Case> = vec![
            (
                "unbound host claim: delegated on host, skipped on leaf (LeafProvisioned default)",
                json!([]),
                vec![pvc("data", None, None)],
                vec![],
                ["ok", host_reject, "ok", "ok"],
            ),
            (
                "leaf nodes in Default mode bind host-side",
                json!([{"mode": "Default"}]),
                vec![pvc("data", None, None)],
                vec![],
                ["ok", host_reject, "ok", "ok"],
            ),
            (
                "claim owned by cluster a: only leaf-a",
                json!([]),
                vec![pvc("data", Some("a"), None)],
                vec![],
                [REASON_NOT_OWNER, REASON_NOT_OWNER, "ok", REASON_NOT_OWNER],
            ),
            (
                "bound claim whose PV cluster b owns: only leaf-b",
                json!([]),
                vec![pvc("data", None, Some("pv-b"))],
                vec![pv("pv-b", Some("b"), None)],
                [REASON_NOT_OWNER, REASON_NOT_OWNER, REASON_NOT_OWNER, "ok"],
            ),
            (
                "claims owned by a and b: no node",
                json!([]),
                vec![pvc("d1", Some("a"), None), pvc("d2", Some("b"), None)],
                vec![],
                [REASON_NOT_OWNER; 4],
            ),
            (
                "multi-owner claim and a-owned claim: a",
                json!([]),
                vec![pvc("d1", Some("a,b"), None), pvc("d2", Some("a"), None)],
                vec![],
                [REASON_NOT_OWNER, REASON_NOT_OWNER, "ok", REASON_NOT_OWNER],
            ),
            (
                "bound local host PV: leaf nodes conflict",
                json!([]),
                vec![pvc("data", None, Some("pv-h"))],
                vec![pv("pv-h", None, Some("host-1"))],
                [
                    "ok",
                    host_reject,
                    REASON_NODE_CONFLICT,
                    REASON_NODE_CONFLICT,
                ],
            ),
            (
                "policy selector: only cluster b nodes are leaf nodes",
                json!([{"leafNodeSelector": {"matchLabels": {"cluster": "b"}}}]),
                vec![pvc("data", None, None)],
                vec![],
                ["ok", host_reject, "ok", "ok"],
            ),
            (
                "policies disagree: host-side binding wins",
                json!([{"mode": "LeafProvisioned"},
                {"mode": "Default", "leafNodeSelector": {"matchLabels": {"cluster": "b"}}}]),
                vec![pvc("data", None, None)],
                vec![],
                ["ok", host_reject, "ok", "ok"],
            ),
        ];
        for (name, policies, claims, pvs, want) in cases {
            let e = env(policies, claims.clone(), pvs);
            let names: Vec<&str> = claims
                .iter()
                .filter_map(|c| c.metadata.name.as_deref())
                .collect();
            let (got, _) = filter_all(&e, &pod_with(&names));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn reserve_and_pre_bind_skip_host_binding_on_leaf_nodes() {
        let run = |policies: Value, node: &str| {
            let e = env(policies, vec![pvc("data", None, None)], vec![]);
            let pod = pod_with(&["data"]);
            let (_, mut cs) = filter_all(&e, &pod);
            e.log.lock().clear();
            assert!(e.plugin.reserve(&mut cs, &pod, node).is_success());
            e.plugin.unreserve(&mut cs, &pod, node);
            let s = futures::executor::block_on(e.plugin.pre_bind(&cs, &pod, node));
            assert!(s.is_success());
            e.log.lock().clone()
        };
        let delegated = vec![
            "VolumeBinding.Reserve".to_string(),
            "VolumeBinding.Unreserve".into(),
            "VolumeBinding.PreBind".into(),
        ];
        assert_eq!(run(json!([]), "host-1"), delegated);
        assert!(run(json!([]), "leaf-a").is_empty());
        assert_eq!(run(json!([{"mode": "Default"}]), "leaf-a"), delegated);
        // Owned claims are never bound host-side.
        let e = env(json!([]), vec![pvc("data", Some("a"), None)], vec![]);
        let pod = pod_with(&["data"]);
        let (_, mut cs) = filter_all(&e, &pod);
        e.log.lock().clear();
        assert!(e.plugin.reserve(&mut cs, &pod, "leaf-a").is_success());
        assert!(futures::executor::block_on(e.plugin.pre_bind(&cs, &pod, "leaf-a")).is_success());
        assert!(e.log.lock().is_empty());
    }

    #[test]
    fn pods_without_claims_skip() {
        let e = env(json!([]), vec![], vec![]);
        let mut cs = CycleState::new();
        let pod = PodBuilder::new("p").info();
        let (r, s) = e.plugin.pre_filter(&mut cs, &pod, &Snapshot::new());
        assert_eq!((r, s.code()), (None, Code::Skip));
        // The host binder's PreFilter ran (and decides for itself).
        assert_eq!(e.log.lock().clone(), ["VolumeBinding.PreFilter"]);
    }

    #[tokio::test]
    async fn real_volume_binding_binds_host_claims_only_on_host_nodes() {
        use crate::framework::plugins::volume_binding::binder::ANN_SELECTED_NODE;
        use crate::framework::testing::{PvcBuilder, storage_class};
        let (h, api) = handle();
        h.listers.store(&STORAGE_CLASSES).apply(storage_class(
            "wffc",
            "example.com/provisioner",
            Some("WaitForFirstConsumer"),
        ));
        h.listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(
            PvcBuilder::new("data")
                .class("wffc")
                .request("1Gi")
                .access_modes(&["ReadWriteOnce"])
                .build(),
        );
        let nodes = [
            Arc::new(NodeBuilder::new("host-1").build()),
            Arc::new(leaf_node("leaf-a", "a")),
        ];
        h.snapshot
            .store(Arc::new(Snapshot::from_objects(&nodes, &[])));
        // bindTimeoutSeconds 0: PreBind gives up at once when nobody provisions.
        let args = LeafNodeVolumeBindingArgs {
            bind_timeout_seconds: Some(0),
            ..LeafNodeVolumeBindingArgs::default()
        };
        let host = host_volume_binding(&args.volume_binding_args(), &h);
        let plugin = LeafNodeVolumeBinding::new(&args, &h, Some(host)).expect("plugin");
        let pod = PodBuilder::new("p").pvc("data").info();
        let snapshot = h.snapshot.load();
        for node in ["leaf-a", "host-1"] {
            let mut cs = CycleState::new();
            let (_, s) = plugin.pre_filter(&mut cs, &pod, &snapshot);
            assert!(s.is_success(), "{s:?}");
            for info in snapshot.nodes() {
                let s = plugin.filter(&cs, &pod, info);
                assert!(s.is_success(), "{}: {s:?}", info.name());
            }
            assert!(plugin.reserve(&mut cs, &pod, node).is_success());
            let s = plugin.pre_bind(&cs, &pod, node).await;
            let updates: Vec<PersistentVolumeClaim> = api.bodies::<PersistentVolumeClaim, _>(
                crate::framework::api_calls::Verb::Replace,
                None,
            );
            if node == "leaf-a" {
                // The leaf cluster provisions: no host-side update at all.
                assert!(s.is_success(), "{s:?}");
                assert!(updates.is_empty(), "{updates:?}");
            } else {
                // VolumeBinding selected the host node on the claim (and then timed out waiting).
                assert_eq!(updates.len(), 1);
                assert_eq!(
                    updates[0]
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANN_SELECTED_NODE))
                        .map(String::as_str),
                    Some("host-1")
                );
            }
        }
    }

    #[test]
    fn without_host_binder_host_claims_pass() {
        let (h, _) = handle();
        h.listers
            .store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(pvc("data", None, None));
        let plugin = LeafNodeVolumeBinding::new(&LeafNodeVolumeBindingArgs::default(), &h, None)
            .expect("plugin");
        let pod = pod_with(&["data"]);
        let mut cs = CycleState::new();
        assert!(
            plugin
                .pre_filter(&mut cs, &pod, &Snapshot::new())
                .1
                .is_success()
        );
        let node = NodeBuilder::new("host").info(vec![]);
        assert!(plugin.filter(&cs, &pod, &node).is_success());
    }
}
