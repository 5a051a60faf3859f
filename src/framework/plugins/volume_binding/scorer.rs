//! VolumeBinding's score (upstream's `scorer.go` and `Score`): with the StorageCapacityScoring
//! feature (alpha and off in 1.36, beta and on in 1.37) a node scores by how full the storage
//! the pod's volumes would take there is, per storage class, through the args' `shape`.

use std::collections::BTreeMap;

use super::binder::{PodVolumes, claim_request, volume_capacity};
use crate::framework::plugins::helper::broken_linear;
use crate::quantity;

/// The feature gate that turns scoring on (and defaults `shape`).
pub(crate) const STORAGE_CAPACITY_SCORING: &str = "StorageCapacityScoring";

/// Upstream's `maxUtilization`.
const MAX_UTILIZATION: i64 = 100;

/// Bytes requested and available in one storage class on one node (upstream's `StorageResource`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct StorageResource {
    requested: i64,
    capacity: i64,
}

/// The storage of `volumes` by class, as upstream's `Score` groups it: the PVs chosen for the
/// claims when there are any (their capacity adds up), else the claims to provision that a
/// `CSIStorageCapacity` allowed (the pool's capacity, once per class).
fn class_resources(volumes: &PodVolumes) -> BTreeMap<String, StorageResource> {
    let mut classes: BTreeMap<String, StorageResource> = BTreeMap::new();
    if !volumes.static_bindings.is_empty() {
        for b in &volumes.static_bindings {
            let class =
                b.pv.spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
            let r = classes.entry(class).or_default();
            r.requested += claim_request(&b.pvc).unwrap_or_default().value();
            r.capacity += volume_capacity(&b.pv).value();
        }
        return classes;
    }
    for p in &volumes.dynamic_provisions {
        let Some(pool) = &p.node_capacity else {
            continue;
        };
        let class = p
            .pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let r = classes.entry(class).or_default();
        // Not `+=`: two claims of one class share the pool.
        r.capacity = pool
            .capacity
            .as_ref()
            .and_then(|q| quantity::parse_quantity(q).ok())
            .unwrap_or_default()
            .value();
        r.requested += claim_request(&p.pvc).unwrap_or_default().value();
    }
    classes
}

/// The node's score for the pod's `volumes` through `shape` (node-score units): each class's
/// utilization scored, averaged over the classes (all weigh the same), rounded.
pub(crate) fn score(shape: &[(i64, i64)], volumes: &PodVolumes) -> i64 {
    let classes = class_resources(volumes);
    if classes.is_empty() {
        return 0;
    }
    let sum: i64 = classes
        .values()
        .map(|r| {
            if r.capacity == 0 || r.requested > r.capacity {
                broken_linear(shape, MAX_UTILIZATION)
            } else {
                broken_linear(shape, r.requested * MAX_UTILIZATION / r.capacity)
            }
        })
        .sum();
    (sum as f64 / classes.len() as f64).round() as i64
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::storage::v1::CSIStorageCapacity;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::super::binder::{BindingInfo, DynamicProvision};
    use super::*;
    use crate::framework::testing::{PvBuilder, PvcBuilder};

    /// The default shape, scaled: 0 % used scores 100, full scores 0.
    const SHAPE: [(i64, i64); 2] = [(0, 100), (100, 0)];

    fn pool(capacity: &str) -> Option<Arc<CSIStorageCapacity>> {
        Some(Arc::new(CSIStorageCapacity {
            capacity: Some(Quantity(capacity.into())),
            storage_class_name: "fast".into(),
            ..Default::default()
        }))
    }

    fn provision(request: &str, capacity: Option<Arc<CSIStorageCapacity>>) -> DynamicProvision {
        DynamicProvision {
            pvc: Arc::new(PvcBuilder::new("c").class("fast").request(request).build()),
            node_capacity: capacity,
        }
    }

    #[test]
    fn dynamic_provisions_score_by_the_pools_utilization() {
        let volumes = |p: Vec<DynamicProvision>| PodVolumes {
            static_bindings: Vec::new(),
            dynamic_provisions: p,
        };
        // 10Gi of a 100Gi pool: 10 % used -> 90.
        assert_eq!(
            score(&SHAPE, &volumes(vec![provision("10Gi", pool("100Gi"))])),
            90
        );
        // Two claims of one class share the pool: 60 of 100 -> 40.
        assert_eq!(
            score(
                &SHAPE,
                &volumes(vec![
                    provision("30Gi", pool("100Gi")),
                    provision("30Gi", pool("100Gi"))
                ])
            ),
            40
        );
        // More than the pool, or an empty pool: the shape at 100 %.
        assert_eq!(
            score(&SHAPE, &volumes(vec![provision("2Gi", pool("1Gi"))])),
            0
        );
        assert_eq!(
            score(&SHAPE, &volumes(vec![provision("2Gi", pool("0"))])),
            0
        );
        // No capacity object (capacity is not tracked): nothing to score.
        assert_eq!(score(&SHAPE, &volumes(vec![provision("2Gi", None)])), 0);
        assert_eq!(score(&SHAPE, &PodVolumes::default()), 0);
    }

    #[test]
    fn static_bindings_score_by_the_chosen_volumes_and_win_over_provisions() {
        let binding = |class: &str, request: &str, capacity: &str| BindingInfo {
            pv: Arc::new(PvBuilder::new("pv").class(class).capacity(capacity).build()),
            pvc: Arc::new(PvcBuilder::new("c").class(class).request(request).build()),
        };
        let volumes = PodVolumes {
            // fast: 5 of 10 -> 50; slow: 1 of 4 -> 75 (integer utilization 25); mean 62.5 -> 63.
            static_bindings: vec![
                binding("fast", "5Gi", "10Gi"),
                binding("slow", "1Gi", "4Gi"),
            ],
            dynamic_provisions: vec![provision("90Gi", pool("100Gi"))],
        };
        assert_eq!(score(&SHAPE, &volumes), 63);
    }
}
