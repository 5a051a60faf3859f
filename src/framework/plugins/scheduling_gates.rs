//! SchedulingGates: a pod with `spec.schedulingGates` stays out of the active queue.

use super::names;
use crate::framework::interface::{PreEnqueuePlugin, Status};
use crate::framework::plugins::helper::{impl_plugin, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::PodInfo;

#[derive(Debug, Default)]
pub struct SchedulingGates;

impl_plugin!(SchedulingGates, names::SCHEDULING_GATES, [PreEnqueue]);

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
