//! Upstream 1.36's `ValidateKubeSchedulerConfiguration` (pkg/scheduler/apis/config/validation),
//! component-base's leader-election and client-connection checks, and client-go's leader-election
//! limits, on the defaulted configuration. Per-profile plugin checks live in `effective.rs`.

use std::collections::BTreeMap;

use super::catalog::ExtensionPoint;
use super::error::FieldError;
use super::types::{Config, EffectiveProfile, Extender};

/// client-go `leaderelection.JitterFactor`.
const JITTER_FACTOR: f64 = 1.2;

pub(crate) fn validate(config: &Config, errors: &mut Vec<FieldError>) {
    if config.parallelism <= 0 {
        errors.push(FieldError::new(
            "parallelism",
            format!(
                "should be an integer value greater than zero (got {}); the default is 16",
                config.parallelism
            ),
        ));
    }
    validate_percentage(
        "percentageOfNodesToScore",
        Some(config.percentage_of_nodes_to_score),
        errors,
    );
    if config.pod_initial_backoff_seconds <= 0 {
        errors.push(FieldError::new(
            "podInitialBackoffSeconds",
            format!(
                "must be greater than 0 (got {}); the default is 1",
                config.pod_initial_backoff_seconds
            ),
        ));
    }
    if config.pod_max_backoff_seconds < config.pod_initial_backoff_seconds {
        errors.push(FieldError::new(
            "podMaxBackoffSeconds",
            format!(
                "must be greater than or equal to podInitialBackoffSeconds ({} < {})",
                config.pod_max_backoff_seconds, config.pod_initial_backoff_seconds
            ),
        ));
    }
    if config.client_connection.burst < 0 {
        errors.push(FieldError::new(
            "clientConnection.burst",
            format!(
                "must be non-negative (got {})",
                config.client_connection.burst
            ),
        ));
    }
    validate_leader_election(config, errors);

    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, profile) in config.profiles.iter().enumerate() {
        let path = format!("profiles[{i}].schedulerName");
        if profile.scheduler_name.is_empty() {
            errors.push(FieldError::new(
                &path,
                "required: every profile needs a schedulerName (only a single profile defaults to \"default-scheduler\"); pods choose a profile with spec.schedulerName",
            ));
        } else if let Some(first) = names.get(profile.scheduler_name.as_str()) {
            errors.push(FieldError::new(
                &path,
                format!(
                    "duplicate schedulerName {:?}: profiles[{first}] has it already; every profile needs its own name",
                    profile.scheduler_name
                ),
            ));
        } else {
            names.insert(&profile.scheduler_name, i);
        }
        validate_percentage(
            &format!("profiles[{i}].percentageOfNodesToScore"),
            profile.percentage_of_nodes_to_score,
            errors,
        );
    }
    validate_common_queue_sort(&config.profiles, errors);
    validate_extenders(&config.extenders, errors);
}

fn validate_percentage(path: &str, value: Option<i32>, errors: &mut Vec<FieldError>) {
    if let Some(v) = value
        && !(0..=100).contains(&v)
    {
        errors.push(FieldError::new(
            path,
            format!("{v} is not in the valid range [0-100] (0 means adaptive: 5% to 50% of nodes depending on cluster size)"),
        ));
    }
}

fn validate_leader_election(config: &Config, errors: &mut Vec<FieldError>) {
    let le = &config.leader_election;
    if !le.leader_elect {
        return;
    }
    for (field, d) in [
        ("leaseDuration", le.lease_duration),
        ("renewDeadline", le.renew_deadline),
        ("retryPeriod", le.retry_period),
    ] {
        if d.as_nanos() <= 0 {
            errors.push(FieldError::new(
                format!("leaderElection.{field}"),
                format!("must be greater than zero (got {d})"),
            ));
        }
    }
    if le.lease_duration <= le.renew_deadline {
        errors.push(FieldError::new(
            "leaderElection.leaseDuration",
            format!(
                "must be greater than renewDeadline ({} <= {}); the defaults are 15s and 10s",
                le.lease_duration, le.renew_deadline
            ),
        ));
    }
    if le.retry_period.as_nanos() > 0
        && (le.renew_deadline.as_nanos() as f64)
            <= JITTER_FACTOR * le.retry_period.as_nanos() as f64
    {
        errors.push(FieldError::new(
            "leaderElection.renewDeadline",
            format!(
                "must be greater than retryPeriod × 1.2 (renewDeadline {}, retryPeriod {}); the defaults are 10s and 2s",
                le.renew_deadline, le.retry_period
            ),
        ));
    }
    if le.resource_lock != "leases" {
        errors.push(FieldError::new(
            "leaderElection.resourceLock",
            format!(
                "resourceLock value must be \"leases\" (got {:?}): only Lease objects are supported for leader election",
                le.resource_lock
            ),
        ));
    }
    for (field, v) in [
        ("resourceName", &le.resource_name),
        ("resourceNamespace", &le.resource_namespace),
    ] {
        if v.is_empty() {
            errors.push(FieldError::new(
                format!("leaderElection.{field}"),
                "required",
            ));
        }
    }
}

/// Every profile must use the same queueSort plugin with the same args: the scheduler has one queue.
fn validate_common_queue_sort(profiles: &[EffectiveProfile], errors: &mut Vec<FieldError>) {
    let Some(first) = profiles.first() else {
        return;
    };
    let names = |p: &EffectiveProfile| p.names_at(ExtensionPoint::QueueSort).join(", ");
    let canon = first.at(ExtensionPoint::QueueSort);
    for (i, profile) in profiles.iter().enumerate().skip(1) {
        let this = profile.at(ExtensionPoint::QueueSort);
        let same_plugins = this
            .iter()
            .map(|p| &p.name)
            .eq(canon.iter().map(|p| &p.name));
        if !same_plugins {
            errors.push(FieldError::new(
                format!("profiles[{i}].plugins.queueSort"),
                format!(
                    "must be the same for all profiles (the scheduler has a single queue): profiles[0] uses [{}], this profile uses [{}]",
                    names(first),
                    names(profile)
                ),
            ));
            continue;
        }
        if let Some(sort) = canon.first()
            && profile.args(&sort.name) != first.args(&sort.name)
        {
            errors.push(FieldError::new(
                format!("profiles[{i}].pluginConfig"),
                format!(
                    "the args of queueSort plugin {} must be the same for all profiles (the scheduler has a single queue): they differ from profiles[0]'s",
                    sort.name
                ),
            ));
        }
    }
}

fn validate_extenders(extenders: &[Extender], errors: &mut Vec<FieldError>) {
    let mut binders = 0;
    let mut managed: BTreeMap<&str, ()> = BTreeMap::new();
    for (i, extender) in extenders.iter().enumerate() {
        let path = format!("extenders[{i}]");
        if !extender.prioritize_verb.is_empty() && extender.weight <= 0 {
            errors.push(FieldError::new(
                format!("{path}.weight"),
                format!(
                    "must have a positive weight applied to it (got {}): an extender with prioritizeVerb needs weight >= 1",
                    extender.weight
                ),
            ));
        }
        if !extender.bind_verb.is_empty() {
            binders += 1;
        }
        for (j, resource) in extender.managed_resources.iter().enumerate() {
            let rpath = format!("{path}.managedResources[{j}].name");
            if let Err(reason) = validate_extended_resource_name(&resource.name) {
                errors.push(FieldError::new(&rpath, reason));
            }
            if managed.insert(resource.name.as_str(), ()).is_some() {
                errors.push(FieldError::new(
                    &rpath,
                    format!(
                        "duplicate extender managed resource name {:?}",
                        resource.name
                    ),
                ));
            }
        }
    }
    if binders > 1 {
        errors.push(FieldError::new(
            "extenders",
            format!(
                "found {binders} extenders implementing bind: only one extender can implement bind"
            ),
        ));
    }
}

fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// `validateExtendedResourceName`: a qualified name with a domain prefix outside kubernetes.io.
pub(crate) fn validate_extended_resource_name(name: &str) -> Result<(), String> {
    let (prefix, base) = match name.split_once('/') {
        Some((p, b)) => (Some(p), b),
        None => (None, name),
    };
    let qualified = is_qualified_name_part(base) && prefix.is_none_or(is_dns1123_subdomain);
    if !qualified {
        return Err(format!(
            "{name:?} is not a qualified name: an optional DNS subdomain prefix and '/', then up to 63 alphanumeric characters, '-', '_' or '.'"
        ));
    }
    let native = prefix.is_none() || name.contains("kubernetes.io/");
    if native || name.starts_with("requests.") {
        return Err(format!(
            "{name:?} is an invalid extended resource name: use a domain-prefixed name outside kubernetes.io, such as example.com/gpu"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resource_names() {
        assert!(validate_extended_resource_name("example.com/foo").is_ok());
        assert!(validate_extended_resource_name("foo").is_err());
        assert!(validate_extended_resource_name("kubernetes.io/foo").is_err());
        assert!(validate_extended_resource_name("example.com/-bad").is_err());
        assert!(validate_extended_resource_name("Example.com/foo").is_err());
    }
}
