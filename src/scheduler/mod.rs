//! The scheduler process around the framework core: informers and cache, queue, scheduling and
//! binding cycles, events, leader election, HTTPS endpoints.

pub mod api;
pub mod cache;
pub mod client;
pub mod command;
pub mod events;
pub mod extender;
pub mod features;
pub mod http;
pub mod informers;
pub mod leader_election;
pub mod metrics;
pub mod queue;
pub mod run;
pub mod trim;

pub use run::{SchedulerError, SchedulerOptions, run};
