//! The operator: reconciles `SchedulerProfile`s into running schedulers (ConfigMap, RBAC, Lease,
//! Deployment) and `LeafClusterPolicy`s into node taints. [`render`] is the pure part; the rest
//! talks to the API server.

pub mod render;
