//! render.rs with plain values: the in-tree plugin registry, profiles built in code or read from
//! manifests/samples/.

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use super::*;
use crate::api::SchedulerProfileSpec;
use crate::api::leaf_cluster_policy::LeafClusterPolicySpec;
use crate::framework::registry::Registry;

fn opts() -> RenderOptions {
    RenderOptions {
        namespace: "ksched-system".into(),
        image: "example.com/ksched:1.0".into(),
        cluster_minor: None,
    }
}

/// [`opts`] on a cluster whose API server runs `minor`.
fn on_cluster(minor: Minor) -> RenderOptions {
    RenderOptions {
        cluster_minor: Some(minor),
        ..opts()
    }
}

fn profile(name: &str, spec: serde_json::Value) -> SchedulerProfile {
    let spec: SchedulerProfileSpec = match serde_json::from_value(spec) {
        Ok(s) => s,
        Err(e) => panic!("test spec: {e}"),
    };
    let mut p = SchedulerProfile::new(name, spec);
    p.metadata.uid = Some("uid-1234".into());
    p.metadata.generation = Some(1);
    p
}

fn policy(name: &str, profiles: &[&str]) -> LeafClusterPolicy {
    let spec: LeafClusterPolicySpec = match serde_json::from_value(json!({ "profiles": profiles }))
    {
        Ok(s) => s,
        Err(e) => panic!("test policy: {e}"),
    };
    LeafClusterPolicy::new(name, spec)
}

fn ok(p: &SchedulerProfile) -> Rendered {
    match render(p, &[], &opts(), &Registry::in_tree()) {
        Ok(r) => r,
        Err(e) => panic!("expected {} to render, got: {e}", p.name_any()),
    }
}

fn invalid(p: &SchedulerProfile) -> Vec<FieldError> {
    match render(p, &[], &opts(), &Registry::in_tree()) {
        Ok(_) => panic!("expected {} to be invalid", p.name_any()),
        Err(e) => e.errors,
    }
}

/// The errors rendering `p` with `opts` ends in, as `path: reason` lines.
fn refusals(p: &SchedulerProfile, opts: &RenderOptions) -> Vec<String> {
    match render(p, &[], opts, &Registry::in_tree()) {
        Ok(_) => panic!(
            "expected {} to be invalid at {:?}",
            p.name_any(),
            opts.cluster_minor
        ),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

fn loaded(r: &Rendered) -> config::Config {
    match config::load(r.config_yaml.as_bytes(), &Registry::in_tree()) {
        Ok(l) => l.config,
        Err(e) => panic!("rendered config does not load:\n{e}\n{}", r.config_yaml),
    }
}

/// Whether `plugin` is enabled in the rendered configuration loaded as the scheduler loads it:
/// with the rendered emulation (the profile's minor and gates).
fn enabled_at_its_emulation(r: &Rendered, plugin: &str) -> bool {
    match config::load_at(r.config_yaml.as_bytes(), &Registry::in_tree(), &r.emulation) {
        Ok(l) => l.config.profiles[0].enabled_plugins().contains(&plugin),
        Err(e) => panic!("rendered config does not load at {:?}:\n{e}", r.emulation),
    }
}

fn deployment_of(r: &Rendered) -> &Deployment {
    match &r.deployment {
        Some(d) => d,
        None => panic!("no Deployment rendered"),
    }
}

fn pod_spec(r: &Rendered) -> &PodSpec {
    deployment_of(r)
        .spec
        .template
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("no pod spec"))
}

fn has_rule(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

/// Every rendered name is the profile's name behind a prefix of its own, so no profile name can
/// reach an object of the installation (the chart's `ksched-operator*`, `ksched:metrics-reader`)
/// or another profile's.
#[test]
fn rendered_names_cannot_collide_with_the_installation_or_another_profile() {
    let installation = [
        "ksched-operator",
        "ksched-operator-metrics",
        "ksched-operator-auth-reader",
        "ksched-operator-uninstall",
        "ksched:metrics-reader",
    ];
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    for name in [
        "operator",
        "operator-uninstall",
        "operator-auth-reader",
        "operator-metrics",
        "metrics-reader",
        "plain",
        "profile-plain",
        "plain-metrics",
    ] {
        let r = ok(&profile(name, json!({})));
        for obj in r.objects() {
            let described = obj.describe();
            let object = described
                .rsplit(['/', ' '])
                .next()
                .unwrap_or_default()
                .to_string();
            assert!(
                object.starts_with(super::PROFILE_PREFIX)
                    || object.starts_with(super::CLUSTER_PROFILE_PREFIX),
                "{described}"
            );
            assert!(!installation.contains(&object.as_str()), "{described}");
            let kind = described.split(' ').next().unwrap_or_default();
            let namespace = described.rsplit_once('/').map(|(k, _)| k.to_string());
            let key = format!("{kind} {namespace:?} {object}");
            if let Some(other) = seen.insert(key.clone(), name.to_string()) {
                assert_eq!(
                    other, name,
                    "{key} rendered for profiles {other} and {name}"
                );
            }
        }
    }
}

#[test]
fn names_labels_and_owner_references() {
    let r = ok(&profile("plain", json!({})));
    assert_eq!(
        r.config_map.metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.service_account.metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.cluster_role.metadata.name.as_deref(),
        Some("ksched:profile:plain")
    );
    assert_eq!(
        r.cluster_role_binding.metadata.name.as_deref(),
        Some("ksched:profile:plain")
    );
    assert_eq!(
        r.lease_role.metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.lease_role_binding.metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.lease.metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        deployment_of(&r).metadata.name.as_deref(),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.service.as_ref().and_then(|s| s.metadata.name.as_deref()),
        Some("ksched-profile-plain")
    );
    assert_eq!(
        r.auth_reader_binding.metadata.namespace.as_deref(),
        Some("kube-system")
    );
    assert_eq!(
        r.auth_reader_binding.role_ref.name,
        "extension-apiserver-authentication-reader"
    );

    let objects = r.objects();
    assert_eq!(objects.len(), 10);
    for obj in &objects {
        let meta = match obj {
            RenderedObject::ConfigMap(o) => &o.metadata,
            RenderedObject::ServiceAccount(o) => &o.metadata,
            RenderedObject::ClusterRole(o) => &o.metadata,
            RenderedObject::ClusterRoleBinding(o) => &o.metadata,
            RenderedObject::Role(o) => &o.metadata,
            RenderedObject::RoleBinding(o) => &o.metadata,
            RenderedObject::Lease(o) => &o.metadata,
            RenderedObject::Deployment(o) => &o.metadata,
            RenderedObject::Service(o) => &o.metadata,
        };
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(LABEL_NAME).map(String::as_str), Some("ksched"));
        assert_eq!(
            labels.get(LABEL_INSTANCE).map(String::as_str),
            Some("plain")
        );
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some("ksched-operator")
        );
        if let Some(ns) = &meta.namespace
            && ns != "kube-system"
        {
            assert_eq!(ns, "ksched-system", "{}", obj.describe());
        }
        // Namespaced and cluster-scoped alike: the garbage collector removes them with the
        // profile (no finalizer).
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{}", obj.describe());
        assert_eq!(owners[0].kind, "SchedulerProfile");
        assert_eq!(owners[0].api_version, "ksched.io/v1alpha1");
        assert_eq!(owners[0].name, "plain");
        assert_eq!(owners[0].uid, "uid-1234");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
    }
}

#[test]
fn without_a_uid_there_are_no_owner_references() {
    let mut p = profile("offline", json!({}));
    p.metadata.uid = None;
    let r = ok(&p);
    assert!(r.config_map.metadata.owner_references.is_none());
    assert!(deployment_of(&r).metadata.owner_references.is_none());
    assert!(r.cluster_role.metadata.owner_references.is_none());
}

#[test]
fn config_is_complete_valid_and_normalized() {
    let p = profile(
        "tuned",
        json!({
            "percentageOfNodesToScore": 40,
            "clientConnection": {"qps": 20.0, "burst": 40},
            "podInitialBackoffSeconds": 2,
            "podMaxBackoffSeconds": 20,
            "leaderElection": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"},
            "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}]}},
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}]
        }),
    );
    let r = ok(&p);
    let data = r.config_map.data.clone().unwrap_or_default();
    assert_eq!(data.get(CONFIG_KEY), Some(&r.config_yaml));
    let c = loaded(&r);
    assert!(c.leader_election.leader_elect);
    assert_eq!(c.leader_election.resource_lock, "leases");
    assert_eq!(c.leader_election.resource_name, "ksched-profile-tuned");
    assert_eq!(c.leader_election.resource_namespace, "ksched-system");
    assert_eq!(c.leader_election.lease_duration, GoDuration::from_secs(30));
    assert_eq!(c.leader_election.renew_deadline, GoDuration::from_secs(20));
    assert_eq!(c.leader_election.retry_period, GoDuration::from_secs(4));
    assert_eq!(c.client_connection.qps, 20.0);
    assert_eq!(c.client_connection.burst, 40);
    assert_eq!(c.pod_initial_backoff_seconds, 2);
    assert_eq!(c.pod_max_backoff_seconds, 20);
    assert_eq!(c.profiles.len(), 1);
    let prof = &c.profiles[0];
    assert_eq!(prof.scheduler_name, "tuned");
    assert_eq!(prof.percentage_of_nodes_to_score, Some(40));
    let fit = prof
        .at(config::ExtensionPoint::Score)
        .iter()
        .find(|p| p.name == "NodeResourcesFit")
        .map(|p| p.weight);
    assert_eq!(fit, Some(5));
    assert_eq!(
        prof.args("NodeResourcesFit")
            .and_then(|a| a.pointer("/scoringStrategy/type"))
            .and_then(|t| t.as_str()),
        Some("MostAllocated")
    );
    // Normalized: what `ksched config validate` would print for it, byte for byte.
    assert_eq!(config::to_v1_yaml(&c), r.config_yaml);
    assert!(
        r.config_yaml
            .starts_with("apiVersion: kubescheduler.config.k8s.io/v1\n")
    );
}

#[test]
fn config_hash_is_sha256_of_the_config_and_on_the_pod_template() {
    let r = ok(&profile("hashed", json!({})));
    assert_eq!(r.config_hash, sha256_hex(&r.config_yaml));
    assert_eq!(r.config_hash.len(), 64);
    let annotations = deployment_of(&r)
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    assert_eq!(
        annotations.get(CONFIG_HASH_ANNOTATION),
        Some(&r.config_hash)
    );

    let changed = ok(&profile("hashed", json!({"podMaxBackoffSeconds": 30})));
    assert_ne!(changed.config_hash, r.config_hash);
    // Settings outside the configuration do not roll the pods.
    let same = ok(&profile("hashed", json!({"replicas": 3, "logLevel": 4})));
    assert_eq!(same.config_hash, r.config_hash);
    assert_eq!(
        sha256_hex("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn deployment_runs_the_scheduler_safely() {
    let p = profile(
        "dep",
        json!({
            "replicas": 2,
            "logLevel": 4,
            "resources": {"requests": {"cpu": "100m"}},
            "nodeSelector": {"role": "control"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "priorityClassName": "system-cluster-critical"
        }),
    );
    let r = ok(&p);
    let d = deployment_of(&r);
    let spec = &d.spec;
    assert_eq!(spec.replicas, Some(2));
    let ru = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .unwrap_or_else(|| panic!("rolling update"));
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(
        spec.selector.match_labels,
        Some(selector_labels("dep")),
        "selector"
    );
    let pod = pod_spec(&r);
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("ksched-profile-dep")
    );
    assert_eq!(
        pod.node_selector,
        Some(BTreeMap::from([("role".into(), "control".into())]))
    );
    assert_eq!(
        pod.tolerations,
        Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }])
    );
    assert!(
        pod.affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .is_some()
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    let psc = pod
        .security_context
        .as_ref()
        .unwrap_or_else(|| panic!("pod sc"));
    assert_eq!(psc.run_as_non_root, Some(true));
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("example.com/ksched:1.0"));
    assert_eq!(
        c.args.clone().unwrap_or_default(),
        vec!["scheduler", "--config", "/etc/ksched/config.yaml", "-v=4"]
    );
    assert_eq!(
        c.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    assert_eq!(
        c.resources,
        Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".into(), Quantity("100m".into()))])),
            ..ResourceRequirements::default()
        })
    );
    let sc = c.security_context.as_ref().unwrap_or_else(|| panic!("sc"));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    for (probe, path) in [
        (&c.liveness_probe, "/livez"),
        (&c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{path} probe"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
        assert_eq!(get.port, IntOrString::String("https".into()));
    }
    let port = c.ports.clone().unwrap_or_default();
    assert_eq!(port[0].container_port, 10259);
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "config")
        .unwrap_or_else(|| panic!("config mount"));
    assert_eq!(mount.mount_path, "/etc/ksched");
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "config")
        .and_then(|v| v.config_map.as_ref())
        .unwrap_or_else(|| panic!("config volume"));
    assert_eq!(vol.name, "ksched-profile-dep");

    let svc = r
        .service
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .unwrap_or_else(|| panic!("svc"));
    assert_eq!(svc.selector, Some(selector_labels("dep")));
    let ports = svc.ports.clone().unwrap_or_default();
    assert_eq!(ports[0].port, 10259);
    assert_eq!(ports[0].name.as_deref(), Some("https"));
}

#[test]
fn image_from_the_spec_wins() {
    let r = ok(&profile("img", json!({"image": "mine/ksched:dev"})));
    assert_eq!(
        pod_spec(&r).containers[0].image.as_deref(),
        Some("mine/ksched:dev")
    );
}

#[test]
fn suspend_scales_to_zero_and_keeps_the_config() {
    let running = ok(&profile("s", json!({"replicas": 3})));
    let suspended = ok(&profile("s", json!({"replicas": 3, "suspend": true})));
    let replicas = |r: &Rendered| deployment_of(r).spec.replicas;
    assert_eq!(replicas(&running), Some(3));
    assert_eq!(replicas(&suspended), Some(0));
    assert_eq!(running.config_map, suspended.config_map);
    assert_eq!(running.config_hash, suspended.config_hash);
}

#[test]
fn embedded_renders_no_deployment_and_no_service() {
    let r = ok(&profile("emb", json!({"mode": "Embedded"})));
    assert!(r.deployment.is_none());
    assert!(r.service.is_none());
    assert_eq!(r.objects().len(), 8);
    loaded(&r);
}

#[test]
fn default_plugins_get_volume_preemption_and_namespace_permissions() {
    let r = ok(&profile("full", json!({})));
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    for (group, resource, verb) in [
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "delete"),
        ("", "pods/binding", "create"),
        ("", "pods/status", "patch"),
        ("", "pods/status", "update"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("", "nodes", "watch"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        ("", "persistentvolumes", "watch"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumeclaims", "update"),
        ("storage.k8s.io", "storageclasses", "watch"),
        ("storage.k8s.io", "csinodes", "watch"),
        ("storage.k8s.io", "csidrivers", "watch"),
        ("storage.k8s.io", "csistoragecapacities", "watch"),
        ("storage.k8s.io", "volumeattachments", "watch"),
        ("policy", "poddisruptionbudgets", "watch"),
    ] {
        assert!(
            has_rule(&rules, group, resource, verb),
            "missing {verb} {group}/{resource} in {rules:#?}"
        );
    }
    assert!(!has_rule(
        &rules,
        "scheduling.x-k8s.io",
        "podgroups",
        "watch"
    ));
    assert!(!has_rule(&rules, "", "namespaces", "get"));
    assert!(!has_rule(&rules, "", "nodes", "update"));
    assert!(!has_rule(&rules, "", "secrets", "get"));
}

#[test]
fn a_minimal_profile_gets_only_the_core_permissions() {
    let r = ok(&profile(
        "minimal",
        json!({"plugins": {"multiPoint": {
            "enabled": [{"name": "PrioritySort"}, {"name": "NodeResourcesFit"}, {"name": "DefaultBinder"}],
            "disabled": [{"name": "*"}]
        }}}),
    ));
    assert_eq!(
        r.enabled_plugins,
        vec!["DefaultBinder", "NodeResourcesFit", "PrioritySort"]
    );
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    // NodeResourcesFit reads DeviceClasses (extended resources backed by DRA).
    assert_eq!(rules.len(), 9, "{rules:#?}");
    assert!(has_rule(
        &rules,
        "resource.k8s.io",
        "deviceclasses",
        "watch"
    ));
    assert!(has_rule(&rules, "", "pods/binding", "create"));
    assert!(has_rule(
        &rules,
        "authentication.k8s.io",
        "tokenreviews",
        "create"
    ));
    assert!(has_rule(
        &rules,
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create"
    ));
    assert!(!has_rule(&rules, "", "pods", "delete"));
    assert!(!has_rule(&rules, "", "namespaces", "list"));
    assert!(!has_rule(&rules, "", "persistentvolumeclaims", "get"));
    assert!(!has_rule(&rules, "storage.k8s.io", "storageclasses", "get"));
    assert!(!has_rule(&rules, "policy", "poddisruptionbudgets", "get"));
}

#[test]
fn rbac_follows_each_plugin() {
    let registry = Registry::in_tree();
    let rules = |plugins: &[&str]| cluster_rules(plugins, &registry);
    let base = rules(&["PrioritySort", "DefaultBinder"]);
    assert_eq!(base.len(), 8);
    let cos = rules(&["Coscheduling"]);
    assert!(has_rule(&cos, "scheduling.x-k8s.io", "podgroups", "watch"));
    assert!(has_rule(
        &cos,
        "scheduling.x-k8s.io",
        "podgroups/status",
        "patch"
    ));
    for volume in ["VolumeRestrictions", "VolumeZone", "NodeVolumeLimits"] {
        let r = rules(&[volume]);
        assert!(
            has_rule(&r, "", "persistentvolumeclaims", "watch"),
            "{volume}"
        );
        assert!(
            has_rule(&r, "storage.k8s.io", "csinodes", "list"),
            "{volume}"
        );
        assert!(
            !has_rule(&r, "", "persistentvolumeclaims", "update"),
            "{volume}"
        );
    }
    for binder in ["VolumeBinding", "LeafNodeVolumeBinding"] {
        let r = rules(&[binder]);
        assert!(
            has_rule(&r, "", "persistentvolumeclaims", "update"),
            "{binder}"
        );
        assert!(has_rule(&r, "", "persistentvolumes", "patch"), "{binder}");
    }
    let ipa = rules(&["InterPodAffinity"]);
    assert!(has_rule(&ipa, "", "namespaces", "watch"));
    let pts = rules(&["PodTopologySpread"]);
    for (group, resource) in [
        ("", "services"),
        ("", "replicationcontrollers"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
    ] {
        assert!(has_rule(&pts, group, resource, "watch"), "{resource}");
        assert!(!has_rule(&base, group, resource, "list"), "{resource}");
    }
    let pre = rules(&["DefaultPreemption"]);
    assert!(has_rule(&pre, "", "pods", "delete"));
    assert!(has_rule(&pre, "policy", "poddisruptionbudgets", "list"));
}

#[test]
fn rbac_for_dynamic_resources_only_when_enabled() {
    let registry = Registry::in_tree();
    let dra = cluster_rules(&["DynamicResources"], &registry);
    for (resource, verb) in [
        ("resourceclaims", "watch"),
        ("resourceclaims", "update"),
        ("resourceclaims/status", "update"),
        ("resourceclaims/binding", "update"),
        ("resourceslices", "list"),
        ("deviceclasses", "watch"),
    ] {
        assert!(
            has_rule(&dra, "resource.k8s.io", resource, verb),
            "{resource} {verb}"
        );
    }
    assert!(!has_rule(
        &dra,
        "resource.k8s.io",
        "resourceslices",
        "update"
    ));
    let without = cluster_rules(&["PrioritySort", "DefaultBinder"], &registry);
    assert!(!without.iter().any(|r| {
        r.api_groups
            .iter()
            .flatten()
            .any(|g| g == "resource.k8s.io")
    }));
}

fn container_args(r: &Rendered) -> Vec<String> {
    pod_spec(r).containers[0].args.clone().unwrap_or_default()
}

/// GangScheduling's rules: its PodGroups and Workloads, and the PodGroup condition the group
/// cycle writes.
fn has_gang_rules(rules: &[PolicyRule]) -> bool {
    [
        ("podgroups", "watch"),
        ("workloads", "list"),
        ("podgroups/status", "patch"),
    ]
    .iter()
    .all(|(resource, verb)| has_rule(rules, "scheduling.k8s.io", resource, verb))
}

#[test]
fn workload_aware_scheduling_turns_on_generic_workload_and_gang_schedulings_rbac() {
    let r = ok(&profile("gangs", json!({"workloadAwareScheduling": true})));
    assert!(
        container_args(&r).contains(&"--feature-gates=GenericWorkload=true".to_string()),
        "{:?}",
        container_args(&r)
    );
    assert!(r.emulation.enabled("GenericWorkload"));
    assert!(r.enabled_plugins.iter().any(|p| p == "GangScheduling"));
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    assert!(has_gang_rules(&rules), "{rules:#?}");

    // Off (the default): upstream's default gates, no GangScheduling, no rules for it.
    let r = ok(&profile("plain", json!({})));
    assert!(
        !container_args(&r)
            .iter()
            .any(|a| a.starts_with("--feature-gates")),
        "{:?}",
        container_args(&r)
    );
    assert!(!r.emulation.enabled("GenericWorkload"));
    assert!(!r.enabled_plugins.iter().any(|p| p == "GangScheduling"));
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    assert!(
        !rules.iter().any(|r| {
            r.api_groups
                .iter()
                .flatten()
                .any(|g| g == "scheduling.k8s.io")
        }),
        "{rules:#?}"
    );

    // Beside a pinned minor, both flags.
    let r = ok(&profile(
        "pinned",
        json!({"workloadAwareScheduling": true, "kubernetesVersion": "1.37"}),
    ));
    let args = container_args(&r);
    assert!(
        args.ends_with(&[
            "--emulated-version=1.37".to_string(),
            "--feature-gates=GenericWorkload=true".to_string()
        ]),
        "{args:?}"
    );
}

/// An Embedded profile has no Deployment to carry the flag: the operator starts its scheduler with
/// the rendered emulation, gate included.
#[test]
fn an_embedded_profile_gets_the_gate_through_its_emulation() {
    let r = ok(&profile(
        "embedded-gangs",
        json!({"mode": "Embedded", "workloadAwareScheduling": true}),
    ));
    assert!(r.deployment.is_none());
    assert_eq!(r.emulation.minor(), Minor::V1_37);
    assert!(r.emulation.enabled("GenericWorkload"));
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    assert!(has_gang_rules(&rules), "{rules:#?}");
    // The configuration it renders loads with that emulation and has GangScheduling.
    assert!(enabled_at_its_emulation(&r, "GangScheduling"));
}

#[test]
fn workload_aware_scheduling_needs_1_37() {
    let p = profile(
        "old",
        json!({"workloadAwareScheduling": true, "kubernetesVersion": "1.36"}),
    );
    assert_eq!(
        refusals(&p, &opts()),
        vec![
            "spec.workloadAwareScheduling: needs Kubernetes 1.37 or later (the GenericWorkload feature gate), and spec.kubernetesVersion is 1.36: set it to 1.37 (or leave it out on a 1.37 cluster), or remove workloadAwareScheduling"
        ]
    );
    // Unset, the API server's minor decides: on a 1.36 cluster the fix is the cluster's.
    let on_1_36 = on_cluster(Minor::V1_36);
    let p = profile("old", json!({"workloadAwareScheduling": true}));
    assert_eq!(
        refusals(&p, &on_1_36),
        vec![
            "spec.workloadAwareScheduling: needs Kubernetes 1.37 or later (the GenericWorkload feature gate), and the API server runs Kubernetes 1.36 (spec.kubernetesVersion is not set): upgrade the cluster to 1.37, or remove workloadAwareScheduling"
        ]
    );
    // Without the field, 1.36 renders as before.
    let r = match render(
        &profile("old", json!({})),
        &[],
        &on_1_36,
        &Registry::in_tree(),
    ) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.emulation.minor(), Minor::V1_36);
}

/// `topologyAwareScheduling` adds its gate beside `GenericWorkload`: in the Deployment's flag, in
/// the emulation an Embedded scheduler runs with (and `ksched simulate` applies), and in the
/// default plugins (TopologyPlacementGenerator, PodGroupPodsCount).
#[test]
fn topology_aware_scheduling_renders_its_gate_beside_generic_workload() {
    let both = json!({"workloadAwareScheduling": true, "topologyAwareScheduling": true});
    let r = ok(&profile("racks", both.clone()));
    let args = container_args(&r);
    assert!(
        args.ends_with(&[
            "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true".to_string()
        ]),
        "{args:?}"
    );
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--feature-gates"))
            .count(),
        1,
        "{args:?}"
    );
    assert!(r.emulation.enabled("GenericWorkload"));
    assert!(r.emulation.enabled("TopologyAwareWorkloadScheduling"));
    for plugin in [
        "GangScheduling",
        "TopologyPlacementGenerator",
        "PodGroupPodsCount",
    ] {
        assert!(
            r.enabled_plugins.iter().any(|p| p == plugin),
            "{plugin}: {:?}",
            r.enabled_plugins
        );
    }
    let rules = r.cluster_role.rules.clone().unwrap_or_default();
    assert!(has_gang_rules(&rules), "{rules:#?}");

    // workloadAwareScheduling alone: its gate only, no placement plugins.
    let r = ok(&profile("gangs", json!({"workloadAwareScheduling": true})));
    assert!(!r.emulation.enabled("TopologyAwareWorkloadScheduling"));
    assert!(
        !r.enabled_plugins
            .iter()
            .any(|p| p == "TopologyPlacementGenerator"),
        "{:?}",
        r.enabled_plugins
    );

    // Embedded: no Deployment, the gate is in the emulation, and the rendered configuration
    // loads with it.
    let mut embedded = both;
    embedded["mode"] = json!("Embedded");
    let r = ok(&profile("embedded-racks", embedded));
    assert!(r.deployment.is_none());
    assert!(r.emulation.enabled("TopologyAwareWorkloadScheduling"));
    assert!(enabled_at_its_emulation(&r, "TopologyPlacementGenerator"));
}

/// The gate places the groups GenericWorkload's group cycle schedules: alone it is refused on
/// its field (a profile stored before the CRD's rule; `kubectl apply` refuses it now).
#[test]
fn topology_aware_scheduling_needs_workload_aware_scheduling() {
    assert_eq!(
        refusals(
            &profile("racks", json!({"topologyAwareScheduling": true})),
            &opts()
        ),
        vec![
            "spec.topologyAwareScheduling: needs spec.workloadAwareScheduling (TopologyAwareWorkloadScheduling places the pod groups that GenericWorkload schedules): set spec.workloadAwareScheduling: true as well, or remove topologyAwareScheduling"
        ]
    );
    let errs = invalid(&profile(
        "racks",
        json!({"workloadAwareScheduling": false, "topologyAwareScheduling": true}),
    ));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "spec.topologyAwareScheduling");
}

#[test]
fn topology_aware_scheduling_needs_1_37() {
    let both = json!({"workloadAwareScheduling": true, "topologyAwareScheduling": true, "kubernetesVersion": "1.36"});
    assert_eq!(
        refusals(&profile("old", both), &opts()),
        vec![
            "spec.workloadAwareScheduling: needs Kubernetes 1.37 or later (the GenericWorkload feature gate), and spec.kubernetesVersion is 1.36: set it to 1.37 (or leave it out on a 1.37 cluster), or remove workloadAwareScheduling",
            "spec.topologyAwareScheduling: needs Kubernetes 1.37 or later (the TopologyAwareWorkloadScheduling feature gate), and spec.kubernetesVersion is 1.36: set it to 1.37 (or leave it out on a 1.37 cluster), or remove topologyAwareScheduling",
        ]
    );
    // Unset on a 1.36 cluster, without workloadAwareScheduling: both refusals, each on its field.
    let on_1_36 = on_cluster(Minor::V1_36);
    let p = profile("old", json!({"topologyAwareScheduling": true}));
    assert_eq!(
        refusals(&p, &on_1_36),
        vec![
            "spec.topologyAwareScheduling: needs Kubernetes 1.37 or later (the TopologyAwareWorkloadScheduling feature gate), and the API server runs Kubernetes 1.36 (spec.kubernetesVersion is not set): upgrade the cluster to 1.37, or remove topologyAwareScheduling",
            "spec.topologyAwareScheduling: needs spec.workloadAwareScheduling (TopologyAwareWorkloadScheduling places the pod groups that GenericWorkload schedules): set spec.workloadAwareScheduling: true as well, or remove topologyAwareScheduling",
        ]
    );
}

#[test]
fn plugin_rules_merge_into_the_base_ones_and_are_ordered() {
    let registry = Registry::in_tree();
    // Preemption's pod deletion extends the base pods rule; the volume plugins share one rule,
    // VolumeBinding's writes joining the others' reads, whatever the order.
    for plugins in [
        &["DefaultPreemption", "VolumeRestrictions", "VolumeBinding"][..],
        &["VolumeBinding", "DefaultPreemption", "VolumeRestrictions"][..],
    ] {
        let rules = cluster_rules(plugins, &registry);
        let pods: Vec<_> = rules
            .iter()
            .filter(|r| r.resources.as_deref() == Some(&["pods".to_string()][..]))
            .collect();
        assert_eq!(pods.len(), 1, "{rules:#?}");
        assert_eq!(pods[0].verbs, ["get", "list", "watch", "delete"]);
        let volumes: Vec<_> = rules
            .iter()
            .filter(|r| {
                r.resources
                    .iter()
                    .flatten()
                    .any(|x| x == "persistentvolumeclaims")
            })
            .collect();
        assert_eq!(volumes.len(), 1, "{rules:#?}");
        let mut verbs = volumes[0].verbs.clone();
        verbs.sort();
        assert_eq!(verbs, ["get", "list", "patch", "update", "watch"]);
    }
    // Base rules first, then the plugins', ordered by API group and resources.
    let rules = cluster_rules(
        &["PodTopologySpread", "DefaultPreemption", "InterPodAffinity"],
        &registry,
    );
    let groups: Vec<String> = rules[8..]
        .iter()
        .map(|r| format!("{:?}/{:?}", r.api_groups, r.resources))
        .collect();
    let mut sorted = groups.clone();
    sorted.sort();
    assert_eq!(groups, sorted);
    assert_eq!(rules.len(), 8 + 4);
}

/// What the operator grants covers what the plugins watch: every in-tree plugin's kinds are
/// covered by list and watch rules, so a profile never watches a kind it may not list.
#[test]
fn every_declared_informer_is_granted() {
    let registry = Registry::in_tree();
    for name in registry.names() {
        let rules = cluster_rules(&[name], &registry);
        for kind in registry.informers_for([name]) {
            let needed = kind.rbac_rule();
            let group = needed
                .api_groups
                .iter()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_default();
            for resource in needed.resources.iter().flatten() {
                for verb in ["list", "watch"] {
                    assert!(
                        has_rule(&rules, &group, resource, verb),
                        "{name} watches {resource} without {verb}"
                    );
                }
            }
        }
    }
}

#[test]
fn lease_role_is_limited_to_the_profile_lease() {
    let r = ok(&profile("le", json!({})));
    let rules = r.lease_role.rules.clone().unwrap_or_default();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].verbs, vec!["create"]);
    assert_eq!(rules[0].resource_names, None);
    assert_eq!(rules[1].verbs, vec!["get", "list", "watch", "update"]);
    assert_eq!(
        rules[1].resource_names,
        Some(vec!["ksched-profile-le".to_string()])
    );
    assert!(
        rules
            .iter()
            .all(|r| r.api_groups == Some(vec!["coordination.k8s.io".into()]))
    );
    assert!(
        rules
            .iter()
            .all(|r| r.resources == Some(vec!["leases".into()]))
    );
    let subjects = r.lease_role_binding.subjects.clone().unwrap_or_default();
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, "ksched-profile-le");
    assert_eq!(subjects[0].namespace.as_deref(), Some("ksched-system"));
    assert_eq!(r.cluster_role_binding.role_ref.name, "ksched:profile:le");
}

#[test]
fn unknown_plugin_is_reported_at_the_spec_field() {
    let errs = invalid(&profile(
        "typo",
        json!({"plugins": {"score": {"enabled": [{"name": "NodeResourcesFitt"}]}}}),
    ));
    assert!(
        errs.iter()
            .any(|e| e.path.starts_with("spec.plugins.score.enabled[0]")
                && e.reason.contains("NodeResourcesFitt")),
        "{errs:?}"
    );
    assert!(errs.iter().all(|e| e.path.starts_with("spec")), "{errs:?}");
}

#[test]
fn bad_plugin_args_are_reported_at_the_spec_field() {
    let errs = invalid(&profile(
        "badargs",
        json!({"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Nope"}}}]}),
    ));
    assert!(
        errs.iter()
            .any(|e| e.path.starts_with("spec.pluginConfig[0].args")),
        "{errs:?}"
    );
}

#[test]
fn bad_durations_and_names_are_reported() {
    let errs = invalid(&profile(
        "dur",
        json!({"leaderElection": {"leaseDuration": "fifteen"}}),
    ));
    assert_eq!(
        errs[0].path, "spec.leaderElection.leaseDuration",
        "{errs:?}"
    );
    let errs = invalid(&profile("Upper_Case", json!({})));
    assert_eq!(errs[0].path, "metadata.name");
    let errs = invalid(&profile(&"a".repeat(MAX_PROFILE_NAME + 1), json!({})));
    assert!(
        errs.iter().any(|e| e.reason.starts_with("Too long")),
        "{errs:?}"
    );
    ok(&profile(&"a".repeat(MAX_PROFILE_NAME), json!({})));
}

#[test]
fn loader_paths_map_to_crd_fields() {
    for (from, to) in [
        (
            "profiles[0].plugins.score.enabled[0].name",
            "spec.plugins.score.enabled[0].name",
        ),
        (
            "profiles[0].pluginConfig[1].args.x",
            "spec.pluginConfig[1].args.x",
        ),
        (
            "profiles[0].percentageOfNodesToScore",
            "spec.percentageOfNodesToScore",
        ),
        ("profiles[0].schedulerName", "metadata.name"),
        ("profiles[0]", "spec"),
        (
            "leaderElection.leaseDuration",
            "spec.leaderElection.leaseDuration",
        ),
        ("clientConnection.qps", "spec.clientConnection.qps"),
        ("podMaxBackoffSeconds", "spec.podMaxBackoffSeconds"),
        ("", "spec"),
    ] {
        assert_eq!(to_spec_path(from), to, "{from}");
    }
}

#[test]
fn leaf_policies_naming_the_profile_are_recorded() {
    let policies = vec![
        policy("zeta", &["hybrid"]),
        policy("all", &["*"]),
        policy("other", &["gang"]),
    ];
    let p = profile("hybrid", json!({}));
    let r = match render(&p, &policies, &opts(), &Registry::in_tree()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.leaf_policies, vec!["all", "zeta"]);
    let names: Vec<String> = policies_naming("gang", &policies)
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names, vec!["all", "other"]);
}

#[test]
fn leaf_policies_become_the_leaf_plugins_of_the_config() {
    let p = profile("hybrid", json!({}));
    let plain = ok(&p);
    let with_policy = match render(
        &p,
        &[policy("leaves", &["hybrid"])],
        &opts(),
        &Registry::in_tree(),
    ) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let cfg = loaded(&with_policy);
    let profile = &cfg.profiles[0];
    let filter = profile.names_at(config::ExtensionPoint::Filter);
    assert!(
        filter.contains(&"LeafNodeTaintToleration") && !filter.contains(&"TaintToleration"),
        "{filter:?}"
    );
    assert!(
        filter.contains(&"LeafNodeDistribution") && filter.contains(&"LeafNodeVolumeBinding"),
        "{filter:?}"
    );
    assert!(!filter.contains(&"VolumeBinding"), "{filter:?}");
    assert!(profile.plugin_args.contains_key("LeafNodeDistribution"));
    // The policy changes the config, so the scheduler rolls out.
    assert_ne!(plain.config_hash, with_policy.config_hash);
    let loaded_plain = loaded(&plain);
    assert!(
        loaded_plain.profiles[0]
            .names_at(config::ExtensionPoint::Filter)
            .contains(&"TaintToleration")
    );
}

#[test]
fn every_sample_profile_renders() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/samples");
    let mut rendered = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        if !text.contains("kind: SchedulerProfile") {
            continue;
        }
        let p: SchedulerProfile =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let r = ok(&p);
        loaded(&r);
        rendered += 1;
    }
    assert!(rendered >= 4, "{rendered} sample profiles");
}

#[test]
fn yaml_stream_has_every_object() {
    let r = ok(&profile("stream", json!({})));
    let yaml = match r.to_yaml() {
        Ok(y) => y,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(yaml.matches("---\n").count(), 10);
    for kind in [
        "kind: ConfigMap",
        "kind: ServiceAccount",
        "kind: ClusterRole\n",
        "kind: ClusterRoleBinding",
        "kind: Role\n",
        "kind: RoleBinding",
        "kind: Lease",
        "kind: Deployment",
        "kind: Service\n",
    ] {
        assert!(yaml.contains(kind), "{kind} missing");
    }
    // Each document parses back (as what kubectl would read).
    let docs: Vec<serde_json::Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .collect();
    assert_eq!(docs.len(), 10);
    assert_eq!(
        docs[0]
            .pointer("/data/config.yaml")
            .and_then(|v| v.as_str()),
        Some(r.config_yaml.as_str())
    );
}

fn render_with(
    p: &SchedulerProfile,
    policies: &[LeafClusterPolicy],
) -> Result<Rendered, InvalidSpec> {
    render(p, policies, &opts(), &Registry::in_tree())
}

#[test]
fn kube_schedulers_name_is_refused() {
    let errs = invalid(&profile("default-scheduler", json!({})));
    assert!(
        errs.iter()
            .any(|e| e.path == "metadata.name" && e.reason.contains("race")),
        "{errs:?}"
    );
}

#[test]
fn the_profiles_own_leaf_args_reach_the_config_map() {
    let p = profile(
        "hybrid",
        json!({"pluginConfig": [
            {"name": "LeafNodeVolumeBinding", "args": {"bindTimeoutSeconds": 5}}
        ]}),
    );
    let r = match render_with(&p, &[policy("leaves", &["hybrid"])]) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let cfg = loaded(&r);
    assert_eq!(
        cfg.profiles[0]
            .plugin_args
            .get("LeafNodeVolumeBinding")
            .map(|a| a["bindTimeoutSeconds"].clone()),
        Some(json!(5)),
        "{}",
        r.config_yaml
    );
    // Wrong type or value: refused, the field named as the user wrote it.
    for bad in [json!("five"), json!(-7)] {
        let p = profile(
            "hybrid",
            json!({"pluginConfig": [
                {"name": "NodeResourcesFit", "args": {}},
                {"name": "LeafNodeVolumeBinding", "args": {"bindTimeoutSeconds": bad}}
            ]}),
        );
        let errs = match render_with(&p, &[policy("leaves", &["hybrid"])]) {
            Ok(_) => panic!("{bad} accepted"),
            Err(e) => e.errors,
        };
        assert!(
            errs.iter()
                .any(|e| e.path == "spec.pluginConfig[1].args.bindTimeoutSeconds"),
            "{bad}: {errs:?}"
        );
    }
}

#[test]
fn a_bad_policy_does_not_stall_the_profile_it_names() {
    let mut bad = policy("bad", &["hybrid"]);
    bad.spec.leaf_node_selector = match serde_json::from_value(json!({
        "matchExpressions": [{"key": "x", "operator": "Near", "values": ["1"]}]
    })) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let p = profile("hybrid", json!({}));
    let r = match render_with(&p, &[bad, policy("good", &["hybrid"])]) {
        Ok(r) => r,
        Err(e) => panic!("a bad policy stalled the profile: {e}"),
    };
    assert_eq!(r.leaf_policies, vec!["good"]);
    assert_eq!(r.ignored_policies.len(), 1);
    let message = r.ignored_policies[0].to_string();
    assert!(
        message.contains("LeafClusterPolicy bad")
            && message.contains("spec.leafNodeSelector.matchExpressions[0].operator")
            && !message.contains("pluginConfig"),
        "{message}"
    );
}

/// The API server lets the operator grant a profile's scheduler only what the operator holds
/// itself (RBAC's escalation check): every rule an in-tree plugin may add to a profile's
/// ClusterRole is held by the installed operator's ClusterRole (`manifests/install`, generated
/// from the chart). A plugin that watches a new kind fails here, not at a user's first profile.
#[test]
fn the_installed_operator_holds_every_rule_a_profile_may_get() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/install/rbac.yaml");
    let text = std::fs::read_to_string(path).expect("manifests/install/rbac.yaml");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("rbac.yaml");
    let held: Vec<PolicyRule> = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "ksched-operator")
        .map(|d| serde_json::from_value(d["rules"].clone()).expect("rules"))
        .expect("ClusterRole ksched-operator");
    let registry = Registry::in_tree();
    let mut missing = Vec::new();
    for plugin in registry.plugin_names() {
        for rule in cluster_rules(&[plugin.as_str()], &registry) {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        let needed = PolicyRule {
                            api_groups: Some(vec![group.clone()]),
                            resources: Some(vec![resource.clone()]),
                            verbs: vec![verb.clone()],
                            ..PolicyRule::default()
                        };
                        if !held
                            .iter()
                            .any(|h| crate::framework::registry::grants(h, &needed))
                        {
                            missing.push(format!("{plugin}: {group}/{resource} {verb}"));
                        }
                    }
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "the chart's ClusterRole ksched-operator lacks (add to charts/ksched/templates/rbac.yaml, then make manifests): {missing:#?}"
    );
}
