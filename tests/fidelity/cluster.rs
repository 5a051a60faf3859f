//! Runs one case on the real control plane with one scheduler: wipes what the previous run left,
//! creates the case's cluster state, starts the scheduler (so its first list already holds the
//! whole state: no informer race, a fresh queue and rotation index), schedules the incoming pods
//! one after the other and records what a watch on the pods sees.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cases::{Case, FIDELITY_LABEL, NAMESPACES, SCHEDULER_NAME, scheduler_args};
use crate::support::process::LoggedChild;
use crate::support::scheduler::{ksched_bin, kube_scheduler_command, scheduler_command};
use crate::support::{ControlPlane, path_str};

/// Which scheduler a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    Upstream,
    Ksched,
}

/// What happened to one incoming pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodOutcome {
    /// The node it was bound to.
    pub node: Option<String>,
    /// Every distinct `PodScheduled=False` message, in the order seen.
    pub messages: Vec<String>,
    /// Every distinct non-empty `status.nominatedNodeName`, in the order seen.
    pub nominated: Vec<String>,
    /// Neither bound nor given a condition before the deadline.
    pub timed_out: bool,
}

/// What one run of a case showed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub pods: Vec<PodOutcome>,
    /// Existing pods that were deleted (preemption victims), as `namespace/name`.
    pub deleted: BTreeSet<String>,
    /// Claims the scheduler annotated with `volume.kubernetes.io/selected-node`.
    pub selected_nodes: BTreeMap<String, String>,
    /// The conditions of the case's PodGroups, as `name: type=status reason: message`.
    pub groups: Vec<String>,
    /// The places in `pods` of each `Group` step's members (identical pods: which of them took
    /// which node is not an answer, see `report::aspects`).
    pub members: Vec<std::ops::Range<usize>>,
}

/// How long a state must stay unchanged before it is the outcome: a rejected pod without a
/// nominated node will not change (no cluster event comes); a nominated one waits for its victims
/// to go or for a PreBind that never finishes (no PV controller runs).
const QUIET_REJECTED: Duration = Duration::from_millis(600);
const QUIET_NOMINATED: Duration = Duration::from_secs(5);
/// The longest a group's condition may take after its members' answers.
const GROUP_CONDITION_WAIT: Duration = Duration::from_secs(3);
/// The longest a pod may take to get any answer (scheduler start included).
const DEADLINE: Duration = Duration::from_secs(40);

pub struct Runner {
    pub cp: &'static ControlPlane,
    pub client: Client,
    /// Configurations of upstream (which reads its kubeconfig from the file) and ksched.
    upstream_config: PathBuf,
    ksched_config: PathBuf,
    runs: u32,
    /// The API server's (and so upstream kube-scheduler's) `gitVersion`.
    pub upstream_version: String,
    /// `--emulated-version` for ksched when it does not emulate the cluster's minor (a release
    /// being bumped to): the newest it does, so the report lists what the new minor changed.
    emulate: Option<String>,
    /// The API server serves `scheduling.k8s.io/v1beta1` PodGroups (see `cases::needs_pod_groups`).
    pub serves_pod_groups: bool,
}

/// Kinds a case may create, in creation order, with their API coordinates and whether they are
/// namespaced.
const KINDS: &[(&str, &str, &str, bool)] = &[
    ("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", false),
    (
        "scheduling.k8s.io/v1",
        "PriorityClass",
        "priorityclasses",
        false,
    ),
    ("storage.k8s.io/v1", "StorageClass", "storageclasses", false),
    ("storage.k8s.io/v1", "CSIDriver", "csidrivers", false),
    ("v1", "Node", "nodes", false),
    ("resource.k8s.io/v1", "DeviceClass", "deviceclasses", false),
    (
        "resource.k8s.io/v1",
        "ResourceSlice",
        "resourceslices",
        false,
    ),
    (
        "resource.k8s.io/v1",
        "ResourceClaim",
        "resourceclaims",
        true,
    ),
    ("storage.k8s.io/v1", "CSINode", "csinodes", false),
    (
        "storage.k8s.io/v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        true,
    ),
    ("v1", "PersistentVolume", "persistentvolumes", false),
    (
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    (
        "policy/v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    // Served from Kubernetes 1.37 (with GenericWorkload on): see `Runner::serves_pod_groups`.
    ("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups", true),
    ("v1", "Pod", "pods", true),
];

fn api_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    };
    ApiResource {
        group,
        version,
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

fn kind_of(obj: &Value) -> (&'static str, &'static str, &'static str, bool) {
    let kind = obj["kind"].as_str().unwrap_or_default();
    *KINDS
        .iter()
        .find(|(_, k, _, _)| *k == kind)
        .unwrap_or_else(|| panic!("a case creates an unknown kind: {obj}"))
}

impl Runner {
    /// Creates the fixed namespaces (with their `default` ServiceAccounts) and the configuration
    /// both schedulers read.
    pub async fn new(cp: &'static ControlPlane) -> Runner {
        let client = cp.client().await;
        for (name, labels) in NAMESPACES {
            let labels: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}});
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name}});
            apply(&client, "namespaces", &ns, None).await;
            apply(&client, "serviceaccounts", &sa, Some(name)).await;
        }
        let config = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {SCHEDULER_NAME}\n"
        );
        let ksched_config = cp.dir.join("fidelity-ksched.yaml");
        std::fs::write(&ksched_config, &config).expect("write the ksched config");
        // With --config, kube-scheduler ignores --kubeconfig.
        let upstream_config = cp.dir.join("fidelity-upstream.yaml");
        std::fs::write(
            &upstream_config,
            format!(
                "{config}clientConnection:\n  kubeconfig: {}\n",
                cp.kubeconfig.display()
            ),
        )
        .expect("write the upstream config");
        let info = client
            .apiserver_version()
            .await
            .expect("the API server's version");
        let minor = ksched::emulation::Minor::from_server(&info).expect("a Kubernetes version");
        let emulate = (!minor.is_supported()).then(|| {
            let newest = ksched::emulation::Minor::NEWEST;
            eprintln!(
                "fidelity: ksched does not emulate Kubernetes {minor} yet: it runs as {newest} (--emulated-version); the disagreements are what {minor} changed"
            );
            newest.to_string()
        });
        let serves_pod_groups = client
            .list_api_group_resources("scheduling.k8s.io/v1beta1")
            .await
            .is_ok_and(|list| list.resources.iter().any(|r| r.name == "podgroups"));
        Runner {
            cp,
            client,
            upstream_config,
            ksched_config,
            runs: 0,
            upstream_version: info.git_version,
            emulate,
            serves_pod_groups,
        }
    }

    /// One run of `case` with `who`.
    pub async fn run(&mut self, case: &Case, who: Scheduler) -> Observation {
        self.runs += 1;
        self.wipe().await;
        let mut objects: Vec<&Value> = case.objects.iter().collect();
        objects.sort_by_key(|o| KINDS.iter().position(|k| k.1 == o["kind"]));
        for obj in objects {
            self.create(obj).await;
        }
        let pods: Api<Pod> = Api::all(self.client.clone());
        let selector = format!("{FIDELITY_LABEL}=case");
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list case pods");
        let rv = list.metadata.resource_version.unwrap_or_default();
        let mut events = pods
            .watch(&WatchParams::default().labels(&selector), &rv)
            .await
            .expect("watch case pods")
            .boxed();

        let mut obs = Observation::default();
        // The first incoming pod exists before the scheduler starts; each next one is created
        // once the previous one has its outcome.
        let log = self.cp.dir.join(format!(
            "fidelity-{:?}-{}-{}.log",
            who, case.name, self.runs
        ));
        let mut scheduler: Option<LoggedChild> = None;
        for (i, item) in case.incoming.iter().enumerate() {
            // An `Ungate` step removes a pod's scheduling gates; its old (gated) message is not
            // an answer. A `Group` step creates a PodGroup's members, then the PodGroup (the
            // members wait for it: both schedulers see the whole group at once), and waits for
            // them all; with `podGroupFirst`, the PodGroup and then its members one by one (the
            // scheduler sees a first minCount of them, maybe more, as a controller's burst).
            let awaited: Vec<Awaited> = if item["kind"] == "Group" {
                let members = item["members"].as_array().cloned().unwrap_or_default();
                let group_first = item["podGroupFirst"] == true;
                if group_first {
                    self.create(&item["podGroup"]).await;
                }
                for member in &members {
                    self.create(member).await;
                }
                if !group_first {
                    self.create(&item["podGroup"]).await;
                }
                members.iter().map(Awaited::of).collect()
            } else if item["kind"] == "Ungate" {
                let ns = item["namespace"].as_str().unwrap_or_default();
                let name = item["name"].as_str().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                let before = api.get(name).await.expect("get the gated pod");
                api.patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"schedulingGates": null}})),
                )
                .await
                .expect("remove scheduling gates");
                let mut gated = PodOutcome::default();
                update(&mut gated, &before, &mut false);
                vec![Awaited {
                    ns: ns.to_string(),
                    name: name.to_string(),
                    stale: gated.messages.pop(),
                }]
            } else {
                self.create(item).await;
                vec![Awaited::of(item)]
            };
            let s = scheduler
                .get_or_insert_with(|| LoggedChild::spawn(self.command(who, case), log.clone()));
            let outcomes = follow(&mut events, &awaited, &mut obs, s).await;
            if item["kind"] == "Group" {
                self.wait_for_group_condition(&item["podGroup"]).await;
            }
            if outcomes.iter().any(|o| o.timed_out) {
                let logs = scheduler
                    .as_ref()
                    .map(LoggedChild::logs)
                    .unwrap_or_default();
                eprintln!(
                    "fidelity: {} ({who:?}): pod {i} got no answer within {DEADLINE:?}; log tail:\n{}",
                    case.name,
                    crate::support::wait::tail(&logs, 15)
                );
            }
            if item["kind"] == "Group" {
                obs.members
                    .push(obs.pods.len()..obs.pods.len() + outcomes.len());
            }
            obs.pods.extend(outcomes);
        }
        if let Some(mut s) = scheduler {
            s.kill();
            if std::env::var_os("KSCHED_FIDELITY_KEEP_LOGS").is_none() {
                let _ = std::fs::remove_file(&log);
            }
        }
        // Victims deleted just before the scheduler stopped still count.
        drain(&mut events, &mut obs).await;
        obs.selected_nodes = self.selected_nodes().await;
        obs.groups = self.group_conditions().await;
        obs
    }

    fn command(&self, who: Scheduler, case: &Case) -> Command {
        let mut cmd = match who {
            Scheduler::Upstream => {
                let mut cmd = kube_scheduler_command(self.cp);
                // KSCHED_FIDELITY_UPSTREAM_V=10 logs every plugin's score.
                let v = std::env::var("KSCHED_FIDELITY_UPSTREAM_V").unwrap_or_else(|_| "2".into());
                cmd.args([
                    format!("--config={}", path_str(&self.upstream_config)),
                    format!("--v={v}"),
                ]);
                cmd
            }
            Scheduler::Ksched => {
                let mut cmd = scheduler_command(&ksched_bin(), self.cp, &self.ksched_config);
                cmd.args([
                    "--bind-address=127.0.0.1",
                    &format!("--secure-port={}", crate::support::free_port()),
                ]);
                if let Some(minor) = &self.emulate {
                    cmd.arg(format!("--emulated-version={minor}"));
                }
                // KSCHED_FIDELITY_KSCHED_V=4 logs each pod's and group's cycle.
                if let Ok(v) = std::env::var("KSCHED_FIDELITY_KSCHED_V") {
                    cmd.arg(format!("--v={v}"));
                }
                cmd
            }
        };
        cmd.args(scheduler_args(case.family));
        cmd
    }

    /// Waits (a little) until the scheduler wrote `group`'s condition: it writes it beside the
    /// members' binding cycles, and the run may otherwise end before.
    async fn wait_for_group_condition(&self, group: &Value) {
        let ar = api_resource("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups");
        let ns = group["metadata"]["namespace"].as_str().unwrap_or("fid-a");
        let name = group["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        let deadline = Instant::now() + GROUP_CONDITION_WAIT;
        while Instant::now() < deadline {
            let written = api.get(name).await.ok().is_some_and(|g| {
                g.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty())
            });
            if written {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (a little) until every PodGroup with a bound member says it was scheduled: a group
    /// bound by a retry after its own step's wait writes that condition after the binding, and
    /// would otherwise be read with the Unschedulable of its first attempt. A scheduler that never
    /// writes it still disagrees, once the wait is up.
    async fn wait_for_bound_groups_to_say_so(&self, groups: &Api<DynamicObject>, lp: &ListParams) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let deadline = Instant::now() + GROUP_CONDITION_WAIT;
        while Instant::now() < deadline {
            let (Ok(groups), Ok(pods)) = (groups.list(lp).await, pods.list(lp).await) else {
                return;
            };
            let bound_groups: BTreeSet<(String, String)> = pods
                .items
                .iter()
                .filter_map(|p| {
                    let spec = p.spec.as_ref().filter(|s| s.node_name.is_some())?;
                    let group = spec.scheduling_group.as_ref()?.pod_group_name.clone()?;
                    Some((p.namespace().unwrap_or_default(), group))
                })
                .collect();
            let lagging = groups.items.iter().any(|g| {
                let says_scheduled = g.data["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "PodGroupInitiallyScheduled" && c["status"] == "True")
                });
                !says_scheduled
                    && bound_groups.contains(&(g.namespace().unwrap_or_default(), g.name_any()))
            });
            if !lagging {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The conditions of the case's PodGroups (none when the API server serves no PodGroups).
    async fn group_conditions(&self) -> Vec<String> {
        if !self.serves_pod_groups {
            return Vec::new();
        }
        let ar = api_resource("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let lp = ListParams::default().labels(&format!("{FIDELITY_LABEL}=case"));
        self.wait_for_bound_groups_to_say_so(&api, &lp).await;
        let mut out = Vec::new();
        for g in api.list(&lp).await.expect("list pod groups").items {
            let conditions = g.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for c in conditions {
                out.push(
                    format!(
                        "{}: {}={} {}: {}",
                        g.name_any(),
                        c["type"],
                        c["status"],
                        c["reason"],
                        c["message"]
                    )
                    .replace('"', ""),
                );
            }
        }
        out.sort();
        out
    }

    /// Creates `obj`, then sets its `status` (pod start times, PDB budgets, bound claims) through
    /// the status subresource, as the components that own it would.
    async fn create(&self, obj: &Value) {
        let (api_version, kind, plural, namespaced) = kind_of(obj);
        let ns = namespaced.then(|| obj["metadata"]["namespace"].as_str().unwrap_or("fid-a"));
        let created = apply(&self.client, plural, obj, ns).await;
        // An API server without TopologyAwareWorkloadScheduling drops the constraint silently:
        // both schedulers would agree on a case that tests nothing.
        let constraints = "schedulingConstraints";
        assert!(
            obj["spec"][constraints].is_null() || !created.data["spec"][constraints].is_null(),
            "the API server dropped {kind} {}'s spec.{constraints} (TopologyAwareWorkloadScheduling off in kube-apiserver?)",
            created.name_any()
        );
        let status = &obj["status"];
        if kind != "Node" && status.is_object() {
            let ar = api_resource(api_version, kind, plural);
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                None => Api::all_with(self.client.clone(), &ar),
            };
            api.patch_status(
                &created.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("status of {kind} {}: {e}", created.name_any()));
        }
    }

    /// Deletes every object a case created (finalizers removed: no controller would) and waits
    /// until they are gone.
    async fn wipe(&self) {
        let selector = format!("{FIDELITY_LABEL}=case");
        let lp = ListParams::default().labels(&selector);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        for (api_version, kind, plural, namespaced) in KINDS.iter().rev() {
            if *kind == "PodGroup" && !self.serves_pod_groups {
                continue;
            }
            let ar = api_resource(api_version, kind, plural);
            let all: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let items = all.list(&lp).await.expect("list case objects").items;
                if items.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{kind}s of the last case not gone within 60s"
                );
                for o in items {
                    let api: Api<DynamicObject> = match (namespaced, o.namespace()) {
                        (true, Some(ns)) => Api::namespaced_with(self.client.clone(), &ns, &ar),
                        _ => all.clone(),
                    };
                    let name = o.name_any();
                    if !o.finalizers().is_empty() {
                        let _ = api
                            .patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                            )
                            .await;
                    }
                    if o.metadata.deletion_timestamp.is_none() {
                        let _ = api.delete(&name, &dp).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    async fn selected_nodes(&self) -> BTreeMap<String, String> {
        let ar = api_resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let lp = ListParams::default().labels(&format!("{FIDELITY_LABEL}=case"));
        let mut out = BTreeMap::new();
        for c in api.list(&lp).await.expect("list claims").items {
            if let Some(n) = c.annotations().get("volume.kubernetes.io/selected-node") {
                out.insert(
                    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                    n.clone(),
                );
            }
        }
        let ar = api_resource("resource.k8s.io/v1", "ResourceClaim", "resourceclaims");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        for c in api.list(&lp).await.expect("list resource claims").items {
            let results = &c.data["status"]["allocation"]["devices"]["results"];
            if let Some(results) = results.as_array() {
                let devices: Vec<String> = results
                    .iter()
                    .map(|r| format!("{}/{}", r["pool"], r["device"]).replace('"', ""))
                    .collect();
                out.insert(
                    format!(
                        "resourceclaim {}/{}",
                        c.namespace().unwrap_or_default(),
                        c.name_any()
                    ),
                    devices.join(","),
                );
            }
        }
        out
    }
}

/// Creates `obj` (JSON with apiVersion and kind) as plural `plural`; an existing object is fine.
async fn apply(client: &Client, plural: &str, obj: &Value, ns: Option<&str>) -> DynamicObject {
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
    let kind = obj["kind"].as_str().unwrap_or_default();
    let ar = api_resource(api_version, kind, plural);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let mut body = obj.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    if kind == "Node" {
        body["status"] = obj["status"].clone();
    }
    let dynobj: DynamicObject = serde_json::from_value(body).expect("object literal");
    match api.create(&PostParams::default(), &dynobj).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .get(&dynobj.name_any())
            .await
            .expect("get existing object"),
        Err(e) => panic!("create {kind} {}: {e}\n{obj}", dynobj.name_any()),
    }
}

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<Pod>>>;

/// A pod a step waits for, and a `PodScheduled=False` message of it that is not an answer (the
/// gated one of an `Ungate` step).
struct Awaited {
    ns: String,
    name: String,
    stale: Option<String>,
}

impl Awaited {
    fn of(pod: &Value) -> Awaited {
        let meta = &pod["metadata"];
        Awaited {
            ns: meta["namespace"].as_str().unwrap_or_default().to_string(),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            stale: None,
        }
    }
}

/// Follows the `awaited` pods until each is bound or its answer held still since the last change
/// of any of them (see the QUIET constants), or the deadline.
async fn follow(
    events: &mut Events,
    awaited: &[Awaited],
    obs: &mut Observation,
    scheduler: &mut LoggedChild,
) -> Vec<PodOutcome> {
    let mut outs = vec![PodOutcome::default(); awaited.len()];
    let mut rejected = vec![false; awaited.len()];
    let start = Instant::now();
    let mut last_change = Instant::now();
    loop {
        // The quiet the slowest pod still needs; `None` while one has no answer at all.
        let mut quiet = Some(Duration::ZERO);
        for (out, rejected) in outs.iter().zip(&rejected) {
            let needs = if out.node.is_some() {
                Some(Duration::ZERO)
            } else if !out.nominated.is_empty() {
                Some(QUIET_NOMINATED)
            } else if *rejected {
                Some(QUIET_REJECTED)
            } else {
                None
            };
            quiet = quiet.zip(needs).map(|(a, b)| a.max(b));
        }
        if quiet == Some(Duration::ZERO) {
            return outs;
        }
        let wait = match quiet {
            Some(q) => q.saturating_sub(last_change.elapsed()),
            None => DEADLINE.saturating_sub(start.elapsed()),
        };
        if wait.is_zero() {
            for (out, rejected) in outs.iter_mut().zip(&rejected) {
                out.timed_out = out.node.is_none() && out.nominated.is_empty() && !rejected;
            }
            return outs;
        }
        if let Ok(Some(status)) = scheduler.child.try_wait() {
            panic!(
                "the scheduler exited ({status}):\n{}",
                crate::support::wait::tail(&scheduler.logs(), 20)
            );
        }
        let ev =
            match tokio::time::timeout(wait.min(Duration::from_secs(1)), events.try_next()).await {
                Err(_) => continue,
                Ok(Ok(Some(ev))) => ev,
                Ok(Ok(None)) | Ok(Err(_)) => panic!("the pod watch ended"),
            };
        let Some(pod) = record(ev, obs) else { continue };
        let Some(i) = awaited.iter().position(|a| {
            pod.namespace().as_deref() == Some(a.ns.as_str()) && pod.name_any() == a.name
        }) else {
            continue;
        };
        let out = &mut outs[i];
        let before = out.messages.len();
        if update(out, &pod, &mut rejected[i]) {
            last_change = Instant::now();
        }
        if awaited[i].stale.is_some()
            && out.messages.len() > before
            && out.messages.last() == awaited[i].stale.as_ref()
        {
            // The gated message again, from before the scheduler acted.
            out.messages.pop();
            rejected[i] = false;
        }
    }
}

/// Records a deletion of an existing pod; returns the pod of an add or update.
fn record(ev: WatchEvent<Pod>, obs: &mut Observation) -> Option<Pod> {
    match ev {
        WatchEvent::Added(p) | WatchEvent::Modified(p) => Some(p),
        WatchEvent::Deleted(p) => {
            obs.deleted.insert(format!(
                "{}/{}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            ));
            None
        }
        WatchEvent::Bookmark(_) => None,
        WatchEvent::Error(e) => panic!("pod watch: {e:?}"),
    }
}

/// Folds `pod`'s state into `out`; true when something changed.
fn update(out: &mut PodOutcome, pod: &Pod, rejected: &mut bool) -> bool {
    let mut changed = false;
    if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        out.node = Some(n);
        changed = true;
    }
    let status = pod.status.as_ref();
    if let Some(n) = status.and_then(|s| s.nominated_node_name.clone())
        && !n.is_empty()
        && out.nominated.last() != Some(&n)
    {
        out.nominated.push(n);
        changed = true;
    }
    let cond = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if let Some(c) = cond
        && c.status == "False"
    {
        *rejected = true;
        let msg = c.message.clone().unwrap_or_default();
        if out.messages.last() != Some(&msg) {
            out.messages.push(msg);
            changed = true;
        }
    }
    changed
}

/// Takes the events already delivered (deletions that raced the end of the run).
async fn drain(events: &mut Events, obs: &mut Observation) {
    while let Ok(Ok(Some(ev))) =
        tokio::time::timeout(Duration::from_millis(150), events.try_next()).await
    {
        record(ev, obs);
    }
}
