//! The release of the held objects of the operator's identity: by another identity (the hook's
//! or the user's), or by the operator itself at the end of its cleanup, through the release
//! identity for those being deleted.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};

use super::{HOLD_FINALIZER, Held, RELEASE_NAME, RELEASE_NAMESPACE, identity_gone, kit};
use crate::operator::{Error, OPERATOR_NAME, apply, is_not_found, remove_finalizer};

/// The lifetime asked for the release identity's token (the API server's minimum).
const RELEASE_TOKEN_SECONDS: i64 = 600;
/// How long the release identity's permissions may take to reach the API server's authorizer.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Runs `$body` with `$api` an `Api` of the held object's kind, in its namespace.
macro_rules! with_api {
    ($held:expr, $client:expr, $namespace:expr, |$api:ident| $body:expr) => {{
        let ns = $held.namespace($namespace).unwrap_or_default();
        match $held {
            Held::ServiceAccount => {
                let $api: Api<ServiceAccount> = Api::namespaced($client, ns);
                $body
            }
            Held::ClusterRole => {
                let $api: Api<ClusterRole> = Api::all($client);
                $body
            }
            Held::ClusterRoleBinding => {
                let $api: Api<ClusterRoleBinding> = Api::all($client);
                $body
            }
            Held::Role | Held::KubeSystemRole => {
                let $api: Api<Role> = Api::namespaced($client, ns);
                $body
            }
            Held::RoleBinding | Held::KubeSystemRoleBinding => {
                let $api: Api<RoleBinding> = Api::namespaced($client, ns);
                $body
            }
        }
    }};
}

/// The objects of the operator's identity that are still held, and whether each is being
/// deleted.
pub(crate) async fn held_objects(
    client: &Client,
    namespace: &str,
) -> Result<Vec<(Held, bool)>, Error> {
    let mut out = Vec::new();
    for held in Held::ALL {
        let meta = with_api!(held, client.clone(), namespace, |api| api
            .get_metadata_opt(OPERATOR_NAME)
            .await?
            .map(|o| (
                o.finalizers().iter().any(|f| f == HOLD_FINALIZER),
                o.metadata.deletion_timestamp.is_some()
            )));
        if let Some((true, deleting)) = meta {
            out.push((held, deleting));
        }
    }
    Ok(out)
}

/// Removes [`HOLD_FINALIZER`] from one held object with `client`'s identity.
pub(super) async fn release_one(client: &Client, namespace: &str, held: Held) -> Result<(), Error> {
    with_api!(held, client.clone(), namespace, |api| remove_finalizer(
        &api,
        OPERATOR_NAME,
        HOLD_FINALIZER
    )
    .await)?;
    Ok(())
}

/// Releases every held object of the operator's identity with `client`'s, which is not among them
/// (the hook's, or the user's: `ksched uninstall`); how many.
pub async fn release(client: &Client, namespace: &str) -> Result<usize, Error> {
    let held = held_objects(client, namespace).await?;
    for (h, _) in &held {
        release_one(client, namespace, *h).await?;
    }
    Ok(held.len())
}

/// The operator's own release, at the end of its cleanup (see the module docs): the held objects
/// not being deleted are released with its own identity (nothing goes with them); those being
/// deleted, by the release identity, which deletes itself last.
pub(super) async fn release_through_kit(
    main: &Client,
    base: &kube::Config,
    namespace: &str,
) -> Result<(), Error> {
    let held = held_objects(main, namespace).await?;
    for (h, _) in held.iter().filter(|(_, deleting)| !deleting) {
        release_one(main, namespace, *h).await?;
    }
    let going: Vec<Held> = held
        .iter()
        .filter(|(_, deleting)| *deleting)
        .map(|(h, _)| *h)
        .collect();
    if going.is_empty() {
        return Ok(());
    }
    let k = kit();
    let root = apply(&Api::all(main.clone()), &k.cluster_role).await?;
    let uid = root
        .uid()
        .ok_or_else(|| Error::Uninstall(format!("ClusterRole {RELEASE_NAME} has no uid")))?;
    let k = k.owned_by(&uid);
    apply(&Api::all(main.clone()), &k.cluster_role_binding).await?;
    apply(
        &Api::namespaced(main.clone(), RELEASE_NAMESPACE),
        &k.service_account,
    )
    .await?;
    let releaser = release_client(main, base).await?;
    // The binding reaches the API server's authorizer a moment after it was written.
    let deadline = Instant::now() + RELEASE_WAIT;
    for h in &going {
        loop {
            match release_one(&releaser, namespace, *h).await {
                Ok(()) => break,
                Err(Error::Kube(e)) if identity_gone(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    match Api::<ClusterRole>::all(releaser)
        .delete(RELEASE_NAME, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(
        released = ?going.iter().map(|h| h.describe(namespace)).collect::<Vec<_>>(),
        identity = RELEASE_NAME,
        "released the operator's identity; the release identity deleted itself"
    );
    Ok(())
}

/// A client with the release identity: `base` (the operator's cluster address and CA) with a
/// short-lived token of the release ServiceAccount.
async fn release_client(main: &Client, base: &kube::Config) -> Result<Client, Error> {
    let request = TokenRequest {
        // No audiences: the API server's own.
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(RELEASE_TOKEN_SECONDS),
            bound_object_ref: None,
            attestations: None,
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(main.clone(), RELEASE_NAMESPACE)
        .create_token_request(RELEASE_NAME, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Uninstall("the TokenRequest returned no token".into()))?;
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(secrecy::SecretString::from(token)),
        ..kube::config::AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

/// Deletes a release identity a crashed release left behind (its root; the rest goes by garbage
/// collection).
pub async fn delete_leftover_release(client: &Client) -> Result<bool, Error> {
    match Api::<ClusterRole>::all(client.clone())
        .delete(RELEASE_NAME, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
