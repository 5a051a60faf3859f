//! The structured-parameters allocator: finds devices in a node's ResourceSlices for a pod's
//! unallocated claims, as upstream's `k8s.io/dynamic-resource-allocation/structured` does.
//!
//! The search is upstream's: claims in order, requests in order, for each wanted device every
//! candidate in pool order, backtracking when a later device cannot be found; the first full
//! solution wins. Supported: `ExactCount` and `All` allocation modes, `firstAvailable`
//! prioritized lists, `matchAttribute` constraints, admin access, device taints and tolerations,
//! per-device node selection, class and request selectors (CEL, see [`super::cel`]), class and
//! claim configuration, the 32-devices-per-claim limit, pool generations and incomplete or invalid
//! pools. Devices that need a feature ksched does not implement (partitionable devices that
//! consume counters, consumable capacity, binding conditions) are never allocated; when such a
//! device would have been a candidate, [`Outcome::unsupported`] names the feature.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, Device, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceAttribute, DeviceClass, DeviceRequestAllocationResult, DeviceSelector, DeviceSubRequest,
    DeviceTaint, DeviceToleration, ExactDeviceRequest, ResourceClaim, ResourceSlice,
};

use super::cel::{Cache, DeviceInput};
use super::claims::requests;
use super::tracker::DeviceId;
use crate::framework::plugins::helper::node_selector_terms_match;

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

/// The allocator's answer for one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    /// One allocation per claim, in order; `None` when the claims cannot all be allocated here.
    pub results: Option<Vec<AllocationResult>>,
    /// A feature ksched does not implement that a matching device needs.
    pub unsupported: Option<String>,
}

/// Everything known about devices at the start of a pod's scheduling cycle: the slices, the
/// classes and the devices already allocated (or in flight). Shared by the pod's Filter calls.
pub(crate) struct Allocator {
    allocated: HashSet<DeviceId>,
    classes: HashMap<String, Arc<DeviceClass>>,
    slices: Vec<Arc<ResourceSlice>>,
    /// Slices published for one node, by node name.
    by_node: HashMap<String, Vec<usize>>,
    /// Slices for all nodes, for nodes matching a selector, per device, or with counters.
    elsewhere: Vec<usize>,
    /// Every slice of a pool, by (driver, pool).
    by_pool: HashMap<(String, String), Vec<usize>>,
    cel: Arc<Cache>,
    timeout: Option<Duration>,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("allocated", &self.allocated.len())
            .field("slices", &self.slices.len())
            .finish_non_exhaustive()
    }
}

impl Allocator {
    pub(crate) fn new(
        allocated: HashSet<DeviceId>,
        classes: HashMap<String, Arc<DeviceClass>>,
        mut slices: Vec<Arc<ResourceSlice>>,
        cel: Arc<Cache>,
        timeout: Option<Duration>,
    ) -> Allocator {
        // A stable order: pools and slices by name (upstream's order is its informer's).
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut by_node: HashMap<String, Vec<usize>> = HashMap::new();
        let mut elsewhere = Vec::new();
        let mut by_pool: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, s) in slices.iter().enumerate() {
            let spec = &s.spec;
            by_pool
                .entry((spec.driver.clone(), spec.pool.name.clone()))
                .or_default()
                .push(i);
            match spec.node_name.as_deref() {
                Some(n) if !n.is_empty() && spec.shared_counters.is_none() => {
                    by_node.entry(n.to_string()).or_default().push(i)
                }
                _ => elsewhere.push(i),
            }
        }
        Allocator {
            allocated,
            classes,
            slices,
            by_node,
            elsewhere,
            by_pool,
            cel,
            timeout,
        }
    }

    /// Allocates `claims` (all unallocated) for `node`.
    pub(crate) fn allocate(
        &self,
        node: &Node,
        claims: &[Arc<ResourceClaim>],
    ) -> Result<Outcome, AllocateError> {
        let pools = self.gather_pools(node);
        let mut search = Search {
            alloc: self,
            node,
            claims,
            pools,
            request_data: HashMap::new(),
            selected_sub: HashMap::new(),
            constraints: vec![Vec::new(); claims.len()],
            allocating: HashMap::new(),
            results: vec![Vec::new(); claims.len()],
            matches: HashMap::new(),
            deadline: self.timeout.map(|t| Instant::now() + t),
            unsupported: None,
        };
        search.prepare()?;
        let done = match search.allocate_one(Indices::default(), false) {
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
            return Ok(Outcome {
                results: None,
                unsupported: search.unsupported,
            });
        }
        let results = search.build_results().map_err(AllocateError::Fatal)?;
        Ok(Outcome {
            results: Some(results),
            unsupported: None,
        })
    }

    /// Upstream's `GatherPools`: the pools with devices `node` can use, newest generation only.
    fn gather_pools(&self, node: &Node) -> Vec<Pool> {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let mut pools: HashMap<(String, String), Vec<usize>> = HashMap::new();
        let candidates = self
            .by_node
            .get(node_name)
            .into_iter()
            .flatten()
            .chain(&self.elsewhere);
        for &i in candidates {
            let spec = &self.slices[i].spec;
            let relevant = if spec.shared_counters.as_ref().is_some_and(|c| !c.is_empty()) {
                // Counter sets belong to the whole pool, whichever node its devices are on.
                true
            } else if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
                || spec.all_nodes == Some(true)
                || spec.node_selector.is_some()
            {
                node_matches(
                    node,
                    spec.node_name.as_deref(),
                    spec.all_nodes,
                    spec.node_selector.as_ref(),
                )
            } else if spec.per_device_node_selection == Some(true) {
                spec.devices.iter().flatten().any(|d| {
                    node_matches(
                        node,
                        d.node_name.as_deref(),
                        d.all_nodes,
                        d.node_selector.as_ref(),
                    )
                })
            } else {
                // Some future way of selecting nodes: not for us.
                false
            };
            if !relevant {
                continue;
            }
            let slices = pools
                .entry((spec.driver.clone(), spec.pool.name.clone()))
                .or_default();
            match slices.first().map(|&f| self.slices[f].spec.pool.generation) {
                Some(g) if spec.pool.generation < g => {}
                Some(g) if spec.pool.generation > g => *slices = vec![i],
                _ => slices.push(i),
            }
        }
        let mut ids: Vec<(String, String)> = pools.keys().cloned().collect();
        ids.sort();
        let mut result = Vec::new();
        for id in ids {
            let slices = pools.remove(&id).unwrap_or_default();
            let Some(&first) = slices.first() else {
                continue;
            };
            let pool_spec = &self.slices[first].spec.pool;
            let mut complete = slices.len() as i64 == pool_spec.resource_slice_count;
            if !complete {
                // Slices not for this node still count; a newer generation anywhere makes this
                // one obsolete.
                let all = self.by_pool.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                if all
                    .iter()
                    .any(|&i| self.slices[i].spec.pool.generation > pool_spec.generation)
                {
                    continue;
                }
                let same = all
                    .iter()
                    .filter(|&&i| self.slices[i].spec.pool.generation == pool_spec.generation)
                    .count();
                complete = same as i64 == pool_spec.resource_slice_count;
            }
            let device_slices: Vec<Arc<ResourceSlice>> = slices
                .iter()
                .filter(|&&i| {
                    self.slices[i]
                        .spec
                        .shared_counters
                        .as_ref()
                        .is_none_or(|c| c.is_empty())
                })
                .map(|&i| self.slices[i].clone())
                .collect();
            let invalid = if complete {
                duplicate_device_name(&device_slices)
            } else {
                None
            };
            result.push(Pool {
                driver: id.0,
                name: id.1,
                incomplete: !complete,
                invalid,
                slices: if complete { device_slices } else { Vec::new() },
            });
        }
        result
    }
}

fn duplicate_device_name(slices: &[Arc<ResourceSlice>]) -> Option<String> {
    let mut names = HashSet::new();
    for d in slices.iter().flat_map(|s| s.spec.devices.iter().flatten()) {
        if !names.insert(d.name.as_str()) {
            return Some(format!("duplicate device name {}", d.name));
        }
    }
    None
}

/// Upstream's `NodeMatches` for a slice's or device's node selection.
fn node_matches(
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

#[derive(Debug)]
struct Pool {
    driver: String,
    name: String,
    incomplete: bool,
    invalid: Option<String>,
    slices: Vec<Arc<ResourceSlice>>,
}

/// A device in the pools gathered for the node: pool, slice, device indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DevRef {
    pool: usize,
    slice: usize,
    device: usize,
}

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

#[derive(Debug, Clone)]
struct DeviceResult {
    request: String,
    dev: DevRef,
    admin_access: Option<bool>,
    tolerations: Vec<DeviceToleration>,
}

/// `matchAttribute`: all devices of the named requests (all requests when none is named) have the
/// same value of the attribute.
#[derive(Debug, Clone)]
struct MatchAttribute {
    requests: Vec<String>,
    attribute: String,
    value: Option<DeviceAttribute>,
    count: usize,
}

impl MatchAttribute {
    fn applies(&self, request: &str, sub: Option<&str>) -> bool {
        if self.requests.is_empty() {
            return true;
        }
        self.requests
            .iter()
            .any(|r| r == request || sub.is_some_and(|s| r.split_once('/') == Some((request, s))))
    }

    fn add(&mut self, request: &str, sub: Option<&str>, device: &Device, driver: &str) -> bool {
        if !self.applies(request, sub) {
            return true;
        }
        let Some(attr) = lookup_attribute(device, driver, &self.attribute) else {
            return false;
        };
        if self.count == 0 {
            self.value = Some(attr.clone());
            self.count = 1;
            return true;
        }
        let Some(first) = &self.value else {
            return false;
        };
        let same = if attr.string.is_some() {
            attr.string == first.string
        } else if attr.int.is_some() {
            attr.int == first.int
        } else if attr.bool.is_some() {
            attr.bool == first.bool
        } else if attr.version.is_some() {
            // semver's minimal form makes string equality exact equality.
            attr.version == first.version
        } else {
            false
        };
        if same {
            self.count += 1;
        }
        same
    }

    fn remove(&mut self, request: &str, sub: Option<&str>) {
        if self.applies(request, sub) {
            self.count = self.count.saturating_sub(1);
        }
    }
}

/// Upstream's `lookupAttribute`: the fully qualified name, or the id alone when the domain is
/// the driver's.
fn lookup_attribute<'d>(
    device: &'d Device,
    driver: &str,
    name: &str,
) -> Option<&'d DeviceAttribute> {
    let attrs = device.attributes.as_ref()?;
    if let Some(a) = attrs.get(name) {
        return Some(a);
    }
    let (domain, id) = name.split_once('/')?;
    if domain != driver {
        return None;
    }
    attrs.get(id)
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

fn taint_prevents_allocation(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().flatten().any(|taint| {
        matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

/// A device feature ksched does not implement, if the device needs one.
fn unsupported_feature(device: &Device) -> Option<&'static str> {
    if device
        .consumes_counters
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        Some("partitionable devices (consumesCounters)")
    } else if device.allow_multiple_allocations == Some(true) {
        Some("consumable capacity (allowMultipleAllocations)")
    } else if device
        .binding_conditions
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        Some("device binding conditions (bindingConditions)")
    } else {
        None
    }
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
    base_request: String,
    sub_request: Option<String>,
    constraints_added: usize,
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
    constraints: Vec<Vec<MatchAttribute>>,
    /// Devices being allocated in this search, and for which claims.
    allocating: HashMap<DeviceId, BTreeSet<usize>>,
    results: Vec<Vec<DeviceResult>>,
    matches: HashMap<(DevRef, RequestKey), bool>,
    deadline: Option<Instant>,
    unsupported: Option<String>,
}

fn claim_ref(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
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
        for (ci, claim) in self.claims.iter().enumerate() {
            let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
            let requests = requests(claim);
            let mut min_per_claim = 0usize;
            for (ri, request) in requests.iter().enumerate() {
                match (&request.exactly, request.first_available.as_deref()) {
                    (_, Some(subs)) if !subs.is_empty() => {
                        let mut min = usize::MAX;
                        for (si, sub) in subs.iter().enumerate() {
                            let data = self.validate(ci, Req::sub(sub), Some(&request.name))?;
                            min = min.min(data.num_devices);
                            self.request_data.insert((ci, ri, si), data);
                        }
                        min_per_claim += min;
                    }
                    (Some(exact), _) => {
                        let data = self.validate(ci, Req::exact(&request.name, exact), None)?;
                        min_per_claim += data.num_devices;
                        self.request_data.insert((ci, ri, 0), data);
                    }
                    _ => {
                        return Err(AllocateError::Fatal(format!(
                            "claim {}, request {}: unknown request type",
                            claim_ref(claim),
                            request.name
                        )));
                    }
                }
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
                let Some(attr) = &c.match_attribute else {
                    return Err(AllocateError::Fatal(format!(
                        "claim {}, constraint #{i}: empty constraint (unsupported constraint type?)",
                        claim_ref(claim)
                    )));
                };
                self.constraints[ci].push(MatchAttribute {
                    requests: c.requests.clone().unwrap_or_default(),
                    attribute: attr.clone(),
                    value: None,
                    count: 0,
                });
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
            "All" => {
                // The key is only used for the match cache; "All" requests are validated before
                // any subrequest is picked, so use the position the caller will store it under.
                let key = self.next_key_for(ci, parent, req.name);
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
                        let n = slice.spec.devices.as_ref().map_or(0, Vec::len);
                        candidates.extend((0..n).map(|di| DevRef {
                            pool: pi,
                            slice: si,
                            device: di,
                        }));
                    }
                }
                for d in candidates {
                    if self.selectable(key, &data, d).map_err(stop_to_error)? {
                        data.all_devices.push(d);
                    }
                }
                data.num_devices = data.all_devices.len();
            }
            other => {
                return Err(AllocateError::Fatal(format!(
                    "claim {claim}, request {name}: unsupported count mode {other}"
                )));
            }
        }
        Ok(data)
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

    /// Upstream's `allocateOne`: true once every claim has all its devices.
    fn allocate_one(&mut self, r: Indices, allocating_sub: bool) -> Result<bool, Stop> {
        if self.deadline.is_some_and(|d| Instant::now() > d) {
            return Err(Stop::Timeout);
        }
        if r.claim >= self.claims.len() {
            return Ok(true);
        }
        if r.request >= self.num_requests(r.claim) {
            return match self.allocate_one(
                Indices {
                    claim: r.claim + 1,
                    ..Indices::default()
                },
                false,
            ) {
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            };
        }
        let Some(data) = self.request_data.get(&r.key()) else {
            return Err(Stop::Fatal("internal error: request data missing".into()));
        };
        let (is_sub, all, num_devices, admin) = (
            data.parent.is_some(),
            data.req.all(),
            data.num_devices,
            data.req.admin(),
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
                match self.allocate_one(Indices { sub, ..r }, true) {
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
        if all && num_devices == 0 {
            return Ok(false);
        }
        if r.device >= num_devices {
            return self.allocate_one(
                Indices {
                    claim: r.claim,
                    request: r.request + 1,
                    ..Indices::default()
                },
                false,
            );
        }
        if self.results[r.claim].len() + num_devices - r.device > ALLOCATION_RESULTS_MAX_SIZE {
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
            return match self.allocate_one(next, allocating_sub) {
                Ok(true) => Ok(true),
                other => {
                    self.deallocate(undo);
                    other
                }
            };
        }
        for pi in 0..self.pools.len() {
            if self.pools[pi].incomplete || self.pools[pi].invalid.is_some() {
                continue;
            }
            for si in 0..self.pools[pi].slices.len() {
                let n = self.pools[pi].slices[si]
                    .spec
                    .devices
                    .as_ref()
                    .map_or(0, Vec::len);
                for di in 0..n {
                    let d = DevRef {
                        pool: pi,
                        slice: si,
                        device: di,
                    };
                    let id = self.device_id(d);
                    if admin && self.allocating_for_claim(&id, r.claim) {
                        continue;
                    }
                    if !admin && self.in_use(&id) {
                        continue;
                    }
                    if !self.selectable_key(r.key(), d)? {
                        continue;
                    }
                    let Some(undo) = self.allocate_device(r, d, false)? else {
                        continue;
                    };
                    match self.allocate_one(next, allocating_sub) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.deallocate(undo),
                        Err(e) => {
                            self.deallocate(undo);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    fn in_use(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.contains(id) || self.allocating.get(id).is_some_and(|c| !c.is_empty())
    }

    fn allocating_for_claim(&self, id: &DeviceId, claim: usize) -> bool {
        self.allocating.get(id).is_some_and(|c| c.contains(&claim))
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
        let driver = &self.pools[d.pool].driver;
        let class = &data.class;
        let class_selectors = class
            .spec
            .as_ref()
            .and_then(|s| s.selectors.as_deref())
            .unwrap_or_default();
        if !self.selectors_match(key.0, Some(class), class_selectors, device, driver)? {
            return Ok(false);
        }
        if !self.selectors_match(key.0, None, data.req.selectors, device, driver)? {
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
        device: &Device,
        driver: &str,
    ) -> Result<bool, Stop> {
        let input = DeviceInput {
            driver,
            allow_multiple_allocations: device.allow_multiple_allocations.unwrap_or(false),
            attributes: device.attributes.as_ref(),
            capacity: device.capacity.as_ref(),
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
                Err(e) => return Err(Stop::Fatal(format!("{}: CEL runtime error: {e}", whose(i)))),
            }
        }
        Ok(true)
    }

    /// Upstream's `allocateDevice`: the device (known to be selectable) is taken for the request
    /// unless it is in use, tainted, needs an unsupported feature or breaks a constraint.
    fn allocate_device(&mut self, r: Indices, d: DevRef, must: bool) -> Result<Option<Undo>, Stop> {
        let id = self.device_id(d);
        let slice = self.slice(d);
        let device = device_of(&slice, d);
        let Some(data) = self.request_data.get(&r.key()) else {
            return Err(Stop::Fatal("internal error: request data missing".into()));
        };
        let (req, parent, request_name) = (data.req, data.parent, data.request_name());
        if req.admin() && self.allocating_for_claim(&id, r.claim) {
            return Ok(None);
        }
        if !req.admin() && self.in_use(&id) {
            return Ok(None);
        }
        if let Some(feature) = unsupported_feature(device) {
            if self.unsupported.is_none() {
                self.unsupported = Some(format!(
                    "device {id} needs {feature}, which ksched does not support"
                ));
            }
            return Ok(None);
        }
        if taint_prevents_allocation(device, req.tolerations) {
            return Ok(None);
        }
        let (base, sub) = match parent {
            Some(p) => (p.to_string(), Some(req.name.to_string())),
            None => (req.name.to_string(), None),
        };
        let driver = self.pools[d.pool].driver.clone();
        let mut added = 0;
        for c in self.constraints[r.claim].iter_mut() {
            if !c.add(&base, sub.as_deref(), device, &driver) {
                break;
            }
            added += 1;
        }
        if added < self.constraints[r.claim].len() {
            for c in self.constraints[r.claim][..added].iter_mut().rev() {
                c.remove(&base, sub.as_deref());
            }
            if must {
                return Err(Stop::Fatal(format!(
                    "claim {}, request {}: cannot add device {id} because a claim constraint would not be satisfied",
                    claim_ref(&self.claims[r.claim]),
                    req.name
                )));
            }
            return Ok(None);
        }
        self.allocating
            .entry(id.clone())
            .or_default()
            .insert(r.claim);
        let previous_results = self.results[r.claim].len();
        self.results[r.claim].push(DeviceResult {
            request: request_name,
            dev: d,
            admin_access: req.admin().then_some(true),
            tolerations: req.tolerations.to_vec(),
        });
        Ok(Some(Undo {
            claim: r.claim,
            id,
            base_request: base,
            sub_request: sub,
            constraints_added: added,
            previous_results,
        }))
    }

    fn deallocate(&mut self, undo: Undo) {
        self.results[undo.claim].truncate(undo.previous_results);
        if let Some(claims) = self.allocating.get_mut(&undo.id) {
            claims.remove(&undo.claim);
        }
        for c in self.constraints[undo.claim][..undo.constraints_added]
            .iter_mut()
            .rev()
        {
            c.remove(&undo.base_request, undo.sub_request.as_deref());
        }
    }

    /// The allocation result of each claim: devices, configuration, node selector.
    fn build_results(&self) -> Result<Vec<AllocationResult>, String> {
        let mut out = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            let results: Vec<DeviceRequestAllocationResult> = self.results[ci]
                .iter()
                .map(|r| {
                    let pool = &self.pools[r.dev.pool];
                    DeviceRequestAllocationResult {
                        request: r.request.clone(),
                        driver: pool.driver.clone(),
                        pool: pool.name.clone(),
                        device: device_of(&pool.slices[r.dev.slice], r.dev).name.clone(),
                        admin_access: r.admin_access,
                        tolerations: (!r.tolerations.is_empty()).then(|| r.tolerations.clone()),
                        ..Default::default()
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

    /// Class configuration once per class (for every request using it), then the claim's.
    fn configs(&self, ci: usize, claim: &ResourceClaim) -> Vec<DeviceAllocationConfiguration> {
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
            for (ri, request) in requests.iter().enumerate() {
                if named.contains(&request.name) {
                    config.push(entry());
                    continue;
                }
                let Some(&sub) = self.selected_sub.get(&(ci, ri)) else {
                    continue;
                };
                let Some(sub_request) = request.first_available.as_ref().and_then(|s| s.get(sub))
                else {
                    continue;
                };
                if named.contains(&format!("{}/{}", request.name, sub_request.name)) {
                    config.push(entry());
                }
            }
        }
        config
    }

    /// Upstream's `createNodeSelector`: pinned to a node by a node-local device, else the
    /// requirements of the slices' (or devices') selectors, else none (available everywhere).
    fn node_selector(&self, ci: usize) -> Result<Option<NodeSelector>, String> {
        let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
        let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
        for r in &self.results[ci] {
            let slice = &self.pools[r.dev.pool].slices[r.dev.slice];
            let device = device_of(slice, r.dev);
            let (node_name, selector) = if slice.spec.per_device_node_selection == Some(true) {
                (device.node_name.as_deref(), device.node_selector.as_ref())
            } else {
                (
                    slice.spec.node_name.as_deref(),
                    slice.spec.node_selector.as_ref(),
                )
            };
            if let Some(name) = node_name.filter(|n| !n.is_empty()) {
                return Ok(Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".to_string(),
                            operator: "In".to_string(),
                            values: Some(vec![name.to_string()]),
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

/// Device `d` of `slice` (the indices come from the slice itself).
fn device_of(slice: &ResourceSlice, d: DevRef) -> &Device {
    &slice.spec.devices.as_deref().unwrap_or_default()[d.device]
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

#[cfg(test)]
mod tests {
    use super::super::testing::{DRIVER, claim, class, device, exact, node_slice, slice};
    use super::*;
    use crate::framework::testing::NodeBuilder;
    use serde_json::{Value, json};

    fn gpus(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| device(&format!("gpu-{i}"), json!({"index": {"int": i}})))
            .collect()
    }

    /// Name, allocator, claims, the devices each claim gets (`request=pool/device`).
    type Case = (
        &'static str,
        Allocator,
        Vec<Arc<ResourceClaim>>,
        Option<Vec<Vec<&'static str>>>,
    );

    fn allocator(slices: Vec<Arc<ResourceSlice>>, allocated: &[&str]) -> Allocator {
        let classes = [
            class("gpu", &[]),
            class(
                "big",
                &["device.attributes[\"gpu.example.com\"].index >= 2"],
            ),
        ]
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
        let allocated = allocated
            .iter()
            .map(|d| {
                let (pool, dev) = d.split_once('/').expect("pool/device");
                DeviceId::new(DRIVER, pool, dev)
            })
            .collect();
        Allocator::new(allocated, classes, slices, Arc::new(Cache::default()), None)
    }

    fn node(name: &str) -> Node {
        NodeBuilder::new(name).label("zone", "a").build()
    }

    /// The devices allocated per claim as `request=pool/device`, or None.
    fn picked(outcome: &Outcome) -> Option<Vec<Vec<String>>> {
        outcome.results.as_ref().map(|results| {
            results
                .iter()
                .map(|r| {
                    r.devices
                        .iter()
                        .flat_map(|d| d.results.iter().flatten())
                        .map(|d| format!("{}={}/{}", d.request, d.pool, d.device))
                        .collect()
                })
                .collect()
        })
    }

    fn run(a: &Allocator, node_name: &str, claims: &[Arc<ResourceClaim>]) -> Outcome {
        a.allocate(&node(node_name), claims).expect("allocate")
    }

    #[test]
    fn allocation_table() {
        let n1 = || node_slice("n1", gpus(4));
        let cases: Vec<Case> = vec![
            (
                "one device: the first",
                allocator(vec![n1()], &[]),
                vec![claim("c", exact("gpu", 1))],
                Some(vec![vec!["gpu=n1/gpu-0"]]),
            ),
            (
                "allocated devices are skipped",
                allocator(vec![n1()], &["n1/gpu-0", "n1/gpu-1"]),
                vec![claim("c", exact("gpu", 1))],
                Some(vec![vec!["gpu=n1/gpu-2"]]),
            ),
            (
                "more devices than the node has",
                allocator(vec![n1()], &[]),
                vec![claim("c", exact("gpu", 5))],
                None,
            ),
            (
                "another node's slice is not used",
                allocator(vec![node_slice("n2", gpus(4))], &[]),
                vec![claim("c", exact("gpu", 1))],
                None,
            ),
            (
                "two claims get different devices",
                allocator(vec![n1()], &["n1/gpu-1"]),
                vec![claim("a", exact("gpu", 1)), claim("b", exact("gpu", 2))],
                Some(vec![
                    vec!["gpu=n1/gpu-0"],
                    vec!["gpu=n1/gpu-2", "gpu=n1/gpu-3"],
                ]),
            ),
            (
                "class selector",
                allocator(vec![n1()], &[]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "count": 1}}]}),
                )],
                Some(vec![vec!["r=n1/gpu-2"]]),
            ),
            (
                "request selector",
                allocator(vec![n1()], &[]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                    "selectors": [{"cel": {"expression": "device.attributes[\"gpu.example.com\"].index == 3"}}]}}]}),
                )],
                Some(vec![vec!["r=n1/gpu-3"]]),
            ),
            (
                "allocation mode All takes every matching device",
                allocator(vec![n1()], &[]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "allocationMode": "All"}}]}),
                )],
                Some(vec![vec!["r=n1/gpu-2", "r=n1/gpu-3"]]),
            ),
            (
                "allocation mode All fails when one is taken",
                allocator(vec![n1()], &["n1/gpu-3"]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "big", "allocationMode": "All"}}]}),
                )],
                None,
            ),
            (
                "firstAvailable: the first subrequest that fits",
                allocator(vec![n1()], &[]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "firstAvailable": [
                    {"name": "eight", "deviceClassName": "gpu", "count": 8},
                    {"name": "two", "deviceClassName": "gpu", "count": 2},
                    {"name": "one", "deviceClassName": "gpu", "count": 1}]}]}),
                )],
                Some(vec![vec!["r/two=n1/gpu-0", "r/two=n1/gpu-1"]]),
            ),
            (
                "admin access may use allocated devices",
                allocator(vec![n1()], &["n1/gpu-0"]),
                vec![claim(
                    "c",
                    json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1, "adminAccess": true}}]}),
                )],
                Some(vec![vec!["r=n1/gpu-0"]]),
            ),
        ];
        for (name, a, claims, want) in cases {
            let want = want.map(|w| {
                w.into_iter()
                    .map(|c| c.into_iter().map(String::from).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            });
            assert_eq!(picked(&run(&a, "n1", &claims)), want, "{name}");
        }
    }

    #[test]
    fn match_attribute_backtracks_to_devices_sharing_the_value() {
        let devices = vec![
            device("gpu-0", json!({"numa": {"int": 0}})),
            device("gpu-1", json!({"numa": {"int": 1}})),
            device("gpu-2", json!({"numa": {"int": 1}})),
        ];
        let a = allocator(vec![node_slice("n1", devices)], &[]);
        let c = claim(
            "c",
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}],
                   "constraints": [{"matchAttribute": "gpu.example.com/numa"}]}),
        );
        assert_eq!(
            picked(&run(&a, "n1", &[c])),
            Some(vec![vec![
                "r=n1/gpu-1".to_string(),
                "r=n1/gpu-2".to_string()
            ]])
        );
        // No two devices share a value: no allocation.
        let devices = vec![
            device("gpu-0", json!({"numa": {"int": 0}})),
            device("gpu-1", json!({"numa": {"int": 1}})),
        ];
        let a = allocator(vec![node_slice("n1", devices)], &[]);
        let c = claim(
            "c",
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}],
                   "constraints": [{"requests": ["r"], "matchAttribute": "gpu.example.com/numa"}]}),
        );
        assert_eq!(picked(&run(&a, "n1", &[c])), None);
    }

    #[test]
    fn taints_need_tolerations() {
        let tainted = json!({"name": "gpu-0", "taints": [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]});
        let a = allocator(vec![node_slice("n1", vec![tainted])], &[]);
        assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])), None);
        let tolerating = claim(
            "c",
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                "tolerations": [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]}}]}),
        );
        let out = run(&a, "n1", &[tolerating]);
        let result = &out.results.expect("allocated")[0];
        let first = &result
            .devices
            .as_ref()
            .and_then(|d| d.results.clone())
            .expect("results")[0];
        assert_eq!(first.device, "gpu-0");
        assert_eq!(first.tolerations.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn node_selectors_of_the_result() {
        let c = || vec![claim("c", exact("gpu", 1))];
        // A node-local slice pins the claim to the node.
        let out = run(&allocator(vec![node_slice("n1", gpus(1))], &[]), "n1", &c());
        let sel = out.results.expect("allocated")[0]
            .node_selector
            .clone()
            .expect("selector");
        assert_eq!(
            serde_json::to_value(&sel).expect("json"),
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
        );
        // A slice for all nodes: available everywhere.
        let all = slice(
            "net",
            json!({"driver": DRIVER, "allNodes": true, "pool": {"name": "net", "generation": 1, "resourceSliceCount": 1}, "devices": gpus(1)}),
        );
        let out = run(&allocator(vec![all], &[]), "n1", &c());
        assert_eq!(out.results.expect("allocated")[0].node_selector, None);
        // A slice for nodes matching a selector: that selector.
        let zoned = slice(
            "zoned",
            json!({"driver": DRIVER, "pool": {"name": "zone-a", "generation": 1, "resourceSliceCount": 1}, "devices": gpus(1),
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}),
        );
        let a = allocator(vec![zoned], &[]);
        let out = run(&a, "n1", &c());
        let sel = out.results.expect("allocated")[0]
            .node_selector
            .clone()
            .expect("selector");
        assert_eq!(
            sel.node_selector_terms[0]
                .match_expressions
                .as_ref()
                .map(Vec::len),
            Some(1)
        );
        let other_zone = NodeBuilder::new("n9").label("zone", "b").build();
        assert_eq!(
            a.allocate(&other_zone, &c()).map(|o| o.results.is_none()),
            Ok(true)
        );
        // Per-device node selection.
        let per_device = slice(
            "pd",
            json!({"driver": DRIVER, "perDeviceNodeSelection": true, "pool": {"name": "pd", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "d-n2", "nodeName": "n2"}, {"name": "d-n1", "nodeName": "n1"}]}),
        );
        let out = run(&allocator(vec![per_device], &[]), "n1", &c());
        assert_eq!(picked(&out), Some(vec![vec!["gpu=pd/d-n1".to_string()]]));
    }

    #[test]
    fn pools_old_generations_incomplete_and_invalid() {
        let spec = |generation: i64, count: i64, devices: Vec<Value>| json!({"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": generation, "resourceSliceCount": count}, "devices": devices});
        // The newer generation replaces the older one.
        let a = allocator(
            vec![
                slice("old", spec(1, 1, gpus(1))),
                slice("new", spec(2, 1, vec![device("fresh", json!({}))])),
            ],
            &[],
        );
        assert_eq!(
            picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])),
            Some(vec![vec!["gpu=p/fresh".to_string()]])
        );
        // An incomplete pool is not allocated from; "All" over it is an error.
        let a = allocator(vec![slice("half", spec(1, 2, gpus(2)))], &[]);
        assert_eq!(picked(&run(&a, "n1", &[claim("c", exact("gpu", 1))])), None);
        let all = claim(
            "c",
            json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]}),
        );
        assert!(matches!(
            a.allocate(&node("n1"), &[all]),
            Err(AllocateError::Fatal(e)) if e.contains("resource pool gpu.example.com/p is currently being updated")
        ));
        // Duplicate device names make the pool invalid: an error for this node only.
        let a = allocator(
            vec![
                slice("a", spec(1, 2, gpus(1))),
                slice("b", spec(1, 2, gpus(1))),
            ],
            &[],
        );
        assert_eq!(
            a.allocate(&node("n1"), &[claim("c", exact("gpu", 1))]),
            Err(AllocateError::Node(
                "invalid resource pools were encountered".into()
            ))
        );
    }

    #[test]
    fn unsupported_device_features_are_named() {
        let partitioned = json!({"name": "slice-0", "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": "1Gi"}}}]});
        let a = allocator(vec![node_slice("n1", vec![partitioned])], &[]);
        let out = run(&a, "n1", &[claim("c", exact("gpu", 1))]);
        assert_eq!(out.results, None);
        assert_eq!(
            out.unsupported.as_deref(),
            Some(
                "device gpu.example.com/n1/slice-0 needs partitionable devices (consumesCounters), which ksched does not support"
            )
        );
        let shared = json!({"name": "shared-0", "allowMultipleAllocations": true});
        let a = allocator(vec![node_slice("n1", vec![shared])], &[]);
        let out = run(&a, "n1", &[claim("c", exact("gpu", 1))]);
        assert!(
            out.unsupported
                .is_some_and(|u| u.contains("consumable capacity"))
        );
    }

    #[test]
    fn configuration_from_class_and_claim() {
        let mut class_with_config = (*class("gpu", &[])).clone();
        class_with_config.spec.get_or_insert_default().config = Some(vec![
            serde_json::from_value(
                json!({"opaque": {"driver": DRIVER, "parameters": {"mode": "class"}}}),
            )
            .expect("config"),
        ]);
        let classes = [("gpu".to_string(), Arc::new(class_with_config))]
            .into_iter()
            .collect();
        let a = Allocator::new(
            HashSet::new(),
            classes,
            vec![node_slice("n1", gpus(2))],
            Arc::new(Cache::default()),
            None,
        );
        let c = claim(
            "c",
            json!({"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "count": 1}},
                                {"name": "b", "exactly": {"deviceClassName": "gpu", "count": 1}}],
                   "config": [{"requests": ["b"], "opaque": {"driver": DRIVER, "parameters": {"mode": "claim"}}}]}),
        );
        let out = run(&a, "n1", &[c]);
        let config = out.results.expect("allocated")[0]
            .devices
            .clone()
            .and_then(|d| d.config)
            .expect("config");
        let summary: Vec<(String, Vec<String>)> = config
            .iter()
            .map(|c| (c.source.clone(), c.requests.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "FromClass".to_string(),
                    vec!["a".to_string(), "b".to_string()]
                ),
                ("FromClaim".to_string(), vec!["b".to_string()]),
            ]
        );
    }

    #[test]
    fn broken_claims_are_errors() {
        let a = allocator(vec![node_slice("n1", gpus(1))], &[]);
        let cases = [
            (
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                    "selectors": [{"cel": {"expression": "device.attributes[\"gpu.example.com\"].missing == 1"}}]}}]}),
                "claim ns/c: selector #0: CEL runtime error",
            ),
            (
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1,
                    "selectors": [{"cel": {"expression": "ip('1.2.3.4') == 1"}}]}}]}),
                "claim ns/c: selector #0: CEL compile error",
            ),
            (
                exact("gpu", 33),
                "claim ns/c: number of requested devices 33 exceeds the claim limit of 32",
            ),
            (
                json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "nope", "count": 1}}]}),
                "could not retrieve device class nope",
            ),
        ];
        for (devices, want) in cases {
            match a.allocate(&node("n1"), &[claim("c", devices)]) {
                Err(AllocateError::Fatal(e)) => assert!(e.contains(want), "{e}"),
                other => panic!("{want}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_filter_timeout_stops_the_search() {
        let a = Allocator::new(
            HashSet::new(),
            [("gpu".to_string(), class("gpu", &[]))]
                .into_iter()
                .collect(),
            vec![node_slice("n1", gpus(2))],
            Arc::new(Cache::default()),
            Some(Duration::ZERO),
        );
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            a.allocate(&node("n1"), &[claim("c", exact("gpu", 1))]),
            Err(AllocateError::Timeout)
        );
    }
}
