//! The uninstall identity (the *kit*), pure: the objects an installed operator keeps outside what
//! an uninstall deletes, so it can still clean up when its own ServiceAccount and RBAC are gone
//! (see [`super`]). Its root is the ClusterRole [`KIT_NAME`]; everything else is owned by it.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::framework::registry::policy_rule;
use crate::operator::OPERATOR_NAME;
use crate::operator::render::{
    APP_NAME, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY,
};

/// Name of the kit's objects: its root ClusterRole, the ClusterRoleBinding, the ServiceAccount in
/// [`KIT_NAMESPACE`], the Roles and RoleBindings.
pub const KIT_NAME: &str = "ksched-operator-uninstall";
/// Where the kit's ServiceAccount lives: a namespace no uninstall deletes.
pub const KIT_NAMESPACE: &str = "kube-system";
/// `app.kubernetes.io/component` of the kit's objects.
const KIT_COMPONENT: &str = "uninstall";

/// The objects of the kit for an operator in `namespace`; owner references are set by
/// [`Kit::owned_by`] once the root exists.
#[derive(Debug, Clone, PartialEq)]
pub struct Kit {
    /// The root: deleting it (the cleanup's last request) removes the rest by garbage collection.
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub service_account: ServiceAccount,
    /// One per namespace: the operator namespace and kube-system.
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

fn kit_meta(namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(KIT_NAME.into()),
        namespace: namespace.map(String::from),
        labels: Some(
            [
                (LABEL_NAME, APP_NAME),
                (LABEL_COMPONENT, KIT_COMPONENT),
                (LABEL_MANAGED_BY, MANAGED_BY),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ),
        ..ObjectMeta::default()
    }
}

fn named(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: Some(names.iter().map(|s| s.to_string()).collect()),
        ..policy_rule(groups, resources, verbs)
    }
}

/// The cleanup's cluster-wide permissions: the taints it added, the finalizers of both kinds, the
/// profiles' ClusterRoles and ClusterRoleBindings (and the kit's root), and reading the
/// installation it watches.
fn cluster_rules(namespace: &str) -> Vec<PolicyRule> {
    vec![
        policy_rule(&[""], &["nodes"], &["get", "list", "patch"]),
        policy_rule(
            &["ksched.io"],
            &["schedulerprofiles", "leafclusterpolicies"],
            &["get", "list", "patch"],
        ),
        policy_rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "clusterrolebindings"],
            &["list", "delete"],
        ),
        named(
            &["rbac.authorization.k8s.io"],
            &["clusterrolebindings"],
            &["get"],
            &[OPERATOR_NAME],
        ),
        named(&[""], &["namespaces"], &["get"], &[namespace]),
    ]
}

/// The profiles' namespaced objects in the operator namespace, and its own Deployment (read after
/// a SIGTERM) and Lease.
fn namespace_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(
            &[""],
            &["configmaps", "serviceaccounts", "services"],
            &["get", "list", "delete"],
        ),
        policy_rule(&["apps"], &["deployments"], &["get", "list", "delete"]),
        policy_rule(
            &["rbac.authorization.k8s.io"],
            &["roles", "rolebindings"],
            &["get", "list", "delete"],
        ),
        policy_rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "delete"],
        ),
    ]
}

/// The profiles' RoleBindings to extension-apiserver-authentication-reader.
fn kube_system_rules() -> Vec<PolicyRule> {
    vec![policy_rule(
        &["rbac.authorization.k8s.io"],
        &["rolebindings"],
        &["list", "delete"],
    )]
}

/// The kit of an operator in `namespace`.
pub fn kit(namespace: &str) -> Kit {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: KIT_NAME.into(),
        namespace: Some(KIT_NAMESPACE.into()),
        api_group: None,
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: KIT_NAME.into(),
    };
    // One Role per namespace (an operator in kube-system gets both sets in one).
    let mut per_namespace: Vec<(&str, Vec<PolicyRule>)> = vec![(namespace, namespace_rules())];
    if namespace == KIT_NAMESPACE {
        per_namespace[0].1.extend(kube_system_rules());
    } else {
        per_namespace.push((KIT_NAMESPACE, kube_system_rules()));
    }
    Kit {
        cluster_role: ClusterRole {
            metadata: kit_meta(None),
            rules: Some(cluster_rules(namespace)),
            ..ClusterRole::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: kit_meta(None),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject.clone()]),
        },
        service_account: ServiceAccount {
            metadata: kit_meta(Some(KIT_NAMESPACE)),
            ..ServiceAccount::default()
        },
        roles: per_namespace
            .iter()
            .map(|(ns, rules)| Role {
                metadata: kit_meta(Some(ns)),
                rules: Some(rules.clone()),
            })
            .collect(),
        role_bindings: per_namespace
            .iter()
            .map(|(ns, _)| RoleBinding {
                metadata: kit_meta(Some(ns)),
                role_ref: role_ref("Role"),
                subjects: Some(vec![subject.clone()]),
            })
            .collect(),
    }
}

impl Kit {
    /// Every object but the root owned by the root (uid `root_uid`). Not blocking the owner's
    /// deletion: nothing waits for these.
    pub fn owned_by(mut self, root_uid: &str) -> Kit {
        let owner = OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: KIT_NAME.into(),
            uid: root_uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        };
        let metas = std::iter::once(&mut self.cluster_role_binding.metadata)
            .chain(std::iter::once(&mut self.service_account.metadata))
            .chain(self.roles.iter_mut().map(|r| &mut r.metadata))
            .chain(self.role_bindings.iter_mut().map(|b| &mut b.metadata));
        for meta in metas {
            meta.owner_references = Some(vec![owner.clone()]);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
        rules.iter().any(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|res| res == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    }

    #[test]
    fn the_kit_grants_the_cleanup_and_nothing_that_adds() {
        let k = kit("ksched-system");
        let cluster = k.cluster_role.rules.clone().unwrap_or_default();
        for (group, resource, verb) in [
            ("", "nodes", "patch"),
            ("ksched.io", "leafclusterpolicies", "patch"),
            ("ksched.io", "schedulerprofiles", "patch"),
            ("rbac.authorization.k8s.io", "clusterroles", "delete"),
            ("rbac.authorization.k8s.io", "clusterrolebindings", "delete"),
        ] {
            assert!(grants(&cluster, group, resource, verb), "{resource} {verb}");
        }
        // Removing only: no create, update or escalation anywhere, and no Secrets.
        let all: Vec<&PolicyRule> = cluster
            .iter()
            .chain(k.roles.iter().flat_map(|r| r.rules.iter().flatten()))
            .collect();
        for r in &all {
            for verb in &r.verbs {
                assert!(
                    ["get", "list", "patch", "delete"].contains(&verb.as_str()),
                    "{r:?}"
                );
            }
            assert!(!r.resources.iter().flatten().any(|res| res == "secrets"));
        }
        // Reading the installation is limited to its own objects.
        let named_reads: Vec<&PolicyRule> = cluster
            .iter()
            .filter(|r| r.resource_names.is_some())
            .collect();
        assert_eq!(named_reads.len(), 2, "{cluster:?}");
        assert!(named_reads.iter().any(|r| {
            r.resources == Some(vec!["namespaces".into()])
                && r.resource_names == Some(vec!["ksched-system".into()])
        }));
        assert!(named_reads.iter().any(|r| {
            r.resources == Some(vec!["clusterrolebindings".into()])
                && r.resource_names == Some(vec![OPERATOR_NAME.into()])
        }));
    }

    #[test]
    fn the_kit_binds_its_own_service_account_in_kube_system_and_the_operator_namespace() {
        let k = kit("ops");
        assert_eq!(
            k.service_account.metadata.namespace.as_deref(),
            Some("kube-system")
        );
        let namespaces: Vec<_> = k
            .roles
            .iter()
            .map(|r| r.metadata.namespace.clone().unwrap_or_default())
            .collect();
        assert_eq!(namespaces, ["ops", "kube-system"]);
        let ops = &k.roles[0].rules.clone().unwrap_or_default();
        assert!(grants(ops, "apps", "deployments", "delete"));
        assert!(grants(ops, "coordination.k8s.io", "leases", "delete"));
        let kube_system = &k.roles[1].rules.clone().unwrap_or_default();
        assert!(grants(
            kube_system,
            "rbac.authorization.k8s.io",
            "rolebindings",
            "delete"
        ));
        assert!(!grants(kube_system, "apps", "deployments", "delete"));
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: KIT_NAME.into(),
            namespace: Some("kube-system".into()),
            api_group: None,
        };
        assert_eq!(k.cluster_role_binding.subjects, Some(vec![subject.clone()]));
        assert_eq!(k.cluster_role_binding.role_ref.kind, "ClusterRole");
        for b in &k.role_bindings {
            assert_eq!(b.subjects, Some(vec![subject.clone()]));
            assert_eq!(b.role_ref.kind, "Role");
            assert_eq!(b.role_ref.name, KIT_NAME);
        }
        // An operator in kube-system: one Role with both sets.
        let k = kit("kube-system");
        assert_eq!(k.roles.len(), 1);
        assert_eq!(k.role_bindings.len(), 1);
        let rules = k.roles[0].rules.clone().unwrap_or_default();
        assert!(grants(&rules, "apps", "deployments", "delete"));
        assert!(grants(
            &rules,
            "rbac.authorization.k8s.io",
            "rolebindings",
            "delete"
        ));
    }

    #[test]
    fn everything_but_the_root_is_owned_by_the_root_and_labelled_apart_from_rendered_objects() {
        let k = kit("ksched-system").owned_by("root-uid");
        assert!(k.cluster_role.metadata.owner_references.is_none());
        let metas = std::iter::once(&k.cluster_role_binding.metadata)
            .chain(std::iter::once(&k.service_account.metadata))
            .chain(k.roles.iter().map(|r| &r.metadata))
            .chain(k.role_bindings.iter().map(|b| &b.metadata));
        for meta in metas {
            let owners = meta.owner_references.clone().unwrap_or_default();
            assert_eq!(owners.len(), 1, "{meta:?}");
            assert_eq!(owners[0].kind, "ClusterRole");
            assert_eq!(owners[0].name, KIT_NAME);
            assert_eq!(owners[0].uid, "root-uid");
            assert_eq!(owners[0].block_owner_deletion, Some(false));
        }
        for meta in [&k.cluster_role.metadata, &k.service_account.metadata] {
            let labels = meta.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get(LABEL_COMPONENT).map(String::as_str),
                Some("uninstall")
            );
            // The cleanup deletes rendered objects by `component=scheduler`: never the kit.
            assert!(!crate::operator::uninstall::RENDERED.contains("component=uninstall"));
            assert!(
                crate::operator::uninstall::RENDERED
                    .contains(&format!("{LABEL_COMPONENT}=scheduler"))
            );
        }
    }
}
