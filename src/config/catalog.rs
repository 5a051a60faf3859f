//! What the configuration layer needs to know about plugins, without depending on the framework:
//! which names exist, which extension points each implements (for `multiPoint` expansion and the
//! effective plugin list), and how to decode and default each plugin's args strictly.
//! `framework::registry::Registry` implements this trait.

use serde::{Deserialize, Serialize};

use super::FieldError;

/// The framework's extension points, in the order a pod meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExtensionPoint {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
    /// A pod group's candidate placements (upstream 1.36+, topology-aware workload scheduling).
    PlacementGenerate,
    /// Ranks the placements a pod group fits in.
    PlacementScore,
    /// A pod group its cycle did not place (upstream 1.37: workload-aware preemption).
    PodGroupPostFilter,
}

impl ExtensionPoint {
    pub const ALL: [ExtensionPoint; 15] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
        ExtensionPoint::PlacementGenerate,
        ExtensionPoint::PlacementScore,
        ExtensionPoint::PodGroupPostFilter,
    ];

    /// Whether plugins here carry a weight (score and placementScore).
    pub fn is_weighted(self) -> bool {
        matches!(self, ExtensionPoint::Score | ExtensionPoint::PlacementScore)
    }

    /// The field name in `profiles[].plugins` (`preFilter`, `score`, ...).
    pub fn field_name(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "preEnqueue",
            ExtensionPoint::QueueSort => "queueSort",
            ExtensionPoint::PreFilter => "preFilter",
            ExtensionPoint::Filter => "filter",
            ExtensionPoint::PostFilter => "postFilter",
            ExtensionPoint::PreScore => "preScore",
            ExtensionPoint::Score => "score",
            ExtensionPoint::Reserve => "reserve",
            ExtensionPoint::Permit => "permit",
            ExtensionPoint::PreBind => "preBind",
            ExtensionPoint::Bind => "bind",
            ExtensionPoint::PostBind => "postBind",
            ExtensionPoint::PlacementGenerate => "placementGenerate",
            ExtensionPoint::PlacementScore => "placementScore",
            ExtensionPoint::PodGroupPostFilter => "podGroupPostFilter",
        }
    }
}

/// Whether a plugin name can be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginAvailability {
    /// Built: implements these extension points.
    Built(Vec<ExtensionPoint>),
    /// A plugin upstream (or a seed) has, that ksched will build later: its args decode and its
    /// extension points are known (so configurations naming it validate and expand), but the
    /// scheduler cannot run it yet; `reason` says why / when.
    NotBuiltYet {
        extension_points: Vec<ExtensionPoint>,
        reason: String,
    },
    /// No plugin of that name exists.
    Unknown,
}

/// The plugin knowledge configuration loading and validation need, and the operator's rendering
/// (the RBAC rules a plugin declares).
pub trait PluginCatalog {
    /// Names of every plugin that exists (built ones), sorted, for "unknown plugin" messages.
    fn plugin_names(&self) -> Vec<String>;

    fn availability(&self, name: &str) -> PluginAvailability;

    /// Decodes `args` strictly (unknown or mistyped fields are errors), fills defaults and validates
    /// them as upstream's `ValidateXxxArgs` does. `None` means no pluginConfig entry: the defaults.
    /// Returns the normalized args as JSON (camelCase, every defaulted field present), or errors whose
    /// paths are relative to `args` (the caller prefixes `profiles[i].pluginConfig[j].args`).
    /// Plugins with no args return `Ok(Value::Null)` for `None` and an error for any non-empty args.
    /// Defaults and validation are those of `emulation`'s minor and gates.
    fn decode_args(
        &self,
        name: &str,
        args: Option<&serde_json::Value>,
        emulation: &crate::emulation::Emulation,
    ) -> Result<serde_json::Value, Vec<FieldError>>;

    /// The RBAC rules the plugin declares it needs (the operator grants a profile's scheduler
    /// the union of its enabled plugins' rules); none for a plugin that is not built.
    fn policy_rules(&self, name: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule>;
}
