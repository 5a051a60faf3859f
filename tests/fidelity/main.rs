//! The differential test: the same generated cluster states and pods, scheduled by upstream
//! kube-scheduler (the testenv's, `K8S_VERSION`: 1.37.2, or `make fidelity K8S_VERSION=1.36.3`)
//! and by `ksched scheduler` with the default profile (emulating the API server's minor, as it
//! decides by default), compared on outcome, node, message, nominated node, preemption victims
//! and PodGroup conditions. The `groups` family (PodGroups, both schedulers with
//! `--feature-gates=GenericWorkload=true`) and `groups-topology` (PodGroups confined to one rack,
//! `TopologyAwareWorkloadScheduling=true` too) run where the API server serves them (1.37+).
//!
//! One control plane; each run wipes the last case, creates the case and starts a fresh scheduler
//! (see `cluster.rs`). Upstream runs twice, then ksched; while ksched's answer is none of
//! upstream's, upstream runs again on the same state (up to 10 runs, 25 once upstream's own runs
//! differed: it picks among equal nodes at random). An aspect agrees when ksched's
//! answer is one of the answers upstream gave over its runs; a case on which upstream's own runs
//! differed is counted as nondeterministic, per family.
//!
//! `quick` (in `make test`) runs the first cases of every family; `full` (`make fidelity`) the
//! whole corpus. Environment: `KSCHED_FIDELITY_SEED` (default 17), `KSCHED_FIDELITY_PER_FAMILY`
//! (full run, default 30), `KSCHED_FIDELITY_CASE` (only cases whose name starts with it),
//! `KSCHED_FIDELITY_DUMP` (print each case's objects), `KSCHED_FIDELITY_KEEP_LOGS` (keep each scheduler's log in the testenv directory, with
//! `KSCHED_KEEP_TESTENV`), `KSCHED_FIDELITY_UPSTREAM_V` (upstream's log level: 10 logs
//! every plugin's score), `KSCHED_FIDELITY_KSCHED_V` (ksched's). The report is printed and written to `target/fidelity/report.txt`.

#[path = "../support/mod.rs"]
mod support;

mod cases;
mod cluster;
mod objects;
mod report;

use std::time::Instant;

use cluster::{Runner, Scheduler};
use support::{Components, control_plane_with_apiserver_args};

/// Cases per family in `make test`.
const QUICK_PER_FAMILY: usize = 2;
const FULL_PER_FAMILY: usize = 30;
/// Upstream runs on every case (to see whether it is deterministic there).
const UPSTREAM_RUNS: usize = 2;
/// Upstream runs at most, while ksched's answer differs from all of upstream's: between two
/// equal nodes upstream picks at random, so 5 runs miss one of them one time in 16, which the
/// 480-case corpus met (under load) twice; 10 runs, one time in 512.
const UPSTREAM_RUNS_ON_DIFFERENCE: usize = 10;
/// The same, once upstream's own runs differed: it breaks ties between equal nodes at random
/// (`NodePluginScores.Randomizer`), so with five nodes tied a node it can pick is missed by
/// five runs one time in three, by 25 runs one time in 250.
const UPSTREAM_RUNS_ON_TIE: usize = 25;

/// The API server's flags: PodGroups served (GenericWorkload, `scheduling.k8s.io/v1beta1`) and
/// their `schedulingConstraints` kept (TopologyAwareWorkloadScheduling, alpha in 1.37) on a
/// testenv of 1.37 or later (1.36's API server knows none of them).
fn apiserver_args() -> &'static [&'static str] {
    const WORKLOADS: &[&str] = support::WORKLOAD_API_ARGS;
    let apiserver = support::testenv_bin_dir().join("kube-apiserver");
    let version = std::process::Command::new(&apiserver)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // "Kubernetes v1.37.2"
    let minor = version
        .trim()
        .rsplit('v')
        .next()
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_some_and(|m| m >= 37) {
        WORKLOADS
    } else {
        &[]
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the corpus and writes the report; panics when anything disagrees.
async fn differential(per_family: usize, report_name: &str) {
    // One control plane: `quick` and `full` (with --include-ignored) take turns.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _serial = SERIAL.lock().await;
    let seed = env_or("KSCHED_FIDELITY_SEED", 17u64);
    let only = std::env::var("KSCHED_FIDELITY_CASE").unwrap_or_default();
    let corpus: Vec<cases::Case> = cases::corpus(seed, per_family)
        .into_iter()
        .filter(|c| c.name.starts_with(&only))
        .collect();
    let cp = control_plane_with_apiserver_args(Components::API_ONLY, apiserver_args());
    let mut runner = Runner::new(cp).await;
    let corpus: Vec<cases::Case> = if runner.serves_pod_groups {
        corpus
    } else {
        let (kept, left_out): (Vec<_>, Vec<_>) = corpus
            .into_iter()
            .partition(|c| !cases::needs_pod_groups(c.family));
        let mut families: Vec<&str> = left_out.iter().map(|c| c.family).collect();
        families.dedup();
        eprintln!(
            "fidelity: the API server ({}) serves no scheduling.k8s.io/v1beta1 PodGroups: left out {families:?}",
            runner.upstream_version
        );
        kept
    };
    let started = Instant::now();
    let mut verdicts = Vec::new();
    let dump = std::env::var_os("KSCHED_FIDELITY_DUMP").is_some();
    for case in &corpus {
        if dump {
            eprintln!(
                "fidelity: {}\n{}",
                case.name,
                serde_json::to_string_pretty(&(&case.objects, &case.incoming)).unwrap_or_default()
            );
        }
        let mut upstream = Vec::new();
        for _ in 0..UPSTREAM_RUNS {
            upstream.push(runner.run(case, Scheduler::Upstream).await);
        }
        let ksched = runner.run(case, Scheduler::Ksched).await;
        let mut verdict = report::compare(case, &upstream, &ksched);
        // Upstream's choice among equal nodes can depend on which filter goroutine finishes first:
        // before calling a difference a disagreement, see whether upstream ever answers as ksched.
        while !verdict.agrees()
            && upstream.len()
                < if verdict.nondeterministic() {
                    UPSTREAM_RUNS_ON_TIE
                } else {
                    UPSTREAM_RUNS_ON_DIFFERENCE
                }
        {
            upstream.push(runner.run(case, Scheduler::Upstream).await);
            verdict = report::compare(case, &upstream, &ksched);
        }
        eprintln!(
            "fidelity: {} {}{}",
            case.name,
            if verdict.agrees() {
                "agrees"
            } else {
                "DISAGREES"
            },
            if verdict.nondeterministic() {
                " (upstream nondeterministic)"
            } else {
                ""
            }
        );
        for d in &verdict.details {
            eprintln!("  {d}");
        }
        verdicts.push(verdict);
    }
    let text = report::render(&verdicts, started.elapsed(), &runner.upstream_version);
    let dir = support::repo_root().join("target/fidelity");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(report_name), &text);
    eprintln!("{text}");
    let disagreeing: Vec<&str> = verdicts
        .iter()
        .filter(|v| !v.agrees())
        .map(|v| v.case.as_str())
        .collect();
    assert!(
        disagreeing.is_empty(),
        "ksched disagrees with upstream kube-scheduler on {disagreeing:?} (seed {seed}); report above"
    );
}

/// The first cases of every family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick() {
    differential(QUICK_PER_FAMILY, "quick.txt").await;
}

/// The whole corpus: `make fidelity`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long: run by `make fidelity`"]
async fn full() {
    differential(
        env_or("KSCHED_FIDELITY_PER_FAMILY", FULL_PER_FAMILY),
        "report.txt",
    )
    .await;
}
