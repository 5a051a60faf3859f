//! The operator on the real control plane (etcd, kube-apiserver, kube-controller-manager, kwok),
//! with upstream kube-scheduler as the cluster's default scheduler so the operator's Deployments get
//! pods bound to kwok nodes and become Ready. The operator runs in-process with the permissions of
//! its ServiceAccount from manifests/install (by impersonation), so those manifests are proven
//! sufficient.

#[path = "support/argocd_lua.rs"]
mod argocd_lua;
mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use ksched::api::{LeafClusterPolicy, SchedulerProfile};
use ksched::framework::registry::Registry;
use ksched::operator::{EmbeddedError, EmbeddedSchedulers};
use support::operator::{InProcessOperator, OPERATOR_SA};
use support::process::killed_with_parent;
use support::scheduler::kube_scheduler_command;
use support::wait::{poll, tail};
use support::{Components, ControlPlane, control_plane, fixtures, path_str, repo_root};

const NS: &str = "ksched-system";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// What the operator asked of the embedded-scheduler hook.
#[derive(Default)]
struct RecordingEmbedded {
    calls: Mutex<Vec<(String, String, Option<String>)>>,
}

#[async_trait]
impl EmbeddedSchedulers for RecordingEmbedded {
    async fn ensure(&self, profile: &str, config_yaml: &str) -> Result<(), EmbeddedError> {
        self.calls.lock().expect("lock").push((
            "ensure".into(),
            profile.into(),
            Some(config_yaml.into()),
        ));
        Ok(())
    }
    async fn stop(&self, profile: &str) {
        self.calls
            .lock()
            .expect("lock")
            .push(("stop".into(), profile.into(), None));
    }
}

impl RecordingEmbedded {
    fn calls_for(&self, profile: &str) -> Vec<(String, Option<String>)> {
        self.calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, p, _)| p == profile)
            .map(|(op, _, cfg)| (op.clone(), cfg.clone()))
            .collect()
    }
}

/// Starts a process from a thread that lives as long as the test binary (PR_SET_PDEATHSIG then
/// kills it when the binary exits), logging to `<control plane dir>/<name>.log`; returns its pid.
fn spawn_kept(name: &str, mut cmd: Command) -> u32 {
    let log_path = cp().dir.join(format!("{name}.log"));
    let (tx, rx) = std::sync::mpsc::channel();
    let name = name.to_string();
    std::thread::spawn(move || {
        let log = std::fs::File::create(&log_path).expect("log file");
        let log2 = log.try_clone().expect("log file");
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        killed_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        tx.send(child.id()).expect("send pid");
        let _keep = child;
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("pid")
}

/// Upstream kube-scheduler as the cluster's default scheduler.
fn kube_scheduler(name: &str) -> u32 {
    let mut cmd = kube_scheduler_command(cp());
    cmd.arg("--v=1");
    spawn_kept(name, cmd)
}

/// The scheduler under test, as the rendered Deployment runs it (`scheduler --config FILE -v=2`).
fn ksched_scheduler(name: &str, config: &std::path::Path) -> u32 {
    let mut cmd = Command::new(support::scheduler::ksched_bin());
    cmd.args([
        "scheduler".to_string(),
        format!("--config={}", path_str(config)),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", support::free_port()),
        "-v=2".into(),
    ]);
    spawn_kept(name, cmd)
}

/// The shared environment: operator RBAC applied, kwok host nodes, the default scheduler, and the
/// operator itself on its own runtime thread, impersonating its ServiceAccount.
fn env() -> &'static Arc<RecordingEmbedded> {
    static ENV: OnceLock<(Arc<RecordingEmbedded>, InProcessOperator)> = OnceLock::new();
    &ENV.get_or_init(|| {
        let cp = cp();
        let install = repo_root().join("manifests/install");
        for file in ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"] {
            let (ok, _, err) = cp.kubectl_run(&[
                "apply",
                "--server-side",
                "-f",
                path_str(&install.join(file)),
            ]);
            assert!(ok, "applying {file}: {err}");
        }
        for i in 0..3 {
            let node = fixtures::kwok_node(&format!("op-host-{i}"), "8", "16Gi", &[]);
            let (ok, _, err) = cp.kubectl_stdin(&["apply", "-f", "-"], &node);
            assert!(ok, "node: {err}");
        }
        kube_scheduler("kube-scheduler-default");

        let recording = Arc::new(RecordingEmbedded::default());
        let operator = InProcessOperator::start(cp, NS, OPERATOR_SA, recording.clone());
        (recording, operator)
    })
    .0
}

async fn client() -> Client {
    env();
    cp().client().await
}

/// Polls `f` until it returns `Some` (generous deadline: this is not a timing test).
async fn eventually<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    poll(what, Duration::from_secs(180), diagnostics, f).await
}

/// What the operator and the cluster looked like, for a failure message.
fn diagnostics() -> String {
    let tail = |file: &str| {
        let text = std::fs::read_to_string(cp().dir.join(file)).unwrap_or_default();
        tail(&text, 40)
    };
    let (_, objects, _) = cp().kubectl_run(&["get", "sp,lcp,deploy,rs,pods", "-A", "-o", "wide"]);
    let (_, events, _) = cp().kubectl_run(&["get", "events", "-n", NS]);
    format!(
        "--- objects\n{objects}\n--- events in {NS}\n{events}\n--- operator.log\n{}\n--- kube-scheduler-default.log\n{}",
        tail("operator.log"),
        tail("kube-scheduler-default.log"),
    ) + &format!(
        "\n--- ksched-scheduler-op-plain.log\n{}",
        tail("ksched-scheduler-op-plain.log")
    )
}

/// `kubectl get` output as rows of (column, value), cut at the header's column offsets (a
/// column may be empty, as LEADER is before an election).
fn table(out: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts: Vec<(usize, String)> = Vec::new();
    let mut prev_space = true;
    for (i, ch) in header.char_indices() {
        if !ch.is_whitespace() && prev_space {
            let name: String = header[i..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .into();
            starts.push((i, name));
        }
        prev_space = ch.is_whitespace();
    }
    lines
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(k, (start, name))| {
                    let end = starts
                        .get(k + 1)
                        .map_or(line.len(), |(s, _)| *s)
                        .min(line.len());
                    let value = line.get((*start).min(line.len())..end).unwrap_or_default();
                    (name.clone(), value.trim().to_string())
                })
                .collect()
        })
        .collect()
}

fn kubectl_apply(yaml: &str) {
    cp().apply(yaml);
}

async fn profile(c: &Client, name: &str) -> SchedulerProfile {
    Api::<SchedulerProfile>::all(c.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get profile {name}: {e}"))
}

fn cond<'a>(
    p: &'a SchedulerProfile,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
}

fn is_true(p: &SchedulerProfile, t: &str) -> bool {
    cond(p, t).is_some_and(|c| c.status == "True")
}

fn observed(p: &SchedulerProfile) -> bool {
    p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
}

/// Polls profile `name` until `accept` takes it.
async fn wait_profile(
    c: &Client,
    name: &str,
    what: &str,
    accept: impl Fn(&SchedulerProfile) -> bool,
) -> SchedulerProfile {
    eventually(&format!("profile {name}: {what}"), async || {
        let p = profile(c, name).await;
        accept(&p).then_some(p)
    })
    .await
}

async fn wait_ready(c: &Client, name: &str) -> SchedulerProfile {
    wait_profile(c, name, "Ready", |p| observed(p) && is_true(p, "Ready")).await
}

/// Applies profile `name` with `spec` (YAML lines under `spec:`) and waits until it is Ready.
async fn apply_ready(c: &Client, name: &str, spec: &str) -> SchedulerProfile {
    kubectl_apply(&profile_yaml(name, spec));
    wait_ready(c, name).await
}

/// Creates a busybox pod `name` for `scheduler` (the default scheduler when `None`).
async fn create_busybox(pods: &Api<Pod>, name: &str, scheduler: Option<&str>) {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(scheduler) = scheduler {
        spec["schedulerName"] = json!(scheduler);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// Waits until the operator's last call to the embedded-scheduler hook for `profile` is `op`.
async fn wait_last_call(rec: &RecordingEmbedded, profile: &str, what: &str, op: &str) {
    eventually(what, async || {
        rec.calls_for(profile)
            .last()
            .filter(|(last, _)| last == op)
            .map(|_| ())
    })
    .await
}

async fn get_opt<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"))
}

/// Every object the operator renders for profile `name` by kind, with its owner references
/// (`None` where it does not exist): the namespaced ones, then the ClusterRole and
/// ClusterRoleBinding.
async fn rendered_objects(
    c: &Client,
    name: &str,
) -> Vec<(&'static str, Option<Vec<OwnerReference>>)> {
    let obj = obj_name(name);
    let svc = format!("{obj}-metrics");
    let cluster = format!("ksched:{name}");
    vec![
        ("ConfigMap", owners::<ConfigMap>(c, NS, &obj).await),
        (
            "ServiceAccount",
            owners::<ServiceAccount>(c, NS, &obj).await,
        ),
        ("Role", owners::<Role>(c, NS, &obj).await),
        ("RoleBinding", owners::<RoleBinding>(c, NS, &obj).await),
        (
            "auth RoleBinding",
            owners::<RoleBinding>(c, "kube-system", &obj).await,
        ),
        ("Lease", owners::<Lease>(c, NS, &obj).await),
        ("Deployment", owners::<Deployment>(c, NS, &obj).await),
        ("Service", owners::<Service>(c, NS, &svc).await),
        (
            "ClusterRole",
            cluster_owners::<ClusterRole>(c, &cluster).await,
        ),
        (
            "ClusterRoleBinding",
            cluster_owners::<ClusterRoleBinding>(c, &cluster).await,
        ),
    ]
}

/// The owner references of the `K` named `name` in `ns`, if it exists.
async fn owners<K>(c: &Client, ns: &str, name: &str) -> Option<Vec<OwnerReference>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let o = get_opt(&Api::<K>::namespaced(c.clone(), ns), name).await?;
    Some(o.owner_references().to_vec())
}

/// The owner references of the cluster-scoped `K` named `name`, if it exists.
async fn cluster_owners<K>(c: &Client, name: &str) -> Option<Vec<OwnerReference>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let o = get_opt(&Api::<K>::all(c.clone()), name).await?;
    Some(o.owner_references().to_vec())
}

fn profile_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// Saves `obj` as tests/fixtures/argocd/<file>.json when KSCHED_UPDATE_FIXTURES=1.
fn save_fixture<T: serde::Serialize>(file: &str, obj: &T) {
    if std::env::var("KSCHED_UPDATE_FIXTURES").as_deref() == Ok("1") {
        let mut v = serde_json::to_value(obj).expect("json");
        if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("managedFields");
        }
        let path = repo_root()
            .join("tests/fixtures/argocd")
            .join(format!("{file}.json"));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&v).expect("json") + "\n",
        )
        .expect("write fixture");
    }
}

fn argo_health<T: serde::Serialize>(obj: &T) -> (String, String) {
    let v = serde_json::to_value(obj).expect("json");
    argocd_lua::health(&repo_root().join("manifests/argocd/health.lua"), &v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_renders_every_object_becomes_ready_and_elects_a_leader() {
    let c = client().await;
    let name = "op-plain";
    // DynamicResources off: the in-tree registry lists it at preScore, which upstream
    // kube-scheduler (started from this ConfigMap below) rejects.
    let spec = "  logLevel: 3\n  plugins:\n    multiPoint:\n      disabled:\n      - name: DynamicResources\n";
    let p = apply_ready(&c, name, spec).await;
    let uid = p.uid().expect("uid");
    let obj = format!("ksched-{name}");
    let owned_by_profile = |refs: &[OwnerReference]| {
        refs.iter()
            .any(|o| o.uid == uid && o.kind == "SchedulerProfile" && o.controller == Some(true))
    };

    // Every object, namespaced ones owned by the profile.
    for (kind, owners) in rendered_objects(&c, name).await {
        let owners = owners.unwrap_or_else(|| panic!("{kind} missing"));
        match kind {
            "ClusterRole" => assert!(owners.is_empty(), "{kind}"),
            "ClusterRoleBinding" => {}
            _ => assert!(owned_by_profile(&owners), "{kind}"),
        }
    }
    let cm = get_opt(&Api::<ConfigMap>::namespaced(c.clone(), NS), &obj)
        .await
        .expect("ConfigMap");
    let config_yaml = cm
        .data
        .clone()
        .unwrap_or_default()
        .get("config.yaml")
        .cloned()
        .expect("config.yaml");
    let loaded = ksched::config::load(config_yaml.as_bytes(), &Registry::in_tree())
        .unwrap_or_else(|e| panic!("rendered config does not validate:\n{e}"));
    assert_eq!(loaded.config.profiles[0].scheduler_name, name);
    assert_eq!(loaded.config.leader_election.resource_name, obj);
    assert_eq!(loaded.config.leader_election.resource_namespace, NS);
    let dep = get_opt(&Api::<Deployment>::namespaced(c.clone(), NS), &obj)
        .await
        .expect("Deployment");
    let crb = get_opt(
        &Api::<ClusterRoleBinding>::all(c.clone()),
        &format!("ksched:{name}"),
    )
    .await
    .expect("CRB");
    assert_eq!(crb.role_ref.name, format!("ksched:{name}"));
    let hash = p
        .status
        .as_ref()
        .and_then(|s| s.config_hash.clone())
        .expect("configHash");
    let annotation = dep
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("ksched.io/config-hash").cloned());
    assert_eq!(annotation.as_deref(), Some(hash.as_str()));
    assert!(is_true(&p, "ConfigValid"));
    assert!(cond(&p, "Reconciling").is_none() && cond(&p, "Stalled").is_none());

    // `kubectl wait` returns on the Ready condition.
    let (ok, out, err) = cp().kubectl_run(&[
        "wait",
        "--for=condition=Ready",
        &format!("sp/{name}"),
        "--timeout=120s",
    ]);
    assert!(ok, "kubectl wait: {out}{err}");

    // `ksched scheduler` reads the rendered ConfigMap as a kubelet would mount it (only the
    // kubeconfig path is set, as a pod would get it from its ServiceAccount) and takes the
    // profile's own Lease.
    let dir = tempfile::tempdir().expect("tmp").keep();
    let file = dir.join("config.yaml");
    let with_kubeconfig = config_yaml.replacen(
        "kubeconfig: \"\"",
        &format!("kubeconfig: {}", path_str(&cp().kubeconfig)),
        1,
    );
    assert_ne!(
        with_kubeconfig, config_yaml,
        "the rendered config has clientConnection.kubeconfig"
    );
    std::fs::write(&file, with_kubeconfig).expect("write config");
    ksched_scheduler("ksched-scheduler-op-plain", &file);
    let leader = wait_profile(&c, name, "LeaderElected", |p| {
        is_true(p, "LeaderElected") && p.status.as_ref().is_some_and(|s| s.leader.is_some())
    })
    .await
    .status
    .and_then(|s| s.leader)
    .expect("leader");
    // A pod naming the profile is scheduled by it.
    let ns = cp().namespace(&c, "op-plain").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    create_busybox(&pods, "uses-profile", Some(name)).await;
    eventually("pod bound by the profile's scheduler", async || {
        let p = pods.get("uses-profile").await.ok()?;
        p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty())
    })
    .await;

    // kubectl get sp prints real values (PENDING back to 0 once the pod is bound).
    wait_profile(&c, name, "pendingPods = 0", |p| {
        p.status.as_ref().and_then(|s| s.pending_pods) == Some(0)
    })
    .await;
    let (ok, out, err) = cp().kubectl_run(&["get", "sp", name]);
    assert!(ok, "{err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "MODE", "READY", "LEADER", "PENDING", "STATUS", "AGE"
        ],
        "{out}"
    );
    let rows = table(&out);
    let row = |col: &str| rows[0].get(col).cloned().unwrap_or_default();
    assert_eq!(row("NAME"), name, "{out}");
    assert_eq!(row("MODE"), "Deployment", "{out}");
    assert_eq!(row("READY"), "1/1", "{out}");
    assert_eq!(row("LEADER"), leader, "{out}");
    assert_eq!(row("PENDING"), "0", "{out}");
    assert_eq!(row("STATUS"), "Running", "{out}");

    // Argo CD sees it Healthy.
    let p = profile(&c, name).await;
    save_fixture("schedulerprofile-healthy", &p);
    assert_eq!(argo_health(&p).0, "Healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_are_counted_and_children_edited_by_hand_are_put_back() {
    let c = client().await;
    let name = "op-repair";
    apply_ready(&c, name, "  replicas: 1\n").await;
    let obj = format!("ksched-{name}");

    // No scheduler runs for this profile (kwok runs no containers): its pods stay Pending.
    let ns = cp().namespace(&c, "op-repair").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    for i in 0..2 {
        create_busybox(&pods, &format!("waits-{i}"), Some(name)).await;
    }
    wait_profile(&c, name, "pendingPods = 2", |p| {
        p.status.as_ref().and_then(|s| s.pending_pods) == Some(2)
    })
    .await;
    let (ok, out, _) = cp().kubectl_run(&["get", "sp", name]);
    assert!(ok);
    let rows = table(&out);
    assert_eq!(
        rows[0].get("PENDING").map(String::as_str),
        Some("2"),
        "{out}"
    );
    assert_eq!(rows[0].get("LEADER").map(String::as_str), Some(""), "{out}");

    // Deleted by hand: back.
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    let before = cms.get(&obj).await.expect("cm");
    cms.delete(&obj, &DeleteParams::default())
        .await
        .expect("delete cm");
    eventually("ConfigMap recreated", async || {
        cms.get_opt(&obj_name(name))
            .await
            .ok()
            .flatten()
            .filter(|c| c.uid() != before.uid())
            .map(|_| ())
    })
    .await;
    let again = cms.get(&obj).await.expect("cm");
    assert_eq!(again.data, before.data);
    let crs: Api<ClusterRole> = Api::all(c.clone());
    crs.delete(&format!("ksched:{name}"), &DeleteParams::default())
        .await
        .expect("delete cr");
    eventually("ClusterRole recreated", async || {
        crs.get_opt(&format!("ksched:{name}"))
            .await
            .ok()
            .flatten()
            .map(|_| ())
    })
    .await;
    // Edited by hand: put back.
    let deps: Api<Deployment> = Api::namespaced(c.clone(), NS);
    deps.patch(
        &obj,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale");
    eventually("replicas put back to 1", async || {
        (deps.get(&obj_name(name)).await.ok()?.spec?.replicas == Some(1)).then_some(())
    })
    .await;
}

fn obj_name(profile: &str) -> String {
    format!("ksched-{profile}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_change_rolls_out_and_an_invalid_change_leaves_everything_as_it_was() {
    let c = client().await;
    let name = "op-change";
    let p = apply_ready(&c, name, "  podMaxBackoffSeconds: 10\n").await;
    let old_hash = p.status.and_then(|s| s.config_hash).expect("hash");
    let deps: Api<Deployment> = Api::namespaced(c.clone(), NS);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    let template_hash = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("ksched.io/config-hash").cloned())
    };

    let p = apply_ready(&c, name, "  podMaxBackoffSeconds: 20\n").await;
    let new_hash = p.status.and_then(|s| s.config_hash).expect("hash");
    assert_ne!(new_hash, old_hash);
    let d = deps.get(&obj_name(name)).await.expect("deployment");
    assert_eq!(template_hash(&d).as_deref(), Some(new_hash.as_str()));
    let cm = cms.get(&obj_name(name)).await.expect("cm");
    assert!(
        cm.data
            .unwrap_or_default()
            .get("config.yaml")
            .is_some_and(|y| y.contains("podMaxBackoffSeconds: 20"))
    );

    // Invalid (the CRD schema accepts any plugin name; the validator does not).
    let cm_before = cms.get(&obj_name(name)).await.expect("cm");
    let d_before = deps.get(&obj_name(name)).await.expect("deployment");
    kubectl_apply(&profile_yaml(
        name,
        "  podMaxBackoffSeconds: 30\n  plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFitt\n",
    ));
    let p = wait_profile(&c, name, "ConfigValid=False", |p| {
        observed(p) && cond(p, "ConfigValid").is_some_and(|c| c.status == "False")
    })
    .await;
    assert!(is_true(&p, "Stalled"));
    assert!(!is_true(&p, "Ready"));
    let stalled = cond(&p, "Stalled").expect("Stalled");
    assert!(
        stalled.message.contains("spec.plugins.score.enabled[0]")
            && stalled.message.contains("NodeResourcesFitt"),
        "{}",
        stalled.message
    );
    assert_eq!(
        p.status
            .as_ref()
            .and_then(|s| s.config_hash.clone())
            .as_deref(),
        Some(new_hash.as_str())
    );
    // A Warning event says so.
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    eventually("InvalidConfiguration event", async || {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("InvalidConfiguration")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
    })
    .await;
    // Nothing changed: same objects, byte for byte (and not even rewritten).
    let cm_after = cms.get(&obj_name(name)).await.expect("cm");
    let d_after = deps.get(&obj_name(name)).await.expect("deployment");
    assert_eq!(
        serde_json::to_string(&cm_after.data).ok(),
        serde_json::to_string(&cm_before.data).ok()
    );
    assert_eq!(
        serde_json::to_string(&d_after.spec).ok(),
        serde_json::to_string(&d_before.spec).ok()
    );
    assert_eq!(cm_after.resource_version(), cm_before.resource_version());
    assert_eq!(d_after.metadata.generation, d_before.metadata.generation);

    save_fixture("schedulerprofile-degraded", &p);
    let (status, message) = argo_health(&p);
    assert_eq!(status, "Degraded", "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_that_cannot_roll_out_is_progressing() {
    let c = client().await;
    let name = "op-progressing";
    kubectl_apply(&profile_yaml(
        name,
        "  nodeSelector:\n    no-such-label: \"true\"\n",
    ));
    let p = wait_profile(&c, name, "Reconciling=True", |p| {
        observed(p) && is_true(p, "Reconciling")
    })
    .await;
    assert!(!is_true(&p, "Ready"));
    assert!(cond(&p, "Stalled").is_none());
    assert_eq!(
        p.status.as_ref().and_then(|s| s.ready.clone()).as_deref(),
        Some("0/1")
    );
    save_fixture("schedulerprofile-progressing", &p);
    assert_eq!(argo_health(&p).0, "Progressing");
    // Not observed yet is Progressing too.
    let mut unobserved = p.clone();
    unobserved.metadata.generation = Some(p.metadata.generation.unwrap_or(1) + 1);
    assert_eq!(argo_health(&unobserved).0, "Progressing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_profile_removes_namespaced_children_by_gc_and_cluster_ones_by_finalizer() {
    let c = client().await;
    let name = "op-delete";
    let p = apply_ready(&c, name, "  replicas: 1\n").await;
    assert!(p.finalizers().iter().any(|f| f == "ksched.io/cleanup"));
    let (ok, _, err) = cp().kubectl_run(&["delete", "sp", name, "--wait=true", "--timeout=120s"]);
    assert!(ok, "{err}");
    eventually("every child gone", async || {
        let objects = rendered_objects(&c, name).await;
        objects
            .iter()
            .all(|(_, owners)| owners.is_none())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_profile_runs_through_the_hook_and_stops_on_suspend_and_delete() {
    let c = client().await;
    let rec = env().clone();
    let name = "op-embedded";
    let p = apply_ready(&c, name, "  mode: Embedded\n").await;
    assert_eq!(
        cond(&p, "Ready").map(|c| c.reason.as_str()),
        Some("Running")
    );
    let calls = rec.calls_for(name);
    let (op, cfg) = calls
        .iter()
        .find(|(op, _)| op == "ensure")
        .expect("ensure called");
    assert_eq!(op, "ensure");
    let cfg = cfg.clone().unwrap_or_default();
    ksched::config::load(cfg.as_bytes(), &Registry::in_tree()).expect("valid config");
    assert!(cfg.contains(&format!("schedulerName: {name}")));
    // ConfigMap and RBAC, but no Deployment.
    assert!(owners::<ConfigMap>(&c, NS, &obj_name(name)).await.is_some());
    assert!(
        owners::<Deployment>(&c, NS, &obj_name(name))
            .await
            .is_none()
    );

    kubectl_apply(&profile_yaml(name, "  mode: Embedded\n  suspend: true\n"));
    wait_last_call(&rec, name, "stop on suspend", "stop").await;
    let p = wait_ready(&c, name).await;
    assert_eq!(
        cond(&p, "Ready").map(|c| c.reason.as_str()),
        Some("Suspended")
    );
    kubectl_apply(&profile_yaml(name, "  mode: Embedded\n"));
    wait_last_call(&rec, name, "ensure again", "ensure").await;
    let (ok, _, err) = cp().kubectl_run(&["delete", "sp", name, "--wait=true", "--timeout=120s"]);
    assert!(ok, "{err}");
    assert_eq!(
        rec.calls_for(name).last().map(|(op, _)| op.as_str()),
        Some("stop")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_scales_to_zero_and_keeps_the_config() {
    let c = client().await;
    let name = "op-suspend";
    let p = apply_ready(&c, name, "  replicas: 1\n").await;
    let hash = p.status.and_then(|s| s.config_hash);
    kubectl_apply(&profile_yaml(name, "  suspend: true\n"));
    let p = wait_profile(&c, name, "suspended", |p| {
        observed(p)
            && cond(p, "Ready").is_some_and(|c| c.reason == "Suspended" && c.status == "True")
    })
    .await;
    assert_eq!(p.status.as_ref().and_then(|s| s.config_hash.clone()), hash);
    let d = Api::<Deployment>::namespaced(c.clone(), NS)
        .get(&obj_name(name))
        .await
        .expect("deployment");
    assert_eq!(d.spec.and_then(|s| s.replicas), Some(0));
    assert!(owners::<ConfigMap>(&c, NS, &obj_name(name)).await.is_some());
}

fn node_taints(n: &Node) -> Vec<(String, Option<String>, String)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect()
}

async fn taints_of(nodes: &Api<Node>, name: &str) -> Vec<(String, Option<String>, String)> {
    node_taints(&nodes.get(name).await.expect("node"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_policy_taints_exactly_the_matching_nodes_and_only_its_own_taint() {
    let c = client().await;
    let nodes: Api<Node> = Api::all(c.clone());
    for (n, leaf) in [
        ("op-leaf-a", true),
        ("op-leaf-b", true),
        ("op-leaf-c", false),
    ] {
        let labels: &[(&str, &str)] = if leaf {
            &[("ksched-e2e/leaf", "yes")]
        } else {
            &[]
        };
        kubectl_apply(&fixtures::kwok_node(n, "8", "16Gi", labels));
    }
    // Someone else's taint on a leaf node.
    nodes.patch("op-leaf-a", &PatchParams::default(), &Patch::Merge(json!({
        "spec": {"taints": [{"key": "other.io/keep", "value": "yes", "effect": "NoSchedule"}]}
    }))).await.expect("foreign taint");
    let ours = (
        "ksched-e2e/leaf".to_string(),
        Some("true".to_string()),
        "NoSchedule".to_string(),
    );
    let foreign = (
        "other.io/keep".to_string(),
        Some("yes".to_string()),
        "NoSchedule".to_string(),
    );
    // A profile of its own: other tests here run in parallel and compare their profiles' rendered
    // ConfigMaps, which a policy naming them all ("*") would re-render meanwhile.
    kubectl_apply(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: op-leaves\nspec:\n  leafNodeSelector:\n    matchLabels:\n      ksched-e2e/leaf: \"yes\"\n  taint:\n    key: ksched-e2e/leaf\n    value: \"true\"\n    effect: NoSchedule\n  profiles: [\"op-leaves-only\"]\n",
    );
    let has = |t: &Vec<(String, Option<String>, String)>, x: &(String, Option<String>, String)| {
        t.contains(x)
    };
    eventually("leaf nodes tainted", async || {
        (has(&taints_of(&nodes, "op-leaf-a").await, &ours)
            && has(&taints_of(&nodes, "op-leaf-b").await, &ours))
        .then_some(())
    })
    .await;
    assert!(
        has(&taints_of(&nodes, "op-leaf-a").await, &foreign),
        "foreign taint kept"
    );
    assert!(
        !has(&taints_of(&nodes, "op-leaf-c").await, &ours),
        "non-matching node untouched"
    );
    assert!(!has(&taints_of(&nodes, "op-host-0").await, &ours));

    let policies: Api<LeafClusterPolicy> = Api::all(c.clone());
    let lcp = eventually("policy status", async || {
        let p = policies.get("op-leaves").await.ok()?;
        let s = p.status.clone()?;
        (s.leaf_nodes == Some(2)
            && s.tainted_nodes == Some(2)
            && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await;
    assert!(lcp.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }));
    save_fixture("leafclusterpolicy-healthy", &lcp);
    assert_eq!(argo_health(&lcp).0, "Healthy");

    // A node labelled later gets the taint; one unlabelled loses it.
    nodes
        .patch(
            "op-leaf-c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"ksched-e2e/leaf": "yes"}}})),
        )
        .await
        .expect("label");
    nodes
        .patch(
            "op-leaf-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"ksched-e2e/leaf": null}}})),
        )
        .await
        .expect("unlabel");
    eventually("c tainted, b untainted", async || {
        (has(&taints_of(&nodes, "op-leaf-c").await, &ours)
            && !has(&taints_of(&nodes, "op-leaf-b").await, &ours))
        .then_some(())
    })
    .await;
    // Someone adds a taint meanwhile: it stays.
    let mut a = nodes.get("op-leaf-a").await.expect("node");
    if let Some(spec) = a.spec.as_mut() {
        let mut t = spec.taints.clone().unwrap_or_default();
        t.push(k8s_openapi::api::core::v1::Taint {
            key: "late.io/x".into(),
            value: None,
            effect: "PreferNoSchedule".into(),
            time_added: None,
        });
        spec.taints = Some(t);
    }
    nodes
        .replace("op-leaf-a", &PostParams::default(), &a)
        .await
        .expect("add taint");

    // Delete: only our taint goes.
    let (ok, _, err) = cp().kubectl_run(&[
        "delete",
        "lcp",
        "op-leaves",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(ok, "{err}");
    for n in ["op-leaf-a", "op-leaf-b", "op-leaf-c"] {
        assert!(
            !has(&taints_of(&nodes, n).await, &ours),
            "{n} still has the policy taint"
        );
    }
    let a = taints_of(&nodes, "op-leaf-a").await;
    assert!(has(&a, &foreign), "{a:?}");
    assert!(
        has(&a, &("late.io/x".into(), None, "PreferNoSchedule".into())),
        "{a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_with_an_invalid_selector_is_stalled() {
    let c = client().await;
    kubectl_apply(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: op-bad-selector\nspec:\n  leafNodeSelector:\n    matchExpressions:\n    - key: kosmos.io/node\n      operator: Near\n      values: [\"true\"]\n  profiles: [\"x\"]\n",
    );
    let policies: Api<LeafClusterPolicy> = Api::all(c.clone());
    let p = eventually("Stalled", async || {
        let p = policies.get("op-bad-selector").await.ok()?;
        p.status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True")
            .then_some(p)
    })
    .await;
    save_fixture("leafclusterpolicy-degraded", &p);
    assert_eq!(argo_health(&p).0, "Degraded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelled_scheduler_name_gets_one_warning() {
    let c = client().await;
    let ns = cp().namespace(&c, "op-typo").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    create_busybox(&pods, "typo", Some("defualt-scheduler")).await;
    let events: Api<Event> = Api::namespaced(c.clone(), &ns);
    let warnings = || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some("UnknownSchedulerName")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("typo")
                })
                .collect::<Vec<_>>()
        }
    };
    let first = eventually("UnknownSchedulerName event", || async {
        warnings().await.into_iter().next()
    })
    .await;
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    let note = first.note.clone().unwrap_or_default();
    assert!(
        note.contains("defualt-scheduler") && note.contains("default-scheduler"),
        "{note}"
    );
    // The pod changes (the watch sees it again): still one warning.
    pods.patch(
        "typo",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .expect("label");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = warnings().await;
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(all[0].series.is_none(), "published once, not as a series");
    // A correctly named pod gets none.
    create_busybox(&pods, "fine", None).await;
}
