//! Runs `ksched scheduler` (the binary under test) as a child process against the test control
//! plane; killed when dropped.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{ControlPlane, free_port};

pub struct SchedulerProcess {
    pub child: Child,
    pub secure_port: u16,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl SchedulerProcess {
    /// Starts the scheduler with `config_yaml`, serving HTTPS with the API server's certificate (so
    /// tests can verify it against the test CA).
    pub fn start(cp: &ControlPlane, name: &str, config_yaml: &str) -> SchedulerProcess {
        let config = cp.dir.join(format!("{name}-config.yaml"));
        std::fs::write(&config, config_yaml).expect("write scheduler config");
        let log = cp.dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("scheduler log");
        let err = out.try_clone().expect("scheduler log");
        let secure_port = free_port();
        let mut cmd = Command::new(ksched_bin());
        cmd.args([
            "scheduler",
            "--config",
            super::path_str(&config),
            "--kubeconfig",
            super::path_str(&cp.kubeconfig),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={secure_port}"),
            &format!("--tls-cert-file={}", cp.dir.join("apiserver.crt").display()),
            &format!(
                "--tls-private-key-file={}",
                cp.dir.join("apiserver.key").display()
            ),
            "--v=4",
        ])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        // SAFETY: prctl only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start ksched scheduler");
        SchedulerProcess {
            child,
            secure_port,
            log,
            config,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `ksched` binary: cargo names it for tests; an example (the demo) finds it beside itself.
pub fn ksched_bin() -> PathBuf {
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
