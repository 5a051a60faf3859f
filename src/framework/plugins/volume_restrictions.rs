//! VolumeRestrictions: a node is out when a pod there already mounts the same GCE PD, AWS EBS,
//! iSCSI or RBD volume in a conflicting way, and every node is out while another pod uses one of
//! the pod's ReadWriteOncePod claims.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Volume};

use super::names;
use crate::framework::args::no_args;
use crate::framework::interface::{
    ClusterEventWithHint, CycleState, EnqueueExtensions, FilterPlugin, Plugin, PreFilterExtensions,
    PreFilterPlugin, PreFilterResult, SignFragment, SignPlugin, Status,
};
use crate::framework::listers::{Listers, PERSISTENT_VOLUME_CLAIMS};
use crate::framework::plugins::helper::{
    impl_plugin, queue_if, update_pre_filter_state, volume_rules,
};
use crate::framework::plugins::volume_binding::sign_volumes;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{
    ActionType, AssignedPod, ClusterEvent, EventObject, EventResource, HintError, NodeInfo,
    PodInfo, PodObject, PodView, QueueingHint, Snapshot, objects,
};

const STATE_KEY: &str = "PreFilterVolumeRestrictions";

pub(crate) const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
pub(crate) const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

#[derive(Debug, Clone)]
struct PreFilterState {
    /// Names of the pod's claims with the ReadWriteOncePod access mode.
    read_write_once_pod_pvcs: BTreeSet<String>,
    /// How many of them other pods use.
    conflicting_pvc_ref_count: i64,
}

impl PreFilterState {
    fn conflicts_of(&self, pod: &AssignedPod) -> i64 {
        pod.volumes()
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter(|c| self.read_write_once_pod_pvcs.contains(&c.claim_name))
            .count() as i64
    }
}

fn have_overlap(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// Upstream's `isVolumeConflict`: `volume` against every volume of `pod`.
fn is_volume_conflict(volume: &Volume, pod: &impl PodView) -> bool {
    pod.volumes().iter().any(|ev| {
        if let (Some(d), Some(e)) = (&volume.gce_persistent_disk, &ev.gce_persistent_disk)
            && d.pd_name == e.pd_name
            && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.aws_elastic_block_store, &ev.aws_elastic_block_store)
            && d.volume_id == e.volume_id
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.iscsi, &ev.iscsi)
            && d.iqn == e.iqn
            && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.rbd, &ev.rbd)
            && have_overlap(&d.monitors, &e.monitors)
            && d.pool == e.pool
            && d.image == e.image
            && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
        {
            return true;
        }
        false
    })
}

fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

fn pod_volumes(pod: &PodInfo) -> &[Volume] {
    pod.spec().and_then(|s| s.volumes.as_deref()).unwrap_or(&[])
}

#[derive(Debug)]
pub(crate) struct VolumeRestrictions {
    listers: Arc<Listers>,
}

impl VolumeRestrictions {
    pub(crate) fn new(listers: Arc<Listers>) -> VolumeRestrictions {
        VolumeRestrictions { listers }
    }

    fn read_write_once_pod_pvcs(&self, pod: &PodInfo) -> Result<BTreeSet<String>, Status> {
        let mut out = BTreeSet::new();
        for c in pod_volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let pvc = self
                .listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), &c.claim_name)
                .ok_or_else(|| {
                    Status::unresolvable(format!(
                        "persistentvolumeclaim {:?} not found",
                        c.claim_name
                    ))
                })?;
            let rwop = pvc
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.as_ref())
                .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"));
            if rwop {
                out.insert(c.claim_name.clone());
            }
        }
        Ok(out)
    }
}

/// Upstream's `IsPVCUsedByPods` over the snapshot: some pod on some node uses the claim.
fn pvc_used_by_pods(snapshot: &Snapshot, key: &str) -> bool {
    snapshot
        .nodes()
        .iter()
        .any(|n| n.pvc_ref_counts.get(key).is_some_and(|c| *c > 0))
}

impl EnqueueExtensions for VolumeRestrictions {
    /// A pod deleted that held a conflicting volume or one of the pod's claims; a new node (no
    /// hint); one of the pod's claims created. Volumes cannot change on an existing pod.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::Node, ActionType::ADD)),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                is_schedulable_after_claim_added,
            ),
        ]
    }
}

/// The names of the claims the pod's volumes use.
fn claim_names(pod: &impl PodView) -> impl Iterator<Item = &str> {
    pod.volumes()
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// Upstream's `isSchedulableAfterPersistentVolumeClaimAdded`: one of the pod's claims.
fn is_schedulable_after_claim_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (_, Some(added)) = objects::<PersistentVolumeClaim>(old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    let name = added.metadata.name.as_deref().unwrap_or_default();
    Ok(queue_if(
        added.metadata.namespace.as_deref() == Some(pod.namespace())
            && claim_names(pod).any(|c| c == name),
    ))
}

/// Upstream's `isSchedulableAfterPodDeleted`: the deleted pod (in the pod's namespace) held a
/// volume conflicting with the pod's, or uses one of its claims (which may be ReadWriteOncePod).
fn is_schedulable_after_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, HintError> {
    let (Some(deleted), _) = objects::<PodObject>(old, new)? else {
        return Ok(QueueingHint::QueueSkip);
    };
    if deleted.namespace() != pod.namespace() {
        return Ok(QueueingHint::QueueSkip);
    }
    let conflicted = pod_volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .any(|v| is_volume_conflict(v, deleted));
    let shared_claim = claim_names(deleted).any(|d| claim_names(pod).any(|c| c == d));
    Ok(queue_if(conflicted || shared_claim))
}

impl_plugin!(
    VolumeRestrictions,
    names::VOLUME_RESTRICTIONS,
    [PreFilter, Filter],
    EnqueueExtensions,
    Sign,
);

impl SignPlugin for VolumeRestrictions {
    /// The pod's volumes; a pod with a ReadWriteOncePod claim is not signable: whether another
    /// pod uses the claim (the previous one, say) decides its Filter on every node.
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        if !self.read_write_once_pod_pvcs(pod)?.is_empty() {
            return Err(Status::unschedulable(
                "pods with ReadWriteOncePod claims are not signable",
            ));
        }
        sign_volumes(pod, |name| {
            self.listers
                .store(&PERSISTENT_VOLUME_CLAIMS)
                .get(pod.namespace(), name)
        })
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let needs_check = pod_volumes(pod).iter().any(needs_restrictions_check);
        let pvcs = match self.read_write_once_pod_pvcs(pod) {
            Ok(p) => p,
            Err(s) => return (None, s),
        };
        let conflicting = pvcs
            .iter()
            .filter(|c| pvc_used_by_pods(snapshot, &format!("{}/{c}", pod.namespace())))
            .count() as i64;
        if !needs_check && conflicting == 0 {
            return (None, Status::skip());
        }
        state.write(
            STATE_KEY,
            PreFilterState {
                read_write_once_pod_pvcs: pvcs,
                conflicting_pvc_ref_count: conflicting,
            },
        );
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl VolumeRestrictions {
    fn update(&self, state: &mut CycleState, pod: &AssignedPod, sign: i64) -> Status {
        let missing = || Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        update_pre_filter_state(state, STATE_KEY, missing, |s: &mut PreFilterState| {
            s.conflicting_pvc_ref_count += sign * s.conflicts_of(pod)
        })
    }
}

impl PreFilterExtensions for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_add: &AssignedPod,
        _node: &NodeInfo,
    ) -> Status {
        self.update(state, pod_to_add, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_remove: &AssignedPod,
        _node: &NodeInfo,
    ) -> Status {
        self.update(state, pod_to_remove, -1)
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let disk_conflict = pod_volumes(pod)
            .iter()
            .filter(|v| needs_restrictions_check(v))
            .any(|v| node.pods.iter().any(|ep| is_volume_conflict(v, ep)));
        if disk_conflict {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        match state.read::<PreFilterState>(STATE_KEY) {
            None => Status::error(format!("cannot read {STATE_KEY:?} from cycleState")),
            Some(s) if s.conflicting_pvc_ref_count > 0 => {
                Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
            }
            Some(_) => Status::success(),
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(
        VolumeRestrictions::EXTENSION_POINTS,
        no_args,
        |_, handle| {
            Ok(Arc::new(VolumeRestrictions::new(handle.listers.clone())) as Arc<dyn Plugin>)
        },
    )
    .with_informers(&[&PERSISTENT_VOLUME_CLAIMS])
    .with_rbac_rules(volume_rules(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::hints::{assigned_obj, event, hint, obj};
    use crate::framework::testing::{NodeBuilder, PodBuilder, PvcBuilder};
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, GCEPersistentDiskVolumeSource, ISCSIVolumeSource,
        RBDVolumeSource,
    };

    /// Upstream's `Test_isSchedulableAfterPodDeleted` and
    /// `Test_isSchedulableAfterPersistentVolumeClaimChange` cases.
    #[test]
    fn hints() {
        use QueueingHint::{Queue, QueueSkip};
        let pl = VolumeRestrictions::new(Arc::new(Listers::default()));
        let pod = PodBuilder::new("p")
            .volume(gce("disk", false))
            .pvc("claim")
            .info();
        let deleted = |ns: &str, volume: Option<Volume>, claim: Option<&str>| {
            let mut b = PodBuilder::new("d").namespace(ns).node("n");
            if let Some(v) = volume {
                b = b.volume(v);
            }
            if let Some(c) = claim {
                b = b.pvc(c);
            }
            Some(assigned_obj(b.build()))
        };
        let delete = event(EventResource::AssignedPod, ActionType::DELETE);
        let cases = [
            (
                "held the conflicting disk",
                deleted("default", Some(gce("disk", false)), None),
                Queue,
            ),
            (
                "held another disk",
                deleted("default", Some(gce("other", false)), None),
                QueueSkip,
            ),
            (
                "used the same claim",
                deleted("default", None, Some("claim")),
                Queue,
            ),
            (
                "used another claim",
                deleted("default", None, Some("x")),
                QueueSkip,
            ),
            (
                "another namespace",
                deleted("other", Some(gce("disk", false)), None),
                QueueSkip,
            ),
        ];
        for (name, old, want) in cases {
            assert_eq!(hint(&pl, delete, &pod, old, None), Some(want), "{name}");
        }
        let added = event(EventResource::PersistentVolumeClaim, ActionType::ADD);
        let claim = |name: &str, ns: &str| Some(obj(PvcBuilder::new(name).namespace(ns).build()));
        let cases = [
            ("the pod's claim", claim("claim", "default"), Queue),
            ("another claim", claim("x", "default"), QueueSkip),
            ("same name elsewhere", claim("claim", "other"), QueueSkip),
        ];
        for (name, new, want) in cases {
            assert_eq!(hint(&pl, added, &pod, None, new), Some(want), "{name}");
        }
        let update = event(EventResource::PersistentVolumeClaim, ActionType::UPDATE);
        assert_eq!(
            hint(
                &pl,
                update,
                &pod,
                claim("claim", "default"),
                claim("claim", "default")
            ),
            None
        );
    }

    fn gce(pd: &str, ro: bool) -> Volume {
        Volume {
            name: format!("gce-{pd}"),
            gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                pd_name: pd.into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ebs(id: &str) -> Volume {
        Volume {
            name: format!("ebs-{id}"),
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn iscsi(iqn: &str, ro: bool) -> Volume {
        Volume {
            name: "iscsi".into(),
            iscsi: Some(ISCSIVolumeSource {
                iqn: iqn.into(),
                read_only: Some(ro),
                target_portal: "127.0.0.1:3260".into(),
                lun: 0,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rbd(mons: &[&str], pool: &str, image: &str) -> Volume {
        Volume {
            name: "rbd".into(),
            rbd: Some(RBDVolumeSource {
                monitors: mons.iter().map(|m| m.to_string()).collect(),
                pool: Some(pool.into()),
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn run(listers: Arc<Listers>, pod: &PodInfo, nodes: Vec<NodeInfo>) -> Status {
        let pl = VolumeRestrictions::new(listers);
        let snapshot = Snapshot::from_node_infos(nodes.into_iter().map(Arc::new));
        let mut cs = CycleState::new();
        let (_, s) = pl.pre_filter(&mut cs, pod, &snapshot);
        if !s.is_success() {
            return s;
        }
        pl.filter(&cs, pod, &snapshot.nodes()[0])
    }

    #[test]
    fn disk_conflicts() {
        let with = |v: Volume| PodBuilder::new("existing").node("n").volume(v).build();
        let disk = Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        let cases: Vec<(&str, Volume, Volume, Status)> = vec![
            (
                "same GCE PD",
                gce("foo", false),
                gce("foo", false),
                disk.clone(),
            ),
            (
                "GCE PD both read-only",
                gce("foo", true),
                gce("foo", true),
                Status::success(),
            ),
            (
                "GCE PD one read-only",
                gce("foo", true),
                gce("foo", false),
                disk.clone(),
            ),
            (
                "other GCE PD",
                gce("foo", false),
                gce("bar", false),
                Status::success(),
            ),
            (
                "same EBS even read-only",
                ebs("v1"),
                ebs("v1"),
                disk.clone(),
            ),
            ("other EBS", ebs("v1"), ebs("v2"), Status::success()),
            (
                "same iSCSI",
                iscsi("iqn.a", false),
                iscsi("iqn.a", false),
                disk.clone(),
            ),
            (
                "iSCSI both read-only",
                iscsi("iqn.a", true),
                iscsi("iqn.a", true),
                Status::success(),
            ),
            (
                "RBD overlapping monitors",
                rbd(&["a", "b"], "p", "img"),
                rbd(&["b", "c"], "p", "img"),
                disk.clone(),
            ),
            (
                "RBD other image",
                rbd(&["a"], "p", "img"),
                rbd(&["a"], "p", "img2"),
                Status::success(),
            ),
            (
                "different kinds",
                gce("foo", false),
                ebs("foo"),
                Status::success(),
            ),
        ];
        for (name, existing, new, want) in cases {
            let node = NodeBuilder::new("n").info(vec![with(existing)]);
            let pod = PodBuilder::new("p").volume(new).info();
            assert_eq!(
                run(Arc::new(Listers::default()), &pod, vec![node]),
                want,
                "{name}"
            );
        }
        // No restricted volume and no ReadWriteOncePod claim: Skip.
        let pod = PodBuilder::new("p").info();
        assert_eq!(
            run(
                Arc::new(Listers::default()),
                &pod,
                vec![NodeBuilder::new("n").info(vec![])]
            ),
            Status::skip()
        );
    }

    #[test]
    fn read_write_once_pod() {
        let l = Listers::default();
        l.store(&PERSISTENT_VOLUME_CLAIMS).apply(
            PvcBuilder::new("rwop")
                .access_modes(&["ReadWriteOncePod"])
                .build(),
        );
        l.store(&PERSISTENT_VOLUME_CLAIMS).apply(
            PvcBuilder::new("rwo")
                .access_modes(&["ReadWriteOnce"])
                .build(),
        );
        let l = Arc::new(l);
        let user = |claim: &str, node: &str| PodBuilder::new("user").node(node).pvc(claim).build();
        let conflict = Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        let pod = PodBuilder::new("p").pvc("rwop").info();
        // In use on another node: every node is out.
        let nodes = vec![
            NodeBuilder::new("n1").info(vec![]),
            NodeBuilder::new("n2").info(vec![user("rwop", "n2")]),
        ];
        assert_eq!(run(l.clone(), &pod, nodes), conflict);
        // Unused: skip.
        assert_eq!(
            run(l.clone(), &pod, vec![NodeBuilder::new("n1").info(vec![])]),
            Status::skip()
        );
        // ReadWriteOnce claims are shared freely.
        let pod_rwo = PodBuilder::new("p").pvc("rwo").info();
        assert_eq!(
            run(
                l.clone(),
                &pod_rwo,
                vec![NodeBuilder::new("n1").info(vec![user("rwo", "n1")])]
            ),
            Status::skip()
        );
        // Same claim name in another namespace is another claim.
        let other_ns = PodBuilder::new("user")
            .namespace("other")
            .node("n1")
            .pvc("rwop")
            .build();
        assert_eq!(
            run(
                l.clone(),
                &pod,
                vec![NodeBuilder::new("n1").info(vec![other_ns])]
            ),
            Status::skip()
        );
        // Missing claim.
        let missing = PodBuilder::new("p").pvc("nope").info();
        assert_eq!(
            run(
                l.clone(),
                &missing,
                vec![NodeBuilder::new("n1").info(vec![])]
            ),
            Status::unresolvable("persistentvolumeclaim \"nope\" not found")
        );

        // RemovePod of the user (preemption) clears the conflict; AddPod brings it back.
        let pl = VolumeRestrictions::new(l);
        let user_info = AssignedPod::new(user("rwop", "n1"));
        let node = NodeBuilder::new("n1").info(vec![user("rwop", "n1")]);
        let snapshot = Snapshot::from_node_infos([Arc::new(node.clone())]);
        let mut cs = CycleState::new();
        assert!(pl.pre_filter(&mut cs, &pod, &snapshot).1.is_success());
        assert_eq!(pl.filter(&cs, &pod, &node), conflict);
        let mut removed = cs.clone();
        assert!(
            pl.remove_pod(&mut removed, &pod, &user_info, &node)
                .is_success()
        );
        assert_eq!(pl.filter(&removed, &pod, &node), Status::success());
        // The clone did not change the original.
        assert_eq!(pl.filter(&cs, &pod, &node), conflict);
        assert!(
            pl.add_pod(&mut removed, &pod, &user_info, &node)
                .is_success()
        );
        assert_eq!(pl.filter(&removed, &pod, &node), conflict);
    }
}
