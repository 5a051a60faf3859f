//! The extension-point traits and the values they pass — modeled on upstream's
//! `pkg/scheduler/framework/interface.go`. [`Status`] and [`Code`] are defined in `status.rs`,
//! [`CycleState`] in `cycle_state.rs` (upstream's `cycle_state.go`); both are re-exported here.
//!
//! A plugin is one value implementing [`Plugin`]; it announces the extension points it implements
//! through the `as_*` accessors (returning `Some(self)`), so one instance serves all of them.
//! Scheduling-cycle extension points (PreEnqueue .. Permit) are synchronous and are called from
//! worker threads; Filter and Score are called concurrently for many nodes, so plugins are
//! `Send + Sync` and keep per-cycle data in the [`CycleState`], not in themselves.
//! PreBind, Bind and PostBind are `async` (they may do API calls through the [`ApiClient`]).
//!
//! [`ApiClient`]: super::api_calls::ApiClient

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use super::cycle_state::CycleState;
pub use super::status::{Code, Status};
use super::types::{
    AssignedPod, ClusterEvent, EventObject, HintError, NodeInfo, PodInfo, QueuedPodInfo,
    QueueingHint, Snapshot,
};

/// The highest score a Score plugin may return after NormalizeScore.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest score a Score plugin may return after NormalizeScore.
pub const MIN_NODE_SCORE: i64 = 0;
/// Below this many nodes, Filter/Score (and plugins' own loops over nodes) run on the calling
/// thread: parallelism costs more.
pub const PARALLEL_THRESHOLD: usize = 64;
/// The longest a Permit plugin may make a pod wait (upstream's `maxTimeout`).
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The node names a PreFilter plugin restricts the pod to; `None` (no result) means all nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PreFilterResult {
    /// `None`: all nodes are eligible.
    pub node_names: Option<BTreeSet<String>>,
}

impl PreFilterResult {
    pub fn all_nodes() -> Self {
        PreFilterResult { node_names: None }
    }

    pub fn nodes(names: impl IntoIterator<Item = String>) -> Self {
        PreFilterResult {
            node_names: Some(names.into_iter().collect()),
        }
    }

    pub fn is_all_nodes(&self) -> bool {
        self.node_names.is_none()
    }

    /// The intersection of two results (upstream's `Merge`).
    pub fn merge(self, other: PreFilterResult) -> PreFilterResult {
        match (self.node_names, other.node_names) {
            (None, n) | (n, None) => PreFilterResult { node_names: n },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// How a PostFilter result changes the pod's nominated node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NominatingMode {
    /// Leave `.status.nominatedNodeName` as it is.
    #[default]
    Noop,
    /// Set it to [`NominatingInfo::nominated_node_name`] (empty clears it).
    Override,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NominatingInfo {
    pub nominated_node_name: String,
    pub mode: NominatingMode,
}

/// What a PostFilter plugin (preemption) decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PostFilterResult {
    pub nominating_info: NominatingInfo,
}

impl PostFilterResult {
    pub fn nominate(node: impl Into<String>) -> Self {
        PostFilterResult {
            nominating_info: NominatingInfo {
                nominated_node_name: node.into(),
                mode: NominatingMode::Override,
            },
        }
    }
}

/// One node's score from one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    pub name: Arc<str>,
    pub score: i64,
}

/// Why nodes were rejected: an explicit status per node, and one status for every node not listed
/// (those a PreFilter result excluded, or all of them when PreFilter rejected the pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeToStatus {
    statuses: HashMap<String, Status>,
    absent_nodes_status: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        // Upstream's NewDefaultNodeToStatus: absent nodes are UnschedulableAndUnresolvable.
        NodeToStatus {
            statuses: HashMap::new(),
            absent_nodes_status: Status::code_only(Code::UnschedulableAndUnresolvable),
        }
    }
}

impl NodeToStatus {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, node: impl Into<String>, status: Status) {
        self.statuses.insert(node.into(), status);
    }

    /// The status of `node`: its explicit status, else the absent-nodes status.
    pub fn get(&self, node: &str) -> &Status {
        self.statuses.get(node).unwrap_or(&self.absent_nodes_status)
    }

    /// The number of nodes with an explicit status.
    pub fn len(&self) -> usize {
        self.statuses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }

    pub fn explicit(&self) -> impl Iterator<Item = (&String, &Status)> {
        self.statuses.iter()
    }

    pub fn absent_nodes_status(&self) -> &Status {
        &self.absent_nodes_status
    }

    pub fn set_absent_nodes_status(&mut self, status: Status) {
        self.absent_nodes_status = status;
    }
}

/// The root interface of every plugin.
///
/// A plugin implements the extension-point traits it supports and returns `Some(self)` from the
/// matching `as_*` accessors; the runtime checks them against the profile's configuration.
pub trait Plugin: Send + Sync + 'static {
    fn name(&self) -> &str;

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
    /// How the plugin signs a pod for opportunistic batching; `None`: it cannot, and a profile
    /// with it at PreFilter, Filter, PreScore or Score never batches.
    fn as_sign(&self) -> Option<&dyn SignPlugin> {
        None
    }
    /// The cluster events that may make the pods this plugin rejected schedulable. A plugin that
    /// rejects pods (PreEnqueue, PreFilter, Filter, Reserve, Permit) and returns `None` is
    /// requeued by every event (upstream's default for plugins without `EnqueueExtensions`).
    fn as_enqueue_extensions(&self) -> Option<&dyn EnqueueExtensions> {
        None
    }
    /// Whether a pod group can still meet its constraints as its cycle goes on (upstream 1.37's
    /// PlacementFeasible; not configurable: GangScheduling's, when the profile has it).
    fn as_placement_feasible(&self) -> Option<&dyn PlacementFeasiblePlugin> {
        None
    }
    /// What may make an unschedulable pod group schedulable (upstream 1.37's PodGroupPostFilter:
    /// workload-aware preemption).
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        None
    }
    /// Where a pod group may be placed whole (upstream's PlacementGenerate: topology domains).
    fn as_placement_generate(&self) -> Option<&dyn PlacementGeneratePlugin> {
        None
    }
    /// How good a pod group's placement is (upstream's PlacementScore).
    fn as_placement_score(&self) -> Option<&dyn PlacementScorePlugin> {
        None
    }
}

/// Whether an event may make `pod`, which the plugin rejected, schedulable: upstream's
/// `QueueingHintFn(pod, oldObj, newObj)`. `old` is `None` for an add, `new` for a delete. An
/// error counts as [`QueueingHint::Queue`], so a pod is never stuck by a hint that failed.
pub type QueueingHintFn = Arc<
    dyn Fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> Result<QueueingHint, HintError>
        + Send
        + Sync,
>;

/// An event a plugin registers, with its hint (none: always Queue).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    pub event: ClusterEvent,
    pub hint: Option<QueueingHintFn>,
}

impl ClusterEventWithHint {
    /// `event`, always worth a retry.
    pub fn new(event: ClusterEvent) -> ClusterEventWithHint {
        ClusterEventWithHint { event, hint: None }
    }

    /// `event`, filtered by `hint`.
    pub fn with_hint(
        event: ClusterEvent,
        hint: impl Fn(
            &PodInfo,
            Option<&EventObject>,
            Option<&EventObject>,
        ) -> Result<QueueingHint, HintError>
        + Send
        + Sync
        + 'static,
    ) -> ClusterEventWithHint {
        ClusterEventWithHint {
            event,
            hint: Some(Arc::new(hint)),
        }
    }

    /// What the hint answers (Queue without one, or on an error).
    pub fn hint_for(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> QueueingHint {
        match &self.hint {
            None => QueueingHint::Queue,
            Some(hint) => hint(pod, old, new).unwrap_or(QueueingHint::Queue),
        }
    }
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterEventWithHint")
            .field("event", &self.event)
            .field("hint", &self.hint.is_some())
            .finish()
    }
}

/// Upstream's `EnqueueExtensions`: which cluster events can make a pod this plugin rejected
/// schedulable, each with a queueing hint. A pod the plugin rejected is retried only on these
/// events, and only when the hint says Queue. An empty list: only the pod's own updates that the
/// plugin's PreEnqueue lets through move it (SchedulingGates).
pub trait EnqueueExtensions: Send + Sync {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint>;
}

/// What the framework running a profile offers its plugins while it runs them: upstream's
/// `framework.Handle` (`pkg/scheduler/framework/interface.go`), the part that calls back into the
/// profile (its `PluginsRunner` and `RunFilterPluginsWithNominatedPods`). Preemption uses it to
/// simulate removing victims. The runtime's `Framework` implements it; the components shared by
/// every profile (API, waiting pods, snapshot, listers) reach a plugin's factory in the registry's
/// `Handle`.
pub trait FrameworkHandle: Send + Sync {
    /// The profile's PreFilter `AddPod` extensions, as if `pod_to_add` ran on `node`.
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status;

    /// The profile's PreFilter `RemovePod` extensions, as if `pod_to_remove` left `node`.
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status;

    /// The profile's Filter plugins on `node`, counting the pods nominated to it that are at
    /// least as important as `pod` (upstream's `RunFilterPluginsWithNominatedPods`).
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
}

/// A pod's scheduling signature (upstream's `PodSignature`, KEP-5598): pods with the same
/// signature get the same Filter status and the same raw Score from every plugin on every node in
/// the same state, and placing one of them changes no other node's results for the next. Opaque
/// bytes, only compared; the runtime builds it from the plugins' [`SignFragment`]s.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PodSignature(Box<[u8]>);

impl PodSignature {
    /// The signature of these fragments: each key once (plugins reading the same part of the pod
    /// give the same key and value), in key order.
    pub fn from_fragments(fragments: impl IntoIterator<Item = SignFragment>) -> PodSignature {
        let by_key: std::collections::BTreeMap<&'static str, Vec<u8>> =
            fragments.into_iter().map(|f| (f.key, f.value)).collect();
        let mut bytes = Vec::with_capacity(by_key.values().map(|v| v.len() + 48).sum());
        for (key, value) in by_key {
            bytes.extend_from_slice(key.as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(&(value.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&value);
        }
        PodSignature(bytes.into_boxed_slice())
    }
}

impl fmt::Debug for PodSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PodSignature({} bytes)", self.0.len())
    }
}

/// One part of a pod's signature: a key naming what it covers (upstream's signer names, in
/// [`signer_names`]) and that part of the pod in canonical bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignFragment {
    pub key: &'static str,
    pub value: Vec<u8>,
}

impl SignFragment {
    pub fn new(key: &'static str, value: impl Into<Vec<u8>>) -> SignFragment {
        SignFragment {
            key,
            value: value.into(),
        }
    }

    /// `value` as JSON (maps serialize in key order, so equal values give equal bytes).
    pub fn json(key: &'static str, value: &impl serde::Serialize) -> Result<SignFragment, Status> {
        serde_json::to_vec(value)
            .map(|value| SignFragment { key, value })
            .map_err(|e| Status::error(format!("signing {key}: {e}")))
    }
}

/// Upstream's signer names (`k8s.io/kube-scheduler/framework/signers.go`), and ksched's own
/// where its signature covers more than upstream's.
pub mod signer_names {
    pub const DYNAMIC_RESOURCES: &str = "v1.Pod.Spec.DynamicResources";
    pub const IMAGE_NAMES: &str = "v1.Pod.Spec.CanonicalImageNames()";
    pub const LABELS: &str = "v1.Pod.Labels";
    pub const NODE_NAME: &str = "v1.Pod.Spec.NodeName";
    pub const NODE_AFFINITY: &str = "v1.Pod.Spec.Affinity.NodeAffinity";
    pub const NODE_SELECTOR: &str = "v1.Pod.Spec.Affinity.NodeSelector";
    pub const HOST_PORTS: &str = "v1.Pod.Spec.HostPorts()";
    pub const RESOURCES: &str = "v1.Pod.Spec.ContainerRequestsAndOverheads()";
    pub const SCHEDULER_NAME: &str = "v1.Pod.Spec.SchedulerName";
    pub const TOLERATIONS: &str = "v1.Pod.Spec.Tolerations";
    pub const VOLUMES: &str = "v1.Pod.Spec.Volumes.NonSyntheticSources()";
    pub const FEATURES: &str = "v1.Pod.Spec.RequiredFeatures()";
    /// ksched: claims and names in volumes resolve in the pod's namespace, as do affinity terms.
    pub const NAMESPACE: &str = "v1.Pod.Namespace";
    /// ksched: nominated pods count on a node for pods of lower or equal priority only.
    pub const PRIORITY: &str = "v1.Pod.Spec.Priority";
    /// ksched: the scoring requests (containers requesting nothing count 100m CPU / 200Mi).
    pub const NON_ZERO_REQUESTS: &str = "v1.Pod.Spec.NonZeroRequests()";
    /// ksched: the PersistentVolume each of the pod's claims is bound to.
    pub const CLAIM_BINDINGS: &str = "v1.Pod.Spec.Volumes.ClaimBindings()";
}

/// Implemented by plugins that filter or score, so identical pods can share their work
/// (upstream's `SignPlugin`). The fragments must cover everything of the pod the plugin's
/// PreFilter, Filter, PreScore and Score read. An `Err` makes the pod unsignable (its cycle runs in
/// full): for pods whose results on one node depend on where other pods go (inter-pod affinity,
/// topology spread) or on state the scheduler changes for them (unbound volume claims).
pub trait SignPlugin: Plugin {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status>;
}

/// Called before a pod enters the active queue; a non-success status keeps it out
/// (SchedulingGates).
pub trait PreEnqueuePlugin: Plugin {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Orders the scheduling queue. Only one QueueSort plugin may be enabled.
pub trait QueueSortPlugin: Plugin {
    /// Whether `a` should be scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// Computes per-pod state before filtering; may restrict the candidate nodes.
pub trait PreFilterPlugin: Plugin {
    /// Returns an optional node restriction and a status. `Skip` means this plugin's Filter (and
    /// its PreFilter extensions) are skipped for this pod.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status);

    /// AddPod/RemovePod, used to evaluate the pod with other pods added/removed (nominated pods,
    /// preemption victims). `None` when the plugin's PreFilter state does not depend on other pods.
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }
}

/// Keeps a PreFilter plugin's state in step with pods added to or removed from a node.
pub trait PreFilterExtensions: Send + Sync {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        node: &NodeInfo,
    ) -> Status;

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        node: &NodeInfo,
    ) -> Status;
}

/// Decides whether the pod can run on one node. Called concurrently for many nodes.
pub trait FilterPlugin: Plugin {
    /// Success, Unschedulable, UnschedulableAndUnresolvable (or Error).
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// Runs when no node fits (preemption).
pub trait PostFilterPlugin: Plugin {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status);

    /// What the runtime calls: `post_filter` with the plugin's own profile at hand, for plugins
    /// that simulate (preemption runs the PreFilter AddPod/RemovePod extensions and Filter on
    /// copies of the state and the node). Defaults to [`PostFilterPlugin::post_filter`].
    fn post_filter_with_framework(
        &self,
        _fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        self.post_filter(state, pod, snapshot, filtered)
    }
}

/// Computes per-pod state before scoring, given the feasible nodes. `Skip` skips the plugin's Score.
pub trait PreScorePlugin: Plugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Status;
}

/// Ranks feasible nodes. Called concurrently for many nodes.
pub trait ScorePlugin: Plugin {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Whether [`ScorePlugin::normalize_score`] does anything (upstream's `ScoreExtensions() != nil`).
    fn has_normalize_score(&self) -> bool {
        false
    }

    /// Rescales all nodes' scores into `0..=MAX_NODE_SCORE`.
    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _scores: &mut [NodeScore],
    ) -> Status {
        Status::success()
    }
}

/// Reserves (and releases) resources for the pod on the chosen node, in the scheduling cycle.
pub trait ReservePlugin: Plugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node_name: &str) -> Status;
    /// Must be idempotent and must not fail.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node_name: &str);
}

/// Approves, rejects or delays (Wait, with a timeout) the binding of the pod.
pub trait PermitPlugin: Plugin {
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node_name: &str) -> (Status, Duration);
}

/// How far a pod group's cycle has got: members not tried yet, and members placed (in this
/// cycle or before it). The group cycle also leaves it in each placed member's [`CycleState`]
/// under [`PLACEMENT_PROGRESS`] for Permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementProgress {
    pub remaining: usize,
    pub scheduled: usize,
}

/// The [`CycleState`] key of the group cycle's [`PlacementProgress`] when a member reaches Permit.
pub const PLACEMENT_PROGRESS: &str = "PlacementProgress";

/// Checks a pod group's constraints during its cycle (upstream 1.37's `PlacementFeasiblePlugin`):
/// Success once they are met, Wait while more members may meet them, Unschedulable once they
/// cannot be met (the cycle stops early).
pub trait PlacementFeasiblePlugin: Plugin {
    fn placement_feasible(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        progress: PlacementProgress,
    ) -> Status;
}

/// A member's node in a placement of its group (upstream's `ProposedAssignment`), with the cycle
/// state its PreFilter left (the members before it assumed).
#[derive(Clone)]
pub struct ProposedAssignment {
    pub pod: Arc<PodInfo>,
    pub node: String,
    pub state: CycleState,
}

/// A placement of a pod group on a cluster (upstream's `PodGroupSchedulingFunc`): the group's
/// algorithm run on the snapshot given, without changing it or the scheduler's cache; the
/// members placed, and the group's status (Success when its constraints are met).
pub type PodGroupPlacement<'a> = dyn Fn(&Snapshot) -> (Vec<ProposedAssignment>, Status) + 'a;

/// What a PodGroupPostFilter that made room returns (upstream's `PodGroupPostFilterResult`): the
/// node each member (`namespace/name`) is nominated to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodGroupPostFilterResult {
    pub nominations: BTreeMap<String, String>,
}

/// A set of nodes a pod group is tried on as a whole (upstream's `Placement`): one topology
/// domain, or every node. The nodes are the cycle's snapshot's, before the group was tried.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The domain (the topology label's value); empty for every node.
    pub name: String,
    pub nodes: Vec<Arc<NodeInfo>>,
}

/// The pod group the placement points look at: the group, and its members scheduled before
/// this cycle (bound or assumed) as `(namespace/name, node)`.
pub struct GroupInCycle<'a> {
    pub group: &'a k8s_openapi::api::scheduling::v1beta1::PodGroup,
    pub scheduled: &'a [(String, String)],
}

/// Splits the nodes a pod group may use into placements (upstream's `PlacementGeneratePlugin`);
/// the group cycle tries the group in each.
pub trait PlacementGeneratePlugin: Plugin {
    /// The placements within `parent` (Unschedulable or Error when there is none to try).
    fn generate_placements(
        &self,
        group: &GroupInCycle<'_>,
        parent: &Placement,
        snapshot: &Snapshot,
    ) -> Result<Vec<Placement>, Status>;

    /// How many of `placements` (this plugin's) the group cycle finds feasible before it scores
    /// them and tries no more: all unless the plugin limits it.
    fn placements_to_score(&self, placements: &[Placement]) -> usize {
        placements.len()
    }
}

/// Where a pod group's members landed in one placement.
pub struct PlacementAssignments<'a> {
    pub placement: &'a Placement,
    /// The members placed, each with its node.
    pub members: Vec<(&'a PodInfo, &'a str)>,
}

/// Ranks the placements a pod group fits in (upstream's `PlacementScorePlugin`); the group
/// goes to the one with the highest weighted sum.
pub trait PlacementScorePlugin: Plugin {
    fn score_placement(
        &self,
        group: &GroupInCycle<'_>,
        assignments: &PlacementAssignments<'_>,
    ) -> Result<i64, Status>;

    /// Whether [`PlacementScorePlugin::normalize_placement_scores`] does anything (upstream's
    /// `PlacementScoreExtensions() != nil`).
    fn has_normalize_placement_scores(&self) -> bool {
        false
    }

    /// Upstream's `NormalizePlacementScore`, over every placement's score: must leave them in
    /// 0..=100. The default leaves them as they are (a plugin without the extension).
    fn normalize_placement_scores(
        &self,
        _group: &GroupInCycle<'_>,
        _scores: &mut [i64],
    ) -> Result<(), Status> {
        Ok(())
    }
}

/// Runs once for a pod group whose cycle did not place it (upstream's
/// `PodGroupPostFilterPlugin`): Success when it made room (preemption), else why not.
pub trait PodGroupPostFilterPlugin: Plugin {
    /// `members`: the group's pods tried in the cycle; `snapshot`: the cluster the cycle saw;
    /// `place`: the group's algorithm, to try the group on a changed copy of it.
    fn pod_group_post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        members: &[Arc<PodInfo>],
        snapshot: &Snapshot,
        place: &PodGroupPlacement<'_>,
    ) -> (Option<PodGroupPostFilterResult>, Status);
}

/// Runs before binding (volume binding and the like); may do API calls.
#[async_trait]
pub trait PreBindPlugin: Plugin {
    /// Upstream's PreBindPreFlight, called before Permit's wait: Success when PreBind will do
    /// something for this pod on `node_name`, Skip when it has nothing to do (PreBind is then not
    /// called), or Error. Cheap and without I/O. When any plugin returns Success the scheduler
    /// publishes the node as `status.nominatedNodeName` before binding (upstream's
    /// NominatedNodeNameForExpectation). The default says PreBind will act.
    fn pre_bind_pre_flight(&self, _state: &CycleState, _pod: &PodInfo, _node_name: &str) -> Status {
        Status::success()
    }

    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status;
}

/// Binds the pod to the node. `Skip` passes the pod on to the next Bind plugin.
#[async_trait]
pub trait BindPlugin: Plugin {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status;
}

/// Informational, after a successful bind.
#[async_trait]
pub trait PostBindPlugin: Plugin {
    async fn post_bind(&self, state: &CycleState, pod: &PodInfo, node_name: &str);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_filter_result_merge() {
        let all = PreFilterResult::all_nodes();
        let ab = PreFilterResult::nodes(["a".to_string(), "b".to_string()]);
        let bc = PreFilterResult::nodes(["b".to_string(), "c".to_string()]);
        assert_eq!(all.clone().merge(all.clone()), all);
        assert_eq!(all.clone().merge(ab.clone()), ab);
        assert_eq!(ab.merge(bc), PreFilterResult::nodes(["b".to_string()]));
    }
}
