//! Tests of the whole configuration layer: seeds, defaults, merge rules, one test per validation
//! rule, round-trips and garbage input. Plain values, a minimal test catalog.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::config::ExtensionPoint as P;
use crate::emulation::{Emulation, Minor};

/// Upstream 1.36's plugins with the extension points each implements (from the `var _ fwk.XPlugin`
/// assertions in pkg/scheduler/framework/plugins at v1.36.3), the removed in-tree volume limits
/// plugins absent, plus the plugins the seeds use; all built (see `NotBuiltCatalog`).
struct TestCatalog;

fn test_plugins() -> BTreeMap<&'static str, Vec<P>> {
    use P::*;
    BTreeMap::from([
        ("SchedulingGates", vec![PreEnqueue]),
        ("PrioritySort", vec![QueueSort]),
        ("NodeUnschedulable", vec![Filter]),
        ("NodeName", vec![Filter]),
        ("TaintToleration", vec![Filter, PreScore, Score]),
        ("NodeAffinity", vec![PreFilter, Filter, PreScore, Score]),
        ("NodePorts", vec![PreFilter, Filter]),
        (
            "NodeResourcesFit",
            vec![PreFilter, Filter, PreScore, Score, PlacementScore],
        ),
        ("VolumeRestrictions", vec![PreFilter, Filter]),
        ("NodeVolumeLimits", vec![PreFilter, Filter]),
        (
            "VolumeBinding",
            vec![PreFilter, Filter, Reserve, PreBind, PreScore, Score],
        ),
        ("VolumeZone", vec![PreFilter, Filter]),
        (
            "PodTopologySpread",
            vec![PreFilter, Filter, PreScore, Score],
        ),
        ("InterPodAffinity", vec![PreFilter, Filter, PreScore, Score]),
        (
            "DynamicResources",
            vec![
                PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve, PreBind,
            ],
        ),
        (
            "DefaultPreemption",
            vec![PreEnqueue, PostFilter, PodGroupPostFilter],
        ),
        ("NodeResourcesBalancedAllocation", vec![PreScore, Score]),
        ("ImageLocality", vec![Score]),
        ("DefaultBinder", vec![Bind]),
        ("NodeDeclaredFeatures", vec![PreFilter, Filter]),
        ("LeafNodeTaintToleration", vec![Filter, PreScore, Score]),
        (
            "LeafNodeVolumeBinding",
            vec![PreFilter, Filter, Reserve, PreBind],
        ),
        ("LeafNodeDistribution", vec![Filter, Score]),
        (
            "Coscheduling",
            vec![QueueSort, PreFilter, PostFilter, Permit, Reserve],
        ),
        ("NetworkTraffic", vec![Score]),
    ])
}

impl PluginCatalog for TestCatalog {
    fn plugin_names(&self) -> Vec<String> {
        test_plugins().keys().map(|k| k.to_string()).collect()
    }

    fn availability(&self, name: &str) -> PluginAvailability {
        match test_plugins().remove(name) {
            Some(points) => PluginAvailability::Built(points),
            None => PluginAvailability::Unknown,
        }
    }

    /// Accepts any args as-is, except one strict rule to test error paths:
    /// VolumeBinding's `bindTimeoutSeconds` must be a non-negative integer.
    fn decode_args(
        &self,
        name: &str,
        args: Option<&Value>,
        _emulation: &Emulation,
    ) -> Result<Value, Vec<FieldError>> {
        if name == "VolumeBinding"
            && let Some(v) = args.and_then(|a| a.get("bindTimeoutSeconds"))
            && v.as_u64().is_none()
        {
            return Err(vec![FieldError::new(
                "bindTimeoutSeconds",
                "must be a non-negative integer",
            )]);
        }
        Ok(args.cloned().unwrap_or(Value::Null))
    }

    fn policy_rules(&self, _name: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        Vec::new()
    }
}

fn load_str(yaml: &str) -> Result<Loaded, ConfigErrors> {
    load(yaml.as_bytes(), &TestCatalog)
}

/// [`ok`] as the kube-scheduler of `minor` reads it.
fn ok_at(minor: Minor, yaml: &str) -> Loaded {
    match load_at(yaml.as_bytes(), &TestCatalog, &Emulation::of(minor)) {
        Ok(l) => l,
        Err(e) => panic!("expected the config to load at {minor}, got:\n{e}"),
    }
}

fn ok(yaml: &str) -> Loaded {
    match load_str(yaml) {
        Ok(l) => l,
        Err(e) => panic!("expected the config to load, got:\n{e}"),
    }
}

fn errors(yaml: &str) -> Vec<FieldError> {
    match load_str(yaml) {
        Ok(_) => panic!("expected errors for:\n{yaml}"),
        Err(e) => e.errors,
    }
}

/// Asserts some error has exactly `path` and a reason containing `needle`.
fn assert_error(yaml: &str, path: &str, needle: &str) {
    let errs = errors(yaml);
    assert!(
        errs.iter()
            .any(|e| e.path == path && e.reason.contains(needle)),
        "no error at {path:?} containing {needle:?}; got:\n{}",
        errs.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn v1beta3(body: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n{body}"
    )
}

fn v1(body: &str) -> String {
    format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{body}")
}

fn names(profile: &EffectiveProfile, point: P) -> Vec<&str> {
    profile.names_at(point)
}

fn weights(profile: &EffectiveProfile) -> Vec<(&str, i32)> {
    profile
        .at(P::Score)
        .iter()
        .map(|p| (p.name.as_str(), p.weight))
        .collect()
}

fn has_warning(loaded: &Loaded, needle: &str) -> bool {
    loaded.warnings.iter().any(|w| w.contains(needle))
}

fn fixture(name: &str) -> String {
    let path = format!("{}/src/config/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn assert_round_trip(config: &Config) {
    let yaml = to_v1_yaml(config);
    let again = match load(yaml.as_bytes(), &TestCatalog) {
        Ok(l) => l,
        Err(e) => panic!("normalized YAML does not load:\n{e}\n---\n{yaml}"),
    };
    assert_eq!(
        &again.config, config,
        "round trip changed the config; YAML:\n{yaml}"
    );
    assert_eq!(
        to_v1_yaml(&again.config),
        yaml,
        "normalized YAML is not stable"
    );
}

// ---------------------------------------------------------------------------------------------
// Upstream 1.36 defaults.
// ---------------------------------------------------------------------------------------------

/// The effective default profile, written out from default_plugins.go at v1.36.3 (default feature
/// gates) expanded as the framework does; it equals upstream's testing/defaults ExpandedPluginsV1.
#[test]
fn empty_profile_gets_upstream_1_36_defaults() {
    let loaded = ok_at(
        Minor::V1_36,
        &v1("profiles:\n- schedulerName: default-scheduler\n"),
    );
    let p = &loaded.config.profiles[0];
    assert_eq!(
        names(p, P::PreEnqueue),
        ["SchedulingGates", "DynamicResources", "DefaultPreemption"]
    );
    assert_eq!(names(p, P::QueueSort), ["PrioritySort"]);
    assert_eq!(
        names(p, P::PreFilter),
        [
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ]
    );
    assert_eq!(
        names(p, P::Filter),
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ]
    );
    assert_eq!(
        names(p, P::PostFilter),
        ["DynamicResources", "DefaultPreemption"]
    );
    assert_eq!(
        names(p, P::PreScore),
        [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeBinding",
            "PodTopologySpread",
            "InterPodAffinity",
            "NodeResourcesBalancedAllocation",
        ]
    );
    assert_eq!(
        weights(p),
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("DynamicResources", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ]
    );
    assert_eq!(names(p, P::Reserve), ["VolumeBinding", "DynamicResources"]);
    assert!(names(p, P::Permit).is_empty());
    assert_eq!(names(p, P::PreBind), ["VolumeBinding", "DynamicResources"]);
    assert_eq!(names(p, P::Bind), ["DefaultBinder"]);
    assert!(names(p, P::PostBind).is_empty());
    // Non-score points carry no weight.
    assert!(p.at(P::Filter).iter().all(|e| e.weight == 0));
    // Every enabled plugin has args (Null for the test catalog's defaults).
    assert_eq!(p.plugin_args.len(), 20);
}

/// 1.37's defaults (default_plugins.go at v1.37.2): NodeName runs before NodeUnschedulable,
/// DefaultPreemption also runs at podGroupPostFilter (a point 1.36 does not have); the rest as
/// 1.36.
#[test]
fn empty_profile_gets_upstream_1_37_defaults() {
    let v1_36 = ok_at(Minor::V1_36, &v1(""));
    let v1_37 = ok_at(Minor::V1_37, &v1(""));
    let (old, new) = (&v1_36.config.profiles[0], &v1_37.config.profiles[0]);
    assert_eq!(
        names(new, P::Filter)[..3],
        ["NodeName", "NodeUnschedulable", "TaintToleration"]
    );
    assert_eq!(names(old, P::Filter)[2..], names(new, P::Filter)[2..]);
    assert_eq!(names(new, P::PodGroupPostFilter), ["DefaultPreemption"]);
    for point in P::ALL {
        if point != P::Filter && point != P::PodGroupPostFilter {
            assert_eq!(names(old, point), names(new, point), "{point:?}");
        }
    }
    assert_eq!(weights(old), weights(new));
}

/// `podGroupPostFilter` exists from 1.37: DefaultPreemption runs there by default (multiPoint)
/// and a profile may enable or disable plugins there as at any point; 1.36's kube-scheduler
/// does not know the field, and its effective profile has no such point.
#[test]
fn pod_group_post_filter_is_a_1_37_point() {
    let disabled = v1(
        "profiles:\n- schedulerName: p\n  plugins:\n    podGroupPostFilter:\n      disabled: [{name: \"*\"}]\n",
    );
    let loaded = ok_at(Minor::V1_37, &disabled);
    assert!(names(&loaded.config.profiles[0], P::PodGroupPostFilter).is_empty());
    let defaults = ok_at(Minor::V1_37, &v1("profiles:\n- schedulerName: p\n"));
    assert_eq!(
        names(&defaults.config.profiles[0], P::PodGroupPostFilter),
        ["DefaultPreemption"]
    );
    let e = load_at(
        disabled.as_bytes(),
        &TestCatalog,
        &Emulation::of(Minor::V1_36),
    )
    .expect_err("1.36 does not know the field")
    .errors;
    assert_eq!(e[0].path, "profiles[0].plugins.podGroupPostFilter");
    assert!(
        e[0].reason.contains("unknown field") && e[0].reason.contains("from Kubernetes 1.37 on"),
        "{e:?}"
    );
    let at_1_36 = ok_at(Minor::V1_36, &v1("profiles:\n- schedulerName: p\n"));
    assert!(
        !at_1_36.config.profiles[0]
            .plugins
            .contains_key(&P::PodGroupPostFilter)
    );
    let moved = v1(
        "profiles:\n- schedulerName: p\n  plugins:\n    podGroupPostFilter:\n      disabled: [{name: \"*\"}]\n      enabled: [{name: DefaultPreemption}]\n",
    );
    let loaded = ok_at(Minor::V1_37, &moved);
    assert_eq!(
        names(&loaded.config.profiles[0], P::PodGroupPostFilter),
        ["DefaultPreemption"]
    );
}

/// The test catalog, except that DynamicResources is known but not built (as in ksched's registry).
struct NotBuiltCatalog;

impl PluginCatalog for NotBuiltCatalog {
    fn plugin_names(&self) -> Vec<String> {
        TestCatalog.plugin_names()
    }

    fn availability(&self, name: &str) -> PluginAvailability {
        match TestCatalog.availability(name) {
            PluginAvailability::Built(points) if name == "DynamicResources" => {
                PluginAvailability::NotBuiltYet {
                    extension_points: points,
                    reason: "dynamic resource allocation is out of scope".to_string(),
                }
            }
            other => other,
        }
    }

    fn decode_args(
        &self,
        name: &str,
        args: Option<&Value>,
        emulation: &Emulation,
    ) -> Result<Value, Vec<FieldError>> {
        TestCatalog.decode_args(name, args, emulation)
    }

    fn policy_rules(&self, name: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        TestCatalog.policy_rules(name)
    }
}

#[test]
fn a_default_plugin_not_built_is_left_out_with_a_warning() {
    let loaded = match load(
        v1("profiles:\n- schedulerName: a\n").as_bytes(),
        &NotBuiltCatalog,
    ) {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    };
    let p = &loaded.config.profiles[0];
    assert!(!p.plugin_args.contains_key("DynamicResources"));
    assert_eq!(
        names(p, P::PreEnqueue),
        ["SchedulingGates", "DefaultPreemption"]
    );
    assert!(has_warning(
        &loaded,
        "default plugin DynamicResources is left out of the default profile"
    ));
    // The normalized form loads again with the same catalog.
    let again = load(to_v1_yaml(&loaded.config).as_bytes(), &NotBuiltCatalog).map(|l| l.config);
    assert_eq!(again.ok().as_ref(), Some(&loaded.config));
}

#[test]
fn enabling_a_plugin_not_built_is_an_error_naming_the_entry() {
    let yaml =
        v1("profiles:\n- plugins:\n    preFilter:\n      enabled: [{name: DynamicResources}]\n");
    let errs = match load(yaml.as_bytes(), &NotBuiltCatalog) {
        Ok(_) => panic!("accepted a plugin that is not built"),
        Err(e) => e.errors,
    };
    assert!(
        errs.iter()
            .any(|e| e.path == "profiles[0].plugins.preFilter.enabled[0]"
                && e.reason
                    .contains("DynamicResources is known but not supported by this ksched yet")),
        "{errs:?}"
    );
}

#[test]
fn top_level_defaults_like_upstream() {
    let c = ok(&v1("")).config;
    assert_eq!(c.parallelism, 16);
    assert!(c.leader_election.leader_elect);
    assert_eq!(c.leader_election.lease_duration.to_string(), "15s");
    assert_eq!(c.leader_election.renew_deadline.to_string(), "10s");
    assert_eq!(c.leader_election.retry_period.to_string(), "2s");
    assert_eq!(c.leader_election.resource_lock, "leases");
    assert_eq!(c.leader_election.resource_name, "kube-scheduler");
    assert_eq!(c.leader_election.resource_namespace, "kube-system");
    assert_eq!(c.client_connection.qps, 50.0);
    assert_eq!(c.client_connection.burst, 100);
    assert_eq!(
        c.client_connection.content_type,
        "application/vnd.kubernetes.protobuf"
    );
    assert_eq!(c.pod_initial_backoff_seconds, 1);
    assert_eq!(c.pod_max_backoff_seconds, 10);
    assert_eq!(c.percentage_of_nodes_to_score, 0);
    assert!(c.enable_profiling && c.enable_contention_profiling);
    assert!(!c.delay_cache_until_active);
    assert_eq!(c.profiles.len(), 1);
    assert_eq!(c.profiles[0].scheduler_name, "default-scheduler");
    assert_eq!(c.profiles[0].percentage_of_nodes_to_score, None);
    let c = ok(&v1(
        "enableProfiling: false\nleaderElection:\n  leaseDuration: 1m30s\n",
    ))
    .config;
    assert!(!c.enable_contention_profiling);
    assert_eq!(c.leader_election.lease_duration, GoDuration::from_secs(90));
}

// ---------------------------------------------------------------------------------------------
// Merge and multiPoint expansion.
// ---------------------------------------------------------------------------------------------

#[test]
fn merge_disabled_star_removes_every_default_of_that_point() {
    let c = ok(&v1(
        "profiles:\n- plugins:\n    score:\n      disabled: [{name: \"*\"}]\n      enabled: [{name: NetworkTraffic, weight: 4}]\n",
    ))
    .config;
    assert_eq!(weights(&c.profiles[0]), [("NetworkTraffic", 4)]);
    // Other points keep their defaults.
    assert_eq!(names(&c.profiles[0], P::Bind), ["DefaultBinder"]);
    // multiPoint "*": no defaults anywhere.
    let errs = errors(&v1(
        "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: \"*\"}]\n",
    ));
    assert!(
        errs.iter()
            .any(|e| e.path == "profiles[0].plugins.queueSort")
    );
    assert!(errs.iter().any(|e| e.path == "profiles[0].plugins.bind"));
}

#[test]
fn merge_reenabled_default_keeps_its_place_and_takes_the_new_weight() {
    let c = ok(&v1("profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: NodeAffinity, weight: 5}]\n")).config;
    let w = weights(&c.profiles[0]);
    assert_eq!(w[0], ("TaintToleration", 3));
    assert_eq!(w[1], ("NodeAffinity", 5));
    assert_eq!(w.len(), 9);
}

#[test]
fn specific_extension_point_beats_multi_point() {
    // Enabled at score: it comes first (upstream's "override" order) with the score entry's weight.
    let c = ok(&v1(
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: ImageLocality, weight: 7}]\n",
    ))
    .config;
    let w = weights(&c.profiles[0]);
    assert_eq!(w[0], ("ImageLocality", 7));
    assert_eq!(w.iter().filter(|(n, _)| *n == "ImageLocality").count(), 1);
    assert_eq!(w.len(), 9);
    // Disabled at one point: gone there, still everywhere else.
    let c = ok(&v1(
        "profiles:\n- plugins:\n    filter:\n      disabled: [{name: TaintToleration}]\n",
    ))
    .config;
    let p = &c.profiles[0];
    assert!(!names(p, P::Filter).contains(&"TaintToleration"));
    assert!(names(p, P::PreScore).contains(&"TaintToleration"));
    assert_eq!(weights(p)[0], ("TaintToleration", 3));
}

#[test]
fn custom_plugins_are_appended_and_expand_from_multi_point() {
    let c = ok(&v1(
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: LeafNodeDistribution}]\n    multiPoint:\n      enabled: [{name: LeafNodeTaintToleration, weight: 4}]\n",
    ))
    .config;
    let p = &c.profiles[0];
    let filter = names(p, P::Filter);
    assert_eq!(filter.last(), Some(&"LeafNodeDistribution"));
    assert_eq!(filter[filter.len() - 2], "LeafNodeTaintToleration");
    assert!(names(p, P::PreScore).contains(&"LeafNodeTaintToleration"));
    assert_eq!(weights(p).last(), Some(&("LeafNodeTaintToleration", 4)));
    // LeafNodeDistribution is not at score: it was enabled at filter only.
    assert!(!names(p, P::Score).contains(&"LeafNodeDistribution"));
}

#[test]
fn zero_weight_means_one() {
    let c = ok(&v1(
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: NetworkTraffic, weight: 0}]\n",
    ))
    .config;
    assert_eq!(weights(&c.profiles[0]).last(), Some(&("NetworkTraffic", 1)));
}

// ---------------------------------------------------------------------------------------------
// One test per validation rule.
// ---------------------------------------------------------------------------------------------

#[test]
fn rule_parallelism_positive() {
    assert_error(&v1("parallelism: 0\n"), "parallelism", "greater than zero");
}

#[test]
fn rule_percentage_of_nodes_to_score_range() {
    assert_error(
        &v1("percentageOfNodesToScore: 101\n"),
        "percentageOfNodesToScore",
        "[0-100]",
    );
    assert_error(
        &v1("profiles:\n- percentageOfNodesToScore: -1\n"),
        "profiles[0].percentageOfNodesToScore",
        "[0-100]",
    );
    let c = ok(&v1("profiles:\n- percentageOfNodesToScore: 40\n")).config;
    assert_eq!(c.profiles[0].percentage_of_nodes_to_score, Some(40));
}

#[test]
fn rule_backoff_seconds() {
    assert_error(
        &v1("podInitialBackoffSeconds: 0\n"),
        "podInitialBackoffSeconds",
        "greater than 0",
    );
    assert_error(
        &v1("podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4\n"),
        "podMaxBackoffSeconds",
        "greater than or equal to podInitialBackoffSeconds",
    );
}

#[test]
fn rule_leader_election_resource_lock_leases() {
    assert_error(
        &v1("leaderElection:\n  resourceLock: endpoints\n"),
        "leaderElection.resourceLock",
        "must be \"leases\"",
    );
    ok(&v1(
        "leaderElection:\n  leaderElect: false\n  resourceLock: endpoints\n",
    ));
}

#[test]
fn rule_leader_election_durations() {
    assert_error(
        &v1("leaderElection:\n  retryPeriod: -1s\n"),
        "leaderElection.retryPeriod",
        "greater than zero",
    );
    assert_error(
        &v1("leaderElection:\n  leaseDuration: 10s\n  renewDeadline: 10s\n"),
        "leaderElection.leaseDuration",
        "greater than renewDeadline",
    );
    assert_error(
        &v1("leaderElection:\n  renewDeadline: 10s\n  retryPeriod: 9s\n"),
        "leaderElection.renewDeadline",
        "retryPeriod × 1.2",
    );
}

#[test]
fn rule_client_connection_burst() {
    assert_error(
        &v1("clientConnection:\n  burst: -1\n"),
        "clientConnection.burst",
        "non-negative",
    );
}

#[test]
fn rule_scheduler_names_required_and_unique() {
    assert_error(
        &v1("profiles:\n- schedulerName: a\n- plugins: {}\n"),
        "profiles[1].schedulerName",
        "required",
    );
    assert_error(
        &v1("profiles:\n- schedulerName: a\n- schedulerName: a\n"),
        "profiles[1].schedulerName",
        "duplicate schedulerName \"a\"",
    );
}

#[test]
fn rule_same_queue_sort_in_every_profile() {
    assert_error(
        &v1(
            "profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      disabled: [{name: \"*\"}]\n      enabled: [{name: Coscheduling}]\n",
        ),
        "profiles[1].plugins.queueSort",
        "must be the same for all profiles",
    );
    let cosched =
        "    queueSort:\n      disabled: [{name: \"*\"}]\n      enabled: [{name: Coscheduling}]\n";
    assert_error(
        &v1(&format!(
            "profiles:\n- schedulerName: a\n  plugins:\n{cosched}  pluginConfig: [{{name: Coscheduling, args: {{permitWaitingTimeSeconds: 10}}}}]\n- schedulerName: b\n  plugins:\n{cosched}  pluginConfig: [{{name: Coscheduling, args: {{permitWaitingTimeSeconds: 20}}}}]\n"
        )),
        "profiles[1].pluginConfig",
        "must be the same for all profiles",
    );
}

#[test]
fn rule_exactly_one_queue_sort() {
    assert_error(
        &v1("profiles:\n- plugins:\n    queueSort:\n      enabled: [{name: Coscheduling}]\n"),
        "profiles[0].plugins.queueSort",
        "exactly one queueSort plugin must be enabled, found 2 (PrioritySort, Coscheduling)",
    );
}

#[test]
fn rule_at_least_one_bind() {
    assert_error(
        &v1("profiles:\n- plugins:\n    bind:\n      disabled: [{name: \"*\"}]\n"),
        "profiles[0].plugins.bind",
        "at least one bind plugin",
    );
}

#[test]
fn rule_no_duplicate_plugin_config() {
    assert_error(
        &v1("profiles:\n- pluginConfig:\n  - name: VolumeBinding\n  - name: VolumeBinding\n"),
        "profiles[0].pluginConfig[1]",
        "duplicate pluginConfig for VolumeBinding",
    );
}

#[test]
fn rule_unknown_plugin_names_the_plugins_that_exist() {
    assert_error(
        &v1("profiles:\n- plugins:\n    score:\n      enabled: [{name: MyPlugin}]\n"),
        "profiles[0].plugins.score.enabled[0]",
        "unknown plugin \"MyPlugin\"",
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    score:\n      enabled: [{name: MyPlugin}]\n"),
        "profiles[0].plugins.score.enabled[0]",
        "the plugins that exist are: Coscheduling, DefaultBinder,",
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    filter:\n      enabled: [{name: NodeAfinity}]\n"),
        "profiles[0].plugins.filter.enabled[0]",
        "did you mean NodeAffinity?",
    );
    assert_error(
        &v1("profiles:\n- pluginConfig:\n  - name: Nope\n    args: {}\n"),
        "profiles[0].pluginConfig[0].name",
        "unknown plugin \"Nope\"",
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: Nope}]\n"),
        "profiles[0].plugins.multiPoint.enabled[0]",
        "unknown plugin",
    );
    // Disabling a plugin that does not exist only warns (upstream ignores it).
    let l = ok(&v1(
        "profiles:\n- plugins:\n    filter:\n      disabled: [{name: TaintTolerations}]\n",
    ));
    assert!(has_warning(
        &l,
        "no plugin named \"TaintTolerations\" exists (did you mean TaintToleration?)"
    ));
}

#[test]
fn rule_plugin_must_implement_the_extension_point() {
    assert_error(
        &v1("profiles:\n- plugins:\n    filter:\n      enabled: [{name: ImageLocality}]\n"),
        "profiles[0].plugins.filter.enabled[0]",
        "does not implement the filter extension point (it implements: score)",
    );
}

#[test]
fn rule_plugin_enabled_once_per_point() {
    assert_error(
        &v1(
            "profiles:\n- plugins:\n    score:\n      enabled: [{name: NetworkTraffic}, {name: NetworkTraffic}]\n",
        ),
        "profiles[0].plugins.score.enabled[1]",
        "enabled twice at score",
    );
    assert_error(
        &v1(
            "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: NetworkTraffic}, {name: NetworkTraffic}]\n",
        ),
        "profiles[0].plugins.multiPoint.enabled[1]",
        "enabled twice at multiPoint",
    );
}

#[test]
fn rule_star_only_in_disabled() {
    assert_error(
        &v1("profiles:\n- plugins:\n    score:\n      enabled: [{name: \"*\"}]\n"),
        "profiles[0].plugins.score.enabled[0]",
        "can only be used in `disabled`",
    );
}

#[test]
fn rule_score_weight_not_negative() {
    assert_error(
        &v1(
            "profiles:\n- plugins:\n    score:\n      enabled: [{name: NetworkTraffic, weight: -1}]\n",
        ),
        "profiles[0].plugins.score.enabled[0].weight",
        "must not be negative",
    );
    let l = ok(&v1(
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: LeafNodeDistribution, weight: 3}]\n",
    ));
    assert!(has_warning(
        &l,
        "profiles[0].plugins.filter.enabled[0].weight: ignored"
    ));
    // The largest weights still fit: no overflow with int32 weights.
    let c = ok(&v1("profiles:\n- plugins:\n    score:\n      enabled: [{name: NetworkTraffic, weight: 2147483647}]\n")).config;
    assert_eq!(
        weights(&c.profiles[0]).last(),
        Some(&("NetworkTraffic", i32::MAX))
    );
}

#[test]
fn rule_plugin_args_decoded_strictly_with_their_path() {
    assert_error(
        &v1(
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n  - name: VolumeBinding\n    args:\n      bindTimeoutSeconds: soon\n",
        ),
        "profiles[0].pluginConfig[1].args.bindTimeoutSeconds",
        "non-negative integer",
    );
    assert_error(
        &v1("profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args: [1]\n"),
        "profiles[0].pluginConfig[0].args",
        "expected a mapping",
    );
    let l = ok(&v1(
        "profiles:\n- plugins:\n    score:\n      disabled: [{name: \"*\"}]\n  pluginConfig:\n  - name: NetworkTraffic\n    args: {ip: x}\n",
    ));
    assert!(has_warning(
        &l,
        "plugin NetworkTraffic is not enabled in this profile, so these args have no effect"
    ));
}

#[test]
fn rule_extenders() {
    assert_error(
        &v1("extenders:\n- urlPrefix: http://e\n  prioritizeVerb: prio\n"),
        "extenders[0].weight",
        "positive weight",
    );
    assert_error(
        &v1(
            "extenders:\n- urlPrefix: http://a\n  bindVerb: bind\n- urlPrefix: http://b\n  bindVerb: bind\n",
        ),
        "extenders",
        "only one extender can implement bind",
    );
    assert_error(
        &v1("extenders:\n- urlPrefix: http://a\n  managedResources:\n  - name: gpu\n"),
        "extenders[0].managedResources[0].name",
        "invalid extended resource name",
    );
    assert_error(
        &v1(
            "extenders:\n- urlPrefix: http://a\n  managedResources:\n  - name: example.com/gpu\n  - name: example.com/gpu\n",
        ),
        "extenders[0].managedResources[1].name",
        "duplicate extender managed resource name",
    );
    let c = ok(&v1(
        "extenders:\n- urlPrefix: http://a\n  prioritizeVerb: p\n  weight: 2\n  httpTimeout: 5s\n  enableHTTPS: true\n  tlsConfig:\n    caData: YWJj\n",
    ))
    .config;
    assert_eq!(c.extenders[0].http_timeout, GoDuration::from_secs(5));
    assert_round_trip(&c);
}

#[test]
fn rule_bind_addresses_must_be_empty_in_v1() {
    assert_error(
        &v1("healthzBindAddress: 0.0.0.0:10251\n"),
        "healthzBindAddress",
        "must be empty",
    );
    assert_error(
        &v1("metricsBindAddress: 0.0.0.0:10251\n"),
        "metricsBindAddress",
        "must be empty",
    );
    ok(&v1("healthzBindAddress: \"\"\n"));
    let l = ok(
        "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nhealthzBindAddress: 0.0.0.0:10251\n",
    );
    assert!(has_warning(
        &l,
        "healthzBindAddress (\"0.0.0.0:10251\") is ignored"
    ));
}

/// The placement points take the plugins that implement them, with weights at placementScore.
#[test]
fn placement_points_take_the_plugins_that_implement_them() {
    let loaded = ok(&v1(
        "profiles:\n- plugins:\n    placementScore:\n      enabled: [{name: NodeResourcesFit, weight: 3}]\n",
    ));
    let p = &loaded.config.profiles[0];
    let weights: Vec<i32> = p.at(P::PlacementScore).iter().map(|e| e.weight).collect();
    assert_eq!(names(p, P::PlacementScore), ["NodeResourcesFit"]);
    assert_eq!(weights, [3]);
    assert!(
        loaded.warnings.iter().all(|w| !w.contains("weight")),
        "{:?}",
        loaded.warnings
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    placementScore:\n      enabled: [{name: ImageLocality}]\n"),
        "profiles[0].plugins.placementScore.enabled[0]",
        "does not implement the placementScore extension point",
    );
    ok(&v1(
        "profiles:\n- plugins:\n    placementScore:\n      disabled: [{name: \"*\"}]\n",
    ));
}

// ---------------------------------------------------------------------------------------------
// Older versions: conversion, renamed and removed plugins.
// ---------------------------------------------------------------------------------------------

#[test]
fn removed_plugins_are_errors_naming_the_replacement() {
    assert_error(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    filter:\n      enabled: [{name: NodeLabel}]\n",
        "profiles[0].plugins.filter.enabled[0]",
        "plugin NodeLabel no longer exists (last available in kubescheduler.config.k8s.io/v1beta1): use NodeAffinity",
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    score:\n      enabled: [{name: SelectorSpread}]\n"),
        "profiles[0].plugins.score.enabled[0]",
        "use PodTopologySpread",
    );
    assert_error(
        &v1("profiles:\n- plugins:\n    filter:\n      enabled: [{name: EBSLimits}]\n"),
        "profiles[0].plugins.filter.enabled[0]",
        "remove it: NodeVolumeLimits",
    );
    assert_error(
        "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled: [{name: NodeResourcesMostAllocated}]\n",
        "profiles[0].plugins.score.enabled[0]",
        "scoringStrategy: {type: MostAllocated}",
    );
    assert_error(
        &v1("profiles:\n- pluginConfig:\n  - name: NodeLabel\n    args: {}\n"),
        "profiles[0].pluginConfig[0]",
        "no longer exists",
    );
    // Disabling a removed default only warns.
    let l = ok(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      disabled: [{name: NodePreferAvoidPods}, {name: SelectorSpread}]\n",
    );
    assert!(has_warning(
        &l,
        "disabling NodePreferAvoidPods has no effect"
    ));
    assert!(has_warning(&l, "disabling SelectorSpread has no effect"));
}

#[test]
fn v1beta1_scoring_plugins_convert_to_node_resources_fit() {
    let l = ok(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      disabled: [{name: NodeResourcesLeastAllocated}]\n      enabled: [{name: RequestedToCapacityRatio, weight: 3}]\n  pluginConfig:\n  - name: RequestedToCapacityRatio\n    args:\n      shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]\n      resources: [{name: cpu, weight: 1}]\n",
    );
    let p = &l.config.profiles[0];
    assert_eq!(weights(p)[0], ("NodeResourcesFit", 3));
    assert_eq!(
        p.args("NodeResourcesFit"),
        Some(&json!({"scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": [{"name": "cpu", "weight": 1}],
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
        }}))
    );
    assert!(has_warning(
        &l,
        "RequestedToCapacityRatio was converted to NodeResourcesFit"
    ));
    assert!(has_warning(
        &l,
        "disabling NodeResourcesLeastAllocated was dropped"
    ));
    assert!(has_warning(
        &l,
        "apiVersion kubescheduler.config.k8s.io/v1beta1 is deprecated"
    ));
    assert_round_trip(&l.config);

    assert_error(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled: [{name: NodeResourcesMostAllocated}, {name: NodeResourcesLeastAllocated}]\n",
        "profiles[0].plugins.score.enabled[1]",
        "cannot be enabled together with NodeResourcesMostAllocated",
    );
}

#[test]
fn v1beta3_multi_point_and_pre_enqueue_convert() {
    let l = ok(&v1beta3(
        "profiles:\n- schedulerName: a\n  plugins:\n    multiPoint:\n      enabled: [{name: LeafNodeDistribution, weight: 3}]\n    preEnqueue:\n      disabled: [{name: SchedulingGates}]\n",
    ));
    let p = &l.config.profiles[0];
    assert_eq!(weights(p).last(), Some(&("LeafNodeDistribution", 3)));
    assert_eq!(
        names(p, P::PreEnqueue),
        ["DynamicResources", "DefaultPreemption"]
    );
    assert!(has_warning(
        &l,
        "apiVersion kubescheduler.config.k8s.io/v1beta3 is deprecated"
    ));
    assert_round_trip(&l.config);
}

#[test]
fn v1beta1_unreserve_and_disable_preemption_convert() {
    let l = ok(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\ndisablePreemption: true\nprofiles:\n- schedulerName: a\n  plugins:\n    unreserve:\n      enabled: [{name: LeafNodeVolumeBinding}]\n",
    );
    let p = &l.config.profiles[0];
    assert!(names(p, P::Reserve).contains(&"LeafNodeVolumeBinding"));
    assert_eq!(names(p, P::PostFilter), ["DynamicResources"]);
    assert!(has_warning(&l, "moved to reserve"));
    assert!(has_warning(&l, "disablePreemption: true was converted"));
}

// ---------------------------------------------------------------------------------------------
// The seeds.
// ---------------------------------------------------------------------------------------------

/// 000 (Kosmos, v1beta1): loads. VolumeBinding and TaintToleration are replaced by their LeafNode
/// counterparts where the seed says; as in upstream 1.36, VolumeBinding stays at preScore (it has
/// preScore since it has score, and the seed cannot disable what v1beta1 did not have): warned.
#[test]
fn seed_000_kosmos_v1beta1_loads() {
    let l = ok(&fixture("seed_000_kosmos_v1beta1.yaml"));
    let c = &l.config;
    assert!(c.leader_election.leader_elect);
    assert_eq!(c.leader_election.resource_name, "kosmos-scheduler");
    assert_eq!(c.leader_election.resource_namespace, "kosmos-system");
    let p = &c.profiles[0];
    assert_eq!(p.scheduler_name, "kosmos-scheduler");
    assert_eq!(
        names(p, P::PreFilter).last(),
        Some(&"LeafNodeVolumeBinding")
    );
    assert!(!names(p, P::PreFilter).contains(&"VolumeBinding"));
    let filter = names(p, P::Filter);
    assert!(!filter.contains(&"VolumeBinding") && !filter.contains(&"TaintToleration"));
    assert_eq!(
        &filter[filter.len() - 2..],
        ["LeafNodeTaintToleration", "LeafNodeVolumeBinding"]
    );
    assert_eq!(
        names(p, P::Reserve),
        ["DynamicResources", "LeafNodeVolumeBinding"]
    );
    assert_eq!(
        names(p, P::PreBind),
        ["DynamicResources", "LeafNodeVolumeBinding"]
    );
    assert!(!names(p, P::Score).contains(&"VolumeBinding"));
    assert!(names(p, P::Score).contains(&"TaintToleration"));
    assert!(names(p, P::PreScore).contains(&"VolumeBinding"));
    assert_eq!(
        p.args("LeafNodeVolumeBinding"),
        Some(&json!({"bindTimeoutSeconds": 5}))
    );
    assert!(has_warning(
        &l,
        "apiVersion kubescheduler.config.k8s.io/v1beta1 is deprecated"
    ));
    assert!(has_warning(
        &l,
        "VolumeBinding is disabled at score but stays enabled at preScore"
    ));
    assert_round_trip(c);
}

/// 001 (multiple schedulers): the first two snippets misspell the group (`kube-scheduler.k8s.io`),
/// which upstream rejects too ("no kind is registered for version"); the third puts leaderElection
/// inside a profile, an unknown field upstream's strict decoding rejects.
#[test]
fn seed_001_misspelled_group_is_rejected() {
    for f in [
        "seed_001_default_scheduler.yaml",
        "seed_001_custom_scheduler.yaml",
    ] {
        let errs = errors(&fixture(f));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].path, "apiVersion");
        assert!(
            errs[0].reason.contains(
                "\"kube-scheduler.k8s.io\" is not the KubeSchedulerConfiguration API group"
            )
        );
        assert!(
            errs[0]
                .reason
                .contains("use `apiVersion: kubescheduler.config.k8s.io/v1`")
        );
    }
    // With the group fixed, they load.
    let fixed = fixture("seed_001_custom_scheduler.yaml")
        .replace("kube-scheduler.k8s.io", "kubescheduler.config.k8s.io");
    assert_eq!(
        ok(&fixed).config.profiles[0].scheduler_name,
        "custom-scheduler"
    );
}

#[test]
fn seed_001_leader_election_inside_profile_is_rejected() {
    let errs = errors(&fixture("seed_001_custom_scheduler_leader_election.yaml"));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "profiles[0].leaderElection");
    assert!(errs[0].reason.contains(
        "belongs at the top level of the KubeSchedulerConfiguration, not under profiles[0]"
    ));
}

/// 002 (Coscheduling, v1beta2): loads; Coscheduling replaces PrioritySort at queueSort.
#[test]
fn seed_002_coscheduling_v1beta2_loads() {
    let l = ok(&fixture("seed_002_coscheduling_v1beta2.yaml"));
    let c = &l.config;
    assert_eq!(
        c.client_connection.kubeconfig,
        "/etc/kubernetes/scheduler.conf"
    );
    let p = &c.profiles[0];
    assert_eq!(names(p, P::QueueSort), ["Coscheduling"]);
    assert_eq!(names(p, P::PreFilter).last(), Some(&"Coscheduling"));
    assert_eq!(
        names(p, P::PostFilter),
        ["DynamicResources", "DefaultPreemption", "Coscheduling"]
    );
    assert_eq!(names(p, P::Permit), ["Coscheduling"]);
    assert_eq!(names(p, P::Reserve).last(), Some(&"Coscheduling"));
    assert_eq!(
        p.args("Coscheduling"),
        Some(&json!({"permitWaitingTimeSeconds": 10, "deniedPGExpirationTimeSeconds": 3}))
    );
    assert!(has_warning(
        &l,
        "apiVersion kubescheduler.config.k8s.io/v1beta2 is deprecated"
    ));
    assert_round_trip(c);
}

#[test]
fn seed_003_client_connection_v1beta1_loads() {
    let l = ok(&fixture("seed_003_client_connection_v1beta1.yaml"));
    assert_eq!(
        l.config.client_connection.kubeconfig,
        "/etc/srv/kubernetes/kube-scheduler/kubeconfig"
    );
    assert_eq!(l.config.profiles[0].scheduler_name, "default-scheduler");
    assert_round_trip(&l.config);
}

/// 003's placeholder plugins MyCustomPluginA/B do not exist: an error naming the plugins that do
/// (upstream fails the same way when building the framework: "score plugin \"MyCustomPluginA\" does not exist").
#[test]
fn seed_003_custom_score_plugins_are_unknown() {
    let errs = errors(&fixture("seed_003_custom_score_plugins_v1beta1.yaml"));
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(errs[0].path, "profiles[0].plugins.score.enabled[0]");
    assert!(
        errs[0]
            .reason
            .contains("unknown plugin \"MyCustomPluginA\"")
    );
    assert!(errs[0].reason.contains("the plugins that exist are:"));
    assert_eq!(errs[1].path, "profiles[0].plugins.score.enabled[1]");
}

#[test]
fn seed_003_two_profiles_v1beta2_load() {
    let l = ok(&fixture("seed_003_two_profiles_v1beta2.yaml"));
    let c = &l.config;
    assert_eq!(c.profiles.len(), 2);
    for (p, name) in c
        .profiles
        .iter()
        .zip(["default-scheduler", "no-scoring-scheduler"])
    {
        assert_eq!(p.scheduler_name, name);
        assert!(p.at(P::PreScore).is_empty() && p.at(P::Score).is_empty());
        assert_eq!(names(p, P::QueueSort), ["PrioritySort"]);
    }
    assert_round_trip(c);
}

#[test]
fn seed_003_network_traffic_v1beta1_loads() {
    let l = ok(&fixture("seed_003_network_traffic_v1beta1.yaml"));
    let p = &l.config.profiles[0];
    assert_eq!(p.scheduler_name, "custom-scheduler");
    assert_eq!(weights(p), [("NetworkTraffic", 1)]);
    assert_eq!(
        p.args("NetworkTraffic"),
        Some(&json!({"ip": "http://10.0.0.4:9090", "deviceName": "eth0", "timeRange": 60}))
    );
    assert_round_trip(&l.config);
}

// ---------------------------------------------------------------------------------------------
// Output, round trip, robustness.
// ---------------------------------------------------------------------------------------------

#[test]
fn normalized_yaml_shape() {
    let l = ok(&fixture("seed_000_kosmos_v1beta1.yaml"));
    let yaml = to_v1_yaml(&l.config);
    assert!(
        yaml.starts_with(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        ),
        "{yaml}"
    );
    assert!(yaml.contains("leaseDuration: 15s"), "{yaml}");
    assert!(!yaml.contains("multiPoint"), "{yaml}");
    assert!(yaml.contains("bindTimeoutSeconds: 5"), "{yaml}");
    let doc: Value = serde_saphyr::from_str(&yaml).unwrap_or(Value::Null);
    let score = &doc["profiles"][0]["plugins"]["score"];
    assert_eq!(score["disabled"], json!([{"name": "*"}]));
    assert_eq!(
        score["enabled"][0],
        json!({"name": "TaintToleration", "weight": 3})
    );
    // 1.37's default order: NodeName first.
    assert_eq!(
        doc["profiles"][0]["plugins"]["filter"]["enabled"][0],
        json!({"name": "NodeName"})
    );
}

#[test]
fn round_trips() {
    for yaml in [
        v1(""),
        v1(
            "parallelism: 4\npercentageOfNodesToScore: 30\nclientConnection:\n  qps: 12.5\n  burst: 7\nleaderElection:\n  leaderElect: false\n  leaseDuration: 1m30s\ndelayCacheUntilActive: true\n",
        ),
        v1(
            "profiles:\n- schedulerName: a\n  percentageOfNodesToScore: 10\n  plugins:\n    multiPoint:\n      enabled: [{name: LeafNodeTaintToleration, weight: 2}]\n      disabled: [{name: TaintToleration}]\n- schedulerName: b\n",
        ),
        v1(
            "clientConnection:\n  kubeconfig: \"a: b #c\"\n  contentType: \"true\"\n  acceptContentTypes: \"0x10\"\nleaderElection:\n  resourceName: \"*\"\n  resourceNamespace: \"null\"\nprofiles:\n- schedulerName: \"123\"\n  plugins:\n    score:\n      enabled: [{name: NetworkTraffic}]\n  pluginConfig:\n  - name: NetworkTraffic\n    args: {ip: \"~\", deviceName: \"- x\", nested: {list: [\"yes\", 1.5, null, {k: \"\\n\"}]}}\n",
        ),
    ] {
        let config = ok(&yaml).config;
        assert_round_trip(&config);
        for p in &config.profiles {
            assert!(p.plugin_args.values().all(|a| a.is_null() || a.is_object()));
        }
    }
    let tricky = ok(&v1(
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: NetworkTraffic}]\n  pluginConfig:\n  - name: NetworkTraffic\n    args: {ip: \"~\"}\n",
    ));
    assert_eq!(
        tricky.config.profiles[0].args("NetworkTraffic"),
        Some(&json!({"ip": "~"}))
    );
}

#[test]
fn load_document_matches_load() {
    let doc = KubeSchedulerConfiguration {
        profiles: vec![KubeSchedulerProfile {
            scheduler_name: Some("p".to_string()),
            plugins: Some(Plugins {
                score: PluginSet {
                    enabled: vec![Plugin::weighted("NetworkTraffic", 5)],
                    disabled: vec![Plugin::named("*")],
                },
                ..Plugins::default()
            }),
            ..KubeSchedulerProfile::default()
        }],
        ..KubeSchedulerConfiguration::v1()
    };
    let from_doc = load_document(&doc, &TestCatalog, &Emulation::default()).map(|l| l.config);
    let from_yaml = load_str(&v1(
        "profiles:\n- schedulerName: p\n  plugins:\n    score:\n      enabled: [{name: NetworkTraffic, weight: 5}]\n      disabled: [{name: \"*\"}]\n",
    ))
    .map(|l| l.config);
    assert_eq!(from_doc, from_yaml);
}

#[test]
fn validate_file_output_formats() {
    let (code, stdout, stderr) = validate_file_output(
        fixture("seed_002_coscheduling_v1beta2.yaml").as_bytes(),
        &TestCatalog,
        &Emulation::default(),
    );
    assert_eq!(code, 0);
    assert!(stdout.starts_with("apiVersion: kubescheduler.config.k8s.io/v1\n"));
    assert!(
        stderr.lines().all(|l| l.starts_with("warning: ")),
        "{stderr}"
    );
    let (code, stdout, stderr) = validate_file_output(
        fixture("seed_001_custom_scheduler_leader_election.yaml").as_bytes(),
        &TestCatalog,
        &Emulation::default(),
    );
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("error: profiles[0].leaderElection: unknown field \"leaderElection\""),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("the configuration is invalid: 1 error\n"),
        "{stderr}"
    );
    let (code, _, stderr) = validate_file_output(b"", &TestCatalog, &Emulation::default());
    assert_eq!(code, 1);
    assert!(stderr.starts_with("error: the file is empty"), "{stderr}");
}

#[test]
fn config_errors_display_one_per_line() {
    let e = load_str(&v1("parallelism: 0\npodInitialBackoffSeconds: 0\n")).expect_err("invalid");
    let text = e.to_string();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().any(|l| l.starts_with("parallelism: ")));
}

/// A deterministic xorshift generator, so failures reproduce.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn any_bytes_give_a_clean_result_never_a_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let seeds: Vec<Vec<u8>> = [
        "seed_000_kosmos_v1beta1.yaml",
        "seed_002_coscheduling_v1beta2.yaml",
        "seed_003_network_traffic_v1beta1.yaml",
    ]
    .iter()
    .map(|f| fixture(f).into_bytes())
    .collect();
    let alphabet = b"{}[]:,-\"'*&!|>#? \n\tab01.e";
    for round in 0..1500 {
        let input: Vec<u8> = match round % 3 {
            // Random bytes.
            0 => (0..rng.next() % 256).map(|_| rng.next() as u8).collect(),
            // YAML-ish punctuation soup.
            1 => (0..rng.next() % 128)
                .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
                .collect(),
            // A valid config with a few bytes changed, cut or duplicated.
            _ => {
                let mut bytes = seeds[(rng.next() % seeds.len() as u64) as usize].clone();
                for _ in 0..1 + rng.next() % 4 {
                    let i = (rng.next() % bytes.len() as u64) as usize;
                    match rng.next() % 3 {
                        0 => bytes[i] = alphabet[(rng.next() % alphabet.len() as u64) as usize],
                        1 => bytes.truncate(i.max(1)),
                        _ => {
                            let extra = bytes[i..].to_vec();
                            bytes.extend(extra);
                        }
                    }
                }
                bytes
            }
        };
        match load(&input, &TestCatalog) {
            Ok(loaded) => {
                // Whatever loads must round-trip too.
                let yaml = to_v1_yaml(&loaded.config);
                let again = load(yaml.as_bytes(), &TestCatalog).map(|l| l.config);
                assert_eq!(again.as_ref(), Ok(&loaded.config), "round {round}");
            }
            Err(e) => assert!(
                !e.errors.is_empty(),
                "round {round}: an error result without errors"
            ),
        }
    }
}

#[test]
fn alias_bombs_are_rejected_cleanly() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
    assert!(load(bomb.as_bytes(), &TestCatalog).is_err());
}

#[test]
fn duplicate_keys_are_errors() {
    let errs = errors(&v1("parallelism: 1\nparallelism: 2\n"));
    assert!(errs[0].reason.contains("not valid YAML"), "{errs:?}");
}

#[test]
fn deep_nesting_is_a_clean_error() {
    for open in ["[", "{a: ", "- "] {
        let deep = format!("a: {}", open.repeat(100_000));
        assert!(load(deep.as_bytes(), &TestCatalog).is_err());
    }
    let deep_json = format!("{{\"a\": {}", "[".repeat(100_000));
    assert!(load(deep_json.as_bytes(), &TestCatalog).is_err());
}
