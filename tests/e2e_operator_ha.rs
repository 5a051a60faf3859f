//! Operator HA on the real control plane (etcd, kube-apiserver, kwok): two `ksched operator`
//! processes elect a leader on the Lease `ksched-operator`; the follower is ready but does not
//! reconcile; SIGKILL of the leader hands the Lease over once it expires and the Embedded
//! profile's scheduler with it, at once (its Lease is taken from the stopped operator's
//! scheduler), so scheduling resumes within one lease duration and a retry period of the kill,
//! while the profile says `OperatorStopped`; SIGTERM hands them over at once (the Lease is
//! released); a partitioned leader stops scheduling before the next one starts. Gaps are
//! printed.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;

use support::nodes::Nodes;
use support::operator::{http_get, sample, wait_profile_ready};
use support::process::LoggedChild;
use support::scheduler::ksched_bin;
use support::wait::{create_bound, poll};
use support::{Components, ControlPlane, control_plane, free_port, path_str};

const NS: &str = "ksched-ha";
/// The operator's defaults (`--leader-elect-*`, the chart's values).
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// One `ksched operator` process, named by its HOSTNAME (the start of its Lease identity).
struct Operator {
    name: String,
    process: LoggedChild,
    http: std::net::SocketAddr,
}

impl Operator {
    fn start(name: &str) -> Operator {
        Self::start_with(name, &cp().kubeconfig, NS)
    }

    /// An operator in `namespace` reaching the API server through `kubeconfig` (a relay's).
    fn start_with(name: &str, kubeconfig: &std::path::Path, namespace: &str) -> Operator {
        let cp = cp();
        let port = free_port();
        let mut cmd = Command::new(ksched_bin());
        cmd.args([
            "operator".to_string(),
            format!("--kubeconfig={}", path_str(kubeconfig)),
            format!("--namespace={namespace}"),
            "--image=ksched:e2e".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--http-port={port}"),
        ])
        .env("HOSTNAME", name)
        .env("RUST_LOG", "info,ksched=debug,kube_runtime=warn");
        let process = LoggedChild::spawn(cmd, cp.dir.join(format!("{name}.log")));
        Operator {
            name: name.into(),
            process,
            http: ([127, 0, 0, 1], port).into(),
        }
    }

    async fn wait_ready(&self) {
        let logs = || self.logs();
        poll(
            &format!("{} /readyz", self.name),
            Duration::from_secs(120),
            logs,
            async || {
                let up = tokio::net::TcpStream::connect(self.http).await.is_ok();
                (up && http_get(self.http, "/readyz").await.0 == 200).then_some(())
            },
        )
        .await;
    }

    async fn leader_metric(&self) -> Option<f64> {
        let (_, metrics) = http_get(self.http, "/metrics").await;
        sample(
            &metrics,
            r#"leader_election_master_status{name="ksched-operator"} "#,
        )
    }

    fn logs(&self) -> String {
        format!(
            "--- {} ---\n{}",
            self.name,
            support::wait::tail(&self.process.logs(), 40)
        )
    }
}

/// The holder of the operator Lease.
async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(ksched::operator::LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Waits until an operator of `ops` holds the Lease; its index.
async fn wait_leader(leases: &Api<Lease>, ops: &[&Operator], within: Duration) -> usize {
    let logs = || ops.iter().map(|o| o.logs()).collect::<Vec<_>>().join("\n");
    poll("an operator leads", within, logs, async || {
        let h = holder(leases).await?;
        ops.iter()
            .position(|o| h.starts_with(&format!("{}_", o.name)))
    })
    .await
}

/// Polls until pod `name` is bound (how the test sees it), recording the distinct `Ready` reasons
/// profile `profile` went through meanwhile; when it was seen bound, and the reasons.
async fn watch_until_bound(
    client: &kube::Client,
    pods: &Api<Pod>,
    profile: &str,
    name: &str,
    logs: impl Fn() -> String,
) -> (Instant, Vec<String>) {
    let profiles: Api<ksched::api::SchedulerProfile> = Api::all(client.clone());
    let mut reasons: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(p) = profiles.get(profile).await {
            let reason = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.reason.clone());
            if let Some(reason) = reason
                && reasons.last() != Some(&reason)
            {
                if reason == "OperatorStopped" {
                    support::fixtures::save_argocd_fixture("schedulerprofile-operatorstopped", &p);
                }
                reasons.push(reason);
            }
        }
        let bound = pods
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|p| p.spec?.node_name)
            .is_some();
        if bound {
            return (Instant::now(), reasons);
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not bound within 120s; Ready reasons {reasons:?}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The acquire time of the operator Lease, which `op` holds.
async fn holder_since(leases: &Api<Lease>, op: &Operator) -> String {
    let lease = leases
        .get(ksched::operator::LEASE_NAME)
        .await
        .expect("operator Lease");
    let spec = lease.spec.unwrap_or_default();
    assert!(
        spec.holder_identity
            .as_deref()
            .is_some_and(|h| h.starts_with(&format!("{}_", op.name))),
        "{spec:?}"
    );
    spec.acquire_time
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

fn pause_pod(name: &str, scheduler: &str) -> Pod {
    support::fixtures::pause_pod(name, scheduler, "100m", &[], json!({}))
}

/// One installation at a time: every operator reconciles every profile of the cluster.
static INSTALLATION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_the_operator_and_its_embedded_scheduler() {
    let _installation = INSTALLATION.lock().await;
    let cp = cp();
    let client = cp.client().await;
    cp.kubectl_run(&["create", "namespace", NS]);
    let nodes = Nodes::new(cp, "ha");
    nodes.add("0", "8", &[]);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let ns = cp.namespace(&client, "ha").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let a = Operator::start("op-a");
    let b = Operator::start("op-b");
    // Both get ready: the follower's caches are warm too.
    a.wait_ready().await;
    b.wait_ready().await;
    let leader = wait_leader(&leases, &[&a, &b], Duration::from_secs(60)).await;
    let (mut leader, follower) = if leader == 0 { (a, b) } else { (b, a) };
    assert_eq!(leader.leader_metric().await, Some(1.0), "{}", leader.logs());
    assert_eq!(
        follower.leader_metric().await,
        Some(0.0),
        "{}",
        follower.logs()
    );

    cp.apply(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: ha-embedded\nspec:\n  mode: Embedded\n",
    );
    let logs = || format!("{}\n{}", leader.logs(), follower.logs());
    wait_profile_ready(&client, "ha-embedded", logs).await;
    create_bound(&pods, &pause_pod("before", "ha-embedded"), logs).await;
    // Only the leader reconciles and schedules.
    assert!(
        !follower.process.logs().contains("ha-embedded"),
        "the follower acted on the profile:\n{}",
        follower.logs()
    );

    // SIGKILL: the follower takes over once the Lease expires, takes the Embedded profile's Lease
    // from the stopped operator's scheduler at once, and schedules again (the pod is created right
    // after the kill): within one lease duration and a retry period of the kill. Meanwhile the
    // profile says its operator stopped.
    leader.process.kill();
    let killed = Instant::now();
    let logs = || follower.logs();
    let pod = pause_pod("after-kill", "ha-embedded");
    support::wait::create(&pods, &pod).await;
    let (bound, reasons) =
        watch_until_bound(&client, &pods, "ha-embedded", "after-kill", logs).await;
    let resumed = bound.duration_since(killed);
    let takeover = holder_since(&leases, &follower).await;
    eprintln!(
        "operator HA: SIGKILL of the leader -> Embedded profile bound a new pod after {resumed:?} \
         (bound: leaseDuration {LEASE_DURATION:?} + retryPeriod {RETRY_PERIOD:?}); operator Lease \
         taken over at {takeover}; Ready reasons seen meanwhile: {reasons:?}"
    );
    assert!(
        resumed <= LEASE_DURATION + RETRY_PERIOD,
        "no Embedded scheduler for {resumed:?} after the leader's SIGKILL\n{}",
        follower.logs()
    );
    // Once the old leader had provably stopped (its renew deadline), the profile said so.
    assert!(
        reasons.iter().any(|r| r == "OperatorStopped"),
        "{reasons:?}\n{}",
        follower.logs()
    );
    // And Running again under the new leader.
    wait_profile_ready(&client, "ha-embedded", logs).await;
    assert_eq!(
        follower.leader_metric().await,
        Some(1.0),
        "{}",
        follower.logs()
    );

    // SIGTERM: the leader stops its controllers and Embedded scheduler, releases the Lease and
    // exits 0; a new follower leads well before the Lease could have expired.
    let mut leader = follower;
    let next = Operator::start("op-c");
    next.wait_ready().await;
    // SAFETY: signalling a child process this test started.
    assert_eq!(
        unsafe { libc::kill(leader.process.pid(), libc::SIGTERM) },
        0
    );
    let terminated = Instant::now();
    wait_leader(&leases, &[&next], Duration::from_secs(60)).await;
    let handover = terminated.elapsed();
    let leader_log = leader.process.log.clone();
    let logs = || {
        let old = std::fs::read_to_string(&leader_log).unwrap_or_default();
        format!("{}\n{}", support::wait::tail(&old, 40), next.logs())
    };
    let status = poll(
        "the old leader exits",
        Duration::from_secs(60),
        logs,
        async || leader.process.child.try_wait().ok().flatten(),
    )
    .await;
    assert!(status.success(), "exit {status}: {}", leader.logs());
    create_bound(&pods, &pause_pod("after-term", "ha-embedded"), || {
        next.logs()
    })
    .await;
    let resumed = terminated.elapsed();
    eprintln!(
        "operator HA: SIGTERM of the leader -> Lease handed over after {handover:?}; Embedded \
         profile bound a new pod after {resumed:?}"
    );
    assert!(
        handover < LEASE_DURATION,
        "SIGTERM handover took {handover:?}: the Lease was not released"
    );
    drop(leader);

    // Every replica SIGKILLed: nothing runs the profile, and the next replica to start says so
    // (OperatorStopped, once the dead leader's renew deadline has passed on its clock) before it
    // leads and runs it again.
    // The profile first names the new leader's scheduler (Running): only a status that names a
    // scheduler of the dead operator says whose profile stopped.
    let profiles: Api<ksched::api::SchedulerProfile> = Api::all(client.clone());
    let ours = format!("embedded/{}_", next.name);
    poll(
        "the profile names the new leader's scheduler",
        Duration::from_secs(60),
        || next.logs(),
        async || {
            let p = profiles.get("ha-embedded").await.ok()?;
            let leader = p.status?.leader?;
            leader.starts_with(&ours).then_some(())
        },
    )
    .await;
    let mut last = next;
    last.process.kill();
    let restarted = Operator::start("op-d");
    let logs = || restarted.logs();
    let pod = pause_pod("after-all-killed", "ha-embedded");
    support::wait::create(&pods, &pod).await;
    let (_, reasons) =
        watch_until_bound(&client, &pods, "ha-embedded", "after-all-killed", logs).await;
    eprintln!("operator HA: every replica SIGKILLed, a new one started: Ready reasons {reasons:?}");
    assert!(
        reasons.iter().any(|r| r == "OperatorStopped")
            && restarted
                .process
                .logs()
                .contains("profile marked OperatorStopped"),
        "{reasons:?}\n{}",
        restarted.logs()
    );
    wait_profile_ready(&client, "ha-embedded", logs).await;
    cp.kubectl_ok(&["delete", "schedulerprofile", "ha-embedded", "--wait=true"]);
}

/// The time at the start of the first line of `log` containing `needle` (the text format's
/// RFC 3339 timestamp).
fn logged_at(log: &str, needle: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    log.lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok())
}

/// A leader cut off from the API server (its requests hang) stops scheduling at its renew
/// deadline, before the follower can take the operator Lease and start the Embedded scheduler:
/// every bind it sent, and its own word that it stopped, come before the new Embedded scheduler
/// took the profile's Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_scheduling_before_the_next_one_starts() {
    let _installation = INSTALLATION.lock().await;
    let cp = cp();
    let client = cp.client().await;
    // An operator namespace of its own: its operators elect apart from the other test's.
    let operator_ns = "ksched-hapart";
    cp.kubectl_run(&["create", "namespace", operator_ns]);
    let nodes = Nodes::new(cp, "hapart");
    nodes.add("0", "8", &[]);
    let leases: Api<Lease> = Api::namespaced(client.clone(), operator_ns);
    let ns = cp.namespace(&client, "hapart").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The leader reaches the API server through a relay the test can cut.
    let relay = support::relay::Relay::start(cp, "op-cut").await;
    let cut_off = Operator::start_with("op-cut", &relay.kubeconfig, operator_ns);
    cut_off.wait_ready().await;
    wait_leader(&leases, &[&cut_off], Duration::from_secs(120)).await;
    let next = Operator::start_with("op-next", &cp.kubeconfig, operator_ns);
    next.wait_ready().await;
    let logs = || format!("{}\n{}", cut_off.logs(), next.logs());
    cp.apply(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: ha-partition\nspec:\n  mode: Embedded\n",
    );
    wait_profile_ready(&client, "ha-partition", logs).await;
    create_bound(&pods, &pause_pod("before-cut", "ha-partition"), logs).await;
    // Wall clock and the relay's clock, side by side.
    let (base_instant, base_wall) = (Instant::now(), k8s_openapi::jiff::Timestamp::now());
    let wall = |at: Instant| {
        base_wall
            .checked_add(
                k8s_openapi::jiff::SignedDuration::try_from(at.duration_since(base_instant))
                    .unwrap_or_default(),
            )
            .unwrap_or(base_wall)
    };

    relay.cut();
    let cut = Instant::now();
    create_bound(&pods, &pause_pod("after-cut", "ha-partition"), logs).await;
    let resumed = cut.elapsed();
    let profile_lease = leases
        .get(&ksched::operator::object_name("ha-partition"))
        .await
        .expect("the profile's Lease")
        .spec
        .unwrap_or_default();
    let holder = profile_lease.holder_identity.clone().unwrap_or_default();
    assert!(
        holder.starts_with("embedded/op-next_"),
        "{profile_lease:?}\n{}",
        logs()
    );
    let started = profile_lease
        .acquire_time
        .map(|t| t.0)
        .expect("acquireTime");
    let stopped = logged_at(&cut_off.process.logs(), "leadership lost")
        .unwrap_or_else(|| panic!("the cut-off leader never stopped\n{}", logs()));
    let binds: Vec<_> = relay
        .requests()
        .into_iter()
        .filter(|r| r.is_bind())
        .map(|r| wall(r.arrived))
        .collect();
    eprintln!(
        "operator HA, partition: the cut-off leader stopped at {stopped}, the next one's Embedded \
         scheduler took the profile's Lease at {started}; a pod created after the cut was bound \
         {resumed:?} after it; the cut-off leader sent {} bind(s), the last at {:?}",
        binds.len(),
        binds.last()
    );
    assert!(
        stopped < started,
        "stopped {stopped}, the next started {started}"
    );
    for b in &binds {
        assert!(
            *b < started,
            "a bind sent at {b}, after the next leader started at {started}"
        );
    }
    relay.restore();
    cp.kubectl_ok(&["delete", "schedulerprofile", "ha-partition", "--wait=true"]);
}
