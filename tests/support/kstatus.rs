//! Flux's and Helm 4's health reading: `kstatus-check` (built by `hack/testenv/build.sh` from
//! `sigs.k8s.io/cli-utils/pkg/kstatus`) on objects, as those tools compute it.

use std::io::Write;
use std::process::{Command, Stdio};

/// kstatus's (status, message) for each of `objects`, in order.
pub fn kstatus(objects: &[serde_json::Value]) -> Vec<(String, String)> {
    let bin = super::testenv_bin_dir().join("kstatus-check");
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}: run `make testenv`", bin.display()));
    if let Some(mut stdin) = child.stdin.take() {
        let input = serde_json::to_vec(objects).expect("objects as JSON");
        stdin.write_all(&input).expect("write kstatus-check stdin");
    }
    let out = child.wait_with_output().expect("wait for kstatus-check");
    assert!(
        out.status.success(),
        "kstatus-check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("kstatus-check JSON line");
            (
                v["status"].as_str().unwrap_or_default().to_string(),
                v["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(results.len(), objects.len(), "one result per object");
    results
}
