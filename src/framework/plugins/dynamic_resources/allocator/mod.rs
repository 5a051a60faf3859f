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
//! - [`pools`]: the pools a node can use;
//! - [`capacity`]: consumable capacity;
//! - [`constraints`]: `matchAttribute` and `distinctAttribute`;
//! - [`results`]: the allocation results (devices, configuration, node selector).

pub(crate) mod capacity;
mod constraints;
mod pools;
mod results;

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
use self::pools::{CounterSets, Pool, node_matches};
use super::cel::{Cache, DeviceInput};
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

fn stop_to_error(s: Stop) -> AllocateError {
    match s {
        Stop::Fatal(e) => AllocateError::Fatal(e),
        Stop::Timeout => AllocateError::Timeout,
        Stop::MaxSize => {
            AllocateError::Fatal("internal error: device limit during validation".into())
        }
    }
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

    /// Upstream's validation loop in `Allocate`: request data, device counts, constraints.
    fn prepare(&mut self) -> Result<(), AllocateError> {
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

    fn num_requests(&self, ci: usize) -> usize {
        requests(&self.claims[ci]).len()
    }

    /// Upstream's `allocateOne`: true once every claim has all its devices. `start`: where the
    /// search for this request's next device begins (after its previous device).
    fn allocate_one(&mut self, r: Indices, allocating_sub: bool, start: Loc) -> Result<bool, Stop> {
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

    fn in_use(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.devices.contains(id)
            || self.allocating.get(id).is_some_and(|c| !c.is_empty())
    }

    fn allocating_for_claim(&self, id: &DeviceId, claim: usize) -> bool {
        self.allocating.get(id).is_some_and(|c| c.contains(&claim))
    }

    /// Some share of the device is allocated or being allocated: its counters are charged.
    fn capacity_in_use(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.capacity.contains_key(id)
            || self.alloc.allocated.shared.contains(id)
            || self.allocating_capacity.contains_key(id)
    }

    /// Upstream's `CmpRequestOverCapacity` for device `d`: an error only from 1.37 (before, a
    /// request that cannot be computed skipped the device).
    fn capacity_fits(&self, req: Req<'_>, d: DevRef) -> Result<bool, capacity::CapacityError> {
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

    fn selectable_key(&mut self, key: RequestKey, d: DevRef) -> Result<bool, Stop> {
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
    fn selectable(
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
    fn taint_prevents_allocation(&self, d: DevRef, tolerations: &[DeviceToleration]) -> bool {
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
    fn allocate_device(&mut self, r: Indices, d: DevRef, must: bool) -> Result<Option<Undo>, Stop> {
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
    fn rollback(&mut self, undo: Undo) {
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

#[cfg(test)]
mod tests;
