//! `SchedulerProfile`: one scheduler profile, rendered by the operator into a running scheduler.
// kube's printcolumn(...) repeats `type_ = ...` per column, which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::schema;
use crate::emulation::{
    GENERIC_WORKLOAD, GENERIC_WORKLOAD_SINCE, SUPPORTED, TOPOLOGY_AWARE_WORKLOAD_SCHEDULING,
};

/// Spec of a `SchedulerProfile`. `plugins`, `pluginConfig` and `percentageOfNodesToScore` have exactly
/// the shape of one profile of an upstream `KubeSchedulerConfiguration`; the profile's scheduler name
/// is its `metadata.name`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ksched.io",
    version = "v1alpha1",
    kind = "SchedulerProfile",
    plural = "schedulerprofiles",
    shortname = "sp",
    category = "ksched",
    status = "SchedulerProfileStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A scheduler profile: the operator runs a leader-elected scheduler named after it.",
    validation = Rule::new("self.metadata.name.size() <= 48 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name names the scheduler and its objects (ksched-profile-<name>): use at most 48 lowercase letters, digits and '-', starting with a letter"),
    validation = Rule::new("self.metadata.name != 'default-scheduler'").message("metadata.name default-scheduler is the name kube-scheduler serves: a second scheduler of that name would race it for every pod of the cluster. Pick another name and set spec.schedulerName of the pods that should use this profile to it"),
    printcolumn(name = "MODE", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "READY", type_ = "string", json_path = ".status.ready"),
    printcolumn(name = "LEADER", type_ = "string", json_path = ".status.leader"),
    printcolumn(name = "PENDING", type_ = "integer", json_path = ".status.pendingPods"),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "CONFIG",
        type_ = "string",
        json_path = ".status.configHash",
        priority = 1
    ),
    printcolumn(
        name = "KUBERNETES",
        type_ = "string",
        json_path = ".status.kubernetesVersion",
        priority = 1
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("self.podMaxBackoffSeconds >= self.podInitialBackoffSeconds").message("podMaxBackoffSeconds must be greater than or equal to podInitialBackoffSeconds: raise podMaxBackoffSeconds or lower podInitialBackoffSeconds"))]
#[x_kube(validation = Rule::new("self.mode != 'Embedded' || self.replicas <= 1").message("mode Embedded runs one scheduler inside the operator: set replicas to 1, or use mode Deployment for more replicas"))]
#[x_kube(validation = Rule::new(needs_minor_cel(WORKLOAD_AWARE)).message(needs_minor_message(WORKLOAD_AWARE, GENERIC_WORKLOAD).as_str()))]
#[x_kube(validation = Rule::new(needs_minor_cel(TOPOLOGY_AWARE)).message(needs_minor_message(TOPOLOGY_AWARE, TOPOLOGY_AWARE_WORKLOAD_SCHEDULING).as_str()))]
#[x_kube(validation = Rule::new("!self.topologyAwareScheduling || self.workloadAwareScheduling").message(format!("spec.{TOPOLOGY_AWARE} {}", topology_aware_needs_workload_aware()).as_str()))]
#[serde(rename_all = "camelCase")]
pub struct SchedulerProfileSpec {
    /// Plugins enabled and disabled per extension point, exactly as `profiles[].plugins` of a
    /// KubeSchedulerConfiguration. Unset: upstream kube-scheduler's default plugins, with their
    /// weights. What is set here is merged with the defaults as upstream merges it: an enabled
    /// plugin is added, a disabled one removed, `"*"` disables every default at that point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,

    /// Arguments per plugin, exactly as `profiles[].pluginConfig` of a KubeSchedulerConfiguration
    /// (at most 32 entries, one per plugin). A plugin without an entry gets its default args.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(c, self.exists_one(d, d.name == c.name))").message("pluginConfig lists the same plugin more than once: merge the args into a single entry per plugin"))]
    pub plugin_config: Vec<PluginConfig>,

    /// Percentage (0-100) of the cluster's nodes to find feasible before the scheduler stops
    /// filtering and scores them. Default: unset or 0, adaptive as upstream (50% less 1% per 125
    /// nodes, at least 5%, and never fewer than 100 nodes); 100 scores every feasible node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub percentage_of_nodes_to_score: Option<i32>,

    /// Where the scheduler runs. `Deployment` (the default): a Deployment `ksched-profile-<name>` in the
    /// operator namespace runs `replicas` scheduler pods that elect a leader. `Embedded`: the
    /// operator runs the scheduler inside its own process (one replica; for small clusters,
    /// development and demos); `image`, `resources` and the pod placement fields are then unused.
    #[serde(default)]
    pub mode: ProfileMode,

    /// Scheduler pods (0-10; default 1). They elect a leader on the Lease `ksched-profile-<name>`: one
    /// schedules, the others stand by. 0 runs no scheduler (pods naming the profile stay
    /// Pending); `Embedded` allows at most 1.
    #[serde(default = "default_replicas")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 10").message("replicas must be between 0 and 10 (only the leader schedules; use suspend: true to stop scheduling)"))]
    pub replicas: i32,

    /// Container image of the scheduler pods, a reference such as
    /// `registry.example.com/ksched:0.1.0` (at most 1024 characters). Default: the operator's own
    /// image (`KSCHED_IMAGE`, the chart's `schedulerImage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("self != ''").message("image must not be empty: remove the field to use the operator's image"))]
    #[x_kube(validation = Rule::new(IMAGE_RULE).message("image must be a container image reference, [registry[:port]/]path[:tag][@sha256:digest] with a lowercase path, such as registry.example.com/ksched:0.1.0: fix spec.image, or remove it to use the operator's image"))]
    pub image: Option<String>,

    /// Compute resources of the scheduler container: `requests` and `limits` of `cpu` (cores, e.g.
    /// `100m` or `1`) and `memory` (bytes, e.g. `256Mi`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::container_resources)]
    pub resources: Option<ResourceRequirements>,

    /// Node labels the scheduler pods require (`key: value`). Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the scheduler pods (at most 64; operator `Exists` or `Equal`). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])").message("tolerations[].operator must be Exists or Equal (the API server refuses any other operator in the scheduler's Deployment)"))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])").message("tolerations[].effect must be NoSchedule, PreferNoSchedule, NoExecute or empty (all effects)"))]
    pub tolerations: Vec<Toleration>,

    /// Node and pod (anti-)affinity of the scheduler pods. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// PriorityClass of the scheduler pods; it must exist (the scheduler pods are not created
    /// otherwise, and the profile's status says so). Default: none (priority 0 or the cluster's
    /// global default class); `system-cluster-critical` as kube-scheduler uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// The Kubernetes minor the scheduler behaves as: that minor's kube-scheduler defaults,
    /// plugins, feature gates, messages and metric names (rendered as `--emulated-version`).
    /// One of the minors this ksched emulates (1.36, 1.37). Unset: the API server's minor,
    /// decided when the scheduler starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(crate::emulation::supported_cel()).message(crate::emulation::supported_cel_message().as_str()))]
    pub kubernetes_version: Option<String>,

    /// Workload-aware (gang) scheduling of Kubernetes 1.37 for this profile (default false). True:
    /// the scheduler runs with the feature gate `GenericWorkload=true` (`--feature-gates`; off by
    /// default upstream), so GangScheduling joins its default plugins and the pods that name a
    /// `scheduling.k8s.io/v1beta1` PodGroup in `spec.schedulingGroup.podGroupName` are scheduled as
    /// one group: a gang binds at least `minCount` of its pods or none. The API server must serve
    /// that API (kube-apiserver `--feature-gates=GenericWorkload=true`
    /// `--runtime-config=scheduling.k8s.io/v1beta1=true`). Needs Kubernetes 1.37 or later: refused
    /// with `kubernetesVersion` 1.36, or on a 1.36 cluster when `kubernetesVersion` is unset.
    #[serde(default)]
    pub workload_aware_scheduling: bool,

    /// Topology-aware workload scheduling of Kubernetes 1.37 for this profile (default false).
    /// True: the scheduler also runs with the feature gate `TopologyAwareWorkloadScheduling=true`
    /// (`--feature-gates`; alpha and off by default upstream), so TopologyPlacementGenerator and
    /// PodGroupPodsCount join its default plugins and a PodGroup with
    /// `spec.schedulingConstraints.topology: [{key: <node label>}]` is placed with all its members
    /// in one domain of that node label (one value of it). Needs `workloadAwareScheduling: true`
    /// and Kubernetes 1.37 or later: refused without it, with `kubernetesVersion` 1.36, or on a
    /// 1.36 cluster when `kubernetesVersion` is unset. The API server must keep the constraint
    /// (kube-apiserver `--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true`);
    /// without that gate it drops `schedulingConstraints` from the PodGroups it stores.
    #[serde(default)]
    pub topology_aware_scheduling: bool,

    /// Log verbosity of the scheduler, as kube-scheduler's `-v` (0-10; default 2). 4 logs every
    /// scheduling decision, 5 and more the plugins' details.
    #[serde(default = "default_log_level")]
    #[schemars(range(min = 0, max = 10))]
    pub log_level: i32,

    /// Leader election timings of the scheduler replicas (Go durations). The Lease is always the
    /// profile's own, `ksched-profile-<name>` in the operator namespace. Default: 15s, 10s, 2s.
    #[serde(default)]
    pub leader_election: LeaderElection,

    /// The scheduler's rate limits towards the API server, as `clientConnection` of a
    /// KubeSchedulerConfiguration. Default: 50 requests per second, bursts of 100.
    #[serde(default)]
    pub client_connection: ClientConnection,

    /// Seconds a pod that failed to schedule waits before its first retry (at least 1; default
    /// 1); it doubles with every failed attempt up to `podMaxBackoffSeconds`.
    #[serde(default = "default_initial_backoff")]
    #[x_kube(validation = Rule::new("self >= 1").message("podInitialBackoffSeconds must be at least 1"))]
    pub pod_initial_backoff_seconds: i64,

    /// Seconds a pod that failed to schedule waits at most before its next retry (default 10; at
    /// least `podInitialBackoffSeconds`).
    #[serde(default = "default_max_backoff")]
    pub pod_max_backoff_seconds: i64,

    /// Stop scheduling but keep everything rendered (default false): the Deployment is scaled to 0,
    /// or the Embedded scheduler stopped; its configuration, RBAC and Lease stay.
    #[serde(default)]
    pub suspend: bool,
}

/// An image reference as the container runtimes parse it (distribution's reference grammar): an
/// optional registry host (DNS labels, optional port), lowercase path components, an optional tag
/// and an optional digest. An empty string has its own rule.
const IMAGE_RULE: &str = "self == '' || self.matches('^(([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+(([.]|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([.]|_|__|-+)[a-z0-9]+)*)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')";

/// `workloadAwareScheduling` (gate `GenericWorkload`).
pub(crate) const WORKLOAD_AWARE: &str = "workloadAwareScheduling";
/// `topologyAwareScheduling` (gate `TopologyAwareWorkloadScheduling`).
pub(crate) const TOPOLOGY_AWARE: &str = "topologyAwareScheduling";

impl SchedulerProfileSpec {
    /// The spec's fields that turn on a feature gate of its scheduler, with the gate: the fields
    /// set true, in the order of the spec. Each gate is honoured from [`GENERIC_WORKLOAD_SINCE`].
    pub(crate) fn gate_fields(&self) -> Vec<(&'static str, &'static str)> {
        [
            (
                WORKLOAD_AWARE,
                self.workload_aware_scheduling,
                GENERIC_WORKLOAD,
            ),
            (
                TOPOLOGY_AWARE,
                self.topology_aware_scheduling,
                TOPOLOGY_AWARE_WORKLOAD_SCHEDULING,
            ),
        ]
        .into_iter()
        .filter(|(_, on, _)| *on)
        .map(|(field, _, gate)| (field, gate))
        .collect()
    }
}

/// Why `topologyAwareScheduling` is refused without `workloadAwareScheduling`, and the fix (the
/// CRD's message after the field, and the operator's reason).
pub(crate) fn topology_aware_needs_workload_aware() -> String {
    format!(
        "needs spec.{WORKLOAD_AWARE} ({TOPOLOGY_AWARE_WORKLOAD_SCHEDULING} places the pod groups that {GENERIC_WORKLOAD} schedules): set spec.{WORKLOAD_AWARE}: true as well, or remove {TOPOLOGY_AWARE}"
    )
}

/// The CEL rule refusing the boolean `field` with a `kubernetesVersion` older than the first
/// minor whose workload gates ksched honours.
fn needs_minor_cel(field: &str) -> String {
    let older: Vec<String> = SUPPORTED
        .iter()
        .filter(|m| **m < GENERIC_WORKLOAD_SINCE)
        .map(|m| format!("'{m}'"))
        .collect();
    format!(
        "!self.{field} || !has(self.kubernetesVersion) || !(self.kubernetesVersion in [{}])",
        older.join(", ")
    )
}

/// The message of [`needs_minor_cel`] for `field`, which turns on `gate`.
fn needs_minor_message(field: &str, gate: &str) -> String {
    format!(
        "spec.{field} needs Kubernetes {GENERIC_WORKLOAD_SINCE} or later (the {gate} feature gate): set spec.kubernetesVersion to {GENERIC_WORKLOAD_SINCE} (or leave it out on a {GENERIC_WORKLOAD_SINCE} cluster), or remove {field}"
    )
}

fn default_replicas() -> i32 {
    1
}
fn default_log_level() -> i32 {
    2
}
fn default_initial_backoff() -> i64 {
    1
}
fn default_max_backoff() -> i64 {
    10
}

/// How a profile's scheduler runs.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ProfileMode {
    /// A Deployment runs the scheduler (the default).
    #[default]
    Deployment,
    /// The operator runs the scheduler inside its own process.
    Embedded,
}

/// Plugins per extension point, exactly as `profiles[].plugins` of a KubeSchedulerConfiguration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    /// PreEnqueue: before a pod enters the active queue (e.g. SchedulingGates). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_enqueue: Option<PluginSet>,
    /// QueueSort: orders the queue; exactly one plugin (default PrioritySort). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_sort: Option<PluginSet>,
    /// PreFilter: checks and precomputes per pod before filtering. Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_filter: Option<PluginSet>,
    /// Filter: rejects nodes that cannot run the pod. Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<PluginSet>,
    /// PostFilter: runs when no node fits (DefaultPreemption). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_filter: Option<PluginSet>,
    /// PreScore: precomputes per pod before scoring. Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_score: Option<PluginSet>,
    /// Score: ranks the feasible nodes; each plugin's score (0-100) times its `weight`. Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<PluginSet>,
    /// Reserve: reserves resources on the chosen node (VolumeBinding, DynamicResources). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<PluginSet>,
    /// Permit: approves, rejects or holds the pod before binding (Coscheduling). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<PluginSet>,
    /// PreBind: runs before binding (binds volumes, allocates claims). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_bind: Option<PluginSet>,
    /// Bind: binds the pod to the node (DefaultBinder). Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<PluginSet>,
    /// PostBind: runs after a successful binding. Unset: the defaults at this extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_bind: Option<PluginSet>,
    /// Plugins enabled (or disabled) at every extension point they implement, as upstream's
    /// `multiPoint`; an entry at a specific point overrides it there. Unset: the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_point: Option<PluginSet>,
}

/// Plugins enabled and disabled at one extension point.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct PluginSet {
    /// Plugins to run at this point, after the defaults that are not disabled, in this order.
    /// Default: none beyond the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<Plugin>,
    /// Default plugins not to run at this point; `name: "*"` disables all of them. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Plugin>,
}

/// One plugin, by its upstream name; `weight` only matters at score.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct Plugin {
    /// The plugin's name as registered, e.g. `NodeResourcesFit` (upstream's names; `ksched config
    /// validate` lists them); `"*"` in `disabled` means every default plugin.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Score weight (0-100), a multiplier of the plugin's 0-100 node score; used at score and
    /// multiPoint only. Default: unset or 0 means 1 for a plugin listed here; the default
    /// plugins keep upstream's weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<i32>,
}

/// Args of one plugin, as `profiles[].pluginConfig[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct PluginConfig {
    /// The plugin these args are for, e.g. `NodeResourcesFit`.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The plugin's args, the same object as in a KubeSchedulerConfiguration (e.g.
    /// `scoringStrategy` for NodeResourcesFit); validated by the plugin, with the field named in
    /// the error. Unset: the plugin's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub args: Option<serde_json::Value>,
}

/// Leader election timings (Go durations). The lease name and namespace are not settable: each
/// profile has its own Lease `ksched-profile-<name>`, so no two schedulers ever share one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("duration(self.leaseDuration) > duration(self.renewDeadline)").message("leaderElection.leaseDuration must be longer than leaderElection.renewDeadline"))]
#[x_kube(validation = Rule::new("duration(self.renewDeadline) > duration(self.retryPeriod)").message("leaderElection.renewDeadline must be longer than leaderElection.retryPeriod"))]
#[serde(rename_all = "camelCase")]
pub struct LeaderElection {
    /// How long a standby replica waits after the leader's last renewal before it takes the Lease
    /// (a Go duration such as `15s`, 1s to 1h; default `15s`): how long a dead leader leaves the
    /// profile without a scheduler.
    #[serde(default = "default_lease_duration")]
    #[schemars(schema_with = "schema::go_duration")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('1h')").message("leaderElection.leaseDuration must be between 1s and 1h (the Lease records whole seconds, and a dead leader leaves the profile without a scheduler this long): the default is 15s"))]
    pub lease_duration: String,
    /// How long the leader keeps leading without a successful renewal before it stops scheduling
    /// (a Go duration, up to 1h; default `10s`); shorter than `leaseDuration`.
    #[serde(default = "default_renew_deadline")]
    #[schemars(schema_with = "schema::go_duration")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('1h')").message("leaderElection.renewDeadline must be more than 0s and at most 1h: the default is 10s"))]
    pub renew_deadline: String,
    /// How often replicas try to acquire or renew the Lease (a Go duration, up to 1h; default
    /// `2s`); shorter than `renewDeadline`.
    #[serde(default = "default_retry_period")]
    #[schemars(schema_with = "schema::go_duration")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('1h')").message("leaderElection.retryPeriod must be more than 0s and at most 1h: the default is 2s"))]
    pub retry_period: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            lease_duration: default_lease_duration(),
            renew_deadline: default_renew_deadline(),
            retry_period: default_retry_period(),
        }
    }
}

fn default_lease_duration() -> String {
    "15s".into()
}
fn default_renew_deadline() -> String {
    "10s".into()
}
fn default_retry_period() -> String {
    "2s".into()
}

/// Client rate limits, as `clientConnection` of a KubeSchedulerConfiguration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct ClientConnection {
    /// Sustained requests per second the scheduler sends to the API server (0-100000; default 50).
    /// Watches are not limited.
    #[serde(default = "default_qps")]
    #[schemars(range(min = 0.0, max = 100000.0))]
    pub qps: f64,
    /// Requests the scheduler may send at once above `qps` (0-100000; default 100).
    #[serde(default = "default_burst")]
    #[schemars(range(min = 0, max = 100000))]
    pub burst: i32,
}

impl Default for ClientConnection {
    fn default() -> Self {
        Self {
            qps: default_qps(),
            burst: default_burst(),
        }
    }
}

fn default_qps() -> f64 {
    50.0
}
fn default_burst() -> i32 {
    100
}

/// Observed state, kstatus-compatible: `Ready` always present; `Reconciling` and `Stalled` only
/// while true.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerProfileStatus {
    /// The `metadata.generation` this status describes; older than the generation while the
    /// operator has not seen the latest spec yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (always; its reason is the STATUS column: Running, RollingOut, NoLeader,
    /// InvalidConfiguration, ...), `ConfigValid`, `LeaderElected`, `LeafPoliciesValid`, and
    /// `Reconciling` or `Stalled` while true (kstatus).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Scheduler pods that exist (1 for a running Embedded scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Scheduler pods that are ready (1 for a running Embedded scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// `readyReplicas/replicas`, for the READY column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Holder identity of the profile's Lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Hash of the rendered scheduler configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// LeafClusterPolicies rendered into this profile, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaf_policies: Vec<String>,
    /// Pods Pending with this scheduler name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_pods: Option<i32>,
    /// The Kubernetes minor the scheduler runs as: `spec.kubernetesVersion`, else the API
    /// server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}
