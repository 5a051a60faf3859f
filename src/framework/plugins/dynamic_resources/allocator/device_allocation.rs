//! Taking one device for a request (upstream's `allocateDevice`): the counters it consumes in
//! its pool, the claim's constraints, its share of a device's capacity; and undoing all of it,
//! in reverse, when the search backtracks.

use std::collections::BTreeMap;

use super::capacity::{Amount, Consumed};
use super::pools::CounterSets;
use super::{DevRef, DeviceResult, Indices, Search, Stop, Undo, capacity, claim_ref, device_of};
use crate::framework::plugins::dynamic_resources::tracker::DeviceId;

impl Search<'_> {
    /// Upstream's `checkAvailableCounters`: reserves the counters the device consumes in its
    /// pool, if the pool has them left.
    fn reserve_counters(&mut self, d: DevRef) -> bool {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        if !self.available_counters.contains_key(&d.pool) {
            let available = self.counters_left(d.pool);
            self.available_counters.insert(d.pool, available);
        }
        let consumed = self.consumed_counters.entry(d.pool).or_default();
        for c in device.consumes_counters.iter().flatten() {
            let set = consumed.entry(c.counter_set.clone()).or_default();
            for (name, counter) in &c.counters {
                *set.entry(name.clone()).or_default() += Amount::of(&counter.value).nanos;
            }
        }
        let available = &self.available_counters[&d.pool];
        let consumed = &self.consumed_counters[&d.pool];
        let exceeded = available.iter().any(|(set, counters)| {
            counters.iter().any(|(name, left)| {
                let used = consumed
                    .get(set)
                    .and_then(|s| s.get(name))
                    .copied()
                    .unwrap_or(0);
                *left < used
            })
        });
        if exceeded {
            self.release_counters(d);
        }
        !exceeded
    }

    /// The pool's counters less what its allocated devices (here and on other nodes) consume.
    fn counters_left(&self, pi: usize) -> CounterSets {
        let pool = &self.pools[pi];
        let mut left = pool.counter_sets.clone();
        for slice in pool.slices.iter().chain(&pool.elsewhere) {
            for device in slice.spec.devices.iter().flatten() {
                let id = DeviceId::new(&slice.spec.driver, &slice.spec.pool.name, &device.name);
                if !self.alloc.allocated.is_allocated(&id) {
                    continue;
                }
                for c in device.consumes_counters.iter().flatten() {
                    let Some(set) = left.get_mut(&c.counter_set) else {
                        continue;
                    };
                    for (name, counter) in &c.counters {
                        if let Some(v) = set.get_mut(name) {
                            *v -= Amount::of(&counter.value).nanos;
                        }
                    }
                }
            }
        }
        left
    }

    fn release_counters(&mut self, d: DevRef) {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let Some(consumed) = self.consumed_counters.get_mut(&d.pool) else {
            return;
        };
        for c in device.consumes_counters.iter().flatten() {
            if let Some(set) = consumed.get_mut(&c.counter_set) {
                for (name, counter) in &c.counters {
                    if let Some(v) = set.get_mut(name) {
                        *v -= Amount::of(&counter.value).nanos;
                    }
                }
            }
        }
    }

    /// Upstream's `allocateDevice`: the device (known to be selectable) is taken for the request
    /// unless it is in use, short of counters, tainted, breaks a constraint or lacks capacity.
    pub(super) fn allocate_device(
        &mut self,
        r: Indices,
        d: DevRef,
        must: bool,
    ) -> Result<Option<Undo>, Stop> {
        let id = self.device_id(d);
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let Some(data) = self.request_data.get(&r.key()) else {
            return Err(Stop::Fatal("internal error: request data missing".into()));
        };
        let (req, parent, request_name) = (data.req, data.parent, data.request_name());
        let multiple = device.allow_multiple_allocations == Some(true);
        if !multiple && req.admin() && self.allocating_for_claim(&id, r.claim) {
            return Ok(None);
        }
        if !req.admin() && self.in_use(&id) {
            return Ok(None);
        }
        // A shared device already in use has its counters charged once.
        let skip_counters = multiple && self.capacity_in_use(&id);
        let consumes = device
            .consumes_counters
            .as_ref()
            .is_some_and(|c| !c.is_empty());
        let counters_reserved = !skip_counters && consumes;
        if counters_reserved && !self.reserve_counters(d) {
            return Ok(None);
        }
        let (base, sub) = match parent {
            Some(p) => (p.to_string(), Some(req.name.to_string())),
            None => (req.name.to_string(), None),
        };
        let mut undo = Undo {
            claim: r.claim,
            id: id.clone(),
            dev: d,
            base_request: base.clone(),
            sub_request: sub.clone(),
            counters_reserved,
            constraints_added: 0,
            device_marked: false,
            capacity: None,
            previous_results: self.results[r.claim].len(),
        };
        if self.taint_prevents_allocation(d, req.tolerations) {
            self.rollback(undo);
            return Ok(None);
        }
        let driver = self.pools[d.pool].driver.clone();
        for i in 0..self.constraints[r.claim].len() {
            if !self.constraints[r.claim][i].add(&base, sub.as_deref(), device, &driver) {
                self.rollback(undo);
                if must {
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: cannot add device {id} because a claim constraint would not be satisfied",
                        claim_ref(&self.claims[r.claim]),
                        req.name
                    )));
                }
                return Ok(None);
            }
            undo.constraints_added += 1;
        }
        if !multiple {
            self.allocating
                .entry(id.clone())
                .or_default()
                .insert(r.claim);
            undo.device_marked = true;
        }
        let rules = self.alloc.rules();
        let mut share = None;
        match self.capacity_fits(req, d) {
            Ok(true) => {}
            Ok(false) => {
                self.rollback(undo);
                return Ok(None);
            }
            Err(e) => {
                self.rollback(undo);
                return Err(Stop::Fatal(format!(
                    "claim {}, request {}: rechecking capacity for device {id}: {}",
                    claim_ref(&self.claims[r.claim]),
                    req.name,
                    e.0
                )));
            }
        }
        if multiple {
            let empty = BTreeMap::new();
            let caps = device.capacity.as_ref().unwrap_or(&empty);
            let consumed = match capacity::consumed_by(req.capacity, caps, rules) {
                Ok(c) => c,
                Err(e) => {
                    self.rollback(undo);
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: computing consumed capacity for device {id}: {}",
                        claim_ref(&self.claims[r.claim]),
                        req.name,
                        e.0
                    )));
                }
            };
            let nanos: Consumed = consumed.iter().map(|(k, a)| (k.clone(), a.nanos)).collect();
            let existed = self.allocating_capacity.contains_key(&id);
            capacity::add(
                self.allocating_capacity.entry(id.clone()).or_default(),
                &nanos,
            );
            undo.capacity = Some((nanos, existed));
            share = Some((new_share_id(), consumed));
        }
        let (share_id, consumed) = match share {
            Some((id, consumed)) => (Some(id), (!consumed.is_empty()).then_some(consumed)),
            None => (None, None),
        };
        self.results[r.claim].push(DeviceResult {
            request: request_name,
            dev: d,
            admin_access: req.admin().then_some(true),
            tolerations: req.tolerations.to_vec(),
            share_id,
            consumed,
        });
        Ok(Some(undo))
    }

    /// Undoes what [`Search::allocate_device`] did, in reverse.
    pub(super) fn rollback(&mut self, undo: Undo) {
        self.results[undo.claim].truncate(undo.previous_results);
        if let Some((consumed, existed)) = undo.capacity {
            if let Some(entry) = self.allocating_capacity.get_mut(&undo.id) {
                capacity::sub(entry, &consumed);
                if entry.values().all(|v| *v == 0) {
                    self.allocating_capacity.remove(&undo.id);
                }
            }
            // An earlier share of the device still marks it as shared.
            if existed {
                self.allocating_capacity.entry(undo.id.clone()).or_default();
            }
        }
        if undo.device_marked
            && let Some(claims) = self.allocating.get_mut(&undo.id)
        {
            claims.remove(&undo.claim);
        }
        for c in self.constraints[undo.claim][..undo.constraints_added]
            .iter_mut()
            .rev()
        {
            c.remove(&undo.base_request, undo.sub_request.as_deref());
        }
        if undo.counters_reserved {
            self.release_counters(undo.dev);
        }
    }
}

/// A random share ID (upstream's `uuid.NewUUID`, a version 4 UUID).
fn new_share_id() -> String {
    let mut bytes = [0u8; 16];
    fastrand::fill(&mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}
