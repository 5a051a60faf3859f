//! What GitOps tools make of every status the operator writes: Flux and Helm 4 read health with
//! kstatus (`sigs.k8s.io/cli-utils/pkg/kstatus`, run by `kstatus-check` from hack/testenv), Argo
//! CD with our Lua check (manifests/argocd/health.lua). The objects come from the operator's own
//! status code (`ksched::operator::status_samples`); the table says what each tool must answer.

#[path = "support/argocd_lua.rs"]
mod argocd_lua;
mod support;

use std::collections::BTreeSet;

use ksched::operator::status_samples::status_samples;

const PROFILE: &str = "SchedulerProfile";
const POLICY: &str = "LeafClusterPolicy";

/// (kind, sample, kstatus, Argo CD): every status the operator writes, and what each tool says.
const TABLE: &[(&str, &str, &str, &str)] = &[
    (PROFILE, "ready", "Current", "Healthy"),
    (PROFILE, "ready, embedded", "Current", "Healthy"),
    (PROFILE, "suspended", "Current", "Healthy"),
    (PROFILE, "scaled to zero", "Current", "Healthy"),
    (
        PROFILE,
        "rendering, no Deployment yet",
        "InProgress",
        "Progressing",
    ),
    (PROFILE, "rolling out", "InProgress", "Progressing"),
    (
        PROFILE,
        "rolling out, pods cannot be created",
        "InProgress",
        "Progressing",
    ),
    (PROFILE, "no leader", "InProgress", "Progressing"),
    (
        PROFILE,
        "a rendered name is another object's",
        "Failed",
        "Degraded",
    ),
    (
        PROFILE,
        "no leader, Lease not renewed",
        "InProgress",
        "Progressing",
    ),
    (
        PROFILE,
        "no leader, embedded: another holder",
        "InProgress",
        "Progressing",
    ),
    (PROFILE, "embedded starting", "InProgress", "Progressing"),
    (PROFILE, "embedded failed", "InProgress", "Progressing"),
    (PROFILE, "operator stopped", "InProgress", "Progressing"),
    // Argo CD reads ApplyFailed as needing the user at once; kstatus waits for Stalled.
    (PROFILE, "apply failed, retrying", "InProgress", "Degraded"),
    (PROFILE, "apply failed, refused", "Failed", "Degraded"),
    (PROFILE, "invalid", "Failed", "Degraded"),
    (PROFILE, "invalid, never rendered", "Failed", "Degraded"),
    (PROFILE, "scheduler name in use", "Failed", "Degraded"),
    (PROFILE, "not yet observed", "InProgress", "Progressing"),
    // kstatus has nothing to wait for on an object without status conditions.
    (PROFILE, "no status yet", "Current", "Progressing"),
    // Argo CD shows deletion itself; its health check is not asked.
    (PROFILE, "deleting", "Terminating", "Healthy"),
    (POLICY, "ready", "Current", "Healthy"),
    (POLICY, "taint not managed", "Current", "Healthy"),
    (POLICY, "taint update failed", "InProgress", "Progressing"),
    (POLICY, "invalid", "Failed", "Degraded"),
    (POLICY, "conflict", "Failed", "Degraded"),
    (POLICY, "foreign taint", "Failed", "Degraded"),
    (POLICY, "profile not found", "Failed", "Degraded"),
    (POLICY, "not yet observed", "InProgress", "Progressing"),
    (POLICY, "deleting", "Terminating", "Healthy"),
];

#[test]
fn kstatus_and_argocd_read_every_status_the_operator_writes() {
    let samples = status_samples();
    let objects: Vec<serde_json::Value> = samples.iter().map(|s| s.object.clone()).collect();
    let kstatus = support::kstatus::kstatus(&objects);
    let script = support::repo_root().join("manifests/argocd/health.lua");
    let mut wrong = Vec::new();
    for (sample, (status, message)) in samples.iter().zip(&kstatus) {
        let kind = sample.object["kind"].as_str().unwrap_or_default();
        let Some(&(_, _, want_kstatus, want_argocd)) = TABLE
            .iter()
            .find(|(k, name, _, _)| *k == kind && *name == sample.name)
        else {
            wrong.push(format!(
                "{kind} {:?}: the operator writes this status but the table has no row for it",
                sample.name
            ));
            continue;
        };
        if status != want_kstatus {
            wrong.push(format!(
                "{kind} {:?}: kstatus says {status} ({message}), the table {want_kstatus}",
                sample.name
            ));
        }
        let (argocd, argocd_message) = argocd_lua::health(&script, &sample.object);
        if argocd != want_argocd {
            wrong.push(format!(
                "{kind} {:?}: Argo CD says {argocd} ({argocd_message}), the table {want_argocd}",
                sample.name
            ));
        }
    }
    for (kind, name, _, _) in TABLE {
        if !samples
            .iter()
            .any(|s| s.name == *name && s.object["kind"] == *kind)
        {
            wrong.push(format!(
                "{kind} {name:?}: a row of the table, but no such status sample"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The Ready reasons of `kind` in the README's condition tables (rows `| Ready=... | `Reason`... |`).
fn documented_ready_reasons(kind: &str) -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(support::repo_root().join("README.md")).expect("README.md");
    let heading = format!("`{kind}`");
    let section = readme
        .split("\n### Conditions\n")
        .nth(1)
        .and_then(|rest| rest.split(&heading).nth(1))
        .unwrap_or_else(|| panic!("README: no condition table under {heading} in ### Conditions"));
    let mut reasons = BTreeSet::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.get(1).is_some_and(|c| c.starts_with("Ready=")) {
            for reason in cells[2].split('`').skip(1).step_by(2) {
                reasons.insert(reason.to_string());
            }
        }
    }
    assert!(!reasons.is_empty(), "README: no Ready rows for {kind}");
    reasons
}

/// Every Ready reason the README documents is among the samples, so the table above covers it.
#[test]
fn every_documented_ready_reason_has_a_sample() {
    let samples = status_samples();
    for kind in [PROFILE, POLICY] {
        let sampled: BTreeSet<String> = samples
            .iter()
            .filter(|s| s.object["kind"] == kind)
            .flat_map(|s| s.object["status"]["conditions"].as_array().cloned())
            .flatten()
            .filter(|c| c["type"] == "Ready")
            .filter_map(|c| c["reason"].as_str().map(String::from))
            .collect();
        let missing: Vec<String> = documented_ready_reasons(kind)
            .difference(&sampled)
            .cloned()
            .collect();
        assert!(
            missing.is_empty(),
            "{kind}: Ready reasons in the README that no status sample (src/operator/status_samples.rs) writes: {missing:?}"
        );
    }
}
