//! Binding conditions (`DRADeviceBindingConditions` with `DRAResourceClaimDeviceStatus`, both on):
//! a device whose slice lists `bindingConditions` is ready for its pod only once its driver set
//! those conditions true in the claim's `status.devices`, and failed when one of its
//! `bindingFailureConditions` is true. PreBind waits for them up to `bindingTimeout` after the
//! allocation (upstream's `isClaimReadyForBinding`, `isClaimTimeout`, `isPodReadyForBinding`);
//! Filter treats a failed or timed-out allocation as unavailable, so PostFilter deallocates it.

use std::time::Duration;

use k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, DeviceRequestAllocationResult, ResourceClaim,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How often PreBind looks at the claims again (upstream polls every 5 s).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(5);

fn results(claim: &ResourceClaim) -> &[DeviceRequestAllocationResult] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
}

fn waits(result: &DeviceRequestAllocationResult) -> bool {
    result
        .binding_conditions
        .as_ref()
        .is_some_and(|c| !c.is_empty())
}

/// Whether some device allocated to the claim has binding conditions.
pub(crate) fn has_binding_conditions(claim: &ResourceClaim) -> bool {
    results(claim).iter().any(waits)
}

fn device_status<'a>(
    claim: &'a ResourceClaim,
    r: &DeviceRequestAllocationResult,
) -> Option<&'a AllocatedDeviceStatus> {
    claim
        .status
        .as_ref()?
        .devices
        .as_ref()?
        .iter()
        .find(|d| d.device == r.device && d.driver == r.driver && d.pool == r.pool)
}

/// The condition `kind` of the device's status, if it is true.
fn true_condition<'a>(
    status: &'a AllocatedDeviceStatus,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// Upstream's `isClaimReadyForBinding`: true when every device with binding conditions has them
/// all true (so also when no device has any), an error naming the claim when a failure
/// condition is true.
pub(crate) fn ready(claim: &ResourceClaim) -> Result<bool, String> {
    if claim.status.as_ref().is_none_or(|s| s.allocation.is_none()) {
        return Ok(false);
    }
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    for r in results(claim).iter().filter(|r| waits(r)) {
        let Some(status) = device_status(claim, r) else {
            return Ok(false);
        };
        for kind in r.binding_failure_conditions.iter().flatten() {
            if let Some(c) = true_condition(status, kind) {
                return Err(format!(
                    "device binding failed: claim={name}, reason={}, message={:?}",
                    c.reason, c.message
                ));
            }
        }
        let all_true = r
            .binding_conditions
            .iter()
            .flatten()
            .all(|kind| true_condition(status, kind).is_some());
        if !all_true {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Upstream's `isClaimTimeout`: a device with binding conditions was allocated more than
/// `timeout` before `now`.
pub(crate) fn timed_out(claim: &ResourceClaim, timeout: Duration, now: Timestamp) -> bool {
    let Some(allocated_at) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.allocation_timestamp.as_ref())
    else {
        return false;
    };
    let timeout = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    has_binding_conditions(claim)
        && allocated_at
            .0
            .checked_add(timeout)
            .is_ok_and(|deadline| deadline < now)
}

/// Why the claims are not bound yet, when they are past hope: a failure condition, or the
/// binding timeout passed.
pub(crate) fn failed(claim: &ResourceClaim, timeout: Duration, now: Timestamp) -> Option<String> {
    match ready(claim) {
        Err(e) => Some(e),
        Ok(false) if timed_out(claim, timeout, now) => Some(format!(
            "device binding timeout: claim={}",
            claim.metadata.name.as_deref().unwrap_or_default()
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn claim(conditions: Value, allocated_at: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {},
            "status": {
                "allocation": {"allocationTimestamp": allocated_at, "devices": {"results": [
                    {"request": "r", "driver": "d", "pool": "p", "device": "fabric",
                     "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"]},
                    {"request": "r", "driver": "d", "pool": "p", "device": "plain"}
                ]}},
                "devices": [{"driver": "d", "pool": "p", "device": "fabric", "conditions": conditions}]
            }
        }))
        .expect("claim")
    }

    fn condition(kind: &str, status: &str) -> Value {
        json!({"type": kind, "status": status, "reason": "Driver", "message": "said so",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn ready_failed_and_timed_out() {
        let at = "2026-01-01T00:00:00Z";
        let now = |secs: i64| {
            Timestamp::from_second(at.parse::<Timestamp>().expect("time").as_second() + secs)
                .expect("time")
        };
        let timeout = Duration::from_secs(600);
        let pending = claim(json!([condition("Attached", "False")]), at);
        assert_eq!(ready(&pending), Ok(false));
        assert_eq!(failed(&pending, timeout, now(599)), None);
        assert_eq!(
            failed(&pending, timeout, now(601)).as_deref(),
            Some("device binding timeout: claim=c")
        );
        let attached = claim(json!([condition("Attached", "True")]), at);
        assert_eq!(ready(&attached), Ok(true));
        assert_eq!(failed(&attached, timeout, now(601)), None);
        let broken = claim(
            json!([
                condition("Attached", "False"),
                condition("AttachFailed", "True")
            ]),
            at,
        );
        assert_eq!(
            ready(&broken),
            Err("device binding failed: claim=c, reason=Driver, message=\"said so\"".into())
        );
        // No status for the device yet: not ready.
        let mut silent = pending.clone();
        if let Some(s) = silent.status.as_mut() {
            s.devices = None;
        }
        assert_eq!(ready(&silent), Ok(false));
        assert!(has_binding_conditions(&silent));
    }
}
