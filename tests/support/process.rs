//! Child processes of the test control plane: started from one keeper thread that lives as long as
//! the test binary (PR_SET_PDEATHSIG fires when the *thread* that forked a child dies, so children
//! must not be started from short-lived test threads), logged to files, and stopped at exit.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Pids, hooks and the directory to clean up at exit.
static CLEANUP: Mutex<Cleanup> = Mutex::new(Cleanup {
    pids: Vec::new(),
    hooks: Vec::new(),
    dir: None,
});

/// Work to do at exit before the processes are stopped.
pub type ExitHook = Box<dyn FnOnce() + Send>;

struct Cleanup {
    pids: Vec<(String, i32)>,
    hooks: Vec<ExitHook>,
    dir: Option<PathBuf>,
}

/// Runs `hook` when the test binary exits, before the control plane stops (containers that
/// would outlive the process are removed so).
pub fn at_exit(hook: ExitHook) {
    register_exit_hook();
    lock().hooks.push(hook);
}

pub struct ProcessGroup {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl ProcessGroup {
    /// Runs `start` on a new thread that then parks forever, holding the children; returns what
    /// `start` returned. Registers the exit hook that stops every child.
    pub fn start_on_keeper_thread<T, F>(start: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce(&mut ProcessGroup) -> Result<T, String> + Send + 'static,
    {
        register_exit_hook();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("testenv-keeper".into())
            .spawn(move || {
                let result = ProcessGroup::new().and_then(|mut group| {
                    let out = start(&mut group);
                    // Keep the group (and its children's handles) alive for the binary's lifetime.
                    std::mem::forget(group);
                    out
                });
                let _ = tx.send(result);
                loop {
                    std::thread::park();
                }
            })
            .map_err(|e| format!("spawning the keeper thread: {e}"))?;
        rx.recv().map_err(|e| format!("keeper thread died: {e}"))?
    }

    fn new() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("ksched-testenv-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?
            .keep();
        lock().dir = Some(dir.clone());
        Ok(Self {
            dir,
            children: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `cmd` with stdout and stderr to `<dir>/<name>.log`.
    pub fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result<(), String> {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        killed_with_parent(cmd);
        let child = cmd.spawn().map_err(|e| format!("starting {name}: {e}"))?;
        lock().pids.push((name.to_string(), child.id() as i32));
        self.children.push((name.to_string(), child));
        Ok(())
    }

    /// An error with the log tail when a child has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(format!("{name} exited ({status}):\n{}", tail.join("\n")));
            }
        }
        Ok(())
    }
}

/// The pid of the control-plane process started as `name` (`kube-apiserver`, `etcd`, ...).
pub fn pid_of(name: &str) -> Option<i32> {
    lock()
        .pids
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, pid)| *pid)
}

/// The kernel sends the child SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG).
pub fn killed_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A child process of one test, its stdout and stderr in a log file; killed when dropped (and by
/// the kernel when the thread that started it exits).
pub struct LoggedChild {
    pub child: Child,
    pub log: PathBuf,
}

impl LoggedChild {
    /// Starts `cmd` with stdin closed and its output to `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> LoggedChild {
        let out = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        killed_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {:?}: {e}", cmd.get_program()));
        LoggedChild { child, log }
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

impl Drop for LoggedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

fn lock() -> std::sync::MutexGuard<'static, Cleanup> {
    CLEANUP
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn register_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(stop_all);
        }
    });
}

/// Collects the control plane's events, objects and ksched logs ([`super::collect`]), then stops
/// children newest first (kwok, controller manager, API server, then etcd: an API server whose
/// etcd is gone hangs on shutdown), each with SIGTERM and up to 5 s grace, then SIGKILL; removes the
/// directory unless KSCHED_KEEP_TESTENV is set.
extern "C" fn stop_all() {
    // What people would read, for tests/readable_messages.rs, while the API server still runs.
    let dir = lock().dir.clone();
    if let Some(dir) = dir {
        super::collect::collect(&dir);
    }
    let hooks: Vec<ExitHook> = lock().hooks.drain(..).collect();
    for hook in hooks {
        hook();
    }
    let mut cleanup = lock();
    let pids: Vec<(String, i32)> = cleanup.pids.drain(..).rev().collect();
    for (_, pid) in pids {
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut exited = false;
        while Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: as above.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != 0 {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }
    if let Some(dir) = cleanup.dir.take()
        && std::env::var_os("KSCHED_KEEP_TESTENV").is_none()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}
