//! Reads a [`ClusterState`] from a live cluster: `list` calls only (paged), nothing written. The
//! kinds the profile's plugins read must be readable; the other snapshot kinds are read when the
//! identity may (they make `--save-snapshot` complete) and skipped with a warning when not.

use std::collections::BTreeSet;
use std::path::Path;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::snapshot::ClusterState;
use crate::framework::listers::{Informer, Listers, trim_metadata};
use crate::infra::informer::{self, Watchable};

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LiveError {
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
pub(crate) async fn client(path: &Path) -> Result<Client, LiveError> {
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
async fn list_all<K: Watchable>(client: &Client) -> Result<Vec<K>, LiveError> {
    let mut objs = informer::list_all::<K>(client, None)
        .await
        .map_err(|source| LiveError::List {
            kind: K::kind(&()).to_string(),
            resource: K::plural(&()).to_string(),
            source,
        })?;
    objs.iter_mut().for_each(trim_metadata);
    Ok(objs)
}

/// Lists `kind` into its store; `required` kinds fail the read, others are skipped (a warning)
/// when forbidden or not served (the PodGroup CRD may not be installed).
async fn fill(
    client: &Client,
    kind: Informer,
    listers: &Listers,
    required: bool,
    warnings: &mut Vec<String>,
) -> Result<(), LiveError> {
    let Err(source) = kind.list(client, listers).await else {
        return Ok(());
    };
    let object_kind = kind.object_kind();
    if !is_not_found(&source) && (required || !is_forbidden(&source)) {
        let resource = kind.rbac_rule().resources.unwrap_or_default().join(",");
        return Err(LiveError::List {
            kind: object_kind,
            resource,
            source,
        });
    }
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
    warnings.push(format!("{object_kind}: {why}{effect}"));
    Ok(())
}

/// Reads nodes, pods and the other snapshot kinds of `kinds`; `needs` (the kinds the profile's
/// plugins read) are required. Returns the state and warnings about kinds left out.
pub(crate) async fn read(
    client: &Client,
    kinds: &[Informer],
    needs: &BTreeSet<Informer>,
) -> Result<(ClusterState, Vec<String>), LiveError> {
    let state = ClusterState {
        nodes: list_all(client).await?,
        pods: list_all(client).await?,
        ..ClusterState::with_kinds(kinds.to_vec())
    };
    let mut warnings = Vec::new();
    // Each kind the profile reads, and those of a complete snapshot (the kubectl get of the docs);
    // the kinds derived from pods are filled from the pods listed above.
    let wanted: BTreeSet<Informer> = kinds
        .iter()
        .copied()
        .filter(|k| k.in_default_snapshot())
        .chain(
            needs
                .iter()
                .copied()
                .filter(|k| k.snapshot_name().is_some()),
        )
        .collect();
    for kind in wanted {
        let required = needs.contains(&kind);
        fill(client, kind, &state.listers, required, &mut warnings).await?;
    }
    Ok((state, warnings))
}
