//! What `--profile` and `--policy` become: the scheduler configuration the operator would render
//! (`operator::render`, the same code as `ksched render`), or a `KubeSchedulerConfiguration` as
//! `ksched scheduler --config` reads it; and which nodes are leaf nodes, for the host/leaf summary.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use crate::api::LeafClusterPolicy;
use crate::config::{self, Config, PluginCatalog};
use crate::emulation::{Emulation, Minor};
use crate::framework::plugins::leaf::default_leaf_node_selector;
use crate::operator::render::{self, RenderOptions};
use crate::operator::render_cli::{Input, ParsedInputs, parse_inputs};

/// The configuration to simulate.
#[derive(Debug, Clone)]
pub struct SimulatedProfile {
    pub config: Config,
    pub warnings: Vec<String>,
    /// Selectors of the leaf nodes: those of the policies naming the profile, or Kosmos's
    /// `kosmos.io/node=true` when no policy is given.
    pub leaf_selectors: Vec<LabelSelector>,
}

/// Why the profile cannot be simulated: every problem, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ProfileError(pub Vec<String>);

/// The configuration `ksched scheduler` runs without a `--config`: upstream's default profile.
const DEFAULT_CONFIG: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

/// [`load_for`] the newest minor.
pub fn load(
    profile: Option<&Input>,
    policies: &[Input],
    catalog: &dyn PluginCatalog,
    feature_gates: &[String],
) -> Result<SimulatedProfile, ProfileError> {
    load_for(profile, policies, catalog, Minor::NEWEST, feature_gates)
}

/// Loads `profile` (a SchedulerProfile, or a KubeSchedulerConfiguration; `None`: upstream's
/// default profile, `default-scheduler`) with the LeafClusterPolicies in `policies`, as the
/// kube-scheduler of `minor` with `feature_gates` (`--feature-gates` syntax) reads it (a
/// SchedulerProfile's own `spec.kubernetesVersion` wins, as in the operator).
pub fn load_for(
    profile: Option<&Input>,
    policies: &[Input],
    catalog: &dyn PluginCatalog,
    minor: Minor,
    feature_gates: &[String],
) -> Result<SimulatedProfile, ProfileError> {
    let emulation = Emulation::with_gates(minor, feature_gates)
        .map_err(|e| ProfileError(vec![format!("error: --feature-gates: {e}")]))?;
    let configuration = match profile {
        None => Some(Input {
            name: "the default configuration".into(),
            text: DEFAULT_CONFIG.into(),
        }),
        Some(p) if is_scheduler_configuration(&p.text) => Some(Input {
            name: p.name.clone(),
            text: p.text.clone(),
        }),
        Some(_) => None,
    };
    if let Some(input) = configuration {
        if !policies.is_empty() {
            return Err(ProfileError(vec![format!(
                "--policy applies to a SchedulerProfile: the operator renders LeafClusterPolicies into SchedulerProfiles; {} is a KubeSchedulerConfiguration, which carries its leaf plugins' args itself",
                input.name
            )]));
        }
        let loaded = config::load_at(input.text.as_bytes(), catalog, &emulation).map_err(|e| {
            let mut lines: Vec<String> =
                e.warnings.iter().map(|w| format!("warning: {w}")).collect();
            lines.extend(
                e.errors
                    .iter()
                    .map(|e| format!("error: {}: {e}", input.name)),
            );
            ProfileError(lines)
        })?;
        return Ok(SimulatedProfile {
            config: loaded.config,
            warnings: loaded.warnings,
            leaf_selectors: vec![default_leaf_node_selector()],
        });
    }
    let mut inputs: Vec<Input> = profile
        .map(|p| Input {
            name: p.name.clone(),
            text: p.text.clone(),
        })
        .into_iter()
        .collect();
    inputs.extend(policies.iter().map(|p| Input {
        name: p.name.clone(),
        text: p.text.clone(),
    }));
    let ParsedInputs {
        profiles,
        policies,
        mut errors,
    } = parse_inputs(&inputs);
    if profiles.len() != 1 && errors.is_empty() {
        errors.push(format!(
            "error: --profile must hold exactly one SchedulerProfile (or a KubeSchedulerConfiguration); found {}",
            profiles.len()
        ));
    }
    if !errors.is_empty() {
        return Err(ProfileError(errors));
    }
    let (file, sp) = &profiles[0];
    render_profile(file, sp, &policies, catalog, minor, feature_gates)
}

/// Renders a SchedulerProfile as the operator does; an invalid spec or policy is an error here
/// (the operator would leave a bad policy out; a simulation of it would mislead).
fn render_profile(
    file: &str,
    profile: &crate::api::SchedulerProfile,
    policies: &[LeafClusterPolicy],
    catalog: &dyn PluginCatalog,
    cluster_minor: Minor,
    feature_gates: &[String],
) -> Result<SimulatedProfile, ProfileError> {
    let opts = RenderOptions {
        namespace: render::DEFAULT_NAMESPACE.into(),
        image: String::new(),
        cluster_minor: Some(cluster_minor),
    };
    let rendered = render::render(profile, policies, &opts, catalog).map_err(|invalid| {
        let mut lines: Vec<String> = invalid
            .warnings
            .iter()
            .map(|w| format!("warning: {w}"))
            .collect();
        lines.push(format!(
            "SchedulerProfile {:?} ({file}) is invalid:",
            profile.name_any()
        ));
        lines.extend(
            invalid
                .errors
                .iter()
                .map(|e| format!("error: {}: {}", e.path, e.reason)),
        );
        ProfileError(lines)
    })?;
    if !rendered.ignored_policies.is_empty() {
        return Err(ProfileError(
            rendered
                .ignored_policies
                .iter()
                .map(|p| format!("error: {p}"))
                .collect(),
        ));
    }
    // The profile's own gates (workloadAwareScheduling, topologyAwareScheduling) unless --feature-gates says otherwise,
    // at the minor the profile runs (its own pin, else the cluster's).
    let emulation = if feature_gates.is_empty() {
        rendered.emulation.clone()
    } else {
        Emulation::with_gates(rendered.emulation.minor(), feature_gates)
            .map_err(|e| ProfileError(vec![format!("error: --feature-gates: {e}")]))?
    };
    let loaded = config::load_at(rendered.config_yaml.as_bytes(), catalog, &emulation)
        .map_err(|e| ProfileError(vec![format!("error: the rendered configuration: {e}")]))?;
    let naming = render::policies_naming(&rendered.profile, policies);
    let leaf_selectors = if policies.is_empty() {
        vec![default_leaf_node_selector()]
    } else {
        naming
            .iter()
            .map(|p| p.spec.leaf_node_selector.clone())
            .collect()
    };
    Ok(SimulatedProfile {
        config: loaded.config,
        warnings: rendered.warnings,
        leaf_selectors,
    })
}

/// Whether the first document of `text` is a KubeSchedulerConfiguration.
fn is_scheduler_configuration(text: &str) -> bool {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .ok()
        .and_then(|docs| docs.into_iter().find(|d| !d.is_null()))
        .and_then(|d| d.get("kind").and_then(|k| k.as_str()).map(String::from))
        .is_some_and(|k| k == "KubeSchedulerConfiguration")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::registry::Registry;

    fn input(name: &str, text: &str) -> Input {
        Input {
            name: name.into(),
            text: text.into(),
        }
    }

    const PROFILE: &str = "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: hybrid\nspec: {}\n";
    const POLICY: &str = "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: leaves\nspec:\n  profiles: [hybrid]\n  leafNodeSelector: {matchLabels: {tier: leaf}}\n";

    #[test]
    fn a_profile_renders_with_its_policies_as_the_operator_does() {
        let reg = Registry::in_tree();
        let p = load(
            Some(&input("p.yaml", PROFILE)),
            &[input("pol.yaml", POLICY)],
            &reg,
            &[],
        )
        .expect("load");
        let profile = &p.config.profiles[0];
        assert_eq!(profile.scheduler_name, "hybrid");
        let filters = profile.names_at(crate::config::ExtensionPoint::Filter);
        assert!(filters.contains(&"LeafNodeTaintToleration"), "{filters:?}");
        assert!(!filters.contains(&"TaintToleration"), "{filters:?}");
        assert_eq!(
            p.leaf_selectors[0]
                .match_labels
                .as_ref()
                .and_then(|l| l.get("tier")),
            Some(&"leaf".to_string())
        );
        // Byte for byte what `ksched render` puts into the ConfigMap.
        let sp: crate::api::SchedulerProfile = serde_saphyr::from_str(PROFILE).expect("sp");
        let pol: LeafClusterPolicy = serde_saphyr::from_str(POLICY).expect("policy");
        let opts = RenderOptions {
            namespace: render::DEFAULT_NAMESPACE.into(),
            image: "x".into(),
            cluster_minor: None,
        };
        let rendered = render::render(&sp, &[pol], &opts, &reg).expect("render");
        assert_eq!(config::to_v1_yaml(&p.config), rendered.config_yaml);
    }

    /// The cluster's minor applies to a configuration and to an unpinned SchedulerProfile; a
    /// profile's own `spec.kubernetesVersion` wins, as in the operator.
    #[test]
    fn the_clusters_minor_is_emulated_unless_the_profile_pins_one() {
        let reg = Registry::in_tree();
        let minor = |p: SimulatedProfile| p.config.emulation.minor();
        let default = load_for(None, &[], &reg, Minor::V1_36, &[]).expect("default");
        assert_eq!(minor(default), Minor::V1_36);
        let unpinned = "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: p}\nspec: {}\n";
        let p = load_for(
            Some(&input("p.yaml", unpinned)),
            &[],
            &reg,
            Minor::V1_36,
            &[],
        )
        .expect("unpinned");
        assert_eq!(minor(p), Minor::V1_36);
        let pinned = "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: p}\nspec: {kubernetesVersion: \"1.37\"}\n";
        let p =
            load_for(Some(&input("p.yaml", pinned)), &[], &reg, Minor::V1_36, &[]).expect("pinned");
        assert_eq!(minor(p), Minor::V1_37);
        let gated = load_for(
            Some(&input("p.yaml", pinned)),
            &[],
            &reg,
            Minor::V1_36,
            &["GenericWorkload=true".into()],
        )
        .expect("pinned, with gates");
        assert_eq!(minor(gated.clone()), Minor::V1_37);
        assert!(gated.config.emulation.enabled("GenericWorkload"));
    }

    /// A profile's gate fields are its simulated scheduler's gates, as the operator renders them;
    /// `--feature-gates` replaces them.
    #[test]
    fn a_profiles_gate_fields_are_simulated() {
        let reg = Registry::in_tree();
        let racks = "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: racks}\nspec: {workloadAwareScheduling: true, topologyAwareScheduling: true}\n";
        let p = load(Some(&input("p.yaml", racks)), &[], &reg, &[]).expect("racks");
        assert!(p.config.emulation.enabled("GenericWorkload"));
        assert!(
            p.config
                .emulation
                .enabled("TopologyAwareWorkloadScheduling")
        );
        assert!(
            p.config.profiles[0]
                .enabled_plugins()
                .contains(&"TopologyPlacementGenerator")
        );
        let p = load(
            Some(&input("p.yaml", racks)),
            &[],
            &reg,
            &["GenericWorkload=true".into()],
        )
        .expect("racks, gates given");
        assert!(
            !p.config
                .emulation
                .enabled("TopologyAwareWorkloadScheduling")
        );
        let alone = racks.replace("workloadAwareScheduling: true, ", "");
        let e = load(Some(&input("p.yaml", &alone)), &[], &reg, &[]).expect_err("alone");
        assert!(
            e.to_string()
                .contains("spec.topologyAwareScheduling needs spec.workloadAwareScheduling"),
            "{e}"
        );
    }

    #[test]
    fn configurations_defaults_and_errors() {
        let reg = Registry::in_tree();
        let d = load(None, &[], &reg, &[]).expect("default");
        assert_eq!(d.config.profiles[0].scheduler_name, "default-scheduler");
        let ksc = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n- schedulerName: b\n";
        let k = load(Some(&input("k.yaml", ksc)), &[], &reg, &[]).expect("ksc");
        assert_eq!(k.config.profiles.len(), 2);
        let e = load(
            Some(&input("k.yaml", ksc)),
            &[input("pol.yaml", POLICY)],
            &reg,
            &[],
        )
        .expect_err("policy with a configuration");
        assert!(
            e.to_string()
                .contains("--policy applies to a SchedulerProfile")
        );
        let bad = "kind: SchedulerProfile\nmetadata: {name: p}\nspec:\n  plugins:\n    filter:\n      enabled: [{name: NoSuchPlugin}]\n";
        let e = load(Some(&input("bad.yaml", bad)), &[], &reg, &[]).expect_err("bad plugin");
        assert!(
            e.to_string()
                .contains("error: spec.plugins.filter.enabled[0]"),
            "{e}"
        );
        let e =
            load(Some(&input("cm.yaml", "kind: ConfigMap\n")), &[], &reg, &[]).expect_err("kind");
        assert!(
            e.to_string().contains("kind \"ConfigMap\" is not rendered"),
            "{e}"
        );
        let two = format!("{PROFILE}---\n{}", PROFILE.replace("hybrid", "other"));
        let e = load(Some(&input("two.yaml", &two)), &[], &reg, &[]).expect_err("two");
        assert!(
            e.to_string().contains("exactly one SchedulerProfile"),
            "{e}"
        );
        let ksc_bad = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n  plugins:\n    score:\n      enabled: [{name: Nope}]\n";
        let e = load(Some(&input("k.yaml", ksc_bad)), &[], &reg, &[]).expect_err("ksc errors");
        assert!(e.to_string().contains("error: k.yaml:"), "{e}");
    }
}
