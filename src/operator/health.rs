//! What the operator's `/readyz` and `/metrics` report besides the reconcile counters: whether its
//! caches of SchedulerProfiles and LeafClusterPolicies have synced, and how many of those objects
//! still wait for the operator (a newer generation than the status has observed, or a deletion
//! whose finalizer has not run).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::Shutdown;
use super::metrics::{self, OperatorMetrics};
use crate::api::{LeafClusterPolicy, SchedulerProfile};

/// Readiness and metrics of one operator process.
#[derive(Debug, Default)]
pub struct OperatorHealth {
    pub metrics: Arc<OperatorMetrics>,
    ready: AtomicBool,
    /// Why it is not ready yet (the last watch error), for `/readyz`.
    not_ready: Mutex<Option<String>>,
}

impl OperatorHealth {
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` once the caches have synced, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(self
            .not_ready
            .lock()
            .clone()
            .unwrap_or_else(|| "caches not synced yet".into()))
    }

    fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        *self.not_ready.lock() = None;
    }

    fn watch_failed(&self, what: &str, err: &watcher::Error) {
        if !self.ready.load(Ordering::Acquire) {
            *self.not_ready.lock() = Some(format!(
                "watching {what}: {}",
                crate::infra::logging::watch_error(err)
            ));
        }
    }
}

/// Objects the operator reconciles, as far as the backlog is concerned.
trait Reconciled: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static {
    fn observed_generation(&self) -> Option<i64>;

    /// The operator still has to act on it: its spec changed since the status was written, or
    /// it is being deleted (the finalizer has not run yet).
    fn waits(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
            || self.meta().generation != self.observed_generation()
    }
}

impl Reconciled for SchedulerProfile {
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref().and_then(|s| s.observed_generation)
    }
}

impl Reconciled for LeafClusterPolicy {
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref().and_then(|s| s.observed_generation)
    }
}

/// Keeps the backlog gauges current and marks the process ready once both caches have synced;
/// returns when `shutdown` resolves.
pub(crate) async fn observe(client: Client, health: Arc<OperatorHealth>, shutdown: Shutdown) {
    let (profiles, profiles_store) = track::<SchedulerProfile>(
        Api::all(client.clone()),
        health.clone(),
        metrics::SCHEDULER_PROFILE,
    );
    let (policies, policies_store) = track::<LeafClusterPolicy>(
        Api::all(client),
        health.clone(),
        metrics::LEAF_CLUSTER_POLICY,
    );
    let synced = async {
        if profiles_store.wait_until_ready().await.is_ok()
            && policies_store.wait_until_ready().await.is_ok()
        {
            health.set_ready();
            tracing::info!("operator caches synced: ready");
        }
        futures::future::pending::<()>().await;
    };
    tokio::select! {
        _ = profiles => {},
        _ = policies => {},
        _ = synced => {},
        _ = shutdown => {},
    }
}

/// A reflector of `K` that recounts the objects waiting for `controller` after every change.
fn track<K>(
    api: Api<K>,
    health: Arc<OperatorHealth>,
    controller: &'static str,
) -> (impl std::future::Future<Output = ()>, Store<K>)
where
    K: Reconciled,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let reader = store.clone();
    let run = async move {
        reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .for_each(|event| {
                match event {
                    Ok(_) => {
                        let depth = reader.state().iter().filter(|o| o.waits()).count();
                        health.metrics.set_queue_depth(controller, depth);
                    }
                    Err(err) => {
                        tracing::debug!(err = %crate::infra::logging::watch_error(&err), controller, "watch failed; retrying");
                        health.watch_failed(controller, &err);
                    }
                }
                futures::future::ready(())
            })
            .await;
    };
    (run, store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::scheduler_profile::SchedulerProfileStatus;

    fn profile(generation: i64, observed: Option<i64>, deleting: bool) -> SchedulerProfile {
        let mut p: SchedulerProfile = serde_json::from_value(serde_json::json!({
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": {"name": "p", "generation": generation},
            "spec": {}
        }))
        .expect("profile literal");
        if deleting {
            p.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
            );
        }
        p.status = observed.map(|g| SchedulerProfileStatus {
            observed_generation: Some(g),
            ..Default::default()
        });
        p
    }

    #[test]
    fn an_object_waits_until_its_generation_is_observed_and_while_it_is_deleted() {
        assert!(profile(1, None, false).waits(), "never reconciled");
        assert!(profile(2, Some(1), false).waits(), "spec changed since");
        assert!(!profile(2, Some(2), false).waits(), "caught up");
        assert!(profile(2, Some(2), true).waits(), "finalizer pending");
    }

    #[test]
    fn not_ready_until_synced_and_says_why() {
        let health = OperatorHealth::new();
        assert_eq!(health.readiness(), Err("caches not synced yet".into()));
        *health.not_ready.lock() = Some("watching schedulerprofile: 404".into());
        assert_eq!(
            health.readiness(),
            Err("watching schedulerprofile: 404".into())
        );
        health.set_ready();
        assert_eq!(health.readiness(), Ok(()));
    }
}
