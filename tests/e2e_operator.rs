//! The operator on the real control plane (etcd, kube-apiserver, kube-controller-manager, kwok),
//! with upstream kube-scheduler as the cluster's default scheduler so the operator's Deployments get
//! pods bound to kwok nodes and become Ready. The operator runs in-process with the permissions of
//! its ServiceAccount from manifests/install (by impersonation), so those manifests are proven
//! sufficient.

#[path = "support/argocd_lua.rs"]
mod argocd_lua;
#[path = "e2e_operator/security.rs"]
mod security;
#[path = "e2e_operator/status_truth.rs"]
mod status_truth;
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
use ksched::operator::in_process::InProcessSchedulers;
use ksched::operator::{EmbeddedError, EmbeddedSchedulers};
use support::fixtures::save_argocd_fixture as save_fixture;
use support::operator::{InProcessOperator, OPERATOR_SA};
use support::process::killed_with_parent;
use support::scheduler::{SchedulerProcess, kube_scheduler_command};
use support::wait::{poll, tail};
use support::{Components, ControlPlane, control_plane, fixtures, path_str, repo_root};

const NS: &str = "ksched-system";
/// A scheduler name the operator is told another scheduler serves (`--known-scheduler`).
const KNOWN_ELSEWHERE: &str = "op-known-elsewhere";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// What the operator asked of the embedded-scheduler hook, passed on to the real in-process
/// schedulers (so an Embedded profile really schedules and takes its Lease).
#[derive(Default)]
struct RecordingEmbedded {
    calls: Mutex<Vec<(String, String, Option<String>)>>,
    inner: OnceLock<InProcessSchedulers>,
}

#[async_trait]
impl EmbeddedSchedulers for RecordingEmbedded {
    async fn ensure(
        &self,
        profile: &str,
        config_yaml: &str,
        emulation: &ksched::emulation::Emulation,
    ) -> Result<(), EmbeddedError> {
        self.calls.lock().expect("lock").push((
            "ensure".into(),
            profile.into(),
            Some(config_yaml.into()),
        ));
        self.inner().ensure(profile, config_yaml, emulation).await
    }
    async fn stop(&self, profile: &str) {
        self.calls
            .lock()
            .expect("lock")
            .push(("stop".into(), profile.into(), None));
        self.inner().stop(profile).await
    }
    async fn identity(&self, profile: &str) -> Option<String> {
        self.inner().identity(profile).await
    }
}

impl RecordingEmbedded {
    fn inner(&self) -> &InProcessSchedulers {
        self.inner.get().expect("in-process schedulers set up")
    }

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
        // The operator's RBAC and the admission policy that narrows it: every test runs under both.
        for file in [
            "namespace.yaml",
            "serviceaccount.yaml",
            "rbac.yaml",
            "admission-policy.yaml",
        ] {
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
        let recording_for_operator = recording.clone();
        let operator = InProcessOperator::start_with(
            cp,
            NS,
            OPERATOR_SA,
            recording.clone(),
            move |client, opts| {
                let registry = Arc::new(Registry::in_tree());
                let in_process = InProcessSchedulers::new(client.clone(), registry, "e2e");
                if recording_for_operator.inner.set(in_process).is_err() {
                    panic!("in-process schedulers set twice");
                }
                opts.retry_initial = Duration::from_secs(1);
                opts.retry_max = Duration::from_secs(60);
                opts.known_schedulers = vec![KNOWN_ELSEWHERE.into()];
            },
        );
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

fn reason_of(p: &SchedulerProfile, t: &str) -> Option<String> {
    cond(p, t).map(|c| c.reason.clone())
}

/// Waits until Deployment-mode profile `name` is rendered and rolled out: every replica ready,
/// which on kwok nodes runs no scheduler, so nothing holds the Lease (Ready=False, NoLeader).
async fn wait_rolled_out(c: &Client, name: &str) -> SchedulerProfile {
    wait_profile(c, name, "rolled out, waiting for a leader", |p| {
        observed(p)
            && is_true(p, "ConfigValid")
            && reason_of(p, "Ready").as_deref() == Some("NoLeader")
    })
    .await
}

/// The rendered `config.yaml` of profile `name`, once it exists.
async fn rendered_config(c: &Client, name: &str) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    eventually(&format!("ConfigMap of {name}"), async || {
        cms.get_opt(&obj_name(name))
            .await
            .ok()
            .flatten()?
            .data?
            .get("config.yaml")
            .cloned()
    })
    .await
}

/// A replica of profile `name`'s scheduler: `ksched scheduler` with the rendered ConfigMap, as the
/// Deployment's pod would run it (kwok runs no containers). Stops when dropped.
async fn replica(c: &Client, name: &str) -> SchedulerProcess {
    let config = rendered_config(c, name).await;
    SchedulerProcess::start(cp(), &format!("replica-{name}"), &config)
}

/// Applies Deployment-mode profile `name`, runs a replica of its scheduler and waits until the
/// profile is Ready (the replica holds its Lease).
async fn apply_running(c: &Client, name: &str, spec: &str) -> (SchedulerProfile, SchedulerProcess) {
    kubectl_apply(&profile_yaml(name, spec));
    wait_rolled_out(c, name).await;
    let r = replica(c, name).await;
    (wait_ready(c, name).await, r)
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
    let cluster = ksched::operator::cluster_object_name(name);
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
        ("Service", owners::<Service>(c, NS, &obj).await),
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
fn argo_health<T: serde::Serialize>(obj: &T) -> (String, String) {
    let v = serde_json::to_value(obj).expect("json");
    argocd_lua::health(&repo_root().join("manifests/argocd/health.lua"), &v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_renders_every_object_becomes_ready_and_elects_a_leader() {
    let c = client().await;
    let name = "op-plain";
    // The user's own plugin set reaches the rendered objects: with DynamicResources disabled the
    // profile's ClusterRole grants nothing in resource.k8s.io (checked below).
    let spec = "  logLevel: 3\n  plugins:\n    multiPoint:\n      disabled:\n      - name: DynamicResources\n";
    kubectl_apply(&profile_yaml(name, spec));
    // Rolled out, but kwok runs no container: no replica holds the Lease, so not Ready.
    let p = wait_rolled_out(&c, name).await;
    assert!(!is_true(&p, "Ready"));
    assert!(is_true(&p, "Reconciling") && cond(&p, "Stalled").is_none());
    let uid = p.uid().expect("uid");
    let obj = ksched::operator::object_name(name);
    let owned_by_profile = |refs: &[OwnerReference]| {
        refs.iter()
            .any(|o| o.uid == uid && o.kind == "SchedulerProfile" && o.controller == Some(true))
    };

    // Every object, cluster-scoped ones too, owned by the profile (no finalizer).
    assert!(p.finalizers().is_empty(), "{:?}", p.finalizers());
    for (kind, owners) in rendered_objects(&c, name).await {
        let owners = owners.unwrap_or_else(|| panic!("{kind} missing"));
        assert!(owned_by_profile(&owners), "{kind}");
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
        &ksched::operator::cluster_object_name(name),
    )
    .await
    .expect("CRB");
    assert_eq!(
        crb.role_ref.name,
        ksched::operator::cluster_object_name(name)
    );
    let role = get_opt(
        &Api::<ClusterRole>::all(c.clone()),
        &ksched::operator::cluster_object_name(name),
    )
    .await
    .expect("ClusterRole");
    let dra_groups: Vec<_> = role
        .rules
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            r.api_groups
                .as_ref()
                .is_some_and(|g| g.iter().any(|g| g == "resource.k8s.io"))
        })
        // NodeResourcesFit reads DeviceClasses (an extended resource a class provides is left
        // to DynamicResources, as upstream's DRAExtendedResource): reading them is its.
        .filter(|r| {
            r.resources.as_deref() != Some(&["deviceclasses".to_string()][..])
                || r.verbs
                    .iter()
                    .any(|v| !["get", "list", "watch"].contains(&v.as_str()))
        })
        .collect();
    assert!(
        dra_groups.is_empty(),
        "DynamicResources is disabled, yet the ClusterRole grants {dra_groups:?}"
    );
    let hash = p
        .status
        .as_ref()
        .and_then(|s| s.config_hash.clone())
        .expect("configHash");
    let annotation = dep
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("ksched.io/config-hash").cloned());
    assert_eq!(annotation.as_deref(), Some(hash.as_str()));
    assert!(is_true(&p, "ConfigValid"));

    // `ksched scheduler` reads the rendered ConfigMap as a kubelet would mount it (only the
    // kubeconfig path is set, as a pod would get it from its ServiceAccount) and takes the
    // profile's own Lease: a replica holds it, the profile is Ready.
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
    let replica_pid = ksched_scheduler("ksched-scheduler-op-plain", &file);
    let leader = wait_profile(&c, name, "LeaderElected", |p| {
        is_true(p, "LeaderElected") && p.status.as_ref().is_some_and(|s| s.leader.is_some())
    })
    .await
    .status
    .and_then(|s| s.leader)
    .expect("leader");
    // `kubectl wait` returns on the Ready condition.
    let (ok, out, err) = cp().kubectl_run(&[
        "wait",
        "--for=condition=Ready",
        &format!("sp/{name}"),
        "--timeout=120s",
    ]);
    assert!(ok, "kubectl wait: {out}{err}");
    let p = profile(&c, name).await;
    assert!(cond(&p, "Reconciling").is_none() && cond(&p, "Stalled").is_none());
    assert!(
        cond(&p, "Ready").is_some_and(|r| r.message.contains(&leader)),
        "{:?}",
        cond(&p, "Ready")
    );
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

    // The replica dies without releasing the Lease: once the Lease expires, not Ready.
    // SAFETY: kill(2) on the pid of a child this test binary started.
    assert_eq!(unsafe { libc::kill(replica_pid as i32, libc::SIGKILL) }, 0);
    let p = wait_profile(&c, name, "not Ready once the Lease expired", |p| {
        reason_of(p, "Ready").as_deref() == Some("NoLeader")
    })
    .await;
    assert!(!is_true(&p, "Ready"));
    let message = cond(&p, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("last held by {leader}")),
        "{message}"
    );
    assert_eq!(
        reason_of(&p, "LeaderElected").as_deref(),
        Some("LeaseExpired")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_are_counted_and_children_edited_by_hand_are_put_back() {
    let c = client().await;
    let name = "op-repair";
    kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
    wait_rolled_out(&c, name).await;
    let obj = ksched::operator::object_name(name);

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
    crs.delete(
        &ksched::operator::cluster_object_name(name),
        &DeleteParams::default(),
    )
    .await
    .expect("delete cr");
    eventually("ClusterRole recreated", async || {
        crs.get_opt(&ksched::operator::cluster_object_name(name))
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
        (deps.get(&obj_name(name)).await.ok()?.spec.replicas == Some(1)).then_some(())
    })
    .await;
}

fn obj_name(profile: &str) -> String {
    ksched::operator::object_name(profile)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_change_rolls_out_and_an_invalid_change_leaves_everything_as_it_was() {
    let c = client().await;
    let name = "op-change";
    let (p, _replica) = apply_running(&c, name, "  podMaxBackoffSeconds: 10\n").await;
    let old_hash = p.status.and_then(|s| s.config_hash).expect("hash");
    let deps: Api<Deployment> = Api::namespaced(c.clone(), NS);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    let template_hash = |d: &Deployment| {
        d.spec
            .template
            .metadata
            .as_ref()
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

/// A PriorityClass that does not exist: the ReplicaSet cannot create the scheduler pods, and the
/// profile's status says so with the field to fix, instead of RollingOut forever in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_priority_class_is_named_in_the_status() {
    let c = client().await;
    let name = "op-no-priority-class";
    kubectl_apply(&profile_yaml(
        name,
        "  priorityClassName: no-such-priority-class\n",
    ));
    let p = wait_profile(&c, name, "FailedCreate in Ready", |p| {
        cond(p, "Ready").is_some_and(|c| c.message.contains("FailedCreate"))
    })
    .await;
    let ready = cond(&p, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "RollingOut")
    );
    assert!(
        ready
            .message
            .contains("no PriorityClass with name no-such-priority-class was found")
            && ready.message.contains("fix spec.priorityClassName"),
        "{}",
        ready.message
    );
}

/// A leaf selector that also selects a node where kube-scheduler placed pods: a Warning names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_selector_matching_host_nodes_is_warned_about() {
    let c = client().await;
    let label = ("ksched-e2e/hostleaf", "yes");
    kubectl_apply(&fixtures::kwok_node(
        "op-hostleaf-host",
        "8",
        "16Gi",
        &[label],
    ));
    kubectl_apply(&fixtures::kwok_node(
        "op-hostleaf-leaf",
        "8",
        "16Gi",
        &[label],
    ));
    let ns = cp().namespace(&c, "op-hostleaf").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"nodeName": "op-hostleaf-host", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    kubectl_apply(&profile_yaml("op-hostleaf-profile", "  replicas: 0\n"));
    kubectl_apply(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: op-hostleaf\nspec:\n  leafNodeSelector:\n    matchLabels:\n      ksched-e2e/hostleaf: \"yes\"\n  taint:\n    key: ksched-e2e/hostleaf\n    effect: NoSchedule\n  profiles: [\"op-hostleaf-profile\"]\n",
    );
    let note = eventually("LeafSelectorMatchesHostNodes event", async || {
        support::events::latest_note(&c, "default", "LeafSelectorMatchesHostNodes", "op-hostleaf")
            .await
    })
    .await;
    assert!(
        note.starts_with("spec.leafNodeSelector also selects node(s) op-hostleaf-host (pods of default-scheduler)")
            && !note.contains("op-hostleaf-leaf")
            && note.contains("Narrow spec.leafNodeSelector"),
        "{note}"
    );
    let (ok, _, err) =
        cp().kubectl_run(&["delete", "leafclusterpolicy", "op-hostleaf", "--wait=true"]);
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_profile_removes_every_child_by_gc_and_an_older_finalizer_goes() {
    let c = client().await;
    let name = "op-delete";
    kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
    wait_rolled_out(&c, name).await;
    // The finalizer an older operator gave profiles is removed: owner references do its work.
    cp().kubectl_ok(&[
        "patch",
        "sp",
        name,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["ksched.io/cleanup"]}}"#,
    ]);
    let profiles: Api<SchedulerProfile> = Api::all(c.clone());
    eventually("the older finalizer removed", async || {
        let p = profiles.get(name).await.ok()?;
        p.finalizers().is_empty().then_some(())
    })
    .await;
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
    // Ready means the in-process scheduler leads: it holds the profile's Lease.
    let leader = p
        .status
        .as_ref()
        .and_then(|s| s.leader.clone())
        .unwrap_or_default();
    assert!(leader.starts_with(&format!("e2e_{name}_")), "{leader}");
    let lease = get_opt(&Api::<Lease>::namespaced(c.clone(), NS), &obj_name(name))
        .await
        .expect("Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(leader.as_str())
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
    // No finalizer: the profile is gone at once, its scheduler stops when the deletion is seen.
    wait_last_call(&rec, name, "stop on delete", "stop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_scales_to_zero_and_keeps_the_config() {
    let c = client().await;
    let name = "op-suspend";
    kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
    let p = wait_rolled_out(&c, name).await;
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
    assert_eq!(d.spec.replicas, Some(0));
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
    kubectl_apply(&profile_yaml("op-leaves-only", "  replicas: 0\n"));
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
async fn a_policy_with_an_invalid_selector_is_stalled_and_its_profile_is_not() {
    let c = client().await;
    let target = "op-bad-target";
    kubectl_apply(&profile_yaml(target, "  replicas: 0\n"));
    kubectl_apply(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: op-bad-selector\nspec:\n  leafNodeSelector:\n    matchExpressions:\n    - key: kosmos.io/node\n      operator: Near\n      values: [\"true\"]\n  profiles: [\"op-bad-target\"]\n",
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
    let message = policy_cond(&p, "Stalled")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("spec.leafNodeSelector.matchExpressions[0].operator"),
        "{message}"
    );

    // The profile it names is not stalled: it says which policy it leaves out and why, with the
    // policy's own field path.
    let sp = wait_profile(&c, target, "Ready with LeafPoliciesValid=False", |p| {
        observed(p)
            && is_true(p, "Ready")
            && cond(p, "LeafPoliciesValid").is_some_and(|c| c.status == "False")
    })
    .await;
    assert!(cond(&sp, "Stalled").is_none(), "{:?}", sp.status);
    assert!(is_true(&sp, "ConfigValid"));
    let ignored = cond(&sp, "LeafPoliciesValid")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        ignored.contains("LeafClusterPolicy op-bad-selector")
            && ignored.contains("spec.leafNodeSelector.matchExpressions[0].operator")
            && !ignored.contains("pluginConfig"),
        "{ignored}"
    );
    eventually("LeafPolicyIgnored event", async || {
        events_about(&c, "LeafPolicyIgnored", target)
            .await
            .into_iter()
            .next()
    })
    .await;
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
        note.contains("spec.schedulerName \"defualt-scheduler\" (did you mean default-scheduler?)"),
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

/// Warning events about `name` (cluster-scoped objects' events live in `default`) with `reason`.
async fn events_about(c: &Client, reason: &str, name: &str) -> Vec<Event> {
    support::events::about(c, "default", reason, name).await
}

/// `attempt N, retried after Ss` of an ApplyFailed message.
fn attempt_and_wait(message: &str) -> Option<(u32, u64)> {
    let rest = &message[message.find("attempt ")? + "attempt ".len()..];
    let (attempt, rest) = rest.split_once(", retried after ")?;
    let wait = rest.split('s').next()?;
    Some((attempt.parse().ok()?, wait.parse().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unapplyable_deployment_is_stalled_in_plain_words_and_backs_off() {
    let c = client().await;
    let name = "op-unapplyable";
    // The CRD cannot know that requests must not exceed limits; the API server refuses the
    // Deployment (422).
    let bad = "  resources:\n    requests: {cpu: \"2\"}\n    limits: {cpu: \"1\"}\n";
    kubectl_apply(&profile_yaml(name, bad));
    let p = wait_profile(&c, name, "Stalled, ApplyFailed", |p| {
        observed(p) && reason_of(p, "Stalled").as_deref() == Some("ApplyFailed")
    })
    .await;
    assert!(!is_true(&p, "Ready"));
    assert_eq!(reason_of(&p, "Ready").as_deref(), Some("ApplyFailed"));
    assert!(cond(&p, "Reconciling").is_none());
    let message = cond(&p, "Stalled")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("applying Deployment {NS}/ksched-profile-{name}"))
            && message.contains("must be less than or equal to cpu limit")
            && message.contains("HTTP 422")
            && !message.contains("Status {")
            && !message.contains("ErrorResponse"),
        "{message}"
    );
    // A Warning event in the same words.
    let event = eventually("ApplyFailed event", async || {
        events_about(&c, "ApplyFailed", name)
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("must be less than or equal to cpu limit") && !note.contains("Status {"),
        "{note}"
    );
    save_fixture("schedulerprofile-applyfailed", &p);
    assert_eq!(argo_health(&p).0, "Degraded");

    // Exponential backoff: every attempt with these same objects waits twice as long as the
    // one before (this operator starts at 1s), whatever else triggers a reconcile meanwhile.
    let first = attempt_and_wait(&message).expect("attempt in the message");
    let mut seen = vec![first];
    let later = eventually("a fourth attempt", async || {
        let p = profile(&c, name).await;
        let m = cond(&p, "Stalled")?.message.clone();
        let now = attempt_and_wait(&m)?;
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        (now.0 >= 4).then_some(seen.clone())
    })
    .await;
    for (attempt, wait) in &later {
        assert_eq!(
            *wait,
            1 << (attempt - 1),
            "attempt {attempt} waits {wait}s: {later:?}"
        );
    }

    // A changed spec is applied at once, and the profile recovers.
    kubectl_apply(&profile_yaml(
        name,
        "  resources:\n    requests: {cpu: \"1\"}\n    limits: {cpu: \"1\"}\n",
    ));
    let p = wait_rolled_out(&c, name).await;
    assert!(cond(&p, "Stalled").is_none(), "{:?}", p.status);
    assert!(
        get_opt(
            &Api::<Deployment>::namespaced(c.clone(), NS),
            &obj_name(name)
        )
        .await
        .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_named_like_another_scheduler_is_refused() {
    let c = client().await;
    // kube-scheduler's name: refused by kubectl, with why and what to do.
    let (ok, _, err) = cp().kubectl_stdin(
        &["apply", "-f", "-"],
        &profile_yaml("default-scheduler", "  replicas: 1\n"),
    );
    assert!(!ok, "default-scheduler accepted");
    assert!(
        err.contains("race it for every pod") && err.contains("Pick another name"),
        "{err}"
    );

    // Another scheduler elects its leader on a Lease named like the profile.
    let taken = "op-taken";
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": taken},
        "spec": {"holderIdentity": "other-scheduler-0_abc", "leaseDurationSeconds": 15}
    }))
    .expect("lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    for (name, words) in [
        (
            taken,
            "Lease kube-system/op-taken, held by other-scheduler-0_abc",
        ),
        (KNOWN_ELSEWHERE, "--known-scheduler"),
    ] {
        kubectl_apply(&profile_yaml(name, "  replicas: 1\n"));
        let p = wait_profile(&c, name, "SchedulerNameInUse", |p| {
            observed(p) && reason_of(p, "Stalled").as_deref() == Some("SchedulerNameInUse")
        })
        .await;
        assert!(!is_true(&p, "Ready"));
        let message = cond(&p, "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            message.contains(words)
                && message.contains("rename the SchedulerProfile")
                && message.contains("no scheduler runs for this profile yet"),
            "{message}"
        );
        eventually("SchedulerNameInUse event", async || {
            events_about(&c, "SchedulerNameInUse", name)
                .await
                .into_iter()
                .find(|e| e.type_.as_deref() == Some("Warning"))
        })
        .await;
        // Nothing rendered.
        for (kind, owners) in rendered_objects(&c, name).await {
            assert!(owners.is_none(), "{kind} rendered for {name}");
        }
        assert_eq!(argo_health(&p).0, "Degraded");
    }
}

/// Each watched node's distinct (taints, ownership annotation) states, in order: the operator's
/// writes (kwok's status heartbeats change neither).
#[derive(Clone, Default)]
struct TaintHistory(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl TaintHistory {
    /// Watches the nodes labelled `label` from now on.
    fn watch(c: &Client, label: &str) -> TaintHistory {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let history = TaintHistory::default();
        let h = history.clone();
        let nodes: Api<Node> = Api::all(c.clone());
        let config = watcher::Config::default().labels(label);
        tokio::spawn(async move {
            let mut stream =
                std::pin::pin!(watcher(nodes, config).default_backoff().applied_objects());
            while let Some(Ok(node)) = stream.next().await {
                let state = format!(
                    "{:?} {:?}",
                    node_taints(&node),
                    node.annotations().get("ksched.io/leaf-taints")
                );
                let mut all = h.0.lock().expect("lock");
                let states = all.entry(node.name_any()).or_default();
                if states.last() != Some(&state) {
                    states.push(state);
                }
            }
        });
        history
    }

    /// Waits until the watch has seen each of `nodes`.
    async fn seen(&self, nodes: &[&str]) {
        eventually("the node watch started", async || {
            let all = self.0.lock().expect("lock");
            nodes.iter().all(|n| all.contains_key(*n)).then_some(())
        })
        .await
    }

    fn writes(&self, node: &str) -> usize {
        let all = self.0.lock().expect("lock");
        all.get(node).map_or(0, |s| s.len().saturating_sub(1))
    }

    fn dump(&self) -> String {
        format!("{:#?}", self.0.lock().expect("lock"))
    }
}

fn policy_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

async fn wait_policy(
    c: &Client,
    name: &str,
    what: &str,
    accept: impl Fn(&LeafClusterPolicy) -> bool,
) -> LeafClusterPolicy {
    let policies: Api<LeafClusterPolicy> = Api::all(c.clone());
    eventually(&format!("policy {name}: {what}"), async || {
        let p = policies.get(name).await.ok()?;
        let observed =
            p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation;
        (observed && accept(&p)).then_some(p)
    })
    .await
}

fn policy_cond<'a>(
    p: &'a LeafClusterPolicy,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
}

fn taint(key: &str, value: &str, effect: &str) -> (String, Option<String>, String) {
    (key.into(), Some(value.into()), effect.into())
}

/// Adds `taint` to node `name` as an admin would (`kubectl taint`).
fn admin_taint(name: &str, taint: &str) {
    let (ok, _, err) = cp().kubectl_run(&["taint", "node", name, taint]);
    assert!(ok, "kubectl taint {name} {taint}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kosmos_taints_that_were_there_are_never_removed() {
    let c = client().await;
    let nodes: Api<Node> = Api::all(c.clone());
    // Leaf nodes as Kosmos makes them: labelled and already tainted. One more leaf node that is
    // not tainted yet, and a host node on which an admin put the same taint.
    let label = ("op-kosmos.io/node", "true");
    for n in ["op-kosmos-1", "op-kosmos-2", "op-kosmos-3"] {
        kubectl_apply(&fixtures::kwok_node(n, "8", "16Gi", &[label]));
    }
    kubectl_apply(&fixtures::kwok_node("op-kosmos-host", "8", "16Gi", &[]));
    for n in ["op-kosmos-1", "op-kosmos-2", "op-kosmos-host"] {
        admin_taint(n, "op-kosmos.io/node=true:NoSchedule");
    }
    let kosmos = taint("op-kosmos.io/node", "true", "NoSchedule");
    kubectl_apply(&profile_yaml("op-kosmos-sched", "  replicas: 0\n"));
    kubectl_apply(&policy_yaml(
        "op-kosmos",
        "  leafNodeSelector:\n    matchLabels:\n      op-kosmos.io/node: \"true\"\n  taint: {key: op-kosmos.io/node, value: \"true\", effect: NoSchedule}\n  profiles: [op-kosmos-sched]\n",
    ));
    let p = wait_policy(&c, "op-kosmos", "Ready, 3 of 3 tainted", |p| {
        let s = p.status.clone().unwrap_or_default();
        s.tainted_nodes == Some(3) && policy_cond(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let s = p.status.clone().unwrap_or_default();
    assert_eq!(s.leaf_nodes, Some(3));
    assert_eq!(s.preexisting_taints, Some(2), "{s:?}");
    // Only the node the operator tainted records it.
    let records = |n: Node| n.annotations().get("ksched.io/leaf-taints").cloned();
    assert_eq!(
        records(nodes.get("op-kosmos-3").await.expect("node")).as_deref(),
        Some(r#"{"op-kosmos":"op-kosmos.io/node=true:NoSchedule"}"#)
    );
    assert_eq!(records(nodes.get("op-kosmos-1").await.expect("node")), None);

    // A node that stops matching keeps the taint it came with; the admin's host node keeps its
    // taint all along.
    nodes
        .patch(
            "op-kosmos-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"op-kosmos.io/node": null}}})),
        )
        .await
        .expect("unlabel");
    wait_policy(&c, "op-kosmos", "2 leaf nodes", |p| {
        p.status.as_ref().and_then(|s| s.leaf_nodes) == Some(2)
    })
    .await;
    assert!(taints_of(&nodes, "op-kosmos-2").await.contains(&kosmos));
    assert!(taints_of(&nodes, "op-kosmos-host").await.contains(&kosmos));

    // Deleted: the taint the operator added goes; the ones it found stay.
    let (ok, _, err) = cp().kubectl_run(&[
        "delete",
        "lcp",
        "op-kosmos",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(ok, "{err}");
    assert!(!taints_of(&nodes, "op-kosmos-3").await.contains(&kosmos));
    assert_eq!(records(nodes.get("op-kosmos-3").await.expect("node")), None);
    for n in ["op-kosmos-1", "op-kosmos-2", "op-kosmos-host"] {
        assert!(
            taints_of(&nodes, n).await.contains(&kosmos),
            "{n} lost the taint it had before the policy"
        );
    }
}

/// Applies policy `name` a second after the ones before it (so it is newer) and waits until it
/// reports Conflict; the policy and its Ready message.
async fn apply_newer_in_conflict(
    c: &Client,
    name: &str,
    spec: &str,
) -> (LeafClusterPolicy, String) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    kubectl_apply(&policy_yaml(name, spec));
    let p = wait_policy(c, name, "Conflict", |p| {
        policy_cond(p, "Stalled").is_some_and(|c| c.reason == "Conflict")
    })
    .await;
    let message = policy_cond(&p, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    (p, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_policies_conflict_once_and_never_flap() {
    let c = client().await;
    // o1: a; o2: a and b; o3: b.
    let group = ("op-overlap", "yes");
    for (n, labels) in [
        ("op-overlap-1", vec![group, ("op-overlap/a", "yes")]),
        (
            "op-overlap-2",
            vec![group, ("op-overlap/a", "yes"), ("op-overlap/b", "yes")],
        ),
        ("op-overlap-3", vec![group, ("op-overlap/b", "yes")]),
    ] {
        kubectl_apply(&fixtures::kwok_node(n, "8", "16Gi", &labels));
    }
    let history = TaintHistory::watch(&c, "op-overlap=yes");
    history
        .seen(&["op-overlap-1", "op-overlap-2", "op-overlap-3"])
        .await;
    kubectl_apply(&profile_yaml("op-overlap-sched", "  replicas: 0\n"));
    let spec = |side: &str, key: &str| {
        format!(
            "  leafNodeSelector:\n    matchLabels:\n      op-overlap/{side}: \"yes\"\n  taint: {{key: {key}, value: \"true\", effect: NoSchedule}}\n  profiles: [op-overlap-sched]\n"
        )
    };
    // The issue's incident: the same taint, different selectors.
    kubectl_apply(&policy_yaml(
        "op-overlap-a",
        &spec("a", "op-overlap.io/leaf"),
    ));
    wait_policy(&c, "op-overlap-a", "Ready", |p| {
        policy_cond(p, "Ready").is_some_and(|c| c.status == "True")
            && p.status.as_ref().and_then(|s| s.tainted_nodes) == Some(2)
    })
    .await;
    let (b, message) =
        apply_newer_in_conflict(&c, "op-overlap-b", &spec("b", "op-overlap.io/leaf")).await;
    assert!(
        message.contains("op-overlap-2")
            && !message.contains("op-overlap-3")
            && message.contains("older LeafClusterPolicy op-overlap-a"),
        "{message}"
    );
    assert_eq!(b.status.as_ref().and_then(|s| s.conflicting_nodes), Some(1));
    save_fixture("leafclusterpolicy-conflict", &b);
    assert_eq!(argo_health(&b).0, "Degraded");
    // b still taints the node it alone selects.
    let nodes: Api<Node> = Api::all(c.clone());
    let leaf = taint("op-overlap.io/leaf", "true", "NoSchedule");
    eventually("op-overlap-3 tainted by b", async || {
        taints_of(&nodes, "op-overlap-3")
            .await
            .contains(&leaf)
            .then_some(())
    })
    .await;

    // A third policy with another taint on a's nodes: conflict too, and no write.
    let (_, message) =
        apply_newer_in_conflict(&c, "op-overlap-c", &spec("a", "op-overlap.io/other")).await;
    assert!(
        message.contains("which this policy's profiles do not tolerate"),
        "{message}"
    );

    // While the conflict lasts, nothing flaps: each node was written once (its taint added).
    tokio::time::sleep(Duration::from_secs(10)).await;
    for n in ["op-overlap-1", "op-overlap-2", "op-overlap-3"] {
        assert_eq!(history.writes(n), 1, "{n}: {}", history.dump());
    }
    for n in ["op-overlap-1", "op-overlap-2"] {
        assert!(
            !taints_of(&nodes, n).await.contains(&taint(
                "op-overlap.io/other",
                "true",
                "NoSchedule"
            )),
            "{n}"
        );
    }
    // One Conflict event per newer policy.
    for p in ["op-overlap-b", "op-overlap-c"] {
        let events = events_about(&c, "Conflict", p).await;
        assert_eq!(events.len(), 1, "{p}: {events:#?}");
        assert!(events[0].series.is_none(), "{p}: {events:#?}");
    }

    // b goes: the node only it tainted loses the taint; the shared one stays a's.
    let (ok, _, err) = cp().kubectl_run(&[
        "delete",
        "lcp",
        "op-overlap-b",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(ok, "{err}");
    assert!(!taints_of(&nodes, "op-overlap-3").await.contains(&leaf));
    assert!(taints_of(&nodes, "op-overlap-2").await.contains(&leaf));
    for p in ["op-overlap-a", "op-overlap-c"] {
        let (ok, _, err) = cp().kubectl_run(&["delete", "lcp", p, "--wait=true", "--timeout=120s"]);
        assert!(ok, "{err}");
    }
    for n in ["op-overlap-1", "op-overlap-2", "op-overlap-3"] {
        assert!(taints_of(&nodes, n).await.is_empty(), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_naming_a_missing_profile_says_so() {
    let c = client().await;
    kubectl_apply(&policy_yaml(
        "op-missing",
        "  leafNodeSelector:\n    matchLabels:\n      op-missing/none: \"yes\"\n  profiles: [op-missing-sched, op-missing-too]\n",
    ));
    let p = wait_policy(&c, "op-missing", "ProfileNotFound", |p| {
        policy_cond(p, "Ready").is_some_and(|c| c.reason == "ProfileNotFound")
    })
    .await;
    let resolved = policy_cond(&p, "ProfilesResolved").expect("ProfilesResolved");
    assert_eq!(resolved.status, "False");
    assert!(
        resolved
            .message
            .contains("op-missing-sched, op-missing-too"),
        "{}",
        resolved.message
    );
    assert_eq!(
        p.status.as_ref().map(|s| s.missing_profiles.clone()),
        Some(vec![
            "op-missing-sched".to_string(),
            "op-missing-too".to_string()
        ])
    );
    for name in ["op-missing-sched", "op-missing-too"] {
        kubectl_apply(&profile_yaml(name, "  replicas: 0\n"));
    }
    wait_policy(&c, "op-missing", "Ready once the profiles exist", |p| {
        policy_cond(p, "Ready").is_some_and(|c| c.status == "True")
            && policy_cond(p, "ProfilesResolved").is_some_and(|c| c.status == "True")
    })
    .await;
}
