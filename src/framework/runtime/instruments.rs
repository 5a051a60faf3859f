//! The metric handles a framework records into: each plugin's at each extension point (upstream's
//! instrumented plugins), the extension points' own, and the clocks the `Run*Plugins` methods use.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

use super::{Entry, Framework};
use crate::config::ExtensionPoint;
use crate::framework::interface::{Code, CycleState};
use crate::framework::metrics::{
    ByStatus, ExtensionPointLabels, FrameworkMetrics, PluginEvaluationLabels, PluginLabels, Point,
    Running, Sampler,
};

impl Entry {
    /// Times one call at `point` when the cycle is `sampled` (and metrics are recorded).
    pub(super) fn timer(&self, point: Point, sampled: bool) -> Timer<'_> {
        Timer(
            sampled
                .then(|| self.metrics.as_ref()?.durations_at(point))
                .flatten()
                .map(|d| (d, Instant::now())),
        )
    }

    /// For the per-node loops: records the call that ends now, begun at `since` (the previous
    /// call's end), and returns now, so each call costs one clock read. `None` (a cycle not
    /// sampled) stays `None`.
    pub(super) fn lap(&self, point: Point, code: Code, since: Option<Instant>) -> Option<Instant> {
        let since = since?;
        let now = Instant::now();
        if let Some(d) = self.metrics.as_ref().and_then(|m| m.durations_at(point)) {
            d.observe(code, (now - since).as_secs_f64());
        }
        Some(now)
    }

    /// Counts one evaluation (PreFilter, Filter, PreScore and Score plugins, as upstream).
    pub(super) fn evaluated(&self) {
        if let Some(c) = self.metrics.as_ref().and_then(|m| m.evaluations.as_ref()) {
            c.inc();
        }
    }
}

/// A plugin's metric handles at one extension point (upstream's instrumented plugins), created
/// with the framework so that per-node calls build no label set.
pub(super) struct PluginMetrics {
    /// `scheduler_plugin_evaluation_total` (PreFilter, Filter, PreScore, Score only).
    evaluations: Option<Counter>,
    /// `scheduler_plugin_execution_duration_seconds` at the point and at its extensions
    /// (PreFilter's AddPod and RemovePod, Score's NormalizeScore, Reserve's Unreserve,
    /// PreBind's PreBindPreFlight).
    durations: Vec<(Point, ByStatus<PluginLabels>)>,
}

impl PluginMetrics {
    pub(super) fn new(
        m: &FrameworkMetrics,
        profile: &str,
        plugin: &str,
        ep: ExtensionPoint,
    ) -> Self {
        let (points, evaluated): (&[Point], bool) = match ep {
            ExtensionPoint::PreEnqueue => (&[Point::PreEnqueue], false),
            ExtensionPoint::QueueSort => (&[], false),
            ExtensionPoint::PreFilter => (
                &[
                    Point::PreFilter,
                    Point::PreFilterExtensionAddPod,
                    Point::PreFilterExtensionRemovePod,
                ],
                true,
            ),
            ExtensionPoint::Filter => (&[Point::Filter], true),
            ExtensionPoint::PostFilter => (&[Point::PostFilter], false),
            ExtensionPoint::PreScore => (&[Point::PreScore], true),
            ExtensionPoint::Score => (&[Point::Score, Point::ScoreExtensionNormalize], true),
            ExtensionPoint::Reserve => (&[Point::Reserve, Point::Unreserve], false),
            ExtensionPoint::Permit => (&[Point::Permit], false),
            ExtensionPoint::PreBind => (&[Point::PreBind, Point::PreBindPreFlight], false),
            ExtensionPoint::Bind => (&[Point::Bind], false),
            ExtensionPoint::PostBind => (&[Point::PostBind], false),
            ExtensionPoint::PlacementGenerate => (&[Point::PlacementGenerate], false),
            ExtensionPoint::PlacementScore => (
                &[
                    Point::PlacementScore,
                    Point::PlacementScoreExtensionNormalize,
                ],
                false,
            ),
            ExtensionPoint::PodGroupPostFilter => (&[Point::PodGroupPostFilter], false),
        };
        let evaluations = evaluated.then(|| {
            m.plugin_evaluation
                .get_or_create_owned(&PluginEvaluationLabels {
                    plugin: plugin.into(),
                    extension_point: points[0].as_str().into(),
                    profile: profile.into(),
                })
        });
        let durations = points
            .iter()
            .map(|p| {
                let labels = PluginLabels {
                    plugin: plugin.into(),
                    extension_point: p.as_str().into(),
                    status: String::new(),
                };
                (*p, ByStatus::new(&m.plugin_execution_duration, labels))
            })
            .collect();
        PluginMetrics {
            evaluations,
            durations,
        }
    }

    fn durations_at(&self, point: Point) -> Option<&ByStatus<PluginLabels>> {
        self.durations
            .iter()
            .find(|(p, _)| *p == point)
            .map(|(_, d)| d)
    }
}

/// A plugin call being timed (nothing in cycles that are not sampled).
pub(super) struct Timer<'a>(Option<(&'a ByStatus<PluginLabels>, Instant)>);

impl Timer<'_> {
    pub(super) fn stop(self, code: Code) {
        if let Some((d, since)) = self.0 {
            d.observe_since(code, since);
        }
    }
}

/// The framework's own metric handles: the process's families, and the extension points' series
/// of this profile.
pub(super) struct Instruments {
    shared: Arc<FrameworkMetrics>,
    /// `scheduler_framework_extension_point_duration_seconds`, by [`Point`].
    points: Vec<ByStatus<ExtensionPointLabels>>,
    /// Which PreEnqueue runs time their plugins (upstream samples them apart from cycles).
    pub(super) pre_enqueue: Sampler,
    /// The PlacementFeasible plugin's durations: the point is not configured, so the plugin
    /// has no entry of its own there.
    placement_feasible: Option<ByStatus<PluginLabels>>,
}

impl Instruments {
    /// `placement_feasible`: the name of the plugin that is the profile's PlacementFeasible.
    pub(super) fn new(
        shared: &Arc<FrameworkMetrics>,
        profile: &str,
        placement_feasible: Option<&str>,
    ) -> Self {
        let points = Point::ALL
            .iter()
            .map(|p| {
                let labels = ExtensionPointLabels {
                    extension_point: p.as_str().into(),
                    status: String::new(),
                    profile: profile.into(),
                };
                ByStatus::new(&shared.extension_point_duration, labels)
            })
            .collect();
        let placement_feasible = placement_feasible.map(|plugin| {
            let labels = PluginLabels {
                plugin: plugin.into(),
                extension_point: Point::PlacementFeasible.as_str().into(),
                status: String::new(),
            };
            ByStatus::new(&shared.plugin_execution_duration, labels)
        });
        Instruments {
            shared: shared.clone(),
            points,
            pre_enqueue: Sampler::default(),
            placement_feasible,
        }
    }
}

impl Framework {
    /// The metric handles this framework records into, if any.
    pub fn metrics(&self) -> Option<&Arc<FrameworkMetrics>> {
        self.instruments.as_ref().map(|i| &i.shared)
    }

    /// The start of an extension point's run, when metrics are recorded.
    pub fn point_clock(&self) -> Option<Instant> {
        self.instruments.as_ref().map(|_| Instant::now())
    }

    /// Records an extension point's run that took `took`.
    pub fn observe_point_duration(&self, point: Point, code: Code, took: std::time::Duration) {
        if let Some(i) = &self.instruments {
            i.points[point as usize].observe(code, took.as_secs_f64());
        }
    }

    /// Records an extension point's run started at `since` (from [`Framework::point_clock`]).
    pub fn observe_point(&self, point: Point, code: Code, since: Option<Instant>) {
        if let (Some(i), Some(since)) = (&self.instruments, since) {
            i.points[point as usize].observe_since(code, since);
        }
    }

    /// Runs `body` (the plugins of one extension point) and records its duration with the code
    /// `code` reads from its result.
    pub(super) fn at_point<R>(
        &self,
        point: Point,
        body: impl FnOnce() -> R,
        code: impl FnOnce(&R) -> Code,
    ) -> R {
        let since = self.point_clock();
        let r = body();
        self.observe_point(point, code(&r), since);
        r
    }

    /// The start of a per-node loop's first plugin call, in sampled cycles of an instrumented
    /// framework (see `Entry::lap`).
    pub(super) fn plugin_clock(&self, state: &CycleState) -> Option<Instant> {
        (state.record_plugin_metrics() && self.instruments.is_some()).then(Instant::now)
    }

    /// Times the PlacementFeasible plugin's call when `sampled` (and metrics are recorded).
    pub(super) fn placement_feasible_timer(&self, sampled: bool) -> Timer<'_> {
        Timer(
            sampled
                .then(|| self.instruments.as_ref()?.placement_feasible.as_ref())
                .flatten()
                .map(|d| (d, Instant::now())),
        )
    }

    /// `scheduler_goroutines{operation}` counts `workers` until the guard drops.
    pub fn running(&self, operation: &str, workers: usize) -> Option<Running> {
        self.metrics().map(|m| m.running(operation, workers))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::log;
    use super::*;
    use crate::framework::interface::{
        CycleState, GroupInCycle, Placement, PlacementAssignments, PlacementProgress,
    };
    use crate::framework::testing::{
        Fake, PodBuilder, handle, profile, registry_with, snapshot_of,
    };
    use ExtensionPoint::*;

    /// A framework over fakes A (rejects n1 at Filter) and B, recording into `metrics`.
    fn instrumented(metrics: &Arc<FrameworkMetrics>) -> Framework {
        let l = log();
        let mut a = Fake::new("A", &l);
        a.filter
            .insert("n1".into(), (Code::Unschedulable, "A says no".into()));
        a.pre_score = Some(Code::Skip);
        let mut b = Fake::new("B", &l);
        b.normalize_factor = Some(1);
        let (reg, _) = registry_with(vec![a, b]);
        let (mut h, _) = handle();
        h.metrics = Some(metrics.clone());
        let spec = profile(&[
            (PreFilter, &["A"]),
            (Filter, &["A", "B"]),
            (PreScore, &["A", "B"]),
            (Score, &["B"]),
        ]);
        Framework::new(&spec, &reg, h).expect("framework")
    }

    /// The value of the sample `line` (name and labels) of `text`.
    fn sample(text: &str, line: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
    }

    fn exposition(m: &FrameworkMetrics) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("ep", "", m.extension_point_duration.clone());
        registry.register("plugin", "", m.plugin_execution_duration.clone());
        registry.register("eval", "", m.plugin_evaluation.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    /// A pod group's points are timed on every run, as upstream's; their plugins in sampled
    /// runs only, PlacementScore per placement and its normalization once.
    #[test]
    fn a_groups_points_are_timed_every_run_and_their_plugins_in_sampled_ones() {
        let metrics = Arc::new(FrameworkMetrics::default());
        let (reg, _) = registry_with(vec![]);
        let (mut h, _) = handle();
        h.metrics = Some(metrics.clone());
        let spec = profile(&[
            (PreEnqueue, &["GangScheduling"]),
            (PlacementScore, &["PodGroupPodsCount"]),
        ]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let group: k8s_openapi::api::scheduling::v1beta1::PodGroup =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "g"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            }))
            .expect("pod group");
        let view = GroupInCycle {
            group: &group,
            scheduled: &[],
        };
        let pod = PodBuilder::new("m").info();
        let (a, b) = (
            Placement {
                name: "a".into(),
                nodes: Vec::new(),
            },
            Placement {
                name: "b".into(),
                nodes: Vec::new(),
            },
        );
        let assignments = [
            PlacementAssignments {
                placement: &a,
                members: vec![(&pod, "n1")],
            },
            PlacementAssignments {
                placement: &b,
                members: Vec::new(),
            },
        ];
        let snap = snapshot_of(&["n1"]);
        let progress = PlacementProgress {
            remaining: 1,
            scheduled: 0,
        };
        let run = |sampled: bool| {
            let every = Placement {
                name: String::new(),
                nodes: Vec::new(),
            };
            fwk.run_placement_generate_plugins(&view, every, &snap, sampled)
                .expect("the placement of every node");
            assert_eq!(
                fwk.run_placement_feasible_plugins(&group, progress, sampled)
                    .code(),
                Code::Unschedulable
            );
            let totals = fwk
                .run_placement_score_plugins(&view, &assignments, sampled)
                .expect("scores");
            assert_eq!(totals, [100, 0]);
        };
        run(false);
        let text = exposition(&metrics);
        for (point, status) in [
            ("PlacementGenerate", "Success"),
            ("PlacementFeasible", "Unschedulable"),
            ("PlacementScore", "Success"),
        ] {
            let line = format!(
                r#"ep_count{{extension_point="{point}",status="{status}",profile="test"}}"#
            );
            assert_eq!(sample(&text, &line), Some(1.0), "{line}\n{text}");
        }
        assert!(!text.contains("plugin_count"), "{text}");
        run(true);
        let text = exposition(&metrics);
        for (plugin, point, status, count) in [
            ("GangScheduling", "PlacementFeasible", "Unschedulable", 1.0),
            ("PodGroupPodsCount", "PlacementScore", "Success", 2.0),
            (
                "PodGroupPodsCount",
                "PlacementScoreExtensionNormalize",
                "Success",
                1.0,
            ),
        ] {
            let line = format!(
                r#"plugin_count{{plugin="{plugin}",extension_point="{point}",status="{status}"}}"#
            );
            assert_eq!(sample(&text, &line), Some(count), "{line}\n{text}");
        }
    }

    #[test]
    fn extension_points_and_evaluations_are_recorded_every_cycle_plugins_in_sampled_ones() {
        let metrics = Arc::new(FrameworkMetrics::default());
        let fwk = instrumented(&metrics);
        let pod = PodBuilder::new("p").info();
        let snap = snapshot_of(&["n1", "n2"]);
        let cycle = |sampled: bool| {
            let mut state = CycleState::new();
            state.set_record_plugin_metrics(sampled);
            let (_, s, _) = fwk.run_pre_filter_plugins(&mut state, &pod, &snap);
            assert!(s.is_success());
            for node in snap.nodes() {
                fwk.run_filter_plugins(&state, &pod, node);
            }
            let nodes = &snap.nodes()[1..];
            assert!(
                fwk.run_pre_score_plugins(&mut state, &pod, &snap, nodes)
                    .is_success()
            );
            fwk.run_score_plugins(&state, &pod, nodes).expect("scores");
        };
        cycle(false);
        let text = exposition(&metrics);
        assert_eq!(
            sample(
                &text,
                r#"ep_count{extension_point="PreFilter",status="Success",profile="test"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                r#"ep_count{extension_point="Score",status="Success",profile="test"}"#
            ),
            Some(1.0)
        );
        // Filter's extension point is timed over all nodes by the algorithm, not per node here.
        assert!(
            !text.contains(r#"extension_point="Filter",status"#),
            "{text}"
        );
        // A ran on both nodes, B only where A let the pod through; A skipped PreScore.
        for (line, n) in [
            (
                r#"eval_total{plugin="A",extension_point="PreFilter",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="Filter",profile="test"}"#,
                2.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="Filter",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="PreScore",profile="test"}"#,
                0.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="PreScore",profile="test"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="B",extension_point="Score",profile="test"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, line), Some(n), "{line}:\n{text}");
        }
        // Not sampled: no plugin was timed.
        assert!(!text.contains("plugin_count"), "{text}");

        cycle(true);
        let text = exposition(&metrics);
        for (line, n) in [
            (
                r#"plugin_count{plugin="A",extension_point="Filter",status="Unschedulable"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="A",extension_point="Filter",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="Filter",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="A",extension_point="PreScore",status="Skip"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="Score",status="Success"}"#,
                1.0,
            ),
            (
                r#"plugin_count{plugin="B",extension_point="ScoreExtensionNormalize",status="Success"}"#,
                1.0,
            ),
            (
                r#"eval_total{plugin="A",extension_point="Filter",profile="test"}"#,
                4.0,
            ),
        ] {
            assert_eq!(sample(&text, line), Some(n), "{line}:\n{text}");
        }
    }

    #[tokio::test]
    async fn binding_points_and_permit_waits_are_recorded() {
        let metrics = Arc::new(FrameworkMetrics::default());
        let l = log();
        let mut a = Fake::new("A", &l);
        a.permit = Some((Code::Wait, Duration::from_secs(10)));
        a.reserve = Some(Code::Success);
        a.bind = Some(Code::Success);
        let (reg, _) = registry_with(vec![a]);
        let (mut h, _) = handle();
        h.metrics = Some(metrics.clone());
        let spec = profile(&[(Reserve, &["A"]), (Permit, &["A"]), (Bind, &["A"])]);
        let fwk = Framework::new(&spec, &reg, h).expect("framework");
        let pod = PodBuilder::new("p").arc_info();
        let mut state = CycleState::new();
        state.set_record_plugin_metrics(true);
        assert!(
            fwk.run_reserve_plugins_reserve(&mut state, &pod, "n1")
                .is_success()
        );
        assert!(fwk.run_permit_plugins(&mut state, &pod, "n1").is_wait());
        fwk.waiting_pods()
            .get(pod.uid())
            .expect("waiting")
            .allow("A");
        assert!(fwk.wait_on_permit(&pod).await.is_success());
        assert!(fwk.run_bind_plugins(&state, &pod, "n1").await.is_success());
        fwk.run_reserve_plugins_unreserve(&mut state, &pod, "n1");
        let mut text = exposition(&metrics);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("wait", "", metrics.permit_wait_duration.clone());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"ep_count{extension_point="Reserve",status="Success",profile="test"}"#,
            r#"ep_count{extension_point="Permit",status="Wait",profile="test"}"#,
            r#"ep_count{extension_point="Bind",status="Success",profile="test"}"#,
            r#"ep_count{extension_point="Unreserve",status="Success",profile="test"}"#,
            r#"plugin_count{plugin="A",extension_point="Permit",status="Wait"}"#,
            r#"plugin_count{plugin="A",extension_point="Unreserve",status="Success"}"#,
            r#"wait_count{result="Success"}"#,
        ] {
            assert_eq!(sample(&text, line), Some(1.0), "{line}:\n{text}");
        }
    }
}
