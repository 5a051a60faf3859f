//! PostFilter, and a pod group's PlacementFeasible and PodGroupPostFilter.

use std::sync::Arc;

use super::Framework;
use crate::config::ExtensionPoint;
use crate::framework::interface::{
    Code, CycleState, NodeToStatus, PodGroupPlacement, PodGroupPostFilterResult, PostFilterResult,
    Status,
};
use crate::framework::metrics::Point;
use crate::framework::types::{PodInfo, Snapshot};

impl Framework {
    pub fn has_post_filter_plugins(&self) -> bool {
        !self.at(ExtensionPoint::PostFilter).is_empty()
    }

    /// PlacementFeasible for a pod group's cycle (upstream's `RunPlacementFeasiblePlugins`): only
    /// GangScheduling implements it (upstream takes no other), when the profile has the plugin;
    /// without it every placement is feasible. The plugin is timed when `sampled`.
    pub fn run_placement_feasible_plugins(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        progress: crate::framework::interface::PlacementProgress,
        sampled: bool,
    ) -> Status {
        let each = || {
            let plugin = self
                .instances
                .values()
                .find_map(|p| p.as_placement_feasible());
            let Some(plugin) = plugin else {
                return Status::success();
            };
            let timer = self.placement_feasible_timer(sampled);
            let status = plugin.placement_feasible(group, progress);
            timer.stop(status.code());
            let name = plugin.name().to_string();
            match status.code() {
                Code::Success => status,
                Code::Wait | Code::Unschedulable => status.with_plugin(name),
                Code::Error => Status::error(format!(
                    "running PlacementFeasible plugin: {}",
                    status.message()
                ))
                .with_plugin(name),
                other => Status::error(format!(
                    "unexpected status from PlacementFeasible plugin: {other}"
                ))
                .with_plugin(name),
            }
        };
        self.at_point(Point::PlacementFeasible, each, Status::code)
    }

    /// PodGroupPostFilter for a pod group its cycle did not place (upstream's
    /// `RunPodGroupPostFilterPlugins`): the first Success or UnschedulableAndUnresolvable ends
    /// it; otherwise Unschedulable with every plugin's reasons (none without plugins). The
    /// plugins are timed when `sampled`.
    pub fn run_pod_group_post_filter_plugins(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        members: &[Arc<PodInfo>],
        snapshot: &Snapshot,
        place: &PodGroupPlacement<'_>,
        sampled: bool,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let each = || {
            let mut reasons = Vec::new();
            let mut rejector: Option<Arc<str>> = None;
            for e in self.at(ExtensionPoint::PodGroupPostFilter) {
                let Some(plugin) = e.plugin.as_pod_group_post_filter() else {
                    continue;
                };
                let timer = e.timer(Point::PodGroupPostFilter, sampled);
                let (result, status) =
                    plugin.pod_group_post_filter(self, group, members, snapshot, place);
                timer.stop(status.code());
                match status.code() {
                    Code::Success | Code::UnschedulableAndUnresolvable => {
                        return (result, status.with_plugin(e.name.clone()));
                    }
                    Code::Unschedulable => {
                        reasons.extend(status.reasons().iter().cloned());
                        rejector.get_or_insert_with(|| e.name.clone());
                    }
                    _ => {
                        return (
                            None,
                            Status::error(format!(
                                "error in {:?} PodGroupPostFilter plugins: {}",
                                e.name,
                                status.message()
                            ))
                            .with_plugin(e.name.clone()),
                        );
                    }
                }
            }
            let status = Status::with_reasons(Code::Unschedulable, reasons);
            match rejector {
                Some(name) => (None, status.with_plugin(name)),
                None => (None, status),
            }
        };
        self.at_point(Point::PodGroupPostFilter, each, |r| r.1.code())
    }

    /// PostFilter: stops at the first Success, UnschedulableAndUnresolvable or Error; otherwise
    /// returns Unschedulable with every plugin's reasons and the last meaningful result.
    pub fn run_post_filter_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        self.at_point(
            Point::PostFilter,
            || self.post_filter_each(state, pod, snapshot, filtered),
            |r| r.1.code(),
        )
    }

    fn post_filter_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let sampled = state.record_plugin_metrics();
        let mut result = None;
        let mut reasons = Vec::new();
        let mut rejector: Option<Arc<str>> = None;
        for e in self.at(ExtensionPoint::PostFilter) {
            let Some(p) = e.plugin.as_post_filter() else {
                continue;
            };
            let timer = e.timer(Point::PostFilter, sampled);
            let (r, s) = p.post_filter_with_framework(self, state, pod, snapshot, filtered);
            timer.stop(s.code());
            if s.is_success() {
                return (r, s);
            }
            if s.code() == Code::UnschedulableAndUnresolvable {
                return (r, s.with_plugin(e.name.clone()));
            }
            if !s.is_rejected() {
                return (None, Status::error(s.message()).with_plugin(e.name.clone()));
            }
            if let Some(r) = r
                && r.nominating_info.mode != crate::framework::interface::NominatingMode::Noop
            {
                result = Some(r);
            }
            reasons.extend(s.reasons().iter().cloned());
            if rejector.is_none() {
                rejector = Some(e.name.clone());
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        if let Some(r) = rejector {
            s.set_plugin(r);
        }
        (result, s)
    }
}
