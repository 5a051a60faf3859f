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

/// One test's scheduler `ksched-<test>`: its namespace (which holds its Lease and pods), its nodes
/// and its replicas, one of which leads.
struct Scheduler {
    name: String,
    ns: String,
    client: kube::Client,
    leases: Api<Lease>,
    pods: Api<Pod>,
    replicas: Vec<Replica>,
    leader: usize,
    _nodes: Nodes,
}

impl Scheduler {
    /// Creates nodes `<test>-<suffix>` with `cores` each, starts `replicas` replicas (with
    /// `client_connection` fields), and waits until one leads.
    async fn start(
        test: &str,
        nodes: &[&str],
        cores: &str,
        replicas: usize,
        client_connection: &str,
    ) -> Scheduler {
        let cp = cp();
        let client = cp.client().await;
        let ns = cp.namespace(&client, test).await;
        let name = format!("ksched-{test}");
        let node_set = Nodes::new(cp, test);
        for n in nodes {
            node_set.create(n, cores, &[]);
        }
        let config = ha_config(&name, &ns, client_connection);
        let mut started = Vec::new();
        for i in 1..=replicas {
            started.push(Replica::start(cp, &format!("{test}-{i}"), &config).await);
        }
        let mut s = Scheduler {
            leases: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client.clone(), &ns),
            name,
            ns,
            client,
            replicas: started,
            leader: 0,
            _nodes: node_set,
        };
        s.leader = poll(
            "a leader elected",
            Duration::from_secs(60),
            || s.logs(),
            async || {
                let id = s.holder().await?;
                s.replicas.iter().position(|r| r.identity_is(&id))
            },
        )
        .await;
        s
    }

    /// The leader at start and the other replica (of two).
    fn leader_and_standby(&self) -> (&Replica, &Replica) {
        (&self.replicas[self.leader], &self.replicas[1 - self.leader])
    }

    async fn holder(&self) -> Option<String> {
        let lease = self.leases.get_opt(&self.name).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("--- {}:\n{}", r.name, tail(&r.logs(), 60)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Creates pod `name` of this scheduler requesting `cpu`.
    async fn create(&self, name: &str, cpu: &str) {
        create(
            &self.pods,
            &pause_pod(name, &self.name, cpu, &[], json!({})),
        )
        .await;
    }

    async fn bound_pods(&self) -> Vec<Pod> {
        let list = self
            .pods
            .list(&ListParams::default())
            .await
            .expect("list pods");
        list.items
            .into_iter()
            .filter(|p| node(p).is_some())
            .collect()
    }

    /// Waits (up to 30 s) until `replica` has exited.
    async fn exited(&self, replica: &Replica, who: &str) {
        let what = format!("{who} exited");
        let exited = async || replica.exited().then_some(());
        poll(&what, Duration::from_secs(30), || self.logs(), exited).await;
    }

    /// Waits until `n` pods are bound; them.
    async fn bound(&self, n: usize, within: Duration) -> Vec<Pod> {
        poll(
            &format!("{n} pods bound"),
            within,
            || self.logs(),
            async || {
                let bound = self.bound_pods().await;
                (bound.len() >= n).then_some(bound)
            },
        )
        .await
    }
}

/// Millicores requested per node by `pods`.
fn millicores_per_node(pods: &[Pod]) -> BTreeMap<String, i64> {
    let mut per_node = BTreeMap::new();
    for p in pods {
        let cpu: i64 = p
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
            .map(|q| ksched::quantity::milli_value(q).expect("a cpu quantity"))
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
    // 4 nodes of 2 cores and 32 pods of 250m: full to the last pod, so two leaders placing pods
    // from different caches would overcommit a node or leave a pod unschedulable. Binds at 2 a
    // second: the leader still has binding cycles to run when the lease moves.
    let s = Scheduler::start("cut", &["a", "b", "c", "d"], "2", 2, "qps: 2, burst: 1").await;
    let (old, standby) = s.leader_and_standby();
    let old_identity = s.holder().await.expect("holder");
    for i in 0..32 {
        s.create(&format!("p-{i}"), "250m").await;
    }
    s.bound(4, Duration::from_secs(60)).await;
    let cut_at = Instant::now();
    old.relay.cut();

    // The lease moves to the standby once it has seen no renewal for leaseDuration.
    let new_identity = poll(
        "the lease moved to the standby",
        Duration::from_secs(60),
        || s.logs(),
        async || s.holder().await.filter(|h| *h != old_identity),
    )
    .await;
    assert!(standby.identity_is(&new_identity), "{}", s.logs());
    // Cut for longer than the lease, then heal.
    let cut_for = LEASE_DURATION + Duration::from_secs(4);
    tokio::time::sleep(cut_for.saturating_sub(cut_at.elapsed())).await;
    old.relay.restore();
    let healed_at = Instant::now();
    let all = s.bound(32, Duration::from_secs(90)).await;

    let moved = standby
        .acquired_lease(&s.name)
        .expect("the standby's lease write went through its relay");
    let old_binds = old.binds();
    let late: Vec<_> = old_binds.iter().filter(|b| b.arrived >= moved).collect();
    assert!(
        late.is_empty(),
        "the old leader sent {} binds after the lease moved: {late:?}\n{}",
        late.len(),
        s.logs()
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
    s.exited(old, "the old leader").await;
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
    let s = Scheduler::start("stop", &["a"], "8", 2, "").await;
    let (old, standby) = s.leader_and_standby();
    s.create("before", "100m").await;
    old.process.bound(&s.pods, "before").await;

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

    let stepped_down = stepped_down.unwrap_or_else(|| {
        panic!(
            "the leader did not step down while the API server was frozen for {freeze_for:?}\n{}",
            s.logs()
        )
    });
    assert!(exited_while_frozen, "{}", s.logs());
    let old_log = old.logs();
    assert!(
        old_log.contains(
            "not renewed within the renew deadline (4s); last attempt: the API server did not \
             answer within 2s"
        ),
        "{}",
        tail(&old_log, 40)
    );
    s.create("after", "100m").await;
    standby.process.bound(&s.pods, "after").await;
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

/// Upstream kube-scheduler (the testenv's) at the same verbosity, leader-elected on a Lease of its
/// own, talking to the API server through a relay: the reference for the outage figures.
struct Upstream {
    relay: Relay,
    process: support::process::LoggedChild,
}

impl Upstream {
    async fn start(cp: &ControlPlane, name: &str, ns: &str) -> Upstream {
        let relay = Relay::start(cp, name).await;
        let config = cp.dir.join(format!("{name}-config.yaml"));
        // kube-scheduler ignores --kubeconfig with --config: the file names it.
        let yaml = ha_config(name, ns, "").replace(
            "clientConnection: {}",
            &format!(
                "clientConnection:\n  kubeconfig: {}",
                relay.kubeconfig.display()
            ),
        );
        std::fs::write(&config, yaml).expect("write kube-scheduler config");
        let mut cmd = std::process::Command::new(cp.bin_dir.join("kube-scheduler"));
        cmd.args([
            format!("--config={}", config.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", support::free_port()),
            "--v=4".into(),
        ]);
        let process = support::process::LoggedChild::spawn(cmd, cp.dir.join(format!("{name}.log")));
        Upstream { relay, process }
    }
}

/// (c) The API server cannot be reached for 30 s: each replica's informers and elector retry with
/// backoff and repeated errors are rate-limited, so log output and CPU during the outage stay
/// small, and no larger than upstream kube-scheduler's in the same outage (measured beside them,
/// at the same `--v=4`); after it, scheduling resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_costs_little_log_and_cpu() {
    let _serial = SERIAL.lock().await;
    let s = Scheduler::start("down", &["a"], "8", 2, "").await;
    s.create("before", "100m").await;
    s.replicas[s.leader].process.bound(&s.pods, "before").await;
    let upstream = Upstream::start(cp(), "kube-scheduler-down", &s.ns).await;
    // It has synced (and campaigns on its own Lease) before the outage starts.
    poll(
        "kube-scheduler synced",
        Duration::from_secs(60),
        || tail(&upstream.process.logs(), 20),
        async || {
            upstream
                .process
                .logs()
                .contains("Caches populated")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let measure = |r: &Replica| {
        let log = std::fs::metadata(&r.process.process.log).map_or(0, |m| m.len());
        (log, cpu_time(r.process.pid()))
    };
    let measure_upstream = || {
        let log = std::fs::metadata(&upstream.process.log).map_or(0, |m| m.len());
        (log, cpu_time(upstream.process.pid()))
    };
    let before: Vec<(u64, Duration)> = s.replicas.iter().map(measure).collect();
    let upstream_before = measure_upstream();
    for r in &s.replicas {
        r.relay.down();
    }
    upstream.relay.down();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after: Vec<(u64, Duration)> = s.replicas.iter().map(measure).collect();
    let upstream_after = measure_upstream();
    for r in &s.replicas {
        r.relay.restore();
    }
    upstream.relay.restore();
    let upstream_logged = upstream_after.0 - upstream_before.0;
    let upstream_cpu = upstream_after.1.saturating_sub(upstream_before.1);
    eprintln!(
        "30 s outage: kube-scheduler (leader): {upstream_logged} bytes of log, {upstream_cpu:?} CPU"
    );

    let figures: Vec<(u64, Duration)> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.0 - b.0, a.1.saturating_sub(b.1)))
        .collect();
    let report: Vec<String> = s
        .replicas
        .iter()
        .zip(&figures)
        .enumerate()
        .map(|(i, (r, (logged, cpu)))| {
            let role = if i == s.leader { "leader" } else { "standby" };
            format!("{} ({role}): {logged} bytes of log, {cpu:?} CPU", r.name)
        })
        .collect();
    eprintln!("30 s outage: {}", report.join("; "));
    for (i, r) in s.replicas.iter().enumerate() {
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
        // Not more than kube-scheduler in the same outage (a small floor for a quiet upstream).
        let upstream_bound = upstream_logged.max(8 * 1024);
        assert!(
            logged <= upstream_bound,
            "{} logged {logged} bytes during the outage, kube-scheduler {upstream_logged}:\n{}",
            r.name,
            tail(during, 40)
        );
    }
    // Scheduling resumes: the replica still running leads and binds.
    s.create("after", "100m").await;
    let running = s
        .replicas
        .iter()
        .find(|r| !r.exited())
        .expect("a replica is still running");
    running.process.bound(&s.pods, "after").await;
}

/// SIGTERM right after a burst of bindings: the queued events are written before the process
/// exits, and the lease is released (a successor need not wait for it to expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_the_queued_events_and_releases_the_lease() {
    let _serial = SERIAL.lock().await;
    // 110 pods fit on a node.
    let s = Scheduler::start("term", &["a", "b"], "16", 1, "qps: 200, burst: 200").await;
    let count = 200;
    for i in 0..count {
        s.create(&format!("p-{i}"), "10m").await;
    }
    s.bound(count, Duration::from_secs(180)).await;
    let replica = &s.replicas[0];
    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(replica.process.pid(), libc::SIGTERM) },
        0
    );
    let terminated = Instant::now();
    s.exited(replica, "the scheduler, after SIGTERM,").await;
    let exit_took = terminated.elapsed();
    let scheduled = support::events::with_reason(&s.client, &s.ns, "Scheduled").await;
    assert_eq!(
        scheduled.len(),
        count,
        "Scheduled events written before exit\n{}",
        s.logs()
    );
    assert_eq!(
        s.holder().await,
        None,
        "the lease was not released\n{}",
        s.logs()
    );
    eprintln!("SIGTERM: exited {exit_took:?} after the signal with every event written");
}
