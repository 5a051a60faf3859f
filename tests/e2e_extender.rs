//! Scheduler extenders against the real control plane: a small extender server started by the test
//! filters out a node, reorders the rest by priority and binds the pod itself; an unreachable
//! extender that is not ignorable blocks scheduling with the very message upstream kube-scheduler
//! gives (both run against the same dead URL); an ignorable one does not.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use support::fixtures::pause_pod;
use support::nodes::{Nodes, TEST_LABEL};
use support::process::LoggedChild;
use support::scheduler::{SchedulerProcess, kube_scheduler_command};
use support::wait::{create, node_of, poll, unschedulable_message};
use support::{Components, ControlPlane, control_plane, free_port, path_str};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cp() -> &'static ControlPlane {
    control_plane(Components::API_ONLY)
}

/// What the extender server was asked, per verb.
type Calls = Arc<Mutex<BTreeMap<String, Vec<Value>>>>;

/// An extender on 127.0.0.1: `filter` rejects nodes whose name ends in `-reject`,
/// `prioritize` gives 10 to nodes ending in `-favorite` (0 to others), `bind` binds through the
/// API. It speaks upstream's wire format (Go field names).
struct ExtenderServer {
    addr: SocketAddr,
    calls: Calls,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ExtenderServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ExtenderServer {
    async fn start(client: Client) -> ExtenderServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the extender server");
        let addr = listener.local_addr().expect("local addr");
        let calls: Calls = Arc::default();
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (client, calls) = (client.clone(), recorded.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        answer(req, client.clone(), calls.clone())
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ExtenderServer { addr, calls, task }
    }

    fn url(&self) -> String {
        format!("http://{}/scheduler", self.addr)
    }

    fn calls(&self, verb: &str) -> Vec<Value> {
        self.calls.lock().get(verb).cloned().unwrap_or_default()
    }
}

async fn answer(
    req: Request<Incoming>,
    client: Client,
    calls: Calls,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let verb = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    calls
        .lock()
        .entry(verb.clone())
        .or_default()
        .push(args.clone());
    // A nodeCacheCapable scheduler sends names; otherwise Node objects.
    let names: Vec<String> = match args["NodeNames"].as_array() {
        Some(names) => names
            .iter()
            .filter_map(|n| n.as_str())
            .map(String::from)
            .collect(),
        None => args["Nodes"]["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["metadata"]["name"].as_str())
            .map(String::from)
            .collect(),
    };
    let out =
        match verb.as_str() {
            "filter" => {
                let (rejected, passed): (Vec<String>, Vec<String>) =
                    names.into_iter().partition(|n| n.ends_with("-reject"));
                let failed: BTreeMap<String, String> = rejected
                    .into_iter()
                    .map(|n| (n, "rejected by the test extender".to_string()))
                    .collect();
                if args["NodeNames"].is_array() {
                    json!({"NodeNames": passed, "FailedNodes": failed, "Error": ""})
                } else {
                    // Answer in kind: the Node objects that passed.
                    let items: Vec<&Value> = args["Nodes"]["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|n| passed.iter().any(|p| n["metadata"]["name"] == p.as_str()))
                        .collect();
                    json!({"Nodes": {"items": items}, "FailedNodes": failed, "Error": ""})
                }
            }
            "prioritize" => json!(names
            .iter()
            .map(|n| json!({"Host": n, "Score": if n.ends_with("-favorite") { 10 } else { 0 }}))
            .collect::<Vec<_>>()),
            "bind" => {
                let ns = args["PodNamespace"].as_str().unwrap_or_default();
                let name = args["PodName"].as_str().unwrap_or_default();
                let node = args["Node"].as_str().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client, ns);
                let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                match pods
                    .create_subresource::<Value, Value>(
                        "binding",
                        name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => json!({"Error": ""}),
                    Err(e) => json!({"Error": e.to_string()}),
                }
            }
            _ => {
                return Ok(Response::builder()
                    .status(404)
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_default());
            }
        };
    Ok(Response::new(Full::new(Bytes::from(out.to_string()))))
}

/// A v1 configuration: one profile `name` and `extenders` (YAML list items, indented by two).
fn config_with(name: &str, extenders: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n\
         extenders:\n{extenders}"
    )
}

/// A 100m pod of `scheduler` kept to the test's nodes.
fn test_pod(name: &str, scheduler: &str, nodes: &Nodes) -> Pod {
    pause_pod(
        name,
        scheduler,
        "100m",
        &[],
        json!({"nodeSelector": {TEST_LABEL: nodes.test()}}),
    )
}

async fn wait_node(pods: &Api<Pod>, name: &str, logs: impl Fn() -> String) -> String {
    poll(
        &format!("pod {name} bound"),
        Duration::from_secs(60),
        logs,
        async || node_of(pods, name).await,
    )
    .await
}

async fn wait_message(pods: &Api<Pod>, name: &str, logs: impl Fn() -> String) -> String {
    poll(
        &format!("pod {name} rejected"),
        Duration::from_secs(60),
        logs,
        async || unschedulable_message(&pods.get(name).await.ok()?),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_filters_prioritizes_and_binds() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "extender").await;
    let nodes = Nodes::new(cp, "ext-main");
    // The plugins would prefer the big node; the extender rejects it and favours another.
    nodes.create("big-reject", "16", &[]);
    nodes.create("plain", "4", &[]);
    let favorite = nodes.create("small-favorite", "2", &[]);
    let server = ExtenderServer::start(client.clone()).await;
    for (case, cache_capable) in [("names", true), ("objects", false)] {
        let scheduler = format!("ext-{case}");
        let sched = SchedulerProcess::start(
            cp,
            &scheduler,
            &config_with(
                &scheduler,
                &format!(
                    "- urlPrefix: {}\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  \
                     weight: 5\n  bindVerb: bind\n  nodeCacheCapable: {cache_capable}\n",
                    server.url()
                ),
            ),
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = test_pod(&format!("p-{case}"), &scheduler, &nodes);
        create(&pods, &pod).await;
        let node = wait_node(&pods, &pod.name_any(), || sched.logs()).await;
        assert_eq!(node, favorite, "{case}");
        // The filter saw all three nodes, prioritize only the two that passed.
        let filtered = server.calls("filter");
        let last = filtered.last().expect("filter called");
        let key = if cache_capable { "NodeNames" } else { "Nodes" };
        assert!(!last[key].is_null(), "{case}: {last}");
        let prioritized = server.calls("prioritize");
        let seen = prioritized.last().expect("prioritize called").to_string();
        assert!(!seen.contains("big-reject"), "{case}: {seen}");
        // The extender bound it, not DefaultBinder.
        let binds = server.calls("bind");
        assert!(
            binds
                .iter()
                .any(|b| b["PodName"] == pod.name_any().as_str() && b["Node"] == favorite.as_str()),
            "{case}: {binds:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_extender_blocks_unless_ignorable() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "extender").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes = Nodes::new(cp, "ext-down");
    nodes.create("a", "4", &[]);
    // Nothing listens there.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let extender = |ignorable: bool| {
        format!("- urlPrefix: {dead}\n  filterVerb: filter\n  ignorable: {ignorable}\n")
    };

    // Upstream kube-scheduler with the same extender: its message is the reference.
    let upstream_cfg = cp.dir.join("ext-upstream-config.yaml");
    std::fs::write(
        &upstream_cfg,
        format!(
            "{}clientConnection:\n  kubeconfig: {}\n",
            config_with("ext-upstream", &extender(false)),
            path_str(&cp.kubeconfig)
        ),
    )
    .expect("write the upstream config");
    let mut cmd = kube_scheduler_command(cp);
    cmd.args([
        format!("--config={}", path_str(&upstream_cfg)),
        "--v=2".into(),
    ]);
    let upstream = LoggedChild::spawn(cmd, cp.dir.join("ext-upstream.log"));
    let theirs = test_pod("upstream", "ext-upstream", &nodes);
    create(&pods, &theirs).await;
    let expected = wait_message(&pods, "upstream", || upstream.logs()).await;
    drop(upstream);
    assert!(expected.contains("connection refused"), "{expected}");

    let sched = SchedulerProcess::start(
        cp,
        "ext-strict",
        &config_with("ext-strict", &extender(false)),
    );
    let ours = test_pod("strict", "ext-strict", &nodes);
    create(&pods, &ours).await;
    let message = wait_message(&pods, "strict", || sched.logs()).await;
    assert_eq!(message, expected);
    let reason = pods
        .get("strict")
        .await
        .ok()
        .and_then(|p| {
            p.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")
        })
        .and_then(|c| c.reason);
    assert_eq!(reason.as_deref(), Some("SchedulerError"));
    assert_eq!(node_of(&pods, "strict").await, None);

    let sched = SchedulerProcess::start(
        cp,
        "ext-lenient",
        &config_with("ext-lenient", &extender(true)),
    );
    let lenient = test_pod("lenient", "ext-lenient", &nodes);
    create(&pods, &lenient).await;
    wait_node(&pods, "lenient", || sched.logs()).await;
}
