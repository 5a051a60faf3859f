//! Faults between `ksched scheduler` replicas and the API server, on the real control plane: a
//! leader partitioned away (through a relay the test controls, `support::relay`), the API server
//! frozen (SIGSTOP), the API server unreachable. Short leases keep each test well under a minute.
//! The tests of this binary run one at a time: one of them freezes the API server.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::process::pid_of;
use support::relay::{Logged, Relay};
use support::scheduler::SchedulerProcess;
use support::wait::{create, node, poll, tail};
use support::{Components, ControlPlane, control_plane};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::API_ONLY)
}

/// The leases of these tests: another replica may take over 6 s after it last saw a renewal; the
/// leader gives up 4 s after it last sent one; one attempt waits at most 2 s (renewDeadline / 2).
const LEASE_DURATION: Duration = Duration::from_secs(6);
const RENEW_DEADLINE: Duration = Duration::from_secs(4);

/// A configuration for `name`'s replicas, electing on Lease `ns/name`; `client` adds
/// `clientConnection` fields.
fn ha_config(name: &str, ns: &str, client: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {{{client}}}
leaderElection:
  leaderElect: true
  resourceName: {name}
  resourceNamespace: {ns}
  leaseDuration: {}s
  renewDeadline: {}s
  retryPeriod: 1s
profiles:
- schedulerName: {name}
",
        LEASE_DURATION.as_secs(),
        RENEW_DEADLINE.as_secs()
    )
}

/// One `ksched scheduler` replica talking to the API server through its own relay.
struct Replica {
    name: String,
    relay: Relay,
    process: SchedulerProcess,
}

impl Replica {
    async fn start(cp: &ControlPlane, name: &str, config: &str) -> Replica {
        let relay = Relay::start(cp, name).await;
        let process = SchedulerProcess::start_via(cp, name, config, &relay.kubeconfig);
        Replica {
            name: name.to_string(),
            relay,
            process,
        }
    }

    fn logs(&self) -> String {
        self.process.logs()
    }

    fn identity_is(&self, identity: &str) -> bool {
        self.logs().contains(&format!("identity={identity}"))
    }

    /// Exited (a zombie until reaped: its CPU times stay readable).
    fn exited(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.process.pid()));
        stat.map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
    }

    fn binds(&self) -> Vec<Logged> {
        self.relay
            .requests()
            .into_iter()
            .filter(Logged::is_bind)
            .collect()
    }

    /// When its first successful write of the lease arrived: the lease is its own from then on.
    fn acquired_lease(&self, lease: &str) -> Option<Instant> {
        self.relay
            .requests()
            .iter()
            .find(|r| r.wrote_lease(lease))
            .map(|r| r.arrived)
    }
}

fn all_logs(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .map(|r| format!("--- {}:\n{}", r.name, tail(&r.logs(), 60)))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    let lease = leases.get_opt(name).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Waits for a holder of `name` that is one of `replicas`; its index.
async fn leader(leases: &Api<Lease>, name: &str, replicas: &[&Replica]) -> usize {
    poll(
        "a leader elected",
        Duration::from_secs(60),
        || all_logs(replicas),
        async || {
            let id = holder(leases, name).await?;
            replicas.iter().position(|r| r.identity_is(&id))
        },
    )
    .await
}

fn pod(name: &str, scheduler: &str, cpu: &str) -> Pod {
    pause_pod(name, scheduler, cpu, &[], json!({}))
}

async fn bound_pods(pods: &Api<Pod>) -> Vec<Pod> {
    let list = pods.list(&ListParams::default()).await.expect("list pods");
    list.items
        .into_iter()
        .filter(|p| node(p).is_some())
        .collect()
}

/// Millicores requested per node by the pods of `pods`.
fn millicores_per_node(pods: &[Pod]) -> BTreeMap<String, i64> {
    let mut per_node = BTreeMap::new();
    for p in pods {
        let cpu: i64 = p
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
            .map(|q| {
                let q = q.0.as_str();
                q.strip_suffix('m')
                    .map(|m| m.parse::<i64>().expect("millicores"))
                    .unwrap_or_else(|| q.parse::<i64>().expect("cores") * 1000)
            })
            .sum();
        *per_node.entry(node(p).unwrap_or_default()).or_insert(0) += cpu;
    }
    per_node
}

/// (a) The leader is cut off from the API server for longer than the lease while the standby still
/// reaches it. The leader stops binding before the lease moves (it gives up renewDeadline after
/// its last renewal, the standby can take over only leaseDuration after seeing it), no bind leaves
/// a replica that is not the leader, no node is overcommitted, and every pod ends bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_binding_before_the_lease_moves() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "cut").await;
    let name = "ksched-cut";
    // 4 nodes of 2 cores and 32 pods of 250m: full to the last pod, so two leaders placing pods
    // from different caches would overcommit a node or leave a pod unschedulable.
    let nodes = Nodes::new(cp, "cut");
    for n in ["a", "b", "c", "d"] {
        nodes.create(n, "2", &[]);
    }
    // Binds at 2 a second: the leader still has binding cycles to run when the lease moves.
    let config = ha_config(name, &ns, "qps: 2, burst: 1");
    let first = Replica::start(cp, "cut-1", &config).await;
    let second = Replica::start(cp, "cut-2", &config).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let both = [&first, &second];
    let l = leader(&leases, name, &both).await;
    let (old, standby) = if l == 0 {
        (first, second)
    } else {
        (second, first)
    };
    let old_identity = holder(&leases, name).await.expect("holder");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..32 {
        create(&pods, &pod(&format!("p-{i}"), name, "250m")).await;
    }
    let logs = || all_logs(&[&old, &standby]);
    poll("4 pods bound", Duration::from_secs(60), logs, async || {
        (bound_pods(&pods).await.len() >= 4).then_some(())
    })
    .await;
    let cut_at = Instant::now();
    old.relay.cut();

    // The lease moves to the standby once it has seen no renewal for leaseDuration.
    let new_identity = poll(
        "the lease moved to the standby",
        Duration::from_secs(60),
        logs,
        async || holder(&leases, name).await.filter(|h| *h != old_identity),
    )
    .await;
    assert!(standby.identity_is(&new_identity), "{}", logs());
    // Cut for longer than the lease, then heal.
    let cut_for = LEASE_DURATION + Duration::from_secs(4);
    tokio::time::sleep(cut_for.saturating_sub(cut_at.elapsed())).await;
    old.relay.restore();
    let healed_at = Instant::now();

    let all = poll(
        "all 32 pods bound",
        Duration::from_secs(90),
        logs,
        async || {
            let bound = bound_pods(&pods).await;
            (bound.len() == 32).then_some(bound)
        },
    )
    .await;

    let moved = standby
        .acquired_lease(name)
        .expect("the standby's lease write went through its relay");
    let old_binds = old.binds();
    let late: Vec<_> = old_binds.iter().filter(|b| b.arrived >= moved).collect();
    assert!(
        late.is_empty(),
        "the old leader sent {} binds after the lease moved: {late:?}\n{}",
        late.len(),
        logs()
    );
    let last_bind = old_binds.iter().map(|b| b.arrived).max();
    let in_cut = old_binds.iter().filter(|b| b.arrived >= cut_at).count();
    // No bind by a replica that was not the leader: the standby binds only once it holds the lease.
    let early: Vec<_> = standby
        .binds()
        .into_iter()
        .filter(|b| b.arrived < moved)
        .collect();
    assert!(
        early.is_empty(),
        "the standby bound before it led: {early:?}"
    );
    for (node, millicores) in millicores_per_node(&all) {
        assert!(
            millicores <= 2000,
            "node {node} overcommitted: {millicores}m of 2000m"
        );
    }
    // The old leader says why it stopped, and exits, as upstream's does.
    let stopped = poll(
        "the old leader exited",
        Duration::from_secs(30),
        logs,
        async || old.exited().then_some(()),
    );
    stopped.await;
    let old_log = old.logs();
    assert!(
        old_log.contains("stopped leading")
            && old_log.contains("not renewed within the renew deadline (4s)"),
        "{}",
        tail(&old_log, 40)
    );
    eprintln!(
        "partition: cut at 0 s; the old leader's last bind at {:?}, {in_cut} of its binds sent while \
         cut; the lease moved at {:?}; healed at {:?}",
        last_bind.map(|t| t.saturating_duration_since(cut_at)),
        moved.saturating_duration_since(cut_at),
        healed_at.saturating_duration_since(cut_at),
    );
}

/// Sends SIGCONT to a stopped process when dropped (also when the test fails).
struct Frozen(i32);

impl Frozen {
    fn freeze(pid: i32) -> Frozen {
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

/// (b) The API server is frozen (SIGSTOP) for longer than renewDeadline: the leader steps down
/// while it is frozen, and after SIGCONT the standby takes over and schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_api_server_makes_the_leader_step_down() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "stop").await;
    let name = "ksched-stop";
    let nodes = Nodes::new(cp, "stop");
    nodes.create("a", "8", &[]);
    let config = ha_config(name, &ns, "");
    let first = Replica::start(cp, "stop-1", &config).await;
    let second = Replica::start(cp, "stop-2", &config).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let l = leader(&leases, name, &[&first, &second]).await;
    let (old, standby) = if l == 0 {
        (first, second)
    } else {
        (second, first)
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(&pods, &pod("before", name, "100m")).await;
    old.process.bound(&pods, "before").await;

    let apiserver = pid_of("kube-apiserver").expect("kube-apiserver pid");
    let frozen = Frozen::freeze(apiserver);
    let frozen_at = Instant::now();
    let freeze_for = RENEW_DEADLINE * 3;
    let mut stepped_down = None;
    while frozen_at.elapsed() < freeze_for {
        if stepped_down.is_none() && old.logs().contains("stopped leading") {
            stepped_down = Some(frozen_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exited_while_frozen = old.exited();
    drop(frozen);

    let logs = || all_logs(&[&old, &standby]);
    let stepped_down = stepped_down.unwrap_or_else(|| {
        panic!(
            "the leader did not step down while the API server was frozen for {freeze_for:?}\n{}",
            logs()
        )
    });
    assert!(exited_while_frozen, "{}", logs());
    let old_log = old.logs();
    assert!(
        old_log.contains("not renewed within the renew deadline (4s); last attempt: the API server did not answer within 2s"),
        "{}",
        tail(&old_log, 40)
    );
    create(&pods, &pod("after", name, "100m")).await;
    standby.process.bound(&pods, "after").await;
    eprintln!("frozen API server: the leader stepped down {stepped_down:?} after the freeze");
}

/// User plus system CPU time of `pid` so far (also of an exited, not yet reaped child).
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/pid/stat");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Log output at most per replica during a 30 s outage (at `--v=4`, debug logs on).
const OUTAGE_LOG_BOUND: u64 = 128 * 1024;
/// CPU time at most per replica during a 30 s outage.
const OUTAGE_CPU_BOUND: Duration = Duration::from_secs(2);

/// (c) The API server cannot be reached for 30 s: each replica's informers and elector retry with
/// backoff, so log output and CPU during the outage stay small; after it, scheduling resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_costs_little_log_and_cpu() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "down").await;
    let name = "ksched-down";
    let nodes = Nodes::new(cp, "down");
    nodes.create("a", "8", &[]);
    let config = ha_config(name, &ns, "");
    let replicas = vec![
        Replica::start(cp, "down-1", &config).await,
        Replica::start(cp, "down-2", &config).await,
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let l = leader(&leases, name, &replicas.iter().collect::<Vec<_>>()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(&pods, &pod("before", name, "100m")).await;
    replicas[l].process.bound(&pods, "before").await;

    let log_size = |r: &Replica| std::fs::metadata(&r.process.process.log).map_or(0, |m| m.len());
    let before: Vec<(u64, Duration)> = replicas
        .iter()
        .map(|r| (log_size(r), cpu_time(r.process.pid())))
        .collect();
    for r in &replicas {
        r.relay.down();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after: Vec<(u64, Duration)> = replicas
        .iter()
        .map(|r| (log_size(r), cpu_time(r.process.pid())))
        .collect();
    for r in &replicas {
        r.relay.restore();
    }

    let figures: Vec<(u64, Duration)> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.0 - b.0, a.1.saturating_sub(b.1)))
        .collect();
    let report: Vec<String> = replicas
        .iter()
        .zip(&figures)
        .enumerate()
        .map(|(i, (r, (logged, cpu)))| {
            let role = if i == l { "leader" } else { "standby" };
            format!("{} ({role}): {logged} bytes of log, {cpu:?} CPU", r.name)
        })
        .collect();
    eprintln!("30 s outage: {}", report.join("; "));
    for (i, r) in replicas.iter().enumerate() {
        let (logged, cpu) = figures[i];
        let log = r.logs();
        let during = log
            .get(usize::try_from(before[i].0).unwrap_or(0)..)
            .unwrap_or("");
        assert!(
            logged <= OUTAGE_LOG_BOUND && cpu <= OUTAGE_CPU_BOUND,
            "{} logged {logged} bytes and used {cpu:?} of CPU during the outage (at most \
             {OUTAGE_LOG_BOUND} bytes and {OUTAGE_CPU_BOUND:?}):\n{}",
            r.name,
            tail(during, 40)
        );
    }
    // Scheduling resumes: the replica still running leads and binds.
    create(&pods, &pod("after", name, "100m")).await;
    let running = replicas
        .iter()
        .position(|r| !r.exited())
        .expect("a replica is still running");
    replicas[running].process.bound(&pods, "after").await;
}

/// SIGTERM right after a burst of bindings: the queued events are written before the process
/// exits, and the lease is released (a successor need not wait for it to expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_the_queued_events_and_releases_the_lease() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "term").await;
    let name = "ksched-term";
    let nodes = Nodes::new(cp, "term");
    // 110 pods fit on a node.
    for n in ["a", "b", "c"] {
        nodes.create(n, "16", &[]);
    }
    let config = ha_config(name, &ns, "qps: 200, burst: 200");
    let replica = Replica::start(cp, "term-1", &config).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    leader(&leases, name, &[&replica]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let count = 200;
    for i in 0..count {
        create(&pods, &pod(&format!("p-{i}"), name, "10m")).await;
    }
    poll(
        "all pods bound",
        Duration::from_secs(180),
        || tail(&replica.logs(), 40),
        async || (bound_pods(&pods).await.len() == count).then_some(()),
    )
    .await;
    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(replica.process.pid(), libc::SIGTERM) },
        0
    );
    let terminated = Instant::now();
    poll(
        "the scheduler exited after SIGTERM",
        Duration::from_secs(30),
        || tail(&replica.logs(), 40),
        async || replica.exited().then_some(()),
    )
    .await;
    let exit_took = terminated.elapsed();
    let scheduled = support::events::with_reason(&client, &ns, "Scheduled").await;
    assert_eq!(
        scheduled.len(),
        count,
        "Scheduled events written before exit\n{}",
        tail(&replica.logs(), 40)
    );
    assert_eq!(
        holder(&leases, name).await,
        None,
        "the lease was not released"
    );
    eprintln!("SIGTERM: exited {exit_took:?} after the signal with every event written");
}
