//! What a scheduler must have done for its figures to count: the measured pods bound by it, and
//! what the workload names held (anti-affinity kept, spreading within its skew, never-fitting pods
//! pending, victims evicted, volumes provisioned on the pod's node within the attach limit, ...).
//! A violation fails the contender on the workload (`FAILED` in the report). The null binder
//! binds without looking, so only its bindings are checked.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::Tracker;
use super::churn;
use super::workloads::{self, Kind, NODE_LABEL, Role, Workload};

/// The state of a run once its measured pods were bound.
pub struct RunState<'a> {
    pub w: &'a Workload,
    /// The run's namespace (also the `bench-run` label of all its pods).
    pub run: &'a str,
    /// Every pod of the run, in whatever namespace.
    pub pods: Vec<Pod>,
    /// The run's watch: pods seen deleted (the bench deletes none before the checks, except
    /// SchedulingGatedPods' init pods).
    pub tracker: &'a Tracker,
}

fn role(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref()?.get("bench").map(String::as_str)
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn label<'p>(p: &'p Pod, key: &str) -> Option<&'p str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

impl RunState<'_> {
    fn with_role(&self, r: Role) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(move |p| role(p) == Some(r.label()))
    }
}

/// Lists every pod of run `run`.
pub async fn run_pods(admin: &Client, run: &str) -> Result<Vec<Pod>, String> {
    Api::<Pod>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("bench-run={run}")))
        .await
        .map(|l| l.items)
        .map_err(|e| format!("listing the run's pods: {e}"))
}

/// Pods of a run the scheduler under test must report scheduled (its
/// `scheduler_schedule_attempts_total{result="scheduled"}`): the warmup, init and measured pods.
pub fn expected_scheduled(w: &Workload) -> usize {
    1 + w.init_pods + w.measure_pods
}

/// Checks what a scheduler's run left in the cluster; `Err` says what did not hold.
pub async fn check(admin: &Client, s: &RunState<'_>) -> Result<(), String> {
    let w = s.w;
    let nodes = by_name(
        Api::<Node>::all(admin.clone()),
        &format!("{NODE_LABEL}=true"),
    )
    .await?;
    let zone = |node: &str| {
        nodes
            .get(node)
            .and_then(|n| {
                n.metadata
                    .labels
                    .as_ref()?
                    .get("topology.kubernetes.io/zone")
            })
            .cloned()
            .unwrap_or_default()
    };
    match w.kind {
        Kind::SchedulingPodAntiAffinity | Kind::AntiAffinityWithNsSelector => {
            let mut per_node: HashMap<&str, usize> = HashMap::new();
            for p in s.pods.iter().filter(|p| label(p, "color") == Some("green")) {
                if let Some(n) = node_of(p) {
                    *per_node.entry(n).or_default() += 1;
                }
            }
            if let Some((n, c)) = per_node.iter().find(|(_, c)| **c > 1) {
                return Err(format!("{c} pods with required anti-affinity on node {n}"));
            }
        }
        Kind::TopologySpreading => {
            let mut per_zone: BTreeMap<String, usize> = ["moon-1", "moon-2", "moon-3"]
                .iter()
                .map(|z| (z.to_string(), 0))
                .collect();
            for p in s.with_role(Role::Measured) {
                *per_zone
                    .entry(zone(node_of(p).unwrap_or_default()))
                    .or_default() += 1;
            }
            let (min, max) = (
                per_zone.values().min().copied().unwrap_or(0),
                per_zone.values().max().copied().unwrap_or(0),
            );
            if max - min > 5 {
                return Err(format!("zones skewed beyond maxSkew 5: {per_zone:?}"));
            }
        }
        Kind::SchedulingNodeAffinity => {
            if let Some(p) = s.with_role(Role::Measured).find(|p| {
                !["zone1", "zone2"].contains(&zone(node_of(p).unwrap_or_default()).as_str())
            }) {
                return Err(format!("{} bound outside zone1/zone2", name(p)));
            }
        }
        Kind::PreemptionBasic => {
            let victims = s.with_role(Role::Init).count();
            let evicted = evicted(s);
            if evicted < w.measure_pods {
                return Err(format!(
                    "{evicted} low-priority pods evicted for {} preemptors ({victims} left)",
                    w.measure_pods
                ));
            }
        }
        Kind::PreemptionAsync => preempted(s).await?,
        Kind::Unschedulable | Kind::MixedChurn => never_fitting_pending(s)?,
        Kind::GatedPods => {
            let gated = s.with_role(Role::Gated).count();
            if gated != w.gated_pods() {
                return Err(format!("{gated} of {} gated pods left", w.gated_pods()));
            }
            if let Some(p) = s.with_role(Role::Gated).find(|p| node_of(p).is_some()) {
                return Err(format!("gated pod {} was bound", name(p)));
            }
        }
        Kind::Daemonset => {
            if let Some(p) = s
                .with_role(Role::Measured)
                .find(|p| node_of(p) != Some(workloads::NAMED_NODE))
            {
                return Err(format!("{} bound to {:?}", name(p), node_of(p)));
            }
        }
        Kind::CsiPvs => check_volumes(admin, s).await?,
        Kind::ResourceClaimTemplate => check_claims(admin, s).await?,
        Kind::Gangs(size) => whole_gangs(s, size)?,
        Kind::TopologyGangs(size) => {
            whole_gangs(s, size)?;
            gangs_in_one_rack(s)?;
        }
        Kind::SchedulingBasic
        | Kind::PreferredPodAffinity
        | Kind::PreferredPodAntiAffinity
        | Kind::PreferredTopologySpreading => {}
    }
    Ok(())
}

/// Every gang of the run has all `size` pods bound.
fn whole_gangs(s: &RunState<'_>, size: usize) -> Result<(), String> {
    let mut per_gang: HashMap<&str, usize> = HashMap::new();
    for p in s.with_role(Role::Measured).filter(|p| node_of(p).is_some()) {
        *per_gang.entry(gang_of(p)).or_default() += 1;
    }
    match per_gang.iter().find(|(_, n)| **n != size) {
        Some((g, n)) => Err(format!("gang {g} has {n} of {size} pods bound")),
        None => Ok(()),
    }
}

fn gang_of(p: &Pod) -> &str {
    label(p, workloads::POD_GROUP_LABEL).unwrap_or_default()
}

/// The rack of a bench node (`bench-node-<i>` is in `rack-<i / 100>`, see `workloads::node`).
fn rack_of(node: &str) -> Option<usize> {
    let index: usize = node.strip_prefix("bench-node-")?.parse().ok()?;
    Some(index / workloads::NODES_PER_RACK)
}

/// The topology-aware gangs: each gang's pods are in one rack.
fn gangs_in_one_rack(s: &RunState<'_>) -> Result<(), String> {
    let mut rack_of_gang: HashMap<&str, Option<usize>> = HashMap::new();
    for p in s.with_role(Role::Measured) {
        let Some(node) = node_of(p) else { continue };
        let rack = rack_of(node);
        let first = *rack_of_gang.entry(gang_of(p)).or_insert(rack);
        if first != rack {
            return Err(format!(
                "gang {} spans racks {first:?} and {rack:?} ({} on {node})",
                gang_of(p),
                name(p)
            ));
        }
    }
    Ok(())
}

/// How many topology domains (racks) hold the run's measured pods: the placement quality of
/// the topology-aware gangs. Packing fewer racks leaves more whole racks for the next gangs;
/// none for other workloads.
pub fn domains_used(s: &RunState<'_>) -> Option<usize> {
    s.w.kind.topology_key()?;
    let racks: std::collections::HashSet<usize> = s
        .with_role(Role::Measured)
        .filter_map(|p| rack_of(node_of(p)?))
        .collect();
    Some(racks.len())
}

fn is_churn(pod: &str) -> bool {
    pod.strip_prefix(Role::Churn.label())
        .is_some_and(|rest| rest.starts_with('-'))
}

/// Unschedulable, SchedulingWithMixedChurn: no never-fitting (churn) pod was ever bound, and no
/// pod was bound to a churn node (room for no pod). From the watch: MixedChurn deletes its pods
/// and nodes a second after creating them.
fn never_fitting_pending(s: &RunState<'_>) -> Result<(), String> {
    let churn = s.tracker.seen.lock().iter().filter(|n| is_churn(n)).count();
    if churn == 0 {
        return Err("no never-fitting pod was created".into());
    }
    let nodes = s.tracker.nodes.lock();
    if let Some((pod, node)) = nodes.iter().find(|(p, _)| is_churn(p)) {
        return Err(format!("never-fitting pod {pod} was bound to {node}"));
    }
    if let Some((pod, node)) = nodes.iter().find(|(_, n)| churn::is_churn_node(s.run, n)) {
        return Err(format!(
            "{pod} bound to {node}, a node with room for no pod"
        ));
    }
    Ok(())
}

/// Init (low-priority) pods of the run deleted so far: preemption's victims.
fn evicted(s: &RunState<'_>) -> usize {
    let deleted = s.tracker.deleted.lock();
    (0..s.w.init_pods)
        .filter(|i| deleted.contains(&workloads::pod_name(Role::Init, *i)))
        .count()
}

/// PreemptionAsync: a high-priority pod was bound after evicting victims. The measured pods can
/// all be bound before a preemption finishes (the victims' deletion, then the preemptor's next
/// attempt), so this waits for one, up to `PREEMPTION`.
async fn preempted(s: &RunState<'_>) -> Result<(), String> {
    const PREEMPTION: Duration = Duration::from_secs(30);
    let deadline = Instant::now() + PREEMPTION;
    loop {
        let preemptors = s
            .tracker
            .nodes
            .lock()
            .keys()
            .filter(|p| is_churn(p))
            .count();
        let evicted = evicted(s);
        if preemptors > 0 && evicted > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{preemptors} high-priority pods bound, {evicted} low-priority pods evicted {}s after the measured pods",
                PREEMPTION.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The objects of `api` matching `labels`, by name.
async fn by_name<K>(api: Api<K>, labels: &str) -> Result<HashMap<String, K>, String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default().labels(labels))
        .await
        .map_err(|e| format!("listing {}: {e}", K::plural(&())))?
        .items
        .into_iter()
        .filter_map(|o| Some((o.meta().name.clone()?, o)))
        .collect())
}

/// SchedulingCSIPVs: every bound pod's claim was provisioned for the pod's node (the
/// selected-node annotation the scheduler wrote) and bound; no node holds more volumes than its
/// CSI driver can attach.
async fn check_volumes(admin: &Client, s: &RunState<'_>) -> Result<(), String> {
    let claims = by_name(
        Api::<PersistentVolumeClaim>::namespaced(admin.clone(), s.run),
        "",
    )
    .await?;
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for p in s.with_role(Role::Init).chain(s.with_role(Role::Measured)) {
        let Some(node) = node_of(p) else { continue };
        *per_node.entry(node).or_default() += 1;
        let claim = format!("{}-pvc", name(p));
        let c = claims
            .get(&claim)
            .ok_or_else(|| format!("claim {claim} is gone"))?;
        let selected = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("volume.kubernetes.io/selected-node"));
        let volume = c.spec.as_ref().and_then(|s| s.volume_name.as_ref());
        if selected.map(String::as_str) != Some(node) || volume.is_none() {
            return Err(format!(
                "{} on {node}: its claim was provisioned for {selected:?}, volume {volume:?}",
                name(p)
            ));
        }
    }
    if let Some((n, c)) = per_node
        .iter()
        .find(|(_, c)| **c > workloads::CSI_VOLUMES_PER_NODE)
    {
        return Err(format!(
            "{c} volumes on {n}, whose driver attaches {}",
            workloads::CSI_VOLUMES_PER_NODE
        ));
    }
    Ok(())
}

/// SchedulingWithResourceClaimTemplate: every bound pod's claim is allocated and reserved for it.
async fn check_claims(admin: &Client, s: &RunState<'_>) -> Result<(), String> {
    let claims = by_name(Api::<ResourceClaim>::namespaced(admin.clone(), s.run), "").await?;
    for p in s.with_role(Role::Measured) {
        let claim = format!("{}-gpu", name(p));
        let status = claims.get(&claim).and_then(|c| c.status.as_ref());
        let allocated = status.is_some_and(|st| st.allocation.is_some());
        let reserved = status
            .and_then(|st| st.reserved_for.as_ref())
            .is_some_and(|r| r.iter().any(|c| c.name == name(p)));
        if !allocated || !reserved {
            return Err(format!(
                "claim {claim} of bound pod {}: allocated {allocated}, reserved for it {reserved}",
                name(p)
            ));
        }
    }
    Ok(())
}
