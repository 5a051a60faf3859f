//! [`QueuedEntity`]: what the scheduling queue hands a scheduling cycle.

use std::sync::Arc;

use super::pod_info::PodInfo;
use super::queued_pod_info::QueuedPodInfo;

/// What one scheduling cycle schedules (upstream 1.37's `QueuedEntityInfo`): a single pod, or, with
/// workload-aware scheduling, a group of pods placed together in one cycle. The cycle
/// (`scheduler::cycle`) takes an entity and decides for each of its pods, so a group is one more
/// variant here and one more arm there, not a second cycle.
#[derive(Debug, Clone)]
pub enum QueuedEntity {
    Pod(QueuedPodInfo),
}

impl QueuedEntity {
    /// The scheduler name of the entity's pods (one profile schedules a whole group).
    pub fn scheduler_name(&self) -> &str {
        match self {
            QueuedEntity::Pod(qpi) => qpi.pod_info.scheduler_name(),
        }
    }

    /// The entity's pods, in the order the cycle tries them.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        match self {
            QueuedEntity::Pod(qpi) => std::iter::once(&qpi.pod_info),
        }
    }
}

impl From<QueuedPodInfo> for QueuedEntity {
    fn from(qpi: QueuedPodInfo) -> QueuedEntity {
        QueuedEntity::Pod(qpi)
    }
}
