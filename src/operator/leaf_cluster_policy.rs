//! The LeafClusterPolicy reconciler: keeps the policy's taint on exactly the nodes matching
//! `leafNodeSelector`, and nowhere else it put it; never touches another taint; updates each Node
//! with its resourceVersion as a precondition and retries on 409 Conflict, so a concurrent edit is
//! never lost.
//!
//! The taint last applied is recorded on the policy (annotation `ksched.io/applied-taint`), so a
//! changed `spec.taint`, `manageTaint: false` or a deleted policy (finalizer) removes exactly what
//! the operator added. Triggers: the policy; any Node whose labels or taints change (all policies);
//! any SchedulerProfile created or deleted (`profiles: ["*"]` resolves to them); a periodic resync.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};

use super::render::FIELD_MANAGER;
use super::status::{self, PolicyObservation};
use super::{Context, Error, FINALIZER, Shutdown, is_conflict, is_not_found, taints};
use crate::api::leaf_cluster_policy::LeafTaint;
use crate::api::{LeafClusterPolicy, SchedulerProfile};

/// Annotation on the policy: the taint the operator last put on nodes for it (`key=value:effect`).
pub const APPLIED_TAINT_ANNOTATION: &str = "ksched.io/applied-taint";
/// Attempts to update one Node before giving up until the next reconcile.
const NODE_UPDATE_ATTEMPTS: u32 = 10;

pub(crate) async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let client = ctx.client.clone();
    let node_changes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .predicate_filter(node_labels_and_taints, Default::default())
        .filter_map(|n| async move { n.ok().map(|_| ()) });
    let profile_changes = watcher(
        Api::<SchedulerProfile>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(predicates::generation, Default::default())
    .filter_map(|p| async move { p.ok().map(|_| ()) });
    Controller::new(
        Api::<LeafClusterPolicy>::all(client),
        watcher::Config::default(),
    )
    .reconcile_all_on(node_changes)
    .reconcile_all_on(profile_changes)
    .with_config(kube::runtime::Config::default().debounce(Duration::from_millis(500)))
    .graceful_shutdown_on(shutdown)
    .run(reconcile, error_policy, ctx)
    .for_each(|res| async move {
        match res {
            Ok((obj, _)) => tracing::debug!(policy = %obj.name, "reconciled"),
            Err(e) => tracing::debug!(error = %e, "policy reconcile failed"),
        }
    })
    .await;
}

/// Hash of what decides a node's taints: its labels and taints.
fn node_labels_and_taints(node: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    node.labels().hash(&mut h);
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    serde_json::to_string(&taints)
        .unwrap_or_default()
        .hash(&mut h);
    Some(h.finish())
}

fn error_policy(policy: Arc<LeafClusterPolicy>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(policy = %policy.name_any(), error = %err, "reconciling policy failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(policy: Arc<LeafClusterPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<LeafClusterPolicy> = Api::all(ctx.client.clone());
    finalizer(&api, FINALIZER, policy, |event| async {
        match event {
            Finalizer::Apply(p) => apply(&p, &ctx).await,
            Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn applied_taint(policy: &LeafClusterPolicy) -> Option<LeafTaint> {
    policy
        .annotations()
        .get(APPLIED_TAINT_ANNOTATION)
        .and_then(|s| taints::parse(s))
}

async fn set_applied_taint(
    policy: &LeafClusterPolicy,
    taint: Option<&LeafTaint>,
    ctx: &Context,
) -> Result<(), Error> {
    let value = taint.map(taints::describe);
    let patch = serde_json::json!({"metadata": {"annotations": {APPLIED_TAINT_ANNOTATION: value}}});
    Api::<LeafClusterPolicy>::all(ctx.client.clone())
        .patch(
            &policy.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn apply(policy: &LeafClusterPolicy, ctx: &Context) -> Result<Action, Error> {
    let name = policy.name_any();
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    let desired = &policy.spec.taint;
    let selector = Selector::try_from(policy.spec.leaf_node_selector.clone());
    let profiles = resolve_profiles(policy, ctx).await?;
    let nodes = nodes_api.list(&ListParams::default()).await?.items;

    let mut obs = PolicyObservation {
        generation: policy.metadata.generation,
        leaf_nodes: 0,
        tainted_nodes: 0,
        profiles,
        manage_taint: policy.spec.manage_taint,
        taint: taints::describe(desired),
        invalid: None,
        error: None,
        now: Timestamp::now(),
    };
    let selector = match selector {
        Ok(s) => s,
        Err(e) => {
            obs.invalid = Some(format!("spec.leafNodeSelector: {e}"));
            write_status(policy, &obs, ctx).await?;
            return Ok(Action::await_change());
        }
    };
    let matching: Vec<&Node> = nodes
        .iter()
        .filter(|n| selector.matches(n.labels()))
        .collect();
    obs.leaf_nodes = i32::try_from(matching.len()).unwrap_or(i32::MAX);

    let mut errors = Vec::new();
    let applied = applied_taint(policy);
    if policy.spec.manage_taint {
        // A taint applied earlier that the spec no longer asks for goes first, from every node.
        if let Some(old) = applied.as_ref().filter(|old| *old != desired) {
            remove_everywhere(&nodes_api, &nodes, old, &mut errors).await;
            if errors.is_empty() {
                set_applied_taint(policy, Some(desired), ctx).await?;
            }
        } else if applied.is_none() {
            // Recorded before any node carries it, so nothing is ever left behind.
            set_applied_taint(policy, Some(desired), ctx).await?;
        }
        for node in &nodes {
            let node_name = node.name_any();
            let result = if selector.matches(node.labels()) {
                update_taints(&nodes_api, &node_name, |t| taints::with(t, desired)).await
            } else {
                update_taints(&nodes_api, &node_name, |t| taints::without(t, desired)).await
            };
            match result {
                Ok(Some(true)) => {
                    tracing::info!(policy = %name, node = %node_name, taint = %obs.taint, "node taint updated")
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{node_name}: {e}")),
            }
        }
    } else if let Some(old) = applied {
        remove_everywhere(&nodes_api, &nodes, &old, &mut errors).await;
        if errors.is_empty() {
            set_applied_taint(policy, None, ctx).await?;
        }
    }

    // Count from the nodes as they are now.
    let nodes = nodes_api.list(&ListParams::default()).await?.items;
    obs.leaf_nodes = i32::try_from(
        nodes
            .iter()
            .filter(|n| selector.matches(n.labels()))
            .count(),
    )
    .unwrap_or(i32::MAX);
    obs.tainted_nodes = i32::try_from(
        nodes
            .iter()
            .filter(|n| selector.matches(n.labels()) && taints::has(node_taints(n), desired))
            .count(),
    )
    .unwrap_or(i32::MAX);
    if !errors.is_empty() {
        obs.error = Some(errors.join("; "));
    }
    write_status(policy, &obs, ctx).await?;
    if obs.error.is_some() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

async fn remove_everywhere(
    api: &Api<Node>,
    nodes: &[Node],
    taint: &LeafTaint,
    errors: &mut Vec<String>,
) {
    for node in nodes.iter().filter(|n| taints::has(node_taints(n), taint)) {
        let node_name = node.name_any();
        match update_taints(api, &node_name, |t| taints::without(t, taint)).await {
            Ok(Some(true)) => {
                tracing::info!(node = %node_name, taint = %taints::describe(taint), "node taint removed")
            }
            Ok(_) => {}
            Err(e) => errors.push(format!("{node_name}: {e}")),
        }
    }
}

/// Reads the node, computes its new taints with `change` (`None`: nothing to do) and writes them
/// with the node's resourceVersion as a precondition; on 409 Conflict reads again and retries.
/// `Ok(Some(true))` when the node was changed, `Ok(None)` when it is gone.
async fn update_taints(
    api: &Api<Node>,
    name: &str,
    change: impl Fn(&[Taint]) -> Option<Vec<Taint>>,
) -> Result<Option<bool>, Error> {
    for attempt in 1..=NODE_UPDATE_ATTEMPTS {
        let Some(node) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let Some(new) = change(node_taints(&node)) else {
            return Ok(Some(false));
        };
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": if new.is_empty() { serde_json::Value::Null } else {
                serde_json::to_value(&new).map_err(|source| Error::Serialize { what: "node taints", source })?
            }},
        });
        match api
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(Some(true)),
            Err(e) if is_conflict(&e) => {
                tracing::debug!(node = name, attempt, "node changed meanwhile; retrying");
            }
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflict {
        node: name.to_string(),
        attempts: NODE_UPDATE_ATTEMPTS,
    })
}

/// `spec.profiles` with `*` expanded to every existing SchedulerProfile.
async fn resolve_profiles(policy: &LeafClusterPolicy, ctx: &Context) -> Result<Vec<String>, Error> {
    if policy.spec.profiles.iter().any(|p| p == "*") {
        let mut names: Vec<String> = Api::<SchedulerProfile>::all(ctx.client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        return Ok(names);
    }
    Ok(policy.spec.profiles.clone())
}

async fn write_status(
    policy: &LeafClusterPolicy,
    obs: &PolicyObservation,
    ctx: &Context,
) -> Result<(), Error> {
    let previous = policy.status.clone().unwrap_or_default();
    let new_status = status::policy_status(&previous, obs);
    if policy.status.as_ref() == Some(&new_status) {
        return Ok(());
    }
    let patch = serde_json::json!({
        "apiVersion": LeafClusterPolicy::api_version(&()),
        "kind": LeafClusterPolicy::kind(&()),
        "status": new_status,
    });
    Api::<LeafClusterPolicy>::all(ctx.client.clone())
        .patch_status(
            &policy.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// On delete: the policy's taint leaves every node (whatever the selector now says).
async fn cleanup(policy: &LeafClusterPolicy, ctx: &Context) -> Result<Action, Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let nodes = api.list(&ListParams::default()).await?.items;
    let mut errors = Vec::new();
    let mut remove = vec![policy.spec.taint.clone()];
    if let Some(applied) = applied_taint(policy).filter(|a| *a != policy.spec.taint) {
        remove.push(applied);
    }
    if policy.spec.manage_taint || applied_taint(policy).is_some() {
        for taint in &remove {
            remove_everywhere(&api, &nodes, taint, &mut errors).await;
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(format!(
            "removing the taint of deleted policy {}: {}",
            policy.name_any(),
            errors.join("; ")
        )));
    }
    tracing::info!(policy = %policy.name_any(), "policy deleted: its taint removed from every node");
    Ok(Action::await_change())
}
