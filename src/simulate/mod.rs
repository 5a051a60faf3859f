//! `ksched simulate`: what a profile would do, before it does it. The scheduler's own framework,
//! queue and cache run over a cluster snapshot (a file, or a live cluster read with get/list
//! only), with no writes: where each pending pod would go, or why it stays Pending and which
//! plugin rejected it on each node; where running pods would land on an empty cluster; every
//! plugin's verdict for one pod.
//!
//! - [`snapshot`]: the cluster state and its file format (what `kubectl get ... -o yaml` prints).
//! - [`live`]: the same state read from a cluster.
//! - [`profile`]: `--profile`/`--policy` rendered as the operator renders them.
//! - [`engine`]: the simulation (pure: data in, report out).
//! - [`report`]: the report, its table and its JSON/YAML schema.
//! - [`command`]: the CLI.

#[cfg(test)]
mod agreement_tests;
pub mod command;
pub mod engine;
pub(crate) mod live;
pub mod profile;
pub(crate) mod report;
pub mod snapshot;
