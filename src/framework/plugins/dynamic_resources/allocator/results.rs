//! The allocation result of each claim once the search found devices for all: the devices (with
//! their share, consumed capacity and binding conditions), the configuration from classes and
//! the claim, and the nodes the allocation is available on.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult, ResourceClaim,
};

use super::{Search, device_of, requests};
use crate::framework::plugins::dynamic_resources::versions::Change;

impl Search<'_> {
    /// The allocation result of each claim: devices, configuration, node selector.
    pub(super) fn build_results(&self) -> Result<Vec<AllocationResult>, String> {
        let mut out = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            let results: Vec<DeviceRequestAllocationResult> = self.results[ci]
                .iter()
                .map(|r| {
                    let pool = &self.pools[r.dev.pool];
                    let device = device_of(&pool.slices[r.dev.slice], r.dev);
                    let non_empty = |v: &Option<Vec<String>>| v.clone().filter(|c| !c.is_empty());
                    DeviceRequestAllocationResult {
                        request: r.request.clone(),
                        driver: pool.driver.clone(),
                        pool: pool.name.clone(),
                        device: device.name.clone(),
                        admin_access: r.admin_access,
                        // Only the experimental allocator (alpha DRAOptionalNodeOperations) copies it.
                        skip_node_operations: None,
                        tolerations: (!r.tolerations.is_empty()).then(|| r.tolerations.clone()),
                        share_id: r.share_id.clone(),
                        consumed_capacity: r.consumed.as_ref().map(|c| {
                            c.iter()
                                .map(|(name, a)| (name.clone(), a.to_quantity()))
                                .collect()
                        }),
                        binding_conditions: non_empty(&device.binding_conditions),
                        binding_failure_conditions: non_empty(&device.binding_failure_conditions),
                    }
                })
                .collect();
            let config = self.configs(ci, claim);
            out.push(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(results),
                    config: (!config.is_empty()).then_some(config),
                }),
                node_selector: self.node_selector(ci).map_err(|e| {
                    format!(
                        "create NodeSelector for claim {}: {e}",
                        claim.metadata.name.as_deref().unwrap_or_default()
                    )
                })?,
                allocation_timestamp: None,
            });
        }
        Ok(out)
    }

    /// The name of the subrequest picked for request `ri` of claim `ci`, if it has a list.
    fn picked_sub(&self, claim: &ResourceClaim, ci: usize, ri: usize) -> Option<String> {
        let sub = *self.selected_sub.get(&(ci, ri))?;
        let request = &requests(claim)[ri];
        let sub = request.first_available.as_ref()?.get(sub)?;
        Some(format!("{}/{}", request.name, sub.name))
    }

    /// Class configuration once per class (for every request using it), then the claim's; from
    /// 1.37 a configuration covering every request is written without `requests`.
    fn configs(&self, ci: usize, claim: &ResourceClaim) -> Vec<DeviceAllocationConfiguration> {
        let once = self.alloc.behaviour.has(Change::ConfigOnce);
        let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
        let mut class_ranges: HashMap<String, (usize, usize)> = HashMap::new();
        let requests = requests(claim);
        for ri in 0..requests.len() {
            let sub = self.selected_sub.get(&(ci, ri)).copied().unwrap_or(0);
            let Some(data) = self.request_data.get(&(ci, ri, sub)) else {
                continue;
            };
            let class_name = data.class.metadata.name.clone().unwrap_or_default();
            let request_name = data.request_name();
            if let Some(&(start, end)) = class_ranges.get(&class_name) {
                for c in &mut config[start..end] {
                    c.requests
                        .get_or_insert_with(Vec::new)
                        .push(request_name.clone());
                }
                continue;
            }
            let start = config.len();
            for c in data
                .class
                .spec
                .iter()
                .flat_map(|s| s.config.iter().flatten())
            {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClass".to_string(),
                    requests: Some(vec![request_name.clone()]),
                    opaque: c.opaque.clone(),
                });
            }
            class_ranges.insert(class_name, (start, config.len()));
        }
        let claim_configs = claim
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.config.as_deref())
            .unwrap_or_default();
        for c in claim_configs {
            let named = c.requests.as_deref().unwrap_or_default();
            let entry = || DeviceAllocationConfiguration {
                source: "FromClaim".to_string(),
                requests: c.requests.clone(),
                opaque: c.opaque.clone(),
            };
            if named.is_empty() {
                config.push(entry());
                continue;
            }
            // 1.36 copied the configuration once per request it names.
            for (ri, request) in requests.iter().enumerate() {
                let by_sub = || {
                    self.picked_sub(claim, ci, ri)
                        .is_some_and(|s| named.contains(&s))
                };
                if named.contains(&request.name) || (once && by_sub()) {
                    config.push(entry());
                    if once {
                        break;
                    }
                    continue;
                }
                if by_sub() {
                    config.push(entry());
                }
            }
        }
        if once {
            for c in &mut config {
                let covers_all = c.requests.as_ref().is_some_and(|named| {
                    !named.is_empty()
                        && requests.iter().enumerate().all(|(ri, r)| {
                            named.contains(&r.name)
                                || self
                                    .picked_sub(claim, ci, ri)
                                    .is_some_and(|s| named.contains(&s))
                        })
                });
                if covers_all {
                    c.requests = None;
                }
            }
        }
        config
    }

    /// Upstream's `createNodeSelector`: pinned to the node by a node-local device or one that
    /// binds to its node, else the requirements of the slices' (or devices') selectors, else
    /// none (available everywhere).
    fn node_selector(&self, ci: usize) -> Result<Option<NodeSelector>, String> {
        let node_name = self.node.metadata.name.as_deref().unwrap_or_default();
        let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
        let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
        for r in &self.results[ci] {
            let slice = &self.pools[r.dev.pool].slices[r.dev.slice];
            let device = device_of(slice, r.dev);
            let (local, selector) = if slice.spec.per_device_node_selection == Some(true) {
                (device.node_name.is_some(), device.node_selector.as_ref())
            } else {
                (
                    slice.spec.node_name.is_some(),
                    slice.spec.node_selector.as_ref(),
                )
            };
            if local || device.binds_to_node == Some(true) {
                return Ok(Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".to_string(),
                            operator: "In".to_string(),
                            values: Some(vec![node_name.to_string()]),
                        }]),
                        match_expressions: None,
                    }],
                }));
            }
            let Some(selector) = selector else {
                continue;
            };
            match selector.node_selector_terms.as_slice() {
                [] => {}
                [term] => {
                    add_new(
                        term.match_fields.as_deref().unwrap_or_default(),
                        &mut fields,
                    );
                    add_new(
                        term.match_expressions.as_deref().unwrap_or_default(),
                        &mut exprs,
                    );
                }
                terms => {
                    return Err(format!(
                        "unsupported ResourceSlice.NodeSelector with {} terms",
                        terms.len()
                    ));
                }
            }
        }
        if fields.is_empty() && exprs.is_empty() {
            return Ok(None);
        }
        Ok(Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_fields: (!fields.is_empty()).then_some(fields),
                match_expressions: (!exprs.is_empty()).then_some(exprs),
            }],
        }))
    }
}

fn add_new(from: &[NodeSelectorRequirement], to: &mut Vec<NodeSelectorRequirement>) {
    for r in from {
        let values: BTreeSet<&String> = r.values.iter().flatten().collect();
        let present = to.iter().any(|e| {
            e.key == r.key
                && e.operator == r.operator
                && e.values.iter().flatten().collect::<BTreeSet<_>>() == values
        });
        if !present {
            to.push(r.clone());
        }
    }
}
