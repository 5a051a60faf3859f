//! Operator HA on the real control plane (etcd, kube-apiserver, kwok): two `ksched operator`
//! processes elect a leader on the Lease `ksched-operator`; the follower is ready but does not
//! reconcile; SIGKILL of the leader hands the Lease and the Embedded profile's scheduler over once
//! the Lease expires; SIGTERM hands them over at once (the Lease is released). Gaps are printed.

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
        let cp = cp();
        let port = free_port();
        let mut cmd = Command::new(ksched_bin());
        cmd.args([
            "operator".to_string(),
            format!("--kubeconfig={}", path_str(&cp.kubeconfig)),
            format!("--namespace={NS}"),
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

fn pause_pod(name: &str, scheduler: &str) -> Pod {
    support::fixtures::pause_pod(name, scheduler, "100m", &[], json!({}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_the_operator_and_its_embedded_scheduler() {
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

    // SIGKILL: the follower takes over once the Lease expires, and the Embedded profile schedules
    // again (the pod is created right after the kill).
    leader.process.kill();
    let killed = Instant::now();
    let logs = || follower.logs();
    let pod = pause_pod("after-kill", "ha-embedded");
    support::wait::create(&pods, &pod).await;
    wait_leader(&leases, &[&follower], Duration::from_secs(120)).await;
    let takeover = killed.elapsed();
    support::wait::wait_bound(&pods, "after-kill", Duration::from_secs(120), logs).await;
    let resumed = killed.elapsed();
    eprintln!(
        "operator HA: SIGKILL of the leader -> Lease taken over after {takeover:?} (leaseDuration \
         {LEASE_DURATION:?} + retryPeriod {RETRY_PERIOD:?}); Embedded profile bound a new pod after {resumed:?}"
    );
    // Generous (load): a takeover needs the Lease to expire, never more than a few retries more.
    assert!(
        takeover < LEASE_DURATION + RETRY_PERIOD * 5,
        "takeover after {takeover:?}"
    );
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
    cp.kubectl_ok(&["delete", "schedulerprofile", "ha-embedded", "--wait=true"]);
    drop(leader);
}
