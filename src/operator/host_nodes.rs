//! A `leafNodeSelector` that also selects host nodes: nodes where pods run that a scheduler
//! without the leaf taint's toleration placed (a profile the policy does not name, or
//! kube-scheduler). The taint now keeps those schedulers off them, which is rarely what was
//! meant, so the policy gets a Warning Event naming the nodes and the schedulers.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;

use super::taints::{describe, to_node_taint};
use super::{Context, DEFAULT_SCHEDULER, Error, announce, forget_announced};
use crate::api::LeafClusterPolicy;
use crate::api::leaf_cluster_policy::LeafTaint;
use crate::framework::plugins::helper::tolerations_tolerate_taint;

/// Event reason, and the topic under which it is announced once per set of nodes.
pub(crate) const REASON: &str = "LeafSelectorMatchesHostNodes";
/// Topic remembering the nodes last looked at, so pods are listed only when they change.
const CHECKED: &str = "HostNodesChecked";
/// At most this many matching nodes are looked at per change (a selector matching more is
/// almost certainly wrong, and a handful of them say so).
const MAX_NODES: usize = 20;

/// Looks at the pods on `matched` (the nodes the policy selects) when that set changed, and
/// warns about the nodes where schedulers outside `profiles` placed pods that do not tolerate the
/// policy's taint; withdraws the warning when there are none.
pub(crate) async fn check(
    ctx: &Context,
    policy: &LeafClusterPolicy,
    matched: &[String],
    profiles: &[String],
) -> Result<(), Error> {
    let key = format!(
        "{}/{}: {}",
        policy.metadata.generation.unwrap_or(0),
        profiles.join(","),
        matched.join(",")
    );
    {
        let mut last = ctx.announced.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (
            format!("LeafClusterPolicy/{}", policy.name_any()),
            CHECKED.to_string(),
        );
        if last.get(&slot) == Some(&key) {
            return Ok(());
        }
        last.insert(slot, key);
    }
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let mut on_nodes = Vec::new();
    for node in matched.iter().take(MAX_NODES) {
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        on_nodes.extend(list.items);
    }
    let found = host_nodes(&on_nodes, profiles, &policy.spec.taint);
    if found.is_empty() {
        forget_announced(ctx, policy, REASON);
    } else {
        announce(
            ctx,
            policy,
            REASON,
            EventType::Warning,
            REASON,
            message(&found, &policy.spec.taint),
        )
        .await;
    }
    Ok(())
}

/// Node -> the schedulers that placed pods there which do not tolerate `taint`, leaving out the
/// policy's own `profiles`, DaemonSet and static pods, and pods that are done.
pub(crate) fn host_nodes(
    pods: &[Pod],
    profiles: &[String],
    taint: &LeafTaint,
) -> BTreeMap<String, BTreeSet<String>> {
    let node_taint = to_node_taint(taint);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let done = matches!(phase, Some("Succeeded" | "Failed"));
        let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
        let mirror = pod
            .annotations()
            .contains_key("kubernetes.io/config.mirror");
        let scheduler = spec.scheduler_name.as_deref().unwrap_or(DEFAULT_SCHEDULER);
        let ours = profiles.iter().any(|p| p == scheduler);
        let tolerated = tolerations_tolerate_taint(
            spec.tolerations.as_deref().unwrap_or_default(),
            &node_taint,
        );
        if !(done || daemon || mirror || ours || tolerated) {
            out.entry(node.to_string())
                .or_default()
                .insert(scheduler.to_string());
        }
    }
    out
}

fn message(found: &BTreeMap<String, BTreeSet<String>>, taint: &LeafTaint) -> String {
    const SHOWN: usize = 5;
    let mut nodes: Vec<String> = found
        .iter()
        .take(SHOWN)
        .map(|(node, schedulers)| {
            let names: Vec<&str> = schedulers.iter().map(String::as_str).collect();
            format!("{node} (pods of {})", names.join(", "))
        })
        .collect();
    if found.len() > SHOWN {
        nodes.push(format!("and {} more", found.len() - SHOWN));
    }
    let taint = describe(taint);
    format!(
        "spec.leafNodeSelector also selects node(s) {} where schedulers the policy does not name placed pods that do not tolerate {taint}: these look like host nodes, and the taint keeps those schedulers off them from now on. Narrow spec.leafNodeSelector to the leaf (virtual) nodes, or add the profiles to spec.profiles if they should use these nodes",
        nodes.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, scheduler: Option<&str>, extra: serde_json::Value) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        });
        if let Some(s) = scheduler {
            v["spec"]["schedulerName"] = s.into();
        }
        merge(&mut v, extra);
        serde_json::from_value(v).expect("pod")
    }

    fn merge(into: &mut serde_json::Value, extra: serde_json::Value) {
        if let (Some(into), serde_json::Value::Object(extra)) = (into.as_object_mut(), extra) {
            for (k, v) in extra {
                match (into.get_mut(&k), v) {
                    (
                        Some(existing @ serde_json::Value::Object(_)),
                        v @ serde_json::Value::Object(_),
                    ) => merge(existing, v),
                    (_, v) => {
                        into.insert(k, v);
                    }
                }
            }
        }
    }

    #[test]
    fn nodes_with_pods_of_schedulers_that_do_not_tolerate_the_taint() {
        let taint = LeafTaint::default();
        let pods = vec![
            pod("web", "host-1", None, serde_json::json!({})),
            pod("batch", "host-1", Some("gpu"), serde_json::json!({})),
            pod("leafy", "leaf-1", Some("hybrid"), serde_json::json!({})),
            pod(
                "ds",
                "leaf-1",
                None,
                serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
            ),
            pod(
                "tolerant",
                "leaf-1",
                None,
                serde_json::json!({"spec": {"tolerations": [{"key": "kosmos.io/node", "operator": "Exists"}]}}),
            ),
            pod(
                "done",
                "leaf-2",
                None,
                serde_json::json!({"status": {"phase": "Succeeded"}}),
            ),
        ];
        let found = host_nodes(&pods, &["hybrid".to_string()], &taint);
        assert_eq!(
            found,
            BTreeMap::from([(
                "host-1".to_string(),
                BTreeSet::from(["default-scheduler".to_string(), "gpu".to_string()])
            )])
        );
        let text = message(&found, &taint);
        assert!(
            text.starts_with("spec.leafNodeSelector also selects node(s) host-1 (pods of default-scheduler, gpu) where schedulers the policy does not name placed pods that do not tolerate kosmos.io/node=true:NoSchedule"),
            "{text}"
        );
        assert!(text.contains("Narrow spec.leafNodeSelector"), "{text}");
    }
}
