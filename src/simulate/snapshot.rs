//! The cluster state a simulation runs on: what `kubectl get nodes,pods,pv,pvc,storageclasses,
//! csinodes,pdb,priorityclasses,podgroups,resourceclaims,resourceslices,deviceclasses -A -o yaml` prints (a `List`, multi-document YAML, or
//! JSON), or the same kinds read from a live cluster with get/list calls only.
//!
//! Every object must say what it is (`apiVersion` and `kind`, as kubectl prints them); a kind or
//! an apiVersion ksched does not read is an error naming the item, never silently skipped, so a
//! snapshot cannot quietly lose the objects a plugin would have needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::POD_GROUP_LABEL;
use crate::framework::listers::{
    IN_TREE, Informer, Listers, ObjectStore, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES,
    POD_GROUPS, PRIORITY_CLASSES, RESOURCE_CLAIMS,
};

/// The kubectl command that prints a complete snapshot (the kinds the default plugins read).
pub const KUBECTL_GET: &str = "kubectl get nodes,pods,pv,pvc,storageclasses,csinodes,pdb,priorityclasses,podgroups,resourceclaims,resourceslices,deviceclasses -A -o yaml";

/// A snapshot that cannot be used: every problem found, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SnapshotError {
    pub problems: Vec<String>,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("\n"))
    }
}

impl SnapshotError {
    fn one(problem: impl Into<String>) -> SnapshotError {
        SnapshotError {
            problems: vec![problem.into()],
        }
    }
}

/// A saved snapshot: a `v1` `List`, fields in the order kubectl prints them.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotList {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Value,
    pub items: Vec<Value>,
}

/// Nodes, pods and the other kinds plugins read.
#[derive(Debug)]
pub struct ClusterState {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// Everything else, in the stores plugins read (and the PriorityClasses that give a pod
    /// without `spec.priority`, in a hand-written snapshot, its class's value).
    pub listers: Listers,
    /// The kinds a snapshot may hold besides nodes and pods (those with a snapshot name), in a
    /// saved snapshot's order: the in-tree ones, and those of out-of-tree plugins.
    pub kinds: Vec<Informer>,
}

impl Default for ClusterState {
    fn default() -> Self {
        ClusterState::with_kinds(IN_TREE.to_vec())
    }
}

/// The kinds every snapshot holds: nodes and pods.
const NODES_AND_PODS: [(&str, &str); 2] = [("Node", "nodes"), ("Pod", "pods")];

/// Decodes `item` as `K` after checking its apiVersion; errors name the field path.
fn typed<K>(api_version: &str, item: Value) -> Result<K, String>
where
    K: kube::Resource<DynamicType = ()> + DeserializeOwned,
{
    let want = K::api_version(&());
    if api_version != want {
        return Err(format!(
            "apiVersion {api_version:?} of kind {} is not supported: ksched reads {want:?} (what kubectl prints for this cluster version)",
            K::kind(&())
        ));
    }
    serde_path_to_error::deserialize(item).map_err(|e| match e.path().to_string() {
        p if p == "." => e.inner().to_string(),
        p => format!("{p}: {}", e.inner()),
    })
}

/// `namespace/name` or `name` of an item, for messages.
fn item_name(item: &Value) -> String {
    let meta = item.get("metadata");
    let get = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    match (get("namespace"), get("name")) {
        (Some(ns), Some(n)) if !ns.is_empty() => format!("{ns}/{n}"),
        (_, Some(n)) => n.to_string(),
        _ => "<no metadata.name>".to_string(),
    }
}

/// Budget for one snapshot: proportional to its size (the default stops at 250,000 YAML nodes,
/// a few hundred pods), still refusing alias bombs and runaway nesting.
fn yaml_options(len: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = len.max(budget.max_events);
    budget.max_nodes = len.max(budget.max_nodes);
    budget.max_total_scalar_bytes = len.max(budget.max_total_scalar_bytes);
    budget.max_documents = len.max(budget.max_documents);
    budget.max_reader_input_bytes = None;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // YAML 1.2 booleans only: objects are read untyped first, and a node named `n` or `off` must
    // stay a string (kubectl prints only true/false as booleans).
    options.strict_booleans = true;
    options
}

impl ClusterState {
    /// An empty state whose snapshots may hold `kinds` (besides nodes and pods).
    pub fn with_kinds(kinds: Vec<Informer>) -> ClusterState {
        ClusterState {
            nodes: Vec::new(),
            pods: Vec::new(),
            listers: Listers::default(),
            kinds: kinds
                .into_iter()
                .filter(|k| k.snapshot_name().is_some())
                .collect(),
        }
    }

    /// The snapshot kinds besides nodes and pods: `(kind, kubectl's name)`.
    fn snapshot_kinds(&self) -> impl Iterator<Item = (Informer, &'static str)> + '_ {
        self.kinds
            .iter()
            .filter_map(|k| Some((*k, k.snapshot_name()?)))
    }

    /// kubectl's name of `kind`, for "add ... to the kubectl get" hints.
    fn resource_of(&self, kind: &str) -> &'static str {
        NODES_AND_PODS
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, r)| *r)
            .or_else(|| {
                self.snapshot_kinds()
                    .find(|(k, _)| k.object_kind() == kind)
                    .map(|(_, r)| r)
            })
            .unwrap_or("")
    }

    fn supported_kinds(&self) -> String {
        let names: Vec<String> = NODES_AND_PODS
            .iter()
            .map(|(k, _)| k.to_string())
            .chain(self.snapshot_kinds().map(|(k, _)| k.object_kind()))
            .collect();
        names.join(", ")
    }

    /// Reads a snapshot: a `List` (or `<Kind>List`), multi-document YAML of objects, or the same as
    /// JSON. `source` names the input in messages.
    pub fn parse(source: &str, text: &str) -> Result<ClusterState, SnapshotError> {
        ClusterState::parse_with(source, text, IN_TREE.to_vec())
    }

    /// [`ClusterState::parse`], for a snapshot that may also hold `kinds` (an out-of-tree
    /// plugin's).
    pub fn parse_with(
        source: &str,
        text: &str,
        kinds: Vec<Informer>,
    ) -> Result<ClusterState, SnapshotError> {
        let docs: Vec<Value> = if text.trim_start().starts_with('{') {
            serde_json::from_str::<Value>(text)
                .map(|v| vec![v])
                .map_err(|e| SnapshotError::one(format!("{source}: not valid JSON: {e}")))?
        } else {
            serde_saphyr::from_multiple_with_options(text, yaml_options(text.len()))
                .map_err(|e| SnapshotError::one(format!("{source}: not valid YAML: {e}")))?
        };
        let mut state = ClusterState::with_kinds(kinds);
        let mut problems = Vec::new();
        let mut objects = 0usize;
        for (d, doc) in docs.into_iter().enumerate() {
            let at = format!("{source}: document {}", d + 1);
            if doc.is_null() {
                continue;
            }
            let Some(map) = doc.as_object() else {
                problems.push(format!(
                    "{at}: not a Kubernetes object or List (a {})",
                    json_type(&doc)
                ));
                continue;
            };
            let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
            let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let list_of = kind.strip_suffix("List");
            match (list_of, map.get("items")) {
                (Some(inner), Some(Value::Array(items))) => {
                    for (i, item) in items.iter().enumerate() {
                        let at = format!("{at}, item {}", i + 1);
                        // `PodList` items from the API carry no kind: it is the list's.
                        let (default_kind, default_version) = match inner {
                            "" => ("", ""),
                            k => (k, api_version),
                        };
                        objects += 1;
                        if let Err(p) = state.add(item.clone(), default_kind, default_version, &at)
                        {
                            problems.push(p);
                        }
                    }
                }
                (Some(_), _) => problems.push(format!("{at}: {kind} without an items list")),
                (None, _) => {
                    objects += 1;
                    if let Err(p) = state.add(doc, "", "", &at) {
                        problems.push(p);
                    }
                }
            }
        }
        if objects == 0 && problems.is_empty() {
            problems.push(format!(
                "{source}: no objects: a snapshot is what `{KUBECTL_GET}` prints"
            ));
        }
        if !problems.is_empty() {
            return Err(SnapshotError { problems });
        }
        Ok(state)
    }

    /// Adds one object; `kind`/`api_version` apply when the item names none (items of a typed list).
    fn add(
        &mut self,
        item: Value,
        default_kind: &str,
        default_version: &str,
        at: &str,
    ) -> Result<(), String> {
        if !item.is_object() {
            return Err(format!(
                "{at}: not a Kubernetes object (a {})",
                json_type(&item)
            ));
        }
        let name = item_name(&item);
        let field = |k: &str, default: &str| {
            item.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_string()
        };
        let (kind, api_version) = (
            field("kind", default_kind),
            field("apiVersion", default_version),
        );
        if kind.is_empty() {
            return Err(format!(
                "{at} ({name}): no kind: every object needs apiVersion and kind, as `kubectl get -o yaml` prints them"
            ));
        }
        if api_version.is_empty() {
            return Err(format!("{at} ({kind} {name}): no apiVersion"));
        }
        let err = |e: String| format!("{at} ({kind} {name}): {e}");
        let v = api_version.as_str();
        match kind.as_str() {
            "Node" => self.nodes.push(typed(v, item).map_err(err)?),
            "Pod" => self.pods.push(typed(v, item).map_err(err)?),
            other => {
                // Two groups may name a kind alike (PodGroup: scheduling.x-k8s.io and, from 1.37,
                // scheduling.k8s.io): the one of this apiVersion, else the first by that name.
                let named = || {
                    self.snapshot_kinds()
                        .filter(|(k, _)| k.object_kind() == other)
                };
                let Some((of, _)) = named()
                    .find(|(k, _)| k.api_version() == v)
                    .or_else(|| named().next())
                else {
                    return Err(err(format!(
                        "kind {other:?} is not part of a snapshot: expected one of {}",
                        self.supported_kinds()
                    )));
                };
                of.decode(&self.listers, v, item).map_err(err)?;
            }
        }
        Ok(())
    }

    /// How many objects of each kind the snapshot holds (kinds with none are left out).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let all = [
            ("Node".to_string(), self.nodes.len()),
            ("Pod".to_string(), self.pods.len()),
        ]
        .into_iter()
        .chain(
            self.snapshot_kinds()
                .map(|(k, _)| (k.object_kind(), k.len(&self.listers))),
        );
        all.filter(|(_, n)| *n > 0).collect()
    }

    /// The snapshot as one `v1` `List` (what `--save-snapshot` writes): kinds in a fixed order,
    /// objects sorted by namespace and name, so two saves of the same state are identical.
    pub fn to_list(&self) -> Result<SnapshotList, serde_json::Error> {
        let mut items: Vec<Value> = Vec::new();
        let mut sorted = |mut objs: Vec<Value>| {
            objs.sort_by_key(item_name);
            items.extend(objs);
        };
        sorted(to_values(self.nodes.iter())?);
        sorted(to_values(self.pods.iter())?);
        for (kind, _) in self.snapshot_kinds() {
            sorted(kind.encode(&self.listers)?);
        }
        Ok(SnapshotList {
            api_version: "v1",
            kind: "List",
            metadata: json!({}),
            items,
        })
    }

    /// Kinds the profile reads that the snapshot is missing although its objects refer to them (a
    /// pod using a claim, but no PersistentVolumeClaim at all): the snapshot was taken with too few
    /// kinds, and simulating would report pods unschedulable for a reason the cluster does not have.
    pub fn check_complete(&self, needs: &BTreeSet<Informer>) -> Result<(), SnapshotError> {
        let mut problems = Vec::new();
        let mut missing = |kind: &str, why: String| {
            problems.push(format!(
                "the snapshot has no {kind}, but {why}: take it with `{kind_cmd}` in the kubectl get (`{KUBECTL_GET}`)",
                kind_cmd = self.resource_of(kind),
            ));
        };
        if self.nodes.is_empty() {
            missing("Node", "every simulation places pods on nodes".into());
        }
        let l = &self.listers;
        let reads = |kind: Informer| needs.contains(&kind);
        let active = self.pods.iter().filter(|p| !is_finished(p));
        let mut claim_user = None;
        let mut group_member = None;
        let mut class_user = None;
        let mut device_user = None;
        for pod in active {
            let spec = pod.spec.as_ref();
            let uses_claim = spec.and_then(|s| s.volumes.as_ref()).is_some_and(|v| {
                v.iter()
                    .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
            });
            let uses_device = spec
                .and_then(|s| s.resource_claims.as_ref())
                .is_some_and(|c| !c.is_empty());
            if uses_device && device_user.is_none() {
                device_user = Some(pod_key(pod));
            }
            if uses_claim && claim_user.is_none() {
                claim_user = Some(pod_key(pod));
            }
            let in_group = pod
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(POD_GROUP_LABEL));
            if in_group && group_member.is_none() {
                group_member = Some(pod_key(pod));
            }
            let needs_class = spec.is_some_and(|s| {
                s.priority.is_none()
                    && s.priority_class_name
                        .as_deref()
                        .is_some_and(|c| !c.is_empty())
            });
            if needs_class && class_user.is_none() {
                class_user = Some(pod_key(pod));
            }
        }
        if reads(&PERSISTENT_VOLUME_CLAIMS)
            && l.store(&PERSISTENT_VOLUME_CLAIMS).is_empty()
            && let Some(pod) = &claim_user
        {
            missing("PersistentVolumeClaim", format!("pod {pod} uses a claim"));
        }
        let claims = l.store(&PERSISTENT_VOLUME_CLAIMS).list();
        if reads(&PERSISTENT_VOLUMES)
            && l.store(&PERSISTENT_VOLUMES).is_empty()
            && let Some(c) = claims.iter().find(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_some_and(|v| !v.is_empty())
            })
        {
            missing(
                "PersistentVolume",
                format!("claim {} is bound to one", ObjectStore::key_of(&**c)),
            );
        }
        if reads(&RESOURCE_CLAIMS)
            && l.store(&RESOURCE_CLAIMS).is_empty()
            && let Some(pod) = &device_user
        {
            missing("ResourceClaim", format!("pod {pod} uses a resource claim"));
        }
        if reads(&POD_GROUPS)
            && l.store(&POD_GROUPS).is_empty()
            && let Some(pod) = &group_member
        {
            missing(
                "PodGroup",
                format!("pod {pod} carries the {POD_GROUP_LABEL} label"),
            );
        }
        if l.store(&PRIORITY_CLASSES).is_empty()
            && let Some(pod) = &class_user
        {
            missing(
                "PriorityClass",
                format!("pod {pod} names a priorityClassName and has no spec.priority"),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SnapshotError { problems })
        }
    }

    /// Sets `spec.priority` of pods that have none (hand-written snapshots: the API server's
    /// admission does it in a cluster) from their PriorityClass, or the global default class.
    /// Returns the pods whose class does not exist.
    pub fn resolve_priorities(&mut self) -> Vec<String> {
        let classes = self.listers.store(&PRIORITY_CLASSES).list();
        let by_name: BTreeMap<&str, i32> = classes
            .iter()
            .map(|c| {
                (
                    c.metadata.name.as_deref().unwrap_or(""),
                    c.value.unwrap_or(0),
                )
            })
            .collect();
        let global_default = classes
            .iter()
            .find(|c| c.global_default == Some(true))
            .map(|c| c.value.unwrap_or(0));
        let mut unknown = Vec::new();
        for pod in &mut self.pods {
            let key = pod_key(pod);
            let Some(spec) = pod.spec.as_mut() else {
                continue;
            };
            if spec.priority.is_some() {
                continue;
            }
            spec.priority = match spec.priority_class_name.as_deref() {
                Some(c) if !c.is_empty() => match by_name.get(c) {
                    Some(v) => Some(*v),
                    None => {
                        unknown.push(format!("{key} (priorityClassName {c:?})"));
                        None
                    }
                },
                _ => global_default,
            };
        }
        unknown
    }
}

fn to_values<'a, K: serde::Serialize + 'a>(
    objs: impl Iterator<Item = &'a K>,
) -> Result<Vec<Value>, serde_json::Error> {
    objs.map(serde_json::to_value).collect()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    crate::scheduler::informers::pod_key(pod)
}

/// Succeeded or Failed: the scheduler does not watch it (it holds nothing).
pub fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\nstatus:\n  allocatable:\n    cpu: \"4\"\n";
    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: i\n";

    fn parse(text: &str) -> Result<ClusterState, SnapshotError> {
        ClusterState::parse("snap.yaml", text)
    }

    fn error(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn list_documents_and_typed_lists() {
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n- {}\n",
            NODE.replace('\n', "\n  "),
            POD.replace('\n', "\n  ")
        );
        let s = parse(&list).expect("list");
        assert_eq!((s.nodes.len(), s.pods.len()), (1, 1));
        let s = parse(&format!("{NODE}---\n{POD}")).expect("documents");
        assert_eq!((s.nodes.len(), s.pods.len()), (1, 1));
        // The API's own lists leave the kind out of their items.
        let s = parse(r#"{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a","namespace":"x"},"spec":{"containers":[]}}]}"#).expect("PodList");
        assert_eq!(s.pods.len(), 1);
        let pg = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: x}\nspec: {minMember: 2}\n";
        let s = parse(pg).expect("podgroup");
        assert!(s.listers.store(&POD_GROUPS).get("x", "g").is_some());
    }

    #[test]
    fn garbage_unknown_kinds_and_versions_are_named() {
        assert!(error(": : :\n  - [").contains("snap.yaml: not valid YAML"));
        assert!(error("{not json").contains("not valid JSON"));
        assert!(error("just a string\n").contains("not a Kubernetes object or List"));
        assert!(error("").contains("no objects"));
        let e =
            error("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: x}\n");
        assert!(
            e.contains("document 1 (Deployment x/web): kind \"Deployment\" is not part of a snapshot: expected one of Node, Pod"),
            "{e}"
        );
        let e = error(
            "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: b, namespace: x}\n",
        );
        assert!(
            e.contains("apiVersion \"policy/v1beta1\" of kind PodDisruptionBudget is not supported: ksched reads \"policy/v1\""),
            "{e}"
        );
        let e = error("metadata: {name: n1}\n");
        assert!(e.contains("(n1): no kind"), "{e}");
        // `n` is a name, not YAML 1.1's false.
        let e = error("apiVersion: v1\nmetadata: {name: n}\n");
        assert!(e.contains("(n): no kind"), "{e}");
        let e = error("kind: Node\nmetadata: {name: n1}\n");
        assert!(e.contains("(Node n1): no apiVersion"), "{e}");
        // A wrong field names its path; every bad item is reported, not just the first.
        let e = error(
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}, spec: {unschedulable: maybe}}\n- {apiVersion: v1, kind: Pod, metadata: {name: b}, spec: {containers: 3}}\n",
        );
        assert!(
            e.contains("item 1 (Node a): spec.unschedulable: invalid type"),
            "{e}"
        );
        assert!(
            e.contains("item 2 (Pod b): spec.containers: invalid type"),
            "{e}"
        );
        assert!(error("apiVersion: v1\nkind: List\n").contains("List without an items list"));
    }

    #[test]
    fn save_round_trips_in_a_fixed_order() {
        let pvc = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\nspec: {volumeName: pv1}\n";
        let text = format!("{POD}---\n{pvc}---\n{NODE}");
        let s = parse(&text).expect("parse");
        let saved = serde_saphyr::to_string(&s.to_list().expect("list")).expect("yaml");
        let again = parse(&saved).expect("saved snapshot parses");
        assert_eq!(again.counts(), s.counts());
        let kinds: Vec<&str> = saved
            .lines()
            .filter_map(|l| {
                l.trim_start()
                    .trim_start_matches("- ")
                    .strip_prefix("kind: ")
            })
            .collect();
        assert_eq!(kinds, ["List", "Node", "Pod", "PersistentVolumeClaim"]);
        assert_eq!(
            serde_saphyr::to_string(&again.to_list().expect("list")).expect("yaml"),
            saved
        );
    }

    #[test]
    fn missing_kinds_that_objects_refer_to() {
        let kinds: [Informer; 3] = [&PERSISTENT_VOLUME_CLAIMS, &PERSISTENT_VOLUMES, &POD_GROUPS];
        let needs = BTreeSet::from(kinds);
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d, labels: {scheduling.x-k8s.io/pod-group: g}}\nspec:\n  priorityClassName: high\n  containers: []\n  volumes: [{name: v, persistentVolumeClaim: {claimName: data}}]\n";
        let e = parse(&format!("{NODE}---\n{pod}"))
            .expect("parse")
            .check_complete(&needs)
            .expect_err("incomplete");
        let text = e.to_string();
        assert!(
            text.contains("the snapshot has no PersistentVolumeClaim, but pod d/p uses a claim: take it with `pvc`"),
            "{text}"
        );
        assert!(text.contains("no PodGroup, but pod d/p carries"), "{text}");
        assert!(
            text.contains("no PriorityClass, but pod d/p names"),
            "{text}"
        );
        assert_eq!(e.problems.len(), 3);
        // Without the plugins that read them, claims and groups do not matter.
        let e = parse(&format!("{NODE}---\n{pod}"))
            .expect("parse")
            .check_complete(&BTreeSet::new())
            .expect_err("priority class still missing");
        assert_eq!(e.problems.len(), 1);
        let e = parse(POD)
            .expect("parse")
            .check_complete(&needs)
            .expect_err("no nodes");
        assert!(e.to_string().contains("the snapshot has no Node"));
    }

    #[test]
    fn dynamic_resources_kinds() {
        let kinds: [Informer; 2] = [&RESOURCE_CLAIMS, &crate::framework::listers::DEVICE_CLASSES];
        let needs = BTreeSet::from(kinds);
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d}\nspec:\n  containers: []\n  resourceClaims: [{name: gpu, resourceClaimName: gpu}]\n";
        let claim = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: gpu, namespace: d}\nspec:\n  devices:\n    requests: [{name: r, exactly: {deviceClassName: gpu}}]\n";
        let class =
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec: {}\n";
        let slice = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: n1-gpu}\nspec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: g0}]}\n";
        let e = parse(&format!("{NODE}---\n{pod}"))
            .expect("parse")
            .check_complete(&needs)
            .expect_err("no claims");
        assert!(
            e.to_string().contains(
                "no ResourceClaim, but pod d/p uses a resource claim: take it with `resourceclaims`"
            ),
            "{e}"
        );
        // A claim whose class is missing may be the cluster's own state (the scheduler then says
        // the class does not exist), as a claim naming a missing StorageClass.
        parse(&format!("{NODE}---\n{pod}---\n{claim}"))
            .expect("parse")
            .check_complete(&needs)
            .expect("no class needed");
        let s = parse(&format!(
            "{NODE}---\n{pod}---\n{claim}---\n{class}---\n{slice}"
        ))
        .expect("parse");
        s.check_complete(&needs).expect("complete");
        assert_eq!(s.counts()["ResourceSlice"], 1);
        let saved = serde_saphyr::to_string(&s.to_list().expect("list")).expect("yaml");
        assert_eq!(parse(&saved).expect("saved").counts(), s.counts());
    }

    #[test]
    fn priorities_from_classes() {
        let text = format!(
            "{POD}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: q, namespace: default}}\nspec: {{priorityClassName: high, containers: []}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: r, namespace: default}}\nspec: {{priorityClassName: nope, containers: []}}\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: high}}\nvalue: 1000\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: dflt}}\nvalue: 7\nglobalDefault: true\n"
        );
        let mut s = parse(&text).expect("parse");
        let unknown = s.resolve_priorities();
        let prio: Vec<Option<i32>> = s
            .pods
            .iter()
            .map(|p| p.spec.as_ref().and_then(|s| s.priority))
            .collect();
        assert_eq!(prio, [Some(7), Some(1000), None]);
        assert_eq!(unknown, ["default/r (priorityClassName \"nope\")"]);
    }
}
