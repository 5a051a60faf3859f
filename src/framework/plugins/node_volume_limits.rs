//! NodeVolumeLimits (upstream's CSILimits): the CSI volumes a node would attach with the pod must
//! stay within the per-driver `allocatable.count` of the node's CSINode.
//!
//! Volumes count by `driver/volumeHandle`: a bound claim through its PV's `csi` source, an unbound
//! claim through its class's provisioner (a new volume). Not done (yet): in-tree volumes migrated
//! to CSI, and VolumeAttachments not backed by a pod in the cache.
//!
//! With VolumeLimitScaling (alpha and off in 1.36, beta and on in 1.37), a driver whose CSIDriver
//! sets `preventPodSchedulingIfMissing` must also be installed on the node (listed in its CSINode)
//! for a pod with a new volume of that driver.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::CSINode;

use super::names;
use crate::framework::args::no_args;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, Plugin, PreFilterPlugin,
    PreFilterResult, SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{
    CSI_DRIVERS, CSI_NODES, Listers, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES,
};
use crate::framework::plugins::helper::{impl_plugin, queue_if, volume_rules};
use crate::framework::plugins::volume_binding::binder::{
    claim_class, claim_volume_name, ephemeral_claim_is_for_pod, pod_uses_claim, volume_claim_name,
};
use crate::framework::plugins::volume_binding::sign_volumes;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, NodeInfo, PodInfo, PodObject,
    PodView, QueueingHint, Snapshot, objects,
};

pub(crate) const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

/// Stands in for the volume handle of a volume not provisioned yet (upstream: a random prefix).
const UNBOUND_VOLUME_PREFIX: &str = "ksched-unbound-volume";

/// The feature gate of the driver-installed check.
const VOLUME_LIMIT_SCALING: &str = "VolumeLimitScaling";

#[derive(Debug)]
pub(crate) struct NodeVolumeLimits {
    listers: Arc<Listers>,
    /// VolumeLimitScaling: refuse nodes without a driver that asks for it.
    volume_limit_scaling: bool,
}

/// Per-driver limits from a CSINode.
fn volume_limits(csi_node: Option<&CSINode>) -> HashMap<String, i64> {
    csi_node
        .into_iter()
        .flat_map(|c| c.spec.drivers.iter())
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), i64::from(count)))
        })
        .collect()
}

impl NodeVolumeLimits {
    #[cfg(test)]
    pub(crate) fn new(listers: Arc<Listers>) -> NodeVolumeLimits {
        NodeVolumeLimits {
            listers,
            volume_limit_scaling: false,
        }
    }

    /// Upstream's `checkCSIDriverOnNode`: a driver that is not a CSIDriver, or does not set
    /// `preventPodSchedulingIfMissing`, counts as installed; else the node's CSINode must list it.
    fn driver_installed(&self, driver: &str, csi_node: Option<&CSINode>) -> bool {
        let opted_in = self
            .listers
            .store(&CSI_DRIVERS)
            .get("", driver)
            .and_then(|d| d.spec.prevent_pod_scheduling_if_missing)
            .unwrap_or(false);
        !opted_in || csi_node.is_some_and(|n| n.spec.drivers.iter().any(|d| d.name == driver))
    }

    /// The CSI driver and volume handle of a claim; `None` when it does not count.
    fn csi_driver_info(&self, pvc: &PersistentVolumeClaim) -> Option<(String, String)> {
        let pv_name = claim_volume_name(pvc);
        if !pv_name.is_empty()
            && let Some(pv) = self.listers.store(&PERSISTENT_VOLUMES).get("", pv_name)
        {
            let csi = pv.spec.as_ref()?.csi.as_ref()?;
            return Some((csi.driver.clone(), csi.volume_handle.clone()));
        }
        // Unbound (or its PV is not known yet): the class's provisioner makes a new volume.
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            return None;
        }
        let class = self.listers.store(&STORAGE_CLASSES).get("", class_name)?;
        if class.provisioner.starts_with("kubernetes.io/") {
            // An in-tree provisioner: counted only when migrated to CSI (not supported yet).
            return None;
        }
        let handle = format!(
            "{UNBOUND_VOLUME_PREFIX}-{}/{}",
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default()
        );
        Some((class.provisioner.clone(), handle))
    }

    /// Upstream's `filterAttachableVolumes`: `driver/handle` -> driver for the pod's volumes. A
    /// missing claim is an error for the new pod and ignored for pods already on the node.
    fn attachable_volumes(
        &self,
        pod: &impl PodView,
        new_pod: bool,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        let ns = pod.namespace();
        for vol in pod.volumes() {
            let Some((name, ephemeral)) = volume_claim_name(pod, vol) else {
                continue;
            };
            if name.is_empty() {
                return Err("PersistentVolumeClaim had no name".into());
            }
            let Some(pvc) = self.listers.store(&PERSISTENT_VOLUME_CLAIMS).get(ns, &name) else {
                if new_pod {
                    return Err(format!(
                        "looking up PVC {ns}/{name}: persistentvolumeclaim {name:?} not found"
                    ));
                }
                continue;
            };
            if ephemeral {
                ephemeral_claim_is_for_pod(pod, &pvc)?;
            }
            if let Some((driver, handle)) = self.csi_driver_info(&pvc)
                && !driver.is_empty()
                && !handle.is_empty()
            {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
        Ok(())
    }
}

impl_plugin!(
    NodeVolumeLimits,
    names::NODE_VOLUME_LIMITS,
    [PreFilter, Filter],
    EnqueueExtensions,
    Sign
);

impl EnqueueExtensions for NodeVolumeLimits {
    /// A CSINode added (no hint) or whose limits grew; a pod with claims deleted; one of the
    /// pod's claims created. (Upstream also registers VolumeAttachment deletions; ksched counts
    /// volumes by the pods on a node, which pod deletions cover.)
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::CSINode, ActionType::ADD)),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CSINode, ActionType::UPDATE),
                is_schedulable_after_csi_node_updated,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                is_schedulable_after_claim_added,
            ),
        ]
    }
}

/// Upstream's `isSchedulableAfterPodDeleted`: a pod on (or nominated to) a node whose volumes
/// include a claim.
fn is_schedulable_after_pod_deleted(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (Some(deleted), _) = objects::<PodObject>(old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    Ok(queue_if(
        deleted.on_or_nominated_to_node()
            && deleted
                .volumes()
                .iter()
                .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some()),
    ))
}

/// Upstream's `isSchedulableAfterPVCAdded`: one of the pod's claims.
fn is_schedulable_after_claim_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, added) = objects::<PersistentVolumeClaim>(old, new)?;
    Ok(queue_if(added.is_some_and(|pvc| pod_uses_claim(pod, pvc))))
}

/// Upstream's `isSchedulableAfterCSINodeUpdated`: some driver's limit grew.
fn is_schedulable_after_csi_node_updated(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<CSINode>(old, new)?;
    let before = volume_limits(old);
    Ok(queue_if(volume_limits(new).iter().any(
        |(driver, limit)| *limit > before.get(driver).copied().unwrap_or(0),
    )))
}

impl SignPlugin for NodeVolumeLimits {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        sign_volumes(pod, |name| {
            self.listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), name)
        })
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let has = pod
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        if has {
            (None, Status::success())
        } else {
            (None, Status::skip())
        }
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .is_none_or(Vec::is_empty)
        {
            return Status::success();
        }
        let csi_node = self.listers.store(&CSI_NODES).get("", node.name());
        let mut new_volumes = BTreeMap::new();
        if let Err(e) = self.attachable_volumes(&pod.pod, true, &mut new_volumes) {
            return if e.contains("not found") {
                Status::unresolvable(e)
            } else {
                Status::error(e)
            };
        }
        if new_volumes.is_empty() {
            return Status::success();
        }
        if self.volume_limit_scaling
            && let Some(driver) = new_volumes
                .values()
                .find(|d| !self.driver_installed(d, csi_node.as_deref()))
        {
            return Status::unschedulable(format!(
                "{driver} CSI driver is not installed on the node"
            ));
        }
        let limits = volume_limits(csi_node.as_deref());
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = BTreeMap::new();
        for existing in &node.pods {
            if let Err(e) = self.attachable_volumes(existing, false, &mut attached) {
                return Status::error(e);
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (unique, driver) in &attached {
            new_volumes.remove(unique);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for driver in new_volumes.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_count {
            if let Some(max) = limits.get(driver)
                && attached_count.get(driver).copied().unwrap_or(0) + count > *max
            {
                return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
            }
        }
        Status::success()
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(NodeVolumeLimits::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(NodeVolumeLimits {
            listers: handle.listers.clone(),
            volume_limit_scaling: handle.emulation.enabled(VOLUME_LIMIT_SCALING),
        }) as Arc<dyn Plugin>)
    })
    .with_informers(&[
        &PERSISTENT_VOLUMES,
        &PERSISTENT_VOLUME_CLAIMS,
        &STORAGE_CLASSES,
        &CSI_NODES,
        &CSI_DRIVERS,
    ])
    .with_rbac_rules(volume_rules(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulation::{Emulation, Minor};
    use crate::framework::testing::hints::{assigned_obj, event, hint, obj, pod_obj};
    use crate::framework::testing::{
        NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, csi_node, storage_class,
    };
    use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// Upstream's `TestCSILimitsQHint`, `TestCSILimitsAddedPVCQHint` and
    /// `TestCSILimitsCSINodeUpdateQHint` cases.
    #[test]
    fn hints() {
        use QueueingHint::{Queue, QueueSkip};
        let pl = NodeVolumeLimits::new(Arc::new(Listers::default()));
        let pod = PodBuilder::new("p").pvc("claim").info();
        let delete = event(EventResource::AssignedPod, ActionType::DELETE);
        let cases = [
            (
                "deleted pod had a claim",
                Some(assigned_obj(
                    PodBuilder::new("d").node("n").pvc("x").build(),
                )),
                Queue,
            ),
            (
                "deleted pod had no volume",
                Some(assigned_obj(PodBuilder::new("d").node("n").build())),
                QueueSkip,
            ),
            (
                "deleted pod was unscheduled",
                Some(pod_obj(PodBuilder::new("d").pvc("x").build())),
                QueueSkip,
            ),
        ];
        for (name, old, want) in cases {
            assert_eq!(hint(&pl, delete, &pod, old, None), Some(want), "{name}");
        }
        let added = event(EventResource::PersistentVolumeClaim, ActionType::ADD);
        let claim = |name: &str| Some(obj(PvcBuilder::new(name).build()));
        assert_eq!(hint(&pl, added, &pod, None, claim("claim")), Some(Queue));
        assert_eq!(hint(&pl, added, &pod, None, claim("x")), Some(QueueSkip));
        let updated = event(EventResource::CSINode, ActionType::UPDATE);
        let node = |limit: i32| Some(obj(csi_node("n", &[("driver", Some(limit))])));
        assert_eq!(hint(&pl, updated, &pod, node(1), node(2)), Some(Queue));
        assert_eq!(hint(&pl, updated, &pod, node(2), node(1)), Some(QueueSkip));
        let csi_add = event(EventResource::CSINode, ActionType::ADD);
        assert_eq!(hint(&pl, csi_add, &pod, None, node(1)), Some(Queue));
    }

    const EBS: &str = "ebs.csi.aws.com";
    const GCE: &str = "pd.csi.storage.gke.io";

    fn listers(limit: Option<i32>) -> Arc<Listers> {
        let l = Listers::default();
        for (pv, driver, handle) in [
            ("pv-1", EBS, "vol-1"),
            ("pv-2", EBS, "vol-2"),
            ("pv-3", EBS, "vol-3"),
            ("pv-gce", GCE, "disk-1"),
        ] {
            l.store(&PERSISTENT_VOLUMES)
                .apply(PvBuilder::new(pv).csi(driver, handle).build());
            l.store(&PERSISTENT_VOLUME_CLAIMS)
                .apply(PvcBuilder::new(&format!("c-{pv}")).bound(pv).build());
        }
        l.store(&PERSISTENT_VOLUMES)
            .apply(PvBuilder::new("pv-nfs").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-nfs").bound("pv-nfs").build());
        l.store(&STORAGE_CLASSES)
            .apply(storage_class("ebs", EBS, Some("WaitForFirstConsumer")));
        l.store(&STORAGE_CLASSES).apply(storage_class(
            "intree",
            "kubernetes.io/aws-ebs",
            Some("WaitForFirstConsumer"),
        ));
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-new").class("ebs").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-new2").class("ebs").build());
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(PvcBuilder::new("c-intree").class("intree").build());
        l.store(&CSI_NODES)
            .apply(csi_node("n", &[(EBS, limit), (GCE, Some(1))]));
        Arc::new(l)
    }

    /// VolumeLimitScaling (on from 1.37): a driver that asks for it must be on the node.
    #[test]
    fn volume_limit_scaling_needs_an_opted_in_driver_installed() {
        let driver = |name: &str, prevent: Option<bool>| CSIDriver {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: CSIDriverSpec {
                prevent_pod_scheduling_if_missing: prevent,
                ..Default::default()
            },
        };
        let pod = PodBuilder::new("p").pvc("c-pv-gce").pvc("c-new").info();
        let node = |name: &str| NodeBuilder::new(name).info(vec![]);
        let filter = |scaling: bool, prevent: Option<bool>, node_name: &str| {
            let l = listers(Some(5));
            l.store(&CSI_DRIVERS).apply(driver(GCE, prevent));
            l.store(&CSI_DRIVERS).apply(driver(EBS, None));
            let pl = NodeVolumeLimits {
                listers: l,
                volume_limit_scaling: scaling,
            };
            pl.filter(&CycleState::new(), &pod, &node(node_name))
        };
        let missing =
            Status::unschedulable(format!("{GCE} CSI driver is not installed on the node"));
        // "m" has no CSINode: the opted-in driver is missing there.
        assert_eq!(filter(true, Some(true), "m"), missing);
        // Node "n" lists both drivers.
        assert!(filter(true, Some(true), "n").is_success());
        // Not opted in, or the gate off (1.36): no check.
        assert!(filter(true, Some(false), "m").is_success());
        assert!(filter(true, None, "m").is_success());
        assert!(filter(false, Some(true), "m").is_success());
        // A driver without a CSIDriver object counts as installed.
        let pl = NodeVolumeLimits {
            listers: listers(Some(5)),
            volume_limit_scaling: true,
        };
        assert!(pl.filter(&CycleState::new(), &pod, &node("m")).is_success());
        // The gate follows the minor.
        for (minor, on) in [(Minor::V1_36, false), (Minor::V1_37, true)] {
            assert_eq!(
                Emulation::of(minor).enabled(VOLUME_LIMIT_SCALING),
                on,
                "{minor}"
            );
        }
    }

    fn run(limit: Option<i32>, new_claims: &[&str], existing: &[&[&str]]) -> Status {
        let pl = NodeVolumeLimits::new(listers(limit));
        let mut pod = PodBuilder::new("p");
        for c in new_claims {
            pod = pod.pvc(c);
        }
        let pod = pod.info();
        let pods = existing
            .iter()
            .enumerate()
            .map(|(i, claims)| {
                let mut b = PodBuilder::new(&format!("e{i}")).node("n");
                for c in *claims {
                    b = b.pvc(c);
                }
                b.build()
            })
            .collect();
        let node = NodeBuilder::new("n").info(pods);
        let mut cs = CycleState::new();
        let (_, s) = pl.pre_filter(&mut cs, &pod, &Snapshot::new());
        if !s.is_success() {
            return s;
        }
        pl.filter(&cs, &pod, &node)
    }

    /// (name, the driver's limit, the new pod's claims, the claims of the pods on the node, want)
    type Case<'a> = (
        &'a str,
        Option<i32>,
        Vec<&'a str>,
        Vec<&'a [&'a str]>,
        Status,
    );

    #[test]
    fn filter_table() {
        let exceeded = Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
        let cases: Vec<Case> = vec![
            ("no claims skips", Some(1), vec![], vec![], Status::skip()),
            (
                "fits the limit",
                Some(2),
                vec!["c-pv-1"],
                vec![&["c-pv-2"]],
                Status::success(),
            ),
            (
                "exceeds the limit",
                Some(1),
                vec!["c-pv-1"],
                vec![&["c-pv-2"]],
                exceeded.clone(),
            ),
            (
                "a volume already attached does not count twice",
                Some(1),
                vec!["c-pv-1"],
                vec![&["c-pv-1"]],
                Status::success(),
            ),
            (
                "two new volumes over the limit",
                Some(2),
                vec!["c-pv-1", "c-pv-2"],
                vec![&["c-pv-3"]],
                exceeded.clone(),
            ),
            (
                "limits are per driver",
                Some(1),
                vec!["c-pv-gce"],
                vec![&["c-pv-1"]],
                Status::success(),
            ),
            (
                "unbound claims count through the class's provisioner",
                Some(1),
                vec!["c-new"],
                vec![&["c-pv-1"]],
                exceeded.clone(),
            ),
            (
                "two unbound claims are two volumes",
                Some(1),
                vec!["c-new", "c-new2"],
                vec![],
                exceeded.clone(),
            ),
            (
                "no allocatable count: no limit",
                None,
                vec!["c-pv-1", "c-pv-2"],
                vec![&["c-pv-3"]],
                Status::success(),
            ),
            (
                "non-CSI volumes do not count",
                Some(1),
                vec!["c-nfs"],
                vec![&["c-pv-1"]],
                Status::success(),
            ),
            (
                "in-tree provisioner without migration does not count",
                Some(1),
                vec!["c-intree"],
                vec![&["c-pv-1"]],
                Status::success(),
            ),
            (
                "missing claim of the new pod",
                Some(1),
                vec!["nope"],
                vec![],
                Status::unresolvable(
                    "looking up PVC default/nope: persistentvolumeclaim \"nope\" not found",
                ),
            ),
            (
                "missing claim of an existing pod is ignored",
                Some(1),
                vec!["c-pv-1"],
                vec![&["nope"]],
                Status::success(),
            ),
        ];
        for (name, limit, new, existing, want) in cases {
            assert_eq!(run(limit, &new, &existing), want, "{name}");
        }
    }

    #[test]
    fn node_without_csi_node_has_no_limits() {
        let pl = NodeVolumeLimits::new(listers(Some(0)));
        let pod = PodBuilder::new("p").pvc("c-pv-1").info();
        let node = NodeBuilder::new("other").info(vec![]);
        assert_eq!(
            pl.filter(&CycleState::new(), &pod, &node),
            Status::success()
        );
    }
}
