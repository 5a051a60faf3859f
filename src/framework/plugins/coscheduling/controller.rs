//! PodGroup status, written by a loop of Coscheduling's own outside the scheduling cycle
//! (scheduler-plugins' PodGroup controller, `pkg/controllers/podgroup_controller.go`).
//!
//! The status follows from the group's members, as the PodGroup informer and the member index
//! hold them, and from one fact only the scheduler knows: when a member first reached Permit
//! ([`SchedulingProgress`], noted by the plugin without waiting on anything). The loop wakes on
//! changes of either store or of that progress, at most once per [`PASS_INTERVAL`], computes
//! every status of its profile's groups with [`desired_status`], and replaces the statuses that
//! differ, each against the resourceVersion it was computed from (a conflict waits for the
//! informer's newer copy), at most [`WRITES_PER_SECOND`]. It writes only while this replica leads.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::pod_group_manager::is_terminal;
use crate::api::{PodGroup, PodGroupStatus};
use crate::framework::api_calls::{ApiClient, ApiError, ReplaceStatus};
use crate::framework::background::{BackgroundTask, TaskContext};
use crate::framework::listers::{Listers, ObjectStore, POD_GROUP_MEMBERS, POD_GROUPS};

pub(crate) const PHASE_PENDING: &str = "Pending";

pub(crate) const PHASE_PRE_SCHEDULING: &str = "PreScheduling";

pub(crate) const PHASE_SCHEDULING: &str = "Scheduling";

pub(crate) const PHASE_SCHEDULED: &str = "Scheduled";

pub(crate) const PHASE_RUNNING: &str = "Running";

pub(crate) const PHASE_FINISHED: &str = "Finished";

pub(crate) const PHASE_FAILED: &str = "Failed";

/// The shortest time between two passes: a burst of events makes one pass.
pub(super) const PASS_INTERVAL: Duration = Duration::from_millis(200);

/// A pass even without events (a write that failed for a reason no event will change).
const RESYNC: Duration = Duration::from_secs(30);

/// After a failed write, the next pass comes this soon, doubling up to [`RESYNC`].
const RETRY: Duration = Duration::from_secs(1);

/// The status writes of one loop, at most (bursts of up to [`WRITE_BURST`]).
pub(super) const WRITES_PER_SECOND: u32 = 10;

const WRITE_BURST: u32 = 50;

/// Running, succeeded, failed.
fn pod_stats(pods: &[Arc<Pod>]) -> (i32, i32, i32) {
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

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The owners of a group's first member (upstream's `fillOccupiedObj`): `namespace/name`,
/// sorted, comma-separated.
fn occupied_by(pod: &Pod) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut refs: Vec<String> = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| format!("{ns}/{}", o.name))
        .collect();
    refs.sort();
    (!refs.is_empty()).then(|| refs.join(","))
}

/// The status a group should have, from its members and from when its scheduling started (a
/// member first reached Permit). Upstream's phases, with the scheduler's two of the earlier
/// scheduler-plugins: `Pending` (fewer members than `minMember`), `PreScheduling` (enough
/// members, none at Permit yet), `Scheduling`, `Scheduled` (`minMember` bound), `Running`
/// (`minMember` running or succeeded); `Finished` and `Failed` are final.
pub(crate) fn desired_status(
    pg: &PodGroup,
    members: &[Arc<Pod>],
    scheduling_since: Option<Timestamp>,
) -> PodGroupStatus {
    let mut s = pg.status.clone().unwrap_or_default();
    if matches!(s.phase.as_deref(), Some(PHASE_FINISHED | PHASE_FAILED)) {
        return s;
    }
    let min = pg.spec.min_member.unwrap_or(1);
    let (running, succeeded, failed) = pod_stats(members);
    let bound = count(
        members
            .iter()
            .filter(|p| {
                !is_terminal(p)
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
            })
            .count(),
    );
    s.running = Some(running);
    s.succeeded = Some(succeeded);
    s.failed = Some(failed);
    if s.schedule_start_time.is_none() {
        s.schedule_start_time = scheduling_since.map(Time);
    }
    let enough = count(members.len()) >= min;
    if enough && s.occupied_by.is_none() {
        let mut sorted: Vec<&Arc<Pod>> = members.iter().collect();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        s.occupied_by = sorted.first().and_then(|p| occupied_by(p));
    }
    let phase = if !enough {
        PHASE_PENDING
    } else if succeeded >= min {
        PHASE_FINISHED
    } else if failed != 0 && failed + running + succeeded >= min {
        PHASE_FAILED
    } else if running + succeeded >= min {
        PHASE_RUNNING
    } else if bound >= min {
        PHASE_SCHEDULED
    } else if s.schedule_start_time.is_some() {
        PHASE_SCHEDULING
    } else {
        PHASE_PRE_SCHEDULING
    };
    s.phase = Some(phase.into());
    s
}

/// When each group's scheduling started (`namespace/group` -> first Permit), noted by the plugin
/// and read by the status loop.
#[derive(Debug)]
pub(super) struct SchedulingProgress {
    started: Mutex<HashMap<String, Timestamp>>,
    changes: watch::Sender<u64>,
}

impl Default for SchedulingProgress {
    fn default() -> Self {
        SchedulingProgress {
            started: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl SchedulingProgress {
    /// A member of `group` reached Permit: the group's scheduling started now, unless it had.
    pub(super) fn scheduling(&self, group: &str) {
        let mut started = self.started.lock();
        if started.contains_key(group) {
            return;
        }
        started.insert(group.to_string(), Timestamp::now());
        drop(started);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn started(&self, group: &str) -> Option<Timestamp> {
        self.started.lock().get(group).copied()
    }

    /// Forgets the groups not in `live`.
    fn retain(&self, live: &HashSet<String>) {
        self.started.lock().retain(|k, _| live.contains(k));
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// The status loop of one profile's Coscheduling: it looks after the groups that have a member
/// of this profile (`spec.schedulerName`), so schedulers side by side leave each other's alone.
pub(super) struct PodGroupController {
    profile: String,
    listers: Arc<Listers>,
    progress: Arc<SchedulingProgress>,
    limiter: DefaultDirectRateLimiter,
}

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Pass {
    pub written: usize,
    /// Writes that failed for another reason than a conflict or a deleted group.
    pub failed: usize,
}

fn key_of(pg: &PodGroup) -> String {
    ObjectStore::<PodGroup>::key_of(pg)
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("default-scheduler")
}

impl PodGroupController {
    pub(super) fn new(
        profile: &str,
        listers: Arc<Listers>,
        progress: Arc<SchedulingProgress>,
    ) -> PodGroupController {
        let per_second = NonZeroU32::new(WRITES_PER_SECOND).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(WRITE_BURST).unwrap_or(NonZeroU32::MIN);
        PodGroupController {
            profile: profile.to_string(),
            listers,
            progress,
            limiter: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
        }
    }

    /// The groups this loop looks after, each with its desired status when that differs from
    /// the stored one.
    pub(super) fn out_of_date(&self) -> Vec<(Arc<PodGroup>, PodGroupStatus)> {
        let groups = self.listers.store(&POD_GROUPS).list();
        let live: HashSet<String> = groups.iter().map(|g| key_of(g)).collect();
        self.progress.retain(&live);
        let mut out = Vec::new();
        for pg in groups {
            if pg.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = pg.metadata.namespace.as_deref().unwrap_or_default();
            let name = pg.metadata.name.as_deref().unwrap_or_default();
            let members = self.listers.store(&POD_GROUP_MEMBERS).members(ns, name);
            if !members.iter().any(|p| scheduler_name(p) == self.profile) {
                continue;
            }
            let desired = desired_status(&pg, &members, self.progress.started(&key_of(&pg)));
            if pg.status.as_ref() != Some(&desired) {
                out.push((pg, desired));
            }
        }
        out.sort_by_key(|(pg, _)| key_of(pg));
        out
    }

    /// Writes every out-of-date status, each against the resourceVersion it was computed from.
    /// A written status goes into the PodGroup store at once (the informer may lag behind).
    pub(super) async fn pass(&self, api: &Arc<dyn ApiClient>) -> Pass {
        let mut done = Pass::default();
        for (pg, status) in self.out_of_date() {
            self.limiter.until_ready().await;
            let mut next = (*pg).clone();
            next.status = Some(status);
            let key = key_of(&pg);
            // A PUT carries the object's resourceVersion: a concurrent change makes it a conflict.
            match api.call(ReplaceStatus(next)).await {
                Ok(mut stored) => {
                    // Kept as the informer keeps it.
                    stored.metadata.managed_fields = None;
                    debug!(podgroup = %key, phase = stored.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default(), "PodGroup status updated");
                    self.listers.store(&POD_GROUPS).apply(stored);
                    done.written += 1;
                }
                Err(ApiError::Conflict(_)) => {
                    debug!(podgroup = %key, "PodGroup changed meanwhile; its next version is waited for");
                }
                Err(ApiError::NotFound(_)) => {}
                Err(e) => {
                    warn!(podgroup = %key, error = %e, "updating PodGroup status");
                    done.failed += 1;
                }
            }
        }
        done
    }
}

impl BackgroundTask for PodGroupController {
    fn name(&self) -> &str {
        "Coscheduling PodGroup status"
    }

    fn run(self: Arc<Self>, mut ctx: TaskContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut groups = self.listers.store(&POD_GROUPS).subscribe();
            let mut members = self.listers.store(&POD_GROUP_MEMBERS).subscribe();
            let mut progress = self.progress.subscribe();
            let mut retry = RETRY;
            loop {
                // A standby replica writes nothing.
                if !ctx.wait_leading().await {
                    return;
                }
                groups.mark_unchanged();
                members.mark_unchanged();
                progress.mark_unchanged();
                let pass = self.pass(&ctx.api).await;
                let wait = if pass.failed > 0 {
                    let wait = retry;
                    retry = (retry * 2).min(RESYNC);
                    wait
                } else {
                    retry = RETRY;
                    RESYNC
                };
                tokio::time::sleep(PASS_INTERVAL).await;
                tokio::select! {
                    _ = groups.changed() => {}
                    _ = members.changed() => {}
                    _ = progress.changed() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        })
    }
}
