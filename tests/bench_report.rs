//! Unit tests of `make bench`'s report and plot (`benches/scheduler_perf/{report,plot}.rs`): the
//! bench binary has no test harness of its own, so its pure modules are compiled here.
#![allow(dead_code)] // the bench's modules, of which these tests use a part

#[path = "../benches/scheduler_perf/contenders.rs"]
mod contenders;
#[path = "../benches/scheduler_perf/plot.rs"]
mod plot;
#[path = "../benches/scheduler_perf/report.rs"]
mod report;
#[path = "support/mod.rs"]
mod support;
#[path = "../benches/scheduler_perf/workloads.rs"]
mod workloads;

mod report_tests {
    use super::contenders::Contender;
    use super::report::*;

    fn spread(v: &[f64]) -> Spread {
        Spread::of(v.to_vec())
    }

    #[test]
    fn a_ratio_is_a_win_or_a_loss_only_when_the_spreads_do_not_overlap() {
        let fast = spread(&[300.0, 320.0, 310.0]);
        let slow = spread(&[200.0, 210.0, 190.0]);
        let wide = spread(&[180.0, 330.0, 250.0]);
        assert_eq!(Ratio::of(&fast, &slow).map(|r| r.versus()), Some("win"));
        assert_eq!(Ratio::of(&slow, &fast).map(|r| r.versus()), Some("loss"));
        assert_eq!(Ratio::of(&fast, &wide).map(|r| r.versus()), Some("overlap"));
        let r = Ratio::of(&fast, &slow).unwrap();
        assert!((r.low - 300.0 / 210.0).abs() < 1e-9);
        assert!((r.high - 320.0 / 190.0).abs() < 1e-9);
        assert!((r.median - 310.0 / 200.0).abs() < 1e-9);
    }

    #[test]
    fn a_target_is_met_or_missed_only_by_the_whole_range() {
        let r = |low, high| Ratio {
            median: (low + high) / 2.0,
            low,
            high,
        };
        assert_eq!(r(1.6, 1.9).at_least(1.5), Side::Met);
        assert_eq!(r(1.2, 1.4).at_least(1.5), Side::Missed);
        assert_eq!(r(1.4, 1.6).at_least(1.5), Side::Unsure);
        assert_eq!(r(0.2, 0.3).at_most(1.0 / 3.0), Side::Met);
        assert_eq!(r(0.4, 0.5).at_most(1.0 / 3.0), Side::Missed);
        assert_eq!(r(0.3, 0.4).at_most(1.0 / 3.0), Side::Unsure);
    }

    fn summary_of(pps: &[f64], cpu: &[f64]) -> Result<Summary, String> {
        let rounds: Vec<Round> = pps
            .iter()
            .zip(cpu)
            .map(|(p, c)| {
                Ok(Figures {
                    pods_per_second: *p,
                    cpu_seconds: *c,
                    peak_rss_mb: 10.0,
                    ..Figures::default()
                })
            })
            .collect();
        summary(&rounds)
    }

    #[test]
    fn throughput_is_met_by_the_ceiling_bound_and_missed_below_upstream() {
        // 1.2x upstream but 0.95x the ceiling: met by the ceiling.
        let v = Verdicts::of(&[
            (Contender::Ksched, summary_of(&[950.0, 960.0], &[1.0, 1.0])),
            (
                Contender::Upstream,
                summary_of(&[790.0, 800.0], &[3.5, 3.6]),
            ),
            (
                Contender::Ceiling,
                summary_of(&[1000.0, 1000.0], &[0.1, 0.1]),
            ),
        ]);
        assert_eq!(v.throughput(), Some(Side::Met));
        assert_eq!(v.cpu(), Some(Side::Met));
        // Surely below upstream: missed whatever the ceiling says.
        let v = Verdicts::of(&[
            (Contender::Ksched, summary_of(&[300.0, 310.0], &[1.0, 1.0])),
            (
                Contender::Upstream,
                summary_of(&[400.0, 410.0], &[2.0, 2.0]),
            ),
            (Contender::Ceiling, summary_of(&[320.0, 320.0], &[0.1, 0.1])),
        ]);
        assert_eq!(v.throughput(), Some(Side::Missed));
        assert_eq!(v.cpu(), Some(Side::Missed));
    }

    #[test]
    fn a_workload_may_hold_ksched_to_more_than_the_usual_ratio() {
        // 2.5x upstream: met at the usual 1.5x, missed at topology-aware placement's 3x.
        let results = [
            (Contender::Ksched, summary_of(&[250.0, 250.0], &[1.0, 1.0])),
            (
                Contender::Upstream,
                summary_of(&[100.0, 100.0], &[2.0, 2.0]),
            ),
        ];
        assert_eq!(Verdicts::of(&results).throughput(), Some(Side::Met));
        let tas = super::workloads::Kind::TopologyGangs(4).pps_target();
        assert_eq!(
            Verdicts::of(&results).with_pps_target(tas).throughput(),
            Some(Side::Missed)
        );
    }

    #[test]
    fn the_bench_line_gives_each_contenders_api_writes_per_pod() {
        let with_writes = |writes: f64| {
            summary(&[Ok(Figures {
                pods_per_second: 100.0,
                api_writes_per_pod: Some(writes),
                ..Figures::default()
            })])
        };
        let line = bench_line(
            &first_workload(),
            &[
                (Contender::Ksched, with_writes(2.25)),
                (Contender::Upstream, with_writes(3.0)),
                (Contender::Ceiling, with_writes(2.0)),
            ],
        );
        assert!(
            line.contains(
                " ksched_api_writes_per_pod=2.25 upstream_api_writes_per_pod=3.00 ceiling_api_writes_per_pod=2.00"
            ),
            "{line}"
        );
    }

    /// Two ksched builds in one run: the line gives the base build's figures and, per figure,
    /// ksched's ratio to it with its range and a neutral verdict.
    #[test]
    fn the_bench_line_compares_ksched_with_the_base_build() {
        let run = |pps: &[f64], cpu: f64| {
            summary(
                &pps.iter()
                    .map(|p| {
                        Ok(Figures {
                            pods_per_second: *p,
                            cpu_seconds: cpu,
                            peak_rss_mb: 50.0,
                            ..Figures::default()
                        })
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let line = bench_line(
            &first_workload(),
            &[
                (Contender::Ksched, run(&[200.0, 210.0, 220.0], 1.0)),
                (Contender::KschedBase, run(&[100.0, 105.0, 110.0], 2.0)),
            ],
        );
        for part in [
            " ksched-base_pps=105.0 ",
            " ksched_vs_base_pps=2.00 ",
            " ksched_vs_base_pps_verdict=higher ",
            " ksched_vs_base_cpu=0.50 ",
            " ksched_vs_base_cpu_verdict=lower ",
            " ksched_vs_base_peak_rss=1.00 ",
            " ksched_vs_base_peak_rss_verdict=overlap ",
        ] {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
    }

    /// The default preset's first workload (the BENCH line's name and sizes).
    fn first_workload() -> super::workloads::Workload {
        super::workloads::workloads(super::workloads::Preset::Default)
            .into_iter()
            .next()
            .expect("a workload")
    }

    #[test]
    fn a_failed_round_fails_the_summary() {
        let rounds: Vec<Round> = vec![Ok(Figures::default()), Err("stalled".into())];
        assert_eq!(summary(&rounds).err().as_deref(), Some("stalled"));
        assert_eq!(summary(&[]).err().as_deref(), Some("not run"));
    }
}

mod plot_tests {
    use plotters::style::RGBColor;

    use super::contenders::Contender;
    use super::plot::*;
    use super::report::Spread;
    #[test]
    fn the_plot_has_a_bar_and_a_whisker_per_contender_and_names_each_workload() {
        let spread = |m: f64| Spread {
            median: m,
            min: m - 5.0,
            max: m + 5.0,
        };
        let workloads = vec![
            Workload {
                name: "SchedulingBasic",
                pods_per_second: vec![
                    (Contender::Ksched, Some(spread(400.0))),
                    (Contender::Upstream, Some(spread(300.0))),
                ],
            },
            Workload {
                name: "PreemptionBasic",
                pods_per_second: vec![
                    (Contender::Ksched, Some(spread(40.0))),
                    (Contender::Upstream, None),
                ],
            },
        ];
        let dir = std::env::temp_dir().join(format!("ksched-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        pods_per_second(&path, "small", 3, &workloads).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(svg.contains("SchedulingBasic") && svg.contains("PreemptionBasic"));
        assert!(svg.contains("ksched") && svg.contains("upstream"));
        // A bar per result (upstream failed on PreemptionBasic) and a swatch in the legend.
        let fills = |c: Contender| {
            let RGBColor(r, g, b) = colour(c);
            svg.matches(&format!("fill=\"#{r:02X}{g:02X}{b:02X}\""))
                .count()
        };
        assert_eq!(fills(Contender::Ksched), 2 + 1, "{svg}");
        assert_eq!(fills(Contender::Upstream), 1 + 1, "{svg}");
        // A whisker per bar.
        assert_eq!(svg.matches("stroke-width=\"2\"").count(), 3, "{svg}");
    }
}

mod workload_tests {
    use super::workloads::*;

    /// Upstream's `podgroup/tas` templates: nodes in racks (and zones) of 100, each gang's pods
    /// naming their PodGroup, 100m and 100Mi.
    #[test]
    fn topology_aware_gangs_follow_upstreams_templates() {
        let kind = Kind::TopologyGangs(4);
        let n = node(kind, "bench-node-250", 250);
        assert_eq!(n["metadata"]["labels"][RACK_LABEL], "rack-2");
        assert_eq!(
            n["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "zone-2"
        );
        let p = pod(kind, Role::Measured, "run", "ns", 9);
        assert_eq!(p["spec"]["schedulingGroup"]["podGroupName"], "gang-2");
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"],
            serde_json::json!({"cpu": "100m", "memory": "100Mi"})
        );
        assert_eq!(kind.topology_key(), Some(RACK_LABEL));
        assert_eq!(Kind::Gangs(3).topology_key(), None);
        // Whole gangs in every preset.
        for preset in [Preset::Small, Preset::Default, Preset::Large] {
            for w in workloads(preset) {
                if let Some(size) = w.kind.gang_size() {
                    assert_eq!(w.measure_pods % size, 0, "{} {preset:?}", w.name());
                    assert!(w.measure_pods > 0, "{} {preset:?}", w.name());
                }
            }
        }
    }
}
