//! Pure taint ownership for LeafClusterPolicies: which taints the operator added (recorded on the
//! node, per policy), which policy keeps a node that several select, and the one write that brings a
//! node where it should be.
//!
//! The rule: the operator removes or changes only a taint it added itself. Each node records what
//! it added in the annotation [`OWNED_TAINTS_ANNOTATION`] (`{"policy": "key=value:effect"}`), written
//! in the same update as the taints (with the node's resourceVersion as precondition). A node's
//! `spec.taints` is an atomic list for server-side apply (`+listType=atomic`), so a field manager
//! cannot own single entries of it; an annotation can say exactly which entry is whose.
//!
//! Several policies selecting one node: the oldest (creationTimestamp, then name) keeps it. A newer
//! policy *conflicts* with an older one on a node when their taints differ (the node would carry a
//! taint that the other's profiles do not tolerate) or when both manage their taint (two owners of
//! one taint); it then leaves the node alone and reports `Conflict`. Among the policies that do not
//! conflict, the oldest that manages its taint is the node's *writer*: the only one that adds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};

use crate::api::leaf_cluster_policy::LeafTaint;

/// Node annotation: the taints the operator added to this node, by LeafClusterPolicy name, as a
/// JSON object `{"policy": "key=value:effect"}`.
pub(crate) const OWNED_TAINTS_ANNOTATION: &str = "ksched.io/leaf-taints";

/// `key=value:effect`, as kubectl prints taints.
pub(crate) fn describe(t: &LeafTaint) -> String {
    if t.value.is_empty() {
        format!("{}:{}", t.key, t.effect)
    } else {
        format!("{}={}:{}", t.key, t.value, t.effect)
    }
}

/// Parses `key=value:effect` / `key:effect` (what [`describe`] writes).
pub(crate) fn parse(s: &str) -> Option<LeafTaint> {
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
pub(crate) fn to_node_taint(t: &LeafTaint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.clone(),
        time_added: None,
    }
}

/// The node carries exactly `t` (key, value and effect).
pub(crate) fn has(current: &[Taint], t: &LeafTaint) -> bool {
    current.iter().any(|c| same(c, t))
}

fn same(c: &Taint, t: &LeafTaint) -> bool {
    c.key == t.key && c.effect == t.effect && c.value.as_deref().unwrap_or("") == t.value
}

/// A taint with `t`'s key and effect but another value: the API server allows one per key and
/// effect, so `t` cannot be added next to it.
fn same_slot<'a>(current: &'a [Taint], t: &LeafTaint) -> Option<&'a Taint> {
    current
        .iter()
        .find(|c| c.key == t.key && c.effect == t.effect && !same(c, t))
}

/// What the operator added to one node, by policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Records(pub BTreeMap<String, LeafTaint>);

impl Records {
    /// The records in a node's annotations. An annotation that does not parse (edited by hand)
    /// counts as no record at all: the operator then owns nothing on the node and removes nothing.
    pub(crate) fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Records, String> {
        let Some(raw) = annotations.get(OWNED_TAINTS_ANNOTATION) else {
            return Ok(Records::default());
        };
        let map: BTreeMap<String, String> = serde_json::from_str(raw)
            .map_err(|e| format!("annotation {OWNED_TAINTS_ANNOTATION}: {e}"))?;
        map.into_iter()
            .map(|(policy, t)| {
                parse(&t)
                    .map(|t| (policy, t))
                    .ok_or_else(|| format!("annotation {OWNED_TAINTS_ANNOTATION}: taint {t:?}"))
            })
            .collect::<Result<_, _>>()
            .map(Records)
    }

    /// The annotation's value; `None` when nothing is recorded (the annotation goes).
    pub(crate) fn to_annotation(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let map: BTreeMap<&str, String> = self
            .0
            .iter()
            .map(|(p, t)| (p.as_str(), describe(t)))
            .collect();
        serde_json::to_string(&map).ok()
    }

    /// Some policy recorded exactly `t`.
    fn holds(&self, t: &LeafTaint) -> bool {
        self.0.values().any(|r| r == t)
    }
}

/// Which nodes a policy claims.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Claim<'a> {
    /// The nodes its selector matches.
    Selector(&'a Selector),
    /// An invalid policy changes nothing: it keeps exactly the nodes where it has a record.
    Frozen,
}

/// One live (not deleting) LeafClusterPolicy, as the planner sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claimant<'a> {
    pub name: &'a str,
    pub created: Option<Timestamp>,
    pub claim: Claim<'a>,
    pub taint: &'a LeafTaint,
    pub manage: bool,
}

impl Claimant<'_> {
    fn matches(&self, node: &NodeView<'_>) -> bool {
        match self.claim {
            Claim::Selector(s) => s.matches(node.labels),
            Claim::Frozen => node.records.0.contains_key(self.name),
        }
    }

    /// Older first: creation time, then name (a policy without a creation time sorts last).
    fn age_key(&self) -> (bool, Option<Timestamp>, &str) {
        (self.created.is_none(), self.created, self.name)
    }

    fn conflicts_with(&self, older: &Claimant<'_>) -> bool {
        (self.manage && older.manage) || self.taint != older.taint
    }
}

/// One node, as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct NodeView<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub records: Records,
}

/// How one policy stands on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The policy does not select the node.
    NotSelected,
    /// Selected; the policy's taint goes on this node by this policy.
    Writer,
    /// Selected, no conflict, and the policy writes nothing here (`manageTaint: false`, or an
    /// older policy that manages the same taint writes it).
    Selected,
    /// Selected, but the older policy `with` keeps the node.
    Conflict { with: String },
}

/// How every claimant stands on `node`, and its writer.
fn standings<'a>(node: &NodeView<'_>, claimants: &[Claimant<'a>]) -> Vec<(&'a str, Standing)> {
    let mut selecting: Vec<&Claimant<'a>> = claimants.iter().filter(|c| c.matches(node)).collect();
    selecting.sort_by(|a, b| a.age_key().cmp(&b.age_key()));
    let mut accepted: Vec<&Claimant<'a>> = Vec::new();
    let mut out = Vec::new();
    for c in selecting {
        match accepted.iter().find(|older| c.conflicts_with(older)) {
            Some(older) => out.push((
                c.name,
                Standing::Conflict {
                    with: older.name.to_string(),
                },
            )),
            None => accepted.push(c),
        }
    }
    let writer = accepted.iter().find(|c| c.manage).map(|c| c.name);
    for c in accepted {
        let standing = if Some(c.name) == writer {
            Standing::Writer
        } else {
            Standing::Selected
        };
        out.push((c.name, standing));
    }
    out
}

/// The writer of `node` among `claimants`, if any.
fn writer<'a, 'b>(node: &NodeView<'_>, claimants: &'b [Claimant<'a>]) -> Option<&'b Claimant<'a>> {
    let name = standings(node, claimants)
        .into_iter()
        .find(|(_, s)| *s == Standing::Writer)?
        .0;
    claimants.iter().find(|c| c.name == name)
}

/// New taints and records for one node: the single write that brings it where it should be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeChange {
    pub taints: Vec<Taint>,
    pub records: Records,
}

/// What one policy makes of one node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodePlan {
    pub standing: Standing,
    /// The write to make, when one is needed.
    pub change: Option<NodeChange>,
    /// The writer cannot add its taint: this taint (same key and effect, another value, not added
    /// by the operator) is in the way.
    pub blocked_by: Option<Taint>,
    /// The node carries the policy's taint (before or after `change`).
    pub tainted: bool,
    /// ... and the operator did not add it (someone else did, before or after).
    pub preexisting: bool,
}

/// What policy `me` does on `node`, given every live policy (`claimants`, `me` among them unless it
/// is being deleted). `me_taint` is `me`'s taint (also when it is being deleted).
///
/// - the node's writer adds its taint (unless the node carries it already: then it is pre-existing
///   and stays someone else's), takes over records of the same taint from other policies, and
///   removes every other taint the operator recorded for a policy that does not keep this node;
/// - any other policy with a record here releases it: handed over to the writer when the writer
///   wants the very same taint (the taint stays), otherwise the taint is removed (only that exact
///   taint, and only when still there).
pub(crate) fn plan_node(
    me: &str,
    me_taint: &LeafTaint,
    node: &NodeView<'_>,
    claimants: &[Claimant<'_>],
) -> NodePlan {
    let standing = standings(node, claimants)
        .into_iter()
        .find(|(n, _)| *n == me)
        .map_or(Standing::NotSelected, |(_, s)| s);
    let mut taints = node.taints.to_vec();
    let mut records = node.records.clone();
    let mut blocked_by = None;

    if standing == Standing::Writer {
        for (policy, t) in &node.records.0 {
            if t == me_taint {
                records.0.remove(policy);
                records.0.insert(me.to_string(), t.clone());
            } else {
                records.0.remove(policy);
                taints.retain(|c| !same(c, t));
            }
        }
        if !has(&taints, me_taint) {
            match same_slot(&taints, me_taint) {
                Some(other) => blocked_by = Some(other.clone()),
                None => {
                    taints.push(to_node_taint(me_taint));
                    records.0.insert(me.to_string(), me_taint.clone());
                }
            }
        }
    } else if let Some(mine) = node.records.0.get(me) {
        records.0.remove(me);
        match writer(node, claimants) {
            Some(w) if w.taint == mine => {
                records.0.insert(w.name.to_string(), mine.clone());
            }
            _ => taints.retain(|c| !same(c, mine)),
        }
    }

    let changed = taints != node.taints || records != node.records;
    NodePlan {
        tainted: has(&taints, me_taint),
        preexisting: has(&taints, me_taint) && !records.holds(me_taint),
        standing,
        change: changed.then_some(NodeChange { taints, records }),
        blocked_by,
    }
}

/// The node without any taint the operator recorded (for any policy) and without records: what an
/// uninstall leaves. A taint it did not add (not recorded) stays.
pub(crate) fn release_all(node: &NodeView<'_>) -> NodePlan {
    let mut taints = node.taints.to_vec();
    for t in node.records.0.values() {
        taints.retain(|c| !same(c, t));
    }
    let records = Records::default();
    let changed = taints != node.taints || records != node.records;
    NodePlan {
        standing: Standing::NotSelected,
        change: changed.then_some(NodeChange { taints, records }),
        blocked_by: None,
        tainted: false,
        preexisting: false,
    }
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

    fn kosmos() -> LeafTaint {
        leaf("kosmos.io/node", "true", "NoSchedule")
    }

    fn node_taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(String::from),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn sel(k: &str, v: &str) -> Selector {
        Selector::from_iter([(k.to_string(), v.to_string())])
    }

    fn at(second: i64) -> Option<Timestamp> {
        Timestamp::from_second(1_800_000_000 + second).ok()
    }

    fn records(entries: &[(&str, LeafTaint)]) -> Records {
        Records(
            entries
                .iter()
                .map(|(p, t)| (p.to_string(), t.clone()))
                .collect(),
        )
    }

    struct Node {
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        records: Records,
    }

    impl Node {
        fn new(labels: &[(&str, &str)], taints: Vec<Taint>, records: Records) -> Node {
            Node {
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                taints,
                records,
            }
        }
        fn view(&self) -> NodeView<'_> {
            NodeView {
                labels: &self.labels,
                taints: &self.taints,
                records: self.records.clone(),
            }
        }
    }

    fn claimant<'a>(
        name: &'a str,
        second: i64,
        selector: &'a Selector,
        taint: &'a LeafTaint,
    ) -> Claimant<'a> {
        Claimant {
            name,
            created: at(second),
            claim: Claim::Selector(selector),
            taint,
            manage: true,
        }
    }

    /// The plan of policy `p` (selector `kosmos.io/node=true`, Kosmos's taint), alone in the
    /// cluster, for a node with `labels`, `taints` and `recorded`; `live: false` as if `p` were being
    /// deleted.
    fn plan_alone(
        labels: &[(&str, &str)],
        taints: Vec<Taint>,
        recorded: Records,
        live: bool,
    ) -> NodePlan {
        let s = sel("kosmos.io/node", "true");
        let t = kosmos();
        let n = Node::new(labels, taints, recorded);
        let cs = [claimant("p", 0, &s, &t)];
        plan_node("p", &t, &n.view(), if live { &cs } else { &[] })
    }

    const LEAF: &[(&str, &str)] = &[("kosmos.io/node", "true")];

    #[test]
    fn the_writer_adds_its_taint_and_records_it_keeping_other_taints() {
        let t = kosmos();
        let other = node_taint("dedicated", Some("gpu"), "NoSchedule");
        let plan = plan_alone(LEAF, vec![other.clone()], Records::default(), true);
        assert_eq!(plan.standing, Standing::Writer);
        assert!(plan.tainted && !plan.preexisting);
        let change = plan.change.expect("a write");
        assert_eq!(change.taints, vec![other, to_node_taint(&t)]);
        assert_eq!(change.records, records(&[("p", t)]));
    }

    #[test]
    fn a_taint_that_was_there_is_preexisting_and_never_recorded_nor_removed() {
        let there = vec![to_node_taint(&kosmos())];
        let plan = plan_alone(LEAF, there.clone(), Records::default(), true);
        assert_eq!(plan.change, None);
        assert!(plan.tainted && plan.preexisting);
        // The node stops matching, or the policy is deleted: still nothing.
        assert_eq!(
            plan_alone(&[], there.clone(), Records::default(), true).change,
            None
        );
        assert_eq!(
            plan_alone(LEAF, there, Records::default(), false).change,
            None
        );
    }

    #[test]
    fn a_recorded_taint_is_removed_when_the_node_stops_matching_or_the_policy_goes() {
        let t = kosmos();
        let other = node_taint("x", None, "NoExecute");
        let taints = vec![other.clone(), to_node_taint(&t)];
        for (labels, live) in [(&[][..], true), (LEAF, false)] {
            let change = plan_alone(labels, taints.clone(), records(&[("p", t.clone())]), live)
                .change
                .expect("write");
            assert_eq!(change.taints, vec![other.clone()]);
            assert_eq!(change.records.to_annotation(), None);
        }
    }

    #[test]
    fn a_changed_taint_replaces_only_the_recorded_one() {
        let s = sel("kosmos.io/node", "true");
        let old = kosmos();
        let new = leaf("leaf.example.com/cluster", "", "NoExecute");
        let n = Node::new(
            &[("kosmos.io/node", "true")],
            vec![to_node_taint(&old)],
            records(&[("p", old.clone())]),
        );
        let cs = [claimant("p", 0, &s, &new)];
        let change = plan_node("p", &new, &n.view(), &cs).change.expect("write");
        assert_eq!(change.taints, vec![to_node_taint(&new)]);
        assert_eq!(change.records, records(&[("p", new)]));
    }

    #[test]
    fn a_foreign_taint_with_the_same_key_and_effect_blocks_and_is_left_alone() {
        let foreign = node_taint("kosmos.io/node", Some("false"), "NoSchedule");
        let plan = plan_alone(LEAF, vec![foreign.clone()], Records::default(), true);
        assert_eq!(plan.change, None);
        assert_eq!(plan.blocked_by, Some(foreign));
        assert!(!plan.tainted);
    }

    #[test]
    fn someone_removing_the_recorded_taint_gets_it_back() {
        let t = kosmos();
        let change = plan_alone(LEAF, vec![], records(&[("p", t.clone())]), true)
            .change
            .expect("write");
        assert_eq!(change.taints, vec![to_node_taint(&t)]);
        assert_eq!(change.records, records(&[("p", t)]));
    }

    #[test]
    fn overlapping_policies_the_older_keeps_the_node_and_the_newer_writes_nothing() {
        let leaves = sel("kosmos.io/node", "true");
        let everything_x = sel("zone", "x");
        let a_taint = kosmos();
        let b_taint = leaf("b.example.com/leaf", "", "NoSchedule");
        let n = Node::new(
            &[("kosmos.io/node", "true"), ("zone", "x")],
            vec![to_node_taint(&a_taint)],
            records(&[("a", a_taint.clone())]),
        );
        // Different taints, and (second case) the same taint managed by both.
        for b_t in [&b_taint, &a_taint] {
            let cs = [
                claimant("b", 10, &everything_x, b_t),
                claimant("a", 0, &leaves, &a_taint),
            ];
            let a = plan_node("a", &a_taint, &n.view(), &cs);
            assert_eq!(a.standing, Standing::Writer);
            assert_eq!(a.change, None);
            let b = plan_node("b", b_t, &n.view(), &cs);
            assert_eq!(
                b.standing,
                Standing::Conflict {
                    with: "a".to_string()
                }
            );
            assert_eq!(b.change, None, "the newer policy never writes");
        }
        // Same taint, the newer does not manage it: no conflict, it just rides along.
        let mut b = claimant("b", 10, &everything_x, &a_taint);
        b.manage = false;
        let cs = [b, claimant("a", 0, &leaves, &a_taint)];
        let plan = plan_node("b", &a_taint, &n.view(), &cs);
        assert_eq!(plan.standing, Standing::Selected);
        assert_eq!(plan.change, None);
        assert!(plan.tainted && !plan.preexisting);
    }

    #[test]
    fn a_policy_losing_a_node_hands_its_record_to_the_writer_of_the_same_taint() {
        let a_sel = sel("kosmos.io/node", "true");
        let b_sel = sel("zone", "x");
        let t = kosmos();
        // b added the taint before a's selector came to match the node; a is older.
        let n = Node::new(
            &[("kosmos.io/node", "true"), ("zone", "x")],
            vec![to_node_taint(&t)],
            records(&[("b", t.clone())]),
        );
        let cs = [claimant("a", 0, &a_sel, &t), claimant("b", 10, &b_sel, &t)];
        let b = plan_node("b", &t, &n.view(), &cs);
        let change = b.change.expect("handover");
        assert_eq!(change.taints, n.taints, "the taint stays");
        assert_eq!(change.records, records(&[("a", t.clone())]));
        // a, reconciled first, adopts it the same way: one write either way.
        let a = plan_node("a", &t, &n.view(), &cs);
        assert_eq!(a.change.map(|c| c.records), Some(records(&[("a", t)])));
    }

    #[test]
    fn the_writer_replaces_a_recorded_taint_of_a_policy_that_lost_the_node_in_one_write() {
        let a_sel = sel("kosmos.io/node", "true");
        let b_sel = sel("zone", "x");
        let a_t = kosmos();
        let b_t = leaf("b.example.com/leaf", "", "NoSchedule");
        let n = Node::new(
            &[("kosmos.io/node", "true"), ("zone", "x")],
            vec![to_node_taint(&b_t)],
            records(&[("b", b_t.clone())]),
        );
        let cs = [
            claimant("a", 0, &a_sel, &a_t),
            claimant("b", 10, &b_sel, &b_t),
        ];
        let change = plan_node("a", &a_t, &n.view(), &cs).change.expect("write");
        assert_eq!(change.taints, vec![to_node_taint(&a_t)]);
        assert_eq!(change.records, records(&[("a", a_t)]));
    }

    #[test]
    fn an_invalid_policy_keeps_its_nodes_frozen() {
        let s = sel("kosmos.io/node", "true");
        let t = kosmos();
        let other_t = leaf("other", "", "NoSchedule");
        let n = Node::new(
            &[("kosmos.io/node", "true")],
            vec![to_node_taint(&t)],
            records(&[("broken", t.clone())]),
        );
        let cs = [
            Claimant {
                name: "broken",
                created: at(0),
                claim: Claim::Frozen,
                taint: &t,
                manage: true,
            },
            claimant("newer", 10, &s, &other_t),
        ];
        assert_eq!(
            plan_node("newer", &other_t, &n.view(), &cs).standing,
            Standing::Conflict {
                with: "broken".into()
            }
        );
        assert_eq!(plan_node("newer", &other_t, &n.view(), &cs).change, None);
    }

    #[test]
    fn standing_does_not_depend_on_the_order_of_the_policies() {
        let s = sel("kosmos.io/node", "true");
        let t = kosmos();
        let n = Node::new(&[("kosmos.io/node", "true")], vec![], Records::default());
        let a = claimant("a", 5, &s, &t);
        let b = claimant("b", 5, &s, &t); // same second: the name decides
        for cs in [[a, b], [b, a]] {
            assert_eq!(
                plan_node("a", &t, &n.view(), &cs).standing,
                Standing::Writer
            );
            assert_eq!(
                plan_node("b", &t, &n.view(), &cs).standing,
                Standing::Conflict { with: "a".into() }
            );
        }
    }

    #[test]
    fn records_round_trip_and_a_bad_annotation_is_an_error() {
        let r = records(&[("a", kosmos()), ("b", leaf("x", "", "NoExecute"))]);
        let value = r.to_annotation().expect("annotation");
        let annotations = BTreeMap::from([(OWNED_TAINTS_ANNOTATION.to_string(), value)]);
        assert_eq!(Records::from_annotations(&annotations), Ok(r));
        let bad = BTreeMap::from([(OWNED_TAINTS_ANNOTATION.to_string(), "{".to_string())]);
        assert!(Records::from_annotations(&bad).is_err());
        assert_eq!(
            Records::from_annotations(&BTreeMap::new()),
            Ok(Records::default())
        );
    }

    #[test]
    fn empty_value_matches_a_missing_value() {
        let ours = leaf("leaf", "", "NoSchedule");
        assert!(has(&[node_taint("leaf", None, "NoSchedule")], &ours));
        assert!(has(&[node_taint("leaf", Some(""), "NoSchedule")], &ours));
        assert_eq!(to_node_taint(&ours).value, None);
    }

    #[test]
    fn release_all_removes_every_recorded_taint_and_nothing_else() {
        let other = leaf("gpu", "a100", "NoSchedule");
        let foreign = node_taint("dedicated", Some("ops"), "NoExecute");
        let node = Node::new(
            &[],
            vec![
                to_node_taint(&kosmos()),
                to_node_taint(&other),
                foreign.clone(),
            ],
            records(&[("leaf", kosmos()), ("gpus", other)]),
        );
        let plan = release_all(&node.view());
        let change = plan.change.expect("a write");
        assert_eq!(change.taints, vec![foreign.clone()]);
        assert_eq!(change.records, Records::default());
        assert_eq!(change.records.to_annotation(), None);

        // Kosmos's own taint (not recorded) stays; a recorded taint someone already removed is no
        // write of its own.
        let node = Node::new(
            &[],
            vec![to_node_taint(&kosmos()), foreign.clone()],
            Records::default(),
        );
        assert_eq!(release_all(&node.view()).change, None);
        let node = Node::new(&[], vec![foreign.clone()], records(&[("leaf", kosmos())]));
        let change = release_all(&node.view()).change.expect("records go");
        assert_eq!(change.taints, vec![foreign]);
        assert_eq!(change.records, Records::default());
    }

    #[test]
    fn describe_and_parse_round_trip() {
        for t in [kosmos(), leaf("a", "", "NoExecute")] {
            assert_eq!(parse(&describe(&t)), Some(t));
        }
        assert_eq!(describe(&leaf("k", "v", "NoSchedule")), "k=v:NoSchedule");
        assert_eq!(parse("nonsense"), None);
    }
}
