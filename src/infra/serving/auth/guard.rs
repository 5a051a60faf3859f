//! The guard of one endpoint (its authenticator and authorizer), built from the flags.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use parking_lot::RwLock;
use tracing::warn;

use super::authn::{
    Authenticator, CaBundle, Dynamic, RequestHeaderConfig, TokenReviewer, keep_configmap_fresh,
};
use super::authz::{AccessReviewer, Authorizer, path_rules};
use super::{
    AUTHENTICATION_CONFIGMAP, AuthSetupError, AuthenticationArgs, AuthorizationArgs, MASTERS,
    REVIEW_TIMEOUT, Refusal, RequestInfo, TtlCache, User,
};
use crate::infra::duration::GoDuration;

/// Authentication and authorization of one endpoint.
pub(crate) struct Guard {
    pub authenticator: Arc<Authenticator>,
    pub authorizer: Authorizer,
}

impl Guard {
    /// Checks one request: Ok to serve it, or the refusal to answer with.
    pub(crate) async fn check(&self, req: &RequestInfo<'_>) -> Result<User, Refusal> {
        let user = self.authenticator.authenticate(req).await?;
        self.authorizer
            .authorize(&user, req.method, req.path)
            .await?;
        Ok(user)
    }
}

/// A client from `kubeconfig`, else the in-cluster config, else none (upstream's
/// `RemoteKubeConfigFileOptional`). Reviews are sent at up to 200 QPS, as upstream's.
async fn review_client(
    flag: &'static str,
    kubeconfig: Option<&Path>,
) -> Result<Option<kube::Client>, AuthSetupError> {
    let err = |reason: String| AuthSetupError::Kubeconfig { flag, reason };
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| err(format!("reading {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(format!("{}: {e}", path.display())))?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(e) => {
                if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
                    warn!(error = %e, "failed to read in-cluster kubeconfig for delegated {}", if flag == "authentication-kubeconfig" { "authentication" } else { "authorization" });
                }
                return Ok(None);
            }
        },
    };
    let client = kube::Client::try_from(config).map_err(|e| err(e.to_string()))?;
    Ok(Some(crate::infra::client::limited(client, 200.0, 400)))
}

/// Builds the guard of an endpoint from the flags: reads the CA files, looks the ConfigMap up
/// once (failing or warning as `--authentication-tolerate-lookup-failure` says) and returns the
/// task that keeps it up to date, if any.
pub(crate) async fn guard(
    authn: &AuthenticationArgs,
    authz: &AuthorizationArgs,
) -> Result<(Guard, Option<tokio::task::JoinHandle<()>>), AuthSetupError> {
    let authn_client = review_client(
        "authentication-kubeconfig",
        authn.authentication_kubeconfig.as_deref(),
    )
    .await?;
    let authz_client = review_client(
        "authorization-kubeconfig",
        authz.authorization_kubeconfig.as_deref(),
    )
    .await?;

    let from_flags = Dynamic {
        client_ca: authn
            .client_ca_file
            .as_deref()
            .map(|p| CaBundle::from_file("--client-ca-file", p))
            .transpose()?,
        request_header: authn
            .requestheader_client_ca_file
            .as_deref()
            .map(|p| {
                Ok::<_, AuthSetupError>(RequestHeaderConfig {
                    ca: CaBundle::from_file("--requestheader-client-ca-file", p)?,
                    allowed_names: authn.requestheader_allowed_names.clone(),
                    username_headers: authn.requestheader_username_headers.clone(),
                    uid_headers: authn.requestheader_uid_headers.clone(),
                    group_headers: authn.requestheader_group_headers.clone(),
                    extra_prefixes: authn.requestheader_extra_headers_prefix.clone(),
                })
            })
            .transpose()?,
    };
    let tokens = authn_client.as_ref().map(|c| TokenReviewer {
        api: Api::all(c.clone()),
        cache: TtlCache::new(),
        ttl: authn
            .authentication_token_webhook_cache_ttl
            .to_std()
            .unwrap_or_default(),
    });
    let lookup = !authn.authentication_skip_lookup
        && (from_flags.client_ca.is_none() || from_flags.request_header.is_none());
    let authenticator = Arc::new(Authenticator {
        tokens,
        current: RwLock::new(Dynamic {
            client_ca: from_flags.client_ca.clone(),
            request_header: from_flags.request_header.clone(),
        }),
    });
    let mut refresher = None;
    if lookup {
        match &authn_client {
            None => {
                warn!(
                    "No authentication-kubeconfig provided in order to lookup client-ca-file in configmap/{} in {}, so client certificate authentication won't work.",
                    AUTHENTICATION_CONFIGMAP.1, AUTHENTICATION_CONFIGMAP.0
                );
            }
            Some(client) => {
                let api: Api<ConfigMap> =
                    Api::namespaced(client.clone(), AUTHENTICATION_CONFIGMAP.0);
                let first =
                    tokio::time::timeout(REVIEW_TIMEOUT, api.get(AUTHENTICATION_CONFIGMAP.1))
                        .await
                        .map_err(|_| "not answered in time".to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                match first {
                    Ok(cm) => {
                        authenticator.apply_configmap(&cm.data.unwrap_or_default(), &from_flags)
                    }
                    Err(e) if authn.authentication_tolerate_lookup_failure => {
                        warn!("Error looking up in-cluster authentication configuration: {e}");
                        warn!(
                            "Continuing without authentication configuration. This may treat all requests as anonymous."
                        );
                        warn!(
                            "To require authentication configuration lookup to succeed, set --authentication-tolerate-lookup-failure=false"
                        );
                    }
                    Err(e) => return Err(AuthSetupError::Lookup(e)),
                }
                refresher = Some(tokio::spawn(keep_configmap_fresh(
                    api,
                    authenticator.clone(),
                    from_flags,
                )));
            }
        }
    }
    if authz_client.is_none() {
        warn!(
            "No authorization-kubeconfig provided, so SubjectAccessReview of authorization tokens won't work."
        );
    }
    let ttl = |d: GoDuration| d.to_std().unwrap_or_default();
    let authorizer = Authorizer {
        always_allow: path_rules(&authz.authorization_always_allow_paths)?,
        privileged_groups: vec![MASTERS.into()],
        reviews: authz_client.map(|c| AccessReviewer {
            api: Api::all(c),
            cache: TtlCache::new(),
            allow_ttl: ttl(authz.authorization_webhook_cache_authorized_ttl),
            deny_ttl: ttl(authz.authorization_webhook_cache_unauthorized_ttl),
        }),
    };
    Ok((
        Guard {
            authenticator,
            authorizer,
        },
        refresher,
    ))
}
