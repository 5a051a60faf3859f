//! What a test binary's control plane saw people would read, kept for `tests/readable_messages.rs`
//! (run by `make test` after the e2e tests): at exit, before the control plane stops, every Event,
//! the SchedulerProfiles and LeafClusterPolicies (their status messages) and the logs of the
//! ksched processes (operator, schedulers) go to `target/tmp/e2e-messages/<test binary>/`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where every test binary leaves what it collected.
pub fn messages_root() -> PathBuf {
    super::target_tmp().join("e2e-messages")
}

/// Logs of processes that are not ksched (the control plane, upstream kube-scheduler, Prometheus).
pub fn is_upstream_log(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["etcd", "kube-", "kwok", "prometheus"]
        .iter()
        .any(|p| lower.starts_with(p))
        || lower.contains("upstream")
}

/// The test binary's name without cargo's hash (`e2e_operator`), so a run replaces the last.
fn binary_name() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    }
}

/// Collects from the control plane in `dir` (its kubeconfig and logs); best effort: this runs at
/// exit, where a failure can only be reported.
pub fn collect(dir: &Path) {
    let kubeconfig = dir.join("kubeconfig");
    if !kubeconfig.exists() {
        return;
    }
    let out = messages_root().join(binary_name());
    let _ = std::fs::remove_dir_all(&out);
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("collecting messages into {}: {e}", out.display());
        return;
    }
    let kubectl = super::testenv_bin_dir().join("kubectl");
    for (file, what) in [
        ("events.json", "events.events.k8s.io"),
        (
            "objects.json",
            "schedulerprofiles.ksched.io,leafclusterpolicies.ksched.io",
        ),
    ] {
        let result = Command::new(&kubectl)
            .env("KUBECONFIG", &kubeconfig)
            .args([
                "get",
                what,
                "--all-namespaces",
                "-o",
                "json",
                "--request-timeout=10s",
            ])
            .output();
        match result {
            Ok(o) if o.status.success() => {
                let _ = std::fs::write(out.join(file), &o.stdout);
            }
            Ok(o) => eprintln!(
                "collecting {what}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("collecting {what}: {e}"),
        }
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") && !is_upstream_log(&name) {
            let _ = std::fs::copy(entry.path(), out.join(&name));
        }
    }
}
