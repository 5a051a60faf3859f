//! `KubeSchedulerConfiguration`: types, versions (v1beta1..v1 read, v1 written), defaults, validation.
//!
//! [`load`] turns any bytes into a validated [`Config`] (or field errors saying what to change);
//! [`to_v1_yaml`] writes a `Config` back as normalized v1; [`validate_file_output`] is
//! `ksched config validate FILE`. Upstream reference: Kubernetes v1.36.3
//! (`pkg/scheduler/apis/config/{v1,validation}`, `pkg/scheduler/framework/runtime/framework.go`).

pub(crate) mod catalog;
mod convert;
mod decode;
pub(crate) mod defaults;
pub(crate) use crate::infra::duration;
mod effective;
pub(crate) mod error;
mod output;
pub(crate) mod types;
mod validation;

#[cfg(test)]
mod tests;

pub use catalog::{ExtensionPoint, PluginAvailability, PluginCatalog};
pub(crate) use decode::{did_you_mean, suggest};
pub use duration::GoDuration;
pub use error::FieldError;
pub use output::{profile_plugin_config, profile_plugins, to_v1_yaml, validate_file_output};
pub use types::{
    ApiVersion, ClientConnection, Config, EffectivePlugin, EffectiveProfile,
    KubeSchedulerConfiguration, KubeSchedulerProfile, LeaderElection, Plugin, PluginConfig,
    PluginSet, Plugins,
};

use std::sync::Arc;

use crate::emulation::Emulation;
use effective::Availability;

/// A loaded configuration and what the user should know about it (deprecated versions, converted
/// plugins, settings that have no effect).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

/// Everything wrong with a configuration, one error per line when displayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_lines(.errors))]
pub struct ConfigErrors {
    pub errors: Vec<FieldError>,
    /// Warnings found before the errors stopped loading (printed alongside them).
    pub warnings: Vec<String>,
}

fn display_lines(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigErrors {
    pub fn new(errors: Vec<FieldError>) -> Self {
        ConfigErrors {
            errors,
            warnings: Vec::new(),
        }
    }
}

/// Loads a `KubeSchedulerConfiguration` (YAML or JSON, v1 or v1beta1..v1beta3) from any bytes, as
/// the kube-scheduler of the newest supported minor would: [`load_at`] for another.
pub fn load(bytes: &[u8], catalog: &dyn PluginCatalog) -> Result<Loaded, ConfigErrors> {
    load_at(bytes, catalog, &Emulation::default())
}

/// Loads a `KubeSchedulerConfiguration` as the kube-scheduler of `emulation`'s minor, with its
/// feature gates: decodes strictly (that minor's fields), converts older versions to v1, fills that
/// minor's defaults, merges and expands each profile's plugins using `catalog`, decodes every
/// plugin's args (that minor's defaults and validation), and validates. The configuration keeps
/// the emulation for everything built from it.
pub fn load_at(
    bytes: &[u8],
    catalog: &dyn PluginCatalog,
    emulation: &Emulation,
) -> Result<Loaded, ConfigErrors> {
    let mut decoded = decode::decode(bytes, emulation.minor()).map_err(ConfigErrors::new)?;
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    convert::convert(&mut decoded, catalog, &mut errors, &mut warnings);
    let mut doc = decoded.doc;
    defaults::default_profiles(&mut doc);

    let default_plugins = defaults::default_plugins(catalog, emulation);
    let mut avail = Availability::new(catalog, emulation);
    let profiles: Vec<EffectiveProfile> = doc
        .profiles
        .iter()
        .enumerate()
        .map(|(i, p)| {
            effective::resolve_profile(
                i,
                p,
                &default_plugins,
                &mut avail,
                &mut errors,
                &mut warnings,
            )
        })
        .collect();

    let enable_profiling = doc.enable_profiling.unwrap_or(true);
    let config = Config {
        parallelism: doc.parallelism.unwrap_or(defaults::DEFAULT_PARALLELISM),
        leader_election: defaults::leader_election(&doc.leader_election),
        client_connection: defaults::client_connection(&doc.client_connection),
        enable_profiling,
        enable_contention_profiling: doc.enable_contention_profiling.unwrap_or(enable_profiling),
        percentage_of_nodes_to_score: doc
            .percentage_of_nodes_to_score
            .unwrap_or(defaults::DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE),
        pod_initial_backoff_seconds: doc
            .pod_initial_backoff_seconds
            .unwrap_or(defaults::DEFAULT_POD_INITIAL_BACKOFF_SECONDS),
        pod_max_backoff_seconds: doc
            .pod_max_backoff_seconds
            .unwrap_or(defaults::DEFAULT_POD_MAX_BACKOFF_SECONDS),
        profiles,
        extenders: doc.extenders,
        delay_cache_until_active: doc.delay_cache_until_active.unwrap_or(false),
        emulation: Arc::new(emulation.clone()),
    };
    validation::validate(&config, &mut errors);
    warnings.extend(defaults::left_out_defaults(catalog, emulation));

    let mut seen = std::collections::BTreeSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    if errors.is_empty() {
        tracing::debug!(
            profiles = config.profiles.len(),
            warnings = warnings.len(),
            "loaded scheduler configuration"
        );
        Ok(Loaded { config, warnings })
    } else {
        Err(ConfigErrors { errors, warnings })
    }
}

/// Loads a document built in code (the operator's renderer) exactly as if it had been read from a
/// file, as the kube-scheduler of `emulation`'s minor.
pub fn load_document(
    doc: &KubeSchedulerConfiguration,
    catalog: &dyn PluginCatalog,
    emulation: &Emulation,
) -> Result<Loaded, ConfigErrors> {
    let bytes = serde_json::to_vec(doc).map_err(|e| {
        ConfigErrors::new(vec![FieldError::new(
            "",
            format!("cannot serialize the configuration: {e}"),
        )])
    })?;
    load_at(&bytes, catalog, emulation)
}
