//! Reads a [`ClusterState`] from a live cluster: `list` calls only (paged), nothing written. The
//! kinds the profile's plugins read must be readable; the other snapshot kinds are read when the
//! identity may (they make `--save-snapshot` complete) and skipped with a warning when not.

use std::collections::BTreeSet;
use std::path::Path;

use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::snapshot::ClusterState;
use crate::framework::listers::{Informer, ObjectStore};
use crate::scheduler::trim::trim_metadata;

/// Objects per list call.
const PAGE: u32 = 500;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error(
        "listing {kind} ({resource}): {source}{hint}",
        hint = if is_forbidden(source) { format!(": the identity needs get/list on {resource}") } else { String::new() }
    )]
    List {
        kind: String,
        resource: String,
        source: kube::Error,
    },
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A client for `path` (read-only use: this module only lists).
pub async fn client(path: &Path) -> Result<Client, LiveError> {
    let err = |message: String| LiveError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// Every object of kind `K`, page by page, without managed fields.
async fn list_all<K>(client: &Client) -> Result<Vec<K>, LiveError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(|source| LiveError::List {
            kind: K::kind(&()).to_string(),
            resource: K::plural(&()).to_string(),
            source,
        })?;
        out.extend(page.items.into_iter().map(|mut o| {
            trim_metadata(&mut o);
            o
        }));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// Lists kind `K` into `store`; `required` kinds fail the read, others are skipped (a warning)
/// when forbidden or not served (the PodGroup CRD may not be installed).
async fn fill<K>(
    client: &Client,
    store: &ObjectStore<K>,
    required: bool,
    warnings: &mut Vec<String>,
) -> Result<(), LiveError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match list_all::<K>(client).await {
        Ok(objs) => {
            store.replace(objs);
            Ok(())
        }
        Err(LiveError::List { source, kind, .. })
            if is_not_found(&source) || (!required && is_forbidden(&source)) =>
        {
            let why = if is_not_found(&source) {
                "not served by this cluster"
            } else {
                "not readable by this identity"
            };
            let effect = if required {
                "; the profile's plugins see none"
            } else {
                ""
            };
            warnings.push(format!("{kind}: {why}{effect}"));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Reads nodes, pods and the other snapshot kinds; `needs` (the informers of the profile's plugins)
/// are required. Returns the state and warnings about kinds left out.
pub async fn read(
    client: &Client,
    needs: &BTreeSet<Informer>,
) -> Result<(ClusterState, Vec<String>), LiveError> {
    let mut state = ClusterState {
        nodes: list_all(client).await?,
        pods: list_all(client).await?,
        ..ClusterState::default()
    };
    let mut warnings = Vec::new();
    match list_all(client).await {
        Ok(classes) => state.priority_classes = classes,
        Err(LiveError::List { source, .. }) if is_forbidden(&source) => {
            warnings.push("PriorityClass: not readable by this identity".into());
        }
        Err(e) => return Err(e),
    }
    let l = &state.listers;
    let w = &mut warnings;
    // Each kind the profile reads, and those of a complete snapshot (the kubectl get of the docs).
    let snapshot_kinds = [
        Informer::PersistentVolumes,
        Informer::PersistentVolumeClaims,
        Informer::StorageClasses,
        Informer::CSINodes,
        Informer::PodDisruptionBudgets,
        Informer::PodGroups,
        Informer::ResourceClaims,
        Informer::ResourceSlices,
        Informer::DeviceClasses,
    ];
    let kinds: BTreeSet<Informer> = needs.iter().copied().chain(snapshot_kinds).collect();
    for informer in kinds {
        let req = needs.contains(&informer);
        match informer {
            Informer::PersistentVolumes => fill(client, &l.persistent_volumes, req, w).await?,
            Informer::PersistentVolumeClaims => {
                fill(client, &l.persistent_volume_claims, req, w).await?
            }
            Informer::StorageClasses => fill(client, &l.storage_classes, req, w).await?,
            Informer::CSINodes => fill(client, &l.csi_nodes, req, w).await?,
            Informer::CSIDrivers => fill(client, &l.csi_drivers, req, w).await?,
            Informer::CSIStorageCapacities => {
                fill(client, &l.csi_storage_capacities, req, w).await?
            }
            Informer::PodDisruptionBudgets => {
                fill(client, &l.pod_disruption_budgets, req, w).await?
            }
            Informer::Namespaces => fill(client, &l.namespaces, req, w).await?,
            Informer::PodGroups => fill(client, &l.pod_groups, req, w).await?,
            // The simulation fills it from the pods listed above.
            Informer::PodGroupMembers => {}
            Informer::Services => fill(client, &l.services, req, w).await?,
            Informer::ReplicationControllers => {
                fill(client, &l.replication_controllers, req, w).await?
            }
            Informer::ReplicaSets => fill(client, &l.replica_sets, req, w).await?,
            Informer::StatefulSets => fill(client, &l.stateful_sets, req, w).await?,
            Informer::ResourceClaims => fill(client, &l.resource_claims, req, w).await?,
            Informer::ResourceSlices => fill(client, &l.resource_slices, req, w).await?,
            Informer::DeviceClasses => fill(client, &l.device_classes, req, w).await?,
        }
    }
    Ok((state, warnings))
}
