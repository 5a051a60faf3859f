//! The DynamicResources plugin: PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve,
//! Unreserve and PreBind, as upstream 1.36's `dynamicresources` plugin with structured parameters.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeSelector};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, ResourceClaim, ResourceClaimConsumerReference,
    ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;

use super::allocator::{AllocateError, AllocatedState, Allocator, Inputs, TaintRule};
use super::binding;
use super::cel::Cache;
use super::claims::{claim_key, is_allocated, pod_claims, requests, reserved_for_pod};
use super::tracker::ClaimTracker;
use super::versions::{Behaviour, Change};
use crate::emulation::Minor;
use crate::framework::api_calls::{ApiClient, ApiError, Get, PatchStatus, Replace, ReplaceStatus};
use crate::framework::background::ApiDispatcher;
use crate::framework::interface::{
    CycleState, FilterPlugin, NodeScore, NodeToStatus, PostFilterPlugin, PostFilterResult,
    PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, ReservePlugin, ScorePlugin,
    SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{
    DEVICE_CLASSES, DEVICE_TAINT_RULES, Listers, RESOURCE_CLAIMS, RESOURCE_SLICES,
};
use crate::framework::plugins::helper::{impl_plugin, node_selector_terms_match, normalize_to_max};
use crate::framework::plugins::names;
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};

const STATE_KEY: &str = "DynamicResources";
/// Upstream's `resourceapi.Finalizer`, put on claims the scheduler allocated.
pub(crate) const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// Upstream's `resourceapi.FirstAvailableDeviceRequestMaxSize`: the score of a subrequest is
/// this minus its position.
const FIRST_AVAILABLE_MAX_SIZE: i64 = 8;
/// How often PreBind retries a claim update that hit a conflict (client-go's `DefaultRetry`).
const CONFLICT_RETRIES: usize = 5;

pub(crate) const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
pub(crate) const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
pub(crate) const NO_NEW_CLAIMS_TO_DEALLOCATE: &str = "no new claims to deallocate";

pub(crate) struct DynamicResources {
    listers: Arc<Listers>,
    /// Shared with this plugin in every other profile of the scheduler.
    tracker: Arc<ClaimTracker>,
    api: Arc<dyn ApiClient>,
    /// Runs the writes PostFilter and Unreserve decide, outside the scheduling cycle.
    dispatcher: Arc<ApiDispatcher>,
    cel: Arc<Cache>,
    filter_timeout: Option<Duration>,
    /// How long PreBind waits for the binding conditions of allocated devices.
    binding_timeout: Duration,
    behaviour: Behaviour,
}

impl_plugin!(
    DynamicResources,
    names::DYNAMIC_RESOURCES,
    [
        PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve, PreBind
    ],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for DynamicResources {
    /// Pods with claims are not signable (as upstream: an allocation in Reserve changes what the
    /// next pod finds on other nodes), nor pods requesting extended resources backed by DRA
    /// (upstream's NodeResourcesFit refuses to sign those). Other pods: nothing to add.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let has_claims = pod
            .spec()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if has_claims {
            return Err(Status::unschedulable(
                "pods with dra resource claims are not signable",
            ));
        }
        if !self.dra_extended_resources(pod).is_empty() {
            return Err(Status::unschedulable(
                "signature disabled when dra extended resources are used in the cluster",
            ));
        }
        Ok(Vec::new())
    }
}

/// What PreFilter learned about the pod's claims; Filter, Reserve and PreBind add to it (upstream
/// keeps a pointer in the cycle state the same way, so clones share it).
#[derive(Default)]
struct State {
    /// The pod's claims, in order; PreBind replaces the ones it updated.
    claims: Mutex<Vec<Arc<ResourceClaim>>>,
    /// For allocated claims: the nodes their allocation allows.
    available_on_nodes: Vec<Option<NodeSelector>>,
    /// Indices of the claims the scheduler has to allocate.
    to_allocate: Vec<usize>,
    allocator: Option<Allocator>,
    /// Allocated claims found unavailable on some node (PostFilter deallocates one).
    unavailable: Mutex<BTreeSet<usize>>,
    /// Filter's allocations per node, one per claim in `to_allocate`.
    node_allocations: Mutex<HashMap<String, Vec<AllocationResult>>>,
    /// Reserve's allocation per claim index.
    reserved: Mutex<HashMap<usize, AllocationResult>>,
    /// Extended resources the pod requests that a DeviceClass provides: ksched does not allocate
    /// them (DRAExtendedResource), so only nodes whose device plugin has them fit.
    extended: Vec<String>,
}

impl State {
    /// A copy of the pod's claims, or `None` when it has none (Filter and Score ask on every
    /// node, and most pods have none: no copy then, and no lock, which the threads scoring nodes
    /// in parallel would contend for). `available_on_nodes` has an entry per claim and is fixed
    /// at PreFilter.
    fn claims(&self) -> Option<Vec<Arc<ResourceClaim>>> {
        if self.available_on_nodes.is_empty() {
            return None;
        }
        let claims = self.claims.lock();
        (!claims.is_empty()).then(|| claims.clone())
    }
}

type SharedState = Arc<State>;

fn state(cs: &CycleState) -> Option<&SharedState> {
    cs.read::<SharedState>(STATE_KEY)
}

impl DynamicResources {
    pub(crate) fn new(
        listers: Arc<Listers>,
        api: Arc<dyn ApiClient>,
        dispatcher: Arc<ApiDispatcher>,
        filter_timeout: Option<Duration>,
    ) -> DynamicResources {
        DynamicResources {
            tracker: listers.plugin_state.get_or_default::<ClaimTracker>(),
            listers,
            api,
            dispatcher,
            cel: Arc::new(Cache::default()),
            filter_timeout,
            binding_timeout: super::DEFAULT_BINDING_TIMEOUT
                .to_std()
                .unwrap_or(Duration::from_secs(600)),
            behaviour: Behaviour::default(),
        }
    }

    pub(crate) fn with_binding_timeout(mut self, timeout: Duration) -> DynamicResources {
        self.binding_timeout = timeout;
        self
    }

    /// The plugin as `minor`'s kube-scheduler runs it.
    pub(crate) fn at(mut self, minor: Minor) -> DynamicResources {
        self.behaviour = Behaviour::of_minor(minor);
        self
    }

    /// The stores the plugin reads (its queueing hints read the same).
    pub(super) fn listers(&self) -> &Arc<Listers> {
        &self.listers
    }

    pub(super) fn tracker(&self) -> &Arc<ClaimTracker> {
        &self.tracker
    }

    fn claims_of(&self, pod: &PodInfo) -> Result<Vec<Arc<ResourceClaim>>, String> {
        pod_claims(
            &pod.pod,
            &self.tracker,
            self.listers.store(&RESOURCE_CLAIMS),
        )
    }

    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.listers.store(&DEVICE_CLASSES).get("", name)
    }

    /// Extended resources the pod requests that a DeviceClass provides (DRAExtendedResource).
    fn dra_extended_resources(&self, pod: &PodInfo) -> Vec<String> {
        super::claims::backed_by_dra(
            pod.requests.scalar_resources.keys(),
            self.listers.store(&DEVICE_CLASSES),
        )
    }

    /// PreFilter for a pod with claims: which to allocate, where the allocated ones may run.
    fn prepare(&self, pod: &PodInfo, claims: Vec<Arc<ResourceClaim>>) -> Result<State, Status> {
        let mut st = State {
            available_on_nodes: vec![None; claims.len()],
            ..State::default()
        };
        for (i, claim) in claims.iter().enumerate() {
            if let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                st.available_on_nodes[i] = allocation.node_selector.clone();
                continue;
            }
            st.to_allocate.push(i);
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            if self.tracker.pending_allocation(uid).is_some() {
                return Err(Status::unresolvable(format!(
                    "resource claim {} is in the process of being allocated",
                    claim_key(claim)
                )));
            }
            let requests = requests(claim);
            for request in requests {
                match (&request.exactly, request.first_available.as_deref()) {
                    (Some(exact), _) => {
                        self.validate_class(&exact.device_class_name, &request.name)?
                    }
                    (None, Some(subs)) if !subs.is_empty() => {
                        for sub in subs {
                            let name = format!("{}/{}", request.name, sub.name);
                            self.validate_class(&sub.device_class_name, &name)?;
                        }
                    }
                    _ => {
                        return Err(Status::unresolvable(format!(
                            "resource claim {}, request {}: unknown request type",
                            claim_key(claim),
                            request.name
                        )));
                    }
                }
            }
        }
        if !st.to_allocate.is_empty() {
            let classes = self
                .listers
                .store(&DEVICE_CLASSES)
                .list()
                .into_iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
                .collect();
            let inputs = Inputs {
                allocated: AllocatedState::of(
                    &self
                        .tracker
                        .claims_with_in_flight(self.listers.store(&RESOURCE_CLAIMS)),
                ),
                classes,
                taint_rules: self
                    .listers
                    .store(&DEVICE_TAINT_RULES)
                    .list()
                    .iter()
                    .filter_map(|rule| TaintRule::of(rule))
                    .collect(),
                cel: self.cel.clone(),
                timeout: self.filter_timeout,
                behaviour: self.behaviour,
            };
            st.allocator = Some(Allocator::new(
                inputs,
                self.listers.store(&RESOURCE_SLICES).list(),
            ));
        }
        st.extended = self.dra_extended_resources(pod);
        *st.claims.get_mut() = claims;
        Ok(st)
    }

    fn validate_class(&self, class: &str, request: &str) -> Result<(), Status> {
        if class.is_empty() {
            return Err(Status::error(format!(
                "request {request}: unsupported request type"
            )));
        }
        if self.class(class).is_none() {
            return Err(Status::unresolvable(format!(
                "request {request}: device class {class} does not exist"
            )));
        }
        Ok(())
    }

    /// PreBind for one claim not yet reserved for the pod: writes the allocation (with the
    /// finalizer) and the reservation, retrying on conflicts with the latest claim.
    async fn bind_claim(
        &self,
        claim: &ResourceClaim,
        allocation: Option<&AllocationResult>,
        pod: &PodInfo,
    ) -> Result<ResourceClaim, String> {
        let key = claim_key(claim);
        let (namespace, name) = (
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default(),
        );
        let mut current = claim.clone();
        let mut last_error = String::new();
        for attempt in 0..CONFLICT_RETRIES {
            if attempt > 0 {
                current = self
                    .api
                    .call(Get::<ResourceClaim>::new(namespace, name))
                    .await
                    .map_err(|e| format!("get updated claim {key} after conflict: {e}"))?;
            }
            if current.metadata.deletion_timestamp.is_some() {
                return Err(format!("claim {key} got deleted in the meantime"));
            }
            if let Some(allocation) = allocation {
                if is_allocated(&current) {
                    return Err(format!(
                        "claim {key} got allocated elsewhere in the meantime"
                    ));
                }
                let finalizers = current.metadata.finalizers.get_or_insert_with(Vec::new);
                if !finalizers.iter().any(|f| f == FINALIZER) {
                    finalizers.push(FINALIZER.to_string());
                    match self.api.call(Replace(current.clone())).await {
                        Ok(updated) => current = updated,
                        Err(ApiError::Conflict(e)) => {
                            last_error = format!("add finalizer to claim {key}: {e}");
                            continue;
                        }
                        Err(e) => return Err(format!("add finalizer to claim {key}: {e}")),
                    }
                }
                current
                    .status
                    .get_or_insert_with(ResourceClaimStatus::default)
                    .allocation = Some(allocation.clone());
            }
            let status = current
                .status
                .get_or_insert_with(ResourceClaimStatus::default);
            status
                .reserved_for
                .get_or_insert_with(Vec::new)
                .push(ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".to_string(),
                    name: pod.name().to_string(),
                    uid: pod.uid().to_string(),
                });
            // DRADeviceBindingConditions (beta, on in 1.36) stamps the allocation time.
            let Some(alloc) = status.allocation.as_mut() else {
                return Err(format!(
                    "claim {key} got deallocated elsewhere in the meantime"
                ));
            };
            alloc
                .allocation_timestamp
                .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
            match self.api.call(ReplaceStatus(current.clone())).await {
                Ok(updated) => return Ok(updated),
                Err(ApiError::Conflict(e)) => last_error = e,
                Err(e) => {
                    return Err(if allocation.is_some() {
                        format!("add allocation and reservation to claim {key}: {e}")
                    } else {
                        format!("add reservation to claim {key}: {e}")
                    });
                }
            }
        }
        Err(format!(
            "add allocation and reservation to claim {key}: {last_error}"
        ))
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        match self.claims_of(pod) {
            Ok(_) => Status::success(),
            Err(reason) => Status::unresolvable(reason),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        cs: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        // An empty state records "no claims" for the later extension points.
        cs.write(STATE_KEY, SharedState::default());
        let claims = match self.claims_of(pod) {
            Ok(c) => c,
            Err(reason) => return (None, Status::unresolvable(reason)),
        };
        if claims.is_empty() && self.dra_extended_resources(pod).is_empty() {
            return (None, Status::skip());
        }
        match self.prepare(pod, claims) {
            Ok(st) => {
                cs.write(STATE_KEY, Arc::new(st));
                (None, Status::success())
            }
            Err(status) => (None, status),
        }
    }
}

fn selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    node_selector_terms_match(
        &selector.node_selector_terms,
        node.metadata.labels.as_ref(),
        node.metadata.name.as_deref().unwrap_or_default(),
    )
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, cs: &CycleState, _pod: &PodInfo, node_info: &NodeInfo) -> Status {
        let Some(st) = state(cs) else {
            return Status::error(format!("error reading {STATE_KEY:?} from cycle-state"));
        };
        let Some(node) = node_info.node() else {
            return Status::error("node not found");
        };
        let allocatable = &node_info.allocatable.scalar_resources;
        if !st
            .extended
            .iter()
            .all(|r| allocatable.get(r).is_some_and(|v| *v > 0))
        {
            return Status::unresolvable(format!(
                "extended resource(s) {} backed by DRA (DRAExtendedResource) are not supported by ksched",
                st.extended.join(", ")
            ));
        }
        let Some(claims) = st.claims() else {
            return Status::success();
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let unavailable: Vec<usize> = st
            .available_on_nodes
            .iter()
            .enumerate()
            .filter(|&(i, sel)| {
                sel.as_ref().is_some_and(|s| !selector_matches(s, node))
                    || (is_allocated(&claims[i])
                        && binding::failed(&claims[i], self.binding_timeout, now).is_some())
            })
            .map(|(i, _)| i)
            .collect();
        let mut allocations = None;
        if let Some(allocator) = &st.allocator {
            let to_allocate: Vec<Arc<ResourceClaim>> =
                st.to_allocate.iter().map(|&i| claims[i].clone()).collect();
            match allocator.allocate(node, &to_allocate) {
                Ok(Some(results)) if results.len() == to_allocate.len() => {
                    allocations = Some(results)
                }
                Ok(_) => return Status::unresolvable(ERR_CANNOT_ALLOCATE),
                Err(AllocateError::Timeout) => {
                    return Status::error(format!(
                        "node {}: timed out trying to allocate devices",
                        node_info.name()
                    ));
                }
                Err(AllocateError::Node(reason)) => return Status::unresolvable(reason),
                Err(AllocateError::Fatal(e)) => return Status::error(e),
            }
        }
        if !unavailable.is_empty() {
            st.unavailable.lock().extend(unavailable);
            return Status::unresolvable(ERR_NOT_AVAILABLE);
        }
        if let Some(a) = allocations {
            st.node_allocations
                .lock()
                .insert(node_info.name().to_string(), a);
        }
        Status::success()
    }
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(
        &self,
        cs: &CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        // No state: an earlier PreFilter rejected the pod before this one ran. Upstream's read of
        // its cycle state then fails with this error, which ends PostFilter (no preemption).
        let Some(st) = state(cs) else {
            return (None, Status::error("not found"));
        };
        let quiet = self.behaviour.has(Change::QuietPostFilter);
        let Some(claims) = st.claims() else {
            let reason = if quiet {
                ""
            } else {
                NO_NEW_CLAIMS_TO_DEALLOCATE
            };
            return (None, Status::unschedulable(reason));
        };
        // Upstream picks one unavailable claim at random; the first is as good.
        let unavailable: Vec<usize> = st.unavailable.lock().iter().copied().collect();
        for i in unavailable {
            let claim = &claims[i];
            let consumers = super::claims::reserved_for(claim);
            let only_this_pod = consumers.len() == 1 && consumers[0].uid == pod.uid();
            if !(consumers.is_empty() || only_this_pod) {
                continue;
            }
            let mut deallocated = (**claim).clone();
            if let Some(status) = deallocated.status.as_mut() {
                status.reserved_for = None;
                status.allocation = None;
                status.devices = None;
            }
            // PostFilter runs in the scheduling cycle, which must not wait on the API: the
            // update is handed to the dispatcher and the pod is retried when the claim changes.
            self.dispatcher
                .dispatch_call(ReplaceStatus(deallocated), "deallocating ResourceClaim");
            return (
                None,
                Status::unschedulable("deallocation of ResourceClaim completed"),
            );
        }
        let reason = if quiet { "" } else { "still not schedulable" };
        (None, Status::unschedulable(reason))
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, cs: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(st) = state(cs) else {
            return Ok(0);
        };
        let Some(claims) = st.claims() else {
            return Ok(0);
        };
        let node_allocations = st.node_allocations.lock();
        let Some(allocations) = node_allocations.get(node.name()) else {
            return Ok(0);
        };
        let mut score = 0;
        let mut next_new = 0;
        for claim in &claims {
            let allocation = match claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                Some(a) => a,
                None => {
                    let Some(a) = allocations.get(next_new) else {
                        return Err(Status::error(format!(
                            "number of allocations {} is smaller than number of claims needing allocation",
                            allocations.len()
                        )));
                    };
                    next_new += 1;
                    a
                }
            };
            let allocated: BTreeSet<&str> = allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| r.request.as_str())
                .filter(|r| r.contains('/'))
                .collect();
            let requests = requests(claim);
            for req in requests.iter().filter(|r| r.exactly.is_none()) {
                for (i, sub) in req.first_available.iter().flatten().enumerate() {
                    if allocated.contains(format!("{}/{}", req.name, sub.name).as_str()) {
                        score += FIRST_AVAILABLE_MAX_SIZE - i as i64;
                    }
                }
            }
        }
        Ok(score)
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    fn normalize_score(
        &self,
        _cs: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        normalize_to_max(false, scores);
        Status::success()
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, cs: &mut CycleState, _pod: &PodInfo, node_name: &str) -> Status {
        let Some(st) = state(cs).cloned() else {
            return Status::error(format!("error reading {STATE_KEY:?} from cycle-state"));
        };
        if st.to_allocate.is_empty() {
            return Status::success();
        }
        let Some(allocations) = st.node_allocations.lock().get(node_name).cloned() else {
            return Status::error("claim allocation not found for node");
        };
        if allocations.len() != st.to_allocate.len() {
            return Status::error(format!(
                "internal error, have {} allocations, {} claims to allocate",
                allocations.len(),
                st.to_allocate.len()
            ));
        }
        let claims = st.claims.lock().clone();
        let mut reserved = st.reserved.lock();
        for (&i, allocation) in st.to_allocate.iter().zip(allocations) {
            let mut claim = (*claims[i]).clone();
            let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|f| f == FINALIZER) {
                finalizers.push(FINALIZER.to_string());
            }
            claim
                .status
                .get_or_insert_with(ResourceClaimStatus::default)
                .allocation = Some(allocation.clone());
            self.tracker.signal_pending(Arc::new(claim));
            reserved.insert(i, allocation);
        }
        Status::success()
    }

    fn unreserve(&self, cs: &mut CycleState, pod: &PodInfo, _node_name: &str) {
        let Some(st) = state(cs).cloned() else {
            return;
        };
        let claims = st.claims.lock().clone();
        let tracker = &self.tracker;
        for claim in &claims {
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            if tracker.maybe_remove_pending(uid, false) {
                tracker.restore(&claim_key(claim));
            }
            if is_allocated(claim) && reserved_for_pod(claim, pod.uid()) {
                let (namespace, name) = (
                    claim.metadata.namespace.clone().unwrap_or_default(),
                    claim.metadata.name.clone().unwrap_or_default(),
                );
                // A strategic merge patch removes one entry without the latest claim; the uid
                // precondition keeps it off a claim recreated under the same name. A failure is
                // retried by the pod's next attempt, as upstream.
                let patch = serde_json::json!({
                    "metadata": {"uid": uid},
                    "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid()}]}
                });
                self.dispatcher.dispatch_call(
                    PatchStatus::<ResourceClaim>::new(&namespace, &name, patch),
                    "unreserving ResourceClaim",
                );
            }
        }
    }
}

#[async_trait]
impl PreBindPlugin for DynamicResources {
    /// Skip for a pod without claims (PreBind has nothing to write, so the scheduler does not set
    /// nominatedNodeName first), as upstream.
    fn pre_bind_pre_flight(&self, cs: &CycleState, _pod: &PodInfo, _node_name: &str) -> Status {
        match state(cs) {
            None => Status::error(format!("error reading {STATE_KEY:?} from cycle-state")),
            Some(st) if st.claims.lock().is_empty() => Status::skip(),
            Some(_) => Status::success(),
        }
    }

    async fn pre_bind(&self, cs: &CycleState, pod: &PodInfo, _node_name: &str) -> Status {
        let Some(st) = state(cs).cloned() else {
            return Status::error(format!("error reading {STATE_KEY:?} from cycle-state"));
        };
        let claims = st.claims.lock().clone();
        let tracker = &self.tracker;
        for (i, claim) in claims.iter().enumerate() {
            if reserved_for_pod(claim, pod.uid()) {
                continue;
            }
            let allocation = st.reserved.lock().get(&i).cloned();
            let result = self.bind_claim(claim, allocation.as_ref(), pod).await;
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            let mut assumed = false;
            if let Ok(updated) = &result {
                match tracker.assume(self.listers.store(&RESOURCE_CLAIMS), updated.clone()) {
                    Ok(()) => assumed = true,
                    Err(e) => {
                        tracing::debug!(claim = %claim_key(updated), error = %e, "claim not stored in assume cache")
                    }
                }
            }
            if allocation.is_some() {
                tracker.maybe_remove_pending(uid, assumed);
            }
            match result {
                Ok(updated) => st.claims.lock()[i] = Arc::new(updated),
                Err(e) => return Status::error(e),
            }
        }
        let claims = st.claims.lock().clone();
        if claims.iter().any(|c| binding::has_binding_conditions(c)) {
            return self.wait_for_binding_conditions(&st).await;
        }
        Status::success()
    }
}

impl DynamicResources {
    /// Upstream's wait in PreBind: the claims as the scheduler knows them, every
    /// [`binding::POLL_INTERVAL`], until their devices' binding conditions are met, one failed
    /// or `bindingTimeout` passed.
    async fn wait_for_binding_conditions(&self, st: &State) -> Status {
        let deadline = std::time::Instant::now() + self.binding_timeout;
        loop {
            let mut ready = true;
            let now = k8s_openapi::jiff::Timestamp::now();
            let claims = st.claims.lock().clone();
            for (i, claim) in claims.iter().enumerate() {
                let (namespace, name) = (
                    claim.metadata.namespace.as_deref().unwrap_or_default(),
                    claim.metadata.name.as_deref().unwrap_or_default(),
                );
                let Some(current) =
                    self.tracker
                        .get(self.listers.store(&RESOURCE_CLAIMS), namespace, name)
                else {
                    return Status::error(format!("resourceclaim {namespace}/{name} not found"));
                };
                st.claims.lock()[i] = current.clone();
                if let Some(reason) = binding::failed(&current, self.binding_timeout, now) {
                    return Status::error(reason);
                }
                if !matches!(binding::ready(&current), Ok(true)) {
                    ready = false;
                    break;
                }
            }
            if ready {
                return Status::success();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left < binding::POLL_INTERVAL {
                tokio::time::sleep(left).await;
                return Status::error("device binding timeout: context deadline exceeded");
            }
            tokio::time::sleep(binding::POLL_INTERVAL).await;
        }
    }
}
