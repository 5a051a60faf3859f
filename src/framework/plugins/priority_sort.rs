//! PrioritySort: the queue orders pods by priority (higher first), then by queue timestamp.

use super::names;
use crate::framework::interface::QueueSortPlugin;
use crate::framework::plugins::helper::{impl_plugin, registration_without_args};
use crate::framework::registry::PluginRegistration;
use crate::framework::types::QueuedPodInfo;

#[derive(Debug, Default)]
pub(crate) struct PrioritySort;

impl_plugin!(PrioritySort, names::PRIORITY_SORT, [QueueSort]);

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (p1, p2) = (a.pod_info.priority(), b.pod_info.priority());
        p1 > p2 || (p1 == p2 && a.timestamp < b.timestamp)
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_without_args::<PrioritySort>(PrioritySort::EXTENSION_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;
    use std::time::{Duration, Instant};

    #[test]
    fn less() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let q = |prio: i32, t: Instant| {
            QueuedPodInfo::new(PodBuilder::new("p").priority(prio).arc_info(), t)
        };
        let cases = [
            ("higher priority first", q(100, t1), q(10, t0), true),
            ("lower priority later", q(10, t0), q(100, t1), false),
            ("same priority: earlier first", q(10, t0), q(10, t1), true),
            ("same priority: later second", q(10, t1), q(10, t0), false),
            ("equal is not less", q(10, t0), q(10, t0), false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(PrioritySort.less(&a, &b), want, "{name}");
        }
    }
}
