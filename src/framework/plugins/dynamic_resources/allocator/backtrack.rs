//! The search (upstream's `allocateOne`): claims in order, requests in order, for each wanted
//! device every candidate in pool order after the request's previous device, backtracking when
//! a later device cannot be found; a `firstAvailable` request takes its first subrequest that
//! works.

use std::time::Instant;

use super::{
    ALLOCATION_RESULTS_MAX_SIZE, DevRef, Indices, Loc, Search, Stop, claim_ref, num_devices,
    requests,
};

impl Search<'_> {
    fn num_requests(&self, ci: usize) -> usize {
        requests(&self.claims[ci]).len()
    }

    /// Upstream's `allocateOne`: true once every claim has all its devices. `start`: where the
    /// search for this request's next device begins (after its previous device).
    pub(super) fn allocate_one(
        &mut self,
        r: Indices,
        allocating_sub: bool,
        start: Loc,
    ) -> Result<bool, Stop> {
        if self.deadline.is_some_and(|d| Instant::now() > d) {
            return Err(Stop::Timeout);
        }
        if r.claim >= self.claims.len() {
            return Ok(true);
        }
        if r.request >= self.num_requests(r.claim) {
            let next = Indices {
                claim: r.claim + 1,
                ..Indices::default()
            };
            return match self.allocate_one(next, false, Loc::default()) {
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            };
        }
        let Some(data) = self.request_data.get(&r.key()) else {
            return Err(Stop::Fatal("internal error: request data missing".into()));
        };
        let (is_sub, all, wanted, req) = (
            data.parent.is_some(),
            data.req.all(),
            data.num_devices,
            data.req,
        );
        let first_of_all = data.all_devices.get(r.device).copied();
        if !allocating_sub && is_sub {
            // A firstAvailable list: the first subrequest that works.
            let mut all_exceeded = true;
            for sub in 0.. {
                if !self.request_data.contains_key(&(r.claim, r.request, sub)) {
                    return if all_exceeded {
                        Err(Stop::MaxSize)
                    } else {
                        Ok(false)
                    };
                }
                match self.allocate_one(Indices { sub, ..r }, true, Loc::default()) {
                    Err(Stop::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(true) => {
                        self.selected_sub.insert((r.claim, r.request), sub);
                        return Ok(true);
                    }
                    Ok(false) => all_exceeded = false,
                }
            }
        }
        if all && wanted == 0 {
            return Ok(false);
        }
        if r.device >= wanted {
            let next = Indices {
                claim: r.claim,
                request: r.request + 1,
                ..Indices::default()
            };
            return self.allocate_one(next, false, Loc::default());
        }
        let available = ALLOCATION_RESULTS_MAX_SIZE.saturating_sub(self.results[r.claim].len());
        if wanted - r.device > available {
            return Err(Stop::MaxSize);
        }
        let next = Indices {
            device: r.device + 1,
            ..r
        };
        if all {
            let Some(d) = first_of_all else {
                return Ok(false);
            };
            let Some(undo) = self.allocate_device(r, d, true)? else {
                return Ok(false);
            };
            return match self.allocate_one(next, allocating_sub, Loc::default()) {
                Ok(true) => Ok(true),
                other => {
                    self.rollback(undo);
                    other
                }
            };
        }
        for pi in start.pool..self.pools.len() {
            if self.pools[pi].incomplete || self.pools[pi].invalid.is_some() {
                continue;
            }
            let slice_start = if pi == start.pool { start.slice } else { 0 };
            for si in slice_start..self.pools[pi].slices.len() {
                let device_start = if pi == start.pool && si == start.slice {
                    start.device
                } else {
                    0
                };
                for di in device_start..num_devices(&self.pools[pi].slices[si]) {
                    let d = DevRef {
                        pool: pi,
                        slice: si,
                        device: di,
                    };
                    let id = self.device_id(d);
                    if req.admin() && self.allocating_for_claim(&id, r.claim) {
                        continue;
                    }
                    if !req.admin() && self.in_use(&id) {
                        continue;
                    }
                    if !self.selectable_key(r.key(), d)? {
                        continue;
                    }
                    match self.capacity_fits(req, d) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            return Err(Stop::Fatal(format!(
                                "claim {}, request {}: checking capacity for device {id}: {}",
                                claim_ref(&self.claims[r.claim]),
                                req.name,
                                e.0
                            )));
                        }
                    }
                    let Some(undo) = self.allocate_device(r, d, false)? else {
                        continue;
                    };
                    let after = DevRef {
                        device: di + 1,
                        ..d
                    };
                    match self.allocate_one(next, allocating_sub, after) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.rollback(undo),
                        Err(e) => {
                            self.rollback(undo);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(false)
    }
}
