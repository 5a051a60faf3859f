//! Preemption's victims as units (upstream 1.37's `Victim` in `framework/preemption/types.go`):
//! a pod, or, with workload-aware scheduling (GenericWorkload), every running pod of a PodGroup
//! whose `disruptionMode` is `all`, which go together wherever they run. A PodGroup's pods weigh
//! with the group's priority. Both preemptions use them: a pod's on one node (the units touching
//! that node) and a pod group's across the cluster.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::jiff::Timestamp;

use crate::emulation::GENERIC_WORKLOAD;
use crate::framework::listers::{SCHEDULING_GROUP_MEMBERS, WORKLOAD_POD_GROUPS};
use crate::framework::registry::Handle;
use kube::core::{Selector, SelectorExt};

use crate::framework::interface::{CycleState, FrameworkHandle, Status};
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView, Snapshot};

/// The group's priority (upstream's `PodGroupPriority`: unset is 0).
pub(crate) fn pod_group_priority(group: &PodGroup) -> i32 {
    group.spec.priority.unwrap_or(0)
}

/// What a pod's dry run needs of the cluster beyond the node it tries: the PDBs, the running
/// pods' groups, and the other nodes (a whole group's pods elsewhere).
pub(crate) struct VictimCluster<'a> {
    pub(super) pdbs: &'a [Arc<PodDisruptionBudget>],
    pub(super) index: &'a VictimIndex,
    pub(super) snapshot: &'a Snapshot,
}

/// The PodGroup a running pod belongs to, as preemption weighs it.
struct VictimGroup {
    /// `namespace/name`.
    key: String,
    priority: i32,
    /// `disruptionMode: all`: its pods go together.
    all: bool,
}

/// What can be evicted as one (upstream's `Victim`): a pod, or all running pods of a group
/// with `disruptionMode: all`.
pub(super) struct Victim {
    /// Each pod with its node.
    pub(super) pods: Vec<(String, Arc<AssignedPod>)>,
    /// The group's priority for a group's pods, else the pod's.
    pub(super) priority: i32,
    /// Its pods belong to a PodGroup (upstream's `PodGroupKeyType`, which also marks one pod of
    /// a group with `disruptionMode: single`): ranked above plain pods, and counted as a
    /// workload disruption.
    pub(super) grouped: bool,
}

impl Victim {
    /// The earliest start among its pods (a pod not started counts as starting now).
    fn earliest_start(&self, now: Timestamp) -> Timestamp {
        self.pods
            .iter()
            .map(|(_, p)| p.start_time().map_or(now, |t| t.0))
            .min()
            .unwrap_or(now)
    }
}

/// Upstream's `MoreImportantVictim` as an ordering (most important first): higher priority,
/// then a group's pods before plain pods, then more pods, then started earlier.
pub(super) fn more_important(a: &Victim, b: &Victim, now: Timestamp) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| b.grouped.cmp(&a.grouped))
        .then_with(|| b.pods.len().cmp(&a.pods.len()))
        .then_with(|| a.earliest_start(now).cmp(&b.earliest_start(now)))
}

/// The running pods' PodGroups, read once per preemption; empty without GenericWorkload (every
/// pod is then a unit of its own with its own priority, as upstream).
#[derive(Default)]
pub(crate) struct VictimIndex {
    /// The known PodGroup of each running pod, by pod UID.
    groups: HashMap<String, Arc<VictimGroup>>,
    /// The running pods of each group with `disruptionMode: all`, with their nodes, by group.
    whole: HashMap<String, Vec<(String, Arc<AssignedPod>)>>,
}

impl VictimIndex {
    pub(super) fn new(handle: &Handle, snapshot: &Snapshot) -> VictimIndex {
        if !handle.emulation.enabled(GENERIC_WORKLOAD) {
            return VictimIndex::default();
        }
        let members = handle.listers.store(&SCHEDULING_GROUP_MEMBERS);
        let mut groups = HashMap::new();
        for group in handle.listers.store(&WORKLOAD_POD_GROUPS).list() {
            let namespace = group.metadata.namespace.as_deref().unwrap_or_default();
            let name = group.metadata.name.as_deref().unwrap_or_default();
            let all = group
                .spec
                .disruption_mode
                .as_ref()
                .is_some_and(|m| m.all.is_some());
            let victim_group = Arc::new(VictimGroup {
                key: format!("{namespace}/{name}"),
                priority: pod_group_priority(&group),
                all,
            });
            for pod in members.members(namespace, name) {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                groups.insert(uid, victim_group.clone());
            }
        }
        let mut whole: HashMap<String, Vec<(String, Arc<AssignedPod>)>> = HashMap::new();
        for node in snapshot.nodes() {
            for pod in &node.pods {
                if let Some(g) = groups.get(pod.uid()).filter(|g| g.all) {
                    let placed = (node.name().to_string(), pod.clone());
                    whole.entry(g.key.clone()).or_default().push(placed);
                }
            }
        }
        VictimIndex { groups, whole }
    }

    /// The priority `pod` weighs with as a victim (upstream's `GetPodPriority`).
    pub(super) fn priority_of(&self, pod: &AssignedPod) -> i32 {
        self.groups
            .get(pod.uid())
            .map_or(pod.priority(), |g| g.priority)
    }

    /// The units of the pods on `nodes`, in the order the nodes list them (upstream's
    /// `getCrossNodesVictims`): a group with `disruptionMode: all` once, with its pods on every
    /// node.
    pub(super) fn units<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeInfo>) -> Vec<Victim> {
        let mut victims = Vec::new();
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for node in nodes {
            for pod in &node.pods {
                match self.groups.get(pod.uid()) {
                    Some(g) if g.all => {
                        if seen.insert(&g.key, ()).is_none() {
                            victims.push(Victim {
                                pods: self.whole.get(&g.key).cloned().unwrap_or_default(),
                                priority: g.priority,
                                grouped: true,
                            });
                        }
                    }
                    group => victims.push(Victim {
                        pods: vec![(node.name().to_string(), pod.clone())],
                        priority: group.map_or(pod.priority(), |g| g.priority),
                        grouped: group.is_some(),
                    }),
                }
            }
        }
        victims
    }
}

/// Upstream's reprieve (`SelectVictimsOnNode`, `selectVictimsOnDomain`): `potential` is sorted
/// most important first and split by PDB violation (`FilterVictimsWithPDBViolation`: a unit
/// violates when any of its pods does); each is then offered back, violators first, and
/// `try_back` says whether it could stay. The units that go, most important first, and how many
/// of their pods violate a PDB.
pub(super) fn choose_victims(
    mut potential: Vec<Victim>,
    pdbs: &[Arc<PodDisruptionBudget>],
    mut try_back: impl FnMut(&Victim) -> Result<bool, Status>,
) -> Result<(Vec<Victim>, usize), Status> {
    let now = Timestamp::now();
    potential.sort_by(|a, b| more_important(a, b, now));
    let mut budgets = PdbBudgets::new(pdbs);
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for v in potential {
        let count = v
            .pods
            .iter()
            .filter(|(_, p)| budgets.evict_violates(p))
            .count();
        if count > 0 {
            violating.push((v, count));
        } else {
            non_violating.push((v, 0));
        }
    }
    let mut evicted = Vec::new();
    let mut violations = 0;
    for (v, count) in violating.into_iter().chain(non_violating) {
        if !try_back(&v)? {
            violations += count;
            evicted.push(v);
        }
    }
    // Already in order unless both kinds were evicted (a stable sort keeps equal ones as they are).
    evicted.sort_by(|a, b| more_important(a, b, now));
    Ok((evicted, violations))
}

/// The PreFilter AddPod (`add`) or RemovePod extensions of `pod`'s state for `victim` on `node`.
pub(super) fn extend(
    fwk: &dyn FrameworkHandle,
    state: &mut CycleState,
    pod: &PodInfo,
    victim: &AssignedPod,
    node: &NodeInfo,
    add: bool,
) -> Status {
    if add {
        fwk.run_pre_filter_extension_add_pod(state, pod, victim, node)
    } else {
        fwk.run_pre_filter_extension_remove_pod(state, pod, victim, node)
    }
}

/// The disruptions each PDB still allows while evictions are counted against them in turn.
struct PdbBudgets<'a> {
    pdbs: &'a [Arc<PodDisruptionBudget>],
    allowed: Vec<i32>,
    /// A PDB without a selector selects nothing; an empty one is skipped as upstream does.
    selectors: Vec<Option<Selector>>,
}

impl<'a> PdbBudgets<'a> {
    fn new(pdbs: &'a [Arc<PodDisruptionBudget>]) -> Self {
        let allowed = pdbs
            .iter()
            .map(|p| {
                p.status
                    .as_ref()
                    .map_or(0, |s| s.disruptions_allowed.unwrap_or(0))
            })
            .collect();
        let selectors = pdbs
            .iter()
            .map(|p| {
                let sel = p.spec.as_ref()?.selector.clone()?;
                Selector::try_from(sel).ok().filter(|s| !s.selects_all())
            })
            .collect();
        PdbBudgets {
            pdbs,
            allowed,
            selectors,
        }
    }

    /// Counts the eviction of `p` against the PDBs that select it (unless a PDB lists it as
    /// disrupted already); whether one of them is then exceeded.
    fn evict_violates(&mut self, p: &AssignedPod) -> bool {
        let Some(labels) = p.labels().filter(|l| !l.is_empty()) else {
            return false;
        };
        let mut violated = false;
        for (i, pdb) in self.pdbs.iter().enumerate() {
            if pdb.metadata.namespace.as_deref() != Some(p.namespace()) {
                continue;
            }
            let Some(sel) = &self.selectors[i] else {
                continue;
            };
            if !sel.matches(labels) {
                continue;
            }
            let disrupted = pdb
                .status
                .as_ref()
                .and_then(|s| s.disrupted_pods.as_ref())
                .is_some_and(|d| d.contains_key(p.name()));
            if disrupted {
                continue;
            }
            self.allowed[i] -= 1;
            if self.allowed[i] < 0 {
                violated = true;
            }
        }
        violated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    fn running(name: &str, priority: i32, app: &str) -> Arc<AssignedPod> {
        let pod = PodBuilder::new(name).uid(name).priority(priority);
        Arc::new(pod.label("app", app).assigned())
    }

    fn unit(pods: &[&Arc<AssignedPod>], priority: i32, grouped: bool) -> Victim {
        Victim {
            pods: pods
                .iter()
                .map(|p| ("n".to_string(), Arc::clone(p)))
                .collect(),
            priority,
            grouped,
        }
    }

    fn names(victims: &[Victim]) -> Vec<Vec<String>> {
        let name = |p: &AssignedPod| p.name().to_string();
        victims
            .iter()
            .map(|v| v.pods.iter().map(|(_, p)| name(p)).collect())
            .collect()
    }

    #[test]
    fn a_whole_gang_is_one_unit_with_its_pods_on_every_node() {
        let (g0, g1, alone) = (
            running("g-0", 0, "g"),
            running("g-1", 0, "g"),
            running("p", 5, "p"),
        );
        let gang = Arc::new(VictimGroup {
            key: "default/g".into(),
            priority: 7,
            all: true,
        });
        let index = VictimIndex {
            groups: [("g-0", &gang), ("g-1", &gang)]
                .into_iter()
                .map(|(uid, g)| (uid.to_string(), Arc::clone(g)))
                .collect(),
            whole: [(
                "default/g".to_string(),
                vec![
                    ("n1".to_string(), g0.clone()),
                    ("n2".to_string(), g1.clone()),
                ],
            )]
            .into(),
        };
        let mut n1 = NodeBuilder::new("n1").info(vec![]);
        n1.add_pod(g0.clone());
        n1.add_pod(alone.clone());
        let units = index.units([&n1]);
        assert_eq!(names(&units), [vec!["g-0", "g-1"], vec!["p"]]);
        // The gang weighs with its group's priority, the pod with its own.
        assert_eq!((units[0].priority, units[0].grouped), (7, true));
        assert_eq!((units[1].priority, units[1].grouped), (5, false));
        assert_eq!(index.priority_of(&g1), 7);
        assert_eq!(index.priority_of(&alone), 5);
    }

    #[test]
    fn violators_are_offered_back_first_and_their_pods_counted() {
        let (a0, a1, b, c) = (
            running("a-0", 1, "protected"),
            running("a-1", 1, "free"),
            running("b", 3, "free"),
            running("c", 2, "free"),
        );
        let potential = vec![
            unit(&[&c], 2, false),
            unit(&[&a0, &a1], 1, true),
            unit(&[&b], 3, false),
        ];
        // A PDB allowing no disruption of the pods labelled `protected`.
        let pdbs = [Arc::new(super::super::tests::pdb(
            "protected",
            "protected",
            0,
        ))];
        let mut offered = Vec::new();
        // Only the most important unit, b, may stay.
        let (evicted, violations) = choose_victims(potential, &pdbs, |v| {
            offered.push(names(std::slice::from_ref(v)));
            Ok(v.priority == 3)
        })
        .expect("no error");
        assert_eq!(
            offered,
            [vec![vec!["a-0", "a-1"]], vec![vec!["b"]], vec![vec!["c"]]]
        );
        // Evicted, most important first; one pod of the gang violates the PDB.
        assert_eq!(names(&evicted), [vec!["c"], vec!["a-0", "a-1"]]);
        assert_eq!(violations, 1);
    }
}
