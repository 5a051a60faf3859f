//! A pod's ResourceClaims, as upstream's `resourceclaim` helpers find and check them.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimConsumerReference};

pub(crate) use super::allocator::requests;
use super::tracker::ClaimTracker;
use crate::framework::listers::ObjectStore;

/// The pod's claims in `spec.resourceClaims` order; claims intentionally not generated (a
/// `resourceClaimStatuses` entry without a name) are left out. The error, when a claim cannot be
/// used yet, is upstream's wording.
pub(crate) fn pod_claims(
    pod: &Pod,
    tracker: &ClaimTracker,
    store: &ObjectStore<ResourceClaim>,
) -> Result<Vec<Arc<ResourceClaim>>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let pod_claims = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default();
    let mut claims = Vec::with_capacity(pod_claims.len());
    for pc in pod_claims {
        let (name, must_check_owner) = match (
            &pc.resource_claim_name,
            &pc.resource_claim_template_name,
        ) {
            (Some(name), _) => (name.as_str(), false),
            (None, Some(_)) => {
                let status = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.resource_claim_statuses.as_deref())
                    .unwrap_or_default()
                    .iter()
                    .find(|s| s.name == pc.name);
                match status {
                    Some(s) => match s.resource_claim_name.as_deref() {
                        Some(name) => (name, true),
                        None => continue,
                    },
                    None => {
                        return Err(format!(
                            "pod \"{namespace}/{pod_name}\": ResourceClaim not created yet"
                        ));
                    }
                }
            }
            (None, None) => {
                return Err(format!(
                    "pod \"{namespace}/{pod_name}\", spec.resourceClaim {:?}: none of the supported fields are set",
                    pc.name
                ));
            }
        };
        let claim = tracker
            .get(store, namespace, name)
            .ok_or_else(|| format!("could not find ResourceClaim \"{namespace}/{name}\""))?;
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("resourceclaim {name:?} is being deleted"));
        }
        if must_check_owner && !controlled_by(&claim, pod) {
            return Err(format!(
                "ResourceClaim {namespace}/{name} was not created for Pod {namespace}/{pod_name} (Pod is not owner)"
            ));
        }
        claims.push(claim);
    }
    Ok(claims)
}

fn controlled_by(claim: &ResourceClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Whether `pod` is among the claim's consumers.
pub(crate) fn reserved_for_pod(claim: &ResourceClaim, pod_uid: &str) -> bool {
    reserved_for(claim).iter().any(|r| r.uid == pod_uid)
}

pub(crate) fn reserved_for(claim: &ResourceClaim) -> &[ResourceClaimConsumerReference] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
}

pub(crate) fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

/// The implicit extended resource of a DeviceClass (upstream's `ResourceDeviceClassPrefix`).
pub(crate) const DEVICE_CLASS_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// The resources in `requested` that a DeviceClass provides (`DRAExtendedResource`): by its
/// `extendedResourceName`, or as `deviceclass.resource.kubernetes.io/<class>`.
pub(crate) fn backed_by_dra<'a>(
    requested: impl Iterator<Item = &'a String>,
    classes: &ObjectStore<DeviceClass>,
) -> Vec<String> {
    let mut requested = requested.peekable();
    if requested.peek().is_none() {
        return Vec::new();
    }
    let classes = classes.list();
    requested
        .filter(|name| {
            classes.iter().any(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.extended_resource_name.as_deref())
                    == Some(name.as_str())
                    || name.strip_prefix(DEVICE_CLASS_PREFIX) == c.metadata.name.as_deref()
            })
        })
        .cloned()
        .collect()
}

/// `namespace/name`, as upstream's `klog.KObj` prints a claim.
pub(crate) fn claim_key(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(claims: Value, statuses: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "resourceClaims": claims},
            "status": {"resourceClaimStatuses": statuses}
        }))
        .expect("pod")
    }

    fn claim(name: &str, owner: Option<&str>, deleting: bool) -> ResourceClaim {
        let mut meta = json!({"name": name, "namespace": "ns", "uid": format!("{name}-uid")});
        if let Some(uid) = owner {
            meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": true}]);
        }
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta, "spec": {}})).expect("claim")
    }

    #[test]
    fn resolves_claims_as_upstream() {
        let store = ObjectStore::default();
        store.apply(claim("shared", None, false));
        store.apply(claim("p-gpu-abc", Some("pod-uid"), false));
        store.apply(claim("p-other", Some("someone-else"), false));
        store.apply(claim("going", None, true));
        let tracker = ClaimTracker::default();
        let names = |r: Result<Vec<Arc<ResourceClaim>>, String>| {
            r.map(|cs| {
                cs.iter()
                    .map(|c| c.metadata.name.clone().unwrap_or_default())
                    .collect::<Vec<_>>()
            })
        };
        let cases = [
            (
                "by name and from a template",
                pod(
                    json!([{"name": "a", "resourceClaimName": "shared"}, {"name": "gpu", "resourceClaimTemplateName": "t"}]),
                    json!([{"name": "gpu", "resourceClaimName": "p-gpu-abc"}]),
                ),
                Ok(vec!["shared".to_string(), "p-gpu-abc".to_string()]),
            ),
            (
                "template claim not generated yet",
                pod(
                    json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
                    json!([]),
                ),
                Err("pod \"ns/p\": ResourceClaim not created yet".to_string()),
            ),
            (
                "template claim intentionally not generated",
                pod(
                    json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
                    json!([{"name": "gpu"}]),
                ),
                Ok(vec![]),
            ),
            (
                "missing claim",
                pod(
                    json!([{"name": "a", "resourceClaimName": "nope"}]),
                    json!([]),
                ),
                Err("could not find ResourceClaim \"ns/nope\"".to_string()),
            ),
            (
                "claim being deleted",
                pod(
                    json!([{"name": "a", "resourceClaimName": "going"}]),
                    json!([]),
                ),
                Err("resourceclaim \"going\" is being deleted".to_string()),
            ),
            (
                "generated claim owned by another pod",
                pod(
                    json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
                    json!([{"name": "gpu", "resourceClaimName": "p-other"}]),
                ),
                Err(
                    "ResourceClaim ns/p-other was not created for Pod ns/p (Pod is not owner)"
                        .to_string(),
                ),
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(names(pod_claims(&pod, &tracker, &store)), want, "{name}");
        }
    }
}
