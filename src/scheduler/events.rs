//! What users see of a scheduling decision, in upstream's form: a `Scheduled` or `FailedScheduling`
//! event (events.k8s.io/v1, reporting controller = the scheduler name) and the pod's `PodScheduled`
//! condition.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;
use tracing::warn;

/// `PodScheduled=False` reason for pods no node fits.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// `PodScheduled=False` reason for internal errors.
pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";

/// Publishes events and condition updates for one scheduler profile.
#[derive(Clone)]
pub struct PodReporter {
    client: Client,
    recorder: Recorder,
}

impl PodReporter {
    pub fn new(client: Client, scheduler_name: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: scheduler_name.to_string(),
            instance: Some(instance.to_string()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }

    /// `Scheduled`: "Successfully assigned ns/name to node".
    pub async fn scheduled(&self, pod: &Pod, node: &str) {
        let note = format!(
            "Successfully assigned {}/{} to {node}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        self.publish(pod, EventType::Normal, "Scheduled", "Binding", note)
            .await;
    }

    /// `FailedScheduling` with `message`, and `PodScheduled=False` with `reason` (Unschedulable or
    /// SchedulerError) and the same message; `nominated_node` is written to status.nominatedNodeName
    /// when preemption chose one.
    pub async fn failed(
        &self,
        pod: &Pod,
        reason: &str,
        message: &str,
        nominated_node: Option<&str>,
    ) {
        self.publish(
            pod,
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            message.to_string(),
        )
        .await;
        let mut status = json!({
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": Timestamp::now().to_string(),
            }]
        });
        if let Some(node) = nominated_node {
            status["nominatedNodeName"] = json!(node);
        }
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if let Err(err) = pods
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({ "status": status })),
            )
            .await
        {
            warn!(pod = %format!("{ns}/{name}"), %err, "updating the PodScheduled condition failed");
        }
    }

    async fn publish(&self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: String) {
        let reference = pod.object_ref(&());
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &reference).await {
            warn!(%err, reason, "publishing an event failed");
        }
    }
}
