//! The real [`EmbeddedSchedulers`]: `mode: Embedded` profiles run as schedulers inside the operator
//! process (one `scheduler::run` task each), started with the rendered configuration, restarted when
//! it changes, and stopped on suspend, mode change or delete.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::embedded::{EmbeddedError, EmbeddedSchedulers, OperatorTerm};
use super::metrics::OperatorMetrics;
use crate::config;
use crate::emulation::{Emulation, OPPORTUNISTIC_BATCHING};
use crate::framework::registry::Registry;
use crate::scheduler::queue::DEFAULT_MAX_IN_UNSCHEDULABLE;
use crate::scheduler::{EmbeddedIn, SchedulerOptions, run};

struct Running {
    config_yaml: String,
    emulation: Emulation,
    identity: String,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

pub struct InProcessSchedulers {
    client: Client,
    registry: Arc<Registry>,
    /// Where the schedulers' metrics are exported (the operator's `/metrics`).
    metrics: Arc<OperatorMetrics>,
    /// Leader-election identity prefix without an operator term (the operator's instance).
    instance: String,
    /// The leading operator's term, once it leads.
    term: parking_lot::Mutex<Option<OperatorTerm>>,
    running: Mutex<HashMap<String, Running>>,
}

impl InProcessSchedulers {
    pub fn new(client: Client, registry: Arc<Registry>, instance: impl Into<String>) -> Self {
        Self {
            client,
            registry,
            metrics: Arc::new(OperatorMetrics::new()),
            instance: instance.into(),
            term: parking_lot::Mutex::new(None),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Exports the schedulers' metrics through `metrics` (the operator's).
    pub fn with_metrics(mut self, metrics: Arc<OperatorMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Profiles whose scheduler task is running.
    pub async fn running(&self) -> Vec<String> {
        let running = self.running.lock().await;
        running
            .iter()
            .filter(|(_, r)| !r.task.is_finished())
            .map(|(p, _)| p.clone())
            .collect()
    }
}

async fn shut_down(profile: &str, r: Running) {
    let _ = r.shutdown.send(true);
    if tokio::time::timeout(Duration::from_secs(10), r.task)
        .await
        .is_err()
    {
        warn!(profile, "embedded scheduler did not stop within 10s");
    }
}

#[async_trait]
impl EmbeddedSchedulers for InProcessSchedulers {
    async fn ensure(
        &self,
        profile: &str,
        config_yaml: &str,
        emulation: &Emulation,
    ) -> Result<(), EmbeddedError> {
        let mut running = self.running.lock().await;
        if let Some(r) = running.get(profile)
            && r.config_yaml == config_yaml
            && r.emulation == *emulation
            && !r.task.is_finished()
        {
            return Ok(());
        }
        // Validate before stopping anything: a bad config never replaces a working scheduler.
        let loaded = config::load_at(config_yaml.as_bytes(), self.registry.as_ref(), emulation)
            .map_err(|e| EmbeddedError::Failed(e.to_string()))?;
        if let Some(old) = running.remove(profile) {
            info!(
                profile,
                "configuration changed: restarting the embedded scheduler"
            );
            shut_down(profile, old).await;
        }
        let (shutdown, shutdown_rx) = watch::channel(false);
        let metrics = self.metrics.embedded(profile, emulation.minor());
        let term = self.term.lock().clone();
        let identity = match &term {
            Some(term) => term.scheduler_identity(profile),
            None => format!("{}_{profile}_{:08x}", self.instance, fastrand::u32(..)),
        };
        let opportunistic_batching = loaded.config.emulation.enabled(OPPORTUNISTIC_BATCHING);
        let options = SchedulerOptions {
            config: loaded.config,
            registry: self.registry.clone(),
            secure_address: None,
            endpoint: Default::default(),
            metrics: Some(metrics),
            identity: identity.clone(),
            configz: String::new(),
            pod_max_in_unschedulable_pods_duration: DEFAULT_MAX_IN_UNSCHEDULABLE,
            opportunistic_batching,
            embedded_in: term.map(|t| EmbeddedIn {
                takeover: t.takeover(),
                operator: t.leadership,
            }),
        };
        let client = self.client.clone();
        let name = profile.to_string();
        let task = tokio::spawn(async move {
            match run(client, options, shutdown_rx).await {
                Ok(()) => info!(profile = %name, "embedded scheduler stopped"),
                Err(err) => {
                    warn!(profile = %name, %err, "embedded scheduler exited; it restarts at the next reconcile")
                }
            }
        });
        info!(profile, "embedded scheduler started");
        running.insert(
            profile.to_string(),
            Running {
                config_yaml: config_yaml.to_string(),
                emulation: emulation.clone(),
                identity,
                shutdown,
                task,
            },
        );
        Ok(())
    }

    async fn stop(&self, profile: &str) {
        let old = self.running.lock().await.remove(profile);
        if let Some(r) = old {
            shut_down(profile, r).await;
            info!(profile, "embedded scheduler stopped");
        }
        self.metrics.remove_embedded(profile);
    }

    async fn identity(&self, profile: &str) -> Option<String> {
        let running = self.running.lock().await;
        running
            .get(profile)
            .filter(|r| !r.task.is_finished())
            .map(|r| r.identity.clone())
    }

    async fn start_term(&self, term: OperatorTerm) {
        *self.term.lock() = Some(term);
    }

    async fn stop_all(&self) -> Vec<String> {
        let all: Vec<(String, Running)> = self.running.lock().await.drain().collect();
        let mut stopped = Vec::new();
        for (profile, r) in all {
            let was_running = !r.task.is_finished();
            shut_down(&profile, r).await;
            if was_running {
                stopped.push(profile);
            }
        }
        stopped
    }
}
