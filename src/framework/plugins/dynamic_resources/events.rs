//! DynamicResources' cluster events and queueing hints (upstream's `EventsToRegister`,
//! `isSchedulableAfterClaimChange`, `isSchedulableAfterPodChange`).

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::claims::{is_allocated, pod_claims};
use super::plugin::DynamicResources;
use super::tracker::ClaimTracker;
use crate::framework::interface::{ClusterEventWithHint, EnqueueExtensions};
use crate::framework::listers::{Listers, RESOURCE_CLAIMS};
use crate::framework::plugins::helper::{own_update, queue_if};
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, QueueingHint, objects,
};

/// What the hints read: the claims as the plugin sees them.
#[derive(Clone)]
struct Claims {
    listers: Arc<Listers>,
    tracker: Arc<ClaimTracker>,
}

impl EnqueueExtensions for DynamicResources {
    /// A node added, relabeled (topology) or with new allocatable; a claim of the pod created or
    /// changed, or any claim deallocated; the pod's generated claims recorded; a class or a
    /// ResourceSlice created or changed (no hint: new devices may be there).
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let claims = Claims {
            listers: self.listers().clone(),
            tracker: self.tracker().clone(),
        };
        let on_pod = claims.clone();
        let add_or_update = ActionType::ADD | ActionType::UPDATE;
        vec![
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD
                    | ActionType::UPDATE_NODE_LABEL
                    | ActionType::UPDATE_NODE_ALLOCATABLE,
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::ResourceClaim, add_or_update),
                move |pod, old, new| claims.is_schedulable_after_claim_change(pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
                ),
                move |pod, old, new| on_pod.is_schedulable_after_pod_change(pod, old, new),
            ),
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::DeviceClass, add_or_update)),
            ClusterEventWithHint::new(ClusterEvent::new(
                EventResource::ResourceSlice,
                add_or_update,
            )),
        ]
    }
}

impl Claims {
    /// The pod's claims; an error when one cannot be used yet (missing, being deleted, not
    /// the pod's).
    fn of(&self, pod: &PodInfo) -> Result<Vec<Arc<ResourceClaim>>, String> {
        pod_claims(
            &pod.pod,
            &self.tracker,
            self.listers.store(&RESOURCE_CLAIMS),
        )
    }

    /// Upstream's `isSchedulableAfterClaimChange`.
    fn is_schedulable_after_claim_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, HintError> {
        let (original, Some(modified)) = objects::<ResourceClaim>(old, new)? else {
            return Ok(QueueingHint::QueueSkip);
        };
        let Ok(claims) = self.of(pod) else {
            // Still not schedulable: a claim is missing or unusable.
            return Ok(QueueingHint::QueueSkip);
        };
        if original.is_some_and(is_allocated) && !is_allocated(modified) {
            // Deallocated: devices may be free for the pod.
            return Ok(QueueingHint::Queue);
        }
        let uid = modified.metadata.uid.as_deref();
        if !claims.iter().any(|c| c.metadata.uid.as_deref() == uid) {
            return Ok(QueueingHint::QueueSkip);
        }
        Ok(queue_if(
            original.is_none_or(|o| o.status != modified.status),
        ))
    }

    /// Upstream's `isSchedulableAfterPodChange`: the pod's own update, after which all its
    /// claims can be used.
    fn is_schedulable_after_pod_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, HintError> {
        Ok(queue_if(
            own_update(pod, old, new)?.is_some_and(|updated| self.of(updated).is_ok()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodResourceClaim, PodResourceClaimStatus, PodStatus};
    use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaimStatus};

    use super::*;
    use crate::framework::testing::PodBuilder;
    use crate::framework::testing::hints::{event, hint, obj, pod_obj};
    use QueueingHint::{Queue, QueueSkip};

    fn claim(name: &str, uid: &str, allocated: bool, reserved: bool) -> ResourceClaim {
        let mut c = ResourceClaim::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = Some(uid.into());
        c.status = Some(ResourceClaimStatus {
            allocation: allocated.then(AllocationResult::default),
            reserved_for: reserved.then(Vec::new),
            ..ResourceClaimStatus::default()
        });
        c
    }

    fn pod_with_claim(template: bool, generated: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
        let mut pod = PodBuilder::new("p").uid("p").build();
        if let Some(spec) = pod.spec.as_mut() {
            spec.resource_claims = Some(vec![PodResourceClaim {
                name: "gpu".into(),
                resource_claim_name: (!template).then(|| "claim".into()),
                resource_claim_template_name: template.then(|| "tmpl".into()),
            }]);
        }
        if let Some(name) = generated {
            pod.status = Some(PodStatus {
                resource_claim_statuses: Some(vec![PodResourceClaimStatus {
                    name: "gpu".into(),
                    resource_claim_name: Some(name.into()),
                }]),
                ..PodStatus::default()
            });
        }
        pod
    }

    /// Upstream's `Test_isSchedulableAfterClaimChange` and `Test_isSchedulableAfterPodChange`
    /// cases.
    #[test]
    fn hints() {
        let listers = Arc::new(Listers::default());
        listers
            .store(&RESOURCE_CLAIMS)
            .apply(claim("claim", "c1", false, false));
        let api = Arc::new(crate::framework::api_calls::RecordingApi::default());
        let dispatcher = Arc::new(crate::framework::background::ApiDispatcher::default());
        let pl = DynamicResources::new(listers.clone(), api, dispatcher, None);
        let pod = PodInfo::from_pod(pod_with_claim(false, None));
        let add = event(EventResource::ResourceClaim, ActionType::ADD);
        let update = event(EventResource::ResourceClaim, ActionType::UPDATE);
        let c =
            |name: &str, uid: &str, allocated: bool| Some(obj(claim(name, uid, allocated, false)));
        let cases = [
            (
                "the pod's claim created",
                add,
                None,
                c("claim", "c1", false),
                Queue,
            ),
            (
                "another claim created",
                add,
                None,
                c("other", "c2", false),
                QueueSkip,
            ),
            (
                "the pod's claim allocated",
                update,
                c("claim", "c1", false),
                c("claim", "c1", true),
                Queue,
            ),
            (
                "the pod's claim unchanged status",
                update,
                c("claim", "c1", false),
                c("claim", "c1", false),
                QueueSkip,
            ),
            (
                "another claim deallocated",
                update,
                c("other", "c2", true),
                c("other", "c2", false),
                Queue,
            ),
        ];
        for (name, incoming, old, new, want) in cases {
            assert_eq!(hint(&pl, incoming, &pod, old, new), Some(want), "{name}");
        }
        // A pod whose claim does not exist yet stays.
        let missing = PodInfo::from_pod(pod_with_claim(true, None));
        assert_eq!(
            hint(&pl, add, &missing, None, c("claim", "c1", false)),
            Some(QueueSkip)
        );

        let generated = event(
            EventResource::UnscheduledPod,
            ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
        );
        let waiting = PodInfo::from_pod(pod_with_claim(true, None));
        let mut owned = claim("p-gpu", "c3", false, false);
        owned.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                controller: Some(true),
                uid: "p".into(),
                ..Default::default()
            },
        ]);
        listers.store(&RESOURCE_CLAIMS).apply(owned);
        let cases = [
            (
                "its claim was generated",
                Some(pod_obj(pod_with_claim(true, Some("p-gpu")))),
                Queue,
            ),
            (
                "the generated claim is not there",
                Some(pod_obj(pod_with_claim(true, Some("nope")))),
                QueueSkip,
            ),
        ];
        for (name, new, want) in cases {
            let old = Some(pod_obj(pod_with_claim(true, None)));
            assert_eq!(
                hint(&pl, generated, &waiting, old, new),
                Some(want),
                "{name}"
            );
        }
    }
}
