//! The volume binder (upstream's `volumeBinder` in binder.go), usable by any plugin that binds
//! volumes: VolumeBinding calls it, and so can a wrapper such as LeafNodeVolumeBinding, node by node.
//!
//! - [`VolumeBinder::get_pod_volume_claims`] sorts a pod's claims into bound, unbound immediate and
//!   unbound delayed (WaitForFirstConsumer), with the PVs of the delayed claims' classes;
//! - [`VolumeBinder::find_pod_volumes`] checks one node: bound PVs' node affinity, static matches for
//!   delayed claims, dynamic provisioning (provisioner, allowed topologies, CSI storage capacity);
//! - [`VolumeBinder::assume_pod_volumes`] / [`VolumeBinder::revert_assumed_pod_volumes`] keep the
//!   choice in the assume cache between Reserve and PreBind;
//! - [`VolumeBinder::bind_pod_volumes`] updates PVs (claimRef) and claims (selected-node annotation)
//!   through the [`ApiClient`] and waits until the claims are bound.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framework::types::PodView;
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeSpec, Pod, Volume,
};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::core::{Selector, SelectorExt};

use super::assume_cache::{AssumeCache, resource_version};
use crate::framework::api_calls::{ApiClient, ApiError, Replace};
use crate::framework::listers::{
    CSI_DRIVERS, CSI_STORAGE_CAPACITIES, Listers, ObjectStore, PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES, STORAGE_CLASSES,
};
use crate::framework::plugins::helper::node_selector_terms_match;
use crate::framework::registry::{Handle, SharedSnapshot};
use crate::quantity;

/// The claim annotation naming the node the scheduler chose for provisioning.
pub(crate) const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set on a claim by the PV controller once binding completed.
pub(crate) const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on PVs (and claims) bound by a controller rather than pre-bound by the user.
pub(crate) const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The deprecated class annotation, still read first.
pub(crate) const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner name that means "no dynamic provisioning".
pub(crate) const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Why a node does not fit the pod's volumes (upstream's `ConflictReason`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConflictReason {
    /// A bound PV's node affinity excludes the node.
    NodeConflict,
    /// No PV matches a delayed claim, and it cannot be provisioned there.
    BindConflict,
    /// Storage capacity does not allow provisioning there.
    NotEnoughSpace,
    /// A claim is bound to a PV that does not exist.
    PvNotExist,
}

impl ConflictReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConflictReason::NodeConflict => "node(s) didn't match PersistentVolume's node affinity",
            ConflictReason::BindConflict => {
                "node(s) didn't find available persistent volumes to bind"
            }
            ConflictReason::NotEnoughSpace => "node(s) did not have enough free storage",
            ConflictReason::PvNotExist => {
                "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
            }
        }
    }
}

impl fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A binder error (upstream returns these as Error statuses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BinderError(pub String);

impl From<ApiError> for BinderError {
    fn from(e: ApiError) -> Self {
        BinderError(e.to_string())
    }
}

/// A PV chosen for a claim.
#[derive(Debug, Clone)]
pub(crate) struct BindingInfo {
    pub pv: Arc<PersistentVolume>,
    pub pvc: Arc<PersistentVolumeClaim>,
}

/// A claim to provision, with the capacity object that allowed it (if capacity was checked).
#[derive(Debug, Clone)]
pub(crate) struct DynamicProvision {
    pub pvc: Arc<PersistentVolumeClaim>,
    /// Upstream's `NodeCapacity`; nothing reads it yet (shown in `Debug`).
    #[allow(dead_code)]
    pub node_capacity: Option<Arc<CSIStorageCapacity>>,
}

/// What binding the pod's volumes on one node takes.
#[derive(Debug, Clone, Default)]
pub(crate) struct PodVolumes {
    pub static_bindings: Vec<BindingInfo>,
    pub dynamic_provisions: Vec<DynamicProvision>,
}

/// A pod's claims by binding state (upstream's `PodVolumeClaims`).
#[derive(Debug, Clone, Default)]
pub(crate) struct PodVolumeClaims {
    pub bound_claims: Vec<Arc<PersistentVolumeClaim>>,
    pub unbound_claims_immediate: Vec<Arc<PersistentVolumeClaim>>,
    pub unbound_claims_delay_binding: Vec<Arc<PersistentVolumeClaim>>,
    /// Storage class name -> the PVs of that class (assumptions applied) a claim of the pod may
    /// take: unbound ones and those bound to one of its claims.
    pub unbound_volumes_delay_binding: HashMap<String, Vec<Arc<PersistentVolume>>>,
}

/// `namespace/name` of an object.
pub(crate) fn object_key<K: kube::Resource>(obj: &K) -> String {
    ObjectStore::<K>::key_of(obj)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The claim's class: the beta annotation first, then `storageClassName`.
pub(crate) fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    annotation(&pvc.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| pvc.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or("")
}

/// The PV's class: the beta annotation first, then `storageClassName`.
pub(crate) fn volume_class(pv: &PersistentVolume) -> &str {
    annotation(&pv.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| pv.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or("")
}

pub(crate) fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Bound, and the PV controller finished binding.
pub(crate) fn is_claim_fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(pvc).is_empty() && annotation(&pvc.metadata, ANN_BIND_COMPLETED).is_some()
}

pub(crate) fn claim_request(pvc: &PersistentVolumeClaim) -> Option<quantity::Parsed> {
    let q = pvc
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?;
    Some(quantity::parse_quantity(q).unwrap_or_default())
}

pub(crate) fn volume_capacity(pv: &PersistentVolume) -> quantity::Parsed {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| quantity::parse_quantity(q).ok())
        .unwrap_or_default()
}

/// Whether the PV's required node affinity admits a node with these labels (upstream's
/// `CheckNodeAffinity`).
pub(crate) fn pv_node_affinity_matches(
    pv: &PersistentVolume,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    match pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        None => true,
        Some(sel) => node_selector_terms_match(&sel.node_selector_terms, labels, ""),
    }
}

/// The claim a pod volume uses: `(claim name, is ephemeral)`; `None` for other volume kinds.
pub(crate) fn volume_claim_name(pod: &impl PodView, vol: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &vol.persistent_volume_claim {
        return Some((c.claim_name.clone(), false));
    }
    vol.ephemeral
        .as_ref()
        .map(|_| (format!("{}-{}", pod.name(), vol.name), true))
}

/// Whether one of `pod`'s volumes uses the claim `pvc` (directly or as its generic ephemeral
/// volume's claim).
pub(crate) fn pod_uses_claim(pod: &impl PodView, pvc: &PersistentVolumeClaim) -> bool {
    pvc.metadata.namespace.as_deref() == Some(pod.namespace())
        && pod.volumes().iter().any(|v| {
            volume_claim_name(pod, v)
                .is_some_and(|(name, _)| pvc.metadata.name.as_deref() == Some(&name))
        })
}

/// Upstream's `ephemeral.VolumeIsForPod`: the claim of a generic ephemeral volume must be controlled
/// by the pod.
pub(crate) fn ephemeral_claim_is_for_pod(
    pod: &impl PodView,
    pvc: &PersistentVolumeClaim,
) -> Result<(), String> {
    let pod_uid = pod.uid();
    let owned = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == pod_uid);
    if owned {
        Ok(())
    } else {
        Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default(),
            pod.namespace(),
            pod.name(),
        ))
    }
}

fn is_volume_bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name != pvc.metadata.name || r.namespace != pvc.metadata.namespace {
        return false;
    }
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => pvc.metadata.uid.as_deref() == Some(uid),
        _ => true,
    }
}

/// Upstream's `GetBindVolumeToClaim`: the PV bound to the claim, and whether anything changed.
pub(crate) fn bind_volume_to_claim(
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
) -> (PersistentVolume, bool) {
    let should_set_bound_by_controller = !is_volume_bound_to_claim(pv, pvc);
    let mut clone = pv.clone();
    let mut dirty = false;
    let spec = clone.spec.get_or_insert_with(Default::default);
    let same = spec.claim_ref.as_ref().is_some_and(|r| {
        r.name == pvc.metadata.name
            && r.namespace == pvc.metadata.namespace
            && r.uid == pvc.metadata.uid
    });
    if !same {
        spec.claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: pvc.metadata.namespace.clone(),
            name: pvc.metadata.name.clone(),
            uid: pvc.metadata.uid.clone(),
            resource_version: pvc.metadata.resource_version.clone(),
            ..Default::default()
        });
        dirty = true;
    }
    if should_set_bound_by_controller
        && annotation(&clone.metadata, ANN_BOUND_BY_CONTROLLER).is_none()
    {
        clone
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    (clone, dirty)
}

fn volume_mode(m: Option<&String>) -> &str {
    m.map_or("Filesystem", String::as_str)
}

/// Upstream's `FindMatchingVolume` on the scheduler path (node given, delayed binding).
pub(crate) fn find_matching_volume(
    pvc: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: &Node,
    excluded: &HashSet<String>,
) -> Result<Option<Arc<PersistentVolume>>, BinderError> {
    // Called for every node a pod with an unbound claim meets, over every PV of the class:
    // nothing here may copy a spec or parse a quantity before the cheap checks rejected the PV.
    let no_claim_spec = PersistentVolumeClaimSpec::default();
    let claim_spec = pvc.spec.as_ref().unwrap_or(&no_claim_spec);
    // VolumeAttributesClass is GA (on) in 1.36: claim and PV classes must be equal (below).
    let requested = claim_request(pvc).unwrap_or_default();
    let requested_class = claim_class(pvc);
    let selector = match &claim_spec.selector {
        Some(s) => Some(Selector::try_from(s.clone()).map_err(|e| {
            BinderError(format!(
                "error creating internal label selector for claim: {}: {e}",
                object_key(pvc)
            ))
        })?),
        None => None,
    };
    let node_labels = node.metadata.labels.as_ref();
    let no_spec = PersistentVolumeSpec::default();
    let mut smallest: Option<(Arc<PersistentVolume>, quantity::Parsed)> = None;
    for pv in volumes {
        let spec = pv.spec.as_ref().unwrap_or(&no_spec);
        if spec.claim_ref.is_some() && !is_volume_bound_to_claim(pv, pvc) {
            continue;
        }
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        if excluded.contains(name) {
            continue;
        }
        let capacity = volume_capacity(pv);
        if capacity < requested {
            continue;
        }
        if volume_mode(claim_spec.volume_mode.as_ref()) != volume_mode(spec.volume_mode.as_ref()) {
            continue;
        }
        if claim_spec
            .volume_attributes_class_name
            .as_deref()
            .unwrap_or("")
            != spec.volume_attributes_class_name.as_deref().unwrap_or("")
        {
            continue;
        }
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = pv_node_affinity_matches(pv, node_labels);
        if is_volume_bound_to_claim(pv, pvc) {
            // A PV pre-bound to this claim: it or nothing.
            return Ok(affinity_ok.then(|| pv.clone()));
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Available") {
            continue;
        }
        if let Some(sel) = &selector
            && !sel.matches(pv.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
        {
            continue;
        }
        if volume_class(pv) != requested_class || !affinity_ok {
            continue;
        }
        let pv_modes = spec.access_modes.as_deref().unwrap_or_default();
        if !claim_spec
            .access_modes
            .iter()
            .flatten()
            .all(|m| pv_modes.contains(m))
        {
            continue;
        }
        if smallest.as_ref().is_none_or(|(_, q)| *q > capacity) {
            smallest = Some((pv.clone(), capacity));
        }
    }
    Ok(smallest.map(|(pv, _)| pv))
}

/// Upstream's `MatchTopologySelectorTerms` for a class's `allowedTopologies`.
fn allowed_topologies_match(
    class: &StorageClass,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or(&[]);
    if terms.is_empty() {
        return true;
    }
    terms.iter().any(|t| {
        let exprs = t.match_label_expressions.as_deref().unwrap_or(&[]);
        !exprs.is_empty()
            && exprs.iter().all(|e| {
                labels
                    .and_then(|l| l.get(&e.key))
                    .is_some_and(|v| e.values.contains(v))
            })
    })
}

/// Upstream's `IsDelayBindingMode`.
pub(crate) fn is_delay_binding_mode(
    pvc: &PersistentVolumeClaim,
    listers: &Listers,
) -> Result<bool, BinderError> {
    let class_name = claim_class(pvc);
    if class_name.is_empty() {
        return Ok(false);
    }
    let Some(class) = listers.store(&STORAGE_CLASSES).get("", class_name) else {
        return Ok(false);
    };
    match class.volume_binding_mode.as_deref() {
        None => Err(BinderError(format!(
            "VolumeBindingMode not set for StorageClass {class_name:?}"
        ))),
        Some(m) => Ok(m == "WaitForFirstConsumer"),
    }
}

/// The volume binder: listers, the PV and PVC assume caches, the API, the bind timeout.
pub(crate) struct VolumeBinder {
    listers: Arc<Listers>,
    api: Arc<dyn ApiClient>,
    snapshot: Arc<SharedSnapshot>,
    pv_cache: AssumeCache<PersistentVolume>,
    pvc_cache: AssumeCache<PersistentVolumeClaim>,
    bind_timeout: Duration,
    poll_interval: Duration,
}

impl fmt::Debug for VolumeBinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VolumeBinder")
            .field("bind_timeout", &self.bind_timeout)
            .finish_non_exhaustive()
    }
}

impl VolumeBinder {
    /// A binder over the handle's listers, API and snapshot.
    pub(crate) fn new(handle: &Handle, bind_timeout: Duration) -> VolumeBinder {
        VolumeBinder {
            listers: handle.listers.clone(),
            api: handle.api.clone(),
            snapshot: handle.snapshot.clone(),
            pv_cache: AssumeCache::new("persistentvolume"),
            pvc_cache: AssumeCache::new("persistentvolumeclaim"),
            bind_timeout,
            poll_interval: Duration::from_secs(1),
        }
    }

    /// How often PreBind looks at the claims while waiting (1s, as upstream; tests shorten it).
    #[cfg(test)]
    pub(crate) fn with_poll_interval(mut self, interval: Duration) -> VolumeBinder {
        self.poll_interval = interval;
        self
    }

    pub(crate) fn listers(&self) -> &Arc<Listers> {
        &self.listers
    }

    /// A claim as the scheduler sees it: the assumed version while its binding is in flight.
    pub(crate) fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.get_pvc(namespace, name)
    }

    fn get_pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvc_cache.get(
            self.listers.store(&PERSISTENT_VOLUME_CLAIMS),
            namespace,
            name,
        )
    }

    fn get_pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.pv_cache
            .get(self.listers.store(&PERSISTENT_VOLUMES), "", name)
    }

    /// Whether the volume is bound, and its claim (`None` for volumes without a claim).
    fn is_volume_bound(
        &self,
        pod: &Pod,
        vol: &Volume,
    ) -> Result<(bool, Option<Arc<PersistentVolumeClaim>>), BinderError> {
        let Some((name, ephemeral)) = volume_claim_name(pod, vol) else {
            return Ok((true, None));
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pvc = self.get_pvc(ns, &name).ok_or_else(|| {
            BinderError(format!(
                "error getting PVC \"{ns}/{name}\": persistentvolumeclaim {name:?} not found"
            ))
        })?;
        if ephemeral {
            ephemeral_claim_is_for_pod(pod, &pvc).map_err(BinderError)?;
        }
        Ok((is_claim_fully_bound(&pvc), Some(pvc)))
    }

    /// Whether every claim of the pod is fully bound.
    pub(crate) fn are_pod_volumes_bound(&self, pod: &Pod) -> bool {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .all(|v| matches!(self.is_volume_bound(pod, v), Ok((true, _))))
    }

    /// Upstream's `GetPodVolumeClaims`.
    pub(crate) fn get_pod_volume_claims(&self, pod: &Pod) -> Result<PodVolumeClaims, BinderError> {
        let mut claims = PodVolumeClaims::default();
        for vol in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let (bound, pvc) = self.is_volume_bound(pod, vol)?;
            let Some(pvc) = pvc else { continue };
            if bound {
                claims.bound_claims.push(pvc);
            } else if is_delay_binding_mode(&pvc, &self.listers)?
                && claim_volume_name(&pvc).is_empty()
            {
                claims.unbound_claims_delay_binding.push(pvc);
            } else {
                // Pre-bound claims count as immediate: the PV controller binds them.
                claims.unbound_claims_immediate.push(pvc);
            }
        }
        for pvc in &claims.unbound_claims_delay_binding {
            let class = claim_class(pvc).to_string();
            if claims.unbound_volumes_delay_binding.contains_key(&class) {
                continue;
            }
            // A PV bound to a claim other than the pod's can match none of them on any node:
            // leaving it out here spares Filter a scan of every bound PV on every node.
            let pod_claims = &claims.unbound_claims_delay_binding;
            let pvs = self
                .pv_cache
                .list(self.listers.store(&PERSISTENT_VOLUMES))
                .into_iter()
                .filter(|pv| volume_class(pv) == class)
                .filter(|pv| {
                    let bound = pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_some());
                    !bound || pod_claims.iter().any(|c| is_volume_bound_to_claim(pv, c))
                })
                .collect();
            claims.unbound_volumes_delay_binding.insert(class, pvs);
        }
        Ok(claims)
    }

    /// Upstream's `FindPodVolumes`: what binding the pod's volumes on `node` takes, or why it
    /// cannot.
    pub(crate) fn find_pod_volumes(
        &self,
        pod: &Pod,
        claims: &PodVolumeClaims,
        node: &Node,
    ) -> Result<(PodVolumes, Vec<ConflictReason>), BinderError> {
        let mut pod_volumes = PodVolumes::default();
        let mut reasons = Vec::new();
        let labels = node.metadata.labels.as_ref();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        tracing::trace!(
            pod = pod.metadata.name.as_deref(),
            node = node_name,
            "FindPodVolumes"
        );

        let mut bound_satisfied = true;
        let mut bound_pvs_found = true;
        for pvc in &claims.bound_claims {
            match self.get_pv(claim_volume_name(pvc)) {
                None => {
                    bound_pvs_found = false;
                    break;
                }
                Some(pv) => {
                    if !pv_node_affinity_matches(&pv, labels) {
                        bound_satisfied = false;
                        break;
                    }
                }
            }
        }

        let mut unbound_satisfied = true;
        let mut sufficient_storage = true;
        if !claims.unbound_claims_delay_binding.is_empty() {
            let mut to_match = Vec::new();
            let mut to_provision = Vec::new();
            let mut fast_fail = false;
            for pvc in &claims.unbound_claims_delay_binding {
                match annotation(&pvc.metadata, ANN_SELECTED_NODE) {
                    Some(selected) if selected != node_name => {
                        fast_fail = true;
                        break;
                    }
                    Some(_) => to_provision.push(pvc.clone()),
                    None => to_match.push(pvc.clone()),
                }
            }
            if fast_fail {
                unbound_satisfied = false;
            } else {
                if !to_match.is_empty() {
                    let (found, bindings, unmatched) =
                        self.find_matching_volumes(to_match, claims, node)?;
                    unbound_satisfied = found;
                    pod_volumes.static_bindings = bindings;
                    to_provision.extend(unmatched);
                }
                if !to_provision.is_empty() {
                    let (satisfied, sufficient, provisions) =
                        self.check_volume_provisions(&to_provision, node)?;
                    unbound_satisfied = satisfied;
                    sufficient_storage = sufficient;
                    pod_volumes.dynamic_provisions = provisions;
                }
            }
        }

        if !bound_satisfied {
            reasons.push(ConflictReason::NodeConflict);
        }
        if !unbound_satisfied {
            reasons.push(ConflictReason::BindConflict);
        }
        if !sufficient_storage {
            reasons.push(ConflictReason::NotEnoughSpace);
        }
        if !bound_pvs_found {
            reasons.push(ConflictReason::PvNotExist);
        }
        Ok((pod_volumes, reasons))
    }

    /// Smallest fitting PV per claim, claims by increasing request; unmatched claims returned for
    /// provisioning.
    #[allow(clippy::type_complexity)]
    fn find_matching_volumes(
        &self,
        mut to_match: Vec<Arc<PersistentVolumeClaim>>,
        claims: &PodVolumeClaims,
        node: &Node,
    ) -> Result<(bool, Vec<BindingInfo>, Vec<Arc<PersistentVolumeClaim>>), BinderError> {
        to_match.sort_by_key(|c| claim_request(c).unwrap_or_default());
        let mut chosen = HashSet::new();
        let mut bindings = Vec::new();
        let mut unmatched = Vec::new();
        let mut found = true;
        let empty = Vec::new();
        for pvc in to_match {
            let pvs = claims
                .unbound_volumes_delay_binding
                .get(claim_class(&pvc))
                .unwrap_or(&empty);
            match find_matching_volume(&pvc, pvs, node, &chosen)? {
                Some(pv) => {
                    chosen.insert(pv.metadata.name.clone().unwrap_or_default());
                    bindings.push(BindingInfo { pv, pvc });
                }
                None => {
                    unmatched.push(pvc);
                    found = false;
                }
            }
        }
        Ok((found, bindings, unmatched))
    }

    /// Upstream's `checkVolumeProvisions`: `(provision satisfied, sufficient storage, provisions)`.
    fn check_volume_provisions(
        &self,
        to_provision: &[Arc<PersistentVolumeClaim>],
        node: &Node,
    ) -> Result<(bool, bool, Vec<DynamicProvision>), BinderError> {
        let mut provisions = Vec::new();
        for pvc in to_provision {
            let class_name = claim_class(pvc);
            if class_name.is_empty() {
                return Err(BinderError(format!(
                    "no class for claim {:?}",
                    object_key(pvc.as_ref())
                )));
            }
            let class = self
                .listers
                .store(&STORAGE_CLASSES)
                .get("", class_name)
                .ok_or_else(|| {
                    BinderError(format!("failed to find storage class {class_name:?}"))
                })?;
            if class.provisioner.is_empty() || class.provisioner == NOT_SUPPORTED_PROVISIONER {
                return Ok((false, true, Vec::new()));
            }
            if !allowed_topologies_match(&class, node.metadata.labels.as_ref()) {
                return Ok((false, true, Vec::new()));
            }
            match self.has_enough_capacity(pvc, &class, node) {
                None => return Ok((true, false, Vec::new())),
                Some(capacity) => provisions.push(DynamicProvision {
                    pvc: pvc.clone(),
                    node_capacity: capacity,
                }),
            }
        }
        Ok((true, true, provisions))
    }

    /// `None` when capacity tracking applies and no accessible pool is big enough; else the
    /// capacity object used (if any).
    fn has_enough_capacity(
        &self,
        pvc: &PersistentVolumeClaim,
        class: &StorageClass,
        node: &Node,
    ) -> Option<Option<Arc<CSIStorageCapacity>>> {
        let Some(size) = claim_request(pvc) else {
            return Some(None);
        };
        let driver = self.listers.store(&CSI_DRIVERS).get("", &class.provisioner);
        let tracks = driver
            .as_ref()
            .and_then(|d| d.spec.storage_capacity)
            .unwrap_or(false);
        if !tracks {
            return Some(None);
        }
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let found = self
            .listers
            .store(&CSI_STORAGE_CAPACITIES)
            .list()
            .into_iter()
            .find(|c| {
                let limit = c.maximum_volume_size.as_ref().or(c.capacity.as_ref());
                c.storage_class_name == class_name
                    && limit
                        .and_then(|q| quantity::parse_quantity(q).ok())
                        .is_some_and(|l| l.value() >= size.value())
                    && c.node_topology
                        .as_ref()
                        .and_then(|t| Selector::try_from(t.clone()).ok())
                        .is_some_and(|s| s.matches(labels))
            });
        found.map(Some)
    }

    /// Upstream's `AssumePodVolumes`: records the bindings for `node_name` in the assume caches and
    /// returns the updated volumes; `true` when everything was already bound.
    pub(crate) fn assume_pod_volumes(
        &self,
        pod: &Pod,
        node_name: &str,
        pod_volumes: &PodVolumes,
    ) -> Result<(bool, PodVolumes), BinderError> {
        if self.are_pod_volumes_bound(pod) {
            return Ok((true, pod_volumes.clone()));
        }
        let mut assumed = PodVolumes::default();
        for b in &pod_volumes.static_bindings {
            let (new_pv, dirty) = bind_volume_to_claim(&b.pv, &b.pvc);
            if dirty
                && let Err(e) = self
                    .pv_cache
                    .assume(self.listers.store(&PERSISTENT_VOLUMES), new_pv.clone())
            {
                self.revert_assumed_pod_volumes(&assumed);
                return Err(BinderError(e.to_string()));
            }
            assumed.static_bindings.push(BindingInfo {
                pv: Arc::new(new_pv),
                pvc: b.pvc.clone(),
            });
        }
        for p in &pod_volumes.dynamic_provisions {
            let mut claim = (*p.pvc).clone();
            claim
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANN_SELECTED_NODE.into(), node_name.into());
            if let Err(e) = self
                .pvc_cache
                .assume(self.listers.store(&PERSISTENT_VOLUME_CLAIMS), claim.clone())
            {
                self.revert_assumed_pod_volumes(&assumed);
                return Err(BinderError(e.to_string()));
            }
            assumed.dynamic_provisions.push(DynamicProvision {
                pvc: Arc::new(claim),
                node_capacity: None,
            });
        }
        Ok((false, assumed))
    }

    /// Upstream's `RevertAssumedPodVolumes`.
    pub(crate) fn revert_assumed_pod_volumes(&self, pod_volumes: &PodVolumes) {
        for b in &pod_volumes.static_bindings {
            self.pv_cache.restore(&object_key(b.pv.as_ref()));
        }
        for p in &pod_volumes.dynamic_provisions {
            self.pvc_cache.restore(&object_key(p.pvc.as_ref()));
        }
    }

    /// Upstream's `BindPodVolumes`: the API updates, then waiting (polling the listers) until every
    /// claim is bound, up to the bind timeout.
    pub(crate) async fn bind_pod_volumes(
        &self,
        pod: &Pod,
        node_name: &str,
        pod_volumes: &PodVolumes,
    ) -> Result<(), BinderError> {
        tracing::debug!(
            pod = pod.metadata.name.as_deref(),
            node = node_name,
            "BindPodVolumes"
        );
        let (bindings, claims) = self.bind_api_update(pod_volumes).await?;
        let deadline = Instant::now() + self.bind_timeout;
        loop {
            tokio::time::sleep(self.poll_interval).await;
            if self.check_bindings(node_name, &bindings, &claims)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BinderError(
                    "binding volumes: context deadline exceeded".into(),
                ));
            }
        }
    }

    #[allow(clippy::type_complexity)]
    async fn bind_api_update(
        &self,
        pod_volumes: &PodVolumes,
    ) -> Result<(Vec<PersistentVolume>, Vec<PersistentVolumeClaim>), BinderError> {
        let mut pvs = Vec::new();
        let mut claims = Vec::new();
        let revert_rest = |done_pvs: usize, done_claims: usize| {
            for b in &pod_volumes.static_bindings[done_pvs..] {
                self.pv_cache.restore(&object_key(b.pv.as_ref()));
            }
            for p in &pod_volumes.dynamic_provisions[done_claims..] {
                self.pvc_cache.restore(&object_key(p.pvc.as_ref()));
            }
        };
        for b in &pod_volumes.static_bindings {
            match self.api.call(Replace(PersistentVolume::clone(&b.pv))).await {
                Ok(pv) => pvs.push(pv),
                Err(e) => {
                    revert_rest(pvs.len(), 0);
                    return Err(e.into());
                }
            }
        }
        for p in &pod_volumes.dynamic_provisions {
            match self
                .api
                .call(Replace(PersistentVolumeClaim::clone(&p.pvc)))
                .await
            {
                Ok(c) => claims.push(c),
                Err(e) => {
                    revert_rest(pvs.len(), claims.len());
                    return Err(e.into());
                }
            }
        }
        Ok((pvs, claims))
    }

    /// Upstream's `checkBindings` on the informer's (API) objects: `Ok(true)` when all are bound,
    /// `Ok(false)` to keep waiting, `Err` to give up and retry scheduling.
    fn check_bindings(
        &self,
        node_name: &str,
        bindings: &[PersistentVolume],
        claims: &[PersistentVolumeClaim],
    ) -> Result<bool, BinderError> {
        let l = &self.listers;
        let snapshot = self.snapshot.load();
        let node = snapshot
            .get(node_name)
            .and_then(|n| n.node_arc().cloned())
            .ok_or_else(|| {
                BinderError(format!(
                    "failed to get node {node_name:?}: node {node_name:?} not found"
                ))
            })?;
        let node_labels = node.metadata.labels.as_ref();
        for want in bindings {
            let name = want.metadata.name.as_deref().unwrap_or_default();
            let pv = l.store(&PERSISTENT_VOLUMES).get("", name).ok_or_else(|| {
                BinderError(format!(
                    "failed to check binding: persistentvolume {name:?} not found"
                ))
            })?;
            let claim_ref = want.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let (ns, cname) = (
                claim_ref
                    .and_then(|r| r.namespace.as_deref())
                    .unwrap_or_default(),
                claim_ref
                    .and_then(|r| r.name.as_deref())
                    .unwrap_or_default(),
            );
            let pvc = l
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(ns, cname)
                .ok_or_else(|| {
                    BinderError(format!(
                        "failed to check binding: persistentvolumeclaim {cname:?} not found"
                    ))
                })?;
            if resource_version(want) > resource_version(pv.as_ref()) {
                return Ok(false);
            }
            if !pv_node_affinity_matches(&pv, node_labels) {
                return Err(BinderError(format!(
                    "pv {name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
                )));
            }
            let uid = pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.as_deref())
                .unwrap_or("");
            if uid.is_empty() {
                return Err(BinderError(format!("ClaimRef got reset for pv {name:?}")));
            }
            if !is_claim_fully_bound(&pvc) {
                return Ok(false);
            }
        }
        for want in claims {
            let ns = want.metadata.namespace.as_deref().unwrap_or_default();
            let cname = want.metadata.name.as_deref().unwrap_or_default();
            let pvc = l.store(&PERSISTENT_VOLUME_CLAIMS).get(ns, cname).ok_or_else(|| {
                BinderError(format!(
                    "failed to check provisioning pvc: persistentvolumeclaim {cname:?} not found"
                ))
            })?;
            if resource_version(want) > resource_version(pvc.as_ref()) {
                return Ok(false);
            }
            if pvc.metadata.annotations.is_none() {
                return Err(BinderError(format!(
                    "selectedNode annotation reset for PVC {cname:?}"
                )));
            }
            if annotation(&pvc.metadata, ANN_SELECTED_NODE) != Some(node_name) {
                return Err(BinderError(format!(
                    "provisioning failed for PVC {cname:?}"
                )));
            }
            let volume = claim_volume_name(&pvc);
            if !volume.is_empty() {
                let Some(pv) = l.store(&PERSISTENT_VOLUMES).get("", volume) else {
                    // Possibly not propagated yet.
                    return Ok(false);
                };
                if !pv_node_affinity_matches(&pv, node_labels) {
                    return Err(BinderError(format!(
                        "pv {volume:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
                    )));
                }
            }
            if !is_claim_fully_bound(&pvc) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
