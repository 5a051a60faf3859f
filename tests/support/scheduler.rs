//! Runs `ksched scheduler` (the binary under test) as a child process against the test control
//! plane; killed when dropped. Also upstream kube-scheduler's command line and the configurations
//! tests give the schedulers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::process::LoggedChild;
use super::wait::{create_bound, wait_bound};
use super::{ControlPlane, free_port, path_str};

pub struct SchedulerProcess {
    pub process: LoggedChild,
    pub secure_port: u16,
    pub config: PathBuf,
}

impl SchedulerProcess {
    /// Starts the scheduler with `config_yaml`, serving HTTPS with the API server's certificate (so
    /// tests can verify it against the test CA).
    pub fn start(cp: &ControlPlane, name: &str, config_yaml: &str) -> SchedulerProcess {
        Self::start_via(cp, name, config_yaml, &cp.kubeconfig)
    }

    /// [`Self::start`], talking to the API server as `kubeconfig` says (through a relay).
    pub fn start_via(
        cp: &ControlPlane,
        name: &str,
        config_yaml: &str,
        kubeconfig: &Path,
    ) -> SchedulerProcess {
        Self::spawn(cp, name, config_yaml, kubeconfig, &[], &[])
    }

    /// [`Self::start`] with more command-line arguments (`--feature-gates=...`).
    pub fn start_with_args(
        cp: &ControlPlane,
        name: &str,
        config_yaml: &str,
        args: &[&str],
    ) -> SchedulerProcess {
        Self::spawn(cp, name, config_yaml, &cp.kubeconfig, &[], args)
    }

    /// [`Self::start`] with `env` added to the process's environment.
    pub fn start_with_env(
        cp: &ControlPlane,
        name: &str,
        config_yaml: &str,
        env: &[(&str, &str)],
    ) -> SchedulerProcess {
        Self::spawn(cp, name, config_yaml, &cp.kubeconfig, env, &[])
    }

    fn spawn(
        cp: &ControlPlane,
        name: &str,
        config_yaml: &str,
        kubeconfig: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> SchedulerProcess {
        let config = cp.dir.join(format!("{name}-config.yaml"));
        std::fs::write(&config, config_yaml).expect("write scheduler config");
        let secure_port = free_port();
        let mut cmd = Command::new(ksched_bin());
        cmd.args(["scheduler", "--config", path_str(&config)]);
        cmd.args(["--kubeconfig", path_str(kubeconfig)]);
        // Delegated authentication and authorization, as kube-scheduler is run.
        cmd.args([
            "--authentication-kubeconfig",
            path_str(&cp.kubeconfig),
            "--authorization-kubeconfig",
            path_str(&cp.kubeconfig),
        ]);
        cmd.args([
            "--bind-address=127.0.0.1",
            &format!("--secure-port={secure_port}"),
            &format!("--tls-cert-file={}", cp.dir.join("apiserver.crt").display()),
            &format!(
                "--tls-private-key-file={}",
                cp.dir.join("apiserver.key").display()
            ),
            "--v=4",
        ]);
        cmd.args(args);
        cmd.envs(env.iter().copied());
        let process = LoggedChild::spawn(cmd, cp.dir.join(format!("{name}.log")));
        SchedulerProcess {
            process,
            secure_port,
            config,
        }
    }

    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// Polls until pod `name` is bound (within 60s); its node. Fails with this scheduler's log.
    pub async fn bound(&self, pods: &Api<Pod>, name: &str) -> String {
        wait_bound(pods, name, Duration::from_secs(60), || self.logs()).await
    }

    /// Creates `pod` and polls until it is bound (within 60s); its node.
    pub async fn create_bound(&self, pods: &Api<Pod>, pod: &Pod) -> String {
        create_bound(pods, pod, || self.logs()).await
    }
}

/// The `ksched` binary: `KSCHED_BIN` when set (`make bench` runs the `dist` build), else the one
/// cargo names for tests; an example (the demo) finds it beside itself.
pub fn ksched_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("KSCHED_BIN") {
        return PathBuf::from(path);
    }
    if let Some(path) = option_env!("CARGO_BIN_EXE_ksched") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/examples/<name> -> target/<profile>/ksched
    exe.parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("ksched"))
        .expect("target dir")
}

/// `bin scheduler --config <config> --kubeconfig <the control plane's>`: `ksched scheduler` or a
/// binary built on ksched's scheduler command.
pub fn scheduler_command(bin: &Path, cp: &ControlPlane, config: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "scheduler",
        "--config",
        path_str(config),
        "--kubeconfig",
        path_str(&cp.kubeconfig),
    ]);
    cmd
}

/// Runs `ksched config validate` on `yaml` (written to a temporary file named after `name`),
/// which must succeed; returns its stdout.
pub fn validate(name: &str, yaml: &str) -> String {
    let path = std::env::temp_dir().join(format!("{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write");
    let out = Command::new(ksched_bin())
        .args(["config", "validate"])
        .arg(&path)
        .output()
        .expect("ksched config validate");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Upstream kube-scheduler of the testenv with the control plane's admin kubeconfig, leader
/// election off, serving on a free port of 127.0.0.1; the caller adds `--config`, `--v`.
pub fn kube_scheduler_command(cp: &ControlPlane) -> Command {
    let kubeconfig = path_str(&cp.kubeconfig);
    let mut cmd = Command::new(cp.bin_dir.join("kube-scheduler"));
    cmd.args([
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", free_port()),
    ]);
    cmd
}

/// Upstream kube-scheduler serving `name` with its default profile and `args` (feature gates),
/// its log in `<name>.log`; killed when dropped.
pub fn upstream_scheduler(cp: &ControlPlane, name: &str, args: &[&str]) -> LoggedChild {
    let config = cp.dir.join(format!("{name}-config.yaml"));
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n",
            path_str(&cp.kubeconfig)
        ),
    )
    .expect("write kube-scheduler config");
    let mut cmd = kube_scheduler_command(cp);
    cmd.args([format!("--config={}", path_str(&config)), "--v=2".into()]);
    cmd.args(args);
    LoggedChild::spawn(cmd, cp.dir.join(format!("{name}.log")))
}

/// Upstream kube-scheduler as the cluster's default scheduler (it binds the pods of Deployments
/// to kwok nodes), its log in `kube-scheduler-default.log`; stopped when dropped.
pub fn default_scheduler(cp: &ControlPlane) -> super::process::LoggedChild {
    let mut cmd = kube_scheduler_command(cp);
    cmd.arg("--v=1");
    super::process::LoggedChild::spawn(cmd, cp.dir.join("kube-scheduler-default.log"))
}

/// A v1 configuration with one default profile named `name`; leader election on a lease in
/// `lease_ns` when given, else off.
pub fn config(name: &str, lease_ns: Option<&str>) -> String {
    config_with_lease(name, lease_ns, FAST_LEASE)
}

/// Lease timings: duration, renew deadline, retry period.
pub type LeaseTimings = (&'static str, &'static str, &'static str);

/// Short enough that a test sees a failover within seconds.
pub const FAST_LEASE: LeaseTimings = ("4s", "3s", "1s");

/// kube-scheduler's defaults: a leader keeps its lease through a few slow seconds of the API
/// server (a test that floods it with writes right after a takeover needs that).
pub const DEFAULT_LEASE: LeaseTimings = ("15s", "10s", "2s");

/// [`config`] with the lease timings given.
pub fn config_with_lease(name: &str, lease_ns: Option<&str>, timings: LeaseTimings) -> String {
    let (duration, renew, retry) = timings;
    let le = match lease_ns {
        Some(ns) => format!(
            "leaderElection:\n  leaderElect: true\n  resourceName: {name}\n  resourceNamespace: {ns}\n  leaseDuration: {duration}\n  renewDeadline: {renew}\n  retryPeriod: {retry}\n"
        ),
        None => "leaderElection:\n  leaderElect: false\n".to_string(),
    };
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{le}profiles:\n- schedulerName: {name}\n"
    )
}
