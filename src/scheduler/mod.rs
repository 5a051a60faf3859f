//! The scheduler process around the framework core: informers and cache, queue, scheduling and
//! binding cycles, events, leader election, HTTPS endpoints.

pub(crate) mod cache;
pub mod command;
pub(crate) mod cycle;
pub(crate) mod events;
pub(crate) mod extender;
pub(crate) mod http;
pub(crate) mod informers;
pub(crate) mod kube_api;
pub(crate) mod leader_election;
pub(crate) mod metrics;
pub(crate) mod queue;
pub mod run;
pub(crate) mod schedule_one;
pub(crate) mod trim;

pub(crate) use run::EmbeddedIn;
pub use run::{SchedulerError, SchedulerOptions, run};
