//! Figures of a run, their medians over the rounds, and the report: one `BENCH` line per workload
//! and target/bench/report.md (medians, then every round).

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

impl Figures {
    /// Each figure's median over `rounds` (taken separately per figure).
    pub fn median(rounds: &[Figures]) -> Figures {
        let med = |f: fn(&Figures) -> f64| median_of(rounds.iter().map(f).collect());
        let heaps: Vec<f64> = rounds.iter().filter_map(|f| f.go_heap_mb).collect();
        Figures {
            pods_per_second: med(|f| f.pods_per_second),
            p50_ms: med(|f| f.p50_ms),
            p99_ms: med(|f| f.p99_ms),
            cpu_seconds: med(|f| f.cpu_seconds),
            peak_rss_mb: med(|f| f.peak_rss_mb),
            steady_rss_mb: med(|f| f.steady_rss_mb),
            steady_anon_mb: med(|f| f.steady_anon_mb),
            go_heap_mb: (!heaps.is_empty()).then(|| median_of(heaps)),
        }
    }
}

/// A contender's result on a workload: the medians, or the first failure (one failed round fails
/// the workload: a median over the rounds that passed would hide it).
pub fn summary(rounds: &[Round]) -> Result<Figures, String> {
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
    Ok(Figures::median(&ok))
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// The medians table's header.
pub const TABLE_HEADER: &str = "| workload | nodes | pods | contender | pods/s | p50 ms | p99 ms | CPU s | peak RSS MB | steady RSS MB | steady anon MB | Go heap MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
/// The every-round table's header.
pub const ROUNDS_HEADER: &str = "| workload | round | contender | pods/s | p50 ms | p99 ms | CPU s | peak RSS MB | steady RSS MB | steady anon MB | Go heap MB |\n|---|---|---|---|---|---|---|---|---|---|---|\n";

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
pub fn median_row(w: &Workload, c: Contender, s: &Result<Figures, String>) -> String {
    let cells = match s {
        Ok(f) => cells(f),
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

/// The workload's `BENCH` line: the medians of ksched and upstream beside the ceiling's
/// throughput; `FAILED` for a contender that failed, `-` for one not run.
pub fn bench_line(w: &Workload, results: &[(Contender, Result<Figures, String>)]) -> String {
    let get = |c: Contender| results.iter().find(|(x, _)| *x == c).map(|(_, r)| r);
    let value = |c: Contender, f: fn(&Figures) -> Option<f64>, precision: usize| match get(c) {
        Some(Ok(fig)) => f(fig).map_or("-".into(), |v| format!("{v:.precision$}")),
        Some(Err(_)) => "FAILED".into(),
        None => "-".into(),
    };
    let pps = |c| {
        get(c)
            .and_then(|r| r.as_ref().ok())
            .map(|f| f.pods_per_second)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let (k, u, c) = (Contender::Ksched, Contender::Upstream, Contender::Ceiling);
    // ksched on a chosen allocator, when the run has it: the same figures beside the default's.
    let allocators: Vec<Contender> = [Contender::KschedJemalloc, Contender::KschedGlibc]
        .into_iter()
        .filter(|a| get(*a).is_some())
        .collect();
    let mut line = format!(
        "BENCH workload={} nodes={} pods={} ksched_pps={} upstream_pps={} ceiling_pps={} ratio_upstream={} ratio_ceiling={}",
        w.name(),
        w.nodes,
        w.measure_pods,
        value(k, |f| Some(f.pods_per_second), 1),
        value(u, |f| Some(f.pods_per_second), 1),
        value(c, |f| Some(f.pods_per_second), 1),
        ratio(pps(k), pps(u)),
        ratio(pps(k), pps(c)),
    );
    for a in &allocators {
        let _ = write!(
            line,
            " {}_pps={} {}_ratio_upstream={}",
            a.name(),
            value(*a, |f| Some(f.pods_per_second), 1),
            a.name(),
            ratio(pps(*a), pps(u))
        );
    }
    for (key, f, precision) in [
        (
            "p99_ms",
            (|f: &Figures| Some(f.p99_ms)) as fn(&Figures) -> Option<f64>,
            1,
        ),
        ("cpu_s", |f| Some(f.cpu_seconds), 2),
        ("peak_rss_mb", |f| Some(f.peak_rss_mb), 1),
        ("steady_rss_mb", |f| Some(f.steady_rss_mb), 1),
        ("steady_anon_mb", |f| Some(f.steady_anon_mb), 1),
    ] {
        for contender in [k].into_iter().chain(allocators.iter().copied()).chain([u]) {
            let _ = write!(
                line,
                " {}_{key}={}",
                contender.name(),
                value(contender, f, precision)
            );
        }
    }
    let _ = write!(
        line,
        " upstream_go_heap_mb={}",
        value(u, |f| f.go_heap_mb, 1)
    );
    line
}
