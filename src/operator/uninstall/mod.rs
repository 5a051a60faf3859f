//! Uninstall, on purpose only, in one step, with no standing identity.
//!
//! **What starts it.** The operator's Deployment [`OPERATOR_NAME`] being deleted and staying
//! deleted for [`DEPARTURE_GRACE`] (a `kubectl replace --force` brings it back within that), or
//! the operator namespace being deleted. Never the momentary absence of a binding or a Role: an
//! RBAC clean-up script, `kubectl replace --force` or an Argo CD `Replace=true` sync of the
//! operator's RBAC is not an uninstall.
//!
//! **With what identity.** `helm uninstall` and `kubectl delete -k` delete the operator's
//! ServiceAccount and RBAC at the same moment as its Deployment. So the installation *holds* them:
//! the ServiceAccount, ClusterRole, ClusterRoleBinding and the Roles and RoleBindings of the
//! operator (all named [`OPERATOR_NAME`], see [`Held`]) carry the finalizer [`HOLD_FINALIZER`],
//! which keeps them, and so the operator's identity and permissions, while the operator cleans up
//! ([`teardown()`]). The last of them cannot be released with the identity they make up (releasing
//! the ServiceAccount ends the identity, releasing a binding its permission), so at the very end the
//! operator makes a *release identity* ([`kit`]: a ServiceAccount in kube-system that may only
//! release those objects and delete itself), asks a 10-minute token for it, releases the held
//! objects with it, and deletes its root as its last request. It exists for the seconds of the
//! release; nothing is kept between installs and uninstalls.
//!
//! An object of the operator's identity deleted while the Deployment stays (the RBAC cases above)
//! is released after [`DEPARTURE_GRACE`], so it goes and can be created again.
//!
//! Helm runs a pre-delete hook first (the chart's `uninstall` Job: `ksched uninstall`, with a
//! hook identity that exists only while the hook runs): it stops the operator, does the cleanup
//! and releases the held objects itself, before Helm deletes anything; so it also works when the
//! operator is dead. `kubectl delete -k` with the operator dead leaves the held objects and the
//! LeafClusterPolicies' finalizers: `ksched uninstall` with the user's credentials finishes it.
//!
//! Several replicas: the one that was leading cleans up at once; the others leave it
//! [`FOLLOWER_DEFER`] (seen as the held objects being released) and do it only if it did not.
//!
//! `departure` holds a replica's watch on its installation (when it is going, when an object of
//! its identity is deleted on purpose), `release` the release of the held objects (with the
//! operator's own identity, the release identity or another's), `teardown` the stopping of the
//! operator and the cleanup of what it added and rendered; here are what they share.

mod departure;
mod kit;
mod release;
mod teardown;

use std::time::Duration;

pub(crate) use departure::Departure;
pub use kit::{Kit, RELEASE_NAME, RELEASE_NAMESPACE, kit};
pub use release::{delete_leftover_release, release};
pub use teardown::{Removed, stop_operator, teardown};

use super::OPERATOR_NAME;

/// Label selector of everything the operator renders for profiles (not the release identity).
pub(crate) const RENDERED: &str =
    "app.kubernetes.io/managed-by=ksched-operator,app.kubernetes.io/component=scheduler";

/// The finalizer by which the installation holds the objects of the operator's identity through
/// an uninstall (the chart puts it on them).
pub const HOLD_FINALIZER: &str = "ksched.io/uninstall";

/// How long the operator's Deployment must stay deleted before the operator takes it for an
/// uninstall; and how long an object of its identity must be going while the Deployment stays
/// before it is released as not an uninstall.
pub const DEPARTURE_GRACE: Duration = Duration::from_secs(3);
/// How long a follower leaves the cleanup to the leader.
pub const FOLLOWER_DEFER: Duration = Duration::from_secs(10);
/// How often the state of the installation is looked at (besides its watches).
const TICK: Duration = Duration::from_millis(500);

/// One object of the operator's identity that the installation holds with [`HOLD_FINALIZER`];
/// each is named [`OPERATOR_NAME`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Held {
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    /// In the operator namespace.
    Role,
    RoleBinding,
    /// In kube-system (the profiles' auth-reader bindings; the release identity's ServiceAccount).
    KubeSystemRole,
    KubeSystemRoleBinding,
}

impl Held {
    pub const ALL: [Held; 7] = [
        Held::ServiceAccount,
        Held::ClusterRole,
        Held::ClusterRoleBinding,
        Held::Role,
        Held::RoleBinding,
        Held::KubeSystemRole,
        Held::KubeSystemRoleBinding,
    ];

    /// Its namespace, for an operator in `namespace` (None: cluster-scoped).
    pub fn namespace(self, namespace: &str) -> Option<&str> {
        match self {
            Held::ServiceAccount | Held::Role | Held::RoleBinding => Some(namespace),
            Held::KubeSystemRole | Held::KubeSystemRoleBinding => Some("kube-system"),
            Held::ClusterRole | Held::ClusterRoleBinding => None,
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Held::ServiceAccount => "ServiceAccount",
            Held::ClusterRole => "ClusterRole",
            Held::ClusterRoleBinding => "ClusterRoleBinding",
            Held::Role | Held::KubeSystemRole => "Role",
            Held::RoleBinding | Held::KubeSystemRoleBinding => "RoleBinding",
        }
    }

    /// `Kind [namespace/]name`.
    pub fn describe(self, namespace: &str) -> String {
        match self.namespace(namespace) {
            Some(ns) => format!("{} {ns}/{OPERATOR_NAME}", self.kind()),
            None => format!("{} {OPERATOR_NAME}", self.kind()),
        }
    }
}

/// `true` for 401 and 403: this identity, or its permission, is gone.
fn identity_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_held_object_is_named_after_the_operator() {
        let described: Vec<String> = Held::ALL.iter().map(|h| h.describe("ops")).collect();
        assert_eq!(
            described,
            [
                "ServiceAccount ops/ksched-operator",
                "ClusterRole ksched-operator",
                "ClusterRoleBinding ksched-operator",
                "Role ops/ksched-operator",
                "RoleBinding ops/ksched-operator",
                "Role kube-system/ksched-operator",
                "RoleBinding kube-system/ksched-operator",
            ]
        );
    }
}
