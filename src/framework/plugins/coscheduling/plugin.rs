//! The Coscheduling plugin (scheduler-plugins' `pkg/coscheduling/coscheduling.go`): its extension
//! points, deciding with the `PodGroupManager`; a group's first Permit is noted for its status
//! loop (`controller`), which the plugin registers and the scheduler runs.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, warn};

use super::CoschedulingArgs;
use super::controller::{PodGroupController, SchedulingProgress};
use super::pod_group_manager::{
    PodGroupManager, check_cluster_resource, count_assigned, min_member, pod_group_full_name,
    pod_group_label,
};
use crate::framework::interface::{
    Code, CycleState, NodeToStatus, PermitPlugin, Plugin, PostFilterPlugin, PostFilterResult,
    PreFilterExtensions, PreFilterPlugin, PreFilterResult, QueueSortPlugin, ReservePlugin, Status,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::plugins::names;
use crate::framework::registry::Handle;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, QueuedPodInfo, Resource, Snapshot};

pub struct Coscheduling {
    handle: Handle,
    /// permitWaitingTimeSeconds.
    schedule_timeout: Duration,
    /// podGroupBackoffSeconds (zero: no backoff).
    backoff: Duration,
    pub(super) pg_mgr: PodGroupManager,
    /// When each group's scheduling started, for the status loop.
    pub(super) progress: Arc<SchedulingProgress>,
}

impl Coscheduling {
    /// The plugin; its PodGroup status loop is registered with the handle's background tasks.
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
        let schedule_timeout = secs(args.permit_waiting_time_seconds.or(Some(60)));
        let progress = Arc::new(SchedulingProgress::default());
        handle.tasks.register(Arc::new(PodGroupController::new(
            &handle.profile_name,
            handle.listers.clone(),
            progress.clone(),
        )));
        Coscheduling {
            pg_mgr: PodGroupManager::new(handle.clone(), schedule_timeout),
            progress,
            handle,
            schedule_timeout,
            backoff: secs(args.pod_group_backoff_seconds),
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
}

impl_plugin!(
    Coscheduling,
    names::COSCHEDULING,
    [QueueSort, PreFilter, PostFilter, Reserve, Permit],
    EnqueueExtensions
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
        let (ta, tb) = (self.pg_mgr.creation_time(a), self.pg_mgr.creation_time(b));
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
        let (full, pg) = self.pg_mgr.pod_group(&pod.pod);
        if full.is_empty() {
            return (None, Status::success());
        }
        let Some(pg) = pg else {
            return (None, Status::unresolvable("PodGroup not found"));
        };
        if self.pg_mgr.is_backed_off(&full) {
            return (
                None,
                Status::unresolvable(format!("podGroup {full} failed recently")),
            );
        }
        let live = self
            .pg_mgr
            .live_members(pod.namespace(), pod_group_label(&pod.pod));
        let min = min_member(&pg);
        if live < min {
            return (
                None,
                Status::unresolvable(format!(
                    "pre-filter pod {} cannot find enough sibling pods, current pods number: {live}, minMember of group: {min}",
                    pod.name()
                )),
            );
        }
        if let Some(min_resources) = &pg.spec.min_resources
            && !self.pg_mgr.is_permitted(&full)
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
            self.pg_mgr.permit(&full);
        }
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
        let (full, pg) = self.pg_mgr.pod_group(&pod.pod);
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
        if !self.backoff.is_zero() && self.pg_mgr.live_members(pod.namespace(), group) >= min {
            self.pg_mgr.backoff_pod_group(&full, self.backoff);
        }
        self.pg_mgr.delete_permitted(&full);
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
        let (full, pg) = self.pg_mgr.pod_group(&pod.pod);
        if pg.is_none() {
            return;
        }
        self.reject_waiting(
            pod.namespace(),
            pod_group_label(&pod.pod),
            "rejection in Unreserve",
        );
        self.pg_mgr.delete_permitted(&full);
    }
}

impl PermitPlugin for Coscheduling {
    fn permit(&self, _: &mut CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let (full, pg) = self.pg_mgr.pod_group(&pod.pod);
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
        self.progress.scheduling(&full);
        // The snapshot does not hold the pod of this cycle yet: +1.
        let assigned = self.pg_mgr.calculate_assigned_pods(group, pod.namespace());
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
            return (Status::success(), Duration::ZERO);
        }
        (Status::code_only(Code::Wait), wait)
    }
}

/// Decodes the normalized args and builds the plugin.
pub fn factory(args: &Value, handle: &Handle) -> Result<Arc<dyn Plugin>, String> {
    let args: CoschedulingArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    Ok(Arc::new(Coscheduling::new(&args, handle.clone())))
}
