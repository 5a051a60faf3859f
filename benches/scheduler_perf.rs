//! `make bench`: ksched against upstream kube-scheduler and a null binder (the API server's
//! ceiling), one after another on the same real control plane, with the same nodes, the same pods
//! and the same client QPS/burst (5000/5000), on workloads after upstream's scheduler_perf
//! (see `scheduler_perf/workloads.rs`).
//!
//! Options (after `--`): `--preset small|default|large|xlarge`, `--workloads A,B` (workload
//! names, `MemoryFootprint` for the bytes per node and per pod), `--contenders
//! ksched,upstream,ceiling` (the default; `ksched-jemalloc` and `ksched-glibc` are the same
//! binary with `KSCHED_ALLOCATOR` set, so both allocators run side by side in one bench;
//! `ksched-base` is the ksched binary `KSCHED_BASE_BIN` names, for before and after a change),
//! `--rounds N` (default 3); also BENCH_PRESET, BENCH_WORKLOADS, BENCH_CONTENDERS, BENCH_ROUNDS.
//! Each round runs the contenders one after another (interleaved, so a slow phase of the machine
//! hits all of them; the order rotates from round to round); a figure is the median over the
//! rounds, since single runs on a small shared machine vary by tens of percent. A contender that
//! fails a round (a pod not bound, a check of `scheduler_perf/checks.rs` not holding) is FAILED
//! on the workload.
//! Output: one `BENCH ...` line per workload and target/bench/report.md (medians, then every
//! round).
//!
//! The same binary also runs the null binder (`--null-binder`), so the ceiling is a process of its
//! own like the two schedulers.

#[path = "scheduler_perf/checks.rs"]
mod checks;
#[path = "scheduler_perf/churn.rs"]
mod churn;
#[path = "scheduler_perf/contenders.rs"]
mod contenders;
#[path = "scheduler_perf/footprint.rs"]
mod footprint;
#[path = "scheduler_perf/plot.rs"]
mod plot;
#[path = "scheduler_perf/report.rs"]
mod report;
#[path = "scheduler_perf/setup.rs"]
mod setup;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "scheduler_perf/workloads.rs"]
mod workloads;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use support::{Components, ControlPlane};

use contenders::{Contender, Running};
use footprint::Footprint;
use report::{Figures, Round, Summary, Verdicts};
use workloads::{Kind, Preset, Role, Workload};

/// The pseudo-workload of the bytes per node and per pod.
const FOOTPRINT: &str = "MemoryFootprint";
/// A run fails when no pod it waits for was bound for this long.
const STALL: Duration = Duration::from_secs(60);

/// Creates `pods` with up to 64 requests in flight; returns when each create returned.
pub async fn create_pods(api: &Api<Pod>, pods: Vec<Pod>) -> HashMap<String, Instant> {
    futures::stream::iter(pods)
        .map(|p| async move {
            let name = p.metadata.name.clone().unwrap_or_default();
            for attempt in 0.. {
                match api.create(&PostParams::default(), &p).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(e)) if e.code == 409 => break,
                    // An overloaded API server or a lost connection: again. A refusal: the
                    // pod's wait reports it missing.
                    Err(e) if attempt < 50 && retriable(&e) => {
                        eprintln!("create {name}: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        eprintln!("create {name}: {e}; giving up");
                        break;
                    }
                }
            }
            (name, Instant::now())
        })
        .buffer_unordered(64)
        .collect()
        .await
}

fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// The run's pods as a watch sees them: every pod seen, when and where each was first seen
/// bound, which were deleted. Churn pods come and go between two lists; the watch sees them all.
#[derive(Default)]
pub struct Tracker {
    seen: Mutex<HashSet<String>>,
    bound: Mutex<HashMap<String, Instant>>,
    nodes: Mutex<HashMap<String, String>>,
    deleted: Mutex<HashSet<String>>,
}

/// Aborts its task when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the run's pods (label `bench-run`, whatever their namespace).
fn track(admin: &Client, run: &str) -> (Arc<Tracker>, Task) {
    let tracker = Arc::new(Tracker::default());
    let t = tracker.clone();
    let api: Api<Pod> = Api::all(admin.clone());
    let config = watcher::Config::default().labels(&format!("bench-run={run}"));
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(p) | Event::InitApply(p)) => {
                    let name = p.metadata.name.unwrap_or_default();
                    if let Some(node) = p.spec.and_then(|s| s.node_name) {
                        t.bound
                            .lock()
                            .entry(name.clone())
                            .or_insert_with(Instant::now);
                        t.nodes.lock().entry(name.clone()).or_insert(node);
                    }
                    t.seen.lock().insert(name);
                }
                Ok(Event::Delete(p)) => {
                    t.deleted.lock().insert(p.metadata.name.unwrap_or_default());
                }
                _ => {}
            }
        }
    });
    (tracker, Task(task))
}

/// Waits until every pod of `names` is bound; fails when none was bound for `STALL`.
pub async fn wait_bound(tracker: &Tracker, names: &[String]) -> Result<(), String> {
    wait_bound_until(tracker, names, None).await
}

/// [`wait_bound`], failing also at `deadline`.
async fn wait_bound_until(
    tracker: &Tracker,
    names: &[String],
    deadline: Option<(Instant, Instant)>,
) -> Result<(), String> {
    let mut last = (0, Instant::now());
    loop {
        let done = {
            let b = tracker.bound.lock();
            names.iter().filter(|n| b.contains_key(*n)).count()
        };
        if done == names.len() {
            return Ok(());
        }
        if done > last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(format!(
                "{done}/{} pods bound, none for {}s",
                names.len(),
                STALL.as_secs()
            ));
        }
        if let Some((start, end)) = deadline
            && Instant::now() > end
        {
            let secs = start.elapsed().as_secs_f64();
            return Err(format!(
                "timed out: {done}/{} pods bound in {secs:.0} s ({:.1} pods/s; the bench gives up below {MIN_RATE} pods/s)",
                names.len(),
                done as f64 / secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The slowest scheduling the bench waits for: the measured pods of a run must be bound in
/// `measure_pods / MIN_RATE` seconds (at least a minute), so one contender's pathological case
/// cannot hold the bench up for hours. It fails the contender on the workload.
const MIN_RATE: usize = 10;

/// When the measured pods of `w` created from `start` must all be bound.
fn measure_deadline(w: &Workload, start: Instant) -> (Instant, Instant) {
    let secs = (w.measure_pods / MIN_RATE).max(STALL.as_secs() as usize);
    (start, start + Duration::from_secs(secs as u64))
}

/// Durations of a run's phases, for the log.
struct Phases {
    last: Instant,
    done: String,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            last: Instant::now(),
            done: String::new(),
        }
    }

    fn mark(&mut self, phase: &str) {
        let _ = write!(
            self.done,
            " {phase} {:.1}s",
            self.last.elapsed().as_secs_f64()
        );
        self.last = Instant::now();
    }
}

fn pods_of(w: &Workload, role: Role, run: &str, ns: &str, count: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| setup::object(workloads::pod(w.kind, role, run, ns, i)))
        .collect()
}

fn names_of(role: Role, count: usize) -> Vec<String> {
    (0..count).map(|i| workloads::pod_name(role, i)).collect()
}

/// A fresh namespace for one run (names and the `bench-run` label are limited to 63 characters).
async fn run_namespace(cp: &ControlPlane, admin: &Client, name: &str, id: usize) -> String {
    cp.namespace(admin, &format!("bench-{:.16}-{id}", name.to_lowercase()))
        .await
}

/// Starts `contender` and waits until it binds a pod (the warmup).
async fn start_ready(
    cp: &ControlPlane,
    admin: &Client,
    w: &Workload,
    contender: Contender,
    ns: &str,
    tracker: &Tracker,
) -> Result<Running, String> {
    let log = cp
        .dir
        .join(format!("bench-{}-{}.log", w.name(), contender.name()));
    let running = contenders::start(cp, contender, w.kind, &log);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    create_pods(&pods, pods_of(w, Role::Warmup, ns, ns, 1)).await;
    wait_bound(tracker, &names_of(Role::Warmup, 1))
        .await
        .map_err(|e| format!("not ready ({e}); log: {}", running.log.display()))?;
    Ok(running)
}

/// One contender on one workload: init pods, then the measured pods (with the workload's churn
/// beside them), the checks, a steady sample; the run's objects are removed whatever happened.
async fn run_one(
    cp: &ControlPlane,
    admin: &Client,
    w: &Workload,
    contender: Contender,
    id: usize,
) -> Round {
    let mut phases = Phases::new();
    let ns = run_namespace(cp, admin, w.name(), id).await;
    let mut namespaces = vec![ns.clone()];
    let result = measure(cp, admin, w, contender, &ns, &mut namespaces, &mut phases).await;
    for namespace in &namespaces {
        setup::delete_pods(admin, namespace).await;
    }
    phases.mark("cleanup-pods");
    churn::clean(admin, &ns).await;
    setup::delete_run_objects(admin, w, &ns).await;
    phases.mark("cleanup");
    eprintln!("   phases:{}", phases.done);
    result
}

async fn measure(
    cp: &ControlPlane,
    admin: &Client,
    w: &Workload,
    contender: Contender,
    ns: &str,
    namespaces: &mut Vec<String>,
    phases: &mut Phases,
) -> Round {
    setup::pod_groups(admin, ns, w, contender).await?;
    let (tracker, _watch) = track(admin, ns);
    let _provisioner = (w.kind == Kind::CsiPvs).then(|| {
        Task(tokio::spawn(setup::provisioner(
            admin.clone(),
            ns.to_string(),
        )))
    });
    let running = start_ready(cp, admin, w, contender, ns, &tracker).await?;
    let log = || format!("log: {}", running.log.display());
    phases.mark("start");

    // Init pods, in the run's namespace or spread over labelled namespaces of their own.
    let init_namespaces = match w.init_namespaces() {
        0 => vec![ns.to_string()],
        n => setup::labelled_namespaces(admin, ns, n).await,
    };
    namespaces.extend(init_namespaces.iter().filter(|n| *n != ns).cloned());
    setup::before_pods(admin, w, ns, Role::Init, w.init_pods).await;
    let init = pods_of(w, Role::Init, ns, ns, w.init_pods);
    for (k, target) in init_namespaces.iter().enumerate() {
        let share: Vec<Pod> = init
            .iter()
            .skip(k)
            .step_by(init_namespaces.len())
            .cloned()
            .map(|mut p| {
                p.metadata.namespace = Some(target.clone());
                p
            })
            .collect();
        create_pods(&Api::namespaced(admin.clone(), target), share).await;
    }
    wait_bound(&tracker, &names_of(Role::Init, w.init_pods))
        .await
        .map_err(|e| format!("init pods: {e}; {}", log()))?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    if w.gated_pods() > 0 {
        create_pods(&pods, pods_of(w, Role::Gated, ns, ns, w.gated_pods())).await;
        wait_gated(cp, &running, contender, w.gated_pods()).await?;
    }
    phases.mark("init");

    let measured = pods_of(w, Role::Measured, ns, ns, w.measure_pods);
    let names = names_of(Role::Measured, w.measure_pods);
    setup::before_pods(admin, w, ns, Role::Measured, w.measure_pods).await;
    let churn = Task(tokio::spawn(churn::run(admin.clone(), *w, ns.to_string())));
    let before = contenders::usage(running.pid());
    let writes_before = contenders::api_writes(admin).await;
    let first_created = Instant::now();
    let created = create_pods(&pods, measured).await;
    let all_bound =
        wait_bound_until(&tracker, &names, Some(measure_deadline(w, first_created))).await;
    let after = contenders::usage(running.pid());
    let writes_after = contenders::api_writes(admin).await;
    drop(churn);
    let churn_stopped = Instant::now();
    all_bound.map_err(|e| format!("measured pods: {e}; {}", log()))?;
    phases.mark("measured");

    let bound = tracker.bound.lock().clone();
    let mut latencies: Vec<f64> = names
        .iter()
        .filter_map(|n| Some(bound.get(n)?.duration_since(*created.get(n)?).as_secs_f64() * 1000.0))
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let last_bound = names
        .iter()
        .filter_map(|n| bound.get(n))
        .max()
        .copied()
        .unwrap_or(first_created);
    let elapsed = last_bound
        .duration_since(first_created)
        .as_secs_f64()
        .max(1e-6);

    let mut go_heap_mb = None;
    let mut domains = None;
    if contender.schedules() {
        let state = checks::RunState {
            w,
            run: ns,
            pods: checks::run_pods(admin, ns).await?,
            tracker: &tracker,
        };
        checks::check(admin, &state).await?;
        domains = checks::domains_used(&state).map(|n| n as f64);
        phases.mark("checks");
        tokio::time::sleep(footprint::IDLE.saturating_sub(churn_stopped.elapsed())).await;
        let metrics = wait_scheduled(cp, &running, checks::expected_scheduled(w)).await?;
        if contender == Contender::Upstream {
            go_heap_mb = contenders::go_heap_mb(&metrics);
        }
    }
    let steady = contenders::usage(running.pid());
    phases.mark("steady");
    Ok(Figures {
        pods_per_second: latencies.len() as f64 / elapsed,
        p50_ms: report::percentile(&latencies, 0.5),
        p99_ms: report::percentile(&latencies, 0.99),
        cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        peak_rss_mb: steady.peak_rss_mb,
        steady_rss_mb: steady.rss_mb,
        steady_anon_mb: steady.anon_mb,
        go_heap_mb,
        domains,
        api_writes_per_pod: writes_before
            .zip(writes_after)
            .map(|(b, a)| (a - b) / w.measure_pods.max(1) as f64),
    })
}

/// Waits (up to 10 s) until the scheduler reports `expected` pods scheduled: the run's pods
/// were bound by the contender under test. kube-scheduler counts a pod once its binding cycle
/// returns, which can be after the bench saw the binding. Returns its /metrics text.
async fn wait_scheduled(
    cp: &ControlPlane,
    running: &Running,
    expected: usize,
) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = contenders::metrics(cp, running).await?;
        let scheduled = contenders::scheduled(&metrics);
        if scheduled >= expected as f64 {
            return Ok(metrics);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "it reports {scheduled} pods scheduled, the run bound {expected}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Upstream's `barrier` before the measured pods of SchedulingGatedPods: the scheduler has seen
/// every gated pod (`scheduler_pending_pods{queue="gated"}`, in both schedulers). The null
/// binder only gets a second.
async fn wait_gated(
    cp: &ControlPlane,
    running: &Running,
    contender: Contender,
    gated: usize,
) -> Result<(), String> {
    if !contender.schedules() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        return Ok(());
    }
    let deadline = Instant::now() + STALL;
    loop {
        let metrics = contenders::metrics(cp, running).await?;
        let seen = contenders::sample(&metrics, "scheduler_pending_pods", &[("queue", "gated")])
            .unwrap_or(0.0);
        if seen >= gated as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{seen} of {gated} gated pods in the queue"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One round of the footprint for `contender`.
async fn footprint_one(
    cp: &ControlPlane,
    admin: &Client,
    contender: Contender,
    preset: Preset,
    id: usize,
) -> Result<Footprint, String> {
    let w = footprint::workload(preset);
    setup::nodes(admin, &w).await;
    let ns = run_namespace(cp, admin, FOOTPRINT, id).await;
    let (tracker, _watch) = track(admin, &ns);
    let result = async {
        let running = start_ready(cp, admin, &w, contender, &ns, &tracker).await?;
        footprint::measure(cp, admin, &running, contender, preset, &ns, &tracker).await
    }
    .await;
    setup::delete_pods(admin, &ns).await;
    result
}

struct Options {
    preset: Preset,
    only: Option<Vec<String>>,
    contenders: Vec<Contender>,
    rounds: usize,
}

fn arg(args: &[String], name: &str, env: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var(env).ok().filter(|v| !v.is_empty()))
}

fn options(args: &[String]) -> Result<Options, String> {
    let preset = Preset::parse(&arg(args, "--preset", "BENCH_PRESET").unwrap_or("default".into()))?;
    let only: Option<Vec<String>> = arg(args, "--workloads", "BENCH_WORKLOADS")
        .map(|s| s.split(',').map(str::to_string).collect());
    if let Some(only) = &only {
        let known: Vec<&str> = workloads::Kind::ALL
            .iter()
            .map(|k| k.name())
            .chain([FOOTPRINT])
            .collect();
        if let Some(bad) = only.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(format!(
                "unknown workload {bad:?} in --workloads/BENCH_WORKLOADS: use {}",
                known.join(", ")
            ));
        }
    }
    let contenders = match arg(args, "--contenders", "BENCH_CONTENDERS") {
        Some(s) => s
            .split(',')
            .map(Contender::parse)
            .collect::<Result<Vec<_>, _>>()?,
        None => Contender::ALL.to_vec(),
    };
    let rounds =
        match arg(args, "--rounds", "BENCH_ROUNDS") {
            Some(r) => r.parse::<usize>().ok().filter(|r| *r > 0).ok_or_else(|| {
                format!("--rounds/BENCH_ROUNDS {r:?}: a number of rounds, 1 or more")
            })?,
            None => 3,
        };
    Ok(Options {
        preset,
        only,
        contenders,
        rounds,
    })
}

/// Ctrl-C or SIGTERM ends the bench through `exit`, whose exit hook stops the control plane and
/// removes its directory (a signal's default action would skip it and leave ~100 MB in /tmp).
fn exit_on_signal(runtime: &tokio::runtime::Runtime) {
    use tokio::signal::unix::{SignalKind, signal};
    runtime.spawn(async {
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("interrupted: stopping the control plane");
        std::process::exit(130);
    });
}

/// The order of the contenders in `round`: each round starts with the next one (the first run
/// after the nodes are created meets a colder API server and etcd).
fn order(contenders: &[Contender], round: usize) -> Vec<(usize, Contender)> {
    let mut order: Vec<(usize, Contender)> = contenders.iter().copied().enumerate().collect();
    order.rotate_left(round % contenders.len().max(1));
    order
}

const METHOD: &str = "Memory: *peak RSS* is the contender's VmHWM over the run; *steady* RSS and anon RSS are VmRSS and RssAnon once the measured pods were bound, any churn had stopped and the contender had idled 2 s. Anon RSS (private anonymous resident memory: heap, arenas, stacks; not the binary's code) is the one figure measured the same way for both: ksched has no heap metric of its own (glibc's `mallinfo2` can only be called inside the process; jemalloc's stats likewise), so its heap is bounded from above by anon RSS (which also holds freed memory the allocator keeps). `ksched` runs on its default allocator, `ksched-jemalloc` and `ksched-glibc` on the one named (`KSCHED_ALLOCATOR`). *Go heap* is upstream's `go_memstats_heap_inuse_bytes` from its /metrics at the same moment.\n\nBytes per node and per pod (`MemoryFootprint`): each contender starts on a cluster of one node and idles; it is sampled, then again once it has seen N more nodes (a pod pinned to a node created after them is bound), then again once it has bound P pods (`pod-default`); each sample after 2 s idle. Per node = difference / N, per pod = difference / P, medians of the rounds. Upstream's Go heap is sampled after a forced garbage collection (`/debug/pprof/heap?gc=1`), so it counts live objects only; anon RSS and RSS are what the processes hold.\n";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if args.iter().any(|a| a == "--null-binder") {
        let Some(kubeconfig) = arg(&args, "--kubeconfig", "KUBECONFIG") else {
            eprintln!("--null-binder needs --kubeconfig");
            std::process::exit(2);
        };
        runtime.block_on(contenders::null_binder(&PathBuf::from(kubeconfig)));
        return;
    }
    let opts = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("scheduler_perf: {e}");
            std::process::exit(2);
        }
    };
    let selected = |name: &str| {
        opts.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|n| n == name))
    };
    let started = Instant::now();
    let cp = support::control_plane_with_apiserver_args(
        Components::API_ONLY,
        contenders::gang_api().apiserver_args,
    );
    exit_on_signal(&runtime);
    let (rounds, preset) = (opts.rounds, opts.preset);
    let mut report = format!(
        "Medians of {rounds} rounds (preset {}); pods = measured pods.\n\n{}",
        preset.name(),
        report::TABLE_HEADER
    );
    let mut every_round = String::from(report::ROUNDS_HEADER);
    let mut verdicts_table = String::from(report::VERDICTS_HEADER);
    let mut verdicts = Vec::new();
    let mut plotted = Vec::new();
    let mut lines = Vec::new();
    runtime.block_on(async {
        let admin = contenders::client(&cp.kubeconfig).await;
        setup::priority_classes(&admin).await;
        setup::storage_class(&admin).await;
        for (index, w) in workloads::workloads(preset).iter().enumerate() {
            if !selected(w.name()) {
                continue;
            }
            setup::nodes(&admin, w).await;
            let mut runs: HashMap<&str, Vec<Round>> = HashMap::new();
            for round in 0..rounds {
                for (i, c) in order(&opts.contenders, round) {
                    // One failed round fails the workload: the contender's later rounds would
                    // only cost time.
                    if runs
                        .get(c.name())
                        .is_some_and(|r| r.iter().any(|r| r.is_err()))
                    {
                        continue;
                    }
                    eprintln!(
                        "== {} / {} round {}/{rounds} ({} nodes, {} measured pods) at {:.0}s",
                        w.name(),
                        c.name(),
                        round + 1,
                        w.nodes,
                        w.measure_pods,
                        started.elapsed().as_secs_f64()
                    );
                    let id = (index * rounds + round) * 10 + i;
                    let r = run_one(cp, &admin, w, c, id).await;
                    if let Err(e) = &r {
                        eprintln!("{} FAILED {}: {e}", c.name(), w.name());
                    }
                    every_round.push_str(&report::round_row(w, round, c, &r));
                    runs.entry(c.name()).or_default().push(r);
                }
            }
            let results: Vec<(Contender, Result<Summary, String>)> = opts
                .contenders
                .iter()
                .map(|c| {
                    (
                        *c,
                        report::summary(runs.get(c.name()).map_or(&[][..], |r| r)),
                    )
                })
                .collect();
            for (c, s) in &results {
                report.push_str(&report::median_row(w, *c, s));
            }
            let line = report::bench_line(w, &results);
            println!("{line}");
            lines.push(line);
            let v = Verdicts::of(&results).with_pps_target(w.kind.pps_target());
            verdicts_table.push_str(&report::verdict_row(w, &v));
            verdicts.push(v);
            plotted.push(plot::Workload::of(w.name(), &results));
        }
        if selected(FOOTPRINT) {
            let line = footprints(cp, &admin, &opts, &mut report).await;
            println!("{line}");
            lines.push(line);
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let _ = write!(
        report,
        "\nVerdicts of ksched: ratio of the medians (range over the rounds: least to most favourable pairing).\n\n{verdicts_table}\n{}",
        report::tally(&verdicts)
    );
    let dir = support::repo_root().join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let svg = dir.join(format!("pods-per-second-{}.svg", preset.name()));
    match plot::pods_per_second(&svg, preset.name(), rounds, &plotted) {
        Ok(()) => {
            let _ = writeln!(report, "\nPlot: {}", svg.display());
        }
        Err(e) => eprintln!("plot {}: {e}", svg.display()),
    }
    report.push('\n');
    for l in &lines {
        let _ = writeln!(report, "    {l}");
    }
    let _ = write!(
        report,
        "\nWall time of the whole bench: {:.0} s ({:.1} min).\n\n{METHOD}\nEvery round:\n\n{every_round}",
        wall,
        wall / 60.0
    );
    let _ = std::fs::write(dir.join("report.md"), &report);
    println!("\n{report}");
}

/// The footprint rounds of ksched and upstream; its table goes into `report`, its BENCH line is
/// returned.
async fn footprints(
    cp: &ControlPlane,
    admin: &Client,
    opts: &Options,
    report: &mut String,
) -> String {
    let (nodes, pods) = footprint::sizes(opts.preset);
    let schedulers: Vec<Contender> = opts
        .contenders
        .iter()
        .copied()
        .filter(|c| c.schedules())
        .collect();
    let mut runs: HashMap<&str, Vec<Footprint>> = HashMap::new();
    let mut failures: HashMap<&str, String> = HashMap::new();
    for round in 0..opts.rounds {
        for (i, c) in order(&schedulers, round) {
            eprintln!(
                "== {FOOTPRINT} / {} round {}/{} ({nodes} nodes, {pods} pods)",
                c.name(),
                round + 1,
                opts.rounds
            );
            match footprint_one(cp, admin, c, opts.preset, 9000 + round * 10 + i).await {
                Ok(f) => runs.entry(c.name()).or_default().push(f),
                Err(e) => {
                    eprintln!("{} FAILED {FOOTPRINT}: {e}", c.name());
                    failures.entry(c.name()).or_insert(e);
                }
            }
        }
    }
    let _ = write!(
        report,
        "\nMemory per node and per pod (bytes; {nodes} nodes, {pods} pods; medians of {} rounds):\n\n| contender | idle RSS MB on 1 node | anon RSS / node | anon RSS / pod | RSS / node | RSS / pod | Go heap / node | Go heap / pod |\n|---|---|---|---|---|---|---|---|\n",
        opts.rounds
    );
    let mut line = format!("BENCH workload={FOOTPRINT} nodes={nodes} pods={pods}");
    for c in &schedulers {
        let name = c.name();
        if let Some(e) = failures.get(name) {
            let _ = writeln!(report, "| {name} | FAILED: {e} | | | | | | |");
            let _ = write!(
                line,
                " {name}_bytes_per_node=FAILED {name}_bytes_per_pod=FAILED"
            );
            continue;
        }
        let r = runs.get(name).map_or(&[][..], |r| r);
        let med = |f: fn(&Footprint) -> Option<f64>| {
            let v: Vec<f64> = r.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| report::median_of(v))
        };
        let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        let anon_node = med(|f| Some(f.anon_per_node));
        let anon_pod = med(|f| Some(f.anon_per_pod));
        let _ = writeln!(
            report,
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            med(|f| Some(f.base_rss_mb)).map_or("-".into(), |v| format!("{v:.1}")),
            fmt(anon_node),
            fmt(anon_pod),
            fmt(med(|f| Some(f.rss_per_node))),
            fmt(med(|f| Some(f.rss_per_pod))),
            fmt(med(|f| f.heap_per_node)),
            fmt(med(|f| f.heap_per_pod)),
        );
        let _ = write!(
            line,
            " {name}_bytes_per_node={} {name}_bytes_per_pod={}",
            fmt(anon_node),
            fmt(anon_pod)
        );
        if *c == Contender::Upstream {
            let _ = write!(
                line,
                " upstream_go_heap_bytes_per_node={} upstream_go_heap_bytes_per_pod={}",
                fmt(med(|f| f.heap_per_node)),
                fmt(med(|f| f.heap_per_pod))
            );
        }
    }
    line
}
