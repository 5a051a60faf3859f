//! The release identity, pure: the short-lived identity an uninstalling operator makes at the very
//! end of its cleanup, to release the objects of its own identity (see [`super`]): releasing the
//! last of them with that identity itself would end the identity, or its permission, before the
//! others are released. Its root is the ClusterRole [`RELEASE_NAME`]; everything else is owned by
//! it, and deleting the root is the identity's last request.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::framework::registry::policy_rule;
use crate::operator::OPERATOR_NAME;
use crate::operator::render::{
    APP_NAME, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY,
};

/// Name of the release identity's objects: its root ClusterRole, the ClusterRoleBinding and the
/// ServiceAccount in [`RELEASE_NAMESPACE`].
pub const RELEASE_NAME: &str = "ksched-operator-release";
/// Where the release identity's ServiceAccount lives: a namespace no uninstall deletes (the
/// operator's own may be terminating, and no object can be created there any more).
pub const RELEASE_NAMESPACE: &str = "kube-system";
/// `app.kubernetes.io/component` of the release identity's objects.
const RELEASE_COMPONENT: &str = "uninstall";

/// The objects of the release identity; owner references are set by [`Kit::owned_by`] once the
/// root exists.
#[derive(Debug, Clone, PartialEq)]
pub struct Kit {
    /// The root: deleting it (the identity's last request) removes the rest by garbage collection.
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub service_account: ServiceAccount,
}

fn kit_meta(namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(RELEASE_NAME.into()),
        namespace: namespace.map(String::from),
        labels: Some(
            [
                (LABEL_NAME, APP_NAME),
                (LABEL_COMPONENT, RELEASE_COMPONENT),
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

/// Everything the release needs: read and patch (the finalizer of) the objects of the operator's
/// identity, all named [`OPERATOR_NAME`], and delete its own root. The ServiceAccount, Roles and
/// RoleBindings are namespaced, but a Role cannot grant this in a namespace that is being deleted,
/// so these rules are cluster-wide, by name. The chart's ValidatingAdmissionPolicy lets this
/// identity change nothing on them but that finalizer.
fn rules() -> Vec<PolicyRule> {
    vec![
        named(
            &[""],
            &["serviceaccounts"],
            &["get", "patch"],
            &[OPERATOR_NAME],
        ),
        named(
            &["rbac.authorization.k8s.io"],
            &[
                "clusterroles",
                "clusterrolebindings",
                "roles",
                "rolebindings",
            ],
            &["get", "patch"],
            &[OPERATOR_NAME],
        ),
        named(
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
            &["delete"],
            &[RELEASE_NAME],
        ),
    ]
}

/// The release identity.
pub fn kit() -> Kit {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: RELEASE_NAME.into(),
        namespace: Some(RELEASE_NAMESPACE.into()),
        api_group: None,
    };
    Kit {
        cluster_role: ClusterRole {
            metadata: kit_meta(None),
            rules: Some(rules()),
            ..ClusterRole::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: kit_meta(None),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: RELEASE_NAME.into(),
            },
            subjects: Some(vec![subject]),
        },
        service_account: ServiceAccount {
            metadata: kit_meta(Some(RELEASE_NAMESPACE)),
            ..ServiceAccount::default()
        },
    }
}

impl Kit {
    /// The binding and the ServiceAccount owned by the root (uid `root_uid`). Not blocking the
    /// owner's deletion: nothing waits for these.
    pub fn owned_by(mut self, root_uid: &str) -> Kit {
        let owner = OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: RELEASE_NAME.into(),
            uid: root_uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        };
        for meta in [
            &mut self.cluster_role_binding.metadata,
            &mut self.service_account.metadata,
        ] {
            meta.owner_references = Some(vec![owner.clone()]);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_identity_may_only_release_the_operators_objects_and_delete_itself() {
        let k = kit();
        let rules = k.cluster_role.rules.clone().unwrap_or_default();
        for r in &rules {
            // Named objects only: nothing else in the cluster can be read or changed.
            let names = r.resource_names.clone().unwrap_or_default();
            assert!(!names.is_empty(), "{r:?}");
            for verb in &r.verbs {
                assert!(["get", "patch", "delete"].contains(&verb.as_str()), "{r:?}");
            }
            if r.verbs.iter().any(|v| v == "delete") {
                assert_eq!(names, [RELEASE_NAME], "{r:?}");
                assert_eq!(r.resources, Some(vec!["clusterroles".to_string()]));
            } else {
                assert_eq!(names, [OPERATOR_NAME], "{r:?}");
            }
            assert!(!r.resources.iter().flatten().any(|res| res == "secrets"));
        }
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: RELEASE_NAME.into(),
            namespace: Some("kube-system".into()),
            api_group: None,
        };
        assert_eq!(k.cluster_role_binding.subjects, Some(vec![subject]));
        assert_eq!(k.cluster_role_binding.role_ref.name, RELEASE_NAME);
        assert_eq!(
            k.service_account.metadata.namespace.as_deref(),
            Some("kube-system")
        );
    }

    #[test]
    fn everything_but_the_root_is_owned_by_the_root_and_labelled_apart_from_rendered_objects() {
        let k = kit().owned_by("root-uid");
        assert!(k.cluster_role.metadata.owner_references.is_none());
        for meta in [
            &k.cluster_role_binding.metadata,
            &k.service_account.metadata,
        ] {
            let owners = meta.owner_references.clone().unwrap_or_default();
            assert_eq!(owners.len(), 1, "{meta:?}");
            assert_eq!(owners[0].kind, "ClusterRole");
            assert_eq!(owners[0].name, RELEASE_NAME);
            assert_eq!(owners[0].uid, "root-uid");
            assert_eq!(owners[0].block_owner_deletion, Some(false));
        }
        for meta in [&k.cluster_role.metadata, &k.service_account.metadata] {
            let labels = meta.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get(LABEL_COMPONENT).map(String::as_str),
                Some("uninstall")
            );
            assert_eq!(
                labels.get(LABEL_MANAGED_BY).map(String::as_str),
                Some(MANAGED_BY)
            );
            // The cleanup deletes rendered objects by `component=scheduler`: never this identity.
            assert!(
                crate::operator::uninstall::RENDERED
                    .contains(&format!("{LABEL_COMPONENT}=scheduler"))
            );
        }
    }
}
