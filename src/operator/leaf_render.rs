//! The LeafClusterPolicies naming a profile, rendered into the leaf plugins' entries and args of
//! that profile (pure; the operator's render.rs calls it, `ksched scheduler` never sees the CRDs).
//!
//! With at least one policy naming the profile:
//! - `LeafNodeTaintToleration` replaces `TaintToleration` at filter, preScore and score (score
//!   weight 3, TaintToleration's), tolerating each policy's `taint` for the pods its
//!   `placement.namespaceSelector`/`podSelector` select (none for HostOnly policies);
//! - `LeafNodeDistribution` is added at filter and score (weight [`DISTRIBUTION_SCORE_WEIGHT`]) with
//!   one entry per policy (`leafNodeSelector` and `placement`);
//! - `LeafNodeVolumeBinding` replaces `VolumeBinding` at preFilter, filter, reserve and preBind
//!   (and VolumeBinding is disabled at preScore and score, which need its PreFilter), with one entry
//!   per policy (`leafNodeSelector`, `volumes.mode`).
//!
//! Policies are taken in name order, and every plugin's outcome is independent of that order.
//! With no policy naming the profile nothing changes: leaf nodes stay opt-in.

use std::collections::BTreeMap;
use std::fmt;

use kube::ResourceExt;
use serde_json::{Value, json};

use crate::api::LeafClusterPolicy;
use crate::api::leaf_cluster_policy::{
    LAST_VALID_SPEC_ANNOTATION, LeafClusterPolicySpec, PlacementMode,
};
use crate::config::ExtensionPoint::{self, *};
use crate::config::FieldError;
use crate::framework::args::{decode, forbidden, invalid};
use crate::framework::plugins::leaf::distribution::{DistributionPolicy, LeafNodeDistributionArgs};
use crate::framework::plugins::leaf::taint_toleration::{
    LeafNodeTaintTolerationArgs, LeafTaintPolicy,
};
use crate::framework::plugins::leaf::validate_selector;
use crate::framework::plugins::leaf::volume_binding::{LeafNodeVolumeBindingArgs, VolumePolicy};
use crate::framework::plugins::names;

/// The score weight of LeafNodeDistribution in a rendered profile: a placement `weight` of 100
/// then outweighs the default score plugins' usual differences, so PreferHost/PreferLeaf fill the
/// preferred side first.
pub const DISTRIBUTION_SCORE_WEIGHT: i32 = 10;
/// TaintToleration's default score weight, kept for LeafNodeTaintToleration.
pub const TAINT_TOLERATION_SCORE_WEIGHT: i32 = 3;

/// What is wrong with a LeafClusterPolicy's spec beyond what its CRD schema checks, with the
/// policy's own field paths (`spec.leafNodeSelector.matchExpressions[0].operator`). Empty: valid.
pub fn validate_policy(spec: &LeafClusterPolicySpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let sel = &spec.leaf_node_selector;
    let selects_all = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
    if selects_all && !spec.select_all_nodes {
        errs.push(invalid(
            "spec.leafNodeSelector",
            "{}",
            "selects every node, host nodes included: give a selector that matches only the leaf nodes (such as matchLabels: {kosmos.io/node: \"true\"}), or set spec.selectAllNodes: true if every node is a leaf node",
        ));
    }
    validate_selector("spec.leafNodeSelector", Some(sel), &mut errs);
    let placement = &spec.placement;
    validate_selector(
        "spec.placement.namespaceSelector",
        placement.namespace_selector.as_ref(),
        &mut errs,
    );
    validate_selector(
        "spec.placement.podSelector",
        placement.pod_selector.as_ref(),
        &mut errs,
    );
    let prefer = matches!(
        placement.mode,
        PlacementMode::PreferHost | PlacementMode::PreferLeaf
    );
    match placement.weight {
        Some(w) if prefer && !(1..=100).contains(&w) => errs.push(invalid(
            "spec.placement.weight",
            w,
            "must be in the range 1-100",
        )),
        Some(_) if !prefer => errs.push(forbidden(
            "spec.placement.weight",
            "only applies to mode PreferHost or PreferLeaf",
        )),
        _ => {}
    }
    errs
}

/// The policy's last valid spec, as the operator recorded it ([`LAST_VALID_SPEC_ANNOTATION`]),
/// when it parses and is still valid.
pub fn last_valid_spec(policy: &LeafClusterPolicy) -> Option<LeafClusterPolicySpec> {
    let raw = policy.annotations().get(LAST_VALID_SPEC_ANNOTATION)?;
    let spec: LeafClusterPolicySpec = serde_json::from_str(raw).ok()?;
    validate_policy(&spec).is_empty().then_some(spec)
}

/// A LeafClusterPolicy naming a profile that the profile does not take as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredPolicy {
    pub policy: String,
    /// What is wrong, with the policy's own field paths.
    pub errors: Vec<FieldError>,
    /// The policy's last valid spec is rendered instead; otherwise nothing of the policy is.
    pub last_valid_used: bool,
}

impl fmt::Display for IgnoredPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errors: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        let outcome = if self.last_valid_used {
            "its last valid spec stays in effect"
        } else {
            "it is left out (it never had a valid spec)"
        };
        write!(
            f,
            "LeafClusterPolicy {}: {}; {outcome}",
            self.policy,
            errors.join("; ")
        )
    }
}

/// One plugin entry change at one extension point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginChange {
    pub extension_point: ExtensionPoint,
    /// Added to `disabled` (the upstream plugin replaced), if any.
    pub disable: Option<&'static str>,
    /// Added to `enabled`, if any.
    pub enable: Option<&'static str>,
    /// The enabled entry's weight (score only).
    pub weight: Option<i32>,
}

/// What rendering the policies adds to one profile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeafPluginConfig {
    /// The policies applied, in name order.
    pub policies: Vec<String>,
    /// Policies naming the profile that are not applied as written, and why.
    pub ignored: Vec<IgnoredPolicy>,
    /// Plugin entries to disable/enable, per extension point.
    pub changes: Vec<PluginChange>,
    /// `pluginConfig` args per plugin (normalized JSON).
    pub args: BTreeMap<&'static str, Value>,
}

impl LeafPluginConfig {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Applies the changes to one profile of a KubeSchedulerConfiguration (as JSON:
    /// `{schedulerName, plugins, pluginConfig}`): adds the disabled/enabled entries that are not
    /// there yet and merges the args with the profile's own `pluginConfig` for the leaf plugins.
    ///
    /// Precedence, per leaf plugin: the profile's own args are validated as the plugin's (errors
    /// name `pluginConfig[j].args.<field>`); `policies` is the policies' entries (in policy name
    /// order) followed by the profile's own; every other field the profile sets (`bindTimeoutSeconds`,
    /// `shape`, `kubeConfigPath`) is taken as it set it. LeafNodeVolumeBinding without a
    /// `bindTimeoutSeconds` of its own takes VolumeBinding's, if the profile configured one.
    pub fn apply_to_profile(&self, profile: &mut Value) -> Result<(), Vec<FieldError>> {
        if self.is_empty() {
            return Ok(());
        }
        let Some(obj) = profile.as_object_mut() else {
            return Ok(());
        };
        let plugins = obj.entry("plugins").or_insert_with(|| json!({}));
        for c in &self.changes {
            let Some(point) = plugins.as_object_mut().map(|p| {
                p.entry(c.extension_point.field_name())
                    .or_insert_with(|| json!({}))
            }) else {
                continue;
            };
            if let Some(d) = c.disable {
                push_entry(point, "disabled", json!({"name": d}));
            }
            if let Some(e) = c.enable {
                let entry = match c.weight {
                    Some(w) => json!({"name": e, "weight": w}),
                    None => json!({"name": e}),
                };
                push_entry(point, "enabled", entry);
            }
        }
        let config = obj.entry("pluginConfig").or_insert_with(|| json!([]));
        let Some(list) = config.as_array_mut() else {
            return Ok(());
        };
        let vb_timeout = list
            .iter()
            .find(|e| e["name"] == names::VOLUME_BINDING)
            .and_then(|e| e["args"].get("bindTimeoutSeconds").cloned());
        let mut errors = Vec::new();
        for (name, rendered) in &self.args {
            let own = list.iter().position(|e| e["name"] == *name);
            let user_raw = own
                .and_then(|j| list[j].get("args"))
                .filter(|a| !a.is_null());
            let mut args = match user_raw {
                None => rendered.clone(),
                Some(raw) => match decode_leaf_args(name, raw) {
                    Ok(normalized) => merge_args(rendered, raw, &normalized),
                    Err(errs) => {
                        let at = format!("pluginConfig[{}].args", own.unwrap_or_default());
                        errors.extend(errs.into_iter().map(|e| e.under(&at)));
                        continue;
                    }
                },
            };
            let own_timeout = user_raw.is_some_and(|r| r.get("bindTimeoutSeconds").is_some());
            if *name == names::LEAF_NODE_VOLUME_BINDING
                && !own_timeout
                && let (Some(t), Some(a)) = (&vb_timeout, args.as_object_mut())
            {
                a.insert("bindTimeoutSeconds".into(), t.clone());
            }
            let entry = json!({"name": name, "args": args});
            match own {
                Some(j) => list[j] = entry,
                None => list.push(entry),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The profile's own args of a leaf plugin, decoded and validated as that plugin's.
fn decode_leaf_args(name: &str, raw: &Value) -> Result<Value, Vec<FieldError>> {
    match name {
        names::LEAF_NODE_TAINT_TOLERATION => decode::<LeafNodeTaintTolerationArgs>(Some(raw)),
        names::LEAF_NODE_DISTRIBUTION => decode::<LeafNodeDistributionArgs>(Some(raw)),
        names::LEAF_NODE_VOLUME_BINDING => decode::<LeafNodeVolumeBindingArgs>(Some(raw)),
        _ => Ok(raw.clone()),
    }
}

/// The policies' args with the profile's own (see [`LeafPluginConfig::apply_to_profile`]): only
/// the fields the profile wrote (`raw`) are taken, in their normalized form.
fn merge_args(rendered: &Value, raw: &Value, normalized: &Value) -> Value {
    let mut out = rendered.as_object().cloned().unwrap_or_default();
    for (key, value) in raw.as_object().into_iter().flatten() {
        if matches!(key.as_str(), "apiVersion" | "kind") || value.is_null() {
            continue;
        }
        if key == "policies" {
            let mut all = rendered["policies"].as_array().cloned().unwrap_or_default();
            all.extend(
                normalized["policies"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
            out.insert(key.clone(), Value::Array(all));
        } else if let Some(v) = normalized.get(key) {
            out.insert(key.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn push_entry(point: &mut Value, list: &str, entry: Value) {
    let Some(point) = point.as_object_mut() else {
        return;
    };
    let Some(items) = point
        .entry(list)
        .or_insert_with(|| json!([]))
        .as_array_mut()
    else {
        return;
    };
    if !items.iter().any(|e| e["name"] == entry["name"]) {
        items.push(entry);
    }
}

fn change(
    extension_point: ExtensionPoint,
    disable: Option<&'static str>,
    enable: Option<&'static str>,
    weight: Option<i32>,
) -> PluginChange {
    PluginChange {
        extension_point,
        disable,
        enable,
        weight,
    }
}

/// The policies naming `profile_name` (directly or with `*`) as the profile takes them, in name
/// order: a valid spec as written, an invalid one by its last valid spec (or not at all).
fn effective_policies(
    profile_name: &str,
    policies: &[LeafClusterPolicy],
) -> (Vec<(String, LeafClusterPolicySpec)>, Vec<IgnoredPolicy>) {
    let mut mine: Vec<&LeafClusterPolicy> = policies
        .iter()
        .filter(|p| {
            p.spec
                .profiles
                .iter()
                .any(|n| n == "*" || n == profile_name)
        })
        .collect();
    mine.sort_by_key(|p| p.name_any());
    let mut used = Vec::new();
    let mut ignored = Vec::new();
    for p in mine {
        let errors = validate_policy(&p.spec);
        if errors.is_empty() {
            used.push((p.name_any(), p.spec.clone()));
            continue;
        }
        let last = last_valid_spec(p);
        ignored.push(IgnoredPolicy {
            policy: p.name_any(),
            errors,
            last_valid_used: last.is_some(),
        });
        if let Some(spec) = last {
            used.push((p.name_any(), spec));
        }
    }
    (used, ignored)
}

/// The plugin entries and args the policies naming `profile_name` (directly or with `*`) add to
/// that profile. A policy whose spec is invalid never breaks the profile: its last valid spec is
/// rendered instead, or nothing of it, and [`LeafPluginConfig::ignored`] says so.
pub fn render_leaf_policies(
    profile_name: &str,
    policies: &[LeafClusterPolicy],
) -> LeafPluginConfig {
    let (mine, ignored) = effective_policies(profile_name, policies);
    if mine.is_empty() {
        return LeafPluginConfig {
            ignored,
            ..LeafPluginConfig::default()
        };
    }

    let taints = LeafNodeTaintTolerationArgs {
        policies: Some(
            mine.iter()
                .filter(|(_, p)| p.placement.mode != PlacementMode::HostOnly)
                .map(|(_, p)| LeafTaintPolicy {
                    taints: vec![p.taint.clone()],
                    namespace_selector: p.placement.namespace_selector.clone(),
                    pod_selector: p.placement.pod_selector.clone(),
                })
                .collect(),
        ),
    };
    let distribution = LeafNodeDistributionArgs {
        kube_config_path: None,
        policies: mine
            .iter()
            .map(|(name, p)| DistributionPolicy {
                name: name.clone(),
                leaf_node_selector: p.leaf_node_selector.clone(),
                mode: p.placement.mode,
                weight: p.placement.weight,
                namespace_selector: p.placement.namespace_selector.clone(),
                pod_selector: p.placement.pod_selector.clone(),
            })
            .collect(),
    };
    let volumes = LeafNodeVolumeBindingArgs {
        policies: mine
            .iter()
            .map(|(name, p)| VolumePolicy {
                name: name.clone(),
                leaf_node_selector: p.leaf_node_selector.clone(),
                mode: p.volumes.mode,
            })
            .collect(),
        ..LeafNodeVolumeBindingArgs::default()
    };

    let tt = Some(names::TAINT_TOLERATION);
    let ltt = Some(names::LEAF_NODE_TAINT_TOLERATION);
    let vb = Some(names::VOLUME_BINDING);
    let lvb = Some(names::LEAF_NODE_VOLUME_BINDING);
    let lnd = Some(names::LEAF_NODE_DISTRIBUTION);
    LeafPluginConfig {
        policies: mine.into_iter().map(|(name, _)| name).collect(),
        ignored,
        changes: vec![
            change(Filter, tt, ltt, None),
            change(PreScore, tt, ltt, None),
            change(Score, tt, ltt, Some(TAINT_TOLERATION_SCORE_WEIGHT)),
            change(Filter, None, lnd, None),
            change(Score, None, lnd, Some(DISTRIBUTION_SCORE_WEIGHT)),
            change(PreFilter, vb, lvb, None),
            change(Filter, vb, lvb, None),
            change(Reserve, vb, lvb, None),
            change(PreBind, vb, lvb, None),
            change(PreScore, vb, None, None),
            change(Score, vb, None, None),
        ],
        args: BTreeMap::from([
            (names::LEAF_NODE_TAINT_TOLERATION, to_json(&taints)),
            (names::LEAF_NODE_DISTRIBUTION, to_json(&distribution)),
            (names::LEAF_NODE_VOLUME_BINDING, to_json(&volumes)),
        ]),
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use crate::framework::plugins::leaf::distribution::LeafNodeDistributionArgs;
    use crate::framework::registry::Registry;

    fn policy(name: &str, spec: Value) -> LeafClusterPolicy {
        serde_json::from_value(json!({
            "apiVersion": "ksched.io/v1alpha1", "kind": "LeafClusterPolicy",
            "metadata": {"name": name}, "spec": spec
        }))
        .expect("policy")
    }

    #[test]
    fn no_policy_naming_the_profile_changes_nothing() {
        let p = policy("other", json!({"profiles": ["someone-else"]}));
        let out = render_leaf_policies("mine", &[p]);
        assert!(out.is_empty());
        let mut profile = json!({"schedulerName": "mine"});
        out.apply_to_profile(&mut profile).expect("applies");
        assert_eq!(profile, json!({"schedulerName": "mine"}));
    }

    #[test]
    fn policies_render_into_args_in_name_order() {
        let b = policy(
            "b-dbs",
            json!({
                "profiles": ["*"],
                "leafNodeSelector": {"matchLabels": {"cluster": "x"}},
                "taint": {"key": "leaf.example.com/x", "effect": "NoExecute"},
                "placement": {"mode": "PreferLeaf", "weight": 40,
                    "podSelector": {"matchLabels": {"app": "db"}}},
                "volumes": {"mode": "Default"}
            }),
        );
        let a = policy(
            "a-web",
            json!({
                "profiles": ["mine"],
                "placement": {"mode": "HostOnly", "namespaceSelector": {"matchLabels": {"env": "prod"}}}
            }),
        );
        let out = render_leaf_policies("mine", &[b, a]);
        assert_eq!(out.policies, ["a-web", "b-dbs"]);
        assert_eq!(
            out.args[names::LEAF_NODE_DISTRIBUTION],
            json!({"policies": [
                {"name": "a-web", "leafNodeSelector": {"matchLabels": {"kosmos.io/node": "true"}},
                 "mode": "HostOnly", "namespaceSelector": {"matchLabels": {"env": "prod"}}},
                {"name": "b-dbs", "leafNodeSelector": {"matchLabels": {"cluster": "x"}},
                 "mode": "PreferLeaf", "weight": 40, "podSelector": {"matchLabels": {"app": "db"}}}
            ]})
        );
        // HostOnly policies tolerate nothing.
        assert_eq!(
            out.args[names::LEAF_NODE_TAINT_TOLERATION],
            json!({"policies": [{"taints": [{"key": "leaf.example.com/x", "effect": "NoExecute"}],
                "podSelector": {"matchLabels": {"app": "db"}}}]})
        );
        assert_eq!(
            out.args[names::LEAF_NODE_VOLUME_BINDING],
            json!({"policies": [
                {"name": "a-web", "leafNodeSelector": {"matchLabels": {"kosmos.io/node": "true"}}, "mode": "LeafProvisioned"},
                {"name": "b-dbs", "leafNodeSelector": {"matchLabels": {"cluster": "x"}}, "mode": "Default"}
            ]})
        );
        // Every rendered args decodes strictly.
        let r = Registry::in_tree();
        for (name, args) in &out.args {
            assert!(
                crate::config::PluginCatalog::decode_args(
                    &r,
                    name,
                    Some(args),
                    &crate::emulation::Emulation::default()
                )
                .is_ok(),
                "{name}: {args}"
            );
        }
        assert!(
            decode::<LeafNodeDistributionArgs>(Some(&out.args[names::LEAF_NODE_DISTRIBUTION]))
                .is_ok()
        );
    }

    #[test]
    fn only_host_only_policies_tolerate_nothing() {
        let out = render_leaf_policies(
            "mine",
            &[policy(
                "h",
                json!({"profiles": ["mine"], "placement": {"mode": "HostOnly"}}),
            )],
        );
        let normalized = decode::<LeafNodeTaintTolerationArgs>(Some(
            &out.args[names::LEAF_NODE_TAINT_TOLERATION],
        ))
        .expect("args");
        // An empty list: no pod tolerates a leaf taint (unset would mean Kosmos's tolerate-all).
        assert_eq!(normalized, json!({"policies": []}));
    }

    #[test]
    fn rendered_profile_loads_with_leaf_plugins_in_place_of_upstream_ones() {
        let out = render_leaf_policies(
            "mine",
            &[
                policy(
                    "a",
                    json!({"profiles": ["mine"], "placement": {"mode": "PreferHost"}}),
                ),
                policy(
                    "b",
                    json!({"profiles": ["*"], "placement": {"mode": "LeafOnly",
                    "podSelector": {"matchLabels": {"app": "db"}}}}),
                ),
            ],
        );
        let mut profile = json!({"schedulerName": "mine"});
        out.apply_to_profile(&mut profile).expect("applies");
        let doc = json!({"apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration", "profiles": [profile]});
        let loaded = crate::config::load(doc.to_string().as_bytes(), &Registry::in_tree())
            .expect("rendered configuration loads");
        let p = loaded.config.profile("mine").expect("profile");
        let filter = p.names_at(Filter);
        for name in [
            "LeafNodeTaintToleration",
            "LeafNodeDistribution",
            "LeafNodeVolumeBinding",
        ] {
            assert!(filter.contains(&name), "{filter:?}");
        }
        for name in ["TaintToleration", "VolumeBinding"] {
            assert!(
                p.points_of(name).is_empty(),
                "{name} still at {:?}",
                p.points_of(name)
            );
        }
        assert_eq!(
            p.points_of("LeafNodeVolumeBinding"),
            [PreFilter, Filter, Reserve, PreBind]
        );
        let score: Vec<(&str, i32)> = p
            .at(Score)
            .iter()
            .map(|e| (e.name.as_str(), e.weight))
            .collect();
        assert!(score.contains(&("LeafNodeTaintToleration", 3)), "{score:?}");
        assert!(score.contains(&("LeafNodeDistribution", 10)), "{score:?}");
        assert_eq!(
            p.args("LeafNodeDistribution")
                .map(|a| a["policies"][0]["weight"].clone()),
            Some(json!(100))
        );
    }

    #[test]
    fn apply_to_profile_replaces_upstream_plugins_and_keeps_the_timeout() {
        let out = render_leaf_policies("mine", &[policy("p", json!({"profiles": ["mine"]}))]);
        let mut profile = json!({
            "schedulerName": "mine",
            "plugins": {"filter": {"enabled": [{"name": "NodeName"}]}},
            "pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 30}}]
        });
        out.apply_to_profile(&mut profile).expect("applies");
        assert_eq!(
            profile["plugins"]["filter"],
            json!({"enabled": [{"name": "NodeName"}, {"name": "LeafNodeTaintToleration"},
                {"name": "LeafNodeDistribution"}, {"name": "LeafNodeVolumeBinding"}],
                "disabled": [{"name": "TaintToleration"}, {"name": "VolumeBinding"}]})
        );
        assert_eq!(
            profile["plugins"]["score"],
            json!({"enabled": [{"name": "LeafNodeTaintToleration", "weight": 3},
                {"name": "LeafNodeDistribution", "weight": 10}],
                "disabled": [{"name": "TaintToleration"}, {"name": "VolumeBinding"}]})
        );
        let lvb = profile["pluginConfig"]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["name"] == "LeafNodeVolumeBinding"))
            .cloned()
            .expect("LeafNodeVolumeBinding args");
        assert_eq!(lvb["args"]["bindTimeoutSeconds"], json!(30));
        assert_eq!(profile["pluginConfig"].as_array().map(Vec::len), Some(4));
    }

    fn own_args(profile: &Value, name: &str) -> Value {
        profile["pluginConfig"]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["name"] == name))
            .map(|e| e["args"].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn the_profiles_own_leaf_args_are_merged_never_dropped() {
        let out = render_leaf_policies("mine", &[policy("p", json!({"profiles": ["mine"]}))]);
        let mut profile = json!({
            "schedulerName": "mine",
            "pluginConfig": [
                {"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 30}},
                {"name": "LeafNodeVolumeBinding", "args": {"bindTimeoutSeconds": 5}},
                {"name": "LeafNodeTaintToleration", "args": {"policies": [
                    {"taints": [{"key": "gpu.example.com/leaf", "effect": "NoSchedule"}],
                     "podSelector": {"matchLabels": {"gpu": "yes"}}}]}},
                {"name": "LeafNodeDistribution", "args": {"kubeConfigPath": "/etc/kubeconfig"}}
            ]
        });
        out.apply_to_profile(&mut profile).expect("applies");
        // The profile's own bindTimeoutSeconds wins over VolumeBinding's; the entry keeps its place.
        assert_eq!(profile["pluginConfig"][1]["name"], "LeafNodeVolumeBinding");
        let lvb = own_args(&profile, "LeafNodeVolumeBinding");
        assert_eq!(lvb["bindTimeoutSeconds"], json!(5));
        assert_eq!(lvb["policies"][0]["name"], json!("p"));
        // The policies' entries first, then the profile's own.
        let ltt = own_args(&profile, "LeafNodeTaintToleration");
        assert_eq!(
            ltt["policies"],
            json!([
                {"taints": [{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}]},
                {"taints": [{"key": "gpu.example.com/leaf", "effect": "NoSchedule"}],
                 "podSelector": {"matchLabels": {"gpu": "yes"}}}
            ])
        );
        let lnd = own_args(&profile, "LeafNodeDistribution");
        assert_eq!(lnd["kubeConfigPath"], json!("/etc/kubeconfig"));
        assert_eq!(lnd["policies"].as_array().map(Vec::len), Some(1));
        assert_eq!(profile["pluginConfig"].as_array().map(Vec::len), Some(4));
        // And the whole profile loads.
        let doc = json!({"apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration", "profiles": [profile]});
        let loaded = crate::config::load(doc.to_string().as_bytes(), &Registry::in_tree())
            .expect("merged configuration loads");
        let p = loaded.config.profile("mine").expect("profile");
        assert_eq!(
            p.args("LeafNodeVolumeBinding")
                .map(|a| a["bindTimeoutSeconds"].clone()),
            Some(json!(5))
        );
    }

    #[test]
    fn the_profiles_own_leaf_args_are_validated_with_their_field_named() {
        let out = render_leaf_policies("mine", &[policy("p", json!({"profiles": ["mine"]}))]);
        for (args, path) in [
            (
                json!({"bindTimeoutSeconds": "five"}),
                "pluginConfig[1].args.bindTimeoutSeconds",
            ),
            (
                json!({"bindTimeoutSeconds": -7}),
                "pluginConfig[1].args.bindTimeoutSeconds",
            ),
            (
                json!({"bindTimeout": 5}),
                "pluginConfig[1].args.bindTimeout",
            ),
        ] {
            let mut profile = json!({
                "schedulerName": "mine",
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {}},
                    {"name": "LeafNodeVolumeBinding", "args": args}
                ]
            });
            let errors = out.apply_to_profile(&mut profile).expect_err("refused");
            assert!(
                errors.iter().any(|e| e.path == path),
                "{args}: expected {path} in {errors:?}"
            );
        }
    }

    #[test]
    fn policy_validation_names_the_policys_own_fields() {
        let spec = |v: Value| -> LeafClusterPolicySpec { serde_json::from_value(v).expect("spec") };
        assert_eq!(validate_policy(&spec(json!({"profiles": ["a"]}))), vec![]);
        let paths = |v: Value| -> Vec<String> {
            validate_policy(&spec(v))
                .into_iter()
                .map(|e| e.path)
                .collect()
        };
        assert_eq!(
            paths(json!({"profiles": ["a"], "leafNodeSelector": {
                "matchExpressions": [{"key": "x", "operator": "Near", "values": ["1"]}]}})),
            ["spec.leafNodeSelector.matchExpressions[0].operator"]
        );
        assert_eq!(
            paths(json!({"profiles": ["a"], "leafNodeSelector": {}})),
            ["spec.leafNodeSelector"]
        );
        assert_eq!(
            paths(json!({"profiles": ["a"], "leafNodeSelector": {}, "selectAllNodes": true})),
            Vec::<String>::new()
        );
        assert_eq!(
            paths(json!({"profiles": ["a"], "placement": {"mode": "Mix",
                "podSelector": {"matchExpressions": [{"key": "x", "operator": "In"}]}}})),
            ["spec.placement.podSelector.matchExpressions[0].values"]
        );
    }

    #[test]
    fn a_bad_policy_never_breaks_the_profile_and_keeps_its_last_valid_spec() {
        let bad_selector =
            json!({"matchExpressions": [{"key": "x", "operator": "Near", "values": ["1"]}]});
        let good = policy("good", json!({"profiles": ["mine"]}));
        let never_valid = policy(
            "never-valid",
            json!({"profiles": ["mine"], "leafNodeSelector": bad_selector}),
        );
        let mut edited = policy(
            "edited",
            json!({"profiles": ["*"], "leafNodeSelector": bad_selector,
                "placement": {"mode": "LeafOnly"}}),
        );
        let last_valid = json!({"profiles": ["*"], "leafNodeSelector": {"matchLabels": {"zone": "leaf"}},
            "placement": {"mode": "PreferLeaf"}});
        edited.metadata.annotations = Some(BTreeMap::from([(
            LAST_VALID_SPEC_ANNOTATION.to_string(),
            last_valid.to_string(),
        )]));
        let out = render_leaf_policies("mine", &[good, never_valid, edited]);
        assert_eq!(out.policies, ["edited", "good"]);
        let ignored: Vec<(String, bool, Vec<String>)> = out
            .ignored
            .iter()
            .map(|i| {
                (
                    i.policy.clone(),
                    i.last_valid_used,
                    i.errors.iter().map(|e| e.path.clone()).collect(),
                )
            })
            .collect();
        let path = "spec.leafNodeSelector.matchExpressions[0].operator".to_string();
        assert_eq!(
            ignored,
            [
                ("edited".to_string(), true, vec![path.clone()]),
                ("never-valid".to_string(), false, vec![path])
            ]
        );
        // The edited policy renders as it last was valid.
        let distribution = &out.args[names::LEAF_NODE_DISTRIBUTION]["policies"][0];
        assert_eq!(distribution["mode"], json!("PreferLeaf"));
        assert_eq!(
            distribution["leafNodeSelector"],
            json!({"matchLabels": {"zone": "leaf"}})
        );
        assert!(
            out.ignored[0]
                .to_string()
                .contains("last valid spec stays in effect")
        );
        assert!(out.ignored[1].to_string().contains("left out"));
        // A profile named only by bad policies without a valid past is left as it is.
        let only_bad = render_leaf_policies(
            "mine",
            &[policy(
                "never-valid",
                json!({"profiles": ["mine"], "leafNodeSelector": bad_selector}),
            )],
        );
        assert!(only_bad.is_empty());
        assert_eq!(only_bad.ignored.len(), 1);
    }
}
