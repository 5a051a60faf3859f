//! The scheduler process around the framework core: informers and cache, queue, scheduling and
//! binding cycles, events, leader election, HTTPS endpoints.

pub mod events;
pub mod http;
pub mod leader_election;
pub mod metrics;
