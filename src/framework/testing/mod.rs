//! Builders and fakes shared by the framework's and plugins' unit tests.
//!
//! - [`builders`]: Pods, Nodes, volumes, selectors and affinity terms, snapshots.
//! - [`fakes`]: a configurable fake plugin, a recording handle, small profiles.
//! - [`scoring`]: running a Score plugin over nodes.
//! - [`hints`]: event objects and running a plugin's queueing hints.

pub mod builders;
pub mod fakes;
pub mod hints;
pub mod scoring;

pub use builders::*;
pub use fakes::*;
pub use scoring::*;
