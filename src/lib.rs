//! ksched: a Kubernetes operator that manages scheduler profiles as custom resources, and the
//! scheduler those profiles run.
//!
//! Out-of-tree plugins: [`prelude`] has what a plugin author needs (`use ksched::prelude::*;`),
//! and the `testing` feature its test builders (`ksched::prelude::testing`).

pub mod api;
pub mod config;
pub mod framework;
pub mod leader_election;
pub mod logging;
pub mod operator;
pub mod prelude;
pub mod quantity;
pub mod scheduler;
pub mod serving;
pub mod simulate;
