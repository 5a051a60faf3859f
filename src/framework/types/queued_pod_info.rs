//! [`QueuedPodInfo`]: a pod in the scheduling queue.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::pod_info::PodInfo;

/// A pod in the scheduling queue, with what the queue and QueueSort plugins need.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    pub pod_info: Arc<PodInfo>,
    /// When the pod was added to the queue (or last moved back to it).
    pub timestamp: Instant,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the pod was first tried; `None` before the first attempt.
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt (events for them requeue it).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending in the last attempt.
    pub pending_plugins: BTreeSet<String>,
    /// The PreEnqueue plugin keeping the pod out of the active queue, if any; only the events it
    /// registered move the pod.
    pub gating_plugin: Option<String>,
    /// Whether the pod last left the unschedulable pool because it sat there longer than the
    /// maximum (`scheduler_pod_scheduled_after_flush_total` counts those that then bind).
    pub was_flushed_from_unschedulable: bool,
}

impl QueuedPodInfo {
    pub fn new(pod_info: Arc<PodInfo>, timestamp: Instant) -> QueuedPodInfo {
        QueuedPodInfo {
            pod_info,
            timestamp,
            attempts: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            was_flushed_from_unschedulable: false,
            gating_plugin: None,
        }
    }

    /// Whether a PreEnqueue plugin keeps the pod out of the active queue.
    pub fn gated(&self) -> bool {
        self.gating_plugin.is_some()
    }

    /// The plugins that rejected the pod in its last attempt or gate it: the ones whose events
    /// may requeue it.
    pub fn rejector_plugins(&self) -> impl Iterator<Item = &String> {
        self.unschedulable_plugins
            .iter()
            .chain(self.pending_plugins.difference(&self.unschedulable_plugins))
    }

    /// Whether no plugin rejected the pod (it failed with an error).
    pub fn has_no_rejector(&self) -> bool {
        self.unschedulable_plugins.is_empty() && self.pending_plugins.is_empty()
    }
}
