//! DefaultPreemption's PodGroupPostFilter (upstream 1.37's `PodGroupEvaluator`, workload-aware
//! preemption, `framework/preemption/podgrouppreemption.go` and `types.go`): a pod group its
//! cycle did not place may preempt lower-priority pods across the whole cluster to make room for
//! the whole group.
//!
//! The victims are units: a pod, or every running pod of a PodGroup with `disruptionMode: all`.
//! All lower-priority units are taken off a copy of the cluster and the group's algorithm is run
//! there; if the group then fits, units are given back in order of importance as long as every
//! member still passes Filter on the node it was placed on. What is left is evicted, and the
//! members are nominated to their nodes.
//!
//! Unlike upstream, the placement on the copy runs no Reserve plugins (volume and claim
//! reservations are not simulated).

use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use tracing::{debug, info};

use super::executor::{Preemptor, object_ref};
use super::plugin::{DefaultPreemption, NOT_ELIGIBLE_NEVER, terminating_by_preemption};
use super::victims::{Victim, VictimIndex, choose_victims, extend, pod_group_priority};
use crate::framework::interface::{
    Code, FrameworkHandle, PodGroupPlacement, PodGroupPostFilterPlugin, PodGroupPostFilterResult,
    ProposedAssignment, Status,
};
use crate::framework::listers::POD_DISRUPTION_BUDGETS;
use crate::framework::metrics::{PreemptorLabels, ResultLabels};
use crate::framework::types::{AssignedPod, PodInfo, Snapshot};

/// No pod in the cluster has a lower priority than the group.
const NO_GROUP_VICTIMS: &str = "No preemption victims found for incoming preemptor";

/// What upstream prefixes every message of the group's preemption with.
const PREFIX: &str = "pod group preemption: ";

/// The members' nominated nodes still have victims of theirs terminating.
const ONGOING: &str = "ongoing preemption on nominated nodes";

/// The preemptor type a pod group's preemption reports (upstream's `PodGroupKeyType`).
const PODGROUP: &str = "podgroup";

/// The cluster while victims are tried back: the snapshot without the victims not reprieved,
/// and the members' placements with the cycle states their PreFilter left.
struct Reprieve<'a> {
    fwk: &'a dyn FrameworkHandle,
    cluster: Snapshot,
    assignments: Vec<ProposedAssignment>,
}

impl Reprieve<'_> {
    /// Gives `victim` back (upstream's `reprieveVictim`): it stays when every member still
    /// passes Filter on its node, each member counted on its node for the ones after it.
    fn try_back(&mut self, victim: &Victim) -> Result<bool, Status> {
        for (node, pod) in &victim.pods {
            self.cluster.add_pod(node, pod.clone());
            self.extend_states(node, pod, true)?;
        }
        let mut placed: Vec<(&str, Arc<AssignedPod>)> = Vec::new();
        let mut fits = true;
        for a in &self.assignments {
            let passes = self.cluster.get(&a.node).is_some_and(|node| {
                self.fwk
                    .run_filter_plugins_with_nominated_pods(&a.state, &a.pod, node)
                    .is_success()
            });
            if !passes {
                fits = false;
                break;
            }
            let member = Arc::new(AssignedPod::from_pod_info(&a.pod));
            self.cluster.add_pod(&a.node, member.clone());
            placed.push((&a.node, member));
        }
        for (node, member) in placed.into_iter().rev() {
            self.cluster
                .remove_pod(node, &member)
                .map_err(|e| Status::error(e.to_string()))?;
        }
        if !fits {
            for (node, pod) in &victim.pods {
                self.cluster
                    .remove_pod(node, pod)
                    .map_err(|e| Status::error(e.to_string()))?;
                self.extend_states(node, pod, false)?;
            }
        }
        Ok(fits)
    }

    /// The PreFilter AddPod (`added`) or RemovePod extensions of every member's state for `pod`
    /// on `node` (the cluster already shows the change).
    fn extend_states(&mut self, node: &str, pod: &AssignedPod, added: bool) -> Result<(), Status> {
        let Some(info) = self.cluster.get(node) else {
            return Ok(());
        };
        for a in &mut self.assignments {
            let status = extend(self.fwk, &mut a.state, &a.pod, pod, info, added);
            if !status.is_success() {
                return Err(Status::error(status.message()));
            }
        }
        Ok(())
    }
}

/// The victims to evict, most important first, and how many of their pods violate a PDB.
type Chosen = (Vec<Victim>, usize);

/// A group's preemption: the group, its members tried in the cycle, the cluster the cycle saw,
/// and the group's algorithm.
struct GroupPreemption<'a> {
    group: &'a PodGroup,
    members: &'a [Arc<PodInfo>],
    snapshot: &'a Snapshot,
    place: &'a PodGroupPlacement<'a>,
}

impl DefaultPreemption {
    /// Upstream's `PodGroupEvaluator.Preempt` (without the message's prefix).
    fn preempt_group(
        &self,
        fwk: &dyn FrameworkHandle,
        request: &GroupPreemption<'_>,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let GroupPreemption {
            group,
            members,
            snapshot,
            place,
        } = *request;
        // Without PodGroupPreemptionPolicy (alpha, off) the members' policy is the group's.
        let never = members
            .iter()
            .any(|m| m.spec().and_then(|s| s.preemption_policy.as_deref()) == Some("Never"));
        if never {
            return (None, Status::unschedulable(NOT_ELIGIBLE_NEVER));
        }
        let priority = pod_group_priority(group);
        let index = VictimIndex::new(self.evaluator.handle(), snapshot);
        if ongoing(members, snapshot, priority, &index) {
            let nominations = members
                .iter()
                .map(|m| (m.key(), m.nominated_node_name().to_string()))
                .collect();
            let result = PodGroupPostFilterResult { nominations };
            return (Some(result), Status::new(Code::Success, ONGOING));
        }
        let potential: Vec<Victim> = index
            .units(snapshot.nodes().iter().map(AsRef::as_ref))
            .into_iter()
            .filter(|v| v.priority < priority)
            .collect();
        if potential.is_empty() {
            return (None, Status::unresolvable(NO_GROUP_VICTIMS));
        }
        let ((victims, pdb_violations), assignments) =
            match self.select_victims(fwk, snapshot, potential, place) {
                Ok(chosen) => chosen,
                Err(status) => return (None, status),
            };
        let pods: Vec<Arc<AssignedPod>> = victims
            .iter()
            .flat_map(|v| v.pods.iter().map(|(_, p)| p.clone()))
            .collect();
        let disruptions = victims.iter().filter(|v| v.grouped).count();
        self.observe_victims(pods.len(), disruptions, pdb_violations);
        let preemptor = group_preemptor(group, members, priority);
        info!(preemptor = %preemptor.key, victims = pods.len(), "preempting for a pod group");
        self.evaluator.executor().actuate_group(preemptor, &pods);
        let nominations = assignments
            .into_iter()
            .map(|a| (a.pod.key(), a.node))
            .collect();
        let message = format!(
            "found a placement for podgroup, preempting {} victims",
            pods.len()
        );
        (
            Some(PodGroupPostFilterResult { nominations }),
            Status::new(Code::Success, message),
        )
    }

    /// Upstream's `selectVictimsOnDomain`: the group placed on the cluster without any potential
    /// victim, then the victims reprieved in order (PDB violators first, most important first);
    /// the members' placement on the cluster so left.
    fn select_victims(
        &self,
        fwk: &dyn FrameworkHandle,
        snapshot: &Snapshot,
        potential: Vec<Victim>,
        place: &PodGroupPlacement<'_>,
    ) -> Result<(Chosen, Vec<ProposedAssignment>), Status> {
        let mut cluster = snapshot.clone();
        for v in &potential {
            for (node, pod) in &v.pods {
                cluster
                    .remove_pod(node, pod)
                    .map_err(|e| Status::error(e.to_string()))?;
            }
        }
        let (assignments, status) = place(&cluster);
        if !status.is_success() {
            return Err(status);
        }
        let pdbs = self
            .evaluator
            .handle()
            .listers
            .store(&POD_DISRUPTION_BUDGETS)
            .list();
        let mut reprieve = Reprieve {
            fwk,
            cluster,
            assignments,
        };
        let (evicted, pdb_violations) = choose_victims(potential, &pdbs, |v| reprieve.try_back(v))?;
        debug!(
            victims = evicted.len(),
            "pod group preemption chose its victims"
        );
        Ok(((evicted, pdb_violations), reprieve.assignments))
    }

    /// `scheduler_workload_preemption_victims`, `scheduler_preemption_workload_disruptions` and
    /// `scheduler_preemption_pdb_violations_total` (upstream's `observeVictims`).
    fn observe_victims(&self, pods: usize, disruptions: usize, pdb_violations: usize) {
        let Some(m) = &self.metrics else {
            return;
        };
        m.workload_preemption_victims.observe(pods as f64);
        let labels = PreemptorLabels {
            preemptor: PODGROUP.into(),
        };
        if disruptions > 0 {
            m.preemption_workload_disruptions
                .get_or_create(&labels)
                .observe(disruptions as f64);
        }
        if pdb_violations > 0 {
            m.preemption_pdb_violations
                .get_or_create(&labels)
                .inc_by(pdb_violations as u64);
        }
    }
}

/// Whether a member's nominated node still has a lower-priority pod the scheduler is evicting
/// (upstream's `isOngoingPreemption`).
fn ongoing(
    members: &[Arc<PodInfo>],
    snapshot: &Snapshot,
    priority: i32,
    index: &VictimIndex,
) -> bool {
    members
        .iter()
        .filter_map(|m| snapshot.get(m.nominated_node_name()))
        .any(|node| {
            node.pods
                .iter()
                .any(|p| index.priority_of(p) < priority && terminating_by_preemption(p))
        })
}

/// The group as the executor reports it: its victims' condition and events name it.
fn group_preemptor(group: &PodGroup, members: &[Arc<PodInfo>], priority: i32) -> Preemptor {
    let namespace = group.metadata.namespace.as_deref().unwrap_or_default();
    let name = group.metadata.name.as_deref().unwrap_or_default();
    let uid = group.metadata.uid.as_deref().unwrap_or_default();
    Preemptor {
        kind: PODGROUP,
        reference: object_ref(
            "scheduling.k8s.io/v1beta1",
            "PodGroup",
            namespace,
            name,
            uid,
        ),
        key: format!("{namespace}/{name}"),
        uid: uid.to_string(),
        scheduler: members
            .first()
            .map(|m| m.scheduler_name().to_string())
            .unwrap_or_default(),
        priority,
    }
}

impl PodGroupPostFilterPlugin for DefaultPreemption {
    fn pod_group_post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        group: &PodGroup,
        members: &[Arc<PodInfo>],
        snapshot: &Snapshot,
        place: &PodGroupPlacement<'_>,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let request = GroupPreemption {
            group,
            members,
            snapshot,
            place,
        };
        let (result, status) = self.preempt_group(fwk, &request);
        if let Some(m) = &self.metrics {
            let labels = ResultLabels {
                result: status.code().as_str().into(),
            };
            m.workload_preemption_attempts.get_or_create(&labels).inc();
        }
        let message = status.message();
        if message.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), format!("{PREFIX}{message}")),
        )
    }
}
