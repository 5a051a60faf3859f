//! NetworkTraffic with a real Prometheus (Debian's package, `hack/install-prometheus.sh`) scraping an
//! exporter this test serves, and seed 003's configuration unchanged. The scheduler reaches
//! Prometheus through a relay the test switches, to make it slow or gone.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use ksched::framework::plugins::network_traffic::MetricsSource;
use ksched::framework::plugins::network_traffic::prometheus::PrometheusClient;
use kube::api::Api;
use serde_json::json;
use support::fixtures::pause_pod;
use support::nodes::Nodes;
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, validate};
use support::wait::wait_log;
use support::{Components, ControlPlane, control_plane, free_port};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// Seed 003's scheduler configuration, verbatim.
const SEED_003: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /mnt/d/src/go_work/customScheduler/scheduler.conf
profiles:
- schedulerName: custom-scheduler
  plugins:
    score:
      enabled:
      - name: "NetworkTraffic"
      disabled:
      - name: "*"
  pluginConfig:
    - name: "NetworkTraffic"
      args:
        ip: "http://10.0.0.4:9090"
        deviceName: "eth0"
        timeRange: 60
"#;

/// Serves `node_network_receive_bytes_total` for each `(node, bytes)` on 127.0.0.1 until dropped.
struct Exporter {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Exporter {
    fn start(series: &[(&str, u64)]) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind exporter");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let mut body = String::from("# TYPE node_network_receive_bytes_total counter\n");
        for (node, bytes) in series {
            body.push_str(&format!(
                "node_network_receive_bytes_total{{device=\"eth0\",instance=\"{node}\"}} {bytes}\n\
                 node_network_receive_bytes_total{{device=\"lo\",instance=\"{node}\"}} 999999999\n"
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = conn.read(&mut buf);
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Exporter { port, stop }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What the relay in front of Prometheus does with a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Path {
    /// Passed through to Prometheus.
    Through,
    /// Accepted, and never answered: a hung Prometheus.
    Silent,
    /// Closed at once: Prometheus is gone.
    Down,
}

/// A TCP relay on 127.0.0.1 in front of Prometheus, switched by the test; stops when dropped.
struct Relay {
    port: u16,
    path: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let path = Arc::new(AtomicU8::new(Path::Through as u8));
        let stop = Arc::new(AtomicBool::new(false));
        let (mode, stopped) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                match mode.load(Ordering::Relaxed) {
                    m if m == Path::Through as u8 => {
                        let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", target))
                        else {
                            continue;
                        };
                        pipe(&conn, &upstream);
                        pipe(&upstream, &conn);
                    }
                    m if m == Path::Silent as u8 => {
                        let stopped = stopped.clone();
                        std::thread::spawn(move || {
                            let _held = conn;
                            while !stopped.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        });
                    }
                    _ => drop(conn),
                }
            }
        });
        Relay { port, path, stop }
    }

    fn set(&self, path: Path) {
        self.path.store(path as u8, Ordering::Relaxed);
    }

    fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Copies what `from` sends to `to` until either side closes.
fn pipe(from: &std::net::TcpStream, to: &std::net::TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A Prometheus server on 127.0.0.1 with temporary storage, scraping `target` every second.
struct Prometheus {
    process: LoggedChild,
    port: u16,
}

impl Prometheus {
    fn start(cp: &ControlPlane, target: u16) -> Prometheus {
        let bin = which_prometheus();
        let port = free_port();
        let dir = cp.dir.join(format!("prometheus-{port}"));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: nodes\n  honor_labels: true\n  static_configs:\n  - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .expect("prometheus.yml");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        let process = LoggedChild::spawn(cmd, dir.join("prometheus.log"));
        Prometheus { process, port }
    }

    fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        self.process.kill();
    }

    fn logs(&self) -> String {
        self.process.logs()
    }
}

fn which_prometheus() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "command -v prometheus"])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "prometheus is not installed: run hack/install-prometheus.sh (make testenv does)"
    );
    PathBuf::from(path)
}

/// NetworkTraffic asking `address` every second, and NodeResourcesFit (LeastAllocated) as a
/// tie-breaker that slightly prefers the node with more CPU: while NetworkTraffic scores every
/// node the same, that node wins.
fn config_with(address: &str) -> String {
    format!(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: custom-scheduler
  plugins:
    score:
      enabled:
      - name: NetworkTraffic
      - name: NodeResourcesFit
      disabled:
      - name: "*"
  pluginConfig:
  - name: NetworkTraffic
    args:
      ip: "{address}"
      deviceName: eth0
      timeRange: 60
      refreshPeriodSeconds: 1
"#
    )
}

#[test]
fn seed_003_validates() {
    let stdout = validate("seed-003", SEED_003);
    assert!(stdout.contains("NetworkTraffic"), "{stdout}");
}

/// Creates pod `name` and waits until it is bound; its node.
async fn place(sched: &SchedulerProcess, pods: &Api<Pod>, name: &str) -> String {
    let pod = pause_pod(name, "custom-scheduler", "100m", &[], json!({}));
    sched.create_bound(pods, &pod).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quieter_node_wins_and_a_slow_or_gone_prometheus_does_not_block() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "nettraffic").await;
    let nodes = Nodes::new(cp, "nt");
    // `busy` has 16 times the CPU: without network data, NodeResourcesFit prefers it.
    let busy = nodes.add("busy", "64", &[]);
    let quiet = nodes.add("quiet", "4", &[]);
    let exporter = Exporter::start(&[(&busy, 9_000_000_000), (&quiet, 1_000)]);
    let mut prom = Prometheus::start(cp, exporter.port);
    let relay = Relay::start(prom.port);

    // Wait until Prometheus has scraped both nodes.
    let source = PrometheusClient::new(&prom.address()).expect("address");
    let query = r#"sum_over_time(node_network_receive_bytes_total{device="eth0"}[60s])"#;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let q = source.query(query, Duration::from_secs(2)).await;
        if q.as_ref().is_ok_and(|s| s.len() == 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape the exporter: {q:?}\n{}",
            prom.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let sched = SchedulerProcess::start(cp, "network-traffic", &config_with(&relay.address()));
    wait_log(
        || sched.logs(),
        "NetworkTraffic: measurements from Prometheus",
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..2 {
        assert_eq!(
            place(&sched, &pods, &format!("web-{i}")).await,
            quiet,
            "{}",
            sched.logs()
        );
    }
    assert!(!sched.logs().contains("querying Prometheus failed"));

    // Prometheus hangs: queries time out in the background, the data goes stale (3 periods),
    // NetworkTraffic scores every node the same, and pods are placed without waiting for it.
    relay.set(Path::Silent);
    wait_log(|| sched.logs(), "querying Prometheus failed").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for i in 0..2 {
        assert_eq!(
            place(&sched, &pods, &format!("slow-{i}")).await,
            busy,
            "{}",
            sched.logs()
        );
    }
    // Prometheus gone: the same, and the outage is logged once.
    relay.set(Path::Down);
    prom.stop();
    assert_eq!(place(&sched, &pods, "down").await, busy, "{}", sched.logs());
    let log = sched.logs();
    assert_eq!(
        log.matches("querying Prometheus failed").count(),
        1,
        "{log}"
    );
    drop(relay);
    drop(exporter);
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_runs_unchanged() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "seed003").await;
    let nodes = Nodes::new(cp, "s3");
    nodes.add("a", "8", &[]);
    // The seed's Prometheus (10.0.0.4:9090) is not reachable from here: scheduling goes on.
    let sched = SchedulerProcess::start(cp, "seed-003", SEED_003);
    wait_log(|| sched.logs(), "starting to schedule").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    sched
        .create_bound(
            &pods,
            &pause_pod("web", "custom-scheduler", "100m", &[], json!({})),
        )
        .await;
    drop(nodes);
}
