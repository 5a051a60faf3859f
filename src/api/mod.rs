//! Custom resource types: `SchedulerProfile` and `LeafClusterPolicy` (`ksched.io/v1alpha1`), and a
//! schema-compatible copy of scheduler-plugins' `PodGroup` (`scheduling.x-k8s.io/v1alpha1`).

// The schema derives copy these types into hidden items `unreachable_pub` would narrow.
#[allow(unreachable_pub)]
pub mod leaf_cluster_policy;
#[allow(unreachable_pub)]
pub mod pod_group;
#[allow(unreachable_pub)]
pub mod scheduler_profile;
mod schema;
pub(crate) mod validate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use leaf_cluster_policy::{LeafClusterPolicy, LeafClusterPolicySpec, LeafClusterPolicyStatus};
pub use pod_group::{POD_GROUP_LABEL, PodGroup, PodGroupSpec, PodGroupStatus};
pub use scheduler_profile::{SchedulerProfile, SchedulerProfileSpec, SchedulerProfileStatus};

/// API group of ksched's own resources.
pub const GROUP: &str = "ksched.io";

/// Every CRD ksched installs, in a stable order (the order `ksched crds` prints them).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        SchedulerProfile::crd(),
        LeafClusterPolicy::crd(),
        PodGroup::crd(),
    ]
}

/// Each CRD as (file name, YAML), as `make crds` writes them into `crds/`.
pub fn crd_files() -> Result<Vec<(String, String)>, serde_saphyr::SerializeError> {
    crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("crd"));
            Ok((file, serde_saphyr::to_string(&crd)?))
        })
        .collect()
}

/// The CRDs as one multi-document YAML stream, as `ksched crds` prints it.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for (_, yaml) in crd_files()? {
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}
