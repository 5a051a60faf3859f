//! The uninstall scenario shared by the Helm and kustomize e2e tests: what an installed operator
//! has made (a Deployment-mode and an Embedded profile, a LeafClusterPolicy that tainted two kwok
//! leaf nodes, one of which carried the identical taint before), and what must be left of it after
//! an uninstall: nothing, but that one pre-existing taint (and, when Helm kept them, the CRDs with
//! the profiles and policies, free of finalizers).

use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use ksched::api::{LeafClusterPolicy, SchedulerProfile};

use super::ControlPlane;
use super::nodes::Nodes;
use super::operator::wait_profile_condition;
use super::operator_pods::{Exited, OperatorPods};
use super::wait::{poll, tail};

/// The taint of the policy (its default: Kosmos's).
pub const LEAF_TAINT: &str = "kosmos.io/node=true:NoSchedule";
const LEAF_KEY: &str = "kosmos.io/node";
const RECORDS: &str = "ksched.io/leaf-taints";

/// What an uninstall keeps by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// `helm uninstall`: Helm keeps CRDs (and so the profiles and policies, which must have lost
    /// their finalizers) and the namespace `--create-namespace` made.
    CrdsAndNamespace,
    /// Nothing: no ksched CRD, no namespace.
    Nothing,
}

/// The nodes and objects of one run of the scenario.
pub struct Scenario {
    pub nodes: Nodes,
    /// A leaf node the policy tainted.
    pub tainted: String,
    /// A leaf node that carried the policy's taint before (Kosmos's own): it keeps it.
    pub pretainted: String,
    /// The Deployment-mode profile, the Embedded one, the policy.
    pub deployment_profile: String,
    pub embedded_profile: String,
    pub policy: String,
}

impl Scenario {
    /// A host node (for the operator's and the schedulers' pods) and two leaf nodes, one of them
    /// already tainted; nothing of ksched yet.
    pub fn nodes(cp: &'static ControlPlane, test: &str) -> Scenario {
        let nodes = Nodes::new(cp, test);
        nodes.add("host", "16", &[]);
        let leaf = [("kosmos.io/node", "true")];
        let tainted = nodes.add("leaf-0", "8", &leaf);
        let pretainted = nodes.add("leaf-1", "8", &leaf);
        nodes.taint(&pretainted, LEAF_TAINT);
        Scenario {
            nodes,
            tainted,
            pretainted,
            deployment_profile: format!("{test}-deployment"),
            embedded_profile: format!("{test}-embedded"),
            policy: format!("{test}-leaves"),
        }
    }

    /// Applies the profiles and the policy and waits until the operator made them real: the
    /// policy's taint on both leaf nodes (one pre-existing), the Embedded profile's scheduler
    /// running in the leader, the Deployment-mode profile's Deployment ready.
    pub async fn apply(
        &self,
        cp: &ControlPlane,
        client: &Client,
        diagnostics: impl Fn() -> String,
    ) {
        let test = self.nodes.test();
        cp.apply(&format!(
            "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: {}\nspec:\n  replicas: 1\n---\napiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: {}\nspec:\n  mode: Embedded\n---\napiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: {}\nspec:\n  leafNodeSelector:\n    matchLabels:\n      kosmos.io/node: \"true\"\n      ksched.io/e2e: {test}\n  profiles: [\"*\"]\n",
            self.deployment_profile, self.embedded_profile, self.policy
        ));
        let policies: Api<LeafClusterPolicy> = Api::all(client.clone());
        poll(
            "the policy tainted its leaf nodes",
            Duration::from_secs(120),
            &diagnostics,
            async || {
                let p = policies.get_opt(&self.policy).await.ok()??;
                let s = p.status.as_ref()?;
                let applied = s
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "TaintsApplied");
                (applied && s.tainted_nodes == Some(2) && s.preexisting_taints == Some(1))
                    .then_some(())
            },
        )
        .await;
        wait_profile_condition(
            client,
            &self.embedded_profile,
            "Running",
            &diagnostics,
            |c| c.type_ == "Ready" && c.reason == "Running",
        )
        .await;
        // kwok runs no scheduler container: rolled out, waiting for a leader.
        wait_profile_condition(
            client,
            &self.deployment_profile,
            "NoLeader",
            &diagnostics,
            |c| c.type_ == "Ready" && c.reason == "NoLeader",
        )
        .await;
        let nodes: Api<Node> = Api::all(client.clone());
        for node in [&self.tainted, &self.pretainted] {
            let n = nodes.get(node).await.expect("leaf node");
            assert!(leaf_tainted(&n), "{node} is not tainted {LEAF_TAINT}");
        }
        let n = nodes.get(&self.tainted).await.expect("leaf node");
        assert!(
            n.annotations().contains_key(RECORDS),
            "{node:?}",
            node = n.metadata
        );
    }

    /// What is left of ksched, as "Kind [namespace/]name" lines (empty: the uninstall is complete):
    /// anything named `ksched*` or labelled `app.kubernetes.io/name=ksched` in `namespace` and
    /// kube-system and cluster-wide, the operator's Lease, taints and records the operator added,
    /// a lost pre-existing taint, and, beyond what is `kept`, profiles and policies still carrying a
    /// finalizer, any ksched CRD, the namespace.
    pub async fn leftovers(&self, client: &Client, namespace: &str, kept: Kept) -> Vec<String> {
        let mut left = Vec::new();
        let ns_exists = Api::<Namespace>::all(client.clone())
            .get_opt(namespace)
            .await
            .expect("get namespace")
            .is_some();
        let mut namespaces = vec!["kube-system"];
        if ns_exists {
            namespaces.push(namespace);
        }
        for ns in namespaces {
            left.extend(labelled::<Deployment>(client, ns).await);
            left.extend(labelled::<ServiceAccount>(client, ns).await);
            left.extend(labelled::<Service>(client, ns).await);
            left.extend(labelled::<ConfigMap>(client, ns).await);
            left.extend(labelled::<Role>(client, ns).await);
            left.extend(labelled::<RoleBinding>(client, ns).await);
            left.extend(labelled::<Lease>(client, ns).await);
        }
        if ns_exists
            && Api::<Lease>::namespaced(client.clone(), namespace)
                .get_opt(ksched::operator::LEASE_NAME)
                .await
                .expect("get Lease")
                .is_some()
        {
            left.push(format!(
                "Lease {namespace}/{}",
                ksched::operator::LEASE_NAME
            ));
        }
        left.extend(named_ksched::<ClusterRole>(client).await);
        left.extend(named_ksched::<ClusterRoleBinding>(client).await);

        let nodes: Api<Node> = Api::all(client.clone());
        for node in [&self.tainted, &self.pretainted] {
            let n = nodes.get(node).await.expect("leaf node");
            if n.annotations().contains_key(RECORDS) {
                left.push(format!("annotation {RECORDS} on node {node}"));
            }
            let keeps = node == &self.pretainted;
            if leaf_tainted(&n) != keeps {
                left.push(match keeps {
                    true => format!("node {node} lost its pre-existing taint {LEAF_TAINT}"),
                    false => format!("taint {LEAF_TAINT} the operator added on node {node}"),
                });
            }
        }

        let crds: Vec<String> = Api::<CustomResourceDefinition>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .expect("list CRDs")
            .items
            .iter()
            .map(|c| c.name_any())
            .filter(|n| n.ends_with(".ksched.io") || n == "podgroups.scheduling.x-k8s.io")
            .collect();
        match kept {
            Kept::CrdsAndNamespace => {
                left.extend(with_finalizers::<SchedulerProfile>(client).await);
                left.extend(with_finalizers::<LeafClusterPolicy>(client).await);
            }
            Kept::Nothing => {
                left.extend(crds.iter().map(|c| format!("CustomResourceDefinition {c}")));
                if ns_exists {
                    left.push(format!("Namespace {namespace}"));
                }
            }
        }
        left
    }

    /// Polls until nothing is left (see [`Self::leftovers`]); panics with what is left after
    /// `within`.
    pub async fn wait_uninstalled(
        &self,
        client: &Client,
        namespace: &str,
        kept: Kept,
        within: Duration,
        diagnostics: impl Fn() -> String,
    ) {
        let last = std::sync::Mutex::new(Vec::new());
        let explain = || {
            format!(
                "left: {:?}\n{}",
                last.lock().map(|l| l.clone()).unwrap_or_default(),
                diagnostics()
            )
        };
        poll("nothing of ksched left", within, explain, async || {
            let left = self.leftovers(client, namespace, kept).await;
            let done = left.is_empty();
            if let Ok(mut l) = last.lock() {
                *l = left;
            }
            done.then_some(())
        })
        .await;
    }
}

/// After an uninstall started at `started`: every operator process (but those the test killed)
/// ends by itself on its pod's SIGTERM, successfully, and nothing is left within a minute of
/// `started` (but what is `kept`). How long until nothing was left.
pub async fn wait_finished(
    scenario: &Scenario,
    pods: &OperatorPods,
    client: &Client,
    namespace: &str,
    kept: Kept,
    started: Instant,
    diagnostics: impl Fn() -> String,
) -> Duration {
    let within = Duration::from_secs(60);
    let exited = pods.wait_all_exited(within).await;
    scenario
        .wait_uninstalled(
            client,
            namespace,
            kept,
            within.saturating_sub(started.elapsed()),
            diagnostics,
        )
        .await;
    let took = started.elapsed();
    let killed_by_the_test = |e: &&Exited| e.killed && !e.terminated;
    for e in exited.iter().filter(|e| !killed_by_the_test(e)) {
        assert!(
            e.terminated && !e.killed && e.status.success(),
            "operator pod {}: terminated {}, killed {}, {}\n{}",
            e.pod,
            e.terminated,
            e.killed,
            e.status,
            tail(&e.log, 30)
        );
    }
    assert!(took < within, "{took:?}");
    took
}

/// The node carries the policy's taint.
pub fn leaf_tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                t.key == LEAF_KEY && t.value.as_deref() == Some("true") && t.effect == "NoSchedule"
            })
        })
}

/// `Kind ns/name` of each `K` in `ns` labelled `app.kubernetes.io/name=ksched`.
pub async fn labelled<K>(client: &Client, ns: &str) -> Vec<String>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let by_label = ListParams::default().labels("app.kubernetes.io/name=ksched");
    Api::<K>::namespaced(client.clone(), ns)
        .list_metadata(&by_label)
        .await
        .unwrap_or_else(|e| panic!("list {}: {e}", K::kind(&())))
        .items
        .iter()
        .map(|o| format!("{} {ns}/{}", K::kind(&()), o.name_any()))
        .collect()
}

/// `Kind name` of each cluster-scoped `K` whose name starts with `ksched`.
pub async fn named_ksched<K>(client: &Client) -> Vec<String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list {}: {e}", K::kind(&())))
        .items
        .iter()
        .map(|o| o.name_any())
        .filter(|n| n.starts_with("ksched"))
        .map(|n| format!("{} {n}", K::kind(&())))
        .collect()
}

/// `Kind name: finalizers` of each `K` that still has finalizers (none if its CRD is gone).
async fn with_finalizers<K>(client: &Client) -> Vec<String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = Api::<K>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
    else {
        return Vec::new();
    };
    list.items
        .iter()
        .filter(|o| !o.finalizers().is_empty())
        .map(|o| format!("{} {}: {:?}", K::kind(&()), o.name_any(), o.finalizers()))
        .collect()
}
