//! `SchedulerProfile`: one scheduler profile, rendered by the operator into a running scheduler.
// kube's printcolumn(...) repeats `type_ = ...` per column, which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::schema;

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
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("self.podMaxBackoffSeconds >= self.podInitialBackoffSeconds").message("podMaxBackoffSeconds must be greater than or equal to podInitialBackoffSeconds: raise podMaxBackoffSeconds or lower podInitialBackoffSeconds"))]
#[x_kube(validation = Rule::new("self.mode != 'Embedded' || self.replicas <= 1").message("mode Embedded runs one scheduler inside the operator: set replicas to 1, or use mode Deployment for more replicas"))]
#[serde(rename_all = "camelCase")]
pub struct SchedulerProfileSpec {
    /// Plugins enabled and disabled per extension point, as in a KubeSchedulerConfiguration profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,

    /// Arguments per plugin, as in a KubeSchedulerConfiguration profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(c, self.exists_one(d, d.name == c.name))").message("pluginConfig lists the same plugin more than once: merge the args into a single entry per plugin"))]
    pub plugin_config: Vec<PluginConfig>,

    /// Percentage of feasible nodes to find before scoring (0 or unset = adaptive, as upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub percentage_of_nodes_to_score: Option<i32>,

    /// Where the scheduler runs: in its own Deployment, or inside the operator process.
    #[serde(default)]
    pub mode: ProfileMode,

    /// Scheduler replicas (leader-elected; one schedules at a time).
    #[serde(default = "default_replicas")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 10").message("replicas must be between 0 and 10 (only the leader schedules; use suspend: true to stop scheduling)"))]
    pub replicas: i32,

    /// Scheduler image; defaults to the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("image must not be empty: remove the field to use the operator's image"))]
    pub image: Option<String>,

    /// Resources of the scheduler container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Node selector of the scheduler pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the scheduler pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])").message("tolerations[].operator must be Exists or Equal (the API server refuses any other operator in the scheduler's Deployment)"))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])").message("tolerations[].effect must be NoSchedule, PreferNoSchedule, NoExecute or empty (all effects)"))]
    pub tolerations: Vec<Toleration>,

    /// Affinity of the scheduler pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// PriorityClass of the scheduler pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Log verbosity, as kube-scheduler's `-v` (0-10).
    #[serde(default = "default_log_level")]
    #[schemars(range(min = 0, max = 10))]
    pub log_level: i32,

    /// Leader election timings; the lease is always the profile's own (`ksched-<name>`).
    #[serde(default)]
    pub leader_election: LeaderElection,

    /// Client rate limits towards the API server.
    #[serde(default)]
    pub client_connection: ClientConnection,

    /// Initial backoff of a pod that failed to schedule.
    #[serde(default = "default_initial_backoff")]
    #[x_kube(validation = Rule::new("self >= 1").message("podInitialBackoffSeconds must be at least 1"))]
    pub pod_initial_backoff_seconds: i64,

    /// Maximum backoff of a pod that failed to schedule.
    #[serde(default = "default_max_backoff")]
    pub pod_max_backoff_seconds: i64,

    /// Stop scheduling but keep everything rendered.
    #[serde(default)]
    pub suspend: bool,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_enqueue: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_sort: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_filter: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_filter: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_score: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_bind: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_bind: Option<PluginSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_point: Option<PluginSet>,
}

/// Plugins enabled and disabled at one extension point.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct PluginSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<Plugin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Plugin>,
}

/// One plugin, by its upstream name; `weight` only matters at score.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct Plugin {
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<i32>,
}

/// Args of one plugin, as `profiles[].pluginConfig[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
pub struct PluginConfig {
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub args: Option<serde_json::Value>,
}

/// Leader election timings (Go durations). The lease name and namespace are not settable: each
/// profile has its own Lease `ksched-<name>`, so no two schedulers ever share one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("duration(self.leaseDuration) > duration(self.renewDeadline)").message("leaderElection.leaseDuration must be longer than leaderElection.renewDeadline"))]
#[x_kube(validation = Rule::new("duration(self.renewDeadline) > duration(self.retryPeriod)").message("leaderElection.renewDeadline must be longer than leaderElection.retryPeriod"))]
#[serde(rename_all = "camelCase")]
pub struct LeaderElection {
    #[serde(default = "default_lease_duration")]
    #[schemars(schema_with = "schema::go_duration")]
    pub lease_duration: String,
    #[serde(default = "default_renew_deadline")]
    #[schemars(schema_with = "schema::go_duration")]
    pub renew_deadline: String,
    #[serde(default = "default_retry_period")]
    #[schemars(schema_with = "schema::go_duration")]
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
    #[serde(default = "default_qps")]
    #[schemars(range(min = 0.0))]
    pub qps: f64,
    #[serde(default = "default_burst")]
    #[schemars(range(min = 0))]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
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
    /// LeafClusterPolicies rendered into this profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaf_policies: Vec<String>,
    /// Pods Pending with this scheduler name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_pods: Option<i32>,
}
