//! [`QueuedEntity`]: what the scheduling queue hands a scheduling cycle.

use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::pod_info::PodInfo;
use super::queued_pod_info::QueuedPodInfo;

/// What one scheduling cycle schedules (upstream 1.37's `QueuedEntityInfo`): a single pod, or, with
/// workload-aware scheduling, a group of pods placed together in one cycle. The cycle
/// (`scheduler::cycle`) takes an entity and decides for each of its pods, so a group is one more
/// variant here and one more arm there, not a second cycle.
#[derive(Debug, Clone)]
pub enum QueuedEntity {
    Pod(QueuedPodInfo),
    Group(QueuedPodGroup),
}

/// A `scheduling.k8s.io` PodGroup's queued members (upstream's `QueuedPodGroupInfo`), in the
/// order the group cycle tries them.
#[derive(Debug, Clone)]
pub struct QueuedPodGroup {
    pub group: Arc<PodGroup>,
    pub members: Vec<QueuedPodInfo>,
}

impl QueuedPodGroup {
    /// The group with `members` in upstream's order (`PodGroupMemberPodsOrderingFunc`): higher
    /// priority first, then more attempts, then queued earlier, then by name.
    pub fn new(group: Arc<PodGroup>, mut members: Vec<QueuedPodInfo>) -> QueuedPodGroup {
        members.sort_by(|a, b| {
            b.pod_info
                .priority()
                .cmp(&a.pod_info.priority())
                .then(b.attempts.cmp(&a.attempts))
                .then(a.timestamp.cmp(&b.timestamp))
                .then_with(|| a.pod_info.name().cmp(b.pod_info.name()))
        });
        QueuedPodGroup { group, members }
    }

    /// `namespace/name` of the PodGroup.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.group.metadata.namespace.as_deref().unwrap_or_default(),
            self.group.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

impl QueuedEntity {
    /// The scheduler name of the entity's pods (one profile schedules a whole group).
    pub fn scheduler_name(&self) -> &str {
        match self {
            QueuedEntity::Pod(qpi) => qpi.pod_info.scheduler_name(),
            QueuedEntity::Group(g) => g
                .members
                .first()
                .map_or("", |m| m.pod_info.scheduler_name()),
        }
    }

    /// The entity's queued pods (in the order the cycle tries them) and its PodGroup.
    pub fn into_members(self) -> (Vec<QueuedPodInfo>, Option<Arc<PodGroup>>) {
        match self {
            QueuedEntity::Pod(qpi) => (vec![qpi], None),
            QueuedEntity::Group(g) => (g.members, Some(g.group)),
        }
    }

    /// The entity's pods, in the order the cycle tries them.
    pub fn pods(&self) -> Box<dyn Iterator<Item = &Arc<PodInfo>> + '_> {
        match self {
            QueuedEntity::Pod(qpi) => Box::new(std::iter::once(&qpi.pod_info)),
            QueuedEntity::Group(g) => Box::new(g.members.iter().map(|m| &m.pod_info)),
        }
    }
}

impl From<QueuedPodInfo> for QueuedEntity {
    fn from(qpi: QueuedPodInfo) -> QueuedEntity {
        QueuedEntity::Pod(qpi)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;

    fn member(name: &str, priority: i32, attempts: u32, queued: Instant) -> QueuedPodInfo {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"priority": priority, "containers": []},
        }))
        .expect("pod");
        let mut qpi = QueuedPodInfo::new(Arc::new(PodInfo::new(Arc::new(pod))), queued);
        qpi.attempts = attempts;
        qpi
    }

    #[test]
    fn members_are_ordered_by_priority_attempts_time_then_name() {
        let t = Instant::now();
        let later = t + Duration::from_millis(5);
        let group: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"schedulingPolicy": {"basic": {}}},
        }))
        .expect("pod group");
        let g = QueuedPodGroup::new(
            Arc::new(group),
            vec![
                member("d", 0, 0, t),
                member("c", 0, 0, t),
                member("late", 0, 0, later),
                member("tried", 0, 2, later),
                member("high", 10, 0, later),
            ],
        );
        let order: Vec<&str> = g.members.iter().map(|m| m.pod_info.name()).collect();
        assert_eq!(order, ["high", "tried", "c", "d", "late"]);
        assert_eq!(g.key(), "ns/g");
    }
}
