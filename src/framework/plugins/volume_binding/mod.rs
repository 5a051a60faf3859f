//! VolumeBinding: PreFilter sorts the pod's claims (unbound immediate claims make the pod
//! unschedulable), Filter asks the [`VolumeBinder`] whether each node can have the pod's volumes
//! (bound PVs' node affinity, static matches, dynamic provisioning), Reserve assumes the chosen
//! bindings, Unreserve reverts them, PreBind updates the PVs and claims and waits up to
//! `bindTimeoutSeconds` for the claims to bind; with StorageCapacityScoring (on from 1.37) it also
//! scores nodes by how full the storage the pod would take there is (`scorer.rs`). Its args
//! (`args.rs`) are also Kosmos's LeafNodeVolumeBinding's, which reuses the binder.

mod args;
pub(crate) mod assume_cache;
pub(crate) mod binder;
mod events;
mod scorer;

pub(crate) use args::{DEFAULT_BIND_TIMEOUT_SECONDS, VolumeBindingArgs, validate_volume_binding};
pub(crate) use events::volume_binding_events;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

pub(crate) use binder::{PodVolumeClaims, PodVolumes, VolumeBinder};

use super::names;
use crate::framework::args::{decode, typed};
use crate::framework::interface::{
    CycleState, FilterPlugin, Plugin, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::listers::{
    CSI_DRIVERS, CSI_NODES, CSI_STORAGE_CAPACITIES, Informer, PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES, STORAGE_CLASSES,
};
use crate::framework::plugins::helper::{impl_plugin, scaled_shape, volume_rules};
use crate::framework::registry::{Handle, PluginRegistration};
use crate::framework::types::{NodeInfo, PodInfo, Snapshot};
pub(crate) use scorer::STORAGE_CAPACITY_SCORING;

const STATE_KEY: &str = "PreFilterVolumeBinding";

/// The message for a pod whose immediate claims are not bound yet.
pub(crate) const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// Per-cycle state (upstream's `stateData`): the pod's claims from PreFilter, what each feasible
/// node would take (Filter runs concurrently, hence the lock), and whether Reserve found all bound.
#[derive(Debug, Default)]
pub(crate) struct VolumeBindingState {
    pub claims: PodVolumeClaims,
    pub pod_volumes_by_node: Mutex<HashMap<String, PodVolumes>>,
    pub has_static_bindings: AtomicBool,
    pub all_bound: AtomicBool,
}

/// The VolumeBinding plugin.
#[derive(Debug)]
pub(crate) struct VolumeBinding {
    binder: Arc<VolumeBinder>,
    /// The args' `shape` in node-score units, when StorageCapacityScoring is on: scoring.
    scorer: Option<Vec<(i64, i64)>>,
}

impl VolumeBinding {
    /// Without scoring (tests build the scorer themselves).
    #[cfg(test)]
    pub(crate) fn new(binder: Arc<VolumeBinder>) -> VolumeBinding {
        VolumeBinding {
            binder,
            scorer: None,
        }
    }

    /// Upstream's `podHasPVCs`: whether the pod uses claims, or why its claims are unusable.
    fn pod_has_pvcs(&self, pod: &PodInfo) -> Result<bool, String> {
        let mut has = false;
        let listers = self.binder.listers();
        for vol in pod
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let Some((name, ephemeral)) = binder::volume_claim_name(&pod.pod, vol) else {
                continue;
            };
            has = true;
            let Some(pvc) = listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), &name)
            else {
                return Err(if ephemeral {
                    format!(
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
                    )
                } else {
                    format!("persistentvolumeclaim {name:?} not found")
                });
            };
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                return Err(format!(
                    "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
                    binder::claim_volume_name(&pvc)
                ));
            }
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            if ephemeral {
                binder::ephemeral_claim_is_for_pod(&pod.pod, &pvc)?;
            }
        }
        Ok(has)
    }
}

fn state(cs: &CycleState) -> Result<&VolumeBindingState, Status> {
    cs.read::<VolumeBindingState>(STATE_KEY)
        .ok_or_else(|| Status::error(format!("reading {STATE_KEY:?} from cycleState: not found")))
}

impl_plugin!(
    VolumeBinding,
    names::VOLUME_BINDING,
    [PreFilter, Filter, Reserve, PreBind, PreScore, Score],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for VolumeBinding {
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        sign_volumes(pod, |name| self.binder.claim(pod.namespace(), name))
    }
}

/// What the volume plugins put in a pod's signature: its volumes but ConfigMaps and Secrets (as
/// upstream's `VolumesSigner`: they never matter to scheduling and differ per pod), and the
/// PersistentVolume each claim is bound to (ksched: a generic ephemeral volume's claim is the
/// pod's own, so equal sources say nothing of it). A claim that is missing or not bound yet makes
/// the pod unsignable: binding it in Reserve changes what the next pod sees on every node.
pub(crate) fn sign_volumes(
    pod: &PodInfo,
    claim: impl Fn(&str) -> Option<Arc<k8s_openapi::api::core::v1::PersistentVolumeClaim>>,
) -> Result<Vec<SignFragment>, Status> {
    let mut sources = Vec::new();
    let mut bindings = Vec::new();
    for vol in pod
        .spec()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if vol.config_map.is_some() || vol.secret.is_some() {
            continue;
        }
        let mut source = vol.clone();
        source.name = String::new();
        sources.push(serde_json::to_string(&source).map_err(|e| Status::error(e.to_string()))?);
        let Some((name, _)) = binder::volume_claim_name(&pod.pod, vol) else {
            continue;
        };
        let bound = claim(&name)
            .filter(|pvc| binder::is_claim_fully_bound(pvc))
            .map(|pvc| binder::claim_volume_name(&pvc).to_string());
        let Some(volume) = bound else {
            return Err(Status::unschedulable(
                "pods with unbound volume claims are not signable",
            ));
        };
        bindings.push((name, volume));
    }
    sources.sort();
    bindings.sort();
    Ok(vec![
        SignFragment::json(signer_names::VOLUMES, &sources)?,
        SignFragment::json(signer_names::CLAIM_BINDINGS, &bindings)?,
    ])
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        cs: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        match self.pod_has_pvcs(pod) {
            Err(msg) => return (None, Status::unresolvable(msg)),
            Ok(false) => {
                cs.write(STATE_KEY, VolumeBindingState::default());
                return (None, Status::skip());
            }
            Ok(true) => {}
        }
        let claims = match self.binder.get_pod_volume_claims(&pod.pod) {
            Ok(c) => c,
            Err(e) => return (None, Status::error(e.to_string())),
        };
        if !claims.unbound_claims_immediate.is_empty() {
            return (None, Status::unresolvable(ERR_UNBOUND_IMMEDIATE));
        }
        cs.write(
            STATE_KEY,
            VolumeBindingState {
                claims: PodVolumeClaims {
                    unbound_claims_immediate: Vec::new(),
                    ..claims
                },
                ..Default::default()
            },
        );
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, cs: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let st = match state(cs) {
            Ok(s) => s,
            Err(s) => return s,
        };
        match self.binder.find_pod_volumes(&pod.pod, &st.claims, n) {
            Err(e) => Status::error(e.to_string()),
            Ok((_, reasons)) if !reasons.is_empty() => Status::with_reasons(
                crate::framework::interface::Code::UnschedulableAndUnresolvable,
                reasons.iter().map(|r| r.as_str().to_string()).collect(),
            ),
            Ok((volumes, _)) => {
                if !volumes.static_bindings.is_empty() {
                    st.has_static_bindings.store(true, Ordering::Relaxed);
                }
                st.pod_volumes_by_node
                    .lock()
                    .insert(node.name().to_string(), volumes);
                Status::success()
            }
        }
    }
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(
        &self,
        cs: &mut CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        _nodes: &[Arc<NodeInfo>],
    ) -> Status {
        // Without StorageCapacityScoring there is no scorer. A pod without claims has nothing to
        // score (upstream scores it 0 on every node: the same ranking).
        if self.scorer.is_none() {
            return Status::skip();
        }
        match state(cs) {
            Ok(st) if st.pod_volumes_by_node.lock().is_empty() => Status::skip(),
            Ok(_) => Status::success(),
            Err(s) => s,
        }
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, cs: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(shape) = &self.scorer else {
            return Ok(0);
        };
        let st = state(cs)?;
        let by_node = st.pod_volumes_by_node.lock();
        Ok(by_node
            .get(node.name())
            .map_or(0, |volumes| scorer::score(shape, volumes)))
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, cs: &mut CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let st = match state(cs) {
            Ok(s) => s,
            Err(s) => return s,
        };
        let mut by_node = st.pod_volumes_by_node.lock();
        // Only the chosen node's entry is read from here on, and the cycle state lives through
        // the binding cycle (PreBind waits for the claims): drop the other nodes' entries.
        by_node.retain(|node, _| node == node_name);
        match by_node.get(node_name) {
            Some(volumes) => match self.binder.assume_pod_volumes(&pod.pod, node_name, volumes) {
                Ok((all_bound, assumed)) => {
                    st.all_bound.store(all_bound, Ordering::Relaxed);
                    by_node.insert(node_name.to_string(), assumed);
                    Status::success()
                }
                Err(e) => Status::error(e.to_string()),
            },
            None => {
                // The pod has no claims.
                st.all_bound.store(true, Ordering::Relaxed);
                Status::success()
            }
        }
    }

    fn unreserve(&self, cs: &mut CycleState, _pod: &PodInfo, node_name: &str) {
        let Ok(st) = state(cs) else { return };
        if let Some(volumes) = st.pod_volumes_by_node.lock().get(node_name) {
            self.binder.revert_assumed_pod_volumes(volumes);
        }
    }
}

#[async_trait]
impl PreBindPlugin for VolumeBinding {
    /// Skip when every claim is bound (nothing to do), Success when there are volumes to bind.
    fn pre_bind_pre_flight(&self, cs: &CycleState, _pod: &PodInfo, node_name: &str) -> Status {
        let st = match state(cs) {
            Ok(s) => s,
            Err(s) => return s,
        };
        if st.all_bound.load(Ordering::Relaxed) {
            return Status::skip();
        }
        if !st.pod_volumes_by_node.lock().contains_key(node_name) {
            return Status::error(format!("no pod volume found for node {node_name:?}"));
        }
        Status::success()
    }

    async fn pre_bind(&self, cs: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let st = match state(cs) {
            Ok(s) => s,
            Err(s) => return s,
        };
        if st.all_bound.load(Ordering::Relaxed) {
            return Status::success();
        }
        let Some(volumes) = st.pod_volumes_by_node.lock().get(node_name).cloned() else {
            return Status::error(format!("no pod volume found for node {node_name:?}"));
        };
        tracing::debug!(pod = %pod.key(), node = node_name, "binding volumes");
        match self
            .binder
            .bind_pod_volumes(&pod.pod, node_name, &volumes)
            .await
        {
            Ok(()) => Status::success(),
            Err(e) => {
                tracing::debug!(pod = %pod.key(), error = %e, "binding volumes failed");
                Status::error(e.to_string())
            }
        }
    }
}

/// The informers VolumeBinding (and wrappers around its binder) read.
pub(crate) const INFORMERS: &[Informer] = &[
    &PERSISTENT_VOLUMES,
    &PERSISTENT_VOLUME_CLAIMS,
    &STORAGE_CLASSES,
    &CSI_NODES,
    &CSI_DRIVERS,
    &CSI_STORAGE_CAPACITIES,
];

impl VolumeBinding {
    /// The plugin for (defaulted, validated) args over the handle's listers and API; wrappers such
    /// as LeafNodeVolumeBinding build their host binding this way.
    pub(crate) fn from_args(args: &VolumeBindingArgs, handle: &Handle) -> VolumeBinding {
        let secs = args
            .bind_timeout_seconds
            .unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS)
            .max(0);
        let timeout = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
        let scoring = handle.emulation.enabled(STORAGE_CAPACITY_SCORING);
        VolumeBinding {
            binder: Arc::new(VolumeBinder::new(handle, timeout)),
            scorer: scoring.then(|| scaled_shape(args.shape.as_deref().unwrap_or_default())),
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        VolumeBinding::EXTENSION_POINTS,
        decode::<VolumeBindingArgs>,
        |args, handle| {
            let args: VolumeBindingArgs = typed(args)?;
            Ok(Arc::new(VolumeBinding::from_args(&args, handle)) as Arc<dyn Plugin>)
        },
    )
    .with_emulated_args::<VolumeBindingArgs>()
    .with_informers(INFORMERS)
    .with_rbac_rules(volume_rules(true))
}

#[cfg(test)]
mod tests;
