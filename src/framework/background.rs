//! Work plugins do outside the scheduling cycle, started by the scheduler.
//!
//! A scheduling cycle must not wait on I/O (ARCHITECTURE.md, "What a plugin may do"). What a plugin
//! needs from outside is kept in memory by a [`BackgroundTask`] of its own (NetworkTraffic's
//! Prometheus refresher, Coscheduling's PodGroup status loop), and the API writes that follow a
//! decision made in the cycle (preemption's evictions, DynamicResources' deallocation) are handed
//! to the [`ApiDispatcher`] (upstream's `APIDispatcher`), which runs them: a typed call
//! ([`ApiDispatcher::dispatch_call`]) or a sequence of calls ([`ApiDispatcher::dispatch`]).
//!
//! A plugin's factory registers its tasks with `Handle::tasks`; it never starts them. The scheduler
//! takes them once its caches are synced, runs each with a [`TaskContext`] (the API, and whether
//! this replica leads), and aborts them when it stops. Without a scheduler (`ksched simulate`,
//! `config validate`) nothing starts them.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::api_calls::{ApiCall, ApiClient};

/// What a running task gets from the scheduler.
#[derive(Clone)]
pub struct TaskContext {
    /// The scheduler's API client (writes are refused once this replica stops leading).
    pub api: Arc<dyn ApiClient>,
    /// True while this replica leads (always true without leader election). A task that writes
    /// waits for it, so a standby replica writes nothing.
    pub leading: watch::Receiver<bool>,
}

impl TaskContext {
    /// Waits until this replica leads; false when the scheduler is going away.
    pub async fn wait_leading(&mut self) -> bool {
        self.leading.wait_for(|l| *l).await.is_ok()
    }
}

/// Work that runs outside the scheduling cycle for as long as the scheduler runs.
pub trait BackgroundTask: Send + Sync {
    /// For logs: what the task does (`NetworkTraffic refresher`).
    fn name(&self) -> &str;

    /// Runs until the scheduler aborts it (or it has nothing more to do).
    fn run(self: Arc<Self>, ctx: TaskContext) -> BoxFuture<'static, ()>;
}

/// The tasks the plugins of one scheduler registered, until the scheduler takes them.
#[derive(Default)]
pub struct BackgroundTasks {
    tasks: Mutex<Vec<Arc<dyn BackgroundTask>>>,
}

impl BackgroundTasks {
    /// Adds a task (once: registering the same task again does nothing).
    pub fn register(&self, task: Arc<dyn BackgroundTask>) {
        let mut tasks = self.tasks.lock();
        if !tasks.iter().any(|t| Arc::ptr_eq(t, &task)) {
            tasks.push(task);
        }
    }

    /// The registered tasks, for the scheduler to start; the list is left empty.
    pub fn take(&self) -> Vec<Arc<dyn BackgroundTask>> {
        std::mem::take(&mut *self.tasks.lock())
    }

    /// The names of the registered tasks.
    pub fn names(&self) -> Vec<String> {
        self.tasks
            .lock()
            .iter()
            .map(|t| t.name().to_string())
            .collect()
    }
}

/// Queued API work: given the API, the future that makes its calls (and reports their failures).
type QueuedCalls = Box<dyn FnOnce(Arc<dyn ApiClient>) -> BoxFuture<'static, ()> + Send>;

/// Runs API calls handed over from the scheduling cycle, concurrently, outside it (upstream's
/// `APIDispatcher`). Handing a call over never blocks.
pub struct ApiDispatcher {
    tx: mpsc::UnboundedSender<QueuedCalls>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<QueuedCalls>>>,
}

impl Default for ApiDispatcher {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        ApiDispatcher {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl ApiDispatcher {
    /// Queues `calls`, a future that makes API calls one after the other (a preemption's
    /// evictions); it runs once the dispatcher's task (or [`ApiDispatcher::run_queued`]) gets to
    /// it.
    pub fn dispatch<F, Fut>(&self, calls: F)
    where
        F: FnOnce(Arc<dyn ApiClient>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let calls: QueuedCalls = Box::new(move |api| Box::pin(calls(api)));
        // The receiver lives as long as the dispatcher: sending does not fail.
        let _ = self.tx.send(calls);
    }

    /// Queues one call; a failure is logged as `what` failing on the call's object (nobody
    /// waits for the outcome: the pods it concerns are retried by the events it causes).
    pub fn dispatch_call<C: ApiCall>(&self, call: C, what: &'static str) {
        let request = call.into_request();
        self.dispatch(move |api| async move {
            let object = request.key();
            if let Err(error) = api.send(request).await {
                tracing::warn!(%object, %error, "{what} failed");
            }
        });
    }

    /// Runs the calls queued so far, one after the other, on this thread: for `ksched simulate`
    /// and tests, whose in-memory API answers at once. Does nothing once the dispatcher's task
    /// runs (it owns the queue then).
    pub fn run_queued(&self, api: &Arc<dyn ApiClient>) {
        let mut rx = self.rx.lock();
        let Some(rx) = rx.as_mut() else {
            return;
        };
        while let Ok(call) = rx.try_recv() {
            futures::executor::block_on(call(api.clone()));
        }
    }
}

impl BackgroundTask for ApiDispatcher {
    fn name(&self) -> &str {
        "API dispatcher"
    }

    fn run(self: Arc<Self>, ctx: TaskContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let Some(mut rx) = self.rx.lock().take() else {
                return;
            };
            let mut in_flight = FuturesUnordered::new();
            loop {
                tokio::select! {
                    call = rx.recv() => match call {
                        Some(call) => in_flight.push(call(ctx.api.clone())),
                        None => break,
                    },
                    Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                }
            }
            while in_flight.next().await.is_some() {}
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::api_calls::{Delete, RecordingApi, Verb};
    use k8s_openapi::api::core::v1::Pod;

    fn delete(dispatcher: &ApiDispatcher, name: &'static str) {
        dispatcher.dispatch_call(Delete::<Pod>::new("ns", name, "uid"), "deleting");
    }

    fn deleted(api: &RecordingApi) -> Vec<String> {
        api.keys::<Pod>(Verb::Delete, None)
    }

    #[test]
    fn queued_calls_run_in_order_when_asked() {
        let recording = Arc::new(RecordingApi::default());
        let api: Arc<dyn ApiClient> = recording.clone();
        let d = ApiDispatcher::default();
        delete(&d, "a");
        delete(&d, "b");
        assert!(deleted(&recording).is_empty(), "dispatching runs nothing");
        d.run_queued(&api);
        assert_eq!(deleted(&recording), ["ns/a", "ns/b"]);
    }

    #[tokio::test]
    async fn the_task_runs_calls_as_they_come() {
        let recording = Arc::new(RecordingApi::default());
        let d = Arc::new(ApiDispatcher::default());
        delete(&d, "before");
        let (_leader, leading) = watch::channel(true);
        let ctx = TaskContext {
            api: recording.clone(),
            leading,
        };
        let task = tokio::spawn(d.clone().run(ctx));
        delete(&d, "after");
        for _ in 0..100 {
            if deleted(&recording).len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(deleted(&recording), ["ns/before", "ns/after"]);
        task.abort();
    }

    #[test]
    fn a_task_registers_once() {
        let tasks = BackgroundTasks::default();
        let d: Arc<dyn BackgroundTask> = Arc::new(ApiDispatcher::default());
        tasks.register(d.clone());
        tasks.register(d);
        assert_eq!(tasks.names(), ["API dispatcher"]);
        assert_eq!(tasks.take().len(), 1);
        assert!(tasks.names().is_empty());
    }
}
