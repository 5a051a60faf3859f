//! Upstream's claim tracker (`SharedDRAManager.ResourceClaims()`): the informer's claims with the
//! scheduler's own writes assumed on top, and the allocations in flight between Reserve and the
//! status update in PreBind. Together they say which devices are taken, so two pods in flight never
//! get the same device.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use parking_lot::Mutex;

use crate::framework::listers::ObjectStore;
use crate::framework::plugins::volume_binding::assume_cache::{AssumeCache, AssumeError};

/// One device: driver, pool and device name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl DeviceId {
    pub(crate) fn new(driver: &str, pool: &str, device: &str) -> DeviceId {
        DeviceId {
            driver: driver.to_string(),
            pool: pool.to_string(),
            device: device.to_string(),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// An allocation made in Reserve and not written yet, and how many pods are counting on it.
struct InFlight {
    claim: Arc<ResourceClaim>,
    sharers: usize,
}

pub(crate) struct ClaimTracker {
    assumed: AssumeCache<ResourceClaim>,
    in_flight: Mutex<HashMap<String, InFlight>>,
}

impl Default for ClaimTracker {
    fn default() -> Self {
        ClaimTracker {
            assumed: AssumeCache::new("ResourceClaim"),
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

impl std::fmt::Debug for ClaimTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimTracker")
            .field("in_flight", &self.in_flight.lock().len())
            .finish()
    }
}

fn uid(claim: &ResourceClaim) -> &str {
    claim.metadata.uid.as_deref().unwrap_or_default()
}

impl ClaimTracker {
    /// The claim as the scheduler knows it: its own newer write, else the informer's.
    pub(crate) fn get(
        &self,
        store: &ObjectStore<ResourceClaim>,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<ResourceClaim>> {
        self.assumed.get(store, namespace, name)
    }

    /// Records the claim the API returned after the scheduler's update, until the informer has it.
    pub(crate) fn assume(
        &self,
        store: &ObjectStore<ResourceClaim>,
        claim: ResourceClaim,
    ) -> Result<(), AssumeError> {
        self.assumed.assume(store, claim)
    }

    /// Drops the assumption for `namespace/name`.
    pub(crate) fn restore(&self, key: &str) {
        self.assumed.restore(key);
    }

    /// The allocation in flight for the claim with `uid`, if any.
    pub(crate) fn pending_allocation(&self, uid: &str) -> Option<AllocationResult> {
        self.in_flight
            .lock()
            .get(uid)
            .and_then(|f| f.claim.status.as_ref()?.allocation.clone())
    }

    /// Reserve: `allocated` (the claim with its new allocation) is in flight.
    pub(crate) fn signal_pending(&self, allocated: Arc<ResourceClaim>) {
        let mut in_flight = self.in_flight.lock();
        match in_flight.get_mut(uid(&allocated)) {
            Some(f) => f.sharers += 1,
            None => {
                in_flight.insert(
                    uid(&allocated).to_string(),
                    InFlight {
                        claim: allocated,
                        sharers: 1,
                    },
                );
            }
        }
    }

    /// One pod no longer needs the in-flight allocation of `uid`; it is dropped when it was the
    /// last one (or `force`). True when it was dropped.
    pub(crate) fn maybe_remove_pending(&self, uid: &str, force: bool) -> bool {
        let mut in_flight = self.in_flight.lock();
        match in_flight.get_mut(uid) {
            None => false,
            Some(f) if force || f.sharers <= 1 => {
                in_flight.remove(uid);
                true
            }
            Some(f) => {
                f.sharers -= 1;
                false
            }
        }
    }

    /// Every claim as the scheduler knows it, with the allocations in flight: what upstream's
    /// `GatherAllocatedState` reads (see `allocator::AllocatedState::of`).
    pub(crate) fn claims_with_in_flight(
        &self,
        store: &ObjectStore<ResourceClaim>,
    ) -> Vec<Arc<ResourceClaim>> {
        // In-flight first: an allocation leaves the in-flight set only after it was assumed, so
        // reading the claims second cannot miss it.
        let in_flight: Vec<Arc<ResourceClaim>> = self
            .in_flight
            .lock()
            .values()
            .map(|f| f.claim.clone())
            .collect();
        self.assumed.prune(store);
        let mut claims = self.assumed.list(store);
        claims.extend(in_flight);
        claims
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allocated(name: &str, rv: &str, device: &str, admin: bool) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"), "resourceVersion": rv},
            "spec": {},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": "d", "pool": "p", "device": device, "adminAccess": admin}
            ]}}}
        }))
        .expect("claim")
    }

    fn unallocated(name: &str, rv: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"), "resourceVersion": rv},
            "spec": {}
        }))
        .expect("claim")
    }

    /// The devices allocated without admin access, by name.
    fn ids(claims: &[Arc<ResourceClaim>]) -> Vec<String> {
        let mut v: Vec<String> = claims
            .iter()
            .filter_map(|c| {
                c.status
                    .as_ref()?
                    .allocation
                    .as_ref()?
                    .devices
                    .as_ref()?
                    .results
                    .clone()
            })
            .flatten()
            .filter(|r| r.admin_access != Some(true))
            .map(|r| r.device)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn allocated_devices_come_from_claims_assumptions_and_in_flight() {
        let store = ObjectStore::default();
        let t = ClaimTracker::default();
        store.apply(allocated("a", "1", "dev-a", false));
        store.apply(allocated("admin", "1", "dev-admin", true));
        store.apply(unallocated("b", "1"));
        store.apply(unallocated("c", "1"));
        assert_eq!(ids(&t.claims_with_in_flight(&store)), ["dev-a"]);

        // Reserve put c's allocation in flight.
        t.signal_pending(Arc::new(allocated("c", "1", "dev-c", false)));
        assert!(t.pending_allocation("c-uid").is_some());
        assert_eq!(ids(&t.claims_with_in_flight(&store)), ["dev-a", "dev-c"]);

        // PreBind wrote b: assumed until the informer catches up.
        t.assume(&store, allocated("b", "2", "dev-b", false))
            .expect("assume");
        assert_eq!(
            ids(&t.claims_with_in_flight(&store)),
            ["dev-a", "dev-b", "dev-c"]
        );
        store.apply(allocated("b", "2", "dev-b", false));
        assert_eq!(
            ids(&t.claims_with_in_flight(&store)),
            ["dev-a", "dev-b", "dev-c"]
        );

        // Unreserve of c: in flight no more.
        assert!(t.maybe_remove_pending("c-uid", false));
        assert!(!t.maybe_remove_pending("c-uid", false));
        assert_eq!(ids(&t.claims_with_in_flight(&store)), ["dev-a", "dev-b"]);
    }

    #[test]
    fn shared_in_flight_allocations_stay_until_the_last_sharer() {
        let t = ClaimTracker::default();
        let claim = Arc::new(allocated("s", "1", "dev-s", false));
        t.signal_pending(claim.clone());
        t.signal_pending(claim);
        assert!(!t.maybe_remove_pending("s-uid", false));
        assert!(t.pending_allocation("s-uid").is_some());
        assert!(t.maybe_remove_pending("s-uid", false));
        assert!(t.pending_allocation("s-uid").is_none());
        // Forced removal ignores sharers.
        let claim = Arc::new(allocated("f", "1", "dev-f", false));
        t.signal_pending(claim.clone());
        t.signal_pending(claim);
        assert!(t.maybe_remove_pending("f-uid", true));
    }

    #[test]
    fn assumptions_are_restored_and_pruned() {
        let store = ObjectStore::default();
        let t = ClaimTracker::default();
        store.apply(unallocated("a", "1"));
        t.assume(&store, allocated("a", "2", "dev-a", false))
            .expect("assume");
        assert!(t.get(&store, "ns", "a").is_some_and(|c| c.status.is_some()));
        t.restore("ns/a");
        assert!(t.get(&store, "ns", "a").is_some_and(|c| c.status.is_none()));
        // A deleted claim leaves no assumption behind.
        t.assume(&store, allocated("a", "3", "dev-a", false))
            .expect("assume");
        store.delete("ns/a");
        assert!(ids(&t.claims_with_in_flight(&store)).is_empty());
        store.apply(unallocated("a", "4"));
        assert!(t.get(&store, "ns", "a").is_some_and(|c| c.status.is_none()));
    }
}
