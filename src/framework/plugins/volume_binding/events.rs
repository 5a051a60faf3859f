//! VolumeBinding's cluster events and queueing hints (upstream's `EventsToRegister` and
//! `isSchedulableAfter*`); LeafNodeVolumeBinding registers the same.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};

use super::VolumeBinding;
use super::binder::pod_uses_claim;
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::plugins::helper::queue_if;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, PodView,
    QueueingHint, objects,
};
use crate::quantity;

/// CSINode's annotation of the in-tree plugins migrated to CSI.
const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

impl EnqueueExtensions for VolumeBinding {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        volume_binding_events()
    }
}

/// A class created or its allowed topologies changed; one of the pod's claims created or updated;
/// any volume created or updated (no hint); a node added or relabeled (no hint: topology); a
/// CSINode created or its migrated plugins changed; a CSI driver no longer tracking capacity; a
/// capacity created or grown.
pub fn volume_binding_events() -> Vec<ClusterEventWithHint> {
    let add_or_update = ActionType::ADD | ActionType::UPDATE;
    vec![
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::StorageClass, add_or_update),
            is_schedulable_after_storage_class_change,
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::PersistentVolumeClaim, add_or_update),
            is_schedulable_after_claim_change,
        ),
        ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::PersistentVolume,
            add_or_update,
        )),
        ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
        )),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::CSINode, add_or_update),
            is_schedulable_after_csi_node_change,
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::CSIDriver, ActionType::UPDATE),
            is_schedulable_after_csi_driver_change,
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::CSIStorageCapacity, add_or_update),
            is_schedulable_after_capacity_change,
        ),
    ]
}

/// Upstream's `isSchedulableAfterCSINodeChange`: a new CSINode, or its migrated plugins changed.
fn is_schedulable_after_csi_node_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<CSINode>(old, new)?;
    let migrated = |n: Option<&CSINode>| {
        n.and_then(|n| n.metadata.annotations.as_ref())
            .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
            .cloned()
    };
    Ok(queue_if(old.is_none() || migrated(old) != migrated(new)))
}

/// Upstream's `isSchedulableAfterPersistentVolumeClaimChange`: one of the pod's claims (direct
/// or ephemeral).
fn is_schedulable_after_claim_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, pvc) = objects::<PersistentVolumeClaim>(old, new)?;
    Ok(queue_if(pvc.is_some_and(|pvc| pod_uses_claim(pod, pvc))))
}

/// Upstream's `isSchedulableAfterStorageClassChange`: any new class; an update only when its
/// allowed topologies changed (the binding mode cannot change).
fn is_schedulable_after_storage_class_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<StorageClass>(old, new)?;
    Ok(queue_if(match (old, new) {
        (None, _) => true,
        (Some(o), Some(n)) => o.allowed_topologies != n.allowed_topologies,
        (Some(_), None) => false,
    }))
}

/// The size of the largest volume a capacity allows, in bytes.
fn volume_limit(c: &CSIStorageCapacity) -> Option<i64> {
    let q = c.maximum_volume_size.as_ref().or(c.capacity.as_ref())?;
    quantity::parse_quantity(q).ok().map(|p| p.value())
}

/// Upstream's `isSchedulableAfterCSIStorageCapacityChange`: a new capacity, or a larger limit.
fn is_schedulable_after_capacity_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (old, new) = objects::<CSIStorageCapacity>(old, new)?;
    let Some(old) = old else {
        return Ok(QueueingHint::Queue);
    };
    let (before, after) = (volume_limit(old), new.and_then(volume_limit));
    Ok(queue_if(
        after.is_some_and(|a| before.is_none_or(|b| a > b)),
    ))
}

/// Upstream's `isSchedulableAfterCSIDriverChange`: a driver of one of the pod's CSI volumes
/// stopped tracking storage capacity.
fn is_schedulable_after_csi_driver_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (Some(old), Some(new)) = objects::<CSIDriver>(old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    let tracks = |d: &CSIDriver| d.spec.storage_capacity.unwrap_or(false);
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let uses_driver = pod
        .volumes()
        .iter()
        .any(|v| v.csi.as_ref().is_some_and(|c| c.driver == name));
    Ok(queue_if(uses_driver && tracks(old) && !tracks(new)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{CSIVolumeSource, TopologySelectorTerm, Volume};
    use k8s_openapi::api::storage::v1::CSIDriverSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::framework::testing::hints::{event, hint, obj};
    use crate::framework::testing::{PodBuilder, PvcBuilder, storage_class};
    use QueueingHint::{Queue, QueueSkip};

    fn hint_of(
        incoming: ClusterEvent,
        pod: &PodInfo,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) -> Option<QueueingHint> {
        struct Events;
        impl EnqueueExtensions for Events {
            fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
                volume_binding_events()
            }
        }
        hint(&Events, incoming, pod, old, new)
    }

    /// Upstream's `TestIsSchedulableAfter*` cases of the volume binding plugin.
    #[test]
    fn hints() {
        let pod = PodBuilder::new("p")
            .pvc("claim")
            .volume(Volume {
                name: "csi".into(),
                csi: Some(CSIVolumeSource {
                    driver: "csi.example.com".into(),
                    ..CSIVolumeSource::default()
                }),
                ..Volume::default()
            })
            .info();
        let add = |r| event(r, ActionType::ADD);
        let update = |r| event(r, ActionType::UPDATE);
        let claim = |name: &str| Some(obj(PvcBuilder::new(name).build()));
        let class = |zones: Option<&str>| {
            let mut c = storage_class("sc", "p", Some("WaitForFirstConsumer"));
            c.allowed_topologies = zones.map(|z| {
                vec![TopologySelectorTerm {
                    match_label_expressions: Some(vec![
                        k8s_openapi::api::core::v1::TopologySelectorLabelRequirement {
                            key: "zone".into(),
                            values: vec![z.into()],
                        },
                    ]),
                }]
            });
            Some(obj(c))
        };
        let csi_node = |migrated: Option<&str>| {
            let mut n = CSINode::default();
            n.metadata.annotations = migrated.map(|m| {
                BTreeMap::from([(MIGRATED_PLUGINS_ANNOTATION.to_string(), m.to_string())])
            });
            Some(obj(n))
        };
        let driver = |capacity: bool| {
            let mut d = CSIDriver {
                spec: CSIDriverSpec {
                    storage_capacity: Some(capacity),
                    ..CSIDriverSpec::default()
                },
                ..CSIDriver::default()
            };
            d.metadata.name = Some("csi.example.com".into());
            Some(obj(d))
        };
        let capacity = |size: &str| {
            Some(obj(CSIStorageCapacity {
                capacity: Some(Quantity(size.into())),
                ..CSIStorageCapacity::default()
            }))
        };
        use EventResource as R;
        let cases = [
            (
                "the pod's claim created",
                add(R::PersistentVolumeClaim),
                None,
                claim("claim"),
                Some(Queue),
            ),
            (
                "another claim updated",
                update(R::PersistentVolumeClaim),
                claim("x"),
                claim("x"),
                Some(QueueSkip),
            ),
            (
                "class created",
                add(R::StorageClass),
                None,
                class(None),
                Some(Queue),
            ),
            (
                "class topology changed",
                update(R::StorageClass),
                class(Some("a")),
                class(Some("b")),
                Some(Queue),
            ),
            (
                "class unchanged",
                update(R::StorageClass),
                class(Some("a")),
                class(Some("a")),
                Some(QueueSkip),
            ),
            (
                "volume created",
                add(R::PersistentVolume),
                None,
                Some(obj(0u8)),
                Some(Queue),
            ),
            (
                "CSINode created",
                add(R::CSINode),
                None,
                csi_node(None),
                Some(Queue),
            ),
            (
                "migrated plugins changed",
                update(R::CSINode),
                csi_node(None),
                csi_node(Some("x")),
                Some(Queue),
            ),
            (
                "CSINode otherwise updated",
                update(R::CSINode),
                csi_node(Some("x")),
                csi_node(Some("x")),
                Some(QueueSkip),
            ),
            (
                "driver stopped tracking capacity",
                update(R::CSIDriver),
                driver(true),
                driver(false),
                Some(Queue),
            ),
            (
                "driver started tracking capacity",
                update(R::CSIDriver),
                driver(false),
                driver(true),
                Some(QueueSkip),
            ),
            (
                "capacity created",
                add(R::CSIStorageCapacity),
                None,
                capacity("1Gi"),
                Some(Queue),
            ),
            (
                "capacity grew",
                update(R::CSIStorageCapacity),
                capacity("1Gi"),
                capacity("2Gi"),
                Some(Queue),
            ),
            (
                "capacity shrank",
                update(R::CSIStorageCapacity),
                capacity("2Gi"),
                capacity("1Gi"),
                Some(QueueSkip),
            ),
            (
                "driver created",
                add(R::CSIDriver),
                None,
                driver(true),
                None,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint_of(incoming, &pod, old, new), want, "{name}");
        }
    }
}
