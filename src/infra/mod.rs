//! What every layer above shares and that knows none of them: the API clients and their rate
//! limits ([`client`]), watching and listing a kind ([`informer`]), leader election
//! ([`leader_election`]), the metrics registry ([`metrics`]), the HTTP(S) endpoints with TLS,
//! delegated authentication and authorization ([`serving`]), logging ([`logging`]) and Go-style
//! durations ([`duration`]). Nothing here names a module above it, directly or through what it
//! names (the unit test `module_graph::infra_names_no_layer_above_it` checks).

pub mod client;
pub mod duration;
pub mod informer;
pub mod leader_election;
pub mod logging;
pub mod metrics;
pub mod serving;
