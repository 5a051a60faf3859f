//! A guard for "no blocking I/O in a scheduling cycle" (ARCHITECTURE.md, "What a plugin may do").
//!
//! The types do most of it: the scheduling-cycle extension points are synchronous and every
//! [`ApiClient`](super::api_calls::ApiClient) call is async, so a cycle can only reach the API by
//! running a future itself, or by doing I/O of its own. This test reads the production code of
//! every module under `framework/plugins/` and fails on the ways to do either: executors and
//! spawning (`tokio::spawn`, `block_on`, `block_in_place`, threads), and sockets, files, processes
//! and HTTP or Kubernetes clients. Work outside the cycle goes through the handle instead
//! (`Handle::tasks`, `Handle::dispatcher`), which the scheduler runs. The one exception is listed
//! in [`ALLOWED`] with its reason.

use crate::module_graph::{crate_sources, referenced_paths};

/// Paths (and the functions that block or spawn) plugin code must not name, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    (
        "tokio::spawn",
        "spawns work the scheduler neither knows nor stops",
    ),
    ("tokio::task", "spawns or blocks a runtime worker"),
    ("tokio::runtime", "runs futures from a scheduling cycle"),
    ("futures::executor", "runs futures from a scheduling cycle"),
    ("block_on", "waits on a future"),
    ("block_in_place", "waits on a future"),
    (
        "spawn_blocking",
        "spawns work the scheduler neither knows nor stops",
    ),
    ("std::thread", "spawns or sleeps"),
    ("std::net", "network I/O"),
    ("tokio::net", "network I/O"),
    ("std::fs", "file I/O"),
    ("tokio::fs", "file I/O"),
    ("std::process", "runs processes"),
    ("tokio::process", "runs processes"),
    ("hyper", "an HTTP client"),
    ("reqwest", "an HTTP client"),
    ("ureq", "an HTTP client"),
    ("kube::Client", "a Kubernetes client of its own"),
    ("kube::api", "a Kubernetes client of its own"),
    ("kube::runtime", "watches of its own"),
];

/// `(module under framework::plugins, path, why it may)`.
const ALLOWED: &[(&str, &str, &str)] = &[(
    "network_traffic::prometheus",
    "tokio::net",
    "the HTTP client of NetworkTraffic's refresher, a background task; the cycle reads what the \
     refresher stored",
)];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `text` names `token` as a whole (not as part of a longer identifier).
fn mentions(text: &str, token: &str) -> bool {
    text.match_indices(token).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + token.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// What `text` (production code of module `module`, relative to `framework::plugins`) names
/// that it must not: `(path, why)`.
fn violations(module: &str, text: &str) -> Vec<(&'static str, &'static str)> {
    let uses = referenced_paths(text);
    FORBIDDEN
        .iter()
        .filter(|(token, _)| {
            mentions(text, token)
                || uses
                    .iter()
                    .any(|u| mentions(u, token) && u.starts_with(token))
        })
        .filter(|(token, _)| !ALLOWED.iter().any(|(m, t, _)| *m == module && t == token))
        .copied()
        .collect()
}

#[test]
fn plugins_do_no_io_and_run_no_futures_of_their_own() {
    let sources = crate_sources();
    let plugins: Vec<_> = sources
        .iter()
        .filter(|s| s.module.len() > 2 && s.module[..2] == ["framework", "plugins"])
        .collect();
    assert!(
        plugins.len() > 30,
        "read only {} plugin files",
        plugins.len()
    );
    let mut found = Vec::new();
    for source in plugins {
        let module = source.module[2..].join("::");
        for (token, why) in violations(&module, &source.text) {
            found.push(format!("framework::plugins::{module} names {token}: {why}"));
        }
    }
    assert!(
        found.is_empty(),
        "plugins must leave I/O and spawning to the scheduler (Handle::tasks, Handle::dispatcher):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_guard_sees_spawning_blocking_and_io() {
    let code = "use tokio::{net::TcpStream, sync::Mutex};\n\
                fn pre_filter() { tokio::task::block_in_place(|| ()); }\n\
                // std::fs::read in a comment does not count\n\
                fn hyperplane() {}\n";
    let text = crate::module_graph::production_text(code).0;
    let found: Vec<&str> = violations("some_plugin", &text)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(found, ["tokio::task", "block_in_place", "tokio::net"]);
    // The allowance is for its own module only.
    let client = "use tokio::net::TcpStream;\n";
    assert!(violations("network_traffic::prometheus", client).is_empty());
    assert_eq!(
        violations("network_traffic", client),
        [("tokio::net", "network I/O")]
    );
}
