//! What the scheduler keeps of a watched object: only what scheduling reads. Upstream's informers
//! drop `managedFields`; ksched also drops the parts of a pod no plugin looks at (environment,
//! commands, probes, volume mounts, projected/ConfigMap/Secret/downwardAPI/emptyDir volumes, the
//! runtime's container state), which are most of a typical pod's size; a pod bound to a node keeps
//! even less ([`assigned_pod`]). Objects are never written back from the cache, so a trimmed
//! pod is only ever read.
//!
//! An out-of-tree plugin that needs a dropped field reads the pod from the API server.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus, Volume, VolumeMount};

pub(crate) use crate::framework::listers::trim_metadata;
use crate::framework::types::AssignedPod;

/// Keeps of a pod what the scheduler's plugins and queue read.
pub(crate) fn trim_pod(pod: &mut Pod) {
    trim_metadata(pod);
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            trim_container(c);
        }
        // Not counted in requests, not placed by the scheduler.
        spec.ephemeral_containers = None;
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(volume_matters_for_scheduling);
            if volumes.is_empty() {
                spec.volumes = None;
            }
        }
        // Decoding grows lists by doubling; a kept pod is never appended to.
        shrink(&mut spec.volumes);
        shrink(&mut spec.tolerations);
        shrink(&mut spec.topology_spread_constraints);
    }
    if let Some(status) = pod.status.as_mut() {
        trim_pod_status(status);
    }
}

/// What is kept of a pod bound to a node: an [`AssignedPod`] (identity, labels, pod
/// (anti-)affinity, the volumes that matter for scheduling, priority, start time, what it requests),
/// a few hundred bytes instead of the whole `Pod`.
pub(crate) fn assigned_pod(mut pod: Pod) -> AssignedPod {
    trim_metadata(&mut pod);
    if let Some(volumes) = pod.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
        volumes.retain(volume_matters_for_scheduling);
    }
    AssignedPod::new(pod)
}

/// Name and image (ImageLocality), ports (NodePorts), resources (NodeResourcesFit and scoring),
/// restartPolicy (sidecar init containers count like regular ones), restartPolicyRules and the
/// volume mounts with `bindMountOptions` (NodeDeclaredFeatures).
fn trim_container(c: &mut Container) {
    let mounts: Vec<VolumeMount> = c
        .volume_mounts
        .take()
        .into_iter()
        .flatten()
        .filter(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
        .collect();
    *c = Container {
        name: std::mem::take(&mut c.name),
        image: c.image.take(),
        ports: c.ports.take(),
        resources: c.resources.take(),
        restart_policy: c.restart_policy.take(),
        restart_policy_rules: c.restart_policy_rules.take(),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Default::default()
    };
}

/// Volumes that carry a claim, a disk or a CSI driver matter to the volume plugins; the ones a kubelet
/// fills from the API server or a scratch directory do not.
fn volume_matters_for_scheduling(v: &Volume) -> bool {
    v.projected.is_none()
        && v.config_map.is_none()
        && v.secret.is_none()
        && v.downward_api.is_none()
        && v.empty_dir.is_none()
}

/// Phase (finished pods), the conditions the scheduler reads, nominated node (preemption), start
/// time (victim order), the resources the kubelet allocated to each container (in-place resize),
/// and the names of the ResourceClaims generated for the pod (DynamicResources).
fn trim_pod_status(status: &mut PodStatus) {
    *status = PodStatus {
        phase: status.phase.take(),
        conditions: status.conditions.take(),
        nominated_node_name: status.nominated_node_name.take(),
        start_time: status.start_time.take(),
        qos_class: status.qos_class.take(),
        container_statuses: trim_container_statuses(status.container_statuses.take()),
        init_container_statuses: trim_container_statuses(status.init_container_statuses.take()),
        resource_claim_statuses: status.resource_claim_statuses.take(),
        ..Default::default()
    };
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| CONDITIONS_READ.contains(&c.type_.as_str()));
    }
    if status.conditions.as_ref().is_some_and(Vec::is_empty) {
        status.conditions = None;
    }
    shrink(&mut status.conditions);
}

/// PodScheduled (a failed attempt writes it only when it changes), PodResizePending (an infeasible
/// resize counts the spec's requests), DisruptionTarget (a victim already being preempted). Ready,
/// Initialized and the kubelet's other conditions are never read.
const CONDITIONS_READ: [&str; 3] = ["PodScheduled", "PodResizePending", "DisruptionTarget"];

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(l) = list.as_mut() {
        l.shrink_to_fit();
    }
}

/// Keeps a container's status only when it carries allocated or actual resources: a status without
/// them counts exactly as no status (the spec's requests), and each `ContainerStatus` is 752 bytes even
/// when empty.
fn trim_container_statuses(list: Option<Vec<ContainerStatus>>) -> Option<Vec<ContainerStatus>> {
    let kept: Vec<ContainerStatus> = list?
        .into_iter()
        .filter(|s| s.allocated_resources.is_some() || s.resources.is_some())
        .map(|s| ContainerStatus {
            name: s.name,
            allocated_resources: s.allocated_resources,
            resources: s.resources,
            ..Default::default()
        })
        .collect();
    (!kept.is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::types::{PodInfo, PodView};
    use serde_json::json;

    /// Written by `kubectl apply`: a full copy of the object, never read by the scheduler.
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

    /// A pod as the API server returns it once admission and the kubelet had their turn.
    fn full_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1", "labels": {"app": "web"},
                "annotations": {"team": "a", LAST_APPLIED: "{\"kind\":\"Pod\"}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "nginx:1.25", "command": ["nginx"], "args": ["-g", "daemon off;"],
                    "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}}, "env": [{"name": "B", "value": "2"}]}],
                "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "config", "configMap": {"name": "web"}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}
                ],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]},
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "qosClass": "Burstable",
                "startTime": "2026-01-01T00:00:00Z", "nominatedNodeName": "n2",
                "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
                    {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "nginx:1.25", "imageID": "sha256:x", "ready": true,
                    "restartCount": 3, "containerID": "containerd://abc", "state": {"running": {}},
                    "allocatedResources": {"cpu": "200m"}, "resources": {"requests": {"cpu": "150m"}}}],
                "initContainerStatuses": [{"name": "proxy", "image": "envoy", "imageID": "sha256:y", "ready": true,
                    "restartCount": 0, "state": {"running": {}}}]
            }
        }))
        .expect("pod")
    }

    #[test]
    fn keeps_what_scheduling_reads() {
        let original = full_pod();
        let mut pod = original.clone();
        trim_pod(&mut pod);
        let (spec, orig_spec) = (pod.spec.as_ref().unwrap(), original.spec.as_ref().unwrap());
        assert_eq!(pod.metadata.labels, original.metadata.labels);
        assert_eq!(
            pod.metadata.owner_references,
            original.metadata.owner_references
        );
        assert_eq!(spec.node_name, orig_spec.node_name);
        assert_eq!(spec.scheduler_name, orig_spec.scheduler_name);
        assert_eq!(spec.tolerations, orig_spec.tolerations);
        assert_eq!(spec.affinity, orig_spec.affinity);
        let app = &spec.containers[0];
        assert_eq!(app.image.as_deref(), Some("nginx:1.25"));
        assert_eq!(app.ports, orig_spec.containers[0].ports);
        assert_eq!(app.resources, orig_spec.containers[0].resources);
        let sidecar = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data", "scratch"]);
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.nominated_node_name.as_deref(), Some("n2"));
        assert_eq!(
            status.start_time,
            original.status.as_ref().unwrap().start_time
        );
        let conditions: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(conditions, ["PodResizePending", "PodScheduled"]);
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.name, "app");
        assert!(cs.allocated_resources.is_some() && cs.resources.is_some());
    }

    #[test]
    fn drops_what_no_plugin_reads() {
        let mut pod = full_pod();
        trim_pod(&mut pod);
        assert!(pod.metadata.managed_fields.is_none());
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations.get("team").map(String::as_str), Some("a"));
        let spec = pod.spec.as_ref().unwrap();
        let app = &spec.containers[0];
        assert!(app.command.is_none() && app.args.is_none() && app.env.is_none());
        assert!(app.liveness_probe.is_none() && app.volume_mounts.is_none());
        assert!(spec.init_containers.as_ref().unwrap()[0].env.is_none());
        assert!(spec.ephemeral_containers.is_none());
        let status = pod.status.as_ref().unwrap();
        assert!(status.host_ip.is_none() && status.pod_ip.is_none());
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        assert!(cs.state.is_none() && cs.container_id.is_none() && cs.image.is_empty());
        // Without allocated or actual resources a status says nothing the spec does not.
        assert!(status.init_container_statuses.is_none());
        let conditions = status.conditions.iter().flatten();
        assert!(conditions.map(|c| c.type_.as_str()).all(|t| t != "Ready"));
    }

    #[test]
    fn scheduling_inputs_unchanged() {
        let original = PodInfo::from_pod(full_pod());
        let mut pod = full_pod();
        trim_pod(&mut pod);
        let trimmed = PodInfo::from_pod(pod);
        assert_eq!(trimmed.requests, original.requests);
        assert_eq!(trimmed.non_zero_cpu, original.non_zero_cpu);
        assert_eq!(trimmed.non_zero_memory, original.non_zero_memory);
        assert_eq!(trimmed.host_ports, original.host_ports);
    }

    #[test]
    fn an_assigned_pod_keeps_what_existing_pods_are_read_for() {
        let full = PodInfo::from_pod(full_pod());
        let assigned = assigned_pod(full_pod());
        assert_eq!(assigned.requests, full.requests);
        assert_eq!(
            (assigned.non_zero_cpu, assigned.non_zero_memory),
            (full.non_zero_cpu, full.non_zero_memory)
        );
        assert_eq!(assigned.host_ports, full.host_ports);
        // Only a pod looking for a node reads its node affinity.
        let (affinity, full_affinity) = (assigned.affinity().unwrap(), full.affinity().unwrap());
        assert_eq!(affinity.pod_anti_affinity, full_affinity.pod_anti_affinity);
        assert!(affinity.node_affinity.is_none() && full_affinity.node_affinity.is_some());
        assert_eq!(
            assigned.has_required_anti_affinity(),
            full.has_required_anti_affinity()
        );
        assert_eq!(PodView::labels(&assigned), full.labels());
        assert_eq!(assigned.priority(), full.priority());
        assert!(assigned.start_time().is_some());
        // The ConfigMap and scratch volumes go as for a pending pod.
        assert_eq!(assigned.volumes().len(), 2);
    }

    #[test]
    fn an_assumed_pod_is_kept_as_the_informer_will_confirm_it() {
        let mut pending = full_pod();
        trim_pod(&mut pending);
        let assumed = AssignedPod::from_pod_info(&PodInfo::from_pod(pending));
        assert_eq!(assumed, assigned_pod(full_pod()));
    }

    #[test]
    fn a_pod_without_volumes_or_status_stays_valid() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "t", "emptyDir": {}}]}
        }))
        .unwrap();
        trim_pod(&mut pod);
        assert!(pod.spec.as_ref().unwrap().volumes.is_none());
        assert!(pod.status.is_none());
    }
}
