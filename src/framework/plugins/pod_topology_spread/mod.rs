//! PodTopologySpread: `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule` filter
//! nodes (maxSkew, minDomains, nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys);
//! `ScheduleAnyway` constraints score them. Pods without constraints get the default ones
//! (`defaultingType: System`, or `List` with `defaultConstraints`), with a selector derived from
//! the pod's Services and controller. Upstream's `pkg/scheduler/framework/plugins/podtopologyspread`.

mod common;
mod events;
mod filtering;
mod scoring;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::{Deserialize, Serialize};

use super::names;
use crate::config::FieldError;
use crate::framework::args::{PluginArgs, duplicate, forbidden, invalid, not_supported, required};
use crate::framework::interface::{SignFragment, SignPlugin, Status};
use crate::framework::listers::{
    Listers, REPLICA_SETS, REPLICATION_CONTROLLERS, SERVICES, STATEFUL_SETS,
};
use crate::framework::plugins::helper::{impl_plugin, registration_with_listers};
use crate::framework::registry::{PluginRegistration, policy_rule};
use crate::framework::types::PodInfo;

pub(crate) const SYSTEM_DEFAULTING: &str = "System";
pub(crate) const LIST_DEFAULTING: &str = "List";

/// Upstream's `PodTopologySpreadArgs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct PodTopologySpreadArgs {
    pub default_constraints: Vec<TopologySpreadConstraint>,
    pub defaulting_type: String,
}

impl PluginArgs for PodTopologySpreadArgs {
    const KIND: &'static str = "PodTopologySpreadArgs";

    fn set_defaults(&mut self) {
        if self.defaulting_type.is_empty() {
            self.defaulting_type = SYSTEM_DEFAULTING.to_string();
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let t = self.defaulting_type.as_str();
        if t != SYSTEM_DEFAULTING && t != LIST_DEFAULTING {
            errs.push(not_supported(
                "defaultingType",
                t,
                &[SYSTEM_DEFAULTING, LIST_DEFAULTING],
            ));
        } else if t == SYSTEM_DEFAULTING && !self.default_constraints.is_empty() {
            errs.push(invalid(
                "defaultingType",
                format!("\"{t}\""),
                "when .defaultConstraints are not empty",
            ));
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let p = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                errs.push(invalid(
                    format!("{p}.maxSkew"),
                    c.max_skew,
                    "not in valid range (0, inf)",
                ));
            }
            if c.topology_key.is_empty() {
                errs.push(required(format!("{p}.topologyKey"), "can not be empty"));
            }
            let w = c.when_unsatisfiable.as_str();
            if w != "DoNotSchedule" && w != "ScheduleAnyway" {
                errs.push(not_supported(
                    format!("{p}.whenUnsatisfiable"),
                    w,
                    &["DoNotSchedule", "ScheduleAnyway"],
                ));
            }
            if c.label_selector.is_some() {
                errs.push(forbidden(
                    format!("{p}.labelSelector"),
                    "constraint must not define a selector, as they deduced for each pod",
                ));
            }
            let repeated = self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                errs.push(duplicate(
                    format!("defaultConstraints[{i}]"),
                    format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable),
                ));
            }
        }
        errs
    }
}

/// Upstream's `systemDefaultConstraints`: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway.
pub(crate) fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [
        ("kubernetes.io/hostname", 3),
        ("topology.kubernetes.io/zone", 5),
    ]
    .into_iter()
    .map(|(key, skew)| TopologySpreadConstraint {
        topology_key: key.to_string(),
        when_unsatisfiable: "ScheduleAnyway".to_string(),
        max_skew: skew,
        ..Default::default()
    })
    .collect()
}

/// The PodTopologySpread plugin.
#[derive(Clone)]
pub(crate) struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
    listers: Arc<Listers>,
}

impl PodTopologySpread {
    pub(crate) fn new(args: PodTopologySpreadArgs, listers: Arc<Listers>) -> PodTopologySpread {
        let system_defaulted = args.defaulting_type != LIST_DEFAULTING;
        let default_constraints = if system_defaulted {
            system_default_constraints()
        } else {
            args.default_constraints
        };
        PodTopologySpread {
            default_constraints,
            system_defaulted,
            listers,
        }
    }
}

impl_plugin!(
    PodTopologySpread,
    names::POD_TOPOLOGY_SPREAD,
    [PreFilter, Filter, PreScore, Score],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for PodTopologySpread {
    /// A pod with constraints is not signable: each placement changes the skew other nodes see.
    /// Upstream refuses every pod once default constraints are configured (the default profile's
    /// system defaults); ksched looks closer: the defaults select the pods of the pod's Services
    /// and controller, and a pod without any (a bare pod, a Job's) has no constraints, so the
    /// plugin skips it and it may batch.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let has_own = pod
            .spec()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        if has_own {
            return Err(Status::unschedulable(
                "pods with topology constraints are not signable",
            ));
        }
        for action in [common::DO_NOT_SCHEDULE, common::SCHEDULE_ANYWAY] {
            let defaults = self.constraints(&pod.pod, action).map_err(Status::error)?;
            if !defaults.is_empty() {
                return Err(Status::unschedulable(
                    "pods with default topology constraints are not signable",
                ));
            }
        }
        Ok(Vec::new())
    }
}

pub(crate) fn registration() -> PluginRegistration {
    registration_with_listers(
        PodTopologySpread::EXTENSION_POINTS,
        &[
            &SERVICES,
            &REPLICATION_CONTROLLERS,
            &REPLICA_SETS,
            &STATEFUL_SETS,
        ],
        |args, listers| Ok(PodTopologySpread::new(args, listers)),
    )
    // The owners its default constraints derive a pod's selector from.
    .with_rbac_rules(vec![
        policy_rule(
            &[""],
            &["replicationcontrollers", "services"],
            &["list", "watch"],
        ),
        policy_rule(
            &["apps"],
            &["replicasets", "statefulsets"],
            &["list", "watch"],
        ),
    ])
}
