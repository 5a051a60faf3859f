//! What DynamicResources does differently at each Kubernetes minor: one row per change, read from
//! upstream's `dynamicresources` plugin and `k8s.io/dynamic-resource-allocation/structured`
//! (its `incubating` allocator, the one the default gates pick) at 1.36.3 and 1.37.2. The plugin
//! and the allocator ask [`Behaviour::has`]; nothing else in the module names a version.

use crate::emulation::Minor;

/// A behaviour that changed at some minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// `DRAFractionalCapacityRange` (beta, on): a capacity `validRange` with fractional bounds
    /// or step is computed in milli-units, and a rounded-up request keeps the step's format
    /// (before: whole units, binary format).
    FractionalCapacityRange,
    /// `DRADeviceTaintRules` (GA, on): the taints of DeviceTaintRules apply to the devices they
    /// select.
    DeviceTaintRules,
    /// PostFilter says nothing when it has no claim to deallocate (before: `no new claims to
    /// deallocate`, and `still not schedulable` when none of the unavailable claims could be).
    QuietPostFilter,
    /// A configuration that covers every request of a claim is written without `requests`, and
    /// a claim configuration naming several requests is copied once (before: once per request).
    ConfigOnce,
    /// `allocationMode: All` counts a device whose remaining capacity is too small (the
    /// allocation then fails) instead of leaving it out, and a capacity request that cannot be
    /// represented is an error instead of a device skipped.
    StrictCapacity,
    /// `distinctAttribute` remembers every device of a request (before: only the last one, so a
    /// third device could repeat the first one's value).
    DistinctAttributeEveryDevice,
    /// The per-claim device limit is checked request by request (`claim C, request R: adding N
    /// devices exceeds the claim limit of 32, with M already accounted for`), and a CEL runtime
    /// error names the device.
    PerRequestLimitMessage,
}

/// The changes and the minor that brought each.
const CHANGES: &[(Change, Minor)] = &[
    (Change::FractionalCapacityRange, Minor::V1_37),
    (Change::DeviceTaintRules, Minor::V1_37),
    (Change::QuietPostFilter, Minor::V1_37),
    (Change::ConfigOnce, Minor::V1_37),
    (Change::StrictCapacity, Minor::V1_37),
    (Change::DistinctAttributeEveryDevice, Minor::V1_37),
    (Change::PerRequestLimitMessage, Minor::V1_37),
];

/// DynamicResources as the kube-scheduler of one minor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Behaviour {
    minor: Minor,
}

impl Behaviour {
    pub(crate) const fn of_minor(minor: Minor) -> Behaviour {
        Behaviour { minor }
    }

    /// Whether `change` is in effect at this minor.
    pub(crate) fn has(self, change: Change) -> bool {
        CHANGES
            .iter()
            .any(|&(c, since)| c == change && self.minor >= since)
    }
}

/// The newest minor, as the scheduler emulates it unless told otherwise at start.
impl Default for Behaviour {
    fn default() -> Self {
        Behaviour::of_minor(Minor::NEWEST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_from_their_minor_on() {
        for &(change, since) in CHANGES {
            for &minor in crate::emulation::SUPPORTED {
                let has = Behaviour::of_minor(minor).has(change);
                assert_eq!(has, minor >= since, "{change:?} at {minor}");
            }
        }
    }
}
