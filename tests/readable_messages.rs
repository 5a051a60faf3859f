//! Messages people read: every Event, status condition and ksched log line the e2e tests produced
//! (collected at the exit of each test binary by `tests/support/collect.rs` into
//! `target/tmp/e2e-messages/`) is free of Rust debug text (`Some(..)`, `Status { .. }`), and every
//! Warning Event the operator writes names the object and the field to fix.
//!
//! `make test` runs the collected check (`--ignored`) after every e2e test has run; the checker
//! itself is tested on plain strings here.

mod support;

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// Rust's `Debug` output: `Some(..)`, `Ok(..)`/`Err(..)`, a bare `None` value, and structs
/// (`Status { status: .. }`).
static DEBUG_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(Some|Ok|Err)\(|([=(\[,:]\s?)None([,)\]}\s]|$)|\b[A-Z][A-Za-z0-9]*\s\{\s[a-z_][a-z0-9_]*:\s",
    )
    .expect("regex")
});

/// A field path a user can act on: `spec.x`, `metadata.name`, ...
static FIELD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(spec|metadata)\.[A-Za-z]").expect("regex"));

/// The Rust debug text in `text`, if any.
fn debug_text(text: &str) -> Option<&str> {
    DEBUG_TEXT.find(text).map(|m| m.as_str())
}

#[test]
fn the_checker_finds_debug_text_and_passes_prose() {
    for bad in [
        "object=Some(\"p\") publishing event failed",
        "ApiError: forbidden (ErrorResponse { status: \"Failure\", message: \"x\" })",
        "leader=None",
        "result: Err(Timeout)",
        "Status { code: 404, reason: NotFound }",
    ] {
        assert!(debug_text(bad).is_some(), "not caught: {bad}");
    }
    for good in [
        "no scheduler serves spec.schedulerName \"ksched-defualt\" (did you mean ksched-default?)",
        "0/5 nodes are available: 2 Insufficient cpu. preemption: 0/5 nodes are available: 5 No preemption victims found for incoming pod.",
        "None of the nodes match: fix spec.leafNodeSelector",
        "leafNodeSelector: {} selects every node of the cluster",
        "applying Deployment ksched-system/ksched-p: Deployment.apps \"ksched-p\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\"",
    ] {
        assert_eq!(debug_text(good), None, "{good}");
    }
    assert!(FIELD.is_match("fix spec.priorityClassName"));
    assert_eq!(
        text_log_target(
            "2026-11-27T17:40:13.365249Z  WARN kube_runtime::watcher: watch list error"
        ),
        Some("kube_runtime::watcher")
    );
    assert_eq!(text_log_target("no scheduler serves it"), None);
    assert!(!FIELD.is_match("the scheduler is starting"));
}

/// The target of a text log line (`<time> <LEVEL> <target>: <message>`), if it is one.
fn text_log_target(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let _time = words.next()?;
    let level = words.next()?;
    if !["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level) {
        return None;
    }
    words.next()?.strip_suffix(':')
}

/// (where, text) of everything one test binary collected that people read.
fn collected_texts(dir: &Path) -> (Vec<(String, String)>, Vec<String>) {
    let mut texts = Vec::new();
    let mut unnamed = Vec::new();
    let read_json = |name: &str| -> Value {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null)
    };
    for event in read_json("events.json")["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let regarding = format!(
            "{} {}",
            event["regarding"]["kind"].as_str().unwrap_or("?"),
            event["regarding"]["name"].as_str().unwrap_or("?")
        );
        let reason = event["reason"].as_str().unwrap_or("?");
        let note = event["note"].as_str().unwrap_or_default().to_string();
        let ours = event["reportingController"] == "ksched-operator";
        // A Warning names the field to fix, or says that nothing in the spec is wrong and it is
        // retried.
        if ours
            && event["type"] == "Warning"
            && (event["regarding"]["name"].as_str().unwrap_or("").is_empty()
                || !(FIELD.is_match(&note) || note.contains("retried")))
        {
            unnamed.push(format!("Warning {reason} on {regarding}: {note}"));
        }
        texts.push((format!("event {reason} on {regarding}"), note));
    }
    for object in read_json("objects.json")["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let what = format!(
            "{} {}",
            object["kind"].as_str().unwrap_or("?"),
            object["metadata"]["name"].as_str().unwrap_or("?")
        );
        for c in object["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let message = c["message"].as_str().unwrap_or_default().to_string();
            texts.push((
                format!("{what} condition {}", c["type"].as_str().unwrap_or("?")),
                message,
            ));
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".log") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for (i, line) in text.lines().enumerate() {
                // kube-rs's own lines (kube_client, kube_runtime) are in its format, not ours:
                // ksched logs its own readable line for the same error.
                if text_log_target(line).is_some_and(|t| !t.starts_with("ksched")) {
                    continue;
                }
                texts.push((format!("{name}:{}", i + 1), line.to_string()));
            }
        }
    }
    (texts, unnamed)
}

#[test]
#[ignore = "reads what the e2e tests collected: make test runs it after them"]
fn collected_events_statuses_and_logs_are_readable() {
    let root = support::collect::messages_root();
    let mut binaries: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}: run the e2e tests first", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    binaries.sort();
    assert!(
        !binaries.is_empty(),
        "nothing collected in {}",
        root.display()
    );
    let mut debug = Vec::new();
    let mut unnamed = Vec::new();
    let mut checked = 0;
    for dir in &binaries {
        let binary = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (texts, missing) = collected_texts(dir);
        checked += texts.len();
        for (where_, text) in texts {
            if let Some(found) = debug_text(&text) {
                debug.push(format!("{binary}: {where_}: {found:?} in: {text}"));
            }
        }
        unnamed.extend(missing.into_iter().map(|m| format!("{binary}: {m}")));
    }
    assert!(checked > 100, "only {checked} messages collected");
    assert!(
        debug.is_empty() && unnamed.is_empty(),
        "{} messages with Rust debug text:\n{}\n\n{} Warning events of the operator that name no field to fix:\n{}",
        debug.len(),
        debug.join("\n"),
        unnamed.len(),
        unnamed.join("\n")
    );
}
