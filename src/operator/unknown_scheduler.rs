//! The misspelled-schedulerName trap: a pod whose `spec.schedulerName` nothing serves stays Pending
//! forever without a word from any scheduler. The operator watches unbound Pending pods and gives
//! each such pod one Warning event (`UnknownSchedulerName`) naming the schedulers that exist.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::{Context, DEFAULT_SCHEDULER, Shutdown};
use crate::api::SchedulerProfile;
use crate::config::did_you_mean;

/// Event reason.
pub(crate) const REASON: &str = "UnknownSchedulerName";

pub(crate) async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields("status.phase=Pending,spec.nodeName=");
    let mut stream = watcher(pods, cfg).default_backoff().boxed();
    let mut warned: HashSet<String> = HashSet::new();
    let mut shutdown = shutdown;
    loop {
        let event = tokio::select! {
            _ = &mut shutdown => break,
            e = stream.next() => e,
        };
        let Some(event) = event else { break };
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                check(&ctx, &pod, &mut warned).await;
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(uid) = pod.uid() {
                    warned.remove(&uid);
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::debug!(error = %crate::infra::logging::watch_error(&e), "pod watch error; retrying")
            }
        }
    }
}

/// The names a pod may use: `default-scheduler`, the configured extra names, and every profile.
async fn known_names(ctx: &Context) -> Result<Vec<String>, kube::Error> {
    let mut names = vec![DEFAULT_SCHEDULER.to_string()];
    names.extend(ctx.opts.known_schedulers.iter().cloned());
    let profiles = Api::<SchedulerProfile>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    names.extend(profiles.items.iter().map(|p| p.name_any()));
    names.sort();
    names.dedup();
    Ok(names)
}

async fn check(ctx: &Context, pod: &Pod, warned: &mut HashSet<String>) {
    let Some(uid) = pod.uid() else { return };
    if warned.contains(&uid) {
        return;
    }
    let wanted = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| DEFAULT_SCHEDULER.to_string());
    if wanted == DEFAULT_SCHEDULER || ctx.opts.known_schedulers.contains(&wanted) {
        return;
    }
    // Asked of the API server now, not of a cache: a profile created a moment ago counts.
    let known = match known_names(ctx).await {
        Ok(k) => k,
        Err(e) => {
            tracing::debug!(error = %crate::infra::logging::kube_error(&e), "listing profiles failed; will check the pod again");
            return;
        }
    };
    if known.contains(&wanted) {
        return;
    }
    let note = unknown_name_note(&wanted, &known);
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: REASON.into(),
        note: Some(super::truncate(note, 1000)),
        action: "Schedule".into(),
        secondary: None,
    };
    match ctx.recorder.publish(&ev, &pod.object_ref(&())).await {
        Ok(()) => {
            tracing::info!(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default(), scheduler = %wanted, "warned about an unknown schedulerName");
            warned.insert(uid);
        }
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), error = %crate::infra::logging::kube_error(&e), "publishing event failed")
        }
    }
}

/// The event's note: what is wrong, the closest existing name (as `ksched config validate`
/// suggests plugin names), and the two fixes.
fn unknown_name_note(wanted: &str, known: &[String]) -> String {
    let refs: Vec<&str> = known.iter().map(String::as_str).collect();
    let close = did_you_mean(wanted, &refs);
    format!(
        "no scheduler serves spec.schedulerName {wanted:?}{close}: the pod stays Pending until one does. Schedulers that exist: {}. Fix spec.schedulerName, or create a SchedulerProfile named {wanted:?}",
        known.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_suggests_the_closest_scheduler() {
        let known = vec![
            "default-scheduler".to_string(),
            "gpu-batch".to_string(),
            "ksched-default".to_string(),
        ];
        let note = unknown_name_note("ksched-defualt", &known);
        assert!(
            note.starts_with(
                "no scheduler serves spec.schedulerName \"ksched-defualt\" (did you mean ksched-default?): "
            ),
            "{note}"
        );
        assert!(
            note.contains("Schedulers that exist: default-scheduler, gpu-batch, ksched-default."),
            "{note}"
        );
        // Nothing close: no guess.
        let note = unknown_name_note("cluster-autoscaler", &known);
        assert!(!note.contains("did you mean"), "{note}");
    }
}
