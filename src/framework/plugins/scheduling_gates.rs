//! SchedulingGates: a pod with `spec.schedulingGates` stays out of the active queue.

use super::names;
use crate::framework::interface::{
    ClusterEventWithHint, EnqueueExtensions, PreEnqueuePlugin, Status,
};
use crate::framework::plugins::helper::{
    impl_plugin, own_update, queue_if, registration_without_args,
};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, HintError, PodInfo, QueueingHint,
};

#[derive(Debug, Default)]
pub struct SchedulingGates;

impl_plugin!(
    SchedulingGates,
    names::SCHEDULING_GATES,
    [PreEnqueue],
    EnqueueExtensions
);

impl EnqueueExtensions for SchedulingGates {
    /// Only the pod losing its last gate lets it in.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            ),
            is_schedulable_after_gates_eliminated,
        )]
    }
}

/// Upstream's `isSchedulableAfterUpdatePodSchedulingGatesEliminated`: the pod's own update.
fn is_schedulable_after_gates_eliminated(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    Ok(queue_if(own_update(pod, old, new)?.is_some()))
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates = pod
            .spec()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or(&[]);
        if gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

pub fn registration() -> PluginRegistration {
    registration_without_args::<SchedulingGates>(SchedulingGates::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::Code;
    use crate::framework::testing::PodBuilder;
    use crate::framework::testing::hints::{event, hint, pod_obj};

    #[test]
    fn hints() {
        let pod = PodBuilder::new("p").uid("p").scheduling_gate("g").info();
        let gates_gone = event(
            EventResource::UnscheduledPod,
            ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
        );
        let old = || {
            Some(pod_obj(
                PodBuilder::new("p").uid("p").scheduling_gate("g").build(),
            ))
        };
        let new = |uid: &str| Some(pod_obj(PodBuilder::new("p").uid(uid).build()));
        assert_eq!(
            hint(&SchedulingGates, gates_gone, &pod, old(), new("p")),
            Some(QueueingHint::Queue)
        );
        assert_eq!(
            hint(&SchedulingGates, gates_gone, &pod, old(), new("other")),
            Some(QueueingHint::QueueSkip)
        );
        let labels = event(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL);
        assert_eq!(hint(&SchedulingGates, labels, &pod, old(), new("p")), None);
    }

    #[test]
    fn pre_enqueue() {
        let s = SchedulingGates.pre_enqueue(&PodBuilder::new("p").info());
        assert!(s.is_success());
        let s = SchedulingGates.pre_enqueue(
            &PodBuilder::new("p")
                .scheduling_gate("foo")
                .scheduling_gate("bar")
                .info(),
        );
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [foo bar]");
    }
}
