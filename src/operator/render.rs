//! Pure rendering: a `SchedulerProfile` (and the `LeafClusterPolicy`s naming it) in, the Kubernetes
//! objects that run its scheduler out. No I/O: the reconciler applies what this returns, and
//! `ksched render` prints it.
//!
//! For profile `P` in operator namespace `NS`:
//! - ConfigMap `NS/ksched-profile-P` with `config.yaml`: a complete, validated, normalized
//!   `kubescheduler.config.k8s.io/v1` configuration (leader election on Lease
//!   `NS/ksched-profile-P`);
//! - ServiceAccount `NS/ksched-profile-P`;
//! - ClusterRole and ClusterRoleBinding `ksched:profile:P`, least privilege for the enabled plugins;
//! - Role and RoleBinding `NS/ksched-profile-P`: the profile's own Lease only;
//! - RoleBinding `kube-system/ksched-profile-P` to `extension-apiserver-authentication-reader`;
//! - Lease `NS/ksched-profile-P` (metadata only: labels and owner reference, so it goes with the
//!   profile; the scheduler owns its spec);
//! - Deployment and Service `NS/ksched-profile-P` — in `Deployment` mode only. An `Embedded`
//!   profile runs inside the operator process, so neither is rendered (the reconciler removes them
//!   when a profile switches to `Embedded`).
//!
//! Names cannot collide by construction: every rendered name starts with [`PROFILE_PREFIX`] (or
//! [`CLUSTER_PROFILE_PREFIX`]), which no object of the chart or of the uninstall machinery uses
//! (those are `ksched-operator*` and `ksched:metrics-reader`), and is followed by the profile's
//! name, unique among profiles. The reconciler still never adopts an object it did not create
//! (`NameInUse`).
//!
//! Every object carries an owner reference to the profile when it has a uid (a profile read from a
//! file, as `ksched render` does, has none): the garbage collector removes them all when the profile
//! goes, the cluster-scoped ClusterRole and ClusterRoleBinding too (a cluster-scoped owner may own
//! both kinds), so a profile needs no finalizer and never holds up its CRD's deletion.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort,
    ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::leaf_render::IgnoredPolicy;
use super::leaf_render::{LeafPluginConfig, render_leaf_policies};
use crate::api::scheduler_profile::{
    ProfileMode, TOPOLOGY_AWARE, WORKLOAD_AWARE, topology_aware_needs_workload_aware,
};
use crate::api::{LeafClusterPolicy, SchedulerProfile};
use crate::config::types::{ClientConnectionConfiguration, LeaderElectionConfiguration};
use crate::config::{
    self, FieldError, GoDuration, KubeSchedulerConfiguration, KubeSchedulerProfile, PluginCatalog,
};
use crate::emulation::{Emulation, GENERIC_WORKLOAD_SINCE, Minor};
use crate::framework::registry::policy_rule;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "ksched-operator";
/// Pod-template annotation holding the sha256 of `config.yaml`: a config change rolls out.
pub(crate) const CONFIG_HASH_ANNOTATION: &str = "ksched.io/config-hash";
/// Key of the configuration in the ConfigMap.
pub(crate) const CONFIG_KEY: &str = "config.yaml";
/// Where the ConfigMap is mounted in the scheduler container.
pub(crate) const CONFIG_DIR: &str = "/etc/ksched";
/// The scheduler's HTTPS port (health, metrics), as kube-scheduler's.
pub(crate) const SECURE_PORT: i32 = 10259;
/// Name of the scheduler container.
pub(crate) const CONTAINER_NAME: &str = "scheduler";
/// Default operator namespace.
pub(crate) const DEFAULT_NAMESPACE: &str = "ksched-system";
/// Non-root uid/gid the scheduler runs as (distroless `nonroot`).
pub(crate) const NONROOT_ID: i64 = 65532;

pub(crate) const LABEL_NAME: &str = "app.kubernetes.io/name";
pub(crate) const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub(crate) const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Value of `app.kubernetes.io/name`.
pub(crate) const APP_NAME: &str = "ksched";
/// Value of `app.kubernetes.io/managed-by` (also the label selector of the operator's watches).
pub(crate) const MANAGED_BY: &str = "ksched-operator";

/// Start of the name of every namespaced object rendered for a profile.
pub const PROFILE_PREFIX: &str = "ksched-profile-";
/// Start of the name of every cluster-scoped object rendered for a profile.
pub const CLUSTER_PROFILE_PREFIX: &str = "ksched:profile:";

/// Longest profile name whose rendered names are all valid (the Service `ksched-profile-<name>`
/// must be a DNS-1035 label of at most 63 characters).
pub(crate) const MAX_PROFILE_NAME: usize = 63 - PROFILE_PREFIX.len();

/// Where the rendered objects go and what they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// The operator namespace: every namespaced object (but the kube-system RoleBinding) and the Lease.
    pub namespace: String,
    /// The scheduler image when the profile sets none: the operator's own image.
    pub image: String,
    /// The API server's minor (what a profile without `kubernetesVersion` runs as); `None`
    /// without a cluster (`ksched render`): the newest minor ksched emulates.
    pub cluster_minor: Option<Minor>,
}

/// `ksched-profile-P`: the name of every namespaced object rendered for profile `P` (ConfigMap,
/// ServiceAccount, Deployment, Service, Lease, Role, RoleBindings).
pub fn object_name(profile: &str) -> String {
    format!("{PROFILE_PREFIX}{profile}")
}

/// `ksched:profile:P`: the ClusterRole and ClusterRoleBinding of profile `P`.
pub fn cluster_object_name(profile: &str) -> String {
    format!("{CLUSTER_PROFILE_PREFIX}{profile}")
}

/// Everything rendered for one profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub profile: String,
    /// The normalized v1 configuration written into the ConfigMap.
    pub config_yaml: String,
    /// Hex sha256 of `config_yaml` (the pod-template annotation and `status.configHash`).
    pub config_hash: String,
    /// What the configuration loader warned about (deprecated or not-yet-built plugins ...).
    pub warnings: Vec<String>,
    /// Names of the LeafClusterPolicies rendered into this profile, sorted (`status.leafPolicies`).
    pub leaf_policies: Vec<String>,
    /// LeafClusterPolicies naming this profile that are invalid: left out, or rendered by their
    /// last valid spec.
    pub ignored_policies: Vec<IgnoredPolicy>,
    /// Plugins enabled at some extension point of the effective profile, sorted.
    pub enabled_plugins: Vec<String>,
    /// What the scheduler emulates: its minor (`status.kubernetesVersion`) and the feature gates
    /// the profile turns on (`workloadAwareScheduling`, `topologyAwareScheduling`).
    pub emulation: Emulation,
    pub config_map: ConfigMap,
    pub service_account: ServiceAccount,
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub lease_role: Role,
    pub lease_role_binding: RoleBinding,
    pub auth_reader_binding: RoleBinding,
    pub lease: Lease,
    /// `None` in `Embedded` mode.
    pub deployment: Option<Deployment>,
    /// `None` in `Embedded` mode.
    pub service: Option<Service>,
}

/// The profile's spec cannot be rendered: every problem, with paths naming the CRD fields
/// (`spec.plugins.score.enabled[0].name`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidSpec {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

/// Serializing rendered objects failed (a bug, not a user error).
#[derive(Debug, thiserror::Error)]
#[error("serializing {what} as YAML: {source}")]
pub struct SerializeError {
    what: String,
    #[source]
    source: serde_saphyr::SerializeError,
}

/// The policies (among `policies`) that name `profile`, directly or with `*`, sorted by name.
pub(crate) fn policies_naming<'a>(
    profile: &str,
    policies: &'a [LeafClusterPolicy],
) -> Vec<&'a LeafClusterPolicy> {
    let mut out: Vec<&LeafClusterPolicy> = policies
        .iter()
        .filter(|p| p.spec.profiles.iter().any(|n| n == "*" || n == profile))
        .collect();
    out.sort_by_key(|p| p.name_any());
    out
}

/// Renders `profile` (with the policies among `policies` that name it) into its objects, or says
/// exactly which spec fields are wrong. Validation is `config::load`'s, the same as
/// `ksched config validate`.
pub fn render(
    profile: &SchedulerProfile,
    policies: &[LeafClusterPolicy],
    opts: &RenderOptions,
    catalog: &dyn PluginCatalog,
) -> Result<Rendered, InvalidSpec> {
    let name = profile.name_any();
    let mut errors = validate_name(&name);
    let doc = match config_document(profile, &opts.namespace) {
        Ok(doc) => Some(doc),
        Err(mut errs) => {
            errors.append(&mut errs);
            None
        }
    };
    if !errors.is_empty() {
        return Err(InvalidSpec {
            errors,
            warnings: Vec::new(),
        });
    }
    let Some(mut doc) = doc else {
        return Err(InvalidSpec {
            errors: vec![FieldError::new("spec", "cannot be rendered")],
            warnings: Vec::new(),
        });
    };
    let leaf = apply_leaf_policies(&mut doc, &name, policies)?;
    let minor = emulated_minor(profile, opts)?;
    // The gates reach the loader, so the default plugins, and with them the ClusterRole, follow
    // them as the scheduler will.
    let emulation = profile_emulation(profile, minor)?;
    let loaded = config::load_document(&doc, catalog, &emulation).map_err(|e| InvalidSpec {
        errors: e.errors.into_iter().map(to_spec_error).collect(),
        warnings: e.warnings,
    })?;
    let enabled_plugins: Vec<String> = loaded
        .config
        .profile(&name)
        .map(|p| p.enabled_plugins().into_iter().map(String::from).collect())
        .unwrap_or_default();
    let config_yaml = config::to_v1_yaml(&loaded.config);
    let config_hash = sha256_hex(&config_yaml);
    let leaf_policies = leaf.policies;
    let ignored_policies = leaf.ignored;

    let ns = opts.namespace.as_str();
    let owner = owner_reference(profile);
    let meta = |obj_name: String, namespace: Option<&str>| ObjectMeta {
        name: Some(obj_name),
        namespace: namespace.map(String::from),
        labels: Some(labels(&name)),
        owner_references: owner.clone().map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    let obj = object_name(&name);
    let sa_subject = Subject {
        kind: "ServiceAccount".into(),
        name: obj.clone(),
        namespace: Some(ns.to_string()),
        api_group: None,
    };

    let config_map = ConfigMap {
        metadata: meta(obj.clone(), Some(ns)),
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            config_yaml.clone(),
        )])),
        ..ConfigMap::default()
    };
    let service_account = ServiceAccount {
        metadata: meta(obj.clone(), Some(ns)),
        ..ServiceAccount::default()
    };
    let cluster_role = ClusterRole {
        metadata: meta(cluster_object_name(&name), None),
        rules: Some(cluster_rules(&enabled_plugins, catalog)),
        ..ClusterRole::default()
    };
    let cluster_role_binding = ClusterRoleBinding {
        metadata: meta(cluster_object_name(&name), None),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: cluster_object_name(&name),
        },
        subjects: Some(vec![sa_subject.clone()]),
    };
    let lease_role = Role {
        metadata: meta(obj.clone(), Some(ns)),
        rules: Some(lease_rules(&obj)),
    };
    let lease_role_binding = RoleBinding {
        metadata: meta(obj.clone(), Some(ns)),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: obj.clone(),
        },
        subjects: Some(vec![sa_subject.clone()]),
    };
    let auth_reader_binding = RoleBinding {
        metadata: meta(obj.clone(), Some("kube-system")),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "extension-apiserver-authentication-reader".into(),
        },
        subjects: Some(vec![sa_subject]),
    };
    let lease = Lease {
        metadata: meta(obj.clone(), Some(ns)),
        spec: None,
    };
    let (deployment, service) = match profile.spec.mode {
        ProfileMode::Deployment => (
            Some(deployment(
                profile,
                &name,
                ns,
                &opts.image,
                &config_hash,
                &meta,
            )),
            Some(Service {
                metadata: meta(obj.clone(), Some(ns)),
                spec: Some(ServiceSpec {
                    selector: Some(selector_labels(&name)),
                    ports: Some(vec![ServicePort {
                        name: Some("https".into()),
                        port: SECURE_PORT,
                        target_port: Some(IntOrString::String("https".into())),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    }]),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            }),
        ),
        ProfileMode::Embedded => (None, None),
    };

    Ok(Rendered {
        profile: name,
        config_yaml,
        config_hash,
        warnings: loaded.warnings,
        leaf_policies,
        ignored_policies,
        enabled_plugins,
        emulation,
        config_map,
        service_account,
        cluster_role,
        cluster_role_binding,
        lease_role,
        lease_role_binding,
        auth_reader_binding,
        lease,
        deployment,
        service,
    })
}

/// The minor the profile's scheduler runs as: `spec.kubernetesVersion` (rendered as
/// `--emulated-version`), else the API server's, which must be one ksched emulates.
fn emulated_minor(profile: &SchedulerProfile, opts: &RenderOptions) -> Result<Minor, InvalidSpec> {
    let invalid = |reason: String| InvalidSpec {
        errors: vec![FieldError::new("spec.kubernetesVersion", reason)],
        warnings: Vec::new(),
    };
    match &profile.spec.kubernetes_version {
        Some(v) => match Minor::parse(v) {
            Ok(m) if m.is_supported() => Ok(m),
            _ => Err(invalid(crate::emulation::supported_cel_message())),
        },
        None => match opts.cluster_minor {
            None => Ok(Minor::NEWEST),
            Some(m) if m.is_supported() => Ok(m),
            Some(m) => Err(invalid(format!(
                "not set, and the API server runs Kubernetes {m}, which this ksched does not emulate: set it to one it does ({})",
                crate::emulation::supported_list()
            ))),
        },
    }
}

/// The `--feature-gates` values the profile sets: `GenericWorkload=true` with
/// `workloadAwareScheduling`, `TopologyAwareWorkloadScheduling=true` with `topologyAwareScheduling`.
pub(crate) fn feature_gates(profile: &SchedulerProfile) -> Vec<String> {
    profile
        .spec
        .gate_fields()
        .into_iter()
        .map(|(_, gate)| format!("{gate}=true"))
        .collect()
}

/// `minor` with the profile's feature gates. `workloadAwareScheduling` and
/// `topologyAwareScheduling` need a minor whose gates ksched honours (the fix depends on where
/// the minor came from), and `topologyAwareScheduling` needs `workloadAwareScheduling`. Every
/// refusal is reported, each on its field (the CRD's rules refuse the same on `kubectl apply`;
/// this catches objects that predate them and an unpinned profile on a 1.36 cluster).
fn profile_emulation(profile: &SchedulerProfile, minor: Minor) -> Result<Emulation, InvalidSpec> {
    let invalid = |errors: Vec<FieldError>| InvalidSpec {
        errors,
        warnings: Vec::new(),
    };
    let since = GENERIC_WORKLOAD_SINCE;
    let fix = match profile.spec.kubernetes_version {
        Some(_) => format!(
            "spec.kubernetesVersion is {minor}: set it to {since} (or leave it out on a {since} cluster)"
        ),
        None => format!(
            "the API server runs Kubernetes {minor} (spec.kubernetesVersion is not set): upgrade the cluster to {since}"
        ),
    };
    let too_old = if minor < since {
        profile.spec.gate_fields()
    } else {
        Vec::new()
    };
    let mut errors: Vec<FieldError> = too_old
        .into_iter()
        .map(|(field, gate)| {
            FieldError::new(
                format!("spec.{field}"),
                format!(
                    "needs Kubernetes {since} or later (the {gate} feature gate), and {fix}, or remove {field}"
                ),
            )
        })
        .collect();
    if profile.spec.topology_aware_scheduling && !profile.spec.workload_aware_scheduling {
        errors.push(FieldError::new(
            format!("spec.{TOPOLOGY_AWARE}"),
            topology_aware_needs_workload_aware(),
        ));
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    Emulation::with_gates(minor, &feature_gates(profile)).map_err(|e| {
        invalid(vec![FieldError::new(
            format!("spec.{WORKLOAD_AWARE}"),
            e.to_string(),
        )])
    })
}

/// The profile name must make valid object names and label values.
fn validate_name(name: &str) -> Vec<FieldError> {
    let dns1035 = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let mut errors = Vec::new();
    if name == super::DEFAULT_SCHEDULER {
        errors.push(FieldError::new(
            "metadata.name",
            format!(
                "Forbidden: {name:?} is kube-scheduler's scheduler name: a second scheduler of that name would race it for every pod of the cluster; pick another name and set spec.schedulerName of the pods that should use this profile to it"
            ),
        ));
    }
    if !dns1035 {
        errors.push(FieldError::new(
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a profile name must consist of lower case letters, digits and '-', start with a letter and end with a letter or digit (it names the Service {PROFILE_PREFIX}<name>)"
            ),
        ));
    }
    if name.len() > MAX_PROFILE_NAME {
        errors.push(FieldError::new(
            "metadata.name",
            format!(
                "Too long: {name:?} has {} characters, at most {MAX_PROFILE_NAME} ({PROFILE_PREFIX}<name> must fit a 63-character Service name and the name is a label value)",
                name.len()
            ),
        ));
    }
    errors
}

/// The one-profile `KubeSchedulerConfiguration` document for `profile`, before loading.
pub(crate) fn config_document(
    profile: &SchedulerProfile,
    namespace: &str,
) -> Result<KubeSchedulerConfiguration, Vec<FieldError>> {
    let name = profile.name_any();
    let spec = &profile.spec;
    let mut errors = Vec::new();
    let mut duration = |field: &str, value: &str| match GoDuration::parse(value) {
        Ok(d) => Some(d),
        Err(e) => {
            errors.push(FieldError::new(
                format!("spec.leaderElection.{field}"),
                format!("Invalid value: {value:?}: {e}"),
            ));
            None
        }
    };
    let le = &spec.leader_election;
    let lease_duration = duration("leaseDuration", &le.lease_duration);
    let renew_deadline = duration("renewDeadline", &le.renew_deadline);
    let retry_period = duration("retryPeriod", &le.retry_period);

    // The CRD's plugins and pluginConfig have exactly the upstream shape: carry them over as JSON so
    // the loader sees what the user wrote.
    let plugins = match spec.plugins.as_ref().map(serde_json::to_value).transpose() {
        Ok(Some(value)) => match serde_json::from_value(value) {
            Ok(p) => Some(p),
            Err(e) => {
                errors.push(FieldError::new(
                    "spec.plugins",
                    format!("Invalid value: {e}"),
                ));
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            errors.push(FieldError::new(
                "spec.plugins",
                format!("Invalid value: {e}"),
            ));
            None
        }
    };
    let plugin_config = spec
        .plugin_config
        .iter()
        .map(|pc| config::PluginConfig {
            name: pc.name.clone(),
            args: pc.args.clone(),
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(KubeSchedulerConfiguration {
        leader_election: LeaderElectionConfiguration {
            leader_elect: Some(true),
            lease_duration,
            renew_deadline,
            retry_period,
            resource_lock: Some("leases".into()),
            resource_name: Some(object_name(&name)),
            resource_namespace: Some(namespace.to_string()),
        },
        client_connection: ClientConnectionConfiguration {
            qps: Some(spec.client_connection.qps as f32),
            burst: Some(spec.client_connection.burst),
            ..ClientConnectionConfiguration::default()
        },
        pod_initial_backoff_seconds: Some(spec.pod_initial_backoff_seconds),
        pod_max_backoff_seconds: Some(spec.pod_max_backoff_seconds),
        profiles: vec![KubeSchedulerProfile {
            scheduler_name: Some(name),
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            plugins,
            plugin_config,
        }],
        ..KubeSchedulerConfiguration::v1()
    })
}

/// The LeafClusterPolicies naming the profile become its leaf plugins and their args
/// (LeafNodeTaintToleration, LeafNodeDistribution, LeafNodeVolumeBinding), merged with the
/// profile's own args for them.
fn apply_leaf_policies(
    doc: &mut KubeSchedulerConfiguration,
    name: &str,
    policies: &[LeafClusterPolicy],
) -> Result<LeafPluginConfig, InvalidSpec> {
    let leaf = render_leaf_policies(name, policies);
    let Some(profile) = doc.profiles.first_mut() else {
        return Ok(leaf);
    };
    let invalid = |e: serde_json::Error| InvalidSpec {
        errors: vec![FieldError::new(
            "spec",
            format!("cannot apply the leaf-cluster policies: {e}"),
        )],
        warnings: Vec::new(),
    };
    let mut value = serde_json::to_value(&*profile).map_err(invalid)?;
    leaf.apply_to_profile(&mut value)
        .map_err(|errors| InvalidSpec {
            errors: errors.into_iter().map(|e| e.under("spec")).collect(),
            warnings: Vec::new(),
        })?;
    *profile = serde_json::from_value(value).map_err(invalid)?;
    Ok(leaf)
}

/// A loader error path (`profiles[0].plugins.score...`, `leaderElection.leaseDuration`) as the CRD
/// field it came from (`spec.plugins.score...`, `spec.leaderElection.leaseDuration`).
pub(crate) fn to_spec_path(path: &str) -> String {
    const PROFILE: &str = "profiles[0]";
    if let Some(rest) = path.strip_prefix(PROFILE) {
        if rest == ".schedulerName" {
            return "metadata.name".into();
        }
        return match rest.strip_prefix('.') {
            Some(field) => format!("spec.{field}"),
            None => format!("spec{rest}"),
        };
    }
    if path.is_empty() || path == "profiles" {
        return "spec".into();
    }
    format!("spec.{path}")
}

fn to_spec_error(e: FieldError) -> FieldError {
    FieldError {
        path: to_spec_path(&e.path),
        reason: e.reason,
    }
}

/// Hex sha256.
pub(crate) fn sha256_hex(data: &str) -> String {
    Sha256::digest(data.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The labels of every rendered object.
pub(crate) fn labels(profile: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(profile);
    l.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    l.insert(LABEL_COMPONENT.into(), "scheduler".into());
    l
}

/// The labels selecting a profile's scheduler pods.
pub(crate) fn selector_labels(profile: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), APP_NAME.to_string()),
        (LABEL_INSTANCE.to_string(), profile.to_string()),
    ])
}

/// Owner reference to the profile (controller, blocking its deletion until GC ran), when it has a uid.
pub(crate) fn owner_reference(profile: &SchedulerProfile) -> Option<OwnerReference> {
    let uid = profile.meta().uid.clone()?;
    Some(OwnerReference {
        api_version: SchedulerProfile::api_version(&()).into_owned(),
        kind: SchedulerProfile::kind(&()).into_owned(),
        name: profile.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// What every scheduler needs, whatever its plugins: watch pods and nodes, bind, write pod
/// status and events, and review the tokens and permissions of its HTTPS endpoint's callers.
fn base_rules() -> Vec<PolicyRule> {
    let read = ["get", "list", "watch"];
    let write = ["create", "patch", "update"];
    vec![
        policy_rule(&[""], &["pods"], &read),
        policy_rule(&[""], &["pods/binding"], &["create"]),
        policy_rule(&[""], &["pods/status"], &["patch", "update"]),
        policy_rule(&[""], &["events"], &write),
        policy_rule(&["events.k8s.io"], &["events"], &write),
        policy_rule(&[""], &["nodes"], &read),
        // Delegated authentication and authorization of the HTTPS endpoint, as system:kube-scheduler.
        policy_rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
        policy_rule(
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]
}

/// The ClusterRole rules a scheduler running `enabled` plugins needs, and no more: the base rules
/// and the rules each enabled plugin declares in its registration. Rules on the same API groups
/// and resources are merged (their verbs joined, in order), so a plugin that needs to delete pods
/// extends the base pods rule; the plugins' other rules follow the base ones, ordered by API
/// group and resources.
pub(crate) fn cluster_rules<S: AsRef<str>>(
    enabled: &[S],
    catalog: &dyn PluginCatalog,
) -> Vec<PolicyRule> {
    let mut rules = base_rules();
    let base = rules.len();
    for plugin in enabled {
        for declared in catalog.policy_rules(plugin.as_ref()) {
            let same = |r: &&mut PolicyRule| {
                r.api_groups == declared.api_groups
                    && r.resources == declared.resources
                    && r.resource_names == declared.resource_names
                    && r.non_resource_urls == declared.non_resource_urls
            };
            match rules.iter_mut().find(same) {
                Some(existing) => {
                    for verb in &declared.verbs {
                        if !existing.verbs.contains(verb) {
                            existing.verbs.push(verb.clone());
                        }
                    }
                }
                None => rules.push(declared),
            }
        }
    }
    rules[base..].sort_by(|a, b| (&a.api_groups, &a.resources).cmp(&(&b.api_groups, &b.resources)));
    rules
}

/// The Role on the profile's own Lease: `create` (which cannot be limited by name) and get/update of
/// that one Lease, and watching it (a candidate sees the holder's renewals as they happen, so it
/// takes over one lease duration after the last).
pub(crate) fn lease_rules(lease: &str) -> Vec<PolicyRule> {
    vec![
        policy_rule(&["coordination.k8s.io"], &["leases"], &["create"]),
        PolicyRule {
            resource_names: Some(vec![lease.to_string()]),
            ..policy_rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["get", "list", "watch", "update"],
            )
        },
    ]
}

fn deployment(
    profile: &SchedulerProfile,
    name: &str,
    ns: &str,
    image: &str,
    config_hash: &str,
    meta: &dyn Fn(String, Option<&str>) -> ObjectMeta,
) -> Deployment {
    let spec = &profile.spec;
    let replicas = if spec.suspend { 0 } else { spec.replicas };
    let obj = object_name(name);
    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("https".into()),
            scheme: Some("HTTPS".into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(5),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(failures),
        ..Probe::default()
    };
    let field_env = |env: &str, path: &str| EnvVar {
        name: env.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    };
    let container = Container {
        name: CONTAINER_NAME.into(),
        image: Some(spec.image.clone().unwrap_or_else(|| image.to_string())),
        args: Some(
            [
                "scheduler".into(),
                "--config".into(),
                format!("{CONFIG_DIR}/{CONFIG_KEY}"),
                format!("-v={}", spec.log_level),
            ]
            .into_iter()
            // Unset, the scheduler follows the API server's minor, as kube-scheduler would.
            .chain(
                spec.kubernetes_version
                    .as_ref()
                    .map(|v| format!("--emulated-version={v}")),
            )
            .chain(
                Some(feature_gates(profile))
                    .filter(|gates| !gates.is_empty())
                    .map(|gates| format!("--feature-gates={}", gates.join(","))),
            )
            .collect(),
        ),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("https".into()),
            container_port: SECURE_PORT,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe("/livez", 10, 3)),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        resources: spec.resources.clone(),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "config".into(),
                mount_path: CONFIG_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..VolumeMount::default()
            },
        ]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..SecurityContext::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    Deployment {
        metadata: meta(obj.clone(), Some(ns)),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(name)),
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.to_string(),
                        config_hash.to_string(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(obj.clone()),
                    containers: vec![container],
                    volumes: Some(vec![
                        Volume {
                            name: "config".into(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: obj,
                                ..ConfigMapVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                        Volume {
                            name: "tmp".into(),
                            empty_dir: Some(EmptyDirVolumeSource::default()),
                            ..Volume::default()
                        },
                    ]),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(NONROOT_ID),
                        run_as_group: Some(NONROOT_ID),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..PodSecurityContext::default()
                    }),
                    node_selector: (!spec.node_selector.is_empty())
                        .then(|| spec.node_selector.clone()),
                    tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
                    affinity: spec.affinity.clone(),
                    priority_class_name: spec.priority_class_name.clone(),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

impl Rendered {
    /// Every object, in apply order (the ServiceAccount and RBAC before the Deployment that uses them).
    pub fn objects(&self) -> Vec<RenderedObject<'_>> {
        let mut out = vec![
            RenderedObject::ConfigMap(&self.config_map),
            RenderedObject::ServiceAccount(&self.service_account),
            RenderedObject::ClusterRole(&self.cluster_role),
            RenderedObject::ClusterRoleBinding(&self.cluster_role_binding),
            RenderedObject::Role(&self.lease_role),
            RenderedObject::RoleBinding(&self.lease_role_binding),
            RenderedObject::RoleBinding(&self.auth_reader_binding),
            RenderedObject::Lease(&self.lease),
        ];
        if let Some(d) = &self.deployment {
            out.push(RenderedObject::Deployment(d));
        }
        if let Some(s) = &self.service {
            out.push(RenderedObject::Service(s));
        }
        out
    }

    /// The objects as one multi-document YAML stream (`---` before each).
    pub fn to_yaml(&self) -> Result<String, SerializeError> {
        let mut out = String::new();
        for obj in self.objects() {
            out.push_str("---\n");
            out.push_str(&obj.to_yaml()?);
        }
        Ok(out)
    }
}

/// One rendered object, typed.
#[derive(Debug, Clone, Copy)]
pub enum RenderedObject<'a> {
    ConfigMap(&'a ConfigMap),
    ServiceAccount(&'a ServiceAccount),
    ClusterRole(&'a ClusterRole),
    ClusterRoleBinding(&'a ClusterRoleBinding),
    Role(&'a Role),
    RoleBinding(&'a RoleBinding),
    Lease(&'a Lease),
    Deployment(&'a Deployment),
    Service(&'a Service),
}

impl RenderedObject<'_> {
    /// `Kind namespace/name`, for logs and errors.
    pub fn describe(&self) -> String {
        fn d<K: Resource<DynamicType = ()>>(o: &K) -> String {
            match o.meta().namespace.as_deref() {
                Some(ns) => format!(
                    "{} {ns}/{}",
                    K::kind(&()),
                    o.meta().name.as_deref().unwrap_or("")
                ),
                None => format!(
                    "{} {}",
                    K::kind(&()),
                    o.meta().name.as_deref().unwrap_or("")
                ),
            }
        }
        match self {
            RenderedObject::ConfigMap(o) => d(*o),
            RenderedObject::ServiceAccount(o) => d(*o),
            RenderedObject::ClusterRole(o) => d(*o),
            RenderedObject::ClusterRoleBinding(o) => d(*o),
            RenderedObject::Role(o) => d(*o),
            RenderedObject::RoleBinding(o) => d(*o),
            RenderedObject::Lease(o) => d(*o),
            RenderedObject::Deployment(o) => d(*o),
            RenderedObject::Service(o) => d(*o),
        }
    }

    pub fn to_yaml(self) -> Result<String, SerializeError> {
        fn y<T: Serialize>(what: String, o: &T) -> Result<String, SerializeError> {
            serde_saphyr::to_string(o).map_err(|source| SerializeError { what, source })
        }
        let what = self.describe();
        match self {
            RenderedObject::ConfigMap(o) => y(what, o),
            RenderedObject::ServiceAccount(o) => y(what, o),
            RenderedObject::ClusterRole(o) => y(what, o),
            RenderedObject::ClusterRoleBinding(o) => y(what, o),
            RenderedObject::Role(o) => y(what, o),
            RenderedObject::RoleBinding(o) => y(what, o),
            RenderedObject::Lease(o) => y(what, o),
            RenderedObject::Deployment(o) => y(what, o),
            RenderedObject::Service(o) => y(what, o),
        }
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
