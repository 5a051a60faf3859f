//! Every status the operator writes, computed by the status code itself (`status/`) from the
//! observation that leads to it, as the whole objects GitOps tools read: the rows of the health
//! tables (`tests/kstatus_health.rs` reads them with Flux's and Helm's kstatus). A status the
//! operator learns to write gets a sample here.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::status::{
    ApplyError, ApplyFix, BlockedNode, ConfigOutcome, DeploymentState, LeaseState, PolicyConflict,
    PolicyObservation, ProfileObservation, operator_stopped, policy_status, profile_status,
};
use crate::api::scheduler_profile::ProfileMode;
use crate::api::{LeafClusterPolicyStatus, SchedulerProfileStatus};

/// One status the operator writes: a short name, and the object carrying it.
#[derive(Debug, Clone)]
pub struct StatusSample {
    /// What the object is in (`ready`, `rolling out`, `invalid`, ...), unique per kind.
    pub name: &'static str,
    /// `SchedulerProfile` or `LeafClusterPolicy`, with `metadata.generation` and the status.
    pub object: Value,
}

const GENERATION: i64 = 3;

/// The samples' clock (also the status unit tests').
pub(crate) fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `seconds` after [`now`].
pub(crate) fn seconds_later(seconds: i64) -> Timestamp {
    now()
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap_or(now())
}

/// A Lease `holder` renewed [`now`], for 15 s.
pub(crate) fn lease(holder: &str) -> LeaseState {
    LeaseState {
        holder: Some(holder.into()),
        renew_time: Some(now()),
        lease_duration_seconds: Some(15),
    }
}

fn rolled_out(replicas: i32) -> DeploymentState {
    DeploymentState {
        generation: 2,
        observed_generation: 2,
        replicas,
        updated_replicas: replicas,
        ready_replicas: replicas,
        available_replicas: replicas,
        replica_failure: None,
    }
}

/// A Deployment-mode profile with one replica, rolled out, its Lease held.
fn running() -> ProfileObservation {
    ProfileObservation {
        generation: Some(GENERATION),
        mode: ProfileMode::Deployment,
        suspend: false,
        replicas: 1,
        config: ConfigOutcome::Valid {
            hash: "0123abcd".into(),
            warnings: vec![],
            leaf_policies: vec![],
            kubernetes_version: "1.37".into(),
        },
        ignored_policies: vec![],
        objects_in_use: vec![],
        apply_error: None,
        deployment: Some(rolled_out(1)),
        embedded: None,
        embedded_identity: None,
        lease: Some(lease("ksched-profile-sample-7d9f8-x2x4q")),
        lease_duration_seconds: 15,
        lease_name: "ksched-system/ksched-profile-sample".into(),
        pending_pods: 0,
        now: now(),
    }
}

fn embedded() -> ProfileObservation {
    ProfileObservation {
        mode: ProfileMode::Embedded,
        deployment: None,
        embedded: Some(Ok(())),
        embedded_identity: Some("ksched-operator-0_sample".into()),
        lease: Some(lease("ksched-operator-0_sample")),
        ..running()
    }
}

fn profile(status: &SchedulerProfileStatus, extra_metadata: Value) -> Value {
    let mut metadata = json!({"name": "sample", "generation": GENERATION});
    merge(&mut metadata, extra_metadata);
    json!({
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": metadata,
        "spec": {},
        "status": status,
    })
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

/// The statuses of SchedulerProfiles, each as `profile_status` (or `operator_stopped`) computes it.
fn profile_samples() -> Vec<StatusSample> {
    let fresh = SchedulerProfileStatus::default();
    let computed = |obs: ProfileObservation| profile_status(&fresh, &obs);
    let ready = computed(running());
    let mut out = vec![("ready", ready.clone())];
    out.push(("ready, embedded", computed(embedded())));
    out.push((
        "suspended",
        computed(ProfileObservation {
            suspend: true,
            deployment: Some(rolled_out(0)),
            ..running()
        }),
    ));
    out.push((
        "scaled to zero",
        computed(ProfileObservation {
            replicas: 0,
            deployment: Some(rolled_out(0)),
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "rendering, no Deployment yet",
        computed(ProfileObservation {
            deployment: None,
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "rolling out",
        computed(ProfileObservation {
            replicas: 2,
            ..running()
        }),
    ));
    out.push((
        "rolling out, pods cannot be created",
        computed(ProfileObservation {
            deployment: Some(DeploymentState {
                generation: 2,
                observed_generation: 2,
                replica_failure: Some(
                    "pods \"ksched-profile-sample-5d8f9-\" is forbidden: no PriorityClass with name critical was found".into(),
                ),
                ..DeploymentState::default()
            }),
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "a rendered name is another object's",
        computed(ProfileObservation {
            objects_in_use: vec!["ClusterRole ksched:profile:sample".into()],
            deployment: None,
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "no leader",
        computed(ProfileObservation {
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "no leader, Lease not renewed",
        computed(ProfileObservation {
            now: seconds_later(60),
            ..running()
        }),
    ));
    out.push((
        "no leader, embedded: another holder",
        computed(ProfileObservation {
            lease: Some(lease("an-older-operator_sample")),
            ..embedded()
        }),
    ));
    out.push((
        "embedded starting",
        computed(ProfileObservation {
            embedded: None,
            lease: None,
            ..embedded()
        }),
    ));
    out.push((
        "embedded failed",
        computed(ProfileObservation {
            embedded: Some(Err("the scheduler's informers did not sync".into())),
            lease: None,
            ..embedded()
        }),
    ));
    out.push((
        "operator stopped",
        operator_stopped(
            &computed(embedded()),
            Some(GENERATION),
            "ksched-operator-0",
            now(),
        ),
    ));
    let apply_error = ApplyError {
        message:
            "applying Deployment ksched-system/ksched-profile-sample: etcdserver: request timed out"
                .into(),
        fix: ApplyFix::Retry,
        attempts: 2,
        retry_after_seconds: 10,
    };
    out.push((
        "apply failed, retrying",
        computed(ProfileObservation {
            apply_error: Some(apply_error.clone()),
            ..running()
        }),
    ));
    out.push((
        "apply failed, refused",
        computed(ProfileObservation {
            apply_error: Some(ApplyError {
                message: "applying Deployment ksched-system/ksched-profile-sample: Deployment.apps \"ksched-profile-sample\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1".into(),
                fix: ApplyFix::Spec,
                ..apply_error
            }),
            ..running()
        }),
    ));
    out.push((
        "invalid",
        profile_status(
            &ready,
            &ProfileObservation {
                config: ConfigOutcome::Invalid {
                    message: "spec.plugins.score.enabled[0].name: Invalid value: \"NodeResourceFit\": no plugin named \"NodeResourceFit\" exists (did you mean NodeResourcesFit?)".into(),
                },
                ..running()
            },
        ),
    ));
    out.push((
        "invalid, never rendered",
        computed(ProfileObservation {
            config: ConfigOutcome::Invalid {
                message:
                    "spec.pluginConfig[0].args.scoringStrategy.type: Unsupported value: \"Most\""
                        .into(),
            },
            deployment: None,
            lease: None,
            ..running()
        }),
    ));
    out.push((
        "scheduler name in use",
        computed(ProfileObservation {
            config: ConfigOutcome::NameInUse {
                message: "another scheduler serves the name sample: Lease kube-system/sample, which ksched did not create; rename the profile".into(),
            },
            deployment: None,
            lease: None,
            ..running()
        }),
    ));
    let mut samples: Vec<StatusSample> = out
        .into_iter()
        .map(|(name, status)| StatusSample {
            name,
            object: profile(&status, json!({})),
        })
        .collect();
    samples.push(StatusSample {
        name: "not yet observed",
        object: profile(&ready, json!({"generation": GENERATION + 1})),
    });
    samples.push(StatusSample {
        name: "no status yet",
        object: {
            let mut o = profile(&ready, json!({}));
            if let Some(o) = o.as_object_mut() {
                o.remove("status");
            }
            o
        },
    });
    samples.push(StatusSample {
        name: "deleting",
        object: profile(
            &ready,
            json!({"deletionTimestamp": "2027-01-15T08:00:00Z", "finalizers": ["ksched.io/cleanup"]}),
        ),
    });
    samples
}

fn policy_observation() -> PolicyObservation {
    PolicyObservation {
        generation: Some(GENERATION),
        leaf_nodes: 3,
        tainted_nodes: 3,
        preexisting_taints: 0,
        profiles: vec!["sample".into()],
        missing_profiles: vec![],
        manage_taint: true,
        taint: "kosmos.io/node=true:NoSchedule".into(),
        invalid: None,
        conflicts: vec![],
        blocked: vec![],
        error: None,
        now: now(),
    }
}

fn policy(status: &LeafClusterPolicyStatus, extra_metadata: Value) -> Value {
    let mut metadata = json!({"name": "leaves", "generation": GENERATION});
    merge(&mut metadata, extra_metadata);
    json!({
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "LeafClusterPolicy",
        "metadata": metadata,
        "spec": {"profiles": ["sample"]},
        "status": status,
    })
}

/// The statuses of LeafClusterPolicies, each as `policy_status` computes it.
fn policy_samples() -> Vec<StatusSample> {
    let fresh = LeafClusterPolicyStatus::default();
    let computed = |obs: PolicyObservation| policy_status(&fresh, &obs);
    let ready = computed(policy_observation());
    let out = vec![
        ("ready", ready.clone()),
        (
            "taint not managed",
            computed(PolicyObservation {
                manage_taint: false,
                tainted_nodes: 0,
                ..policy_observation()
            }),
        ),
        (
            "taint update failed",
            computed(PolicyObservation {
                error: Some("node leaf-1: the object has been modified".into()),
                ..policy_observation()
            }),
        ),
        (
            "invalid",
            computed(PolicyObservation {
                invalid: Some(
                    "spec.leafNodeSelector.matchExpressions[0].operator: Unsupported value: \"Contains\"".into(),
                ),
                ..policy_observation()
            }),
        ),
        (
            "conflict",
            computed(PolicyObservation {
                conflicts: vec![PolicyConflict {
                    with: "older-leaves".into(),
                    with_taint: "kosmos.io/node=true:NoSchedule".into(),
                    nodes: vec!["leaf-1".into(), "leaf-2".into()],
                }],
                ..policy_observation()
            }),
        ),
        (
            "foreign taint",
            computed(PolicyObservation {
                blocked: vec![BlockedNode {
                    node: "leaf-1".into(),
                    taint: "kosmos.io/node=false:NoSchedule".into(),
                }],
                ..policy_observation()
            }),
        ),
        (
            "profile not found",
            computed(PolicyObservation {
                missing_profiles: vec!["gpu".into()],
                ..policy_observation()
            }),
        ),
    ];
    let mut samples: Vec<StatusSample> = out
        .into_iter()
        .map(|(name, status)| StatusSample {
            name,
            object: policy(&status, json!({})),
        })
        .collect();
    samples.push(StatusSample {
        name: "not yet observed",
        object: policy(&ready, json!({"generation": GENERATION + 1})),
    });
    samples.push(StatusSample {
        name: "deleting",
        object: policy(
            &ready,
            json!({"deletionTimestamp": "2027-01-15T08:00:00Z", "finalizers": ["ksched.io/cleanup"]}),
        ),
    });
    samples
}

/// Every status the operator writes on SchedulerProfiles and LeafClusterPolicies.
pub fn status_samples() -> Vec<StatusSample> {
    let mut out = profile_samples();
    out.extend(policy_samples());
    out
}
