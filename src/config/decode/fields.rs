//! The fields each mapping of the document may hold (by API version and emulated minor), and why a
//! field that is not allowed somewhere is wrong there and where it belongs.

use crate::config::catalog::ExtensionPoint;
use crate::config::types::{API_VERSION_V1, ApiVersion, KIND};
use crate::emulation::Minor;

/// Where in the document a mapping sits, for field lists and hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ctx {
    Top,
    LeaderElection,
    ClientConnection,
    Profile,
    Plugins,
    PluginSet,
    Plugin,
    PluginConfig,
    Extender,
    TlsConfig,
    ManagedResource,
}

const TOP_LEVEL_ONLY: [&str; 11] = [
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "extenders",
    "delayCacheUntilActive",
    "healthzBindAddress",
    "metricsBindAddress",
];
const LEADER_ELECTION_FIELDS: [&str; 7] = [
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
];
const CLIENT_CONNECTION_FIELDS: [&str; 5] = [
    "kubeconfig",
    "acceptContentTypes",
    "contentType",
    "qps",
    "burst",
];

pub(super) fn point_from_field(name: &str) -> Option<ExtensionPoint> {
    ExtensionPoint::ALL
        .into_iter()
        .find(|p| p.field_name() == name)
}

fn is_point_like(key: &str) -> bool {
    point_from_field(key).is_some() || matches!(key, "multiPoint" | "unreserve" | "normalizeScore")
}

pub(super) fn allowed_fields(ctx: Ctx, version: ApiVersion, minor: Minor) -> Vec<&'static str> {
    match ctx {
        Ctx::Top => {
            let mut f = vec![
                "apiVersion",
                "kind",
                "parallelism",
                "leaderElection",
                "clientConnection",
                "enableProfiling",
                "enableContentionProfiling",
                "percentageOfNodesToScore",
                "podInitialBackoffSeconds",
                "podMaxBackoffSeconds",
                "profiles",
                "extenders",
                "healthzBindAddress",
                "metricsBindAddress",
            ];
            if version >= ApiVersion::V1Beta3 {
                f.push("delayCacheUntilActive");
            }
            if version == ApiVersion::V1Beta1 {
                f.push("disablePreemption");
            }
            f
        }
        Ctx::LeaderElection => LEADER_ELECTION_FIELDS.to_vec(),
        Ctx::ClientConnection => CLIENT_CONNECTION_FIELDS.to_vec(),
        Ctx::Profile => {
            let mut f = vec!["schedulerName", "plugins", "pluginConfig"];
            if version == ApiVersion::V1 {
                f.push("percentageOfNodesToScore");
            }
            f
        }
        Ctx::Plugins => {
            let mut f: Vec<&'static str> = ExtensionPoint::ALL
                .into_iter()
                .filter(|p| version.has_point(*p, minor))
                .map(ExtensionPoint::field_name)
                .collect();
            if version >= ApiVersion::V1Beta3 {
                f.push("multiPoint");
            }
            if version == ApiVersion::V1Beta1 {
                f.push("unreserve");
            }
            f
        }
        Ctx::PluginSet => vec!["enabled", "disabled"],
        Ctx::Plugin => vec!["name", "weight"],
        Ctx::PluginConfig => vec!["name", "args"],
        Ctx::Extender => vec![
            "urlPrefix",
            "filterVerb",
            "preemptVerb",
            "prioritizeVerb",
            "weight",
            "bindVerb",
            "enableHTTPS",
            "tlsConfig",
            "httpTimeout",
            "nodeCacheCapable",
            "managedResources",
            "ignorable",
        ],
        Ctx::TlsConfig => vec![
            "insecure",
            "serverName",
            "certFile",
            "keyFile",
            "caFile",
            "certData",
            "keyData",
            "caData",
        ],
        Ctx::ManagedResource => vec!["name", "ignoredByScheduler"],
    }
}

/// Why `key` is not allowed here and where it belongs, when we can tell.
pub(super) fn misplaced_hint(
    ctx: Ctx,
    key: &str,
    version: ApiVersion,
    minor: Minor,
    parent: &str,
) -> Option<String> {
    if ctx == Ctx::Plugins
        && key == ExtensionPoint::PodGroupPostFilter.field_name()
        && version == ApiVersion::V1
        && !version.has_point(ExtensionPoint::PodGroupPostFilter, minor)
    {
        let since = Minor::V1_37;
        return Some(format!(
            "`{key}` exists from Kubernetes {since} on, and this scheduler emulates {minor} (kube-scheduler {minor} does not know it either): remove it, or emulate {since} or later"
        ));
    }
    let v1 = API_VERSION_V1;
    let ver = version.api_version();
    match ctx {
        Ctx::Top => match key {
            "schedulerName" | "plugins" | "pluginConfig" => Some(format!(
                "`{key}` belongs under `profiles[i]`, not at the top level: `profiles: [{{schedulerName: ..., plugins: ..., pluginConfig: ...}}]`"
            )),
            k if LEADER_ELECTION_FIELDS.contains(&k) => Some(format!(
                "`{key}` belongs under `leaderElection` (`leaderElection.{key}`), not at the top level"
            )),
            "lockObjectName" | "lockObjectNamespace" => Some(format!(
                "`{key}` was renamed: use `leaderElection.{}`",
                if key == "lockObjectName" { "resourceName" } else { "resourceNamespace" }
            )),
            k if CLIENT_CONNECTION_FIELDS.contains(&k) => Some(format!(
                "`{key}` belongs under `clientConnection` (`clientConnection.{key}`), not at the top level"
            )),
            "disablePreemption" => Some(format!(
                "`disablePreemption` does not exist in {ver}: disable the DefaultPreemption plugin instead, `profiles[i].plugins.postFilter.disabled: [{{name: DefaultPreemption}}]`"
            )),
            "featureGates" => Some(
                "`featureGates` is not part of KubeSchedulerConfiguration: pass feature gates on the command line (--feature-gates)".to_string(),
            ),
            "algorithmSource" => Some(
                "`algorithmSource` (the Policy API) was removed in Kubernetes 1.23: enable the equivalent plugins in `profiles[i].plugins`".to_string(),
            ),
            "hardPodAffinitySymmetricWeight" => Some(
                "`hardPodAffinitySymmetricWeight` moved to the InterPodAffinity plugin args: `profiles[i].pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: N}}]`".to_string(),
            ),
            "bindTimeoutSeconds" => Some(
                "`bindTimeoutSeconds` moved to the VolumeBinding plugin args: `profiles[i].pluginConfig: [{name: VolumeBinding, args: {bindTimeoutSeconds: N}}]`".to_string(),
            ),
            "delayCacheUntilActive" => Some(format!(
                "`delayCacheUntilActive` does not exist in {ver}: move the file to `apiVersion: {v1}`"
            )),
            "metadata" | "spec" | "data" | "status" => Some(format!(
                "a {KIND} has no `{key}`: if this file is a ConfigMap or a SchedulerProfile, validate the {KIND} it holds"
            )),
            "profile" => Some("did you mean `profiles` (a list of profiles)?".to_string()),
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point of a profile: `profiles[i].plugins.<extensionPoint>.{key}`"
            )),
            "args" => Some("`args` belongs in a pluginConfig entry: `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` belongs under `profiles[i].plugins` (`profiles[i].plugins.{key}`), not at the top level"
            )),
            _ => None,
        },
        Ctx::Profile => match key {
            "leaderElect" => Some(format!(
                "`leaderElect` belongs under `leaderElection` at the top level of the {KIND} (`leaderElection.leaderElect`), not under {parent}: leader election is per scheduler process, not per profile"
            )),
            k if TOP_LEVEL_ONLY.contains(&k) => Some(format!(
                "`{key}` belongs at the top level of the {KIND}, not under {parent}: it applies to the whole scheduler process, not to one profile"
            )),
            "percentageOfNodesToScore" => Some(format!(
                "a per-profile `percentageOfNodesToScore` exists only in {v1}: set it at the top level, or move the file to `apiVersion: {v1}`"
            )),
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point: `{parent}.plugins.<extensionPoint>.{key}`"
            )),
            "args" => Some(format!("`args` belongs in a pluginConfig entry: `{parent}.pluginConfig: [{{name: <plugin>, args: {{...}}}}]`")),
            "name" => Some("did you mean `schedulerName`?".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` belongs under `{parent}.plugins` (`{parent}.plugins.{key}`)"
            )),
            _ => None,
        },
        Ctx::Plugins => match key {
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point (`{parent}.<extensionPoint>.{key}`, e.g. `{parent}.score.{key}`), or under `{parent}.multiPoint.{key}` for every extension point the plugin implements"
            )),
            "pluginConfig" | "args" => Some(format!(
                "`{key}` belongs beside `plugins`, not inside it: `profiles[i].pluginConfig: [{{name: <plugin>, args: {{...}}}}]`"
            )),
            "unreserve" => Some(
                "`unreserve` was merged into `reserve` (a reserve plugin also unreserves): move these plugins to `reserve`".to_string(),
            ),
            "normalizeScore" => Some("`normalizeScore` is part of `score`: configure the plugin under `score`".to_string()),
            "multiPoint" | "preEnqueue" => Some(format!(
                "`{key}` does not exist in {ver} (it was added in v1beta3): move the file to `apiVersion: {v1}`"
            )),
            "placementGenerate" | "placementScore" | "podGroupPostFilter" => Some(format!(
                "`{key}` does not exist in {ver}: it exists only in {v1}"
            )),
            k if k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) => Some(format!(
                "plugins are listed under an extension point, not by name: `{parent}.<extensionPoint>.enabled: [{{name: {key}}}]` (or `{parent}.multiPoint.enabled` for all its extension points)"
            )),
            _ => None,
        },
        Ctx::PluginSet => match key {
            "name" | "weight" => Some(format!(
                "list plugins as entries of `enabled` or `disabled`: `{parent}.enabled: [{{name: ..., weight: ...}}]`"
            )),
            "args" => Some("plugin args belong in `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` is an extension point: it belongs beside this one under `plugins`, not inside it"
            )),
            _ => None,
        },
        Ctx::Plugin => match key {
            "args" => Some(
                "plugin args do not go in the plugin list: put them in `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string(),
            ),
            _ => None,
        },
        Ctx::PluginConfig => Some(format!(
            "a pluginConfig entry has only `name` and `args`: if `{key}` is an argument of the plugin, put it under args (`{parent}.args.{key}`)"
        )),
        Ctx::LeaderElection => match key {
            "lockObjectName" => Some("`lockObjectName` was renamed: use `resourceName`".to_string()),
            "lockObjectNamespace" => Some("`lockObjectNamespace` was renamed: use `resourceNamespace`".to_string()),
            _ => None,
        },
        _ => None,
    }
}
