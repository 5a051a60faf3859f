//! The resource pools a node can use (upstream's `pools_incubating.go`): the newest generation of
//! each pool with devices for the node, marked incomplete (not all its slices seen) or invalid
//! (duplicate device or counter set names, consumption of counters that do not exist), with the
//! pool's counter sets and the devices elsewhere that consume them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelector};
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::capacity::Amount;
use crate::framework::plugins::helper::node_selector_terms_match;

/// Counter values per counter set, per counter (nano-units).
pub(super) type CounterSets = HashMap<String, BTreeMap<String, i128>>;

#[derive(Debug, Default)]
pub(super) struct Pool {
    pub driver: String,
    pub name: String,
    pub incomplete: bool,
    pub invalid: Option<String>,
    /// Slices with devices for the node, by name.
    pub slices: Vec<Arc<ResourceSlice>>,
    /// The pool's other device slices: their allocated devices consume counters too.
    pub elsewhere: Vec<Arc<ResourceSlice>>,
    pub counter_sets: CounterSets,
    /// Some device for the node has binding conditions: such pools are tried last.
    pub binding_conditions: bool,
}

/// Upstream's `NodeMatches` for a slice's or device's node selection.
pub(super) fn node_matches(
    node: &Node,
    node_name: Option<&str>,
    all_nodes: Option<bool>,
    selector: Option<&NodeSelector>,
) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match (node_name, all_nodes, selector) {
        (Some(n), _, _) if !n.is_empty() => n == name,
        (_, Some(true), _) => true,
        (_, _, Some(sel)) => node_selector_terms_match(
            &sel.node_selector_terms,
            node.metadata.labels.as_ref(),
            name,
        ),
        _ => false,
    }
}

fn has_counters(s: &ResourceSlice) -> bool {
    s.spec
        .shared_counters
        .as_ref()
        .is_some_and(|c| !c.is_empty())
}

/// Whether the slice has devices (or counters) for `node`.
fn relevant(slice: &ResourceSlice, node: &Node) -> bool {
    let spec = &slice.spec;
    let node_name = spec.node_name.as_deref().filter(|n| !n.is_empty());
    if node_name.is_some() || spec.all_nodes == Some(true) || spec.node_selector.is_some() {
        return node_matches(node, node_name, spec.all_nodes, spec.node_selector.as_ref());
    }
    if spec.per_device_node_selection == Some(true) {
        return spec.devices.iter().flatten().any(|d| {
            node_matches(
                node,
                d.node_name.as_deref(),
                d.all_nodes,
                d.node_selector.as_ref(),
            )
        });
    }
    // Some future way of selecting nodes: not for us.
    false
}

/// Upstream's `GatherPools` over `candidates` (the node's own slices, then those not bound to
/// one node); `all` holds every slice, for the pools whose slices are not all relevant here.
pub(super) fn gather<'a>(
    node: &Node,
    candidates: impl Iterator<Item = &'a Arc<ResourceSlice>>,
    all: &HashMap<(String, String), Vec<Arc<ResourceSlice>>>,
) -> Vec<Pool> {
    let mut found: HashMap<(String, String), Vec<Arc<ResourceSlice>>> = HashMap::new();
    for slice in candidates {
        if !relevant(slice, node) {
            continue;
        }
        let spec = &slice.spec;
        let slices = found
            .entry((spec.driver.clone(), spec.pool.name.clone()))
            .or_default();
        match slices.first().map(|f| f.spec.pool.generation) {
            Some(g) if spec.pool.generation < g => {}
            Some(g) if spec.pool.generation > g => *slices = vec![slice.clone()],
            _ => slices.push(slice.clone()),
        }
    }
    let mut pools = Vec::with_capacity(found.len());
    for (id, slices) in found {
        let pool = &slices[0].spec.pool;
        if slices.len() as i64 == pool.resource_slice_count {
            pools.push(build(id, slices, &[]));
            continue;
        }
        // Slices not relevant here still count; a newer generation anywhere makes this one
        // obsolete.
        let of_pool = all.get(&id).map(Vec::as_slice).unwrap_or_default();
        if of_pool
            .iter()
            .any(|s| s.spec.pool.generation > pool.generation)
        {
            continue;
        }
        let same: Vec<Arc<ResourceSlice>> = of_pool
            .iter()
            .filter(|s| s.spec.pool.generation == pool.generation)
            .cloned()
            .collect();
        if same.len() as i64 != pool.resource_slice_count {
            pools.push(Pool {
                driver: id.0,
                name: id.1,
                incomplete: true,
                ..Pool::default()
            });
            continue;
        }
        pools.push(build(id, slices, &same));
    }
    // A stable order (drivers name their pools to be preferred), pools whose devices have
    // binding conditions last.
    pools.sort_by(|a, b| {
        (a.binding_conditions, &a.driver, &a.name).cmp(&(b.binding_conditions, &b.driver, &b.name))
    });
    pools
}

/// Upstream's `buildPool`: `slices` are relevant for the node, `all` the whole pool when some
/// slices are not.
fn build(
    id: (String, String),
    mut slices: Vec<Arc<ResourceSlice>>,
    all: &[Arc<ResourceSlice>],
) -> Pool {
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let here: HashSet<Option<&str>> = slices.iter().map(|s| s.metadata.name.as_deref()).collect();
    let (counter_slices, device_slices): (Vec<_>, Vec<_>) =
        slices.iter().cloned().partition(|s| has_counters(s));
    let mut counter_slices = counter_slices;
    let mut elsewhere = Vec::new();
    for s in all
        .iter()
        .filter(|s| !here.contains(&s.metadata.name.as_deref()))
    {
        if has_counters(s) {
            counter_slices.push(s.clone());
        } else {
            elsewhere.push(s.clone());
        }
    }
    let mut pool = Pool {
        driver: id.0,
        name: id.1,
        ..Pool::default()
    };
    let invalid = duplicate_device_name(&device_slices)
        .or_else(|| counter_sets(&counter_slices).err())
        .or_else(|| {
            let sets = counter_sets(&counter_slices).unwrap_or_default();
            consumption_error(&sets, &device_slices)
                .or_else(|| consumption_error(&sets, &elsewhere))
        });
    if let Some(reason) = invalid {
        pool.invalid = Some(reason);
        return pool;
    }
    pool.counter_sets = counter_sets(&counter_slices).unwrap_or_default();
    pool.binding_conditions = device_slices.iter().any(|s| {
        s.spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()))
    });
    pool.slices = device_slices;
    pool.elsewhere = elsewhere;
    pool
}

fn duplicate_device_name(slices: &[Arc<ResourceSlice>]) -> Option<String> {
    let mut names = HashSet::new();
    slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find(|d| !names.insert(d.name.as_str()))
        .map(|d| format!("duplicate device name {}", d.name))
}

/// Upstream's `getAndValidateCounterSets`.
fn counter_sets(slices: &[Arc<ResourceSlice>]) -> Result<CounterSets, String> {
    let mut sets = CounterSets::new();
    for set in slices
        .iter()
        .flat_map(|s| s.spec.shared_counters.iter().flatten())
    {
        if sets.contains_key(&set.name) {
            return Err(format!("duplicate counter set name {}", set.name));
        }
        let counters = set
            .counters
            .iter()
            .map(|(name, c)| (name.clone(), Amount::of(&c.value).nanos))
            .collect();
        sets.insert(set.name.clone(), counters);
    }
    Ok(sets)
}

/// Upstream's `validateDeviceCounterConsumption`: every consumed counter exists.
fn consumption_error(sets: &CounterSets, slices: &[Arc<ResourceSlice>]) -> Option<String> {
    let devices = slices.iter().flat_map(|s| s.spec.devices.iter().flatten());
    for consumption in devices.flat_map(|d| d.consumes_counters.iter().flatten()) {
        let Some(set) = sets.get(&consumption.counter_set) else {
            return Some(format!("counter set {} not found", consumption.counter_set));
        };
        if let Some(name) = consumption.counters.keys().find(|n| !set.contains_key(*n)) {
            return Some(format!(
                "counter {name} not found in counter set {}",
                consumption.counter_set
            ));
        }
    }
    None
}
