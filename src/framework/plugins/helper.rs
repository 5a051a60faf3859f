//! Helpers shared by several plugins: taint/toleration matching, node selector matching, label
//! selectors, score normalization.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::config::ExtensionPoint;
use crate::framework::args::{PluginArgs, UtilizationShapePoint, decode, no_args, typed};
use crate::framework::interface::{CycleState, MAX_NODE_SCORE, NodeScore, Plugin, Status};
use crate::framework::listers::{Informer, Listers};
use crate::framework::registry::{PluginRegistration, policy_rule};
use crate::framework::types::{
    EventObject, HintError, PodInfo, PodObject, PodView, QueueingHint, objects,
};

/// Implements [`Plugin`](crate::framework::interface::Plugin) for a plugin type: its name, and
/// the accessor of every listed extension point returning the plugin itself (so the type must
/// implement those traits, `ScorePlugin` for `Score` ...); `EnqueueExtensions` after the list
/// when the plugin declares the events that requeue the pods it rejected. The type also gets an
/// `EXTENSION_POINTS` constant with the listed points (in that order) for its registration:
///
/// ```ignore
/// impl_plugin!(TaintToleration, "TaintToleration", [Filter, PreScore, Score], EnqueueExtensions);
///
/// PluginRegistration::new(TaintToleration::EXTENSION_POINTS, no_args, factory)
/// ```
///
/// Out of tree it comes with `use ksched::prelude::*;`.
#[macro_export]
macro_rules! impl_plugin {
    ($ty:ty, $name:expr, [$($point:ident),+ $(,)?] $(, $extra:ident)* $(,)?) => {
        impl $crate::framework::interface::Plugin for $ty {
            fn name(&self) -> &str {
                $name
            }
            $($crate::impl_plugin!(@as $point);)+
            $($crate::impl_plugin!(@as $extra);)*
        }

        impl $ty {
            /// The extension points this plugin implements, as it is registered.
            #[allow(unreachable_pub)]
            pub const EXTENSION_POINTS: &'static [$crate::config::ExtensionPoint] =
                &[$($crate::config::ExtensionPoint::$point),+];
        }
    };
    (@as PreEnqueue) => { $crate::impl_plugin!(@fn as_pre_enqueue PreEnqueuePlugin); };
    (@as QueueSort) => { $crate::impl_plugin!(@fn as_queue_sort QueueSortPlugin); };
    (@as PreFilter) => { $crate::impl_plugin!(@fn as_pre_filter PreFilterPlugin); };
    (@as Filter) => { $crate::impl_plugin!(@fn as_filter FilterPlugin); };
    (@as PostFilter) => { $crate::impl_plugin!(@fn as_post_filter PostFilterPlugin); };
    (@as PreScore) => { $crate::impl_plugin!(@fn as_pre_score PreScorePlugin); };
    (@as Score) => { $crate::impl_plugin!(@fn as_score ScorePlugin); };
    (@as Reserve) => { $crate::impl_plugin!(@fn as_reserve ReservePlugin); };
    (@as Permit) => { $crate::impl_plugin!(@fn as_permit PermitPlugin); };
    (@as PreBind) => { $crate::impl_plugin!(@fn as_pre_bind PreBindPlugin); };
    (@as Bind) => { $crate::impl_plugin!(@fn as_bind BindPlugin); };
    (@as PostBind) => { $crate::impl_plugin!(@fn as_post_bind PostBindPlugin); };
    // Not an extension point: the plugin declares the events that requeue the pods it rejected.
    (@as EnqueueExtensions) => { $crate::impl_plugin!(@fn as_enqueue_extensions EnqueueExtensions); };
    // Not an extension point: the plugin signs pods for opportunistic batching.
    (@as Sign) => { $crate::impl_plugin!(@fn as_sign SignPlugin); };
    // Not a configurable extension point: a pod group's constraints in its cycle.
    (@as PlacementFeasible) => { $crate::impl_plugin!(@fn as_placement_feasible PlacementFeasiblePlugin); };
    (@as PodGroupPostFilter) => { $crate::impl_plugin!(@fn as_pod_group_post_filter PodGroupPostFilterPlugin); };
    (@as PlacementGenerate) => { $crate::impl_plugin!(@fn as_placement_generate PlacementGeneratePlugin); };
    (@as PlacementScore) => { $crate::impl_plugin!(@fn as_placement_score PlacementScorePlugin); };
    (@fn $method:ident $trait:ident) => {
        fn $method(&self) -> Option<&dyn $crate::framework::interface::$trait> {
            Some(self)
        }
    };
}
pub(crate) use crate::impl_plugin;

/// Queue when `may_help`, else QueueSkip: how every hint ends.
pub(crate) fn queue_if(may_help: bool) -> QueueingHint {
    if may_help {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

/// The new object of a pod event when the event is `pod`'s own update (its uid), else `None`:
/// what hints for the rejected pod's own changes look at.
pub(crate) fn own_update<'a>(
    pod: &PodInfo,
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<Option<&'a PodInfo>, HintError> {
    let (_, modified) = objects::<PodObject>(old, new)?;
    Ok(modified
        .filter(|m| m.uid() == pod.uid())
        .and_then(PodObject::pod_info))
}

/// The RBAC rule of plugins that match namespace selectors against namespaces' labels.
pub(crate) fn namespace_rules() -> Vec<PolicyRule> {
    vec![policy_rule(&[""], &["namespaces"], &["list", "watch"])]
}

/// The RBAC rules of the volume plugins: read claims, volumes and the storage kinds; `bind`:
/// also write claims and volumes (a claim's selected node, a volume's claimRef).
pub(crate) fn volume_rules(bind: bool) -> Vec<PolicyRule> {
    let read = ["get", "list", "watch"];
    let claims_and_volumes: &[&str] = if bind {
        &["get", "list", "watch", "patch", "update"]
    } else {
        &read
    };
    vec![
        policy_rule(
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
            claims_and_volumes,
        ),
        policy_rule(
            &["storage.k8s.io"],
            &[
                "csidrivers",
                "csinodes",
                "csistoragecapacities",
                "storageclasses",
                "volumeattachments",
            ],
            &read,
        ),
    ]
}

/// The registration of a plugin without args or state: a default `P` for every profile.
pub(crate) fn registration_without_args<P: Plugin + Default>(
    extension_points: &[ExtensionPoint],
) -> PluginRegistration {
    PluginRegistration::new(extension_points, no_args, |_, _| Ok(Arc::new(P::default())))
}

/// The registration of a plugin built by `new` from its typed args and the handle's listers, which
/// watch `informers`.
pub(crate) fn registration_with_listers<A: PluginArgs + 'static, P: Plugin>(
    extension_points: &[ExtensionPoint],
    informers: &[Informer],
    new: impl Fn(A, Arc<Listers>) -> Result<P, String> + Send + Sync + 'static,
) -> PluginRegistration {
    PluginRegistration::new(extension_points, decode::<A>, move |args, handle| {
        Ok(Arc::new(new(typed(args)?, handle.listers.clone())?))
    })
    .with_informers(informers)
}

/// A PreFilter extension's AddPod/RemovePod: applies `update` to the PreFilter state `T` stored
/// under `key`, or returns `missing()` when PreFilter did not store one.
pub(crate) fn update_pre_filter_state<T: Any + Send + Sync + Clone>(
    state: &mut CycleState,
    key: &'static str,
    missing: impl FnOnce() -> Status,
    update: impl FnOnce(&mut T),
) -> Status {
    match state.get_mut::<T>(key) {
        Some(s) => {
            update(s);
            Status::success()
        }
        None => missing(),
    }
}

/// Whether `t` tolerates `taint` (upstream's `Toleration.ToleratesTaint`; the alpha Gt/Lt
/// operators are off, as in upstream's default).
pub(crate) fn toleration_tolerates_taint(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = t.key.as_deref()
        && !key.is_empty()
        && key != taint.key
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

pub(crate) fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations
        .iter()
        .any(|t| toleration_tolerates_taint(t, taint))
}

/// The first taint (passing `filter`) that no toleration tolerates.
pub(crate) fn find_matching_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerations_tolerate_taint(tolerations, t))
}

/// Upstream's `DefaultNormalizeScore`: scales scores so the highest becomes `max_priority`
/// (reversed: `max_priority - score`). All zero stays zero (or all `max_priority` when reversed).
/// The highest score a utilization shape point may have (upstream's `MaxCustomPriorityScore`):
/// RequestedToCapacityRatio's and VolumeBinding's `shape`.
pub(crate) const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

/// A utilization shape in node-score units (`(utilization, score * 10)` points), as upstream's
/// `helper.FunctionShape` built from a configuration's `shape`.
pub(crate) fn scaled_shape(shape: &[UtilizationShapePoint]) -> Vec<(i64, i64)> {
    let scale = MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE;
    shape
        .iter()
        .map(|p| (i64::from(p.utilization), i64::from(p.score) * scale))
        .collect()
}

/// Upstream's `BuildBrokenLinearFunction`: the shape's score at utilization `p`, linear between
/// points, flat before the first and after the last.
pub(crate) fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for i in 0..shape.len() {
        if p <= shape[i].0 {
            if i == 0 {
                return shape[0].1;
            }
            let (u0, s0) = shape[i - 1];
            let (u1, s1) = shape[i];
            return s0 + (s1 - s0) * (p - u0) / (u1 - u0);
        }
    }
    shape.last().map_or(0, |s| s.1)
}

pub(crate) fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [NodeScore]) {
    let max_count = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max_count == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max_priority;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max_priority * s.score / max_count;
        if reverse {
            v = max_priority - v;
        }
        s.score = v;
    }
}

/// `DefaultNormalizeScore` with `MAX_NODE_SCORE`.
pub(crate) fn normalize_to_max(reverse: bool, scores: &mut [NodeScore]) {
    default_normalize_score(MAX_NODE_SCORE, reverse, scores)
}

/// Node selector term matching for node affinity (upstream's `nodeaffinity` helper): a term
/// matches when all its expressions and fields match; an empty term matches nothing.
pub(crate) fn node_selector_term_matches(
    term: &NodeSelectorTerm,
    labels: Option<&BTreeMap<String, String>>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_matches(r, labels))
        && fields
            .iter()
            .all(|r| field_requirement_matches(r, node_name))
}

/// Whether any term matches (terms are ORed).
pub(crate) fn node_selector_terms_match(
    terms: &[NodeSelectorTerm],
    labels: Option<&BTreeMap<String, String>>,
    node_name: &str,
) -> bool {
    terms
        .iter()
        .any(|t| node_selector_term_matches(t, labels, node_name))
}

fn requirement_matches(
    r: &NodeSelectorRequirement,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let value = labels.and_then(|l| l.get(&r.key));
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            // Exactly one integer value; the label must parse as an integer too.
            let [bound] = values else { return false };
            let (Ok(bound), Some(Ok(v))) = (bound.parse::<i64>(), value.map(|v| v.parse::<i64>()))
            else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// `matchFields` supports only `metadata.name` with In/NotIn.
fn field_requirement_matches(r: &NodeSelectorRequirement, node_name: &str) -> bool {
    if r.key != "metadata.name" {
        return false;
    }
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => values.len() == 1 && values[0] == node_name,
        "NotIn" => values.len() == 1 && values[0] != node_name,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::term;
    use std::sync::Arc;

    fn taint(k: &str, v: &str, e: &str) -> Taint {
        Taint {
            key: k.into(),
            value: (!v.is_empty()).then(|| v.into()),
            effect: e.into(),
            time_added: None,
        }
    }

    fn tol(k: &str, op: &str, v: &str, e: &str) -> Toleration {
        Toleration {
            key: (!k.is_empty()).then(|| k.into()),
            operator: (!op.is_empty()).then(|| op.into()),
            value: (!v.is_empty()).then(|| v.into()),
            effect: (!e.is_empty()).then(|| e.into()),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerates() {
        let t = taint("foo", "bar", "NoSchedule");
        let cases = [
            (
                "equal key value effect",
                tol("foo", "Equal", "bar", "NoSchedule"),
                true,
            ),
            (
                "empty operator means Equal",
                tol("foo", "", "bar", "NoSchedule"),
                true,
            ),
            (
                "value differs",
                tol("foo", "Equal", "baz", "NoSchedule"),
                false,
            ),
            (
                "exists on key",
                tol("foo", "Exists", "", "NoSchedule"),
                true,
            ),
            (
                "empty effect matches all effects",
                tol("foo", "Exists", "", ""),
                true,
            ),
            (
                "effect differs",
                tol("foo", "Exists", "", "NoExecute"),
                false,
            ),
            (
                "empty key + exists tolerates everything",
                tol("", "Exists", "", ""),
                true,
            ),
            ("key differs", tol("other", "Exists", "", ""), false),
            ("unknown operator", tol("foo", "Gt", "1", ""), false),
        ];
        for (name, tl, want) in cases {
            assert_eq!(toleration_tolerates_taint(&tl, &t), want, "{name}");
        }
    }

    #[test]
    fn selector_terms() {
        let labels: BTreeMap<String, String> = [
            ("zone".to_string(), "a".to_string()),
            ("cores".to_string(), "8".to_string()),
        ]
        .into();
        let l = Some(&labels);
        let cases: Vec<(&str, NodeSelectorTerm, bool)> = vec![
            ("In", term(&[("zone", "In", &["a", "b"])], &[]), true),
            ("In miss", term(&[("zone", "In", &["b"])], &[]), false),
            ("NotIn", term(&[("zone", "NotIn", &["b"])], &[]), true),
            (
                "NotIn absent key",
                term(&[("rack", "NotIn", &["b"])], &[]),
                true,
            ),
            ("Exists", term(&[("zone", "Exists", &[])], &[]), true),
            (
                "DoesNotExist",
                term(&[("zone", "DoesNotExist", &[])], &[]),
                false,
            ),
            ("Gt", term(&[("cores", "Gt", &["4"])], &[]), true),
            ("Gt equal", term(&[("cores", "Gt", &["8"])], &[]), false),
            ("Lt", term(&[("cores", "Lt", &["16"])], &[]), true),
            (
                "Gt non-integer label",
                term(&[("zone", "Gt", &["1"])], &[]),
                false,
            ),
            (
                "all expressions ANDed",
                term(&[("zone", "In", &["a"]), ("cores", "Lt", &["2"])], &[]),
                false,
            ),
            (
                "matchFields name",
                term(&[], &[("metadata.name", "In", &["n1"])]),
                true,
            ),
            (
                "matchFields other name",
                term(&[], &[("metadata.name", "In", &["n2"])]),
                false,
            ),
            (
                "matchFields NotIn",
                term(&[], &[("metadata.name", "NotIn", &["n2"])]),
                true,
            ),
            ("empty term matches nothing", term(&[], &[]), false),
        ];
        for (name, t, want) in cases {
            assert_eq!(node_selector_term_matches(&t, l, "n1"), want, "{name}");
        }
    }

    #[test]
    fn normalize() {
        let mk = |v: &[i64]| -> Vec<NodeScore> {
            v.iter()
                .map(|s| NodeScore {
                    name: Arc::from("n"),
                    score: *s,
                })
                .collect()
        };
        let mut s = mk(&[1, 2, 4]);
        default_normalize_score(100, false, &mut s);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), [25, 50, 100]);
        let mut s = mk(&[1, 2, 4]);
        default_normalize_score(100, true, &mut s);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), [75, 50, 0]);
        let mut s = mk(&[0, 0]);
        default_normalize_score(100, true, &mut s);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), [100, 100]);
        let mut s = mk(&[0, 0]);
        default_normalize_score(100, false, &mut s);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), [0, 0]);
    }
}
