//! DynamicResources: dynamic resource allocation (DRA) with structured parameters, as upstream's
//! `dynamicresources` plugin of the emulated minor. A pod's ResourceClaims are allocated devices
//! from the ResourceSlices of the node it is scheduled to, and the allocation and reservation are
//! written before the pod is bound: a pod with claims is never bound without them.
//!
//! - [`plugin`]: the extension points (PreEnqueue waits for claims generated from templates;
//!   PreFilter/Filter find an allocation per node; Reserve/Unreserve keep it in flight; PreBind
//!   writes `status.allocation` and `status.reservedFor`, then waits for binding conditions;
//!   PostFilter deallocates; Score prefers earlier `firstAvailable` subrequests);
//! - [`allocator`]: the structured allocator (partitionable devices, consumable capacity,
//!   binding conditions, device taints);
//! - [`binding`]: binding conditions and `bindingTimeout`;
//! - [`cel`]: device selectors;
//! - [`tracker`]: assumed claims and in-flight allocations (shared by all profiles);
//! - [`claims`]: a pod's claims;
//! - [`versions`]: what changed at which minor.
//!
//! What ksched does not implement is refused (UnschedulableAndUnresolvable, naming the feature),
//! never bound: extended resources backed by DRA (`DRAExtendedResource`) on nodes whose device
//! plugin does not provide them. DeviceTaintRules are watched from 1.37 on (GA there; at 1.36 they are off by default, as upstream).

pub(crate) mod allocator;
mod binding;
pub(crate) mod cel;
pub(crate) mod claims;
mod events;
pub(crate) mod plugin;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod tracker;
pub(crate) mod versions;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub(crate) use plugin::DynamicResources;

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, decode, invalid, typed};
use crate::framework::interface::Plugin;
use crate::framework::listers::{
    DEVICE_CLASSES, DEVICE_TAINT_RULES, Informer, RESOURCE_CLAIMS, RESOURCE_SLICES,
};
use crate::framework::registry::{PluginRegistration, policy_rule};
use crate::infra::duration::GoDuration;

/// The kinds DynamicResources reads. ResourceClaimTemplates are not among them: the claims a pod's
/// templates stand for are created by kube-controller-manager and read as ResourceClaims.
pub(crate) const INFORMERS: &[Informer] = &[
    &RESOURCE_CLAIMS,
    &RESOURCE_SLICES,
    &DEVICE_CLASSES,
    &DEVICE_TAINT_RULES,
];

/// Upstream's `DynamicResourcesFilterTimeoutDefault`.
pub(crate) const DEFAULT_FILTER_TIMEOUT: GoDuration = GoDuration::from_secs(10);
/// Upstream's `DynamicResourcesBindingTimeoutDefault`: how long PreBind waits for the binding
/// conditions of allocated devices (DRADeviceBindingConditions is on).
pub(crate) const DEFAULT_BINDING_TIMEOUT: GoDuration = GoDuration::from_secs(600);

/// Upstream's `DynamicResourcesArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub(crate) struct DynamicResourcesArgs {
    /// How long Filter may search one node for devices; 0 means no limit.
    pub filter_timeout: Option<GoDuration>,
    pub binding_timeout: Option<GoDuration>,
}

impl PluginArgs for DynamicResourcesArgs {
    const KIND: &'static str = "DynamicResourcesArgs";

    fn set_defaults(&mut self) {
        self.filter_timeout.get_or_insert(DEFAULT_FILTER_TIMEOUT);
        self.binding_timeout.get_or_insert(DEFAULT_BINDING_TIMEOUT);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(t) = self.filter_timeout
            && t.as_nanos() < 0
        {
            errs.push(invalid(
                "filterTimeout",
                format!("\"{t}\""),
                "must be zero or positive",
            ));
        }
        if let Some(t) = self.binding_timeout
            && t.as_nanos() < GoDuration::from_secs(1).as_nanos()
        {
            errs.push(invalid(
                "bindingTimeout",
                format!("\"{t}\""),
                "must be at least 1 second",
            ));
        }
        errs
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        DynamicResources::EXTENSION_POINTS,
        decode::<DynamicResourcesArgs>,
        |args, handle| {
            let args: DynamicResourcesArgs = typed(args)?;
            let timeout = args
                .filter_timeout
                .and_then(GoDuration::to_std)
                .filter(|t| !t.is_zero());
            let plugin = DynamicResources::new(
                handle.listers.clone(),
                handle.api.clone(),
                handle.dispatcher.clone(),
                timeout,
            );
            let plugin = plugin.at(handle.emulation.minor());
            let plugin = match args.binding_timeout.and_then(GoDuration::to_std) {
                Some(t) => plugin.with_binding_timeout(t),
                None => plugin,
            };
            Ok(Arc::new(plugin) as Arc<dyn Plugin>)
        },
    )
    .with_informers(INFORMERS)
    // Upstream's system:kube-scheduler rules for dynamic resource allocation: claims are read,
    // get a finalizer, and have their allocation and reservation written (the binding
    // subresource authorizes status writes since DRAResourceClaimGranularStatusAuthorization).
    .with_rbac_rules(vec![
        policy_rule(
            &["resource.k8s.io"],
            &["resourceclaims", "resourceclaims/status"],
            &["get", "list", "watch", "update", "patch"],
        ),
        policy_rule(
            &["resource.k8s.io"],
            &["resourceclaims/binding"],
            &["update", "patch"],
        ),
        policy_rule(
            &["resource.k8s.io"],
            &["deviceclasses", "resourceslices"],
            &["get", "list", "watch"],
        ),
    ])
}

#[cfg(test)]
mod tests;
