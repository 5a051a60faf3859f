//! Whether a device may be taken for a request: not in use, selected by the class's and the
//! request's CEL selectors and by its own node selection, not tainted against the request's
//! tolerations, and with the capacity the request asks for.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceSelector, DeviceTaint, DeviceToleration};

use super::pools::node_matches;
use super::{DevRef, Req, RequestData, RequestKey, Search, Stop, capacity, claim_ref, device_of};
use crate::framework::plugins::dynamic_resources::cel::DeviceInput;
use crate::framework::plugins::dynamic_resources::tracker::DeviceId;
use crate::framework::plugins::dynamic_resources::versions::Change;

impl<'a> Search<'a> {
    pub(super) fn in_use(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.devices.contains(id)
            || self.allocating.get(id).is_some_and(|c| !c.is_empty())
    }

    pub(super) fn allocating_for_claim(&self, id: &DeviceId, claim: usize) -> bool {
        self.allocating.get(id).is_some_and(|c| c.contains(&claim))
    }

    /// Some share of the device is allocated or being allocated: its counters are charged.
    pub(super) fn capacity_in_use(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.capacity.contains_key(id)
            || self.alloc.allocated.shared.contains(id)
            || self.allocating_capacity.contains_key(id)
    }

    /// Upstream's `CmpRequestOverCapacity` for device `d`: an error only from 1.37 (before, a
    /// request that cannot be computed skipped the device).
    pub(super) fn capacity_fits(
        &self,
        req: Req<'_>,
        d: DevRef,
    ) -> Result<bool, capacity::CapacityError> {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let empty = BTreeMap::new();
        let caps = device.capacity.as_ref().unwrap_or(&empty);
        let id = self.device_id(d);
        let rules = self.alloc.rules();
        let fits = capacity::fits(
            self.alloc.allocated.capacity.get(&id),
            req.capacity,
            caps,
            self.allocating_capacity.get(&id),
            rules,
        );
        match fits {
            Err(_) if !rules.strict => Ok(false),
            other => other,
        }
    }

    pub(super) fn selectable_key(&mut self, key: RequestKey, d: DevRef) -> Result<bool, Stop> {
        if let Some(&m) = self.matches.get(&(d, key)) {
            return Ok(m);
        }
        let Some(data) = self.request_data.get(&key) else {
            return Err(Stop::Fatal("internal error: request data missing".into()));
        };
        let m = self.evaluate(key, data, d)?;
        self.matches.insert((d, key), m);
        Ok(m)
    }

    /// Upstream's `isSelectable`, for a request whose data is not stored yet.
    pub(super) fn selectable(
        &mut self,
        key: RequestKey,
        data: &RequestData<'a>,
        d: DevRef,
    ) -> Result<bool, Stop> {
        if let Some(&m) = self.matches.get(&(d, key)) {
            return Ok(m);
        }
        let m = self.evaluate(key, data, d)?;
        self.matches.insert((d, key), m);
        Ok(m)
    }

    /// Class selectors, request selectors, then the device's own node selection.
    fn evaluate(&self, key: RequestKey, data: &RequestData<'a>, d: DevRef) -> Result<bool, Stop> {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let class = &data.class;
        let class_selectors = class
            .spec
            .as_ref()
            .and_then(|s| s.selectors.as_deref())
            .unwrap_or_default();
        if !self.selectors_match(key.0, Some(class), class_selectors, d)? {
            return Ok(false);
        }
        if !self.selectors_match(key.0, None, data.req.selectors, d)? {
            return Ok(false);
        }
        if slice.spec.per_device_node_selection == Some(true)
            && !node_matches(
                self.node,
                device.node_name.as_deref(),
                device.all_nodes,
                device.node_selector.as_ref(),
            )
        {
            return Ok(false);
        }
        Ok(true)
    }

    fn selectors_match(
        &self,
        claim: usize,
        class: Option<&Arc<DeviceClass>>,
        selectors: &[DeviceSelector],
        d: DevRef,
    ) -> Result<bool, Stop> {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let driver = &self.pools[d.pool].driver;
        let input = DeviceInput {
            driver,
            allow_multiple_allocations: device.allow_multiple_allocations.unwrap_or(false),
            attributes: device.attributes.as_ref(),
            capacity: device.capacity.as_ref(),
        };
        // 1.37 names the device in runtime errors.
        let on_device = if self.alloc.behaviour.has(Change::PerRequestLimitMessage) {
            format!(" on device {}", self.device_id(d))
        } else {
            String::new()
        };
        let whose = |i: usize| match class {
            Some(c) => format!(
                "class {}: selector #{i}",
                c.metadata.name.as_deref().unwrap_or_default()
            ),
            None => format!("claim {}: selector #{i}", claim_ref(&self.claims[claim])),
        };
        for (i, selector) in selectors.iter().enumerate() {
            let Some(cel) = &selector.cel else {
                continue;
            };
            let compiled = self.alloc.cel.get_or_compile(&cel.expression);
            let program = match compiled.as_ref() {
                Ok(p) => p,
                Err(e) => return Err(Stop::Fatal(format!("{}: CEL compile error: {e}", whose(i)))),
            };
            match program.matches(&input) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(Stop::Fatal(format!(
                        "{}{on_device}: CEL runtime error: {e}",
                        whose(i)
                    )));
                }
            }
        }
        Ok(true)
    }

    /// The device's taints and those of the DeviceTaintRules selecting it: one that is
    /// `NoSchedule` or `NoExecute` and not tolerated prevents the allocation.
    pub(super) fn taint_prevents_allocation(
        &self,
        d: DevRef,
        tolerations: &[DeviceToleration],
    ) -> bool {
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let pool = &self.pools[d.pool];
        let from_rules = self
            .alloc
            .taint_rules
            .iter()
            .filter(|r| r.selects(&pool.driver, &pool.name, &device.name))
            .map(|r| &r.taint);
        device
            .taints
            .iter()
            .flatten()
            .chain(from_rules)
            .any(|taint| {
                matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
                    && !tolerations.iter().any(|t| tolerates(t, taint))
            })
    }
}

/// Upstream's `ToleratesTaint` for device taints.
fn tolerates(t: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    if t.key
        .as_deref()
        .is_some_and(|k| !k.is_empty() && k != taint.key)
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}
