//! The Coscheduling plugin itself (see the module docs).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde_json::Value;
use tracing::{debug, warn};

use super::CoschedulingArgs;
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::api::{PodGroup, PodGroupStatus};
use crate::framework::interface::{
    Code, CycleState, NodeToStatus, PermitPlugin, Plugin, PostFilterPlugin, PostFilterResult,
    PreFilterExtensions, PreFilterPlugin, PreFilterResult, QueueSortPlugin, ReservePlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::Handle;
use crate::framework::types::{
    AssignedPod, NodeInfo, PodInfo, PodView, QueuedPodInfo, Resource, Snapshot,
};

/// The longest PreFilter/PostFilter wait for the API when they count a group's pods.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// How often and how long the group's progress is followed after its quorum.
const TRACK_INTERVAL: Duration = Duration::from_secs(1);
const TRACK_ROUNDS: u32 = 120;

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_PRE_SCHEDULING: &str = "PreScheduling";
pub const PHASE_SCHEDULING: &str = "Scheduling";
pub const PHASE_SCHEDULED: &str = "Scheduled";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_FINISHED: &str = "Finished";
pub const PHASE_FAILED: &str = "Failed";

/// The PodGroup name a pod's label names (empty when none).
pub fn pod_group_label(pod: &impl PodView) -> &str {
    pod.labels()
        .and_then(|l| l.get(POD_GROUP_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

/// `namespace/group` of the pod's PodGroup (empty when the pod has none).
pub fn pod_group_full_name(pod: &impl PodView) -> String {
    match pod_group_label(pod) {
        "" => String::new(),
        pg => format!("{}/{pg}", pod.namespace()),
    }
}

fn min_member(pg: &PodGroup) -> usize {
    usize::try_from(pg.spec.min_member.unwrap_or(1)).unwrap_or(0)
}

/// Runs `f` to completion from a synchronous extension point (they run on a blocking-capable
/// worker of the multi-threaded runtime); `None` on a current-thread runtime or on timeout.
/// Without any runtime (`ksched simulate`, whose API answers from memory) it runs here.
fn block_on<F: Future>(f: F) -> Option<F::Output> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Some(futures::executor::block_on(f));
    };
    if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return None;
    }
    tokio::task::block_in_place(|| rt.block_on(tokio::time::timeout(LIST_TIMEOUT, f)).ok())
}

/// Running, succeeded, failed.
fn pod_stats(pods: &[Pod]) -> (i32, i32, i32) {
    let mut c = (0, 0, 0);
    for p in pods {
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => c.0 += 1,
            Some("Succeeded") => c.1 += 1,
            Some("Failed") => c.2 += 1,
            _ => {}
        }
    }
    c
}

fn is_terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub struct Coscheduling {
    handle: Handle,
    /// permitWaitingTimeSeconds.
    schedule_timeout: Duration,
    /// podGroupBackoffSeconds (zero: no backoff).
    backoff: Duration,
    /// Groups that failed recently, until when (upstream's `backedOffPG`).
    backed_off: Mutex<HashMap<String, Instant>>,
    /// Groups whose minResources check passed, until when (upstream's `permittedPG`).
    permitted: Mutex<HashMap<String, Instant>>,
    /// The status last written per group (the lister may lag behind our own writes).
    statuses: Arc<Mutex<HashMap<String, PodGroupStatus>>>,
    /// Groups whose progress a background task follows.
    tracking: Arc<Mutex<HashSet<String>>>,
    writer: StatusWriter,
}

impl Coscheduling {
    pub fn new(args: &CoschedulingArgs, handle: Handle) -> Coscheduling {
        let secs = |v: Option<i64>| Duration::from_secs(u64::try_from(v.unwrap_or(0)).unwrap_or(0));
        if args.denied_pg_expiration_time_seconds.is_some() {
            warn!(
                "Coscheduling: deniedPGExpirationTimeSeconds is deprecated and ignored; use podGroupBackoffSeconds"
            );
        }
        if args.kube_master.is_some() || args.kube_config_path.is_some() {
            warn!(
                "Coscheduling: kubeMaster and kubeConfigPath are deprecated and ignored; the scheduler's own connection is used"
            );
        }
        Coscheduling {
            handle: handle.clone(),
            schedule_timeout: secs(args.permit_waiting_time_seconds.or(Some(60))),
            backoff: secs(args.pod_group_backoff_seconds),
            backed_off: Mutex::new(HashMap::new()),
            permitted: Mutex::new(HashMap::new()),
            statuses: Arc::new(Mutex::new(HashMap::new())),
            tracking: Arc::new(Mutex::new(HashSet::new())),
            writer: StatusWriter::new(handle.api.clone()),
        }
    }

    /// The pod's PodGroup full name and the PodGroup (None when the label names a missing group).
    fn pod_group(&self, pod: &Pod) -> (String, Option<Arc<PodGroup>>) {
        let name = pod_group_label(pod);
        if name.is_empty() {
            return (String::new(), None);
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        (
            format!("{ns}/{name}"),
            self.handle.listers.pod_groups.get(ns, name),
        )
    }

    /// The group's pods that have a node in the snapshot (assumed or bound).
    pub fn calculate_assigned_pods(&self, pg_name: &str, namespace: &str) -> usize {
        let snapshot = self.handle.snapshot.load();
        count_assigned(&snapshot, pg_name, namespace)
    }

    fn list_group_pods(&self, namespace: &str, group: &str) -> Result<Vec<Pod>, String> {
        let api = self.handle.api.clone();
        match block_on(api.list_pods_with_label(namespace, POD_GROUP_LABEL, group)) {
            Some(Ok(pods)) => Ok(pods),
            Some(Err(e)) => Err(format!("podLister list pods failed: {e}")),
            None => Err("podLister list pods failed: timed out".to_string()),
        }
    }

    fn reject_waiting(&self, namespace: &str, group: &str, message: &str) {
        for wp in self.handle.waiting_pods.list() {
            let p = &wp.pod().pod;
            if p.metadata.namespace.as_deref() == Some(namespace) && pod_group_label(p) == group {
                debug!(pod = %wp.pod().key(), %message, "Coscheduling rejects waiting pod");
                wp.reject(names::COSCHEDULING, message);
            }
        }
    }

    fn is_backed_off(&self, full: &str) -> bool {
        let mut b = self.backed_off.lock();
        match b.get(full) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                b.remove(full);
                false
            }
            None => false,
        }
    }

    fn is_permitted(&self, full: &str) -> bool {
        let mut p = self.permitted.lock();
        match p.get(full) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                p.remove(full);
                false
            }
            None => false,
        }
    }

    /// Computes the group's next status with `f` (from the last one written, or the lister's) and
    /// queues it for writing when it changed (without waiting for the API).
    fn update_status(&self, pg: &PodGroup, f: impl FnOnce(&mut PodGroupStatus)) {
        if let Some(next) = next_status(&self.statuses, pg, f) {
            self.writer.send(pg, next);
        }
    }

    /// After the quorum is reached: follows the group's pods for a while (they bind, then start)
    /// and records `Scheduled`, then `Running`, with the counts. One tracker per group.
    fn track(&self, pg: Arc<PodGroup>) {
        let ns = pg.metadata.namespace.clone().unwrap_or_default();
        let group = pg.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{group}");
        if !self.tracking.lock().insert(key.clone()) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.tracking.lock().remove(&key);
            return;
        };
        let api = self.handle.api.clone();
        let statuses = self.statuses.clone();
        let tracking = self.tracking.clone();
        let writer = self.writer.clone();
        rt.spawn(async move {
            for _ in 0..TRACK_ROUNDS {
                tokio::time::sleep(TRACK_INTERVAL).await;
                let Ok(pods) = api.list_pods_with_label(&ns, POD_GROUP_LABEL, &group).await else {
                    continue;
                };
                if refresh_bound_status(&statuses, &pg, &pods, &writer) {
                    break;
                }
            }
            tracking.lock().remove(&key);
        });
    }

    fn creation_time(&self, q: &QueuedPodInfo) -> Option<Timestamp> {
        let pod = &q.pod_info.pod;
        let (_, pg) = self.pod_group(pod);
        pg.and_then(|pg| pg.metadata.creation_timestamp.clone())
            .or_else(|| pod.metadata.creation_timestamp.clone())
            .map(|t| t.0)
    }
}

/// The group's next status; `None` when `f` changed nothing.
fn next_status(
    cache: &Mutex<HashMap<String, PodGroupStatus>>,
    pg: &PodGroup,
    f: impl FnOnce(&mut PodGroupStatus),
) -> Option<PodGroupStatus> {
    let full = format!(
        "{}/{}",
        pg.metadata.namespace.as_deref().unwrap_or_default(),
        pg.metadata.name.as_deref().unwrap_or_default()
    );
    let mut cache = cache.lock();
    let current = cache
        .get(&full)
        .cloned()
        .or_else(|| pg.status.clone())
        .unwrap_or_default();
    let mut next = current.clone();
    f(&mut next);
    if next == current {
        return None;
    }
    cache.insert(full, next.clone());
    Some(next)
}

fn count_assigned(snapshot: &Snapshot, pg_name: &str, namespace: &str) -> usize {
    snapshot
        .nodes()
        .iter()
        .flat_map(|n| n.pods.iter())
        .filter(|p| pod_group_label(*p) == pg_name && p.namespace() == namespace)
        .count()
}

/// Upstream's CheckClusterResource: whether the nodes' free resources (not counting the group's own
/// pods) add up to `request`; the gap otherwise.
fn check_cluster_resource(
    nodes: &[Arc<NodeInfo>],
    request: &BTreeMap<String, i64>,
    full_name: &str,
) -> Result<(), String> {
    let mut left: BTreeMap<String, i64> = request.clone();
    for info in nodes {
        if info.node().is_none() {
            continue;
        }
        let mut requested = info.requested.clone();
        let mut pods = info.pods.len() as i64;
        for p in &info.pods {
            if pod_group_full_name(p) == full_name {
                requested.sub(&p.requests);
                pods -= 1;
            }
        }
        let mut free = Resource::default();
        for name in left.keys() {
            let v = if name == "pods" {
                info.allocatable.allowed_pod_number - pods
            } else {
                info.allocatable.get(name) - requested.get(name)
            };
            free.set_named(name, v);
        }
        left = left
            .into_iter()
            .filter_map(|(name, q)| {
                let rest = q - free.get(&name);
                (rest > 0).then_some((name, rest))
            })
            .collect();
        if left.is_empty() {
            return Ok(());
        }
    }
    let gap: Vec<String> = left
        .iter()
        .map(|(k, v)| {
            if k == "cpu" {
                format!("{k}:{v}m")
            } else {
                format!("{k}:{v}")
            }
        })
        .collect();
    Err(format!("resource gap: map[{}]", gap.join(" ")))
}

impl_plugin!(
    Coscheduling,
    names::COSCHEDULING,
    [QueueSort, PreFilter, PostFilter, Reserve, Permit]
);

impl QueueSortPlugin for Coscheduling {
    /// Priority (higher first), then the PodGroup's creation time (the pod's own when it has no
    /// group), then the group (so members of groups created in the same second stay together), then
    /// the pod's key.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod_info.priority(), b.pod_info.priority());
        if pa != pb {
            return pa > pb;
        }
        let (ta, tb) = (self.creation_time(a), self.creation_time(b));
        let by_time = match (ta, tb) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => Ordering::Equal,
        };
        if by_time != Ordering::Equal {
            return by_time == Ordering::Less;
        }
        let group_key = |q: &QueuedPodInfo| match pod_group_full_name(&q.pod_info.pod) {
            g if g.is_empty() => q.pod_info.key(),
            g => g,
        };
        (group_key(a), a.pod_info.key()) < (group_key(b), b.pod_info.key())
    }
}

impl PreFilterPlugin for Coscheduling {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let (full, pg) = self.pod_group(&pod.pod);
        if full.is_empty() {
            return (None, Status::success());
        }
        let Some(pg) = pg else {
            return (None, Status::unresolvable("PodGroup not found"));
        };
        if self.is_backed_off(&full) {
            return (
                None,
                Status::unresolvable(format!("podGroup {full} failed recently")),
            );
        }
        let group = pod_group_label(&pod.pod);
        let pods = match self.list_group_pods(pod.namespace(), group) {
            Ok(p) => p,
            Err(e) => return (None, Status::error(e)),
        };
        let live = pods.iter().filter(|p| !is_terminal(p)).count();
        let min = min_member(&pg);
        if live < min {
            self.update_status(&pg, |s| {
                s.phase = Some(PHASE_PENDING.into());
            });
            return (
                None,
                Status::unresolvable(format!(
                    "pre-filter pod {} cannot find enough sibling pods, current pods number: {live}, minMember of group: {min}",
                    pod.name()
                )),
            );
        }
        if let Some(min_resources) = &pg.spec.min_resources
            && !self.is_permitted(&full)
        {
            let mut request: BTreeMap<String, i64> = BTreeMap::new();
            let r = Resource::from_list(min_resources);
            for name in min_resources.keys() {
                request.insert(name.clone(), r.get(name));
            }
            request.insert("pods".into(), min as i64);
            if let Err(gap) = check_cluster_resource(snapshot.nodes(), &request, &full) {
                return (None, Status::unresolvable(gap));
            }
            self.permitted
                .lock()
                .insert(full.clone(), Instant::now() + self.schedule_timeout);
        }
        self.update_status(&pg, |s| {
            if matches!(s.phase.as_deref(), None | Some("") | Some(PHASE_PENDING)) {
                s.phase = Some(PHASE_PRE_SCHEDULING.into());
            }
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for Coscheduling {
    fn add_pod(&self, _: &mut CycleState, _: &PodInfo, _: &AssignedPod, _: &NodeInfo) -> Status {
        Status::success()
    }

    /// Preempting a member of the pod's own group would not help it.
    fn remove_pod(
        &self,
        _: &mut CycleState,
        to_schedule: &PodInfo,
        to_remove: &AssignedPod,
        _: &NodeInfo,
    ) -> Status {
        let a = pod_group_full_name(to_schedule);
        if !a.is_empty() && a == pod_group_full_name(to_remove) {
            return Status::unschedulable(
                "Pod to schedule and remote have the same pod group label",
            );
        }
        Status::success()
    }
}

impl PostFilterPlugin for Coscheduling {
    fn post_filter(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let (full, pg) = self.pod_group(&pod.pod);
        let Some(pg) = pg else {
            return (
                Some(PostFilterResult::default()),
                Status::unschedulable("can not find pod group"),
            );
        };
        let group = pod_group_label(&pod.pod);
        let min = min_member(&pg);
        let assigned = count_assigned(snapshot, group, pod.namespace());
        // Enough members placed already: do not reject the whole group.
        if assigned >= min {
            return (
                Some(PostFilterResult::default()),
                Status::code_only(Code::Unschedulable),
            );
        }
        // A gap of at most 10%: later members may still make the quorum.
        if (min - assigned) as f64 / min as f64 <= 0.1 {
            return (
                Some(PostFilterResult::default()),
                Status::code_only(Code::Unschedulable),
            );
        }
        self.reject_waiting(pod.namespace(), group, "optimistic rejection in PostFilter");
        if !self.backoff.is_zero()
            && let Ok(pods) = self.list_group_pods(pod.namespace(), group)
            && pods.iter().filter(|p| !is_terminal(p)).count() >= min
        {
            self.backed_off
                .lock()
                .insert(full.clone(), Instant::now() + self.backoff);
        }
        self.permitted.lock().remove(&full);
        (
            Some(PostFilterResult::default()),
            Status::unschedulable(format!(
                "PodGroup {full} gets rejected due to Pod {} is unschedulable even after PostFilter",
                pod.name()
            )),
        )
    }
}

impl ReservePlugin for Coscheduling {
    fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        Status::success()
    }

    /// One member failed after Reserve (Permit timeout, rejection, bind error): the group's other
    /// waiting members are rejected too.
    fn unreserve(&self, _: &mut CycleState, pod: &PodInfo, _: &str) {
        let (full, pg) = self.pod_group(&pod.pod);
        if pg.is_none() {
            return;
        }
        self.reject_waiting(
            pod.namespace(),
            pod_group_label(&pod.pod),
            "rejection in Unreserve",
        );
        self.permitted.lock().remove(&full);
    }
}

impl PermitPlugin for Coscheduling {
    fn permit(&self, _: &mut CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let (full, pg) = self.pod_group(&pod.pod);
        if full.is_empty() {
            return (Status::success(), Duration::ZERO);
        }
        let Some(pg) = pg else {
            return (
                Status::unresolvable("PodGroup not found"),
                self.schedule_timeout,
            );
        };
        let wait = match pg.spec.schedule_timeout_seconds {
            Some(s) if s > 0 => Duration::from_secs(u64::try_from(s).unwrap_or(0)),
            _ => self.schedule_timeout,
        };
        let group = pod_group_label(&pod.pod);
        // The snapshot does not hold the pod of this cycle yet: +1.
        let assigned = self.calculate_assigned_pods(group, pod.namespace());
        if assigned + 1 >= min_member(&pg) {
            for wp in self.handle.waiting_pods.list() {
                let p = &wp.pod().pod;
                if p.metadata.namespace.as_deref() == Some(pod.namespace())
                    && pod_group_label(p) == group
                {
                    debug!(pod = %wp.pod().key(), "Permit allows the pod");
                    wp.allow(names::COSCHEDULING);
                }
            }
            self.track(pg);
            return (Status::success(), Duration::ZERO);
        }
        self.update_status(&pg, |s| {
            if s.phase.as_deref() != Some(PHASE_SCHEDULING) {
                s.phase = Some(PHASE_SCHEDULING.into());
                s.schedule_start_time = Some(Time(Timestamp::now()));
            }
        });
        (Status::code_only(Code::Wait), wait)
    }
}

/// Updates the status from the group's pods; whether the group runs (or finished).
fn refresh_bound_status(
    statuses: &Mutex<HashMap<String, PodGroupStatus>>,
    pg: &PodGroup,
    pods: &[Pod],
    writer: &StatusWriter,
) -> bool {
    let min = pg.spec.min_member.unwrap_or(1);
    let bound = pods
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some()
        })
        .count() as i32;
    let (running, succeeded, failed) = pod_stats(pods);
    let mut phase = None;
    let next = next_status(statuses, pg, |s| {
        s.running = Some(running);
        s.succeeded = Some(succeeded);
        s.failed = Some(failed);
        if s.schedule_start_time.is_none() {
            s.schedule_start_time = Some(Time(Timestamp::now()));
        }
        let p = if succeeded >= min {
            PHASE_FINISHED
        } else if failed != 0 && failed + running + succeeded >= min {
            PHASE_FAILED
        } else if running + succeeded >= min {
            PHASE_RUNNING
        } else if bound >= min {
            PHASE_SCHEDULED
        } else {
            PHASE_SCHEDULING
        };
        s.phase = Some(p.into());
        phase = Some(p);
    });
    if let Some(next) = next {
        writer.send(pg, next);
    }
    matches!(phase, Some(PHASE_RUNNING | PHASE_FINISHED | PHASE_FAILED))
}

/// Writes PodGroup statuses in the order they were decided (one writer task per plugin, started
/// on first use), so a later phase is never overtaken by an earlier one.
#[derive(Clone)]
struct StatusWriter {
    api: Arc<dyn crate::framework::registry::ApiHandle>,
    tx: Arc<
        std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<(String, String, PodGroupStatus)>>,
    >,
}

impl StatusWriter {
    fn new(api: Arc<dyn crate::framework::registry::ApiHandle>) -> StatusWriter {
        StatusWriter {
            api,
            tx: Arc::new(std::sync::OnceLock::new()),
        }
    }

    fn send(&self, pg: &PodGroup, status: PodGroupStatus) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tx = self.tx.get_or_init(|| {
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<(String, String, PodGroupStatus)>();
            let api = self.api.clone();
            rt.spawn(async move {
                while let Some((ns, name, status)) = rx.recv().await {
                    if let Err(e) = api.patch_pod_group_status(&ns, &name, &status).await {
                        warn!(podgroup = %format!("{ns}/{name}"), error = %e, "updating PodGroup status");
                    }
                }
            });
            tx
        });
        let _ = tx.send((
            pg.metadata.namespace.clone().unwrap_or_default(),
            pg.metadata.name.clone().unwrap_or_default(),
            status,
        ));
    }
}

/// Decodes the normalized args and builds the plugin.
pub fn factory(args: &Value, handle: &Handle) -> Result<Arc<dyn Plugin>, String> {
    let args: CoschedulingArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    Ok(Arc::new(Coscheduling::new(&args, handle.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodGroupSpec;
    use crate::framework::testing::{NodeBuilder, PodBuilder, handle};
    use crate::framework::types::{QueuedPodInfo, Snapshot};
    use crate::framework::waiting_pods::WaitingPod;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Arc;

    fn pod_group(name: &str, min: i32, created: i64) -> PodGroup {
        PodGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..Default::default()
            },
            spec: PodGroupSpec {
                min_member: Some(min),
                ..Default::default()
            },
            status: None,
        }
    }

    fn member(name: &str, group: &str) -> PodBuilder {
        PodBuilder::new(name)
            .namespace("ns")
            .label(POD_GROUP_LABEL, group)
    }

    struct Env {
        plugin: Coscheduling,
        handle: Handle,
        api: Arc<crate::framework::registry::RecordingApi>,
    }

    fn env(groups: &[PodGroup], args: CoschedulingArgs) -> Env {
        let (handle, api) = handle();
        for g in groups {
            handle.listers.pod_groups.apply(g.clone());
        }
        Env {
            plugin: Coscheduling::new(&args, handle.clone()),
            handle,
            api,
        }
    }

    fn args() -> CoschedulingArgs {
        CoschedulingArgs {
            permit_waiting_time_seconds: Some(10),
            ..Default::default()
        }
    }

    fn queued(p: PodBuilder) -> QueuedPodInfo {
        QueuedPodInfo::new(p.arc_info(), tokio::time::Instant::now().into_std())
    }

    #[test]
    fn queue_sort_priority_then_group_time_then_group() {
        let e = env(
            &[pod_group("old", 3, 100), pod_group("new", 3, 200)],
            args(),
        );
        let less = |a: PodBuilder, b: PodBuilder| e.plugin.less(&queued(a), &queued(b));
        // Priority first.
        assert!(less(member("z", "new").priority(10), member("a", "old")));
        // Older group first.
        assert!(less(member("z", "old"), member("a", "new")));
        assert!(!less(member("a", "new"), member("z", "old")));
        // Same creation time: by group, then pod; members stay together.
        let e2 = env(&[pod_group("g1", 2, 100), pod_group("g2", 2, 100)], args());
        let less2 = |a: PodBuilder, b: PodBuilder| e2.plugin.less(&queued(a), &queued(b));
        assert!(less2(member("z", "g1"), member("a", "g2")));
        assert!(less2(member("a", "g1"), member("b", "g1")));
    }

    fn pre_filter(e: &Env, pod: PodBuilder, snapshot: &Snapshot) -> Status {
        let mut state = CycleState::new();
        e.plugin.pre_filter(&mut state, &pod.info(), snapshot).1
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pre_filter_cases() {
        let snap = Snapshot::from_objects(
            &[Arc::new(
                NodeBuilder::new("n1")
                    .allocatable(&[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")])
                    .build(),
            )],
            &[],
        );
        let mut big = pod_group("big", 2, 1);
        big.spec.min_resources = Some(
            [("cpu".to_string(), Quantity("8".into()))]
                .into_iter()
                .collect(),
        );
        let e = env(&[pod_group("pg", 3, 1), big], args());
        // No group: nothing to check.
        assert!(pre_filter(&e, PodBuilder::new("solo"), &snap).is_success());
        // Missing PodGroup.
        let s = pre_filter(&e, member("p", "missing"), &snap);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "PodGroup not found");
        // Too few members.
        *e.api.pods.lock() = vec![member("p1", "pg").build(), member("p2", "pg").build()];
        let s = pre_filter(&e, member("p1", "pg"), &snap);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "pre-filter pod p1 cannot find enough sibling pods, current pods number: 2, minMember of group: 3"
        );
        // Enough members.
        e.api.pods.lock().push(member("p3", "pg").build());
        assert!(pre_filter(&e, member("p1", "pg"), &snap).is_success());
        // minResources beyond the cluster.
        *e.api.pods.lock() = vec![member("b1", "big").build(), member("b2", "big").build()];
        let s = pre_filter(&e, member("b1", "big"), &snap);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "resource gap: map[cpu:4000m]");
        // Status: Pending, then PreScheduling, written through the API.
        for _ in 0..50 {
            if e.api.pod_group_statuses.lock().len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let phases: Vec<(String, Option<String>)> = e
            .api
            .pod_group_statuses
            .lock()
            .iter()
            .map(|(k, s)| (k.clone(), s.phase.clone()))
            .collect();
        assert!(
            phases.contains(&("ns/pg".into(), Some(PHASE_PENDING.into()))),
            "{phases:?}"
        );
        assert!(
            phases.contains(&("ns/pg".into(), Some(PHASE_PRE_SCHEDULING.into()))),
            "{phases:?}"
        );
    }

    fn waiting(e: &Env, pod: PodBuilder) -> Arc<WaitingPod> {
        let wp = Arc::new(WaitingPod::new(
            pod.arc_info(),
            [(names::COSCHEDULING.to_string(), Duration::from_secs(10))]
                .into_iter()
                .collect(),
        ));
        e.handle.waiting_pods.add(wp.clone());
        wp
    }

    fn snapshot_with(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Arc<Snapshot> {
        let nodes = [Arc::new(NodeBuilder::new("n1").build())];
        let pods: Vec<_> = pods.into_iter().map(Arc::new).collect();
        Arc::new(Snapshot::from_objects(&nodes, &pods))
    }

    #[tokio::test]
    async fn permit_waits_for_the_quorum_then_allows_all() {
        let mut pg = pod_group("pg", 3, 1);
        pg.spec.schedule_timeout_seconds = Some(7);
        let e = env(&[pg], args());
        let mut state = CycleState::new();
        // No group: allowed.
        let (s, _) = e
            .plugin
            .permit(&mut state, &PodBuilder::new("solo").info(), "n1");
        assert!(s.is_success());
        // Missing group: rejected.
        let (s, _) = e
            .plugin
            .permit(&mut state, &member("x", "nope").info(), "n1");
        assert_eq!(s.message(), "PodGroup not found");
        // First member: nothing assigned yet -> wait, with the group's timeout.
        let (s, wait) = e
            .plugin
            .permit(&mut state, &member("p1", "pg").info(), "n1");
        assert_eq!((s.code(), wait), (Code::Wait, Duration::from_secs(7)));
        let w1 = waiting(&e, member("p1", "pg").node("n1"));
        // Second: one assigned (+1) = 2 < 3 -> wait.
        e.handle
            .snapshot
            .store(snapshot_with(vec![member("p1", "pg").node("n1").build()]));
        let (s, _) = e
            .plugin
            .permit(&mut state, &member("p2", "pg").info(), "n1");
        assert_eq!(s.code(), Code::Wait);
        let w2 = waiting(&e, member("p2", "pg").node("n1"));
        let other = waiting(&e, member("o", "other").node("n1"));
        // Third: 2 assigned + 1 = 3 -> allowed, and the waiting members too (not other groups').
        e.handle.snapshot.store(snapshot_with(vec![
            member("p1", "pg").node("n1").build(),
            member("p2", "pg").node("n1").build(),
        ]));
        let (s, _) = e
            .plugin
            .permit(&mut state, &member("p3", "pg").info(), "n1");
        assert!(s.is_success());
        assert!(w1.wait().await.is_success());
        assert!(w2.wait().await.is_success());
        assert_eq!(
            other.pending_plugins(),
            vec![names::COSCHEDULING.to_string()]
        );
    }

    #[tokio::test]
    async fn post_filter_rejects_the_waiting_group() {
        let e = env(&[pod_group("pg", 3, 1), pod_group("huge", 20, 1)], args());
        let w1 = waiting(&e, member("p1", "pg").node("n1"));
        let other = waiting(&e, member("o", "other").node("n1"));
        let snap = snapshot_with(vec![member("p1", "pg").node("n1").build()]);
        let (_, s) = e.plugin.post_filter(
            &CycleState::new(),
            &member("p3", "pg").info(),
            &snap,
            &NodeToStatus::new(),
        );
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(
            s.message(),
            "PodGroup ns/pg gets rejected due to Pod p3 is unschedulable even after PostFilter"
        );
        let r = w1.wait().await;
        assert_eq!(r.message(), "optimistic rejection in PostFilter");
        assert_eq!(r.plugin(), Some(names::COSCHEDULING));
        assert!(other.pending_plugins().len() == 1);

        // Quorum already reached, or a gap of at most 10%: no group rejection.
        let snap = snapshot_with(
            (0..18)
                .map(|i| member(&format!("h{i}"), "huge").node("n1").build())
                .collect(),
        );
        let hw = waiting(&e, member("h18", "huge").node("n1"));
        let (_, s) = e.plugin.post_filter(
            &CycleState::new(),
            &member("h19", "huge").info(),
            &snap,
            &NodeToStatus::new(),
        );
        assert_eq!(
            (s.code(), s.message()),
            (Code::Unschedulable, String::new())
        );
        assert!(hw.pending_plugins().len() == 1);
        // No group at all.
        let (_, s) = e.plugin.post_filter(
            &CycleState::new(),
            &member("x", "nope").info(),
            &snap,
            &NodeToStatus::new(),
        );
        assert_eq!(s.message(), "can not find pod group");
    }

    #[tokio::test]
    async fn unreserve_rejects_the_group_and_backoff_denies_it() {
        let e = env(&[pod_group("pg", 2, 1)], args());
        let w = waiting(&e, member("p1", "pg").node("n1"));
        e.plugin
            .unreserve(&mut CycleState::new(), &member("p2", "pg").info(), "n1");
        assert_eq!(w.wait().await.message(), "rejection in Unreserve");

        let e = env(
            &[pod_group("pg", 3, 1)],
            CoschedulingArgs {
                pod_group_backoff_seconds: Some(30),
                ..args()
            },
        );
        e.plugin
            .backed_off
            .lock()
            .insert("ns/pg".into(), Instant::now() + Duration::from_secs(30));
        let s = pre_filter(&e, member("p1", "pg"), &Snapshot::new());
        assert_eq!(s.message(), "podGroup ns/pg failed recently");
    }

    #[test]
    fn status_follows_the_pods() {
        let pg = pod_group("pg", 2, 1);
        let cache = Mutex::new(HashMap::new());
        let bound = |phase: &str| {
            let mut p = member("p", "pg").node("n1").build();
            p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            p
        };
        let s = next_status(&cache, &pg, |s| s.phase = Some(PHASE_SCHEDULING.into())).unwrap();
        assert_eq!(s.phase.as_deref(), Some(PHASE_SCHEDULING));
        // Unchanged: nothing to write.
        assert!(next_status(&cache, &pg, |s| s.phase = Some(PHASE_SCHEDULING.into())).is_none());
        let api = Arc::new(crate::framework::registry::RecordingApi::default());
        let writer = StatusWriter::new(api.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let done =
            refresh_bound_status(&cache, &pg, &[bound("Pending"), bound("Pending")], &writer);
        assert!(!done);
        let done =
            refresh_bound_status(&cache, &pg, &[bound("Running"), bound("Running")], &writer);
        assert!(done);
        rt.block_on(async {
            for _ in 0..50 {
                if api.pod_group_statuses.lock().len() == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let written: Vec<_> = api
            .pod_group_statuses
            .lock()
            .iter()
            .map(|(_, s)| (s.phase.clone().unwrap_or_default(), s.running))
            .collect();
        assert_eq!(
            written,
            vec![
                (PHASE_SCHEDULED.to_string(), Some(0)),
                (PHASE_RUNNING.to_string(), Some(2))
            ]
        );
    }
}
