//! Before the search (upstream's validation loop in `Allocate`): each request's class and
//! device count, the devices an `All` request takes, and each claim's constraints; a claim
//! asking for more than a claim may hold is refused here.

use std::collections::BTreeMap;

use super::constraints::Constraint;
use super::{
    ALLOCATION_RESULTS_MAX_SIZE, AllocateError, DevRef, Req, RequestData, RequestKey, Search, Stop,
    capacity, claim_ref, device_of, num_devices, requests,
};
use crate::framework::plugins::dynamic_resources::versions::Change;

impl<'a> Search<'a> {
    /// Upstream's validation loop in `Allocate`: request data, device counts, constraints.
    pub(super) fn prepare(&mut self) -> Result<(), AllocateError> {
        let per_request = self.alloc.behaviour.has(Change::PerRequestLimitMessage);
        let every_device = self
            .alloc
            .behaviour
            .has(Change::DistinctAttributeEveryDevice);
        for (ci, claim) in self.claims.iter().enumerate() {
            let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
            let requests = requests(claim);
            let mut min_per_claim = 0usize;
            for (ri, request) in requests.iter().enumerate() {
                let min = match (&request.exactly, request.first_available.as_deref()) {
                    (_, Some(subs)) if !subs.is_empty() => {
                        let mut min = usize::MAX;
                        for (si, sub) in subs.iter().enumerate() {
                            let data = self.validate(ci, Req::sub(sub), Some(&request.name))?;
                            min = min.min(data.num_devices);
                            self.request_data.insert((ci, ri, si), data);
                        }
                        min
                    }
                    (Some(exact), _) => {
                        let data = self.validate(ci, Req::exact(&request.name, exact), None)?;
                        let n = data.num_devices;
                        self.request_data.insert((ci, ri, 0), data);
                        n
                    }
                    _ => {
                        return Err(AllocateError::Fatal(format!(
                            "claim {}, request {}: unknown request type",
                            claim_ref(claim),
                            request.name
                        )));
                    }
                };
                if per_request && min > ALLOCATION_RESULTS_MAX_SIZE.saturating_sub(min_per_claim) {
                    return Err(AllocateError::Fatal(format!(
                        "claim {}, request {}: adding {min} devices exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_per_claim} already accounted for",
                        claim_ref(claim),
                        request.name
                    )));
                }
                min_per_claim = min_per_claim.saturating_add(min);
            }
            if min_per_claim > ALLOCATION_RESULTS_MAX_SIZE {
                return Err(AllocateError::Fatal(format!(
                    "claim {}: number of requested devices {min_per_claim} exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}",
                    claim_ref(claim)
                )));
            }
            let constraints = devices
                .and_then(|d| d.constraints.as_deref())
                .unwrap_or_default();
            for (i, c) in constraints.iter().enumerate() {
                let requests = c.requests.clone().unwrap_or_default();
                let constraint = match (&c.match_attribute, &c.distinct_attribute) {
                    (Some(attr), _) => Constraint::match_attribute(requests, attr.clone()),
                    (None, Some(attr)) => {
                        Constraint::distinct_attribute(requests, attr.clone(), every_device)
                    }
                    (None, None) => {
                        return Err(AllocateError::Fatal(format!(
                            "claim {}, constraint #{i}: empty constraint (unsupported constraint type?)",
                            claim_ref(claim)
                        )));
                    }
                };
                self.constraints[ci].push(constraint);
            }
        }
        Ok(())
    }

    fn validate(
        &mut self,
        ci: usize,
        req: Req<'a>,
        parent: Option<&'a str>,
    ) -> Result<RequestData<'a>, AllocateError> {
        let claim = claim_ref(&self.claims[ci]);
        let name = match parent {
            Some(p) => format!("{p}/{}", req.name),
            None => req.name.to_string(),
        };
        for (i, s) in req.selectors.iter().enumerate() {
            if s.cel.is_none() {
                return Err(AllocateError::Fatal(format!(
                    "claim {claim}, request {name}, selector #{i}: CEL expression empty (unsupported selector type?)"
                )));
            }
        }
        if req.class_name.is_empty() {
            return Err(AllocateError::Fatal(format!(
                "claim {claim}, request {name}: missing device class name (unsupported request type?)"
            )));
        }
        let class = self.alloc.classes.get(req.class_name).cloned().ok_or_else(|| {
            AllocateError::Fatal(format!(
                "claim {claim}, request {name}: could not retrieve device class {}: deviceclass.resource.k8s.io \"{}\" not found",
                req.class_name, req.class_name
            ))
        })?;
        let mut data = RequestData {
            req,
            parent,
            class,
            num_devices: 0,
            all_devices: Vec::new(),
        };
        match req.mode.unwrap_or("ExactCount") {
            "ExactCount" => {
                data.num_devices = usize::try_from(req.count.unwrap_or(1)).map_err(|_| {
                    AllocateError::Fatal(format!(
                        "claim {claim}, request {name}: exact count {} is too large",
                        req.count.unwrap_or(1)
                    ))
                })?;
            }
            "All" => self.all_devices(ci, &claim, &name, &mut data)?,
            other => {
                return Err(AllocateError::Fatal(format!(
                    "claim {claim}, request {name}: unsupported count mode {other}"
                )));
            }
        }
        Ok(data)
    }

    /// The devices an `All` request takes: every selectable one whose capacity can hold the
    /// request (from 1.37: its whole capacity; before: what is left of it).
    fn all_devices(
        &mut self,
        ci: usize,
        claim: &str,
        name: &str,
        data: &mut RequestData<'a>,
    ) -> Result<(), AllocateError> {
        // The key is only used for the match cache; "All" requests are validated before any
        // subrequest is picked, so use the position the caller will store it under.
        let key = self.next_key_for(ci, data.parent, data.req.name);
        let mut candidates = Vec::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            let pool_id = format!("{}/{}", pool.driver, pool.name);
            if pool.incomplete {
                return Err(AllocateError::Fatal(format!(
                    "claim {claim}, request {name}: asks for all devices, but resource pool {pool_id} is currently being updated"
                )));
            }
            if pool.invalid.is_some() {
                return Err(AllocateError::Fatal(format!(
                    "claim {claim}, request {name}: asks for all devices, but resource pool {pool_id} is currently invalid"
                )));
            }
            for (si, slice) in pool.slices.iter().enumerate() {
                candidates.extend((0..num_devices(slice)).map(|di| DevRef {
                    pool: pi,
                    slice: si,
                    device: di,
                }));
            }
        }
        let strict = self.alloc.behaviour.has(Change::StrictCapacity);
        for d in candidates {
            if !self.selectable(key, data, d).map_err(stop_to_error)? {
                continue;
            }
            let fits = if strict {
                let slice = self.slice(d);
                let device = device_of(&slice, d);
                let empty = BTreeMap::new();
                let caps = device.capacity.as_ref().unwrap_or(&empty);
                capacity::fits(None, data.req.capacity, caps, None, self.alloc.rules()).map_err(
                    |e| {
                        AllocateError::Fatal(format!(
                            "claim {claim}, request {name}: checking capacity for device {}: {}",
                            device.name, e.0
                        ))
                    },
                )?
            } else {
                self.capacity_fits(data.req, d).unwrap_or(false)
            };
            if fits {
                data.all_devices.push(d);
            }
        }
        data.num_devices = data.all_devices.len();
        Ok(())
    }

    /// The request key `validate` is computing data for (requests are validated in order).
    fn next_key_for(&self, ci: usize, parent: Option<&str>, name: &str) -> RequestKey {
        let requests = requests(&self.claims[ci]);
        for (ri, r) in requests.iter().enumerate() {
            match parent {
                None if r.name == name => return (ci, ri, 0),
                Some(p) if r.name == p => {
                    let si = r
                        .first_available
                        .iter()
                        .flatten()
                        .position(|s| s.name == name)
                        .unwrap_or(0);
                    return (ci, ri, si);
                }
                _ => {}
            }
        }
        (ci, usize::MAX, 0)
    }
}

fn stop_to_error(s: Stop) -> AllocateError {
    match s {
        Stop::Fatal(e) => AllocateError::Fatal(e),
        Stop::Timeout => AllocateError::Timeout,
        Stop::MaxSize => {
            AllocateError::Fatal("internal error: device limit during validation".into())
        }
    }
}
