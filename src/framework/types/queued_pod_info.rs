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
    /// Set on a member of a `scheduling.k8s.io` PodGroup that its group's cycle sent back: the
    /// group backs off as one entity (upstream's `QueuedPodGroupInfo`), by the group's count
    /// of failed cycles and its size, not by the member's own attempts.
    pub group_backoff: Option<GroupBackoff>,
}

/// A group's backoff, as upstream keeps it on the group entity: how many of its cycles in a row
/// were unschedulable or failed (0 after one that scheduled it), and how many members it sent
/// back (the maximum backoff grows with the square root of that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupBackoff {
    pub failed_cycles: u32,
    pub size: usize,
}

impl GroupBackoff {
    /// What a group's cycle over `members` leaves on the `sent_back` members it did not place:
    /// the failed cycles in a row so far (the most any member carries; members that joined
    /// later carry none) plus this one, or none when the cycle `scheduled` the group.
    pub fn after_cycle(members: &[QueuedPodInfo], sent_back: usize, scheduled: bool) -> Self {
        let before = members
            .iter()
            .filter_map(|m| m.group_backoff.map(|g| g.failed_cycles))
            .max()
            .unwrap_or(0);
        GroupBackoff {
            failed_cycles: if scheduled { 0 } else { before + 1 },
            size: sent_back,
        }
    }
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
            group_backoff: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    fn member(name: &str, failed_cycles: Option<u32>) -> QueuedPodInfo {
        let mut qpi = QueuedPodInfo::new(Arc::new(PodBuilder::new(name).info()), Instant::now());
        qpi.group_backoff = failed_cycles.map(|failed_cycles| GroupBackoff {
            failed_cycles,
            size: 3,
        });
        qpi
    }

    /// The group's count lives on in its members: a member that joined after two failed cycles
    /// does not restart it, a cycle that schedules the group resets it.
    #[test]
    fn a_groups_failed_cycles_carry_over_its_members_and_reset_when_it_schedules() {
        let first = [member("a", None), member("b", None)];
        assert_eq!(
            GroupBackoff::after_cycle(&first, 2, false),
            GroupBackoff {
                failed_cycles: 1,
                size: 2
            }
        );
        let third = [
            member("a", Some(2)),
            member("b", Some(2)),
            member("c", None),
        ];
        assert_eq!(
            GroupBackoff::after_cycle(&third, 3, false),
            GroupBackoff {
                failed_cycles: 3,
                size: 3
            }
        );
        assert_eq!(
            GroupBackoff::after_cycle(&third, 1, true),
            GroupBackoff {
                failed_cycles: 0,
                size: 1
            }
        );
    }
}
