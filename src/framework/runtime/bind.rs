//! The binding cycle's plugins: PreBindPreFlight, PreBind, Bind and PostBind.

use std::collections::BTreeSet;

use super::{Framework, rejection_or_error};
use crate::config::ExtensionPoint;
use crate::framework::interface::{Code, CycleState, Status};
use crate::framework::metrics::Point;
use crate::framework::types::PodInfo;

impl Framework {
    /// Upstream's RunPreBindPreFlights: Success when some PreBind plugin will act, Skip when none
    /// will, Error when one failed or answered anything else. Plugins that skip are recorded in
    /// `state` so PreBind passes them over.
    pub fn run_pre_bind_pre_flights(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        self.at_point(
            Point::PreBindPreFlight,
            || self.pre_bind_pre_flight_each(state, pod, node_name),
            Status::code,
        )
    }

    fn pre_bind_pre_flight_each(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut skip = BTreeSet::new();
        let mut out = Status::skip();
        for e in self.at(ExtensionPoint::PreBind) {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            let timer = e.timer(Point::PreBindPreFlight, sampled);
            let s = p.pre_bind_pre_flight(state, pod, node_name);
            timer.stop(s.code());
            match s.code() {
                Code::Success => out = Status::success(),
                Code::Skip => {
                    skip.insert(e.name.clone());
                }
                Code::Error => {
                    return Status::error(format!(
                        "running PreBindPreFlight {:?}: {}",
                        e.name.as_ref(),
                        s.message()
                    ));
                }
                other => {
                    return Status::error(format!(
                        "PreBindPreFlight {} returned {other:?}, which is unsupported. It is supposed to return Success, Skip, or Error status",
                        e.name
                    ));
                }
            }
        }
        state.set_skip_pre_bind_plugins(skip);
        out
    }

    /// PreBind in order (those whose PreBindPreFlight skipped are passed over); the first failure
    /// stops.
    pub async fn run_pre_bind_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let since = self.point_clock();
        let s = self.pre_bind_each(state, pod, node_name).await;
        self.observe_point(Point::PreBind, s.code(), since);
        s
    }

    async fn pre_bind_each(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        for e in self.at(ExtensionPoint::PreBind) {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            if state.skip_pre_bind_plugins().contains(&e.name) {
                continue;
            }
            let timer = e.timer(Point::PreBind, sampled);
            let s = p.pre_bind(state, pod, node_name).await;
            timer.stop(s.code());
            if !s.is_success() {
                return rejection_or_error("PreBind", &e.name, s);
            }
        }
        Status::success()
    }

    /// Bind: the first plugin that does not return Skip decides.
    pub async fn run_bind_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node_name: &str,
    ) -> Status {
        let since = self.point_clock();
        let s = self.bind_each(state, pod, node_name).await;
        self.observe_point(Point::Bind, s.code(), since);
        s
    }

    async fn bind_each(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let sampled = state.record_plugin_metrics();
        let mut last = Status::skip();
        for e in self.at(ExtensionPoint::Bind) {
            let Some(p) = e.plugin.as_bind() else {
                continue;
            };
            let timer = e.timer(Point::Bind, sampled);
            let s = p.bind(state, pod, node_name).await;
            timer.stop(s.code());
            if s.is_skip() {
                last = s;
                continue;
            }
            if !s.is_success() {
                return rejection_or_error("Bind", &e.name, s);
            }
            return s;
        }
        last
    }

    /// PostBind (informational).
    pub async fn run_post_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node_name: &str) {
        let sampled = state.record_plugin_metrics();
        let since = self.point_clock();
        for e in self.at(ExtensionPoint::PostBind) {
            if let Some(p) = e.plugin.as_post_bind() {
                let timer = e.timer(Point::PostBind, sampled);
                p.post_bind(state, pod, node_name).await;
                timer.stop(Code::Success);
            }
        }
        self.observe_point(Point::PostBind, Code::Success, since);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fwk_with, log};
    use super::*;
    use crate::framework::testing::{Fake, PodBuilder, handle, profile, registry_with};
    use ExtensionPoint::*;

    #[tokio::test]
    async fn bind_first_non_skip_wins() {
        let l = log();
        let a = Fake::new("A", &l); // Skip
        let mut b = Fake::new("B", &l);
        b.bind = Some(Code::Success);
        let c = Fake::new("C", &l);
        let (reg, _) = registry_with(vec![a, b, c]);
        let (h, api) = handle();
        let mut spec = profile(&[(PreBind, &["A"]), (PostBind, &["C"])]);
        spec.plugins.insert(
            Bind,
            vec![
                ("A".into(), 0),
                ("B".into(), 0),
                ("DefaultBinder".into(), 0),
            ],
        );
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let pod = PodBuilder::new("p").info();
        let state = CycleState::new();
        assert!(
            fwk.run_pre_bind_plugins(&state, &pod, "n1")
                .await
                .is_success()
        );
        assert!(fwk.run_bind_plugins(&state, &pod, "n1").await.is_success());
        fwk.run_post_bind_plugins(&state, &pod, "n1").await;
        assert_eq!(
            l.lock().clone(),
            ["A.PreBind", "A.Bind", "B.Bind", "C.PostBind"]
        );
        assert!(
            api.requests().is_empty(),
            "DefaultBinder must not run after B bound"
        );
    }

    #[tokio::test]
    async fn pre_bind_pre_flights_as_upstream() {
        let run = |codes: &[Code]| {
            let l = log();
            let names = ["A", "B", "C"];
            let fakes: Vec<Fake> = codes
                .iter()
                .zip(names)
                .map(|(c, n)| {
                    let mut f = Fake::new(n, &l);
                    f.pre_bind_pre_flight = Some(*c);
                    f
                })
                .collect();
            let fwk = fwk_with(fakes, &[(PreBind, &names[..codes.len()])]);
            let mut state = CycleState::new();
            let s = fwk.run_pre_bind_pre_flights(&mut state, &PodBuilder::new("p").info(), "n1");
            (fwk, state, s, l)
        };
        // Any Success: PreBind will act; the plugins that skipped are passed over at PreBind.
        let (fwk, state, s, l) = run(&[Code::Skip, Code::Success, Code::Skip]);
        assert!(s.is_success());
        let pod = PodBuilder::new("p").info();
        assert!(
            fwk.run_pre_bind_plugins(&state, &pod, "n1")
                .await
                .is_success()
        );
        assert_eq!(
            l.lock().clone(),
            [
                "A.PreBindPreFlight",
                "B.PreBindPreFlight",
                "C.PreBindPreFlight",
                "B.PreBind"
            ]
        );
        // All Skip: nothing will happen at PreBind.
        assert!(run(&[Code::Skip, Code::Skip]).2.is_skip());
        // Error stops; any other code is an error too.
        let (_, _, s, _) = run(&[Code::Error, Code::Success]);
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message().starts_with("running PreBindPreFlight \"A\""),
            "{}",
            s.message()
        );
        let (_, _, s, _) = run(&[Code::Unschedulable]);
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message()
                .contains("supposed to return Success, Skip, or Error")
        );
    }
}
