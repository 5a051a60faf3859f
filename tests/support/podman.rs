//! podman as the tests use it, and the ksched image they run.
//!
//! podman runs as root on a storage of its own (under the control plane's directory, removed at
//! exit), with the flags these hosts need: vfs, runc (Debian's crun fails on hybrid cgroups),
//! cgroupfs. The image is built by hack/image.sh (what `make image` runs) from the binary under
//! test, once per `cargo test` run for every test binary: the first one to need it builds the OCI
//! archive under target/, the others wait for it (a file lock) and load it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

use super::{path_str, repo_root};

/// The name the image is built as (podman and docker call it docker.io/library/ksched:e2e).
pub const IMAGE: &str = "ksched:e2e";

/// podman on its own storage under `dir`.
pub struct Podman {
    pub dir: PathBuf,
}

impl Podman {
    pub fn new(dir: PathBuf) -> Podman {
        Podman { dir }
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.arg(format!("--root={}", self.dir.join("storage").display()))
            .arg(format!("--runroot={}", self.dir.join("run").display()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .args([
                "--storage-driver=vfs",
                "--runtime=runc",
                "--cgroup-manager=cgroupfs",
                "--events-backend=file",
            ]);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("podman {}: {e}", args.join(" ")))
    }

    /// [`Podman::run`] without holding an async runtime's thread.
    pub async fn run_async(&self, args: &[&str]) -> Output {
        tokio::process::Command::from(self.command())
            .args(args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("podman {}: {e}", args.join(" ")))
    }

    /// Runs podman with `args`, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether podman can run here; the reason when not.
    pub fn usable(&self) -> Result<(), String> {
        match self.command().arg("info").output() {
            Err(e) => Err(format!(
                "podman cannot run here ({e}); make testenv installs it"
            )),
            Ok(out) if !out.status.success() => Err(format!(
                "podman cannot run here: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Ok(_) => Ok(()),
        }
    }

    /// Loads the shared image archive ([`image_archive`]) into this storage, as [`IMAGE`].
    pub fn load_image(&self) -> PathBuf {
        let archive = image_archive();
        let loaded = self.ok(&["load", "--input", path_str(&archive)]);
        assert!(loaded.contains("docker.io/library/ksched:e2e"), "{loaded}");
        archive
    }
}

/// The OCI archive of the ksched image, built by hack/image.sh from the binary under test into
/// target/e2e-image/ once per run: rebuilt only when the binary changed since (its size and
/// modification time are stamped beside the archive). Several test binaries asking at once take
/// turns on a lock file; the second finds it built.
pub fn image_archive() -> PathBuf {
    let binary = super::scheduler::ksched_bin();
    let dir = repo_root().join("target/e2e-image");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let archive = dir.join("ksched-e2e.tar");
    let stamp_path = dir.join("ksched-e2e.stamp");
    let lock = File::create(dir.join("lock")).expect("image lock file");
    // SAFETY: flock on a file we hold open; released when it is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        panic!(
            "locking {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
    let stamp = binary_stamp(&binary);
    let built = std::fs::read_to_string(&stamp_path).ok();
    if built.as_deref() != Some(stamp.as_str()) || !archive.exists() {
        let _ = std::fs::remove_file(&stamp_path);
        let out = Command::new(repo_root().join("hack/image.sh"))
            .arg(&binary)
            .arg(&archive)
            .arg(IMAGE)
            .output()
            .expect("run hack/image.sh");
        assert!(
            out.status.success(),
            "hack/image.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&stamp_path, &stamp).expect("image stamp");
    }
    drop(lock);
    archive
}

fn binary_stamp(binary: &Path) -> String {
    let meta = std::fs::metadata(binary)
        .unwrap_or_else(|e| panic!("{}: {e} (cargo builds it for the tests)", binary.display()));
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {} {modified}\n", binary.display(), meta.len())
}

/// A container test that cannot run here: a failure, since `make testenv` installs podman, runc
/// and the registry; `KSCHED_E2E_SKIP_CONTAINERS=1` turns it into a skip for machines that cannot
/// run containers (no root). Returns only when skipping.
pub fn cannot_run(why: &str) {
    if std::env::var("KSCHED_E2E_SKIP_CONTAINERS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (KSCHED_E2E_SKIP_CONTAINERS=1): {why}");
        return;
    }
    panic!(
        "{why} (make testenv installs podman, runc and docker-registry; set KSCHED_E2E_SKIP_CONTAINERS=1 to skip the container tests on a machine that cannot run them)"
    );
}
