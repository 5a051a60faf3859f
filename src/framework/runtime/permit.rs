//! Reserve and Unreserve, Permit, and waiting on Permit (the pods a plugin asked to wait).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Framework, rejection_or_error};
use crate::config::ExtensionPoint;
use crate::framework::interface::{Code, CycleState, MAX_PERMIT_TIMEOUT, Status};
use crate::framework::metrics::Point;
use crate::framework::types::PodInfo;
use crate::framework::waiting_pods::WaitingPod;

impl Framework {
    /// Reserve in order; on a failure the caller runs [`Framework::run_reserve_plugins_unreserve`].
    pub fn run_reserve_plugins_reserve(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        self.at_point(
            Point::Reserve,
            || {
                for e in self.at(ExtensionPoint::Reserve) {
                    let Some(p) = e.plugin.as_reserve() else {
                        continue;
                    };
                    let timer = e.timer(Point::Reserve, sampled);
                    let s = p.reserve(state, pod, node_name);
                    timer.stop(s.code());
                    if !s.is_success() {
                        return rejection_or_error("Reserve", &e.name, s)
                            .with_plugin(e.name.clone());
                    }
                }
                Status::success()
            },
            Status::code,
        )
    }

    /// Unreserve in reverse order.
    pub fn run_reserve_plugins_unreserve(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) {
        let sampled = state.record_plugin_metrics();
        let since = self.point_clock();
        for e in self.at(ExtensionPoint::Reserve).iter().rev() {
            if let Some(p) = e.plugin.as_reserve() {
                let timer = e.timer(Point::Unreserve, sampled);
                p.unreserve(state, pod, node_name);
                timer.stop(Code::Success);
            }
        }
        self.observe_point(Point::Unreserve, Code::Success, since);
    }

    /// Permit: a rejection stops at once; `Wait` from any plugin registers the pod as waiting (each
    /// plugin's timeout capped at 15 minutes) and returns Wait.
    pub fn run_permit_plugins(
        &self,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node_name: &str,
    ) -> Status {
        self.at_point(
            Point::Permit,
            || self.permit_each(state, pod, node_name),
            Status::code,
        )
    }

    fn permit_each(&self, state: &mut CycleState, pod: &Arc<PodInfo>, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut waits: HashMap<String, Duration> = HashMap::new();
        for e in self.at(ExtensionPoint::Permit) {
            let Some(p) = e.plugin.as_permit() else {
                continue;
            };
            let timer = e.timer(Point::Permit, sampled);
            let (s, timeout) = p.permit(state, pod, node_name);
            timer.stop(s.code());
            if s.is_success() {
                continue;
            }
            if s.is_wait() {
                waits.insert(e.name.to_string(), timeout.min(MAX_PERMIT_TIMEOUT));
                continue;
            }
            return rejection_or_error("Permit", &e.name, s).with_plugin(e.name.clone());
        }
        if !waits.is_empty() {
            self.handle
                .waiting_pods
                .add(Arc::new(WaitingPod::new(pod.clone(), waits)));
            return Status::new(
                Code::Wait,
                format!(
                    "one or more plugins asked to wait and no plugin rejected pod {:?}",
                    pod.name()
                ),
            );
        }
        Status::success()
    }

    /// Whether the pod waits at Permit.
    pub fn will_wait_on_permit(&self, pod: &PodInfo) -> bool {
        self.handle.waiting_pods.get(pod.uid()).is_some()
    }

    /// Waits until a waiting pod is allowed or rejected (or times out); success when it was not
    /// waiting. The pod leaves the waiting map.
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let Some(wp) = self.handle.waiting_pods.get(pod.uid()) else {
            return Status::success();
        };
        let since = Instant::now();
        let s = wp.wait().await;
        if let Some(m) = self.metrics() {
            m.permit_wait_duration
                .get_or_create(&crate::framework::metrics::ResultLabels {
                    result: s.code().as_str().into(),
                })
                .observe(since.elapsed().as_secs_f64());
        }
        self.handle.waiting_pods.remove(pod.uid());
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let mut out = Status::error(format!("waiting on permit for pod: {}", s.message()));
        if let Some(p) = s.plugin() {
            out.set_plugin(p);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fwk_with, log};
    use super::*;
    use crate::framework::testing::{Fake, PodBuilder};
    use ExtensionPoint::*;

    #[test]
    fn reserve_then_unreserve_in_reverse() {
        let l = log();
        let a = Fake::new("A", &l);
        let mut b = Fake::new("B", &l);
        b.reserve = Some(Code::Unschedulable);
        let c = Fake::new("C", &l);
        let fwk = fwk_with(vec![a, b, c], &[(Reserve, &["A", "B", "C"])]);
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        let s = fwk.run_reserve_plugins_reserve(&mut state, &pod, "n1");
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("B")));
        fwk.run_reserve_plugins_unreserve(&mut state, &pod, "n1");
        assert_eq!(
            l.lock().clone(),
            [
                "A.Reserve",
                "B.Reserve",
                "C.Unreserve",
                "B.Unreserve",
                "A.Unreserve"
            ]
        );
    }

    #[tokio::test]
    async fn permit_wait_allow_and_reject() {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.permit = Some((Code::Wait, Duration::from_secs(60)));
        let mut b = Fake::new("B", &l);
        b.permit = Some((Code::Wait, Duration::from_secs(3600)));
        let fwk = fwk_with(vec![a, b], &[(Permit, &["A", "B"])]);
        let pod = PodBuilder::new("p").arc_info();
        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!(s.code(), Code::Wait);
        assert!(fwk.will_wait_on_permit(&pod));
        let wp = fwk.waiting_pods().get("p").expect("waiting");
        wp.allow("A");
        wp.allow("B");
        assert!(fwk.wait_on_permit(&pod).await.is_success());
        assert!(!fwk.will_wait_on_permit(&pod));

        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!(s.code(), Code::Wait);
        fwk.waiting_pods()
            .get("p")
            .expect("waiting")
            .reject("A", "gang incomplete");
        let s = fwk.wait_on_permit(&pod).await;
        assert_eq!(
            (s.code(), s.message(), s.plugin()),
            (Code::Unschedulable, "gang incomplete".into(), Some("A"))
        );

        let mut c = Fake::new("C", &l);
        c.permit = Some((Code::Unschedulable, Duration::ZERO));
        let fwk = fwk_with(vec![c], &[(Permit, &["C"])]);
        let s = fwk.run_permit_plugins(&mut CycleState::new(), &pod, "n1");
        assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("C")));
    }
}
