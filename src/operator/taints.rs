//! Pure taint arithmetic for LeafClusterPolicy: add or remove exactly one taint, touching no other.

use k8s_openapi::api::core::v1::Taint;

use crate::api::leaf_cluster_policy::LeafTaint;

/// `key=value:effect`, as kubectl prints taints.
pub fn describe(t: &LeafTaint) -> String {
    if t.value.is_empty() {
        format!("{}:{}", t.key, t.effect)
    } else {
        format!("{}={}:{}", t.key, t.value, t.effect)
    }
}

/// Parses `key=value:effect` / `key:effect` (what [`describe`] writes).
pub fn parse(s: &str) -> Option<LeafTaint> {
    let (kv, effect) = s.rsplit_once(':')?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() || effect.is_empty() {
        return None;
    }
    Some(LeafTaint {
        key: key.into(),
        value: value.into(),
        effect: effect.into(),
    })
}

/// The node taint exactly as the policy wants it.
pub fn to_node_taint(t: &LeafTaint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.clone(),
        time_added: None,
    }
}

/// The node carries exactly `t` (key, value and effect).
pub fn has(current: &[Taint], t: &LeafTaint) -> bool {
    current.iter().any(|c| same(c, t))
}

fn same(c: &Taint, t: &LeafTaint) -> bool {
    c.key == t.key && c.effect == t.effect && c.value.as_deref().unwrap_or("") == t.value
}

/// `current` with `t` added (a taint with the same key and effect but another value is replaced,
/// as the API server allows only one per key and effect); `None` when it is already there.
pub fn with(current: &[Taint], t: &LeafTaint) -> Option<Vec<Taint>> {
    if has(current, t) {
        return None;
    }
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|c| !(c.key == t.key && c.effect == t.effect))
        .cloned()
        .collect();
    out.push(to_node_taint(t));
    Some(out)
}

/// `current` without exactly `t`; `None` when it is not there.
pub fn without(current: &[Taint], t: &LeafTaint) -> Option<Vec<Taint>> {
    if !has(current, t) {
        return None;
    }
    Some(current.iter().filter(|c| !same(c, t)).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(key: &str, value: &str, effect: &str) -> LeafTaint {
        LeafTaint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    fn node(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(String::from),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn adds_once_and_keeps_other_taints() {
        let ours = leaf("kosmos.io/node", "true", "NoSchedule");
        let other = node("dedicated", Some("gpu"), "NoSchedule");
        let added = with(std::slice::from_ref(&other), &ours).unwrap_or_default();
        assert_eq!(added, vec![other.clone(), to_node_taint(&ours)]);
        assert_eq!(with(&added, &ours), None);
    }

    #[test]
    fn replaces_same_key_and_effect_with_another_value() {
        let ours = leaf("kosmos.io/node", "true", "NoSchedule");
        let stale = node("kosmos.io/node", Some("false"), "NoSchedule");
        let other_effect = node("kosmos.io/node", Some("x"), "NoExecute");
        let out = with(&[stale, other_effect.clone()], &ours).unwrap_or_default();
        assert_eq!(out, vec![other_effect, to_node_taint(&ours)]);
    }

    #[test]
    fn removes_only_the_exact_taint() {
        let ours = leaf("kosmos.io/node", "true", "NoSchedule");
        let other = node("kosmos.io/node", Some("true"), "NoExecute");
        let current = vec![other.clone(), to_node_taint(&ours)];
        assert_eq!(without(&current, &ours), Some(vec![other.clone()]));
        assert_eq!(without(std::slice::from_ref(&other), &ours), None);
    }

    #[test]
    fn empty_value_matches_a_missing_value() {
        let ours = leaf("leaf", "", "NoSchedule");
        assert!(has(&[node("leaf", None, "NoSchedule")], &ours));
        assert!(has(&[node("leaf", Some(""), "NoSchedule")], &ours));
        assert_eq!(to_node_taint(&ours).value, None);
    }

    #[test]
    fn describe_and_parse_round_trip() {
        for t in [
            leaf("kosmos.io/node", "true", "NoSchedule"),
            leaf("a", "", "NoExecute"),
        ] {
            assert_eq!(parse(&describe(&t)), Some(t));
        }
        assert_eq!(describe(&leaf("k", "v", "NoSchedule")), "k=v:NoSchedule");
        assert_eq!(parse("nonsense"), None);
    }
}
