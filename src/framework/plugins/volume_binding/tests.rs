use super::binder::ConflictReason;
use super::*;
use crate::emulation::{Emulation, Minor};
use crate::framework::api_calls::{ApiError, RecordingApi, Verb};
use crate::framework::args::decode_at;
use crate::framework::interface::Code;
use crate::framework::listers::{
    CSI_DRIVERS, CSI_STORAGE_CAPACITIES, Listers, PERSISTENT_VOLUMES, STORAGE_CLASSES,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

/// The claims and the volumes replaced through the API, in order.
fn pvc_updates(api: &RecordingApi) -> Vec<PersistentVolumeClaim> {
    api.bodies::<PersistentVolumeClaim, _>(Verb::Replace, None)
}

fn pv_updates(api: &RecordingApi) -> Vec<PersistentVolume> {
    api.bodies::<PersistentVolume, _>(Verb::Replace, None)
}
use crate::framework::testing::{
    NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, storage_class, term,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, CSIStorageCapacity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

const WFFC: &str = "wait";
const IMMEDIATE: &str = "immediate";
const NO_PROVISIONER: &str = "local";
const CAPACITY_CLASS: &str = "tracked";
const HOST: &str = "kubernetes.io/hostname";

/// Classes, PVs and claims shared by the tests.
fn listers() -> Listers {
    let l = Listers::default();
    for sc in [
        storage_class(WFFC, "example.com/p", Some("WaitForFirstConsumer")),
        storage_class(IMMEDIATE, "example.com/p", Some("Immediate")),
        storage_class(
            NO_PROVISIONER,
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
        ),
        storage_class(
            CAPACITY_CLASS,
            "csi.example.com",
            Some("WaitForFirstConsumer"),
        ),
        storage_class("unset", "example.com/p", None),
    ] {
        l.store(&STORAGE_CLASSES).apply(sc);
    }
    let on = |n: &str| term(&[(HOST, "In", &[n])], &[]);
    for pv in [
        PvBuilder::new("pv-bound-n1")
            .node_affinity(on("n1"))
            .claim_ref("default", "bound-n1", "bound-n1"),
        PvBuilder::new("pv-local-n1-5g")
            .class(NO_PROVISIONER)
            .capacity("5Gi")
            .node_affinity(on("n1")),
        PvBuilder::new("pv-local-n1-10g")
            .class(NO_PROVISIONER)
            .capacity("10Gi")
            .node_affinity(on("n1")),
        PvBuilder::new("pv-local-n2-1g")
            .class(NO_PROVISIONER)
            .capacity("1Gi")
            .node_affinity(on("n2")),
    ] {
        l.store(&PERSISTENT_VOLUMES)
            .apply(pv.resource_version("1").build());
    }
    for pvc in [
        PvcBuilder::new("bound-n1").bound("pv-bound-n1"),
        PvcBuilder::new("bound-missing").bound("pv-gone"),
        PvcBuilder::new("immediate").class(IMMEDIATE),
        PvcBuilder::new("prebound")
            .class(WFFC)
            .volume_name("pv-local-n1-5g"),
        PvcBuilder::new("wffc").class(WFFC).request("1Gi"),
        PvcBuilder::new("local-2g")
            .class(NO_PROVISIONER)
            .request("2Gi"),
        PvcBuilder::new("local-4g")
            .class(NO_PROVISIONER)
            .request("4Gi"),
        PvcBuilder::new("local-8g")
            .class(NO_PROVISIONER)
            .request("8Gi"),
        PvcBuilder::new("wffc-selected-n2")
            .class(WFFC)
            .annotation(binder::ANN_SELECTED_NODE, "n2"),
        PvcBuilder::new("unset-mode").class("unset"),
        PvcBuilder::new("lost")
            .class(WFFC)
            .phase("Lost")
            .volume_name("pv-x"),
        PvcBuilder::new("deleting").class(WFFC).deleting(),
        PvcBuilder::new("tracked")
            .class(CAPACITY_CLASS)
            .request("10Gi"),
    ] {
        l.store(&PERSISTENT_VOLUME_CLAIMS)
            .apply(pvc.resource_version("1").build());
    }
    l
}

fn plugin(l: Listers) -> (VolumeBinding, Arc<RecordingApi>, Handle) {
    let api = Arc::new(RecordingApi::default());
    let mut handle = Handle::new(api.clone());
    handle.listers = Arc::new(l);
    let nodes: Vec<_> = ["n1", "n2"]
        .iter()
        .map(|n| Arc::new(NodeBuilder::new(n).info(vec![])))
        .collect();
    handle
        .snapshot
        .store(Arc::new(Snapshot::from_node_infos(nodes)));
    let binder = VolumeBinder::new(&handle, Duration::from_secs(2))
        .with_poll_interval(Duration::from_millis(10));
    (VolumeBinding::new(Arc::new(binder)), api, handle)
}

fn pod(claims: &[&str]) -> PodInfo {
    claims
        .iter()
        .fold(PodBuilder::new("p"), |b, c| b.pvc(c))
        .info()
}

/// PreFilter then Filter on n1 and n2.
/// The cycle state after PreFilter, Filter and a successful Reserve on `node`.
fn reserved(pl: &VolumeBinding, pod: &PodInfo, node: &str) -> CycleState {
    let (mut cs, _, _) = filter(pl, pod);
    assert!(pl.reserve(&mut cs, pod, node).is_success());
    cs
}

/// An annotation of `meta`'s object.
fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn filter(pl: &VolumeBinding, pod: &PodInfo) -> (CycleState, Status, Vec<Status>) {
    let mut cs = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut cs, pod, &Snapshot::new());
    if !pre.is_success() {
        return (cs, pre, vec![]);
    }
    let statuses = ["n1", "n2"]
        .iter()
        .map(|n| pl.filter(&cs, pod, &NodeBuilder::new(n).info(vec![])))
        .collect();
    (cs, pre, statuses)
}

#[test]
fn pre_filter_and_filter_table() {
    let ok = Status::success();
    let nr = |r: ConflictReason| Status::unresolvable(r.as_str());
    let cases: Vec<(&str, Vec<&str>, Status, Vec<Status>)> = vec![
        ("no claims: skip", vec![], Status::skip(), vec![]),
        (
            "bound claim: PV node affinity",
            vec!["bound-n1"],
            ok.clone(),
            vec![ok.clone(), nr(ConflictReason::NodeConflict)],
        ),
        (
            "bound to a PV that does not exist",
            vec!["bound-missing"],
            ok.clone(),
            vec![
                nr(ConflictReason::PvNotExist),
                nr(ConflictReason::PvNotExist),
            ],
        ),
        (
            "unbound immediate claim",
            vec!["immediate"],
            Status::unresolvable(ERR_UNBOUND_IMMEDIATE),
            vec![],
        ),
        (
            "pre-bound claim counts as immediate",
            vec!["prebound"],
            Status::unresolvable(ERR_UNBOUND_IMMEDIATE),
            vec![],
        ),
        (
            "delayed claim with a provisioner fits everywhere",
            vec!["wffc"],
            ok.clone(),
            vec![ok.clone(), ok.clone()],
        ),
        (
            "static PVs: only where a PV fits",
            vec!["local-2g"],
            ok.clone(),
            vec![ok.clone(), nr(ConflictReason::BindConflict)],
        ),
        (
            "static PVs: two claims need two PVs",
            vec!["local-2g", "local-4g"],
            ok.clone(),
            vec![ok.clone(), nr(ConflictReason::BindConflict)],
        ),
        (
            "static PVs: three claims, two PVs",
            vec!["local-2g", "local-4g", "local-8g"],
            ok.clone(),
            vec![
                nr(ConflictReason::BindConflict),
                nr(ConflictReason::BindConflict),
            ],
        ),
        (
            "selected node set: only that node",
            vec!["wffc-selected-n2"],
            ok.clone(),
            vec![nr(ConflictReason::BindConflict), ok.clone()],
        ),
        (
            "bound and unbound conflicts together",
            vec!["bound-n1", "local-2g"],
            ok.clone(),
            vec![
                ok.clone(),
                Status::with_reasons(
                    Code::UnschedulableAndUnresolvable,
                    vec![
                        ConflictReason::NodeConflict.as_str().into(),
                        ConflictReason::BindConflict.as_str().into(),
                    ],
                ),
            ],
        ),
        (
            "missing claim",
            vec!["nope"],
            Status::unresolvable("persistentvolumeclaim \"nope\" not found"),
            vec![],
        ),
        (
            "lost claim",
            vec!["lost"],
            Status::unresolvable(
                "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"pv-x\"",
            ),
            vec![],
        ),
        (
            "claim being deleted",
            vec!["deleting"],
            Status::unresolvable("persistentvolumeclaim \"deleting\" is being deleted"),
            vec![],
        ),
        (
            "class without binding mode",
            vec!["unset-mode"],
            Status::error("VolumeBindingMode not set for StorageClass \"unset\""),
            vec![],
        ),
    ];
    for (name, claims, want_pre, want_filter) in cases {
        let (pl, _, _) = plugin(listers());
        let (_, pre, filtered) = filter(&pl, &pod(&claims));
        assert_eq!(pre, want_pre, "{name}: PreFilter");
        assert_eq!(filtered, want_filter, "{name}: Filter");
    }
}

#[test]
fn generic_ephemeral_volumes_use_the_pods_own_claim() {
    use k8s_openapi::api::core::v1::{EphemeralVolumeSource, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let eph = PodBuilder::new("p")
        .volume(Volume {
            name: "scratch".into(),
            ephemeral: Some(EphemeralVolumeSource::default()),
            ..Default::default()
        })
        .info();
    // Not created yet by the ephemeral volume controller.
    let (pl, _, _) = plugin(listers());
    assert_eq!(
        filter(&pl, &eph).1,
        Status::unresolvable(
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
        )
    );
    // A claim of that name the pod does not own.
    let l = listers();
    l.store(&PERSISTENT_VOLUME_CLAIMS)
        .apply(PvcBuilder::new("p-scratch").class(WFFC).build());
    let (pl, _, _) = plugin(l);
    assert_eq!(
        filter(&pl, &eph).1,
        Status::unresolvable(
            "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
        )
    );
    // Owned by the pod: provisioned like any delayed claim.
    let l = listers();
    let mut owned = PvcBuilder::new("p-scratch").class(WFFC).build();
    owned.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "p".into(),
        uid: "p".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    l.store(&PERSISTENT_VOLUME_CLAIMS).apply(owned);
    let (pl, _, _) = plugin(l);
    let (_, pre, filtered) = filter(&pl, &eph);
    assert!(pre.is_success());
    assert_eq!(filtered, vec![Status::success(), Status::success()]);
}

#[test]
fn static_matching_picks_the_smallest_fitting_pv() {
    let (pl, _, _) = plugin(listers());
    let p = pod(&["local-4g"]);
    let (cs, _, _) = filter(&pl, &p);
    let st = state(&cs).expect("state");
    let by_node = st.pod_volumes_by_node.lock();
    let b = &by_node["n1"].static_bindings;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].pv.metadata.name.as_deref(), Some("pv-local-n1-5g"));
}

#[test]
fn prefilter_keeps_only_pvs_a_claim_may_take_and_reserve_only_the_chosen_node() {
    // A PV of the class bound to another claim can match no claim of the pod on any node:
    // PreFilter leaves it out, and Filter picks the same PV as before.
    let l = listers();
    l.store(&PERSISTENT_VOLUMES).apply(
        PvBuilder::new("pv-local-n1-3g-taken")
            .class(NO_PROVISIONER)
            .capacity("3Gi")
            .node_affinity(term(&[(HOST, "In", &["n1"])], &[]))
            .claim_ref("default", "someone-else", "someone-else")
            .resource_version("1")
            .build(),
    );
    let (pl, _, _) = plugin(l);
    let p = pod(&["local-2g"]);
    let (mut cs, _, statuses) = filter(&pl, &p);
    assert!(statuses[0].is_success(), "{:?}", statuses[0]);
    {
        let st = state(&cs).expect("state");
        let mut candidates: Vec<_> = st.claims.unbound_volumes_delay_binding[NO_PROVISIONER]
            .iter()
            .filter_map(|pv| pv.metadata.name.clone())
            .collect();
        candidates.sort();
        assert_eq!(
            candidates,
            ["pv-local-n1-10g", "pv-local-n1-5g", "pv-local-n2-1g"]
        );
        let by_node = st.pod_volumes_by_node.lock();
        assert_eq!(
            by_node["n1"].static_bindings[0].pv.metadata.name.as_deref(),
            Some("pv-local-n1-5g")
        );
    }
    // After Reserve on n1 the state, which lives through the binding cycle, holds n1 alone.
    assert!(pl.reserve(&mut cs, &p, "n1").is_success());
    let st = state(&cs).expect("state");
    let nodes: Vec<String> = st.pod_volumes_by_node.lock().keys().cloned().collect();
    assert_eq!(nodes, ["n1"]);
}

#[test]
fn missing_class_for_provisioning_and_capacity() {
    // A delayed claim whose class disappeared between PreFilter and Filter: error.
    let l = listers();
    l.store(&PERSISTENT_VOLUME_CLAIMS)
        .apply(PvcBuilder::new("ghost").class("ghost").build());
    let (pl, _, _) = plugin(l);
    // The class is unknown: the claim is treated as immediate (upstream IsDelayBindingMode).
    assert_eq!(
        filter(&pl, &pod(&["ghost"])).1,
        Status::unresolvable(ERR_UNBOUND_IMMEDIATE)
    );

    // CSI storage capacity: only nodes with an accessible pool large enough.
    let l = listers();
    l.store(&CSI_DRIVERS).apply(CSIDriver {
        metadata: ObjectMeta {
            name: Some("csi.example.com".into()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            storage_capacity: Some(true),
            ..Default::default()
        },
    });
    let capacity = |name: &str, node: &str, size: &str| CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        storage_class_name: CAPACITY_CLASS.into(),
        capacity: Some(Quantity(size.into())),
        node_topology: Some(LabelSelector {
            match_labels: Some([(HOST.to_string(), node.to_string())].into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    l.store(&CSI_STORAGE_CAPACITIES)
        .apply(capacity("c1", "n1", "100Gi"));
    l.store(&CSI_STORAGE_CAPACITIES)
        .apply(capacity("c2", "n2", "1Gi"));
    let (pl, _, _) = plugin(l);
    let (_, pre, filtered) = filter(&pl, &pod(&["tracked"]));
    assert!(pre.is_success());
    assert_eq!(
        filtered,
        vec![
            Status::success(),
            Status::unresolvable(ConflictReason::NotEnoughSpace.as_str())
        ]
    );
    assert_eq!(filtered[1].code(), Code::UnschedulableAndUnresolvable);
}

/// 1.37 (StorageCapacityScoring on, the default shape): a pod provisioning a claim prefers
/// the node whose pool is emptier; 1.36 does not score.
#[test]
fn storage_capacity_scoring_prefers_the_emptier_pool_from_1_37() {
    let l = listers();
    l.store(&CSI_DRIVERS).apply(CSIDriver {
        metadata: ObjectMeta {
            name: Some("csi.example.com".into()),
            ..Default::default()
        },
        spec: CSIDriverSpec {
            storage_capacity: Some(true),
            ..Default::default()
        },
    });
    for (name, node, size) in [("c1", "n1", "100Gi"), ("c2", "n2", "20Gi")] {
        l.store(&CSI_STORAGE_CAPACITIES).apply(CSIStorageCapacity {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            storage_class_name: CAPACITY_CLASS.into(),
            capacity: Some(Quantity(size.into())),
            node_topology: Some(LabelSelector {
                match_labels: Some([(HOST.to_string(), node.to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let (_, _, handle) = plugin(l);
    let args_at = |minor| {
        let args = decode_at::<VolumeBindingArgs>(None, &Emulation::of(minor)).expect("args");
        typed::<VolumeBindingArgs>(&args).expect("typed")
    };
    // 10Gi of n1's 100Gi (10 % used: 90) or of n2's 20Gi (50 %: 50).
    let p = pod(&["tracked"]);
    let nodes = |name: &str| NodeBuilder::new(name).info(vec![]);
    for (minor, want) in [(Minor::V1_36, None), (Minor::V1_37, Some((90, 50)))] {
        let h = handle
            .clone()
            .with_emulation(Arc::new(Emulation::of(minor)));
        let pl = VolumeBinding::from_args(&args_at(minor), &h);
        let (mut cs, _, filtered) = filter(&pl, &p);
        assert!(filtered.iter().all(Status::is_success), "{filtered:?}");
        let pre = pl.pre_score(&mut cs, &p, &Snapshot::new(), &[]);
        match want {
            None => assert!(pre.is_skip(), "{minor}"),
            Some((n1, n2)) => {
                assert!(pre.is_success(), "{minor}: {pre:?}");
                let score = |n: &str| pl.score(&cs, &p, &nodes(n)).expect("score");
                assert_eq!((score("n1"), score("n2")), (n1, n2), "{minor}");
            }
        }
    }
}

#[test]
fn reserve_assumes_so_the_next_pod_does_not_take_the_same_pv() {
    let (pl, _, _) = plugin(listers());
    let first = pod(&["local-2g"]);
    let (mut cs, _, filtered) = filter(&pl, &first);
    assert!(filtered[0].is_success());
    assert!(pl.reserve(&mut cs, &first, "n1").is_success());
    // A second pod with a 4Gi claim: the 5Gi PV is taken, the 10Gi one is left.
    let second = PodBuilder::new("q").pvc("local-4g").info();
    let (cs2, _, filtered2) = filter(&pl, &second);
    assert!(filtered2[0].is_success());
    let taken = state(&cs2).expect("state").pod_volumes_by_node.lock()["n1"].static_bindings[0]
        .pv
        .metadata
        .name
        .clone();
    assert_eq!(taken.as_deref(), Some("pv-local-n1-10g"));
    // A third pod wanting 8Gi finds nothing once the second reserved too...
    let mut cs2 = cs2;
    assert!(pl.reserve(&mut cs2, &second, "n1").is_success());
    let third = PodBuilder::new("r").pvc("local-8g").info();
    assert_eq!(
        filter(&pl, &third).2[0],
        Status::unresolvable(ConflictReason::BindConflict.as_str())
    );
    // ...and finds the 10Gi PV again after Unreserve.
    pl.unreserve(&mut cs2, &second, "n1");
    assert!(filter(&pl, &third).2[0].is_success());
}

#[tokio::test]
async fn pre_bind_annotates_the_claim_and_waits_for_the_binding() {
    let (pl, api, handle) = plugin(listers());
    let p = pod(&["wffc"]);
    let cs = reserved(&pl, &p, "n2");
    // Play the provisioner once the claim update is seen.
    let listers = handle.listers.clone();
    let provisioner = {
        let api = api.clone();
        tokio::spawn(async move {
            loop {
                if let Some(c) = pvc_updates(&api).first().cloned() {
                    let bound = PvcBuilder::new("wffc")
                        .class(WFFC)
                        .annotation(binder::ANN_SELECTED_NODE, "n2")
                        .bound("pv-new")
                        .resource_version("2")
                        .build();
                    listers
                        .store(&PERSISTENT_VOLUMES)
                        .apply(PvBuilder::new("pv-new").build());
                    listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(bound);
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    assert_eq!(pl.pre_bind(&cs, &p, "n2").await, Status::success());
    let updated = provisioner.await.expect("provisioner");
    assert_eq!(
        annotation(&updated.metadata, binder::ANN_SELECTED_NODE),
        Some("n2")
    );
}

#[tokio::test]
async fn pre_bind_binds_static_pvs_and_times_out_when_nothing_binds() {
    // The informer shows the PV at the version our write made (the API's next one), but
    // without our claimRef: reset.
    let (pl, _, handle) = plugin(listers());
    let p = pod(&["local-2g"]);
    let cs = reserved(&pl, &p, "n1");
    handle.listers.store(&PERSISTENT_VOLUMES).apply(
        PvBuilder::new("pv-local-n1-5g")
            .class(NO_PROVISIONER)
            .capacity("5Gi")
            .node_affinity(term(&[(HOST, "In", &["n1"])], &[]))
            .resource_version("2")
            .build(),
    );
    assert_eq!(
        pl.pre_bind(&cs, &p, "n1").await,
        Status::error("ClaimRef got reset for pv \"pv-local-n1-5g\"")
    );

    let (pl, api, handle) = plugin(listers());
    let cs = reserved(&pl, &p, "n1");
    // The informer sees our PV update; nothing (no PV controller here) binds the claim.
    handle.listers.store(&PERSISTENT_VOLUMES).apply(
        PvBuilder::new("pv-local-n1-5g")
            .class(NO_PROVISIONER)
            .capacity("5Gi")
            .node_affinity(term(&[(HOST, "In", &["n1"])], &[]))
            .claim_ref("default", "local-2g", "local-2g")
            .resource_version("2")
            .build(),
    );
    let s = pl.pre_bind(&cs, &p, "n1").await;
    assert_eq!(
        s,
        Status::error("binding volumes: context deadline exceeded")
    );
    let updates = pv_updates(&api);
    assert_eq!(updates.len(), 1);
    let pv = &updates[0];
    assert_eq!(pv.metadata.name.as_deref(), Some("pv-local-n1-5g"));
    let claim_ref = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .expect("claimRef");
    assert_eq!(claim_ref.name.as_deref(), Some("local-2g"));
    assert_eq!(claim_ref.uid.as_deref(), Some("local-2g"));
    assert_eq!(
        annotation(&pv.metadata, binder::ANN_BOUND_BY_CONTROLLER),
        Some("yes")
    );
}

#[tokio::test]
async fn pre_bind_fails_when_the_provisioner_gives_up_and_on_api_errors() {
    // The provisioner removes the selected-node annotation: provisioning failed.
    let (pl, api, handle) = plugin(listers());
    let p = pod(&["wffc"]);
    let cs = reserved(&pl, &p, "n1");
    handle.listers.store(&PERSISTENT_VOLUME_CLAIMS).apply(
        PvcBuilder::new("wffc")
            .class(WFFC)
            .annotation("other", "x")
            .resource_version("3")
            .build(),
    );
    assert_eq!(
        pl.pre_bind(&cs, &p, "n1").await,
        Status::error("provisioning failed for PVC \"wffc\"")
    );
    assert_eq!(pvc_updates(&api).len(), 1);

    // The API refuses the update: error, and the assumption is dropped.
    let (pl, api, _) = plugin(listers());
    api.fail::<PersistentVolume>(Verb::Replace, ApiError::Conflict("changed".into()));
    api.fail::<PersistentVolumeClaim>(Verb::Replace, ApiError::Conflict("changed".into()));
    let p = pod(&["local-2g"]);
    let cs = reserved(&pl, &p, "n1");
    assert_eq!(
        pl.pre_bind(&cs, &p, "n1").await,
        Status::error("conflict: changed")
    );
    // The PV is free again for the next pod.
    let q = PodBuilder::new("q").pvc("local-2g").info();
    let (cs2, _, _) = filter(&pl, &q);
    assert_eq!(
        state(&cs2).expect("state").pod_volumes_by_node.lock()["n1"].static_bindings[0]
            .pv
            .metadata
            .name
            .as_deref(),
        Some("pv-local-n1-5g")
    );
}

#[test]
fn pre_flight_says_whether_pre_bind_will_act() {
    let (pl, _, _) = plugin(listers());
    // Claims to provision or bind: PreBind will act (the scheduler nominates the node first).
    let p = pod(&["wffc"]);
    let cs = reserved(&pl, &p, "n2");
    assert!(pl.pre_bind_pre_flight(&cs, &p, "n2").is_success());
    // A node Filter did not see: an error, as upstream.
    assert_eq!(
        pl.pre_bind_pre_flight(&cs, &p, "n9"),
        Status::error("no pod volume found for node \"n9\"")
    );
    // Everything bound, or no claims: nothing to do.
    let p = pod(&["bound-n1"]);
    let cs = reserved(&pl, &p, "n1");
    assert!(pl.pre_bind_pre_flight(&cs, &p, "n1").is_skip());
    let p = pod(&[]);
    let cs = reserved(&pl, &p, "n1");
    assert!(pl.pre_bind_pre_flight(&cs, &p, "n1").is_skip());
    // Without PreFilter's state: an error.
    assert_eq!(
        pl.pre_bind_pre_flight(&CycleState::new(), &p, "n1").code(),
        Code::Error
    );
}

#[tokio::test]
async fn all_bound_claims_skip_pre_bind() {
    let (pl, api, _) = plugin(listers());
    let p = pod(&["bound-n1"]);
    let mut cs = reserved(&pl, &p, "n1");
    assert_eq!(pl.pre_bind(&cs, &p, "n1").await, Status::success());
    assert!(pv_updates(&api).is_empty());
    assert!(pvc_updates(&api).is_empty());
    // Score is off without `shape`.
    assert!(pl.pre_score(&mut cs, &p, &Snapshot::new(), &[]).is_skip());
}
