//! Figures of a run, their medians and spreads over the rounds, and the report: one `BENCH` line
//! per workload and target/bench/report.md (medians with their spreads, the verdicts, then every
//! round).
//!
//! A ratio between two contenders is a range, not a point: from the least favourable pairing of
//! their rounds to the most favourable (`low = min(a) / max(b)`, `high = max(a) / min(b)`). It is
//! called a win or a loss only when that range lies wholly on one side (the two spreads do not
//! overlap), and a target is met or missed only when the range lies wholly on one side of it;
//! otherwise the verdict is `overlap` / `unsure`: the machine's noise decides, not the code.

use std::fmt::Write as _;

use super::contenders::Contender;
use super::workloads::Workload;

/// Figures of one contender on one workload in one round.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    pub pods_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU seconds while the measured pods were scheduled.
    pub cpu_seconds: f64,
    /// VmHWM at the end of the run.
    pub peak_rss_mb: f64,
    /// VmRSS and RssAnon once the measured pods were bound and the contender idled.
    pub steady_rss_mb: f64,
    pub steady_anon_mb: f64,
    /// Upstream's `go_memstats_heap_inuse_bytes` at the same moment.
    pub go_heap_mb: Option<f64>,
    /// Topology-aware gangs: how many domains (racks) hold the measured pods (fewer: less
    /// fragmented).
    pub domains: Option<f64>,
    /// The API server's write requests while the measured pods were created and bound, per
    /// measured pod: the bench's own creates count too, so the ceiling's figure (a create and a
    /// binding) is the floor; what a scheduler writes above it (nominations, status, events)
    /// is what it costs a shared API server.
    pub api_writes_per_pod: Option<f64>,
}

/// What a round gave: figures, or why the contender failed the workload.
pub type Round = Result<Figures, String>;

pub fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One figure over the rounds: its median and the range the rounds gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: Vec<f64>) -> Spread {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let median = median_of(values);
        if min.is_finite() && max.is_finite() {
            Spread { median, min, max }
        } else {
            Spread {
                median,
                min: median,
                max: median,
            }
        }
    }

    /// `median (min-max)`, or just the median for a single round.
    fn show(&self, precision: usize) -> String {
        if self.min == self.max {
            format!("{:.precision$}", self.median)
        } else {
            format!(
                "{:.precision$} ({:.precision$}-{:.precision$})",
                self.median, self.min, self.max
            )
        }
    }
}

/// A contender's result on a workload: each figure's median (taken separately per figure) and
/// the spreads of the figures the verdicts compare.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: Figures,
    pub pods_per_second: Spread,
    pub cpu_seconds: Spread,
    pub peak_rss_mb: Spread,
}

impl Summary {
    fn of(rounds: &[Figures]) -> Summary {
        let spread = |f: fn(&Figures) -> f64| Spread::of(rounds.iter().map(f).collect());
        let med = |f: fn(&Figures) -> f64| spread(f).median;
        let heaps: Vec<f64> = rounds.iter().filter_map(|f| f.go_heap_mb).collect();
        let domains: Vec<f64> = rounds.iter().filter_map(|f| f.domains).collect();
        let writes: Vec<f64> = rounds.iter().filter_map(|f| f.api_writes_per_pod).collect();
        Summary {
            median: Figures {
                pods_per_second: med(|f| f.pods_per_second),
                p50_ms: med(|f| f.p50_ms),
                p99_ms: med(|f| f.p99_ms),
                cpu_seconds: med(|f| f.cpu_seconds),
                peak_rss_mb: med(|f| f.peak_rss_mb),
                steady_rss_mb: med(|f| f.steady_rss_mb),
                steady_anon_mb: med(|f| f.steady_anon_mb),
                go_heap_mb: (!heaps.is_empty()).then(|| median_of(heaps)),
                domains: (!domains.is_empty()).then(|| median_of(domains)),
                api_writes_per_pod: (!writes.is_empty()).then(|| median_of(writes)),
            },
            pods_per_second: spread(|f| f.pods_per_second),
            cpu_seconds: spread(|f| f.cpu_seconds),
            peak_rss_mb: spread(|f| f.peak_rss_mb),
        }
    }
}

/// A contender's result on a workload: its summary, or the first failure (one failed round fails
/// the workload: a median over the rounds that passed would hide it).
pub fn summary(rounds: &[Round]) -> Result<Summary, String> {
    if let Some(Err(e)) = rounds.iter().find(|r| r.is_err()) {
        return Err(e.clone());
    }
    let ok: Vec<Figures> = rounds
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect();
    if ok.is_empty() {
        return Err("not run".into());
    }
    Ok(Summary::of(&ok))
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The ratio `a / b` of two spreads: the ratio of the medians, and the range from the least to
/// the most favourable pairing of rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

/// Where a ratio's range lies against a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The whole range is on the good side.
    Met,
    /// The whole range is on the bad side.
    Missed,
    /// The range straddles it: the rounds cannot tell.
    Unsure,
}

impl Ratio {
    pub fn of(a: &Spread, b: &Spread) -> Option<Ratio> {
        (b.min > 0.0 && b.median > 0.0).then(|| Ratio {
            median: a.median / b.median,
            low: a.min / b.max,
            high: a.max / b.min,
        })
    }

    /// Against `threshold` where a higher ratio is better (throughput).
    pub fn at_least(&self, threshold: f64) -> Side {
        if self.low >= threshold {
            Side::Met
        } else if self.high < threshold {
            Side::Missed
        } else {
            Side::Unsure
        }
    }

    /// Against `threshold` where a lower ratio is better (CPU, memory).
    pub fn at_most(&self, threshold: f64) -> Side {
        if self.high <= threshold {
            Side::Met
        } else if self.low > threshold {
            Side::Missed
        } else {
            Side::Unsure
        }
    }

    /// Against 1 in neutral words (for figures where higher is not always better): `higher` or
    /// `lower` only when the spreads do not overlap.
    pub fn direction(&self) -> &'static str {
        if self.low > 1.0 {
            "higher"
        } else if self.high < 1.0 {
            "lower"
        } else {
            "overlap"
        }
    }

    /// Against 1 (higher is better): a win or a loss only when the spreads do not overlap.
    pub fn versus(&self) -> &'static str {
        match self.at_least(1.0) {
            Side::Met if self.low > 1.0 => "win",
            Side::Missed => "loss",
            _ => "overlap",
        }
    }

    fn show(&self) -> String {
        format!("{:.2} ({:.2}-{:.2})", self.median, self.low, self.high)
    }

    fn range(&self) -> String {
        format!("{:.2}-{:.2}", self.low, self.high)
    }
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Met => "met",
            Side::Missed => "missed",
            Side::Unsure => "unsure",
        }
    }
}

/// The performance targets ksched is held to (issue "Performance: the targets the last round
/// missed"): throughput at least 1.5x upstream's or 0.9x the ceiling's, and never below
/// upstream's; CPU at most a third of upstream's; peak RSS at most a quarter of upstream's.
pub const TARGET_PPS_VS_UPSTREAM: f64 = 1.5;
pub const TARGET_PPS_VS_CEILING: f64 = 0.9;
pub const TARGET_CPU_VS_UPSTREAM: f64 = 1.0 / 3.0;
pub const TARGET_RSS_VS_UPSTREAM: f64 = 0.25;

/// ksched's verdicts on one workload against upstream and the ceiling.
#[derive(Debug, Clone, Copy)]
pub struct Verdicts {
    pub pps_vs_upstream: Option<Ratio>,
    pub pps_vs_ceiling: Option<Ratio>,
    pub cpu_vs_upstream: Option<Ratio>,
    pub rss_vs_upstream: Option<Ratio>,
    /// The throughput ratio to upstream the workload is held to ([`TARGET_PPS_VS_UPSTREAM`]
    /// unless the workload sets its own).
    pub pps_target: f64,
}

impl Verdicts {
    pub fn of(results: &[(Contender, Result<Summary, String>)]) -> Verdicts {
        let get = |c: Contender| {
            results
                .iter()
                .find(|(x, _)| *x == c)
                .and_then(|(_, r)| r.as_ref().ok())
        };
        let (k, u, c) = (
            get(Contender::Ksched),
            get(Contender::Upstream),
            get(Contender::Ceiling),
        );
        let ratio = |a: Option<&Summary>, b: Option<&Summary>, f: fn(&Summary) -> Spread| {
            Ratio::of(&f(a?), &f(b?))
        };
        Verdicts {
            pps_vs_upstream: ratio(k, u, |s| s.pods_per_second),
            pps_vs_ceiling: ratio(k, c, |s| s.pods_per_second),
            cpu_vs_upstream: ratio(k, u, |s| s.cpu_seconds),
            rss_vs_upstream: ratio(k, u, |s| s.peak_rss_mb),
            pps_target: TARGET_PPS_VS_UPSTREAM,
        }
    }

    /// The same verdicts held to `target` times upstream's throughput.
    pub fn with_pps_target(self, target: f64) -> Verdicts {
        Verdicts {
            pps_target: target,
            ..self
        }
    }

    /// The throughput target: met when either bound is met surely, missed when both are missed
    /// surely (or ksched is surely below upstream).
    pub fn throughput(&self) -> Option<Side> {
        let up = self.pps_vs_upstream.map(|r| r.at_least(self.pps_target));
        let ceil = self
            .pps_vs_ceiling
            .map(|r| r.at_least(TARGET_PPS_VS_CEILING));
        if self
            .pps_vs_upstream
            .is_some_and(|r| r.at_least(1.0) == Side::Missed)
        {
            return Some(Side::Missed);
        }
        match (up, ceil) {
            (Some(Side::Met), _) | (_, Some(Side::Met)) => Some(Side::Met),
            (Some(Side::Missed), Some(Side::Missed) | None) | (None, Some(Side::Missed)) => {
                Some(Side::Missed)
            }
            (None, None) => None,
            _ => Some(Side::Unsure),
        }
    }

    pub fn cpu(&self) -> Option<Side> {
        self.cpu_vs_upstream
            .map(|r| r.at_most(TARGET_CPU_VS_UPSTREAM))
    }

    pub fn rss(&self) -> Option<Side> {
        self.rss_vs_upstream
            .map(|r| r.at_most(TARGET_RSS_VS_UPSTREAM))
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// The medians table's header.
pub const TABLE_HEADER: &str = "| workload | nodes | pods | contender | pods/s (min-max) | p50 ms | p99 ms | CPU s (min-max) | peak RSS MB (min-max) | steady RSS MB | steady anon MB | Go heap MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
/// The every-round table's header.
pub const ROUNDS_HEADER: &str = "| workload | round | contender | pods/s | p50 ms | p99 ms | CPU s | peak RSS MB | steady RSS MB | steady anon MB | Go heap MB |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
/// The verdicts table's header.
pub const VERDICTS_HEADER: &str = "| workload | pods/s ksched/upstream | vs upstream | pods/s ksched/ceiling | throughput target | CPU ksched/upstream | CPU target | peak RSS ksched/upstream | RSS target |\n|---|---|---|---|---|---|---|---|---|\n";

fn cells(f: &Figures) -> String {
    format!(
        "{:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {}",
        f.pods_per_second,
        f.p50_ms,
        f.p99_ms,
        f.cpu_seconds,
        f.peak_rss_mb,
        f.steady_rss_mb,
        f.steady_anon_mb,
        opt(f.go_heap_mb)
    )
}

fn summary_cells(s: &Summary) -> String {
    let f = &s.median;
    format!(
        "{} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {}",
        s.pods_per_second.show(1),
        f.p50_ms,
        f.p99_ms,
        s.cpu_seconds.show(2),
        s.peak_rss_mb.show(1),
        f.steady_rss_mb,
        f.steady_anon_mb,
        opt(f.go_heap_mb)
    )
}

fn failed_cells(reason: &str) -> String {
    format!("FAILED: {} | | | | | | | ", reason.replace('|', "/"))
}

/// A row of the every-round table.
pub fn round_row(w: &Workload, round: usize, c: Contender, r: &Round) -> String {
    let cells = match r {
        Ok(f) => cells(f),
        Err(e) => failed_cells(e),
    };
    format!(
        "| {} | {} | {} | {cells} |\n",
        w.name(),
        round + 1,
        c.name()
    )
}

/// A row of the medians table.
pub fn median_row(w: &Workload, c: Contender, s: &Result<Summary, String>) -> String {
    let cells = match s {
        Ok(s) => summary_cells(s),
        Err(e) => failed_cells(e),
    };
    format!(
        "| {} | {} | {} | {} | {cells} |\n",
        w.name(),
        w.nodes,
        w.measure_pods,
        c.name()
    )
}

/// A row of the verdicts table.
pub fn verdict_row(w: &Workload, v: &Verdicts) -> String {
    let ratio = |r: Option<Ratio>| r.map_or("-".into(), |r| r.show());
    let side = |s: Option<Side>| s.map_or("-", Side::name);
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        w.name(),
        ratio(v.pps_vs_upstream),
        v.pps_vs_upstream.map_or("-", |r| r.versus()),
        ratio(v.pps_vs_ceiling),
        side(v.throughput()),
        ratio(v.cpu_vs_upstream),
        side(v.cpu()),
        ratio(v.rss_vs_upstream),
        side(v.rss()),
    )
}

/// How many workloads met each target surely, out of those where it was measured.
pub fn tally(verdicts: &[Verdicts]) -> String {
    let count = |f: fn(&Verdicts) -> Option<Side>| {
        let sides: Vec<Side> = verdicts.iter().filter_map(f).collect();
        let n = |s: Side| sides.iter().filter(|x| **x == s).count();
        format!(
            "{} met, {} missed, {} unsure of {}",
            n(Side::Met),
            n(Side::Missed),
            n(Side::Unsure),
            sides.len()
        )
    };
    format!(
        "Targets (a target is met or missed only when the whole range of ratios is on one side of it): throughput {}; CPU {}; peak RSS {}.\n",
        count(Verdicts::throughput),
        count(Verdicts::cpu),
        count(Verdicts::rss)
    )
}

/// The workload's `BENCH` line: the medians of ksched and upstream beside the ceiling's
/// throughput, the ratios with their ranges and the verdicts; `FAILED` for a contender that
/// failed, `-` for one not run.
pub fn bench_line(w: &Workload, results: &[(Contender, Result<Summary, String>)]) -> String {
    let get = |c: Contender| results.iter().find(|(x, _)| *x == c).map(|(_, r)| r);
    let value = |c: Contender, f: fn(&Summary) -> Option<f64>, precision: usize| match get(c) {
        Some(Ok(s)) => f(s).map_or("-".into(), |v| format!("{v:.precision$}")),
        Some(Err(_)) => "FAILED".into(),
        None => "-".into(),
    };
    let v = Verdicts::of(results).with_pps_target(w.kind.pps_target());
    let median = |r: Option<Ratio>| r.map_or("-".into(), |r| format!("{:.2}", r.median));
    let range = |r: Option<Ratio>| r.map_or("-".into(), |r| r.range());
    let side = |s: Option<Side>| s.map_or("-", Side::name);
    let (k, u, c) = (Contender::Ksched, Contender::Upstream, Contender::Ceiling);
    // ksched on a chosen allocator, or another ksched build, when the run has it: the same
    // figures beside the default's.
    let other_builds: Vec<Contender> = [
        Contender::KschedJemalloc,
        Contender::KschedGlibc,
        Contender::KschedBase,
    ]
    .into_iter()
    .filter(|a| get(*a).is_some())
    .collect();
    let mut line = format!(
        "BENCH workload={} nodes={} pods={} ksched_pps={} upstream_pps={} ceiling_pps={} ratio_upstream={} ratio_upstream_range={} vs_upstream={} ratio_ceiling={} target_pps={}",
        w.name(),
        w.nodes,
        w.measure_pods,
        value(k, |s| Some(s.median.pods_per_second), 1),
        value(u, |s| Some(s.median.pods_per_second), 1),
        value(c, |s| Some(s.median.pods_per_second), 1),
        median(v.pps_vs_upstream),
        range(v.pps_vs_upstream),
        v.pps_vs_upstream.map_or("-", |r| r.versus()),
        median(v.pps_vs_ceiling),
        side(v.throughput()),
    );
    for a in &other_builds {
        let vs_upstream = match (get(*a), get(u)) {
            (Some(Ok(x)), Some(Ok(y))) => Ratio::of(&x.pods_per_second, &y.pods_per_second),
            _ => None,
        };
        let name = a.name();
        let _ = write!(
            line,
            " {name}_pps={} {name}_ratio_upstream={} {name}_ratio_upstream_range={}",
            value(*a, |s| Some(s.median.pods_per_second), 1),
            median(vs_upstream),
            range(vs_upstream),
        );
    }
    // Before and after: ksched against the other build, a win or loss only outside the noise.
    if let (Some(Ok(after)), Some(Ok(before))) = (get(k), get(Contender::KschedBase)) {
        for (key, f) in [
            (
                "pps",
                (|s: &Summary| s.pods_per_second) as fn(&Summary) -> Spread,
            ),
            ("cpu", |s| s.cpu_seconds),
            ("peak_rss", |s| s.peak_rss_mb),
        ] {
            if let Some(r) = Ratio::of(&f(after), &f(before)) {
                let _ = write!(
                    line,
                    " ksched_vs_base_{key}={:.2} ksched_vs_base_{key}_range={} ksched_vs_base_{key}_verdict={}",
                    r.median,
                    r.range(),
                    r.direction(),
                );
            }
        }
    }
    for (key, f, precision) in [
        (
            "p99_ms",
            (|s: &Summary| Some(s.median.p99_ms)) as fn(&Summary) -> Option<f64>,
            1,
        ),
        ("cpu_s", |s| Some(s.median.cpu_seconds), 2),
        ("peak_rss_mb", |s| Some(s.median.peak_rss_mb), 1),
        ("steady_rss_mb", |s| Some(s.median.steady_rss_mb), 1),
        ("steady_anon_mb", |s| Some(s.median.steady_anon_mb), 1),
    ] {
        for contender in [k]
            .into_iter()
            .chain(other_builds.iter().copied())
            .chain([u])
        {
            let _ = write!(
                line,
                " {}_{key}={}",
                contender.name(),
                value(contender, f, precision)
            );
        }
    }
    let writes = |c: Contender| value(c, |s| s.median.api_writes_per_pod, 2);
    let _ = write!(
        line,
        " ksched_api_writes_per_pod={} upstream_api_writes_per_pod={} ceiling_api_writes_per_pod={}",
        writes(k),
        writes(u),
        writes(c)
    );
    if let Some(key) = w.kind.topology_key() {
        let domains = |c: Contender| value(c, |s| s.median.domains, 0);
        let _ = write!(
            line,
            " domain_key={key} ksched_domains={} upstream_domains={}",
            domains(k),
            domains(u)
        );
    }
    let _ = write!(
        line,
        " upstream_go_heap_mb={} cpu_ratio={} cpu_ratio_range={} target_cpu={} rss_ratio={} target_rss={}",
        value(u, |s| s.median.go_heap_mb, 1),
        median(v.cpu_vs_upstream),
        range(v.cpu_vs_upstream),
        side(v.cpu()),
        median(v.rss_vs_upstream),
        side(v.rss()),
    );
    line
}
