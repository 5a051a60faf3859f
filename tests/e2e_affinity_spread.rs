//! InterPodAffinity and PodTopologySpread in `ksched scheduler` against the real control plane
//! (kube-controller-manager turns Deployments into pods, kwok keeps the nodes Ready), and the
//! default profile with both plugins built.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::events::about;
use support::fixtures::{PAUSE_IMAGE, merge, pause_spec};
use support::nodes::Nodes;
use support::scheduler::{SchedulerProcess, config};
use support::wait::{node, poll};
use support::{Components, ControlPlane, control_plane};

use ksched::config::{ExtensionPoint, PluginAvailability, PluginCatalog, load};
use ksched::framework::registry::Registry;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ZONE: &str = "topology.kubernetes.io/zone";

fn cp() -> &'static ControlPlane {
    control_plane(Components::FULL)
}

/// kwok nodes `<test>-<i>`, one in each zone of `zones`, Ready; deleted (and waited for) when
/// dropped, so the next test's scheduler sees only its own nodes. Also each node's zone.
fn zone_nodes(test: &str, zones: &[&str]) -> (Nodes, BTreeMap<String, String>) {
    let nodes = Nodes::new(cp(), test).waiting_on_drop();
    let zone_of = zones
        .iter()
        .enumerate()
        .map(|(i, zone)| {
            let name = nodes.create(&i.to_string(), "8", &[(ZONE, zone)]);
            (name, zone.to_string())
        })
        .collect();
    nodes.wait_ready();
    (nodes, zone_of)
}

/// A Deployment of `replicas` pause pods labelled `app=<name>` for `scheduler`, with extra pod
/// spec fields.
fn deployment(name: &str, scheduler: &str, replicas: i32, extra: serde_json::Value) -> Deployment {
    let spec = pause_spec(scheduler, "100m", "50Mi", &extra);
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

/// The note of the first FailedScheduling event about `pod`, once there is one.
async fn failed_scheduling(client: &Client, ns: &str, pod: &str) -> Option<String> {
    about(client, ns, "FailedScheduling", pod)
        .await
        .into_iter()
        .next()
        .and_then(|e| e.note)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_anti_affinity_places_one_replica_per_node_and_the_extra_one_waits() {
    let _serial = SERIAL.lock().await;
    let cp = cp();
    let client = cp.client().await;
    let ns = cp.namespace(&client, "anti").await;
    let (nodes, zone_of) = zone_nodes("anti", &["a", "b", "c"]);
    let sched = SchedulerProcess::start(cp, "anti", &config("ksched-anti", None));
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
    let message = poll(
        &format!("FailedScheduling for {pending}"),
        Duration::from_secs(60),
        || sched.logs(),
        async || failed_scheduling(&client, &ns, &pending).await,
    )
    .await;
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
    let joined = nodes.add("3", "8", &[(ZONE, "d")]);
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
    let (_nodes, zone_of) = zone_nodes("spread", &["a", "a", "a", "b", "c"]);
    let sched = SchedulerProcess::start(cp, "spread", &config("ksched-spread", None));
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
/// multiPoint): all 20.
#[test]
fn default_profile_has_upstreams_plugins_and_weights_with_affinity_and_spread_built() {
    let registry = Registry::in_tree();
    for name in ["InterPodAffinity", "PodTopologySpread"] {
        assert!(
            matches!(registry.availability(name), PluginAvailability::Built(_)),
            "{name}"
        );
    }
    let yaml = config("default-scheduler", None);
    let loaded = match load(yaml.as_bytes(), &registry) {
        Ok(l) => l,
        Err(e) => panic!("config: {e}"),
    };
    let profile = &loaded.config.profiles[0];
    let names = |p| profile.names_at(p);
    use ExtensionPoint::*;
    // Upstream's default plugins in their multiPoint order, each with the extension points it
    // runs at and its score weight (0: no Score); every list of the profile is this table
    // filtered by extension point.
    let defaults: [(&str, &[ExtensionPoint], i32); 20] = [
        ("SchedulingGates", &[PreEnqueue], 0),
        ("PrioritySort", &[QueueSort], 0),
        // 1.37's order (1.36 had NodeUnschedulable first).
        ("NodeName", &[Filter], 0),
        ("NodeUnschedulable", &[Filter], 0),
        ("TaintToleration", &[Filter, PreScore, Score], 3),
        ("NodeAffinity", &[PreFilter, Filter, PreScore, Score], 2),
        ("NodePorts", &[PreFilter, Filter], 0),
        ("NodeResourcesFit", &[PreFilter, Filter, PreScore, Score], 1),
        ("VolumeRestrictions", &[PreFilter, Filter], 0),
        ("NodeVolumeLimits", &[PreFilter, Filter], 0),
        (
            "VolumeBinding",
            &[PreFilter, Filter, PreScore, Score, Reserve, PreBind],
            1,
        ),
        ("VolumeZone", &[PreFilter, Filter], 0),
        (
            "PodTopologySpread",
            &[PreFilter, Filter, PreScore, Score],
            2,
        ),
        ("InterPodAffinity", &[PreFilter, Filter, PreScore, Score], 2),
        (
            "DynamicResources",
            &[
                PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve, PreBind,
            ],
            2,
        ),
        ("DefaultPreemption", &[PreEnqueue, PostFilter], 0),
        ("NodeResourcesBalancedAllocation", &[PreScore, Score], 1),
        ("ImageLocality", &[Score], 1),
        ("DefaultBinder", &[Bind], 0),
        ("NodeDeclaredFeatures", &[PreFilter, Filter], 0),
    ];
    let at = |point| {
        defaults
            .iter()
            .filter(move |(_, points, _)| points.contains(&point))
    };
    for point in [
        PreEnqueue, QueueSort, PreFilter, Filter, PostFilter, PreScore, Reserve, PreBind, Bind,
    ] {
        let expected: Vec<&str> = at(point).map(|(name, _, _)| *name).collect();
        assert_eq!(names(point), expected, "{point:?}");
    }
    let scores: Vec<(&str, i32)> = profile
        .at(Score)
        .iter()
        .map(|p| (p.name.as_str(), p.weight))
        .collect();
    let expected: Vec<(&str, i32)> = at(Score).map(|(name, _, w)| (*name, *w)).collect();
    assert_eq!(scores, expected);
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
    let (_nodes, zone_of) = zone_nodes("nssel", &["a", "b", "c"]);
    let target = zone_of.keys().nth(1).cloned().expect("three nodes");
    let sched = SchedulerProcess::start(cp, "nssel", &config("ksched-nssel", None));
    let pod = |name: &str, spec: serde_json::Value| -> Pod {
        let mut base = json!({
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": PAUSE_IMAGE}],
        });
        merge(&mut base, &spec);
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
