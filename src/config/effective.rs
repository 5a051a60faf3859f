//! One profile, from what the user wrote to what the framework runs: checks of the user's plugin
//! lists, merge with the defaults, `multiPoint` expansion exactly as upstream's
//! `frameworkImpl.expandMultiPointPlugins`, score weights, and every enabled plugin's args.

use std::collections::{BTreeMap, BTreeSet};

use super::catalog::{ExtensionPoint, PluginAvailability, PluginCatalog};
use super::decode::did_you_mean;
use super::defaults::merge_plugins;
use super::error::FieldError;
use super::types::{
    ALL_PLUGINS, ApiVersion, EffectivePlugin, EffectiveProfile, KubeSchedulerProfile, Plugin,
    PluginSet, Plugins,
};
use crate::emulation::Emulation;

/// `framework.MaxNodeScore`.
pub(super) const MAX_NODE_SCORE: i64 = 100;

/// Availability of plugin names, asked of the catalog once per name; args are decoded at the
/// emulated minor.
pub(crate) struct Availability<'c> {
    catalog: &'c dyn PluginCatalog,
    emulation: &'c Emulation,
    cache: BTreeMap<String, PluginAvailability>,
    names: Option<Vec<String>>,
}

impl<'c> Availability<'c> {
    pub(super) fn new(catalog: &'c dyn PluginCatalog, emulation: &'c Emulation) -> Self {
        Availability {
            catalog,
            emulation,
            cache: BTreeMap::new(),
            names: None,
        }
    }

    fn decode_args(
        &self,
        name: &str,
        args: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, Vec<FieldError>> {
        self.catalog.decode_args(name, args, self.emulation)
    }

    pub(super) fn get(&mut self, name: &str) -> &PluginAvailability {
        let catalog = self.catalog;
        self.cache
            .entry(name.to_string())
            .or_insert_with(|| catalog.availability(name))
    }

    /// The extension points `name` implements; `None` when no such plugin exists.
    pub(super) fn points(&mut self, name: &str) -> Option<Vec<ExtensionPoint>> {
        match self.get(name) {
            PluginAvailability::Built(points) => Some(points.clone()),
            PluginAvailability::NotBuiltYet {
                extension_points, ..
            } => Some(extension_points.clone()),
            PluginAvailability::Unknown => None,
        }
    }

    pub(super) fn implements(&mut self, name: &str, point: ExtensionPoint) -> bool {
        self.points(name).is_some_and(|p| p.contains(&point))
    }

    /// "unknown plugin ...: the plugins that exist are ..." with a suggestion when one is close.
    pub(super) fn unknown_reason(&mut self, name: &str) -> String {
        let catalog = self.catalog;
        let names = self.names.get_or_insert_with(|| catalog.plugin_names());
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let close = did_you_mean(name, &refs);
        format!(
            "unknown plugin {name:?}{close}: no plugin of that name exists in this ksched; the plugins that exist are: {} (an out-of-tree plugin must be registered in the binary's main before a configuration can use it)",
            refs.join(", ")
        )
    }
}

fn point_list(points: &[ExtensionPoint]) -> String {
    points
        .iter()
        .map(|p| p.field_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The user's plugin sets, each with its field name: the 12 extension points, then `multiPoint`
/// and the two placement points.
fn user_sets(plugins: &Plugins) -> Vec<(&'static str, Option<ExtensionPoint>, &PluginSet)> {
    let mut sets: Vec<_> = ExtensionPoint::ALL
        .into_iter()
        .map(|p| (p.field_name(), Some(p), plugins.get(p)))
        .collect();
    sets.push(("multiPoint", None, &plugins.multi_point));
    sets
}

/// Checks what the user wrote in `plugins` (paths point at their entries).
fn check_user_plugins(
    base: &str,
    plugins: &Plugins,
    avail: &mut Availability<'_>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) {
    for (field, point, set) in user_sets(plugins) {
        let path = format!("{base}.plugins.{field}");
        let mut seen = BTreeSet::new();
        for (k, plugin) in set.enabled.iter().enumerate() {
            let entry = format!("{path}.enabled[{k}]");
            let name = plugin.name.as_str();
            if name.is_empty() {
                continue; // reported while decoding
            }
            if name == ALL_PLUGINS {
                errors.push(FieldError::new(
                    &entry,
                    "\"*\" can only be used in `disabled` (to disable every default plugin of this extension point)",
                ));
                continue;
            }
            let Some(implemented) = avail.points(name) else {
                errors.push(FieldError::new(&entry, avail.unknown_reason(name)));
                continue;
            };
            // Enabled by the user (not merely inherited from the defaults): it must be runnable.
            if let PluginAvailability::NotBuiltYet { reason, .. } = avail.get(name) {
                errors.push(FieldError::new(
                    &entry,
                    format!("plugin {name} is known but not supported by this ksched yet ({reason}): remove it from the configuration"),
                ));
                continue;
            }
            if let Some(point) = point
                && !implemented.contains(&point)
            {
                errors.push(FieldError::new(
                    &entry,
                    format!(
                        "plugin {name} does not implement the {field} extension point (it implements: {}): move it to one of those, or list it under multiPoint to enable it at all of them",
                        point_list(&implemented)
                    ),
                ));
            }
            if !seen.insert(name) {
                errors.push(FieldError::new(
                    &entry,
                    format!("plugin {name} is enabled twice at {field}: list it once"),
                ));
            }
            if let Some(weight) = plugin.weight {
                if weight < 0 {
                    errors.push(FieldError::new(
                        format!("{entry}.weight"),
                        format!(
                            "must not be negative (got {weight}): a score weight is 1 or more (0 or unset means 1); to stop a plugin from scoring, disable it at score"
                        ),
                    ));
                } else if weight != 0 && point.is_some_and(|p| !p.is_weighted()) {
                    warnings.push(format!(
                        "{entry}.weight: ignored, a weight is only used at score and placementScore (and multiPoint, for the plugin's scores)"
                    ));
                }
            }
        }
        for (k, plugin) in set.disabled.iter().enumerate() {
            let name = plugin.name.as_str();
            if name.is_empty() || name == ALL_PLUGINS {
                continue;
            }
            if avail.points(name).is_none() {
                let names = avail.catalog.plugin_names();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let close = did_you_mean(name, &refs);
                warnings.push(format!(
                    "{path}.disabled[{k}]: no plugin named {name:?} exists{close}, so disabling it has no effect"
                ));
            }
        }
    }
}

/// `expandMultiPointPlugins`: the plugins at each extension point, in upstream's order.
/// Problems (unknown plugins, misfits, duplicates) were reported by `check_user_plugins`; here
/// they are skipped.
fn expand(
    merged: &Plugins,
    avail: &mut Availability<'_>,
) -> BTreeMap<ExtensionPoint, Vec<EffectivePlugin>> {
    let mut out = BTreeMap::new();
    let minor = avail.emulation.minor();
    for point in ExtensionPoint::ALL {
        if !ApiVersion::V1.has_point(point, minor) {
            // Not a point of this minor (podGroupPostFilter before 1.37): nothing runs there,
            // and the printed configuration leaves it out.
            continue;
        }
        let specific = merged.get(point);
        // The plugins enabled at this point itself (duplicates and misfits were reported already).
        let mut enabled: Vec<&Plugin> = Vec::new();
        for p in &specific.enabled {
            if p.name != ALL_PLUGINS
                && avail.implements(&p.name, point)
                && !enabled.iter().any(|e| e.name == p.name)
            {
                enabled.push(p);
            }
        }
        let mut order: Vec<&str> = Vec::new();
        if specific.disables_all() {
            order.extend(enabled.iter().map(|p| p.name.as_str()));
        } else {
            let mut overrides: Vec<&str> = Vec::new();
            let mut from_multi_point: Vec<&str> = Vec::new();
            for p in &merged.multi_point.enabled {
                let name = p.name.as_str();
                if !avail.implements(name, point) || specific.disables(name) {
                    continue;
                }
                if enabled.iter().any(|e| e.name == name) {
                    if !overrides.contains(&name) {
                        overrides.push(name);
                    }
                    continue;
                }
                if from_multi_point.contains(&name) {
                    continue; // listed twice: reported with the user's entry
                }
                from_multi_point.push(name);
            }
            // Upstream's order: overrides (in this point's order), then multiPoint, then the rest.
            order.extend(
                enabled
                    .iter()
                    .map(|p| p.name.as_str())
                    .filter(|n| overrides.contains(n)),
            );
            order.extend(from_multi_point);
            order.extend(
                enabled
                    .iter()
                    .map(|p| p.name.as_str())
                    .filter(|n| !overrides.contains(n)),
            );
        }
        let list = order
            .into_iter()
            .map(|name| {
                let weight = if point.is_weighted() {
                    score_weight(merged.get(point), &merged.multi_point, name)
                } else {
                    0
                };
                EffectivePlugin::new(name, weight)
            })
            .collect();
        out.insert(point, list);
    }
    out
}

/// `getValidScoreWeights`: the point's own entry's weight (score or placementScore) wins over
/// multiPoint's; 0 or unset is 1.
fn score_weight(point: &PluginSet, multi_point: &PluginSet, name: &str) -> i32 {
    let weight = point
        .enabled
        .iter()
        .chain(&multi_point.enabled)
        .find(|p| p.name == name)
        .and_then(|p| p.weight)
        .unwrap_or(0);
    if weight == 0 { 1 } else { weight }
}

/// Resolves profile `i`: checks, merge, expansion, per-profile validation, args.
pub(crate) fn resolve_profile(
    i: usize,
    profile: &KubeSchedulerProfile,
    defaults: &Plugins,
    avail: &mut Availability<'_>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<String>,
) -> EffectiveProfile {
    let base = format!("profiles[{i}]");
    if let Some(plugins) = &profile.plugins {
        check_user_plugins(&base, plugins, avail, errors, warnings);
    }
    let merged = merge_plugins(defaults, profile.plugins.as_ref());
    let plugins = expand(&merged, avail);
    let scheduler_name = profile.scheduler_name.clone().unwrap_or_default();

    let queue_sort = &plugins[&ExtensionPoint::QueueSort];
    if queue_sort.len() != 1 {
        let found: Vec<&str> = queue_sort.iter().map(|p| p.name.as_str()).collect();
        let fix = if queue_sort.is_empty() {
            "enable one, e.g. `queueSort: {enabled: [{name: PrioritySort}]}`".to_string()
        } else {
            "to use your own, disable the default: `queueSort: {disabled: [{name: \"*\"}], enabled: [{name: <yours>}]}`".to_string()
        };
        errors.push(FieldError::new(
            format!("{base}.plugins.queueSort"),
            format!(
                "exactly one queueSort plugin must be enabled, found {} ({}): {fix}",
                queue_sort.len(),
                found.join(", ")
            ),
        ));
    }
    if plugins[&ExtensionPoint::Bind].is_empty() {
        errors.push(FieldError::new(
            format!("{base}.plugins.bind"),
            "at least one bind plugin is needed: enable DefaultBinder (`bind: {enabled: [{name: DefaultBinder}]}`) or your own",
        ));
    }
    let mut total: i64 = 0;
    for p in &plugins[&ExtensionPoint::Score] {
        match i64::from(p.weight)
            .checked_mul(MAX_NODE_SCORE)
            .and_then(|s| total.checked_add(s))
        {
            Some(t) => total = t,
            None => {
                errors.push(FieldError::new(
                    format!("{base}.plugins.score"),
                    "the total score of the score plugins could overflow: lower the weights",
                ));
                break;
            }
        }
    }
    warn_orphaned_preparation(&base, profile, &plugins, avail, warnings);

    // Args: every pluginConfig entry is decoded strictly; every enabled plugin gets its args.
    let enabled: BTreeSet<String> = plugins.values().flatten().map(|p| p.name.clone()).collect();
    let mut configured: BTreeMap<&str, usize> = BTreeMap::new();
    let mut plugin_args = BTreeMap::new();
    for (j, pc) in profile.plugin_config.iter().enumerate() {
        let path = format!("{base}.pluginConfig[{j}]");
        if pc.name.is_empty() {
            continue; // reported while decoding
        }
        if let Some(first) = configured.get(pc.name.as_str()) {
            errors.push(FieldError::new(
                &path,
                format!(
                    "duplicate pluginConfig for {}: already configured in {base}.pluginConfig[{first}]; merge the two",
                    pc.name
                ),
            ));
            continue;
        }
        configured.insert(&pc.name, j);
        if avail.points(&pc.name).is_none() {
            errors.push(FieldError::new(
                format!("{path}.name"),
                avail.unknown_reason(&pc.name),
            ));
            continue;
        }
        match avail.decode_args(&pc.name, pc.args.as_ref()) {
            Ok(args) => {
                if enabled.contains(&pc.name) {
                    plugin_args.insert(pc.name.clone(), args);
                } else {
                    warnings.push(format!(
                        "{path}: plugin {} is not enabled in this profile, so these args have no effect",
                        pc.name
                    ));
                }
            }
            Err(errs) => {
                let args_path = format!("{path}.args");
                errors.extend(errs.into_iter().map(|e| e.under(&args_path)));
            }
        }
    }
    for name in &enabled {
        if configured.contains_key(name.as_str()) {
            continue;
        }
        match avail.decode_args(name, None) {
            Ok(args) => {
                plugin_args.insert(name.clone(), args);
            }
            Err(errs) => errors.extend(errs.into_iter().map(|e| {
                FieldError::new(
                    format!("{base}.pluginConfig"),
                    format!("the default args of {name} do not validate ({}: {}): this is a bug in the plugin", e.path, e.reason),
                )
            })),
        }
    }

    EffectiveProfile {
        scheduler_name,
        percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
        plugins,
        plugin_args,
    }
}

/// A plugin left at preScore (or preFilter) by multiPoint while the user disabled it at score (or
/// filter): its preparation work has nothing to prepare for. Upstream runs it anyway; we say so.
fn warn_orphaned_preparation(
    base: &str,
    profile: &KubeSchedulerProfile,
    plugins: &BTreeMap<ExtensionPoint, Vec<EffectivePlugin>>,
    avail: &mut Availability<'_>,
    warnings: &mut Vec<String>,
) {
    let Some(user) = &profile.plugins else { return };
    for (prep, main) in [
        (ExtensionPoint::PreScore, ExtensionPoint::Score),
        (ExtensionPoint::PreFilter, ExtensionPoint::Filter),
    ] {
        for p in &plugins[&prep] {
            let at_main = plugins[&main].iter().any(|m| m.name == p.name);
            let explicitly_here = user.get(prep).enabled.iter().any(|e| e.name == p.name);
            if !at_main
                && !explicitly_here
                && user.get(main).disables(&p.name)
                && avail.implements(&p.name, main)
            {
                warnings.push(format!(
                    "{base}: plugin {name} is disabled at {main} but stays enabled at {prep} through multiPoint (the default plugin set); disable it at {prep} too, or add it to plugins.multiPoint.disabled to remove it everywhere",
                    name = p.name,
                    main = main.field_name(),
                    prep = prep.field_name(),
                ));
            }
        }
    }
}
