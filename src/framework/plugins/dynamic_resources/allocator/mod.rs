//! The structured-parameters allocator: finds devices in a node's ResourceSlices for a pod's
//! unallocated claims, as upstream's `k8s.io/dynamic-resource-allocation/structured` does with
//! the default feature gates (its `incubating` variant).
//!
//! The search is upstream's: claims in order, requests in order, for each wanted device every
//! candidate in pool order (after the devices already taken for the same request, so each set of
//! devices is tried once), backtracking when a later device cannot be found; the first full
//! solution wins. Supported: `ExactCount` and `All` allocation modes, `firstAvailable`
//! prioritized lists, `matchAttribute` and `distinctAttribute` constraints, admin access, device
//! taints (the devices' own and those of DeviceTaintRules) and tolerations, per-device node
//! selection, class and request selectors (CEL, see [`super::cel`]), class and claim
//! configuration, the 32-devices-per-claim limit, pool generations and incomplete or invalid
//! pools, partitionable devices (counters shared in a pool), consumable capacity (devices shared
//! by several claims, each taking part of their capacity, rounded to the device's request
//! policy) and devices with binding conditions (tried last, the conditions copied to the result).
//!
//! This module holds the [`Allocator`], its inputs and the state of one search ([`Search`]); the
//! search itself is grouped by step:
//!
//! - [`prepare`]: the requests validated (classes, counts, `All` requests' devices) and the
//!   constraints built, before the search;
//! - [`backtrack`]: the search over claims, requests and devices (upstream's `allocateOne`);
//! - [`selection`]: whether a device may be taken for a request (in use, selectors, node
//!   selection, taints, capacity);
//! - [`device_allocation`]: taking one device (counters, constraints, capacity shares) and
//!   undoing it when the search backtracks;
//! - [`pools`]: the pools a node can use;
//! - [`capacity`]: consumable capacity;
//! - [`constraints`]: `matchAttribute` and `distinctAttribute`;
//! - [`results`]: the allocation results (devices, configuration, node selector).

mod backtrack;
pub(crate) mod capacity;
mod constraints;
mod device_allocation;
mod pools;
mod prepare;
mod results;
mod selection;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    AllocationResult, CapacityRequirements, Device, DeviceClass, DeviceSelector, DeviceSubRequest,
    DeviceTaint, DeviceTaintRule, DeviceToleration, ExactDeviceRequest, ResourceClaim,
    ResourceSlice,
};

use self::capacity::{Amount, Consumed, Rules};
use self::constraints::Constraint;
use self::pools::{CounterSets, Pool};
use super::cel::Cache;
use super::tracker::DeviceId;
use super::versions::{Behaviour, Change};

/// The claim's device requests.
pub(crate) fn requests(claim: &ResourceClaim) -> &[k8s_openapi::api::resource::v1::DeviceRequest] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default()
}

/// Upstream's `resourceapi.AllocationResultsMaxSize`.
pub(crate) const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// Why allocation stopped short of a yes or no for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllocateError {
    /// Something is wrong with a claim or class (a CEL error, a missing class): upstream aborts
    /// the scheduling attempt with an error.
    Fatal(String),
    /// Only this node is affected (its pools are invalid): unschedulable on it.
    Node(String),
    /// `filterTimeout` passed.
    Timeout,
}

/// The devices already taken when a pod's cycle starts (upstream's `AllocatedState`): devices
/// allocated to one claim, devices shared by several (consumable capacity) and the capacity
/// their shares consume.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AllocatedState {
    pub devices: HashSet<DeviceId>,
    /// Devices with at least one share allocated.
    pub shared: HashSet<DeviceId>,
    /// The capacity the shares of each device consume together.
    pub capacity: HashMap<DeviceId, Consumed>,
}

impl AllocatedState {
    /// The devices `claims` are allocated, except those with admin access (upstream's
    /// `foreachAllocatedDevice` over the assume cache and the allocations in flight).
    pub(crate) fn of(claims: &[Arc<ResourceClaim>]) -> AllocatedState {
        let mut state = AllocatedState::default();
        for claim in claims {
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref());
            for r in results.into_iter().flatten() {
                if r.admin_access == Some(true) {
                    continue;
                }
                let id = DeviceId::new(&r.driver, &r.pool, &r.device);
                if r.share_id.is_none() {
                    state.devices.insert(id);
                    continue;
                }
                if let Some(consumed) = &r.consumed_capacity {
                    let nanos = consumed
                        .iter()
                        .map(|(name, q)| (name.clone(), Amount::of(q).nanos))
                        .collect();
                    capacity::add(state.capacity.entry(id.clone()).or_default(), &nanos);
                }
                state.shared.insert(id);
            }
        }
        state
    }

    /// Upstream's `IsDeviceAllocated`: taken whole or in part.
    fn is_allocated(&self, id: &DeviceId) -> bool {
        self.devices.contains(id) || self.shared.contains(id) || self.capacity.contains_key(id)
    }
}

/// A DeviceTaintRule: its taint applies to every device its selector names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaintRule {
    pub driver: Option<String>,
    pub pool: Option<String>,
    pub device: Option<String>,
    pub taint: DeviceTaint,
}

impl TaintRule {
    /// The rule's selector and taint; `None` for a rule without a selector, which upstream's
    /// slice tracker applies to no device.
    pub(crate) fn of(rule: &DeviceTaintRule) -> Option<TaintRule> {
        let selector = rule.spec.device_selector.as_ref()?;
        Some(TaintRule {
            driver: selector.driver.clone(),
            pool: selector.pool.clone(),
            device: selector.device.clone(),
            taint: rule.spec.taint.clone(),
        })
    }

    fn selects(&self, driver: &str, pool: &str, device: &str) -> bool {
        self.driver.as_deref().is_none_or(|d| d == driver)
            && self.pool.as_deref().is_none_or(|p| p == pool)
            && self.device.as_deref().is_none_or(|d| d == device)
    }
}

/// Everything known about devices at the start of a pod's scheduling cycle: the slices, the
/// classes, the taint rules and what is allocated (or in flight). Shared by the pod's Filter
/// calls.
pub(crate) struct Allocator {
    allocated: AllocatedState,
    classes: HashMap<String, Arc<DeviceClass>>,
    /// Slices published for one node, by node name.
    on_node: HashMap<String, Vec<Arc<ResourceSlice>>>,
    /// Slices for all nodes, for nodes matching a selector or per device.
    shared: Vec<Arc<ResourceSlice>>,
    /// Every slice of a pool, by (driver, pool).
    by_pool: HashMap<(String, String), Vec<Arc<ResourceSlice>>>,
    taint_rules: Vec<TaintRule>,
    cel: Arc<Cache>,
    timeout: Option<Duration>,
    behaviour: Behaviour,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("allocated", &self.allocated.devices.len())
            .field("pools", &self.by_pool.len())
            .finish_non_exhaustive()
    }
}

/// The inputs of [`Allocator::new`] besides the slices.
pub(crate) struct Inputs {
    pub allocated: AllocatedState,
    pub classes: HashMap<String, Arc<DeviceClass>>,
    pub taint_rules: Vec<TaintRule>,
    pub cel: Arc<Cache>,
    pub timeout: Option<Duration>,
    pub behaviour: Behaviour,
}

impl Allocator {
    pub(crate) fn new(inputs: Inputs, mut slices: Vec<Arc<ResourceSlice>>) -> Allocator {
        // A stable order (upstream's is its informer's).
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut on_node: HashMap<String, Vec<Arc<ResourceSlice>>> = HashMap::new();
        let mut shared = Vec::new();
        let mut by_pool: HashMap<(String, String), Vec<Arc<ResourceSlice>>> = HashMap::new();
        for s in slices {
            by_pool
                .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
                .or_default()
                .push(s.clone());
            match s.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(n) => on_node.entry(n.to_string()).or_default().push(s),
                None => shared.push(s),
            }
        }
        Allocator {
            allocated: inputs.allocated,
            classes: inputs.classes,
            on_node,
            shared,
            by_pool,
            taint_rules: if inputs.behaviour.has(Change::DeviceTaintRules) {
                inputs.taint_rules
            } else {
                Vec::new()
            },
            cel: inputs.cel,
            timeout: inputs.timeout,
            behaviour: inputs.behaviour,
        }
    }

    fn rules(&self) -> Rules {
        Rules {
            fractional: self.behaviour.has(Change::FractionalCapacityRange),
            strict: self.behaviour.has(Change::StrictCapacity),
        }
    }

    /// Allocates `claims` (all unallocated) for `node`: one result per claim, or `None` when
    /// they cannot all be allocated there.
    pub(crate) fn allocate(
        &self,
        node: &Node,
        claims: &[Arc<ResourceClaim>],
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let candidates = self
            .on_node
            .get(node_name)
            .into_iter()
            .flatten()
            .chain(&self.shared);
        let pools = pools::gather(node, candidates, &self.by_pool);
        let mut search = Search {
            alloc: self,
            node,
            claims,
            pools,
            request_data: HashMap::new(),
            selected_sub: HashMap::new(),
            constraints: vec![Vec::new(); claims.len()],
            allocating: HashMap::new(),
            allocating_capacity: HashMap::new(),
            available_counters: HashMap::new(),
            consumed_counters: HashMap::new(),
            results: vec![Vec::new(); claims.len()],
            matches: HashMap::new(),
            deadline: self.timeout.map(|t| Instant::now() + t),
        };
        search.prepare()?;
        let done = match search.allocate_one(Indices::default(), false, Loc::default()) {
            Ok(done) => done,
            Err(Stop::MaxSize) => false,
            Err(Stop::Fatal(e)) => return Err(AllocateError::Fatal(e)),
            Err(Stop::Timeout) => return Err(AllocateError::Timeout),
        };
        if !done {
            if search.pools.iter().any(|p| p.invalid.is_some()) {
                return Err(AllocateError::Node(
                    "invalid resource pools were encountered".to_string(),
                ));
            }
            return Ok(None);
        }
        search
            .build_results()
            .map(Some)
            .map_err(AllocateError::Fatal)
    }
}

/// A device in the pools gathered for the node: pool, slice, device indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct DevRef {
    pool: usize,
    slice: usize,
    device: usize,
}

/// Where the search for the next device of a request starts: after the previous one.
type Loc = DevRef;

/// A request or one subrequest of a `firstAvailable` list.
#[derive(Debug, Clone, Copy)]
struct Req<'a> {
    name: &'a str,
    class_name: &'a str,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin_access: Option<bool>,
    selectors: &'a [DeviceSelector],
    tolerations: &'a [DeviceToleration],
    capacity: Option<&'a CapacityRequirements>,
}

impl<'a> Req<'a> {
    fn exact(name: &'a str, r: &'a ExactDeviceRequest) -> Req<'a> {
        Req {
            name,
            class_name: &r.device_class_name,
            mode: r.allocation_mode.as_deref(),
            count: r.count,
            admin_access: r.admin_access,
            selectors: r.selectors.as_deref().unwrap_or_default(),
            tolerations: r.tolerations.as_deref().unwrap_or_default(),
            capacity: r.capacity.as_ref(),
        }
    }

    fn sub(r: &'a DeviceSubRequest) -> Req<'a> {
        Req {
            name: &r.name,
            class_name: &r.device_class_name,
            mode: r.allocation_mode.as_deref(),
            count: r.count,
            admin_access: None,
            selectors: r.selectors.as_deref().unwrap_or_default(),
            tolerations: r.tolerations.as_deref().unwrap_or_default(),
            capacity: r.capacity.as_ref(),
        }
    }

    fn admin(&self) -> bool {
        self.admin_access == Some(true)
    }

    fn all(&self) -> bool {
        self.mode == Some("All")
    }
}

/// (claim, request, subrequest)
type RequestKey = (usize, usize, usize);

#[derive(Debug, Clone, Copy, Default)]
struct Indices {
    claim: usize,
    request: usize,
    sub: usize,
    device: usize,
}

impl Indices {
    fn key(&self) -> RequestKey {
        (self.claim, self.request, self.sub)
    }
}

struct RequestData<'a> {
    req: Req<'a>,
    parent: Option<&'a str>,
    class: Arc<DeviceClass>,
    num_devices: usize,
    all_devices: Vec<DevRef>,
}

impl RequestData<'_> {
    fn request_name(&self) -> String {
        match self.parent {
            Some(p) => format!("{p}/{}", self.req.name),
            None => self.req.name.to_string(),
        }
    }
}

/// A device picked for a request.
#[derive(Debug, Clone)]
struct DeviceResult {
    request: String,
    dev: DevRef,
    admin_access: Option<bool>,
    tolerations: Vec<DeviceToleration>,
    share_id: Option<String>,
    consumed: Option<BTreeMap<String, Amount>>,
}

enum Stop {
    /// The claim's device limit would be exceeded: try other subrequests.
    MaxSize,
    Fatal(String),
    Timeout,
}

/// What a device allocation changed, to undo it when backtracking.
struct Undo {
    claim: usize,
    id: DeviceId,
    dev: DevRef,
    base_request: String,
    sub_request: Option<String>,
    counters_reserved: bool,
    constraints_added: usize,
    device_marked: bool,
    /// The capacity this share added, and whether the device had an entry before.
    capacity: Option<(Consumed, bool)>,
    previous_results: usize,
}

/// One `allocate` call: single-threaded, mutable.
struct Search<'a> {
    alloc: &'a Allocator,
    node: &'a Node,
    claims: &'a [Arc<ResourceClaim>],
    pools: Vec<Pool>,
    request_data: HashMap<RequestKey, RequestData<'a>>,
    /// The subrequest picked for a `firstAvailable` request: (claim, request) -> subrequest.
    selected_sub: HashMap<(usize, usize), usize>,
    constraints: Vec<Vec<Constraint>>,
    /// Devices being allocated whole in this search, and for which claims.
    allocating: HashMap<DeviceId, BTreeSet<usize>>,
    /// Capacity of shared devices being allocated in this search.
    allocating_capacity: HashMap<DeviceId, Consumed>,
    /// Per pool: its counters less what allocated devices consume (computed when first needed).
    available_counters: HashMap<usize, CounterSets>,
    /// Per pool: what the devices being allocated consume.
    consumed_counters: HashMap<usize, CounterSets>,
    results: Vec<Vec<DeviceResult>>,
    matches: HashMap<(DevRef, RequestKey), bool>,
    deadline: Option<Instant>,
}

fn claim_ref(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Device `d` of `slice` (the indices come from the slice itself).
fn device_of(slice: &ResourceSlice, d: DevRef) -> &Device {
    &slice.spec.devices.as_deref().unwrap_or_default()[d.device]
}

fn num_devices(slice: &ResourceSlice) -> usize {
    slice.spec.devices.as_ref().map_or(0, Vec::len)
}

impl<'a> Search<'a> {
    /// The slice holding `d`: an `Arc`, so the device can be read while the search changes.
    fn slice(&self, d: DevRef) -> Arc<ResourceSlice> {
        self.pools[d.pool].slices[d.slice].clone()
    }

    fn device_id(&self, d: DevRef) -> DeviceId {
        let pool = &self.pools[d.pool];
        DeviceId::new(
            &pool.driver,
            &pool.name,
            &device_of(&pool.slices[d.slice], d).name,
        )
    }
}

#[cfg(test)]
mod tests;
