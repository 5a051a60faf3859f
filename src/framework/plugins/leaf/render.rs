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

use kube::ResourceExt;
use serde_json::{Value, json};

use super::distribution::{DistributionPolicy, LeafNodeDistributionArgs};
use super::taint_toleration::{LeafNodeTaintTolerationArgs, LeafTaintPolicy};
use super::volume_binding::{LeafNodeVolumeBindingArgs, VolumePolicy};
use crate::api::LeafClusterPolicy;
use crate::api::leaf_cluster_policy::PlacementMode;
use crate::config::ExtensionPoint::{self, *};
use crate::framework::plugins::names;

/// The score weight of LeafNodeDistribution in a rendered profile: a placement `weight` of 100
/// then outweighs the default score plugins' usual differences, so PreferHost/PreferLeaf fill the
/// preferred side first.
pub const DISTRIBUTION_SCORE_WEIGHT: i32 = 10;
/// TaintToleration's default score weight, kept for LeafNodeTaintToleration.
pub const TAINT_TOLERATION_SCORE_WEIGHT: i32 = 3;

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
    /// there yet and sets the args (a `bindTimeoutSeconds` the profile gave VolumeBinding is kept
    /// for LeafNodeVolumeBinding).
    pub fn apply_to_profile(&self, profile: &mut Value) {
        if self.is_empty() {
            return;
        }
        let Some(obj) = profile.as_object_mut() else {
            return;
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
            return;
        };
        let vb_timeout = list
            .iter()
            .find(|e| e["name"] == names::VOLUME_BINDING)
            .and_then(|e| e["args"].get("bindTimeoutSeconds").cloned());
        for (name, args) in &self.args {
            let mut args = args.clone();
            if *name == names::LEAF_NODE_VOLUME_BINDING
                && let (Some(t), Some(a)) = (&vb_timeout, args.as_object_mut())
            {
                a.insert("bindTimeoutSeconds".into(), t.clone());
            }
            list.retain(|e| e["name"] != *name);
            list.push(json!({"name": name, "args": args}));
        }
    }
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

/// The plugin entries and args the policies naming `profile_name` (directly or with `*`) add to
/// that profile.
pub fn render_leaf_policies(
    profile_name: &str,
    policies: &[LeafClusterPolicy],
) -> LeafPluginConfig {
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
    if mine.is_empty() {
        return LeafPluginConfig::default();
    }

    let taints = LeafNodeTaintTolerationArgs {
        policies: Some(
            mine.iter()
                .filter(|p| p.spec.placement.mode != PlacementMode::HostOnly)
                .map(|p| LeafTaintPolicy {
                    taints: vec![p.spec.taint.clone()],
                    namespace_selector: p.spec.placement.namespace_selector.clone(),
                    pod_selector: p.spec.placement.pod_selector.clone(),
                })
                .collect(),
        ),
    };
    let distribution = LeafNodeDistributionArgs {
        kube_config_path: None,
        policies: mine
            .iter()
            .map(|p| DistributionPolicy {
                name: p.name_any(),
                leaf_node_selector: p.spec.leaf_node_selector.clone(),
                mode: p.spec.placement.mode,
                weight: p.spec.placement.weight,
                namespace_selector: p.spec.placement.namespace_selector.clone(),
                pod_selector: p.spec.placement.pod_selector.clone(),
            })
            .collect(),
    };
    let volumes = LeafNodeVolumeBindingArgs {
        policies: mine
            .iter()
            .map(|p| VolumePolicy {
                name: p.name_any(),
                leaf_node_selector: p.spec.leaf_node_selector.clone(),
                mode: p.spec.volumes.mode,
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
        policies: mine.iter().map(|p| p.name_any()).collect(),
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
        out.apply_to_profile(&mut profile);
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
                crate::config::PluginCatalog::decode_args(&r, name, Some(args)).is_ok(),
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
        out.apply_to_profile(&mut profile);
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
        out.apply_to_profile(&mut profile);
        out.apply_to_profile(&mut profile); // idempotent
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
}
