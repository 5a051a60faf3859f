//! Types of `kubescheduler.config.k8s.io/v1` (Kubernetes 1.36), in two forms:
//!
//! - the document as written ([`KubeSchedulerConfiguration`] and below): every field optional,
//!   exactly upstream's field names, so other code (the operator's renderer) can build one and
//!   serialize it;
//! - the loaded result ([`Config`]): defaults filled in and every profile's plugins resolved into an
//!   [`EffectiveProfile`], the single source of truth the framework runtime builds plugins from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::catalog::ExtensionPoint;
use super::duration::GoDuration;
use crate::emulation::Minor;

/// The API group of `KubeSchedulerConfiguration`.
pub(crate) const GROUP: &str = "kubescheduler.config.k8s.io";
/// The kind.
pub(crate) const KIND: &str = "KubeSchedulerConfiguration";
/// The apiVersion ksched writes.
pub(crate) const API_VERSION_V1: &str = "kubescheduler.config.k8s.io/v1";
/// `v1.DefaultSchedulerName`.
pub(crate) const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Matches every plugin in a `disabled` list.
pub(crate) const ALL_PLUGINS: &str = "*";

/// The versions of `KubeSchedulerConfiguration` ksched reads (oldest first). Only `v1` is still served
/// by upstream 1.36; ksched converts the betas to `v1` with a deprecation warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVersion {
    V1Beta1,
    V1Beta2,
    V1Beta3,
    V1,
}

impl ApiVersion {
    /// Whether `point` is a `plugins` field of this version at `minor`: preEnqueue came with
    /// v1beta3, the group points with v1 (podGroupPostFilter in 1.37; older kube-scheduler calls
    /// it unknown).
    pub fn has_point(self, point: ExtensionPoint, minor: Minor) -> bool {
        match point {
            ExtensionPoint::PreEnqueue => self >= ApiVersion::V1Beta3,
            ExtensionPoint::PlacementGenerate | ExtensionPoint::PlacementScore => {
                self == ApiVersion::V1
            }
            ExtensionPoint::PodGroupPostFilter => self == ApiVersion::V1 && minor >= Minor::V1_37,
            _ => true,
        }
    }

    pub const ALL: [ApiVersion; 4] = [
        ApiVersion::V1,
        ApiVersion::V1Beta3,
        ApiVersion::V1Beta2,
        ApiVersion::V1Beta1,
    ];

    /// `v1beta1`, ..., `v1`.
    pub fn version(self) -> &'static str {
        match self {
            ApiVersion::V1Beta1 => "v1beta1",
            ApiVersion::V1Beta2 => "v1beta2",
            ApiVersion::V1Beta3 => "v1beta3",
            ApiVersion::V1 => "v1",
        }
    }

    /// `kubescheduler.config.k8s.io/<version>`.
    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.version())
    }

    pub fn from_version(version: &str) -> Option<ApiVersion> {
        ApiVersion::ALL.into_iter().find(|v| v.version() == version)
    }
}

// ---------------------------------------------------------------------------------------------
// The document as written.
// ---------------------------------------------------------------------------------------------

/// `KubeSchedulerConfiguration` (v1) as written: nothing defaulted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Parallelism of the filter and score algorithms. Default 16, must be > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    #[serde(default, skip_serializing_if = "LeaderElectionConfiguration::is_empty")]
    pub leader_election: LeaderElectionConfiguration,
    #[serde(
        default,
        skip_serializing_if = "ClientConnectionConfiguration::is_empty"
    )]
    pub client_connection: ClientConnectionConfiguration,
    /// Removed from the API in v1beta3; must be empty. (ksched serves health on its secure port.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthz_bind_address: Option<String>,
    /// Removed from the API in v1beta3; must be empty. (ksched serves metrics on its secure port.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_bind_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_profiling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_contention_profiling: Option<bool>,
    /// 0..=100; 0 (the default) means adaptive (5%..50% depending on cluster size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_initial_backoff_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<KubeSchedulerProfile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extenders: Vec<Extender>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_cache_until_active: Option<bool>,
}

impl KubeSchedulerConfiguration {
    /// An empty `kubescheduler.config.k8s.io/v1` document: apiVersion and kind set, nothing else.
    pub fn v1() -> Self {
        KubeSchedulerConfiguration {
            api_version: Some(API_VERSION_V1.to_string()),
            kind: Some(KIND.to_string()),
            ..Self::default()
        }
    }
}

/// component-base `LeaderElectionConfiguration` (v1alpha1) as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_lock: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_namespace: Option<String>,
}

impl LeaderElectionConfiguration {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// component-base `ClientConnectionConfiguration` (v1alpha1) as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnectionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_content_types: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<i32>,
}

impl ClientConnectionConfiguration {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// One scheduling profile as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Overrides the top-level value for this profile; 0..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_config: Vec<PluginConfig>,
}

/// `plugins` of a profile: one [`PluginSet`] per extension point, plus `multiPoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_enqueue: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub queue_sort: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub post_filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_score: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub score: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub reserve: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub permit: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_bind: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub bind: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub post_bind: PluginSet,
    /// Enables a plugin at every extension point it implements.
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub multi_point: PluginSet,
    /// A pod group's candidate placements (TopologyAwareWorkloadScheduling, alpha).
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub placement_generate: PluginSet,
    /// Ranks a pod group's placements (TopologyAwareWorkloadScheduling, alpha).
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub placement_score: PluginSet,
    /// A pod group its cycle did not place (1.37 on, GenericWorkload).
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pod_group_post_filter: PluginSet,
}

impl Plugins {
    pub fn get(&self, point: ExtensionPoint) -> &PluginSet {
        match point {
            ExtensionPoint::PreEnqueue => &self.pre_enqueue,
            ExtensionPoint::QueueSort => &self.queue_sort,
            ExtensionPoint::PreFilter => &self.pre_filter,
            ExtensionPoint::Filter => &self.filter,
            ExtensionPoint::PostFilter => &self.post_filter,
            ExtensionPoint::PreScore => &self.pre_score,
            ExtensionPoint::Score => &self.score,
            ExtensionPoint::Reserve => &self.reserve,
            ExtensionPoint::Permit => &self.permit,
            ExtensionPoint::PreBind => &self.pre_bind,
            ExtensionPoint::Bind => &self.bind,
            ExtensionPoint::PostBind => &self.post_bind,
            ExtensionPoint::PlacementGenerate => &self.placement_generate,
            ExtensionPoint::PlacementScore => &self.placement_score,
            ExtensionPoint::PodGroupPostFilter => &self.pod_group_post_filter,
        }
    }

    pub fn get_mut(&mut self, point: ExtensionPoint) -> &mut PluginSet {
        match point {
            ExtensionPoint::PreEnqueue => &mut self.pre_enqueue,
            ExtensionPoint::QueueSort => &mut self.queue_sort,
            ExtensionPoint::PreFilter => &mut self.pre_filter,
            ExtensionPoint::Filter => &mut self.filter,
            ExtensionPoint::PostFilter => &mut self.post_filter,
            ExtensionPoint::PreScore => &mut self.pre_score,
            ExtensionPoint::Score => &mut self.score,
            ExtensionPoint::Reserve => &mut self.reserve,
            ExtensionPoint::Permit => &mut self.permit,
            ExtensionPoint::PreBind => &mut self.pre_bind,
            ExtensionPoint::Bind => &mut self.bind,
            ExtensionPoint::PostBind => &mut self.post_bind,
            ExtensionPoint::PlacementGenerate => &mut self.placement_generate,
            ExtensionPoint::PlacementScore => &mut self.placement_score,
            ExtensionPoint::PodGroupPostFilter => &mut self.pod_group_post_filter,
        }
    }
}

/// Plugins enabled and disabled at one extension point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<Plugin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Plugin>,
}

impl PluginSet {
    pub fn is_empty(&self) -> bool {
        self.enabled.is_empty() && self.disabled.is_empty()
    }

    pub fn disables(&self, name: &str) -> bool {
        self.disabled.iter().any(|p| p.name == name)
    }

    pub fn disables_all(&self) -> bool {
        self.disables(ALL_PLUGINS)
    }
}

/// A plugin name, and its weight (used only at `score`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugin {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

impl Plugin {
    pub fn named(name: impl Into<String>) -> Self {
        Plugin {
            name: name.into(),
            weight: None,
        }
    }

    pub fn weighted(name: impl Into<String>, weight: i32) -> Self {
        Plugin {
            name: name.into(),
            weight: Some(weight),
        }
    }
}

/// Arguments for one plugin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
}

/// A scheduler extender (HTTP webhook), shared by all profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Extender {
    pub url_prefix: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub filter_verb: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub preempt_verb: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prioritize_verb: String,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub weight: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bind_verb: String,
    #[serde(rename = "enableHTTPS", default, skip_serializing_if = "is_false")]
    pub enable_https: bool,
    #[serde(rename = "tlsConfig", default, skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<ExtenderTLSConfig>,
    #[serde(default, skip_serializing_if = "is_zero_duration")]
    pub http_timeout: GoDuration,
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_cache_capable: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<ExtenderManagedResource>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignorable: bool,
}

/// TLS settings of an extender. The `*Data` fields are base64, as in JSON `[]byte`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderTLSConfig {
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cert_file: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_file: String,
    #[serde(rename = "caFile", default, skip_serializing_if = "String::is_empty")]
    pub ca_file: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cert_data: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_data: String,
    #[serde(rename = "caData", default, skip_serializing_if = "String::is_empty")]
    pub ca_data: String,
}

/// An extended resource an extender manages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderManagedResource {
    pub name: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignored_by_scheduler: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_duration(d: &GoDuration) -> bool {
    d.is_zero()
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

// ---------------------------------------------------------------------------------------------
// The loaded result.
// ---------------------------------------------------------------------------------------------

/// A loaded, defaulted and validated configuration. `load(to_v1_yaml(c))` gives back an equal `Config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub parallelism: i32,
    pub leader_election: LeaderElection,
    pub client_connection: ClientConnection,
    pub enable_profiling: bool,
    pub enable_contention_profiling: bool,
    /// Upstream's default is 0, which means adaptive (5%..50% of nodes depending on cluster size).
    pub percentage_of_nodes_to_score: i32,
    pub pod_initial_backoff_seconds: i64,
    pub pod_max_backoff_seconds: i64,
    pub profiles: Vec<EffectiveProfile>,
    pub extenders: Vec<Extender>,
    pub delay_cache_until_active: bool,
    /// The Kubernetes minor and feature gates the configuration was loaded for: its defaults
    /// and validation, and what the scheduler built from it emulates.
    pub emulation: std::sync::Arc<crate::emulation::Emulation>,
}

impl Config {
    pub fn profile(&self, scheduler_name: &str) -> Option<&EffectiveProfile> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }
}

/// Leader election with defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    pub leader_elect: bool,
    pub lease_duration: GoDuration,
    pub renew_deadline: GoDuration,
    pub retry_period: GoDuration,
    pub resource_lock: String,
    pub resource_name: String,
    pub resource_namespace: String,
}

/// Client connection with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    pub kubeconfig: String,
    pub accept_content_types: String,
    pub content_type: String,
    pub qps: f32,
    pub burst: i32,
}

/// One profile after defaults, merge and `multiPoint` expansion: what the framework runs.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveProfile {
    pub scheduler_name: String,
    /// `None`: use the top-level `percentageOfNodesToScore`.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Every extension point of the emulated minor is present (possibly with an empty list),
    /// plugins in run order.
    pub plugins: BTreeMap<ExtensionPoint, Vec<EffectivePlugin>>,
    /// Normalized args (from `PluginCatalog::decode_args`) of every plugin enabled at any extension
    /// point; `Value::Null` for plugins that take no args.
    pub plugin_args: BTreeMap<String, serde_json::Value>,
}

impl EffectiveProfile {
    /// The plugins at one extension point, in run order.
    pub fn at(&self, point: ExtensionPoint) -> &[EffectivePlugin] {
        self.plugins.get(&point).map_or(&[], Vec::as_slice)
    }

    /// Names of the plugins enabled at `point`.
    pub fn names_at(&self, point: ExtensionPoint) -> Vec<&str> {
        self.at(point).iter().map(|p| p.name.as_str()).collect()
    }

    /// Every plugin enabled at some extension point, sorted.
    pub fn enabled_plugins(&self) -> Vec<&str> {
        self.plugin_args.keys().map(String::as_str).collect()
    }

    /// Extension points at which `name` is enabled.
    pub fn points_of(&self, name: &str) -> Vec<ExtensionPoint> {
        self.plugins
            .iter()
            .filter(|(_, list)| list.iter().any(|p| p.name == name))
            .map(|(point, _)| *point)
            .collect()
    }

    pub fn args(&self, name: &str) -> Option<&serde_json::Value> {
        self.plugin_args.get(name)
    }
}

/// A plugin at one extension point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectivePlugin {
    pub name: String,
    /// At `score`: the weight (>= 1; an unset or 0 weight becomes 1 as upstream). Elsewhere: 0.
    pub weight: i32,
}

impl EffectivePlugin {
    pub fn new(name: impl Into<String>, weight: i32) -> Self {
        EffectivePlugin {
            name: name.into(),
            weight,
        }
    }
}
