//! `PodGroup` (`scheduling.x-k8s.io/v1alpha1`): a schema-compatible copy of scheduler-plugins'
//! gang-scheduling resource, so existing PodGroup manifests apply unchanged.
// kube's printcolumn(...) repeats `type_ = ...` per column, which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Label a pod carries to join a PodGroup in its namespace.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// Spec of a `PodGroup`: how many members must be schedulable together, and for how long they
/// wait for each other.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema,
)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    namespaced,
    shortname = "pg",
    shortname = "pgs",
    status = "PodGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PodGroup is a collection of Pod; used for batch workload.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "MinMember", type_ = "integer", json_path = ".spec.minMember"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.running"),
    printcolumn(name = "Succeeded", type_ = "integer", json_path = ".status.succeeded"),
    printcolumn(name = "Failed", type_ = "integer", json_path = ".status.failed"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Minimal number of members (pods) that must be schedulable together before any of them is
    /// bound (at least 1; unset: the group does not gang-schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_member: Option<i32>,
    /// Minimal resources the group needs as a whole, as resource quantities (`cpu` in cores,
    /// `memory` in bytes, ...); pods wait in PreFilter until the cluster has them. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Seconds members wait in Permit for the rest of the group before the attempt fails (default:
    /// Coscheduling's `permitWaitingTimeSeconds`, 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Observed state of a `PodGroup`, written by the Coscheduling plugin's status loop.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// Pending, PreScheduling, Scheduling, Scheduled, Running, Finished, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The object (e.g. a Job) that owns the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Members in phase Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Members in phase Succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Members in phase Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// When a member first reached Permit (the group started scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}
