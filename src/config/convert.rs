//! Conversion of older versions into v1: deprecated versions, fields only older versions have
//! (`healthzBindAddress`, `disablePreemption`, `unreserve`), and plugins that were renamed or removed
//! since (renamed ones convert to their successor with a warning; removed ones are errors naming the
//! replacement).

use serde_json::{Map, Value};

use super::catalog::{ExtensionPoint, PluginAvailability, PluginCatalog};
use super::decode::Decoded;
use super::error::{FieldError, join_path};
use super::types::{
    API_VERSION_V1, ApiVersion, KubeSchedulerProfile, Plugin, PluginConfig, PluginSet, Plugins,
};

pub(crate) const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";

/// A plugin name that upstream no longer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Legacy {
    /// A v1beta1 score plugin that became a `NodeResourcesFit` scoring strategy in v1beta2.
    ScoringStrategy(&'static str),
    /// Gone: `last` is the last config version that had it, `advice` what to use instead.
    Removed {
        last: ApiVersion,
        advice: &'static str,
    },
}

pub(crate) fn legacy(name: &str) -> Option<Legacy> {
    let removed = |last, advice| Some(Legacy::Removed { last, advice });
    match name {
        "NodeResourcesLeastAllocated" => Some(Legacy::ScoringStrategy("LeastAllocated")),
        "NodeResourcesMostAllocated" => Some(Legacy::ScoringStrategy("MostAllocated")),
        "RequestedToCapacityRatio" => Some(Legacy::ScoringStrategy("RequestedToCapacityRatio")),
        "NodeLabel" => removed(
            ApiVersion::V1Beta1,
            "use NodeAffinity instead (the pod's spec.affinity.nodeAffinity, or NodeAffinity args `addedAffinity` for every pod of the profile)",
        ),
        "ServiceAffinity" => removed(
            ApiVersion::V1Beta1,
            "use InterPodAffinity instead (podAffinity on the labels of the Service's pods)",
        ),
        "NodePreferAvoidPods" => removed(
            ApiVersion::V1Beta2,
            "remove it: the scheduler.alpha.kubernetes.io/preferAvoidPods node annotation is no longer honored (taint such nodes PreferNoSchedule; TaintToleration scores that)",
        ),
        "SelectorSpread" => removed(
            ApiVersion::V1Beta3,
            "use PodTopologySpread instead: with its default `defaultingType: System` it spreads the pods of a Service, ReplicaSet or StatefulSet across nodes and zones as SelectorSpread did",
        ),
        "EBSLimits" | "GCEPDLimits" | "AzureDiskLimits" | "CinderLimits" => removed(
            ApiVersion::V1Beta3,
            "remove it: NodeVolumeLimits (enabled by default) counts these volumes through CSI migration",
        ),
        _ => None,
    }
}

/// The message for a legacy plugin that cannot be converted.
pub(crate) fn legacy_reason(name: &str, kind: Legacy, version: ApiVersion) -> String {
    match kind {
        Legacy::ScoringStrategy(strategy) => format!(
            "plugin {name} was removed in kubescheduler.config.k8s.io/v1beta2 (this file is {}): enable NodeResourcesFit at score and set its strategy in pluginConfig: `[{{name: NodeResourcesFit, args: {{scoringStrategy: {{type: {strategy}}}}}}}]`",
            version.api_version()
        ),
        Legacy::Removed { last, advice } => format!(
            "plugin {name} no longer exists (last available in {}): {advice}",
            last.api_version()
        ),
    }
}

fn known(catalog: &dyn PluginCatalog, name: &str) -> bool {
    !matches!(catalog.availability(name), PluginAvailability::Unknown)
}

/// Applies every conversion to `decoded`, in place.
pub(crate) fn convert(
    decoded: &mut Decoded,
    catalog: &dyn PluginCatalog,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) {
    let version = decoded.version.unwrap_or(ApiVersion::V1);
    if version != ApiVersion::V1 {
        warnings.push(format!(
            "apiVersion {} is deprecated and no longer served by upstream kube-scheduler 1.36; ksched converted it to {API_VERSION_V1}: move the file to `apiVersion: {API_VERSION_V1}` (`ksched config validate FILE` prints the converted form)",
            version.api_version()
        ));
    }
    let doc = &mut decoded.doc;
    for (field, value) in [
        ("healthzBindAddress", &mut doc.healthz_bind_address),
        ("metricsBindAddress", &mut doc.metrics_bind_address),
    ] {
        let Some(address) = value.take() else {
            continue;
        };
        if version <= ApiVersion::V1Beta2 {
            warnings.push(format!(
                "{field} ({address:?}) is ignored: it was removed from the API in v1beta3, and ksched serves /healthz and /metrics on its secure port (10259); remove it"
            ));
        } else if !address.is_empty() {
            errors.push(FieldError::new(
                field,
                format!(
                    "must be empty: {field} was removed from the API in v1beta3, and ksched serves /healthz and /metrics on its secure port (10259); remove it"
                ),
            ));
        }
    }

    if decoded.disable_preemption == Some(true) {
        if doc.profiles.is_empty() {
            doc.profiles.push(KubeSchedulerProfile::default());
        }
        for profile in &mut doc.profiles {
            let plugins = profile.plugins.get_or_insert_with(Plugins::default);
            if !plugins.post_filter.disables("DefaultPreemption") {
                plugins
                    .post_filter
                    .disabled
                    .push(Plugin::named("DefaultPreemption"));
            }
        }
        warnings.push(
            "disablePreemption: true was converted to disabling DefaultPreemption at postFilter in every profile (`plugins.postFilter.disabled: [{name: DefaultPreemption}]`)".to_string(),
        );
    }

    for (i, unreserve) in std::mem::take(&mut decoded.unreserve) {
        let Some(profile) = doc.profiles.get_mut(i) else {
            continue;
        };
        let plugins = profile.plugins.get_or_insert_with(Plugins::default);
        for p in unreserve.enabled {
            if !plugins.reserve.enabled.iter().any(|e| e.name == p.name) {
                warnings.push(format!(
                    "profiles[{i}].plugins.unreserve: {} was moved to reserve (unreserve was merged into reserve: a reserve plugin also unreserves)",
                    p.name
                ));
                plugins.reserve.enabled.push(Plugin::named(p.name));
            }
        }
        for p in unreserve.disabled {
            warnings.push(format!(
                "profiles[{i}].plugins.unreserve.disabled: {} ignored (unreserve was merged into reserve; disable it at reserve to turn it off)",
                p.name
            ));
        }
    }

    for (i, profile) in doc.profiles.iter_mut().enumerate() {
        convert_profile_plugins(i, profile, version, catalog, errors, warnings);
    }
}

fn convert_profile_plugins(
    i: usize,
    profile: &mut KubeSchedulerProfile,
    version: ApiVersion,
    catalog: &dyn PluginCatalog,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) {
    let base = format!("profiles[{i}]");
    // The scoring strategy chosen by a renamed plugin: (plugin name, strategy).
    let mut strategy: Option<(String, &'static str)> = None;

    if let Some(plugins) = profile.plugins.as_mut() {
        let mut points: Vec<(&'static str, Option<ExtensionPoint>)> = ExtensionPoint::ALL
            .into_iter()
            .map(|p| (p.field_name(), Some(p)))
            .collect();
        points.push(("multiPoint", None));
        for (field, point) in points {
            let path = join_path(&join_path(&base, "plugins"), field);
            let set = match point {
                Some(p) => plugins.get_mut(p),
                None => &mut plugins.multi_point,
            };
            let scoring_point = matches!(point, Some(ExtensionPoint::Score) | None);
            convert_enabled(
                set,
                &path,
                scoring_point,
                version,
                catalog,
                &mut strategy,
                errors,
                warnings,
            );
            convert_disabled(set, &path, scoring_point, version, catalog, warnings);
        }
    }

    // pluginConfig entries of legacy plugins.
    let mut strategy_args: Option<(usize, Value)> = None;
    let mut kept = Vec::with_capacity(profile.plugin_config.len());
    for (j, pc) in std::mem::take(&mut profile.plugin_config)
        .into_iter()
        .enumerate()
    {
        let path = format!("{base}.pluginConfig[{j}]");
        if known(catalog, &pc.name) {
            kept.push(pc);
            continue;
        }
        match legacy(&pc.name) {
            Some(Legacy::ScoringStrategy(s)) if version == ApiVersion::V1Beta1 => {
                match &strategy {
                    Some((enabled, _)) if *enabled == pc.name => {
                        match strategy_from_args(s, pc.args.as_ref(), &join_path(&path, "args")) {
                            Ok(v) => {
                                warnings.push(format!(
                                    "{path}: the args of {} were converted to NodeResourcesFit args `scoringStrategy` (type {s})",
                                    pc.name
                                ));
                                strategy_args = Some((j, v));
                            }
                            Err(mut e) => errors.append(&mut e),
                        }
                    }
                    _ => warnings.push(format!(
                        "{path}: args for {} have no effect (the plugin is not enabled in this profile); remove them",
                        pc.name
                    )),
                }
            }
            Some(kind) => errors.push(FieldError::new(&path, legacy_reason(&pc.name, kind, version))),
            None => kept.push(pc),
        }
    }
    profile.plugin_config = kept;

    let Some((_, s)) = strategy else { return };
    let scoring = strategy_args.map_or_else(|| serde_json::json!({ "type": s }), |(_, v)| v);
    let fit = match profile
        .plugin_config
        .iter()
        .position(|pc| pc.name == NODE_RESOURCES_FIT)
    {
        Some(j) => j,
        None => {
            profile.plugin_config.push(PluginConfig {
                name: NODE_RESOURCES_FIT.to_string(),
                args: None,
            });
            profile.plugin_config.len() - 1
        }
    };
    let entry = &mut profile.plugin_config[fit];
    let args = entry.args.get_or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(m) = args {
        if m.contains_key("scoringStrategy") {
            errors.push(FieldError::new(
                format!("{base}.pluginConfig[{fit}].args.scoringStrategy"),
                format!("conflicts with the enabled {}: keep one of the two", s),
            ));
        } else {
            m.insert("scoringStrategy".to_string(), scoring);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn convert_enabled(
    set: &mut PluginSet,
    path: &str,
    scoring_point: bool,
    version: ApiVersion,
    catalog: &dyn PluginCatalog,
    strategy: &mut Option<(String, &'static str)>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) {
    let mut out: Vec<Plugin> = Vec::with_capacity(set.enabled.len());
    for (k, plugin) in std::mem::take(&mut set.enabled).into_iter().enumerate() {
        let entry_path = format!("{path}.enabled[{k}]");
        if known(catalog, &plugin.name) {
            out.push(plugin);
            continue;
        }
        match legacy(&plugin.name) {
            Some(Legacy::ScoringStrategy(s)) if version == ApiVersion::V1Beta1 && scoring_point => {
                if let Some((first, _)) =
                    strategy.as_ref().filter(|(first, _)| *first != plugin.name)
                {
                    errors.push(FieldError::new(
                        &entry_path,
                        format!(
                            "{} cannot be enabled together with {first}: both are NodeResourcesFit scoring strategies in v1, keep one",
                            plugin.name
                        ),
                    ));
                    continue;
                }
                warnings.push(format!(
                    "{entry_path}: plugin {} was converted to NodeResourcesFit with `scoringStrategy.type: {s}` (it became a NodeResourcesFit scoring strategy in v1beta2)",
                    plugin.name
                ));
                *strategy = Some((plugin.name.clone(), s));
                if !out.iter().any(|p| p.name == NODE_RESOURCES_FIT) {
                    out.push(Plugin {
                        name: NODE_RESOURCES_FIT.to_string(),
                        weight: plugin.weight,
                    });
                }
            }
            Some(Legacy::ScoringStrategy(_)) if version == ApiVersion::V1Beta1 => {
                errors.push(FieldError::new(
                    &entry_path,
                    format!("{} is a score plugin: enable it under score", plugin.name),
                ))
            }
            Some(kind) => errors.push(FieldError::new(
                &entry_path,
                legacy_reason(&plugin.name, kind, version),
            )),
            None => out.push(plugin),
        }
    }
    set.enabled = out;
}

fn convert_disabled(
    set: &mut PluginSet,
    path: &str,
    scoring_point: bool,
    version: ApiVersion,
    catalog: &dyn PluginCatalog,
    warnings: &mut Vec<String>,
) {
    let fit_enabled = set.enabled.iter().any(|p| p.name == NODE_RESOURCES_FIT);
    let mut out: Vec<Plugin> = Vec::with_capacity(set.disabled.len());
    for (k, plugin) in std::mem::take(&mut set.disabled).into_iter().enumerate() {
        let entry_path = format!("{path}.disabled[{k}]");
        if known(catalog, &plugin.name) {
            out.push(plugin);
            continue;
        }
        match legacy(&plugin.name) {
            Some(Legacy::ScoringStrategy(_)) if version == ApiVersion::V1Beta1 && scoring_point => {
                if fit_enabled {
                    warnings.push(format!(
                        "{entry_path}: disabling {} was dropped: NodeResourcesFit, its successor, is enabled here with the strategy you chose",
                        plugin.name
                    ));
                } else {
                    warnings.push(format!(
                        "{entry_path}: disabling {} was converted to disabling NodeResourcesFit here (its successor)",
                        plugin.name
                    ));
                    if !out.iter().any(|p| p.name == NODE_RESOURCES_FIT) {
                        out.push(Plugin::named(NODE_RESOURCES_FIT));
                    }
                }
            }
            Some(kind) => warnings.push(format!(
                "{entry_path}: disabling {} has no effect, the plugin no longer exists ({}); remove this entry",
                plugin.name,
                legacy_reason(&plugin.name, kind, version)
            )),
            None => out.push(plugin),
        }
    }
    set.disabled = out;
}

/// Legacy args (`NodeResourcesLeastAllocatedArgs`, `NodeResourcesMostAllocatedArgs`,
/// `RequestedToCapacityRatioArgs`) -> a `NodeResourcesFit` `scoringStrategy`.
fn strategy_from_args(
    strategy: &'static str,
    args: Option<&Value>,
    path: &str,
) -> Result<Value, Vec<FieldError>> {
    let mut out = Map::new();
    out.insert("type".to_string(), Value::String(strategy.to_string()));
    let Some(args) = args else {
        return Ok(Value::Object(out));
    };
    let Value::Object(m) = args else {
        return Err(vec![FieldError::new(path, "expected a mapping")]);
    };
    let mut errors = Vec::new();
    for (key, v) in m {
        match (key.as_str(), strategy) {
            ("resources", _) => {
                out.insert("resources".to_string(), v.clone());
            }
            ("shape", "RequestedToCapacityRatio") => {
                out.insert(
                    "requestedToCapacityRatio".to_string(),
                    serde_json::json!({ "shape": v }),
                );
            }
            (other, _) => errors.push(FieldError::new(
                join_path(path, other),
                format!(
                    "unknown field {other:?}: the args of this plugin have {}",
                    if strategy == "RequestedToCapacityRatio" {
                        "shape and resources"
                    } else {
                        "only resources"
                    }
                ),
            )),
        }
    }
    if errors.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(errors)
    }
}
