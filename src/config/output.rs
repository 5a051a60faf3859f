//! The normalized v1 form of a loaded configuration (`ksched config validate`, the operator's
//! ConfigMap), and the `config validate` command's output.

use serde::Serialize;

use super::ConfigErrors;
use super::catalog::{ExtensionPoint, PluginCatalog};
use super::duration::GoDuration;
use super::types::{
    ALL_PLUGINS, API_VERSION_V1, Config, EffectiveProfile, Extender, KIND, Plugin, PluginConfig,
    PluginSet, Plugins,
};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutConfig<'a> {
    api_version: &'a str,
    kind: &'a str,
    parallelism: i32,
    leader_election: OutLeaderElection<'a>,
    client_connection: OutClientConnection<'a>,
    enable_profiling: bool,
    enable_contention_profiling: bool,
    percentage_of_nodes_to_score: i32,
    pod_initial_backoff_seconds: i64,
    pod_max_backoff_seconds: i64,
    profiles: Vec<OutProfile<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    extenders: &'a [Extender],
    delay_cache_until_active: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutLeaderElection<'a> {
    leader_elect: bool,
    lease_duration: GoDuration,
    renew_deadline: GoDuration,
    retry_period: GoDuration,
    resource_lock: &'a str,
    resource_name: &'a str,
    resource_namespace: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutClientConnection<'a> {
    kubeconfig: &'a str,
    accept_content_types: &'a str,
    content_type: &'a str,
    qps: f32,
    burst: i32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutProfile<'a> {
    scheduler_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    percentage_of_nodes_to_score: Option<i32>,
    plugins: Plugins,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    plugin_config: Vec<PluginConfig>,
}

/// A profile's plugins in the v1 shape: at every extension point `disabled: ["*"]` (so nothing
/// comes from the defaults) and the effective list, in order, with weights at score.
pub fn profile_plugins(profile: &EffectiveProfile) -> Plugins {
    let mut plugins = Plugins::default();
    for point in ExtensionPoint::ALL {
        if !profile.plugins.contains_key(&point) {
            continue;
        }
        *plugins.get_mut(point) = PluginSet {
            enabled: profile
                .at(point)
                .iter()
                .map(|p| Plugin {
                    name: p.name.clone(),
                    weight: point.is_weighted().then_some(p.weight),
                })
                .collect(),
            disabled: vec![Plugin::named(ALL_PLUGINS)],
        };
    }
    plugins
}

/// A profile's `pluginConfig`: the normalized args of every enabled plugin that takes args, by name.
pub fn profile_plugin_config(profile: &EffectiveProfile) -> Vec<PluginConfig> {
    profile
        .plugin_args
        .iter()
        .filter(|(_, args)| !args.is_null())
        .map(|(name, args)| PluginConfig {
            name: name.clone(),
            args: Some(args.clone()),
        })
        .collect()
}

/// The normalized `kubescheduler.config.k8s.io/v1` YAML of `config`: every default filled in, and per
/// profile the effective plugin list of each extension point (with `disabled: ["*"]`, `multiPoint`
/// already expanded) and the normalized args of every enabled plugin. Loading it gives back `config`.
pub fn to_v1_yaml(config: &Config) -> String {
    let le = &config.leader_election;
    let cc = &config.client_connection;
    let out = OutConfig {
        api_version: API_VERSION_V1,
        kind: KIND,
        parallelism: config.parallelism,
        leader_election: OutLeaderElection {
            leader_elect: le.leader_elect,
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
            resource_lock: &le.resource_lock,
            resource_name: &le.resource_name,
            resource_namespace: &le.resource_namespace,
        },
        client_connection: OutClientConnection {
            kubeconfig: &cc.kubeconfig,
            accept_content_types: &cc.accept_content_types,
            content_type: &cc.content_type,
            qps: cc.qps,
            burst: cc.burst,
        },
        enable_profiling: config.enable_profiling,
        enable_contention_profiling: config.enable_contention_profiling,
        percentage_of_nodes_to_score: config.percentage_of_nodes_to_score,
        pod_initial_backoff_seconds: config.pod_initial_backoff_seconds,
        pod_max_backoff_seconds: config.pod_max_backoff_seconds,
        profiles: config
            .profiles
            .iter()
            .map(|p| OutProfile {
                scheduler_name: &p.scheduler_name,
                percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
                plugins: profile_plugins(p),
                plugin_config: profile_plugin_config(p),
            })
            .collect(),
        extenders: &config.extenders,
        delay_cache_until_active: config.delay_cache_until_active,
    };
    match serde_saphyr::to_string(&out) {
        Ok(yaml) => yaml,
        Err(e) => {
            // JSON is YAML too; this path exists only so a serializer bug cannot panic.
            tracing::error!(error = %e, "serializing the configuration as YAML failed; writing JSON");
            serde_json::to_string_pretty(&out).unwrap_or_default()
        }
    }
}

/// What `ksched config validate FILE` prints: `(exit code, stdout, stderr)`.
/// Valid: exit 0, the normalized v1 YAML on stdout, `warning: ...` lines on stderr.
/// Invalid: exit 1, `error: <path>: <reason>` lines and a count line on stderr (warnings too).
pub fn validate_file_output(
    bytes: &[u8],
    catalog: &dyn PluginCatalog,
    emulation: &crate::emulation::Emulation,
) -> (i32, String, String) {
    let warning_lines = |warnings: &[String]| -> String {
        warnings.iter().map(|w| format!("warning: {w}\n")).collect()
    };
    match super::load_at(bytes, catalog, emulation) {
        Ok(loaded) => (
            0,
            to_v1_yaml(&loaded.config),
            warning_lines(&loaded.warnings),
        ),
        Err(ConfigErrors { errors, warnings }) => {
            let mut stderr = warning_lines(&warnings);
            for e in &errors {
                stderr.push_str(&format!("error: {e}\n"));
            }
            let n = errors.len();
            stderr.push_str(&format!(
                "the configuration is invalid: {n} error{}\n",
                if n == 1 { "" } else { "s" }
            ));
            (1, String::new(), stderr)
        }
    }
}
