//! The framework driven by a real configuration: `config::load` with the in-tree registry, then
//! scheduling with every built plugin.

use std::sync::Arc;

use super::interface::CycleState;
use super::registry::Registry;
use super::runtime::{Framework, ProfileSpec};
use super::schedule::{Algorithm, ScheduleError};
use super::testing::{NodeBuilder, PodBuilder, handle};
use super::types::Snapshot;
use crate::config::{ExtensionPoint, load};

/// Upstream's defaults minus the volume, spread, affinity and preemption plugins (tested on their
/// own).
const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      disabled:
      - name: VolumeRestrictions
      - name: NodeVolumeLimits
      - name: VolumeBinding
      - name: VolumeZone
      - name: PodTopologySpread
      - name: InterPodAffinity
      - name: DefaultPreemption
- schedulerName: most-allocated
  plugins:
    multiPoint:
      disabled:
      - name: "*"
      enabled:
      - name: PrioritySort
      - name: NodeResourcesFit
      - name: DefaultBinder
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#;

fn frameworks() -> Vec<Framework> {
    let registry = Registry::in_tree();
    let loaded = match load(CONFIG.as_bytes(), &registry) {
        Ok(l) => l,
        Err(e) => panic!("config: {e:?}"),
    };
    loaded
        .config
        .profiles
        .iter()
        .map(|p| {
            let (h, _) = handle();
            Framework::new(&ProfileSpec::from(p), &registry, h).expect("framework")
        })
        .collect()
}

#[test]
fn default_profile_builds_with_every_built_plugin() {
    let fwks = frameworks();
    let plugins = fwks[0].list_plugins();
    let names = |ep| {
        plugins[&ep]
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(ExtensionPoint::Filter),
        [
            // 1.37's order (the newest minor's defaults).
            "NodeName",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "DynamicResources",
            "NodeDeclaredFeatures"
        ]
    );
    assert_eq!(
        plugins[&ExtensionPoint::Score],
        [
            ("TaintToleration".to_string(), 3),
            ("NodeAffinity".to_string(), 2),
            ("NodeResourcesFit".to_string(), 1),
            ("DynamicResources".to_string(), 2),
            ("NodeResourcesBalancedAllocation".to_string(), 1),
            ("ImageLocality".to_string(), 1),
        ]
    );
    assert_eq!(
        names(ExtensionPoint::PreEnqueue),
        ["SchedulingGates", "DynamicResources"]
    );
}

#[test]
fn upstream_failure_message_with_real_plugins() {
    let fwks = frameworks();
    let worker = |n: &str| {
        NodeBuilder::new(n)
            .allocatable(&[("cpu", "1"), ("memory", "4Gi"), ("pods", "110")])
            .build()
    };
    let cp = |n: &str| {
        NodeBuilder::new(n)
            .allocatable(&[("cpu", "8"), ("memory", "32Gi"), ("pods", "110")])
            .taint("node-role.kubernetes.io/control-plane", "", "NoSchedule")
            .build()
    };
    let nodes: Vec<_> = [worker("w1"), worker("w2"), cp("cp1"), cp("cp2"), cp("cp3")]
        .into_iter()
        .map(Arc::new)
        .collect();
    let snap = Snapshot::from_objects(&nodes, &[]);
    let pod = PodBuilder::new("big").container(&[("cpu", "2")]).info();
    let e = Algorithm::new(0)
        .schedule_pod(&fwks[0], &mut CycleState::new(), &pod, &snap)
        .expect_err("no fit");
    assert_eq!(
        e.to_string(),
        "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s)."
    );
    assert!(matches!(e, ScheduleError::Fit(_)));

    let small = PodBuilder::new("small")
        .container(&[("cpu", "500m")])
        .info();
    let r = Algorithm::new(0)
        .schedule_pod(&fwks[0], &mut CycleState::new(), &small, &snap)
        .expect("fits");
    assert!(r.suggested_host.starts_with('w'));
    assert_eq!((r.feasible_nodes, r.evaluated_nodes), (2, 5));
}

#[test]
fn most_allocated_profile_packs_pods() {
    let fwks = frameworks();
    let node = |n: &str, used: &str| {
        let pod = PodBuilder::new(&format!("{n}-used"))
            .node(n)
            .container(&[("cpu", used), ("memory", "1Gi")])
            .build();
        (
            NodeBuilder::new(n)
                .allocatable(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")])
                .build(),
            pod,
        )
    };
    let (n1, p1) = node("empty", "0");
    let (n2, p2) = node("busy", "3");
    let snap = Snapshot::from_objects(&[Arc::new(n1), Arc::new(n2)], &[Arc::new(p1), Arc::new(p2)]);
    let pod = PodBuilder::new("p")
        .container(&[("cpu", "500m"), ("memory", "1Gi")])
        .info();
    let r = Algorithm::new(0)
        .schedule_pod(&fwks[1], &mut CycleState::new(), &pod, &snap)
        .expect("fits");
    assert_eq!(r.suggested_host, "busy");
    let r = Algorithm::new(0)
        .schedule_pod(&fwks[0], &mut CycleState::new(), &pod, &snap)
        .expect("fits");
    assert_eq!(
        r.suggested_host, "empty",
        "the default LeastAllocated spreads"
    );
}
