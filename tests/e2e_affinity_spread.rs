//! InterPodAffinity and PodTopologySpread in `ksched scheduler` against the real control plane
//! (kube-controller-manager turns Deployments into pods, kwok keeps the nodes Ready), and the
//! default profile with both plugins built.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::scheduler::SchedulerProcess;
use support::{Components, ControlPlane, control_plane};

use ksched::config::{ExtensionPoint, PluginAvailability, PluginCatalog, load};
use ksched::framework::registry::Registry;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ZONE: &str = "topology.kubernetes.io/zone";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// A v1 configuration with one default profile named `name`, leader election off.
fn scheduler_config(name: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n"
    )
}

/// kwok nodes of one test, one per zone given; deleted (and waited for) when dropped, so the next
/// test's scheduler sees only its own nodes.
struct ZoneNodes {
    test: String,
}

impl ZoneNodes {
    /// Adds node `<test>-<i>` in each zone of `zones`, waits until all are Ready.
    fn add(test: &str, zones: &[&str]) -> (ZoneNodes, BTreeMap<String, String>) {
        let nodes = ZoneNodes {
            test: test.to_string(),
        };
        let mut zone_of = BTreeMap::new();
        for (i, zone) in zones.iter().enumerate() {
            let name = format!("{test}-{i}");
            let yaml = support::fixtures::kwok_node(
                &name,
                "8",
                "32Gi",
                &[("ksched.io/e2e", test), (ZONE, zone)],
            );
            let (ok, _, err) = cp().kubectl_stdin(&["apply", "-f", "-"], &yaml);
            assert!(ok, "{err}");
            zone_of.insert(name, zone.to_string());
        }
        let (ok, _, err) = cp().kubectl_run(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            "nodes",
            "-l",
            &format!("ksched.io/e2e={test}"),
        ]);
        assert!(ok, "nodes not Ready: {err}");
        (nodes, zone_of)
    }
}

impl ZoneNodes {
    /// Adds one more node `<test>-<suffix>` in `zone` and waits until it is Ready.
    fn add_node(&self, suffix: &str, zone: &str) -> String {
        let name = format!("{}-{suffix}", self.test);
        let yaml = support::fixtures::kwok_node(
            &name,
            "8",
            "32Gi",
            &[("ksched.io/e2e", self.test.as_str()), (ZONE, zone)],
        );
        let (ok, _, err) = cp().kubectl_stdin(&["apply", "-f", "-"], &yaml);
        assert!(ok, "{err}");
        let (ok, _, err) = cp().kubectl_run(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            &format!("node/{name}"),
        ]);
        assert!(ok, "node {name} not Ready: {err}");
        name
    }
}

impl Drop for ZoneNodes {
    fn drop(&mut self) {
        let _ = cp().kubectl_run(&[
            "delete",
            "nodes",
            "-l",
            &format!("ksched.io/e2e={}", self.test),
            "--wait=true",
            "--timeout=60s",
        ]);
    }
}

/// A Deployment of `replicas` pause pods labelled `app=<name>` for `scheduler`, with extra pod
/// spec fields.
fn deployment(name: &str, scheduler: &str, replicas: i32, extra: serde_json::Value) -> Deployment {
    let mut spec = json!({
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}}}],
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }))
    .expect("deployment literal")
}

async fn create_deployment(client: &Client, ns: &str, d: &Deployment) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), d)
        .await
        .expect("create deployment");
}

/// Polls the Deployment's pods until `done` accepts them; returns them.
async fn wait_pods(
    client: &Client,
    ns: &str,
    app: &str,
    sched: &SchedulerProcess,
    what: &str,
    done: impl Fn(&[Pod]) -> bool,
) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pods = api
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .expect("list pods")
            .items;
        if done(&pods) {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not reached within 120s; pods: {:?}\nscheduler log:\n{}",
            pods.iter()
                .map(|p| (p.metadata.name.clone(), node(p)))
                .collect::<Vec<_>>(),
            sched.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn node(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

/// The note of the first FailedScheduling event about `pod`, once there is one.
async fn failed_scheduling(client: &Client, ns: &str, pod: &str) -> Option<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
        })
        .and_then(|e| e.note)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_anti_affinity_places_one_replica_per_node_and_the_extra_one_waits() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "anti").await;
    let (nodes, zone_of) = ZoneNodes::add("anti", &["a", "b", "c"]);
    let sched = SchedulerProcess::start(cp, "anti", &scheduler_config("ksched-anti"));
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}}});
    let replicas = zone_of.len() as i32 + 1;
    create_deployment(
        &client,
        &ns,
        &deployment("web", "ksched-anti", replicas, anti),
    )
    .await;

    let pods = wait_pods(&client, &ns, "web", &sched, "3 replicas bound", |pods| {
        pods.len() == replicas as usize && pods.iter().filter(|p| node(p).is_some()).count() == 3
    })
    .await;
    let used: BTreeSet<String> = pods.iter().filter_map(node).collect();
    let all: BTreeSet<String> = zone_of.keys().cloned().collect();
    assert_eq!(used, all, "one replica per node");

    let pending = pods
        .iter()
        .find(|p| node(p).is_none())
        .and_then(|p| p.metadata.name.clone())
        .expect("a pending replica");
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        if let Some(m) = failed_scheduling(&client, &ns, &pending).await {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no FailedScheduling for {pending}; scheduler log:\n{}",
            sched.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // Upstream's format; DefaultPreemption may append " preemption: ..." after the first period.
    let first = message
        .split_once(". ")
        .map_or(message.as_str(), |(a, _)| a);
    assert_eq!(
        first.trim_end_matches('.'),
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules",
        "{message}"
    );

    // It stays Pending: still no node a few seconds later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p = api.get(&pending).await.expect("get pending pod");
    assert_eq!(node(&p), None);

    // A fourth node joins: the Pending replica is retried and lands there.
    let joined = nodes.add_node("3", "d");
    let pods = wait_pods(&client, &ns, "web", &sched, "all replicas bound", |pods| {
        pods.iter().filter(|p| node(p).is_some()).count() == replicas as usize
    })
    .await;
    let placed = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pending.as_str()))
        .and_then(node);
    assert_eq!(placed, Some(joined));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_spread_keeps_the_skew_within_max_skew_against_a_zone_preference() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "spread").await;
    // Zone a has three nodes, b and c one each.
    let (_nodes, zone_of) = ZoneNodes::add("spread", &["a", "a", "a", "b", "c"]);
    let sched = SchedulerProcess::start(cp, "spread", &scheduler_config("ksched-spread"));
    // A strong preference for zone a (NodeAffinity scores 100 x weight 2) would put every
    // replica there; the DoNotSchedule constraint keeps the zones within maxSkew 1.
    let extra = json!({
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}}
        ]}},
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }],
    });
    let replicas = 7;
    create_deployment(
        &client,
        &ns,
        &deployment("spread", "ksched-spread", replicas, extra),
    )
    .await;
    let pods = wait_pods(
        &client,
        &ns,
        "spread",
        &sched,
        "all replicas bound",
        |pods| pods.len() == replicas as usize && pods.iter().all(|p| node(p).is_some()),
    )
    .await;
    let mut per_zone: BTreeMap<String, usize> =
        ["a", "b", "c"].iter().map(|z| (z.to_string(), 0)).collect();
    for p in &pods {
        let n = node(p).expect("bound");
        *per_zone.entry(zone_of[&n].clone()).or_insert(0) += 1;
    }
    // 7 pods over 3 zones within skew 1: 3 in the preferred zone a, 2 in b and c.
    assert_eq!(
        per_zone,
        BTreeMap::from([("a".into(), 3), ("b".into(), 2), ("c".into(), 2)]),
        "scheduler log:\n{}",
        sched.logs()
    );
}

/// Upstream 1.36's default plugins per extension point (`getDefaultPlugins` expanded from
/// multiPoint), without DynamicResources, which ksched does not support yet.
#[test]
fn default_profile_has_upstreams_plugins_and_weights_with_affinity_and_spread_built() {
    let registry = Registry::in_tree();
    for name in ["InterPodAffinity", "PodTopologySpread"] {
        assert!(
            matches!(registry.availability(name), PluginAvailability::Built(_)),
            "{name}"
        );
    }
    let yaml = scheduler_config("default-scheduler");
    let loaded = match load(yaml.as_bytes(), &registry) {
        Ok(l) => l,
        Err(e) => panic!("config: {e}"),
    };
    let profile = &loaded.config.profiles[0];
    let names = |p| profile.names_at(p);
    use ExtensionPoint::*;
    // Upstream 1.36 lists DynamicResources too (not supported by ksched, left out with a warning).
    assert_eq!(names(PreEnqueue), ["SchedulingGates", "DefaultPreemption"]);
    assert_eq!(names(QueueSort), ["PrioritySort"]);
    assert_eq!(
        names(PreFilter),
        [
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
        ]
    );
    assert_eq!(
        names(Filter),
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
        ]
    );
    assert_eq!(names(PostFilter), ["DefaultPreemption"]);
    assert_eq!(
        names(PreScore),
        [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeBinding",
            "PodTopologySpread",
            "InterPodAffinity",
            "NodeResourcesBalancedAllocation",
        ]
    );
    let scores: Vec<(&str, i32)> = profile
        .at(Score)
        .iter()
        .map(|p| (p.name.as_str(), p.weight))
        .collect();
    assert_eq!(
        scores,
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ]
    );
    assert_eq!(names(Reserve), ["VolumeBinding"]);
    assert_eq!(names(PreBind), ["VolumeBinding"]);
    assert_eq!(names(Bind), ["DefaultBinder"]);
    // Both plugins run with their default args.
    assert_eq!(
        profile.plugin_args["InterPodAffinity"],
        json!({"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": false})
    );
    assert_eq!(
        profile.plugin_args["PodTopologySpread"],
        json!({"defaultConstraints": [], "defaultingType": "System"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_namespace_selector_finds_pods_in_other_labelled_namespaces() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    // Test namespaces carry the label ksched.io/test=true.
    let db_ns = cp.namespace(&client, "nssel-db").await;
    let app_ns = cp.namespace(&client, "nssel-app").await;
    let (_nodes, zone_of) = ZoneNodes::add("nssel", &["a", "b", "c"]);
    let target = zone_of.keys().nth(1).cloned().expect("three nodes");
    let sched = SchedulerProcess::start(cp, "nssel", &scheduler_config("ksched-nssel"));
    let pod = |name: &str, spec: serde_json::Value| -> Pod {
        let mut base = json!({
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        });
        if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"app": name}}, "spec": base}),
        )
        .expect("pod literal")
    };
    // The database pod sits on the second node of another namespace.
    let db: Api<Pod> = Api::namespaced(client.clone(), &db_ns);
    db.create(
        &PostParams::default(),
        &pod("db", json!({"nodeName": target})),
    )
    .await
    .expect("create db pod");
    // The app wants to be next to it, in any namespace labelled ksched.io/test=true.
    let app: Api<Pod> = Api::namespaced(client.clone(), &app_ns);
    let affinity = json!({
        "schedulerName": "ksched-nssel",
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": {"ksched.io/test": "true"}},
            "topologyKey": "kubernetes.io/hostname",
        }]}},
    });
    app.create(&PostParams::default(), &pod("app", affinity))
        .await
        .expect("create app pod");
    let pods = wait_pods(&client, &app_ns, "app", &sched, "app bound", |pods| {
        pods.iter().any(|p| node(p).is_some())
    })
    .await;
    assert_eq!(node(&pods[0]), Some(target));
}
