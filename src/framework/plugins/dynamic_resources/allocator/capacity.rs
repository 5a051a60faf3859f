//! Consumable capacity (upstream's `consumable_capacity.go`): what a request takes of a device's
//! capacities, rounded up to the device's request policy, and whether it still fits beside what
//! is allocated already. Amounts are exact (nano-units) and keep the format of the quantity they
//! come from, so a consumed capacity is written as upstream writes it.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, CapacityRequirements, DeviceCapacity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{self, Format};

const NANO: i128 = 1_000_000_000;
const MILLI: i128 = 1_000_000;

/// A quantity: its exact amount and the format it is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Amount {
    pub nanos: i128,
    pub format: Format,
}

impl Amount {
    /// A quantity from the API; one that does not parse (the API server validated it) is zero.
    pub(crate) fn of(q: &Quantity) -> Amount {
        Amount {
            nanos: quantity::parse(&q.0).map_or(0, quantity::Parsed::nanos),
            format: quantity::format_of(&q.0),
        }
    }

    fn units(value: i128, format: Format) -> Amount {
        Amount {
            nanos: value * NANO,
            format,
        }
    }

    /// Upstream's `Value()`: whole units, rounded up.
    fn value(self) -> i128 {
        i128::from(quantity::Parsed::from_nanos(self.nanos).value())
    }

    /// Upstream's lossless `MilliValue()`, if there is one.
    fn exact_milli(self) -> Option<i128> {
        (self.nanos % MILLI == 0).then_some(self.nanos / MILLI)
    }

    pub(crate) fn to_quantity(self) -> Quantity {
        Quantity(quantity::to_string(self.nanos, self.format))
    }
}

/// Capacity per name (`domain/name` or a name of the driver's domain), in nano-units.
pub(crate) type Consumed = BTreeMap<String, i128>;

/// Adds `b` to `a`.
pub(crate) fn add(a: &mut Consumed, b: &Consumed) {
    for (name, v) in b {
        *a.entry(name.clone()).or_default() += v;
    }
}

/// Takes `b` off `a` (names `a` does not have stay absent).
pub(crate) fn sub(a: &mut Consumed, b: &Consumed) {
    for (name, v) in b {
        if let Some(x) = a.get_mut(name) {
            *x -= v;
        }
    }
}

/// Why a capacity request cannot be computed (with [`super::super::versions::Change::StrictCapacity`]
/// an error for the whole attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapacityError(pub String);

/// How capacities are computed at the emulated minor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rules {
    /// `DRAFractionalCapacityRange`.
    pub fractional: bool,
    /// Unrepresentable or negative amounts are errors (1.37); before, they were not checked.
    pub strict: bool,
}

fn requested<'a>(request: Option<&'a CapacityRequirements>, name: &str) -> Option<&'a Quantity> {
    request?.requests.as_ref()?.get(name)
}

/// Upstream's `CmpRequestOverCapacity`: whether `request` fits the device's `capacity` beside
/// what is `allocated` and what this search is `allocating` on it. `Ok(false)` skips the device;
/// an error (only with `rules.strict`) aborts the attempt.
pub(crate) fn fits(
    allocated: Option<&Consumed>,
    request: Option<&CapacityRequirements>,
    capacity: &BTreeMap<String, DeviceCapacity>,
    allocating: Option<&Consumed>,
    rules: Rules,
) -> Result<bool, CapacityError> {
    let asks_for_missing = request
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|reqs| reqs.keys().any(|name| !capacity.contains_key(name)));
    if asks_for_missing {
        return Ok(false);
    }
    let mut consumed = BTreeMap::new();
    for (name, cap) in capacity {
        let amount = consumed_amount(requested(request, name), cap, rules)
            .map_err(|e| CapacityError(format!("capacity {name:?}: {e}")))?;
        if rules.strict && amount.nanos < 0 {
            return Err(CapacityError(format!(
                "capacity {name:?}: capacity value is negative"
            )));
        }
        consumed.insert(name, amount);
    }
    for (name, cap) in capacity {
        let amount = consumed[name];
        if violates_policy(amount, cap.request_policy.as_ref(), rules.fractional) {
            return Ok(false);
        }
        let total = amount.nanos
            + allocated.and_then(|a| a.get(name)).copied().unwrap_or(0)
            + allocating.and_then(|a| a.get(name)).copied().unwrap_or(0);
        if total > Amount::of(&cap.value).nanos {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Upstream's `GetConsumedCapacityFromRequest`: what the request takes of each capacity.
pub(crate) fn consumed_by(
    request: Option<&CapacityRequirements>,
    capacity: &BTreeMap<String, DeviceCapacity>,
    rules: Rules,
) -> Result<BTreeMap<String, Amount>, CapacityError> {
    capacity
        .iter()
        .map(|(name, cap)| {
            consumed_amount(requested(request, name), cap, rules)
                .map(|a| (name.clone(), a))
                .map_err(|e| CapacityError(format!("capacity {name:?}: {e}")))
        })
        .collect()
}

/// Upstream's `calculateConsumedCapacity`.
fn consumed_amount(
    requested: Option<&Quantity>,
    cap: &DeviceCapacity,
    rules: Rules,
) -> Result<Amount, String> {
    let policy = cap.request_policy.as_ref();
    let Some(requested) = requested.map(Amount::of) else {
        // Nothing requested: the policy's default, else all of it.
        return Ok(Amount::of(
            policy
                .and_then(|p| p.default.as_ref())
                .unwrap_or(&cap.value),
        ));
    };
    let Some(policy) = policy else {
        return Ok(requested);
    };
    if let Some(range) = policy.valid_range.as_ref() {
        return round_up_range(requested, Amount::of(&range.min), range, rules);
    }
    if let Some(values) = &policy.valid_values {
        return Ok(values
            .iter()
            .map(Amount::of)
            .find(|v| requested.nanos <= v.nanos)
            .unwrap_or(requested));
    }
    Ok(requested)
}

/// Upstream's `roundUpRange`: at least `min`, and on a step from `min` when there is a step.
fn round_up_range(
    requested: Amount,
    min: Amount,
    range: &CapacityRequestPolicyRange,
    rules: Rules,
) -> Result<Amount, String> {
    if requested.nanos < min.nanos {
        return Ok(min);
    }
    let Some(step) = range.step.as_ref().map(Amount::of) else {
        return Ok(requested);
    };
    if use_milli(range, rules.fractional) {
        let Some(req) = requested.exact_milli() else {
            return Err(format!(
                "capacity request cannot be represented in the device's range arithmetic: request {} is not a representable milli value",
                requested.to_quantity().0
            ));
        };
        let (step_m, min_m) = (
            step.exact_milli().unwrap_or(1),
            min.exact_milli().unwrap_or(0),
        );
        let val = min_m + step_m * div_ceil(req - min_m, step_m);
        if val > i128::from(i64::MAX) {
            return Err(format!(
                "capacity request cannot be represented in the device's range arithmetic: rounding request {} up to the next step passes the milli-value range",
                requested.to_quantity().0
            ));
        }
        return Ok(Amount {
            nanos: val * MILLI,
            format: step.format,
        });
    }
    if rules.strict && requested.nanos > i128::from(i64::MAX) * NANO {
        return Err(format!(
            "capacity request cannot be represented in the device's range arithmetic: request {} exceeds MaxInt64",
            requested.to_quantity().0
        ));
    }
    let (req, step_v, min_v) = (requested.value(), step.value(), min.value());
    let val = min_v + step_v * div_ceil(req - min_v, step_v);
    if rules.strict && min_v >= 0 && val > i128::from(i64::MAX) {
        return Err(format!(
            "capacity request cannot be represented in the device's range arithmetic: rounding request {} up to the next step passes MaxInt64",
            requested.to_quantity().0
        ));
    }
    // 1.36 wrote the result in binary format; 1.37 in the step's.
    let format = if rules.strict {
        step.format
    } else {
        Format::BinarySI
    };
    Ok(Amount::units(val, format))
}

/// `n / d` rounded up for `n >= 0`; a zero step (refused by validation) takes no steps.
fn div_ceil(n: i128, d: i128) -> i128 {
    if d <= 0 {
        return 0;
    }
    n / d + i128::from(n % d != 0)
}

/// Upstream's `useMilli`: with fractional ranges on, when every bound is a whole number of
/// milli-units and the step is at least one.
fn use_milli(range: &CapacityRequestPolicyRange, fractional: bool) -> bool {
    if !fractional {
        return false;
    }
    let exact = [Some(&range.min), range.max.as_ref(), range.step.as_ref()]
        .into_iter()
        .flatten()
        .all(|q| Amount::of(q).exact_milli().is_some());
    exact
        && range
            .step
            .as_ref()
            .is_none_or(|s| Amount::of(s).exact_milli().is_some_and(|m| m >= 1))
}

/// Upstream's `violatesPolicy`.
fn violates_policy(
    amount: Amount,
    policy: Option<&CapacityRequestPolicy>,
    fractional: bool,
) -> bool {
    let Some(policy) = policy else {
        return false;
    };
    if policy
        .default
        .as_ref()
        .is_some_and(|d| Amount::of(d).nanos == amount.nanos)
    {
        return false;
    }
    if let Some(range) = &policy.valid_range {
        if range
            .max
            .as_ref()
            .is_some_and(|max| amount.nanos > Amount::of(max).nanos)
        {
            return true;
        }
        let Some(step) = range.step.as_ref().map(Amount::of) else {
            return false;
        };
        let min = Amount::of(&range.min);
        let (requested, step, min) = if use_milli(range, fractional) {
            match amount.exact_milli() {
                Some(r) => (
                    r,
                    step.exact_milli().unwrap_or(1),
                    min.exact_milli().unwrap_or(0),
                ),
                None => return true,
            }
        } else {
            (amount.value(), step.value(), min.value())
        };
        return step > 0 && (requested - min) % step != 0;
    }
    if let Some(values) = policy.valid_values.as_ref().filter(|v| !v.is_empty()) {
        return !values.iter().any(|v| Amount::of(v).nanos == amount.nanos);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn capacity(v: serde_json::Value) -> BTreeMap<String, DeviceCapacity> {
        serde_json::from_value(v).expect("capacity")
    }

    fn request(v: serde_json::Value) -> CapacityRequirements {
        serde_json::from_value(json!({ "requests": v })).expect("request")
    }

    const OLD: Rules = Rules {
        fractional: false,
        strict: false,
    };
    const NEW: Rules = Rules {
        fractional: true,
        strict: true,
    };

    fn consumed(req: serde_json::Value, cap: serde_json::Value, rules: Rules) -> String {
        let c = consumed_by(Some(&request(req)), &capacity(cap), rules).expect("consumed");
        c.values()
            .map(|a| format!("{}/{:?}", quantity::to_string(a.nanos, a.format), a.format))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn requests_are_rounded_up_to_the_policy() {
        let ranged = json!({"memory": {"value": "40Gi", "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi", "step": "2Gi"}}}});
        let cases = [
            (
                "nothing requested: the default",
                json!({}),
                ranged.clone(),
                "1Gi/BinarySI",
            ),
            (
                "below the minimum: the minimum",
                json!({"memory": "100Mi"}),
                ranged.clone(),
                "1Gi/BinarySI",
            ),
            (
                "between steps: the next step",
                json!({"memory": "2Gi"}),
                ranged.clone(),
                "3Gi/BinarySI",
            ),
            (
                "on a step: as asked",
                json!({"memory": "5Gi"}),
                ranged,
                "5Gi/BinarySI",
            ),
            (
                "valid values: the next one up",
                json!({"memory": "3Gi"}),
                json!({"memory": {"value": "40Gi", "requestPolicy": {"validValues": ["2Gi", "4Gi", "8Gi"]}}}),
                "4Gi/BinarySI",
            ),
            (
                "no policy: as asked, no request: all of it",
                json!({"memory": "3Gi"}),
                json!({"memory": {"value": "40Gi"}, "cores": {"value": "8"}}),
                "8/DecimalSI,3Gi/BinarySI",
            ),
        ];
        for (name, req, cap, want) in cases {
            assert_eq!(
                consumed(req.clone(), cap.clone(), OLD),
                want,
                "{name} (1.36)"
            );
            assert_eq!(consumed(req, cap, NEW), want, "{name} (1.37)");
        }
    }

    #[test]
    fn fractional_ranges_are_exact_from_1_37() {
        let cap = json!({"share": {"value": "1", "requestPolicy": {
            "validRange": {"min": "100m", "step": "100m", "max": "1"}}}});
        // 1.37: 250m rounds up to 300m in milli-units, in the step's format.
        assert_eq!(
            consumed(json!({"share": "250m"}), cap.clone(), NEW),
            "300m/DecimalSI"
        );
        // 1.36: whole units (250m, the minimum and the step are all Value() 1), written in
        // binary format.
        assert_eq!(
            consumed(json!({"share": "250m"}), cap.clone(), OLD),
            "1/BinarySI"
        );
        // A whole result is written as units.
        assert_eq!(
            consumed(json!({"share": "950m"}), cap.clone(), NEW),
            "1/DecimalSI"
        );
        let caps = capacity(cap);
        // 300m fits in 1.37 beside 600m allocated; 1.36 takes a whole unit, more than is left.
        let allocated: Consumed = [("share".to_string(), 600 * MILLI)].into();
        let req = request(json!({"share": "250m"}));
        assert_eq!(
            fits(Some(&allocated), Some(&req), &caps, None, NEW),
            Ok(true)
        );
        assert_eq!(
            fits(Some(&allocated), Some(&req), &caps, None, OLD),
            Ok(false)
        );
        // A request finer than milli-units cannot be computed in 1.37.
        let fine = request(json!({"share": "250001u"}));
        assert!(fits(None, Some(&fine), &caps, None, NEW).is_err());
    }

    #[test]
    fn fitting_counts_allocated_and_allocating_capacity() {
        let caps = capacity(json!({"memory": {"value": "10Gi"}}));
        let gi = |n: i128| n * (1 << 30) * NANO;
        let req = request(json!({"memory": "4Gi"}));
        let allocated: Consumed = [("memory".to_string(), gi(4))].into();
        let allocating: Consumed = [("memory".to_string(), gi(2))].into();
        for rules in [OLD, NEW] {
            assert_eq!(
                fits(Some(&allocated), Some(&req), &caps, None, rules),
                Ok(true)
            );
            assert_eq!(
                fits(
                    Some(&allocated),
                    Some(&req),
                    &caps,
                    Some(&allocating),
                    rules
                ),
                Ok(true)
            );
            let more: Consumed = [("memory".to_string(), gi(3))].into();
            assert_eq!(
                fits(Some(&allocated), Some(&req), &caps, Some(&more), rules),
                Ok(false)
            );
            // A capacity the device does not have: not this device.
            let other = request(json!({"cores": "1"}));
            assert_eq!(fits(None, Some(&other), &caps, None, rules), Ok(false));
        }
        // A request outside the policy does not fit.
        let policed = capacity(
            json!({"memory": {"value": "10Gi", "requestPolicy": {"validValues": ["1Gi", "2Gi"]}}}),
        );
        assert_eq!(fits(None, Some(&req), &policed, None, NEW), Ok(false));
    }

    #[test]
    fn consumed_capacity_adds_and_subtracts() {
        let mut a: Consumed = [("x".to_string(), 5)].into();
        add(&mut a, &[("x".to_string(), 2), ("y".to_string(), 1)].into());
        assert_eq!(a, [("x".to_string(), 7), ("y".to_string(), 1)].into());
        sub(&mut a, &[("x".to_string(), 7), ("z".to_string(), 1)].into());
        assert_eq!(a, [("x".to_string(), 0), ("y".to_string(), 1)].into());
    }
}
