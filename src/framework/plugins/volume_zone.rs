//! VolumeZone: the zone and region labels of the PVs bound to the pod's claims must match the
//! node's (claims of WaitForFirstConsumer classes that are not bound yet are left to
//! VolumeBinding).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::names;
use crate::framework::args::no_args;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, Plugin, PreFilterPlugin,
    PreFilterResult, SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{
    Listers, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES,
};
use crate::framework::plugins::helper::{impl_plugin, queue_if, volume_rules};
use crate::framework::plugins::volume_binding::binder::{claim_class, claim_volume_name};
use crate::framework::plugins::volume_binding::sign_volumes;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo, PodView,
    QueueingHint, Snapshot, objects,
};

const STATE_KEY: &str = "PreFilterVolumeZone";

/// The Filter reason.
pub(crate) const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";

/// The PV labels VolumeZone reads, in upstream's order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

fn translate_to_ga(label: &str) -> &str {
    match label {
        BETA_REGION => REGION,
        BETA_ZONE => ZONE,
        other => other,
    }
}

/// One PV topology constraint: the label and the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PvTopology {
    key: &'static str,
    values: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct PreFilterState {
    topologies: Vec<PvTopology>,
}

/// Upstream's `LabelZonesToSet`: a label value may list several zones joined by `__`.
fn label_zones_to_set(value: &str) -> Option<BTreeSet<String>> {
    if value.is_empty() {
        return Some(BTreeSet::new());
    }
    value
        .split("__")
        .map(|z| (!z.is_empty()).then(|| z.to_string()))
        .collect()
}

fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let labels = pv.metadata.labels.as_ref();
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|key| {
            let value = labels?.get(*key)?;
            Some(PvTopology {
                key,
                values: label_zones_to_set(value)?,
            })
        })
        .collect()
}

#[derive(Debug)]
pub(crate) struct VolumeZone {
    listers: Arc<Listers>,
}

impl VolumeZone {
    pub(crate) fn new(listers: Arc<Listers>) -> VolumeZone {
        VolumeZone { listers }
    }

    fn pv_topologies_of_pod(&self, pod: &PodInfo) -> Result<Vec<PvTopology>, Status> {
        let mut out = Vec::new();
        let claims = pod
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref());
        for claim in claims {
            let name = claim.claim_name.as_str();
            if name.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
            }
            let pvc = self
                .listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), name)
                .ok_or_else(|| {
                    Status::unresolvable(format!("persistentvolumeclaim {name:?} not found"))
                })?;
            let pv_name = claim_volume_name(&pvc);
            if pv_name.is_empty() {
                let class_name = claim_class(&pvc);
                if class_name.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let class = self
                    .listers
                    .store(&STORAGE_CLASSES)
                    .get("", class_name)
                    .ok_or_else(|| {
                        Status::unresolvable(format!(
                            "storageclass.storage.k8s.io {class_name:?} not found"
                        ))
                    })?;
                match class.volume_binding_mode.as_deref() {
                    None => {
                        return Err(Status::unresolvable(format!(
                            "VolumeBindingMode not set for StorageClass {class_name:?}"
                        )));
                    }
                    Some("WaitForFirstConsumer") => continue,
                    Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
                }
            }
            let pv = self
                .listers
                .store(&PERSISTENT_VOLUMES)
                .get("", pv_name)
                .ok_or_else(|| {
                    Status::unresolvable(format!("persistentvolume {pv_name:?} not found"))
                })?;
            out.extend(pv_topologies(&pv));
        }
        Ok(out)
    }
}

impl_plugin!(
    VolumeZone,
    names::VOLUME_ZONE,
    [PreFilter, Filter],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for VolumeZone {
    /// A WaitForFirstConsumer class created; a node added or relabeled (no hint); one of the
    /// pod's claims created or updated (bound); a volume created or its topology changed.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::StorageClass, ActionType::ADD),
                is_schedulable_after_storage_class_added,
            ),
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolume,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                is_schedulable_after_volume_change,
            ),
        ]
    }
}

/// Upstream's `isSchedulableAfterPersistentVolumeClaimChange`: one of the pod's claims.
fn is_schedulable_after_claim_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, modified) = objects::<PersistentVolumeClaim>(old, new)?;
    Ok(queue_if(modified.is_some_and(|pvc| {
        pvc.metadata.namespace.as_deref() == Some(pod.namespace())
            && pod
                .volumes()
                .iter()
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .any(|c| Some(c.claim_name.as_str()) == pvc.metadata.name.as_deref())
    })))
}

/// Upstream's `isSchedulableAfterStorageClassAdded`: only a WaitForFirstConsumer class.
fn is_schedulable_after_storage_class_added(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, added) = objects::<StorageClass>(old, new)?;
    Ok(queue_if(added.is_some_and(|c| {
        c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
    })))
}

/// Upstream's `isSchedulableAfterPersistentVolumeChange`: a new volume, or one whose topology
/// labels changed.
fn is_schedulable_after_volume_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (original, modified) = objects::<PersistentVolume>(old, new)?;
    Ok(queue_if(match (original, modified) {
        (None, _) => true,
        (Some(o), Some(m)) => pv_topologies(o) != pv_topologies(m),
        (Some(_), None) => false,
    }))
}

impl SignPlugin for VolumeZone {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        sign_volumes(pod, |name| {
            self.listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), name)
        })
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        match self.pv_topologies_of_pod(pod) {
            Err(s) => (None, s),
            Ok(t) if t.is_empty() => (None, Status::skip()),
            Ok(topologies) => {
                state.write(STATE_KEY, PreFilterState { topologies });
                (None, Status::success())
            }
        }
    }
}

fn node_fits(labels: Option<&BTreeMap<String, String>>, topologies: &[PvTopology]) -> bool {
    let Some(labels) = labels else { return true };
    if !TOPOLOGY_LABELS.iter().any(|l| labels.contains_key(*l)) {
        return true;
    }
    topologies.iter().all(|t| {
        labels
            .get(t.key)
            .or_else(|| labels.get(translate_to_ga(t.key)))
            .is_some_and(|v| t.values.contains(v))
    })
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .is_none_or(Vec::is_empty)
        {
            return Status::success();
        }
        let computed;
        let topologies = match state.read::<PreFilterState>(STATE_KEY) {
            Some(s) => &s.topologies,
            None => match self.pv_topologies_of_pod(pod) {
                Ok(t) => {
                    computed = t;
                    &computed
                }
                Err(s) => return s,
            },
        };
        if node_fits(node.labels(), topologies) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_CONFLICT)
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(VolumeZone::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(VolumeZone::new(handle.listers.clone())) as Arc<dyn Plugin>)
    })
    .with_informers(&[
        &PERSISTENT_VOLUMES,
        &PERSISTENT_VOLUME_CLAIMS,
        &STORAGE_CLASSES,
    ])
    .with_rbac_rules(volume_rules(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::hints::{event, hint, node_obj, obj};
    use crate::framework::testing::{
        NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, storage_class,
    };

    /// Upstream's `TestIsSchedulableAfter*` cases.
    #[test]
    fn hints() {
        use QueueingHint::{Queue, QueueSkip};
        let pl = VolumeZone::new(listers());
        let pod = PodBuilder::new("p").pvc("claim").info();
        let claim = |name: &str, ns: &str| Some(obj(PvcBuilder::new(name).namespace(ns).build()));
        let class = |mode: Option<&str>| Some(obj(storage_class("sc", "p", mode)));
        let pv = |zone: &str| Some(obj(PvBuilder::new("pv").label(ZONE, zone).build()));
        let pvc_add = event(EventResource::PersistentVolumeClaim, ActionType::ADD);
        let pvc_update = event(EventResource::PersistentVolumeClaim, ActionType::UPDATE);
        let sc_add = event(EventResource::StorageClass, ActionType::ADD);
        let pv_add = event(EventResource::PersistentVolume, ActionType::ADD);
        let pv_update = event(EventResource::PersistentVolume, ActionType::UPDATE);
        let cases = [
            (
                "the pod's claim created",
                pvc_add,
                None,
                claim("claim", "default"),
                Some(Queue),
            ),
            (
                "the pod's claim updated",
                pvc_update,
                claim("claim", "default"),
                claim("claim", "default"),
                Some(Queue),
            ),
            (
                "another claim",
                pvc_add,
                None,
                claim("x", "default"),
                Some(QueueSkip),
            ),
            (
                "another namespace",
                pvc_add,
                None,
                claim("claim", "other"),
                Some(QueueSkip),
            ),
            (
                "WaitForFirstConsumer class",
                sc_add,
                None,
                class(Some("WaitForFirstConsumer")),
                Some(Queue),
            ),
            (
                "Immediate class",
                sc_add,
                None,
                class(Some("Immediate")),
                Some(QueueSkip),
            ),
            (
                "class updated",
                event(EventResource::StorageClass, ActionType::UPDATE),
                class(None),
                class(None),
                None,
            ),
            ("volume created", pv_add, None, pv("a"), Some(Queue)),
            (
                "volume zone changed",
                pv_update,
                pv("a"),
                pv("b"),
                Some(Queue),
            ),
            (
                "volume zone unchanged",
                pv_update,
                pv("a"),
                pv("a"),
                Some(QueueSkip),
            ),
            (
                "node relabeled",
                event(EventResource::Node, ActionType::UPDATE_NODE_LABEL),
                Some(node_obj(NodeBuilder::new("n").build())),
                Some(node_obj(NodeBuilder::new("n").build())),
                Some(Queue),
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), want, "{name}");
        }
    }

    fn listers() -> Arc<Listers> {
        let l = Listers::default();
        for pv in [
            PvBuilder::new("pv-a").label(ZONE, "us-west1-a").build(),
            PvBuilder::new("pv-multi")
                .label(ZONE, "us-west1-a__us-west1-b")
                .build(),
            PvBuilder::new("pv-beta")
                .label(BETA_ZONE, "us-west1-a")
                .label(BETA_REGION, "us-west1")
                .build(),
            PvBuilder::new("pv-region")
                .label(REGION, "us-east1")
                .build(),
            PvBuilder::new("pv-none").build(),
        ] {
            l.store(&PERSISTENT_VOLUMES).apply(pv);
        }
        for (claim, pv) in [
            ("c-a", "pv-a"),
            ("c-multi", "pv-multi"),
            ("c-beta", "pv-beta"),
            ("c-region", "pv-region"),
            ("c-none", "pv-none"),
            ("c-missing-pv", "pv-gone"),
        ] {
            l.store(&PERSISTENT_VOLUME_CLAIMS)
                .apply(PvcBuilder::new(claim).bound(pv).build());
        }
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-wffc").class("wffc").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-imm").class("imm").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-unset").class("unset").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-noclass").build());
        l.store(&STORAGE_CLASSES)
            .apply(storage_class("wffc", "p", Some("WaitForFirstConsumer")));
        l.store(&STORAGE_CLASSES)
            .apply(storage_class("imm", "p", Some("Immediate")));
        l.store(&STORAGE_CLASSES)
            .apply(storage_class("unset", "p", None));
        Arc::new(l)
    }

    fn run(pod: PodInfo, node: NodeInfo) -> Status {
        let pl = VolumeZone::new(listers());
        let mut cs = CycleState::new();
        let (_, s) = pl.pre_filter(&mut cs, &pod, &Snapshot::new());
        if !s.is_success() {
            return s;
        }
        pl.filter(&cs, &pod, &node)
    }

    #[test]
    fn filter_table() {
        let node_a = || {
            NodeBuilder::new("n")
                .label(ZONE, "us-west1-a")
                .label(REGION, "us-west1")
                .info(vec![])
        };
        let node_b = || NodeBuilder::new("n").label(ZONE, "us-west1-b").info(vec![]);
        let node_beta_a = || {
            NodeBuilder::new("n")
                .label(BETA_ZONE, "us-west1-a")
                .info(vec![])
        };
        let plain = || NodeBuilder::new("n").info(vec![]);
        let pod = |c: &str| PodBuilder::new("p").pvc(c).info();
        let conflict = Status::unresolvable(ERR_REASON_CONFLICT);
        let cases: Vec<(&str, PodInfo, NodeInfo, Status)> = vec![
            (
                "pod without volumes skips",
                PodBuilder::new("p").info(),
                node_a(),
                Status::skip(),
            ),
            ("zone matches", pod("c-a"), node_a(), Status::success()),
            ("zone differs", pod("c-a"), node_b(), conflict.clone()),
            (
                "node without topology labels fits anything",
                pod("c-a"),
                plain(),
                Status::success(),
            ),
            (
                "multi-zone PV label",
                pod("c-multi"),
                node_b(),
                Status::success(),
            ),
            (
                "beta PV labels against GA node labels",
                pod("c-beta"),
                node_a(),
                Status::success(),
            ),
            (
                "GA PV label against beta node label is not translated",
                pod("c-a"),
                node_beta_a(),
                conflict.clone(),
            ),
            (
                "region missing on the node",
                pod("c-region"),
                node_b(),
                conflict.clone(),
            ),
            (
                "PV without labels skips",
                pod("c-none"),
                node_b(),
                Status::skip(),
            ),
            (
                "unbound WaitForFirstConsumer claim skips",
                pod("c-wffc"),
                node_b(),
                Status::skip(),
            ),
            (
                "unbound immediate claim",
                pod("c-imm"),
                node_b(),
                Status::unresolvable("PersistentVolume had no name"),
            ),
            (
                "class without binding mode",
                pod("c-unset"),
                node_b(),
                Status::unresolvable("VolumeBindingMode not set for StorageClass \"unset\""),
            ),
            (
                "unbound claim without class",
                pod("c-noclass"),
                node_b(),
                Status::unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
            ),
            (
                "missing claim",
                pod("nope"),
                node_b(),
                Status::unresolvable("persistentvolumeclaim \"nope\" not found"),
            ),
            (
                "missing PV",
                pod("c-missing-pv"),
                node_b(),
                Status::unresolvable("persistentvolume \"pv-gone\" not found"),
            ),
        ];
        for (name, pod, node, want) in cases {
            assert_eq!(run(pod, node), want, "{name}");
        }
        assert_eq!(conflict.code(), Code::UnschedulableAndUnresolvable);
    }

    #[test]
    fn filter_without_pre_filter_state_computes_it() {
        let pl = VolumeZone::new(listers());
        let pod = PodBuilder::new("p").pvc("c-a").info();
        let node = NodeBuilder::new("n").label(ZONE, "other").info(vec![]);
        assert_eq!(
            pl.filter(&CycleState::new(), &pod, &node),
            Status::unresolvable(ERR_REASON_CONFLICT)
        );
    }
}
