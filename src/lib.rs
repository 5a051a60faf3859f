//! ksched: a Kubernetes operator that manages scheduler profiles as custom resources, and the
//! scheduler those profiles run.
//!
//! Out-of-tree plugins: [`prelude`] has what a plugin author needs (`use ksched::prelude::*;`),
//! and the `testing` feature its test builders (`ksched::prelude::testing`).
//!
//! Public are the prelude, what the `ksched` binary's commands, the benches and the tests use,
//! and the types those signatures name; the rest is `pub(crate)` (`unreachable_pub` keeps it so).

#![warn(unreachable_pub)]

pub mod allocator;
pub mod api;
pub mod cli;
pub mod config;
pub mod emulation;
pub mod framework;
pub mod infra;
#[cfg(test)]
mod module_graph;
pub mod operator;
pub mod prelude;
pub mod quantity;
pub mod scheduler;
pub mod simulate;

// The unit tests run on the allocator the binary runs on.
#[cfg(test)]
crate::use_selectable_allocator!();
