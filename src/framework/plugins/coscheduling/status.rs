//! PodGroup status: scheduler-plugins leaves it to its PodGroup controller; ksched has none, so
//! Coscheduling computes each group's next status and writes it in order, in the background.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tracing::warn;

use crate::api::pod_group::POD_GROUP_LABEL;
use crate::api::{PodGroup, PodGroupStatus};
use crate::framework::registry::ApiHandle;

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

/// Running, succeeded, failed.
pub(super) fn pod_stats(pods: &[Pod]) -> (i32, i32, i32) {
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

/// The group's next status; `None` when `f` changed nothing.
pub(super) fn next_status(
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

/// Updates the status from the group's pods; whether the group runs (or finished).
pub(super) fn refresh_bound_status(
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
pub(super) struct StatusWriter {
    api: Arc<dyn ApiHandle>,
    tx: Arc<
        std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<(String, String, PodGroupStatus)>>,
    >,
}

impl StatusWriter {
    pub(super) fn new(api: Arc<dyn ApiHandle>) -> StatusWriter {
        StatusWriter {
            api,
            tx: Arc::new(std::sync::OnceLock::new()),
        }
    }

    pub(super) fn send(&self, pg: &PodGroup, status: PodGroupStatus) {
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

/// The PodGroup statuses Coscheduling writes: the last one per group, the groups whose progress is
/// followed, and the writer that sends them in order.
pub struct PodGroupStatuses {
    api: Arc<dyn ApiHandle>,
    /// The status last written per group (the lister may lag behind our own writes).
    statuses: Arc<Mutex<HashMap<String, PodGroupStatus>>>,
    /// Groups whose progress a background task follows.
    tracking: Arc<Mutex<HashSet<String>>>,
    writer: StatusWriter,
}

impl PodGroupStatuses {
    pub fn new(api: Arc<dyn ApiHandle>) -> PodGroupStatuses {
        PodGroupStatuses {
            writer: StatusWriter::new(api.clone()),
            api,
            statuses: Arc::new(Mutex::new(HashMap::new())),
            tracking: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Computes the group's next status with `f` (from the last one written, or the lister's) and
    /// queues it for writing when it changed (without waiting for the API).
    pub fn update(&self, pg: &PodGroup, f: impl FnOnce(&mut PodGroupStatus)) {
        if let Some(next) = next_status(&self.statuses, pg, f) {
            self.writer.send(pg, next);
        }
    }

    /// After the quorum is reached: follows the group's pods for a while (they bind, then start)
    /// and records `Scheduled`, then `Running`, with the counts. One tracker per group.
    pub fn track(&self, pg: Arc<PodGroup>) {
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
        let api = self.api.clone();
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
}
