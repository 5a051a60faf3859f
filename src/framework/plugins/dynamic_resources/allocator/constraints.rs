//! A claim's constraints across its devices (upstream's `constraint.go`): `matchAttribute` (all
//! devices share the attribute's value) and `distinctAttribute` (no two devices do). Constraints
//! are monotonic: once one refuses a device, adding more devices never makes it accept.

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

/// An attribute's value, whatever its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    String(String),
    Int(i64),
    Bool(bool),
    /// semver's minimal form makes string equality exact equality.
    Version(String),
}

fn value(a: &DeviceAttribute) -> Option<Value> {
    if let Some(s) = &a.string {
        Some(Value::String(s.clone()))
    } else if let Some(i) = a.int {
        Some(Value::Int(i))
    } else if let Some(b) = a.bool {
        Some(Value::Bool(b))
    } else {
        a.version.clone().map(Value::Version)
    }
}

/// Upstream's `lookupAttribute`: the fully qualified name, or the id alone when the domain is
/// the driver's.
fn lookup(device: &Device, driver: &str, name: &str) -> Option<Value> {
    let attrs = device.attributes.as_ref()?;
    if let Some(a) = attrs.get(name) {
        return value(a);
    }
    let (domain, id) = name.split_once('/')?;
    if domain != driver {
        return None;
    }
    attrs.get(id).and_then(value)
}

/// Which requests a constraint covers (all of a claim's when it names none).
#[derive(Debug, Clone)]
pub(super) struct Scope(Vec<String>);

impl Scope {
    fn covers(&self, request: &str, sub: Option<&str>) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|r| {
                r == request || sub.is_some_and(|s| r.split_once('/') == Some((request, s)))
            })
    }
}

#[derive(Debug, Clone)]
pub(super) enum Constraint {
    /// The first device's value, and how many devices share it.
    Match {
        scope: Scope,
        attribute: String,
        first: Option<Value>,
        count: usize,
    },
    /// The values taken so far.
    Distinct {
        scope: Scope,
        attribute: String,
        taken: Taken,
    },
}

/// The values a `distinctAttribute` constraint holds.
#[derive(Debug, Clone)]
pub(super) enum Taken {
    /// Every device's, in order (1.37).
    Every(Vec<Value>),
    /// The last device's per request, and how many devices were added (1.36: a request's
    /// earlier devices are forgotten).
    LastPerRequest(Vec<(String, Value)>, usize),
}

impl Constraint {
    pub(super) fn match_attribute(requests: Vec<String>, attribute: String) -> Constraint {
        Constraint::Match {
            scope: Scope(requests),
            attribute,
            first: None,
            count: 0,
        }
    }

    /// `every_device`: the 1.37 bookkeeping.
    pub(super) fn distinct_attribute(
        requests: Vec<String>,
        attribute: String,
        every_device: bool,
    ) -> Constraint {
        Constraint::Distinct {
            scope: Scope(requests),
            attribute,
            taken: if every_device {
                Taken::Every(Vec::new())
            } else {
                Taken::LastPerRequest(Vec::new(), 0)
            },
        }
    }

    /// Whether the device may be added for `request` (`sub`: the subrequest); if so, it is.
    pub(super) fn add(
        &mut self,
        request: &str,
        sub: Option<&str>,
        device: &Device,
        driver: &str,
    ) -> bool {
        match self {
            Constraint::Match {
                scope,
                attribute,
                first,
                count,
            } => {
                if !scope.covers(request, sub) {
                    return true;
                }
                let Some(v) = lookup(device, driver, attribute) else {
                    return false;
                };
                if *count == 0 {
                    *first = Some(v);
                } else if first.as_ref() != Some(&v) {
                    return false;
                }
                *count += 1;
                true
            }
            Constraint::Distinct {
                scope,
                attribute,
                taken,
            } => {
                if !scope.covers(request, sub) {
                    return true;
                }
                let Some(v) = lookup(device, driver, attribute) else {
                    return false;
                };
                match taken {
                    Taken::Every(values) => {
                        if values.contains(&v) {
                            return false;
                        }
                        values.push(v);
                    }
                    Taken::LastPerRequest(values, count) => {
                        if *count > 0 && values.iter().any(|(_, t)| *t == v) {
                            return false;
                        }
                        match values.iter_mut().find(|(r, _)| r == request) {
                            Some(entry) => entry.1 = v,
                            None => values.push((request.to_string(), v)),
                        }
                        *count += 1;
                    }
                }
                true
            }
        }
    }

    /// Undoes the matching successful [`Constraint::add`].
    pub(super) fn remove(&mut self, request: &str, sub: Option<&str>) {
        match self {
            Constraint::Match { scope, count, .. } => {
                if scope.covers(request, sub) {
                    *count = count.saturating_sub(1);
                }
            }
            Constraint::Distinct { scope, taken, .. } => {
                if !scope.covers(request, sub) {
                    return;
                }
                match taken {
                    Taken::Every(values) => {
                        values.pop();
                    }
                    Taken::LastPerRequest(values, count) => {
                        values.retain(|(r, _)| r != request);
                        *count = count.saturating_sub(1);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(name: &str, numa: i64) -> Device {
        serde_json::from_value(json!({"name": name, "attributes": {"numa": {"int": numa}}}))
            .expect("device")
    }

    const DRIVER: &str = "gpu.example.com";

    #[test]
    fn match_attribute_keeps_to_the_first_value() {
        let mut c = Constraint::match_attribute(vec![], format!("{DRIVER}/numa"));
        assert!(c.add("r", None, &device("a", 0), DRIVER));
        assert!(!c.add("r", None, &device("b", 1), DRIVER));
        assert!(c.add("r", None, &device("c", 0), DRIVER));
        // Another domain's attribute is not the driver's.
        let mut other = Constraint::match_attribute(vec![], "other.io/numa".into());
        assert!(!other.add("r", None, &device("a", 0), DRIVER));
        // Requests outside the scope are not affected.
        let mut scoped =
            Constraint::match_attribute(vec!["x".into(), "p/s".into()], format!("{DRIVER}/numa"));
        assert!(scoped.add("r", None, &device("a", 0), DRIVER));
        assert!(scoped.add("p", Some("s"), &device("a", 0), DRIVER));
        assert!(!scoped.add("x", None, &device("b", 1), DRIVER));
        // After the first device is removed, any value can start again.
        let mut c = Constraint::match_attribute(vec![], format!("{DRIVER}/numa"));
        assert!(c.add("r", None, &device("a", 0), DRIVER));
        c.remove("r", None);
        assert!(c.add("r", None, &device("b", 1), DRIVER));
    }

    #[test]
    fn distinct_attribute_remembers_every_device_from_1_37() {
        let attr = format!("{DRIVER}/numa");
        let mut new = Constraint::distinct_attribute(vec![], attr.clone(), true);
        let mut old = Constraint::distinct_attribute(vec![], attr, false);
        for c in [&mut new, &mut old] {
            assert!(c.add("r", None, &device("a", 0), DRIVER));
            assert!(!c.add("r", None, &device("b", 0), DRIVER));
            assert!(c.add("r", None, &device("c", 1), DRIVER));
        }
        // 1.36 kept only the request's last value (1): a third device with 0 is let in.
        assert!(new.add("r", None, &device("d", 2), DRIVER));
        assert!(!new.add("r", None, &device("e", 0), DRIVER));
        assert!(old.add("r", None, &device("e", 0), DRIVER));
    }
}
