//! The LeafClusterPolicy reconciler: keeps the policy's taint on the nodes matching
//! `leafNodeSelector` that it keeps, and removes only taints the operator itself added (recorded on
//! each node, per policy: see [`taints`] for the rule and the planning, which is pure).
//!
//! Each Node is updated with its resourceVersion as a precondition (taints and the ownership
//! annotation in one write); on 409 Conflict it is read again and planned again, so a concurrent
//! edit is never lost. A policy writes a node only when the plan changes something, so policies
//! that overlap do not fight: the older keeps the node, the newer reports `Conflict` and writes
//! nothing there.
//!
//! Triggers: the policy; any policy created, deleted or changed (ownership depends on all of them);
//! any Node added or deleted, or whose labels, taints or ownership annotation change (the counts
//! and conflicts follow); any SchedulerProfile created or deleted (`profiles: ["*"]` and missing
//! profiles); a periodic resync.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::leaf_render::validate_policy;
use super::render::FIELD_MANAGER;
use super::status::{self, BlockedNode, PolicyConflict, PolicyObservation};
use super::taints::{self, Claim, Claimant, NodePlan, NodeView, Records, Standing};
use super::{Context, Error, FINALIZER, Shutdown, announce, host_nodes, is_conflict, is_not_found};
use crate::api::leaf_cluster_policy::LAST_VALID_SPEC_ANNOTATION;
use crate::api::{LeafClusterPolicy, LeafClusterPolicyStatus, SchedulerProfile};

/// Attempts to update one Node before giving up until the next reconcile.
const NODE_UPDATE_ATTEMPTS: u32 = 10;
/// Resync of a policy whose nodes are where they should be.
const RESYNC: Duration = Duration::from_secs(300);
/// Retry of a policy some of whose nodes could not be updated.
const RETRY: Duration = Duration::from_secs(5);

pub(crate) async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let client = ctx.client.clone();
    // A deleted node changes the counts too (and may end a conflict or a foreign taint).
    let node_changes = changes(Api::<Node>::all(client.clone()), node_ownership_inputs);
    let profile_changes = changes(Api::<SchedulerProfile>::all(client.clone()), lifecycle);
    let policy_changes = changes(Api::<LeafClusterPolicy>::all(client.clone()), lifecycle);
    Controller::new(
        Api::<LeafClusterPolicy>::all(client),
        watcher::Config::default(),
    )
    .reconcile_all_on(node_changes)
    .reconcile_all_on(profile_changes)
    .reconcile_all_on(policy_changes)
    .with_config(kube::runtime::Config::default().debounce(Duration::from_millis(500)))
    .graceful_shutdown_on(shutdown)
    .run(
        ctx.opts
            .health
            .metrics
            .instrument(super::metrics::LEAF_CLUSTER_POLICY, reconcile),
        error_policy,
        ctx,
    )
    .for_each(|res| async move {
        match res {
            Ok((obj, _)) => tracing::debug!(policy = %obj.name, "reconciled"),
            Err(e) => tracing::debug!(error = %crate::infra::logging::controller_error(&e), "policy reconcile failed"),
        }
    })
    .await;
}

/// One item whenever an object of `api` is created or deleted, or `key` of it changes.
fn changes<K>(api: Api<K>, key: fn(&K) -> u64) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let seen: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().ok()?;
                match event.ok()? {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        let now = key(&o);
                        (seen.insert(o.name_any(), now) != Some(now)).then_some(())
                    }
                    watcher::Event::Delete(o) => seen.remove(&o.name_any()).map(|_| ()),
                    watcher::Event::Init | watcher::Event::InitDone => None,
                }
            }
        })
}

/// Hash of an object's generation and whether it is being deleted (status updates and the like
/// do not change it).
fn lifecycle<K: Resource>(o: &K) -> u64 {
    let mut h = DefaultHasher::new();
    (o.meta().generation, o.meta().deletion_timestamp.is_some()).hash(&mut h);
    h.finish()
}

/// Hash of what decides a node's taints: its labels, taints and ownership records.
fn node_ownership_inputs(node: &Node) -> u64 {
    let mut h = DefaultHasher::new();
    node.labels().hash(&mut h);
    node.annotations()
        .get(taints::OWNED_TAINTS_ANNOTATION)
        .hash(&mut h);
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    serde_json::to_string(&taints)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

fn error_policy(policy: Arc<LeafClusterPolicy>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(policy = %policy.name_any(), error = %err, "reconciling policy failed; retrying");
    Action::requeue(RETRY)
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
    .or_else(|e| match e {
        // Deleted meanwhile: nothing holds it any more.
        kube::runtime::finalizer::Error::RemoveFinalizer(e) if super::is_not_found(&e) => {
            Ok(Action::await_change())
        }
        e => Err(Error::Finalizer(Box::new(e))),
    })
}

/// Every policy's compiled selector (`None`: invalid, the policy is frozen).
struct Compiled {
    policies: Vec<LeafClusterPolicy>,
    selectors: Vec<Option<Selector>>,
}

impl Compiled {
    fn new(policies: Vec<LeafClusterPolicy>) -> Compiled {
        let selectors = policies
            .iter()
            .map(|p| {
                if validate_policy(&p.spec).is_empty() {
                    Selector::try_from(p.spec.leaf_node_selector.clone()).ok()
                } else {
                    None
                }
            })
            .collect();
        Compiled {
            policies,
            selectors,
        }
    }

    /// The live policies (not being deleted) as the planner sees them.
    fn claimants(&self) -> Vec<Claimant<'_>> {
        self.policies
            .iter()
            .zip(&self.selectors)
            .filter(|(p, _)| p.metadata.deletion_timestamp.is_none())
            .map(|(p, sel)| Claimant {
                name: p.metadata.name.as_deref().unwrap_or_default(),
                created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                claim: sel.as_ref().map_or(Claim::Frozen, Claim::Selector),
                taint: &p.spec.taint,
                manage: p.spec.manage_taint,
            })
            .collect()
    }

    fn taint_of(&self, name: &str) -> Option<String> {
        self.policies
            .iter()
            .find(|p| p.name_any() == name)
            .map(|p| taints::describe(&p.spec.taint))
    }
}

fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

pub(crate) fn node_view(node: &Node) -> NodeView<'_> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let records = Records::from_annotations(node.annotations()).unwrap_or_else(|e| {
        tracing::warn!(node = %node.name_any(), error = %e, "ignoring a malformed ownership annotation: the operator owns no taint on this node");
        Records::default()
    });
    NodeView {
        labels: node.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
        taints: node_taints(node),
        records,
    }
}

async fn apply(policy: &LeafClusterPolicy, ctx: &Context) -> Result<Action, Error> {
    let name = policy.name_any();
    let client = &ctx.client;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let policies = Api::<LeafClusterPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let profile_names: BTreeSet<String> = Api::<SchedulerProfile>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    let (profiles, missing_profiles) = resolve_profiles(&policy.spec.profiles, &profile_names);
    let mut obs = PolicyObservation {
        generation: policy.metadata.generation,
        leaf_nodes: 0,
        tainted_nodes: 0,
        preexisting_taints: 0,
        profiles,
        missing_profiles,
        manage_taint: policy.spec.manage_taint,
        taint: taints::describe(&policy.spec.taint),
        invalid: None,
        conflicts: Vec::new(),
        blocked: Vec::new(),
        error: None,
        now: Timestamp::now(),
    };

    let problems = validate_policy(&policy.spec);
    if !problems.is_empty() {
        // An invalid policy changes nothing: its nodes keep what they carry.
        obs.invalid = Some(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        );
        write_status(policy, &obs, ctx).await?;
        return Ok(Action::requeue(RESYNC));
    }
    remember_valid_spec(policy, ctx).await?;

    let compiled = Compiled::new(policies);
    let claimants = compiled.claimants();
    let nodes = nodes_api.list(&ListParams::default()).await?.items;
    let mut errors = Vec::new();
    let mut conflicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut matched = Vec::new();
    for node in &nodes {
        let node_name = node.name_any();
        let plan =
            |n: &Node| taints::plan_node(&name, &policy.spec.taint, &node_view(n), &claimants);
        let outcome = match update_node(&nodes_api, node, plan).await {
            Ok(outcome) => outcome,
            Err(e) => {
                errors.push(format!("{node_name}: {e}"));
                continue;
            }
        };
        let Some(outcome) = outcome else { continue };
        match &outcome.standing {
            Standing::NotSelected => continue,
            Standing::Conflict { with } => {
                conflicts.entry(with.clone()).or_default().push(node_name);
            }
            Standing::Writer | Standing::Selected => {}
        }
        matched.push(node.name_any());
        obs.leaf_nodes += 1;
        if outcome.tainted {
            obs.tainted_nodes += 1;
        }
        if outcome.preexisting {
            obs.preexisting_taints += 1;
        }
        if let Some(t) = outcome.blocked_by {
            obs.blocked.push(BlockedNode {
                node: node.name_any(),
                taint: taint_text(&t),
            });
        }
    }
    obs.conflicts = conflicts
        .into_iter()
        .map(|(with, nodes)| PolicyConflict {
            with_taint: compiled.taint_of(&with).unwrap_or_default(),
            with,
            nodes,
        })
        .collect();
    if !errors.is_empty() {
        obs.error = Some(errors.join("; "));
    }
    if policy.spec.manage_taint {
        host_nodes::check(ctx, policy, &matched, &obs.profiles).await?;
    }
    write_status(policy, &obs, ctx).await?;
    Ok(Action::requeue(if obs.error.is_some() {
        RETRY
    } else {
        RESYNC
    }))
}

/// `key=value:effect` of a node taint.
fn taint_text(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// `spec.profiles` with `*` expanded to every existing SchedulerProfile, and the names that exist
/// nowhere.
fn resolve_profiles(wanted: &[String], existing: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    if wanted.iter().any(|p| p == "*") {
        return (existing.iter().cloned().collect(), Vec::new());
    }
    let missing = wanted
        .iter()
        .filter(|p| !existing.contains(*p))
        .cloned()
        .collect();
    (wanted.to_vec(), missing)
}

/// Records the spec on the policy as its last valid one (profiles keep rendering it while a later
/// spec is invalid).
async fn remember_valid_spec(policy: &LeafClusterPolicy, ctx: &Context) -> Result<(), Error> {
    let spec = serde_json::to_string(&policy.spec).map_err(|source| Error::Serialize {
        what: "policy spec",
        source,
    })?;
    if policy.annotations().get(LAST_VALID_SPEC_ANNOTATION) == Some(&spec) {
        return Ok(());
    }
    let patch =
        serde_json::json!({"metadata": {"annotations": {LAST_VALID_SPEC_ANNOTATION: spec}}});
    Api::<LeafClusterPolicy>::all(ctx.client.clone())
        .patch(
            &policy.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Plans `node` with `plan` and makes the write it asks for, with the node's resourceVersion as a
/// precondition; on 409 Conflict reads the node again and plans again. The plan as carried out;
/// `None` when the node is gone.
pub(crate) async fn update_node(
    api: &Api<Node>,
    node: &Node,
    plan: impl Fn(&Node) -> NodePlan,
) -> Result<Option<NodePlan>, Error> {
    let name = node.name_any();
    let mut current = node.clone();
    for attempt in 1..=NODE_UPDATE_ATTEMPTS {
        let p = plan(&current);
        let Some(change) = &p.change else {
            return Ok(Some(p));
        };
        let taints = if change.taints.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::to_value(&change.taints).map_err(|source| Error::Serialize {
                what: "node taints",
                source,
            })?
        };
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": current.resource_version(),
                "annotations": {taints::OWNED_TAINTS_ANNOTATION: change.records.to_annotation()},
            },
            "spec": {"taints": taints},
        });
        match api
            .patch(
                &name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(node = %name, taints = %change.taints.iter().map(taint_text).collect::<Vec<_>>().join(", "), owned = %change.records.to_annotation().unwrap_or_else(|| "none".into()), "node taints updated");
                return Ok(Some(p));
            }
            Err(e) if is_conflict(&e) => {
                tracing::debug!(node = %name, attempt, "node changed meanwhile; planning again");
            }
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        match api.get_opt(&name).await? {
            Some(n) => current = n,
            None => return Ok(None),
        }
    }
    Err(Error::NodeConflict {
        node: name,
        attempts: NODE_UPDATE_ATTEMPTS,
    })
}

async fn write_status(
    policy: &LeafClusterPolicy,
    obs: &PolicyObservation,
    ctx: &Context,
) -> Result<(), Error> {
    let previous = policy.status.clone().unwrap_or_default();
    let new_status = status::policy_status(&previous, obs);
    let ready = status::condition(&new_status.conditions, status::READY);
    ctx.opts.health.metrics.record_policy(
        &policy.name_any(),
        ready.is_some_and(|c| c.status == "True"),
        ready.map_or("", |c| c.reason.as_str()),
    );
    if policy.status.as_ref() == Some(&new_status) {
        return Ok(());
    }
    announce_readiness(policy, &previous, &new_status, ctx).await;
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

/// An Event on the policy when its Ready condition changes reason (or, while not Ready, message);
/// a first status is announced only when it is not Ready.
async fn announce_readiness(
    policy: &LeafClusterPolicy,
    previous: &LeafClusterPolicyStatus,
    new: &LeafClusterPolicyStatus,
    ctx: &Context,
) {
    let Some(after) = status::condition(&new.conditions, status::READY) else {
        return;
    };
    let not_ready = after.status == "False";
    let changed = match status::condition(&previous.conditions, status::READY) {
        None => not_ready,
        Some(before) => {
            before.reason != after.reason || (not_ready && before.message != after.message)
        }
    };
    if changed {
        let type_ = if not_ready {
            EventType::Warning
        } else {
            EventType::Normal
        };
        announce(
            ctx,
            policy,
            status::READY,
            type_,
            &after.reason,
            after.message.clone(),
        )
        .await;
    }
}

/// On delete: every taint the operator added for this policy leaves the nodes (or passes to the
/// policy that keeps the node with the same taint); nothing else is touched.
async fn cleanup(policy: &LeafClusterPolicy, ctx: &Context) -> Result<Action, Error> {
    let name = policy.name_any();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let others: Vec<LeafClusterPolicy> = Api::<LeafClusterPolicy>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.name_any() != name)
        .collect();
    let compiled = Compiled::new(others);
    let claimants = compiled.claimants();
    let nodes = api.list(&ListParams::default()).await?.items;
    let mut errors = Vec::new();
    for node in nodes
        .iter()
        .filter(|n| node_view(n).records.0.contains_key(&name))
    {
        let plan =
            |n: &Node| taints::plan_node(&name, &policy.spec.taint, &node_view(n), &claimants);
        if let Err(e) = update_node(&api, node, plan).await {
            errors.push(format!("{}: {e}", node.name_any()));
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid(format!(
            "removing the taints of deleted policy {name}: {}",
            errors.join("; ")
        )));
    }
    ctx.opts.health.metrics.forget_policy(&name);
    tracing::info!(policy = %name, "policy deleted: the taints it added are gone from every node");
    Ok(Action::await_change())
}
