//! The real test control plane: etcd, kube-apiserver and, when a test binary asks for them,
//! kube-controller-manager and kwok, built by `hack/testenv/` and started here on loopback with free
//! ports and a temporary directory. One control plane is shared by all tests of a test binary; every
//! process started here is stopped when the binary exits (also after a panicking test), and is killed
//! by the kernel if the binary itself dies (PR_SET_PDEATHSIG).
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod collect;
pub mod events;
pub mod fixtures;
pub mod helm;
pub mod https;
pub mod kstatus;
pub mod nodes;
pub mod operator;
pub mod operator_pods;
pub mod pki;
pub mod podman;
pub mod podman_node;
pub mod process;
pub mod registry;
pub mod relay;
pub mod scheduler;
pub mod uninstall;
pub mod wait;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use process::ProcessGroup;

/// Which optional components a test binary needs beside etcd and kube-apiserver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Components {
    /// Garbage collection, Deployments -> ReplicaSets -> Pods, ServiceAccounts.
    pub controller_manager: bool,
    /// Keeps fake nodes Ready and marks pods bound to them Running.
    pub kwok: bool,
}

impl Components {
    pub const API_ONLY: Components = Components {
        controller_manager: false,
        kwok: false,
    };
    pub const WITH_KWOK: Components = Components {
        controller_manager: false,
        kwok: true,
    };
    pub const FULL: Components = Components {
        controller_manager: true,
        kwok: true,
    };
}

/// A running control plane.
pub struct ControlPlane {
    /// Directory holding certificates, kubeconfig, etcd data and process logs.
    pub dir: PathBuf,
    /// Admin kubeconfig (`system:masters`), for kubectl and child processes.
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// Where the testenv binaries are (`kubectl`, `kube-scheduler`, ...).
    pub bin_dir: PathBuf,
    pub components: Components,
}

static CONTROL_PLANE: OnceLock<ControlPlane> = OnceLock::new();
static PREVIOUS_CONTROL_PLANE: OnceLock<ControlPlane> = OnceLock::new();

/// Which testenv release a control plane runs: the Makefile's pin (`K8S_VERSION`) or the
/// previous supported minor's (`K8S_PREVIOUS_VERSION`, for the version-skew test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Pinned,
    Previous,
}

/// kube-apiserver's flags that serve Kubernetes 1.37's workload API: PodGroups
/// (`scheduling.k8s.io/v1beta1`, gate GenericWorkload) with their `schedulingConstraints` kept
/// (TopologyAwareWorkloadScheduling, alpha). A 1.36 API server knows none of them.
pub const WORKLOAD_API_ARGS: &[&str] = &[
    "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
    "--runtime-config=scheduling.k8s.io/v1beta1=true",
];

/// The test binary's control plane, started on first use with `components`.
pub fn control_plane(components: Components) -> &'static ControlPlane {
    control_plane_with_apiserver_args(components, &[])
}

/// A control plane of `release`, started on first use (one per release and test binary).
pub fn control_plane_of(release: Release, components: Components) -> &'static ControlPlane {
    let cell = match release {
        Release::Pinned => &CONTROL_PLANE,
        Release::Previous => &PREVIOUS_CONTROL_PLANE,
    };
    let cp = cell.get_or_init(|| {
        let bin_dir = testenv_bin_dir_of(release);
        let start = move |procs: &mut ProcessGroup| start(&bin_dir, components, &[], procs);
        match ProcessGroup::start_on_keeper_thread(start) {
            Ok(cp) => cp,
            Err(err) => panic!("starting the {release:?} test control plane failed: {err}"),
        }
    });
    assert_eq!(cp.components, components);
    cp
}

/// [`control_plane`], with `apiserver_args` added to kube-apiserver's command line (alpha APIs
/// and their feature gates, for the bench).
pub fn control_plane_with_apiserver_args(
    components: Components,
    apiserver_args: &'static [&'static str],
) -> &'static ControlPlane {
    let cp = CONTROL_PLANE.get_or_init(|| {
        let bin_dir = testenv_bin_dir();
        let start =
            move |procs: &mut ProcessGroup| start(&bin_dir, components, apiserver_args, procs);
        match ProcessGroup::start_on_keeper_thread(start) {
            Ok(cp) => cp,
            Err(err) => panic!("starting the test control plane failed: {err}"),
        }
    });
    assert_eq!(
        cp.components, components,
        "all tests of one test binary must ask for the same control plane components"
    );
    cp
}

impl ControlPlane {
    /// A new client for the calling test's tokio runtime.
    pub async fn client(&self) -> Client {
        let kubeconfig = match Kubeconfig::read_from(&self.kubeconfig) {
            Ok(k) => k,
            Err(err) => panic!("reading {}: {err}", self.kubeconfig.display()),
        };
        let config =
            match Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await {
                Ok(c) => c,
                Err(err) => panic!("kubeconfig {}: {err}", self.kubeconfig.display()),
            };
        match Client::try_from(config) {
            Ok(c) => c,
            Err(err) => panic!("client: {err}"),
        }
    }

    /// Creates a fresh namespace for one test (with its `default` ServiceAccount, which pods need
    /// even when no kube-controller-manager runs) and returns its name.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> String {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"ksched.io/test": "true"}}
        }))
        .expect("static namespace literal");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))
                .expect("static literal");
        match accounts.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => panic!("create default ServiceAccount: {err}"),
        }
        name
    }

    /// The built kubectl, pointed at this control plane.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST");
        cmd
    }

    /// Runs kubectl with `args`; returns (success, stdout, stderr).
    pub fn kubectl_run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.kubectl().args(args).output().expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl with `args`, which must succeed; returns its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl_run(args);
        assert!(ok, "kubectl {}: {err}", args.join(" "));
        out
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON), which must succeed.
    pub fn apply(&self, manifest: &str) {
        let (ok, _, err) = self.kubectl_stdin(&["apply", "-f", "-"], manifest);
        assert!(ok, "kubectl apply: {err}\n{manifest}");
    }

    /// Runs kubectl with `args` and stdin `input`; returns (success, stdout, stderr).
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> (bool, String, String) {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        let out = child.wait_with_output().expect("wait for kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// Repository root (where Cargo.toml, crds/ and the Makefile are).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/tmp` (cargo's `CARGO_TARGET_TMPDIR` for tests; examples that share this harness get
/// the same place).
pub fn target_tmp() -> PathBuf {
    option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/tmp"))
}

/// The testenv bin directory of the pinned release.
pub fn testenv_bin_dir() -> PathBuf {
    testenv_bin_dir_of(Release::Pinned)
}

/// The testenv bin directory of `release`: `$KSCHED_TESTENV_BIN` or
/// `$KSCHED_TESTENV_PREVIOUS_BIN` (the Makefile sets them), else the cache path for the
/// Makefile's `K8S_VERSION` or `K8S_PREVIOUS_VERSION`.
pub fn testenv_bin_dir_of(release: Release) -> PathBuf {
    let (env, variable) = match release {
        Release::Pinned => ("KSCHED_TESTENV_BIN", "K8S_VERSION"),
        Release::Previous => ("KSCHED_TESTENV_PREVIOUS_BIN", "K8S_PREVIOUS_VERSION"),
    };
    if let Some(dir) = std::env::var_os(env) {
        return PathBuf::from(dir);
    }
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).expect("read Makefile");
    let version = makefile
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(variable)?;
            let value = rest.trim_start().strip_prefix("?=")?;
            Some(value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("{variable} in the Makefile"));
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    cache.join("ksched/testenv").join(version).join("bin")
}

/// A free TCP port on 127.0.0.1 (bound and released; the race is acceptable on a test machine).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

fn start(
    bin_dir: &Path,
    components: Components,
    apiserver_args: &[&str],
    procs: &mut ProcessGroup,
) -> Result<ControlPlane, String> {
    let bin_dir = bin_dir.to_path_buf();
    for name in ["etcd", "kube-apiserver", "kubectl"] {
        if !bin_dir.join(name).exists() {
            return Err(format!(
                "{} not found in {}: run `make testenv`",
                name,
                bin_dir.display()
            ));
        }
    }
    let dir = procs.dir().to_path_buf();
    let pki = pki::Pki::generate(&dir).map_err(|e| format!("generating certificates: {e}"))?;

    let etcd_port = free_port();
    let etcd_peer = free_port();
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    procs.spawn(
        "etcd",
        Command::new(bin_dir.join("etcd")).args([
            "--name=default",
            &format!("--data-dir={}", dir.join("etcd").display()),
            &format!("--listen-client-urls={etcd_url}"),
            &format!("--advertise-client-urls={etcd_url}"),
            &format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]),
    )?;

    let api_port = free_port();
    let server = format!("https://127.0.0.1:{api_port}");
    let mut apiserver = Command::new(bin_dir.join("kube-apiserver"));
    apiserver.args(apiserver_args);
    procs.spawn(
        "kube-apiserver",
        apiserver.args([
            &format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            // From 1.37 the default (lease) endpoint reconciler refuses a loopback address; the
            // `kubernetes` Service's endpoints are not needed here.
            "--endpoint-reconciler-type=none",
            &format!("--secure-port={api_port}"),
            &format!("--tls-cert-file={}", pki.serving_cert.display()),
            &format!("--tls-private-key-file={}", pki.serving_key.display()),
            &format!("--client-ca-file={}", pki.ca_cert.display()),
            &format!("--service-account-key-file={}", pki.sa_public.display()),
            &format!(
                "--service-account-signing-key-file={}",
                pki.sa_private.display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            // New nodes would get node.kubernetes.io/not-ready:NoSchedule, which only the node
            // lifecycle controller removes; kwok nodes are Ready at once, so skip that taint.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--allow-privileged=true",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--v=1",
        ]),
    )?;

    let kubeconfig = dir.join("kubeconfig");
    pki.write_kubeconfig(&kubeconfig, &server)
        .map_err(|e| format!("writing kubeconfig: {e}"))?;
    let cp = ControlPlane {
        dir: dir.clone(),
        kubeconfig,
        server,
        bin_dir,
        components,
    };
    wait_ready(&cp, procs)?;

    if components.controller_manager {
        let port = free_port();
        procs.spawn(
            "kube-controller-manager",
            Command::new(cp.bin_dir.join("kube-controller-manager")).args([
                &format!("--kubeconfig={}", cp.kubeconfig.display()),
                &format!("--authentication-kubeconfig={}", cp.kubeconfig.display()),
                &format!("--authorization-kubeconfig={}", cp.kubeconfig.display()),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
                "--leader-elect=false",
                &format!("--service-account-private-key-file={}", pki.sa_private.display()),
                &format!("--root-ca-file={}", pki.ca_cert.display()),
                // Otherwise it creates /usr/libexec/kubernetes/kubelet-plugins on the host.
                &format!("--flex-volume-plugin-dir={}", dir.join("flexvolume").display()),
                "--controllers=*,-nodeipam,-nodelifecycle,-persistentvolume-binder,-attachdetach,-persistentvolume-expander",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-deployment-syncs=10",
                "--v=1",
            ]),
        )?;
    }
    if components.kwok {
        let workdir = dir.join("kwok");
        std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
        procs.spawn(
            "kwok",
            // KWOK_WORKDIR keeps a developer's ~/.kwok/kwok.yaml out of the tests.
            Command::new(cp.bin_dir.join("kwok"))
                .env("KWOK_WORKDIR", &workdir)
                .args(kwok_args(&cp)),
        )?;
    }
    install_crds(&cp)?;
    Ok(cp)
}

/// kwok manages only nodes annotated `kwok.x-k8s.io/node=fake`, so a test can still create nodes kwok
/// leaves alone.
fn kwok_args(cp: &ControlPlane) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", cp.kubeconfig.display()),
        // kwok has no built-in stages: node heartbeat, pod ready/complete/delete come from here.
        format!(
            "--config={}",
            repo_root().join("hack/testenv/kwok-stages.yaml").display()
        ),
        "--manage-all-nodes=false".into(),
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
        "--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom".into(),
        "--cidr=10.0.0.1/16".into(),
        "--node-ip=10.0.0.1".into(),
        "--node-lease-duration-seconds=40".into(),
        format!("--server-address=127.0.0.1:{}", free_port()),
    ]
}

fn wait_ready(cp: &ControlPlane, procs: &mut ProcessGroup) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (ok, out, _) = cp.kubectl_run(&["get", "--raw", "/readyz"]);
        if ok && out.trim() == "ok" {
            return Ok(());
        }
        procs.check_alive()?;
        if Instant::now() > deadline {
            return Err(format!(
                "kube-apiserver not ready after 90s; logs in {}",
                cp.dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn install_crds(cp: &ControlPlane) -> Result<(), String> {
    let crds = repo_root().join("crds");
    let (ok, _, err) = cp.kubectl_run(&["apply", "--server-side", "-f", path_str(&crds)]);
    if !ok {
        return Err(format!("installing crds/: {err}"));
    }
    let (ok, _, err) = cp.kubectl_run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "--all",
    ]);
    if !ok {
        return Err(format!("waiting for CRDs to be established: {err}"));
    }
    Ok(())
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}
