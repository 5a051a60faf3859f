//! Delegated authentication and authorization of the HTTPS endpoints, as kube-scheduler's
//! (`k8s.io/apiserver/pkg/server/options`' `DelegatingAuthenticationOptions` and
//! `DelegatingAuthorizationOptions`):
//!
//! - **Authentication**, first that succeeds: a front proxy's client certificate (request-header
//!   CA, allowed names) with the user in `X-Remote-User`/`-Group`/`-Extra-*`; a client certificate
//!   signed by the client CA (user = CN, groups = O); a bearer token checked by a `TokenReview`.
//!   A request with none of these is `system:anonymous`; one whose credentials fail is refused
//!   with 401. The client CA and request-header settings come from `--client-ca-file` /
//!   `--requestheader-*`, else from `kube-system/extension-apiserver-authentication` (kept up to
//!   date by a watch). Token reviews are cached `--authentication-token-webhook-cache-ttl` (10 s).
//! - **Authorization**, first that allows: members of `system:masters`; the
//!   `--authorization-always-allow-paths` (`/healthz`, `/readyz`, `/livez`; a trailing `*` is a
//!   prefix); a `SubjectAccessReview` for the non-resource URL and the request's verb (the HTTP
//!   method, lower case), cached 10 s either way. Refused: 403 with upstream's message.
//!
//! Without `--authentication-kubeconfig` (and not in a cluster) tokens are not checked and the
//! ConfigMap is not read; without `--authorization-kubeconfig` only the always-allowed paths and
//! `system:masters` pass: upstream's behaviour, with upstream's warnings.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::{Mutex, RwLock};
use rustls::pki_types::{CertificateDer, UnixTime, pem::PemObject};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::infra::duration::GoDuration;

/// The ConfigMap kube-apiserver publishes its client CA and front-proxy settings in.
pub(crate) const AUTHENTICATION_CONFIGMAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");
/// Requests to the API server for a review are bounded by this (upstream's 10 s).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Cached reviews at most (tokens or access decisions); the cache is cleared when full.
const MAX_CACHED: usize = 4096;

/// kube-scheduler's authentication flags.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Authentication flags")]
pub struct AuthenticationArgs {
    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// tokenreviews.authentication.k8s.io. This is optional. If empty, all token requests are
    /// considered to be anonymous and no client CA is looked up in the cluster.
    #[arg(long)]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// The duration to cache responses from the webhook token authenticator.
    #[arg(long, default_value = "10s")]
    pub authentication_token_webhook_cache_ttl: GoDuration,
    /// If false, the authentication-kubeconfig will be used to lookup missing authentication
    /// configuration from the cluster.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub authentication_skip_lookup: bool,
    /// If true, failures to look up missing authentication configuration from the cluster are not
    /// considered fatal. Note that this can result in authentication that treats all requests as
    /// anonymous.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub authentication_tolerate_lookup_failure: bool,
    /// If set, any request presenting a client certificate signed by one of the authorities in
    /// the client-ca-file is authenticated with an identity corresponding to the CommonName of the
    /// client certificate.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Root certificate bundle to use to verify client certificates on incoming requests before
    /// trusting usernames in headers specified by --requestheader-username-headers.
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// List of client certificate common names to allow to provide usernames in headers specified
    /// by --requestheader-username-headers. If empty, any client certificate validated by the
    /// authorities in --requestheader-client-ca-file is allowed.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-user")]
    pub requestheader_username_headers: Vec<String>,
    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_uid_headers: Vec<String>,
    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-group")]
    pub requestheader_group_headers: Vec<String>,
    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(long, value_delimiter = ',', default_value = "x-remote-extra-")]
    pub requestheader_extra_headers_prefix: Vec<String>,
}

/// kube-scheduler's authorization flags.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Authorization flags")]
pub struct AuthorizationArgs {
    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// subjectaccessreviews.authorization.k8s.io. This is optional. If empty, all requests not
    /// skipped by authorization are forbidden.
    #[arg(long)]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long, default_value = "10s")]
    pub authorization_webhook_cache_authorized_ttl: GoDuration,
    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long, default_value = "10s")]
    pub authorization_webhook_cache_unauthorized_ttl: GoDuration,
    /// A list of HTTP paths to skip during authorization, i.e. these are authorized without
    /// contacting the 'core' kubernetes server.
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("{flag} {path}: {reason}")]
    File {
        flag: &'static str,
        path: String,
        reason: String,
    },
    #[error("--{flag}: {reason}")]
    Kubeconfig { flag: &'static str, reason: String },
    #[error(
        "unable to load configmap based request-header-client-ca-file: {0} (set --authentication-tolerate-lookup-failure=true to start without it)"
    )]
    Lookup(String),
    #[error("--authorization-always-allow-paths: {0}")]
    Path(String),
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

pub(crate) const ANONYMOUS: &str = "system:anonymous";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
pub(crate) const MASTERS: &str = "system:masters";

impl User {
    pub(crate) fn anonymous() -> Self {
        User {
            name: ANONYMOUS.into(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.into()],
            extra: BTreeMap::new(),
        }
    }

    fn named(name: String, groups: Vec<String>) -> Self {
        User {
            name,
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        }
    }

    /// `system:authenticated` added, as upstream's AuthenticatedGroupAdder.
    fn authenticated(mut self) -> Self {
        if !self
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
            && self.name != ANONYMOUS
        {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

/// The parts of a request authentication and authorization read.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestInfo<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: Option<&'a http::HeaderMap>,
    /// The client's certificate chain (end entity first), when it sent one.
    pub peer_certs: &'a [CertificateDer<'static>],
}

impl RequestInfo<'_> {
    fn header_values<'h>(&'h self, name: &str) -> impl Iterator<Item = &'h str> + 'h {
        let name = name.to_ascii_lowercase();
        self.headers
            .into_iter()
            .flat_map(move |h| h.get_all(name.as_str()).iter())
            .filter_map(|v| v.to_str().ok())
    }

    fn bearer_token(&self) -> Option<&str> {
        let value = self.header_values("authorization").next()?;
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: credentials were given and did not check out.
    Unauthorized(String),
    /// 403: the user may not do this.
    Forbidden { user: String, reason: String },
    /// 500: no decision could be had (the API server did not answer a review).
    Error(String),
}

/// A set of trust anchors, from PEM.
#[derive(Debug, Clone)]
pub(crate) struct CaBundle {
    anchors: Vec<rustls::pki_types::TrustAnchor<'static>>,
}

impl CaBundle {
    pub(crate) fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let mut anchors = Vec::new();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| e.to_string())?;
            let anchor = webpki::anchor_from_trusted_cert(&cert).map_err(|e| e.to_string())?;
            anchors.push(anchor.to_owned());
        }
        if anchors.is_empty() {
            return Err("no certificate in the bundle".into());
        }
        Ok(Self { anchors })
    }

    fn from_file(flag: &'static str, path: &Path) -> Result<Self, AuthSetupError> {
        let file_error = |reason: String| AuthSetupError::File {
            flag,
            path: path.display().to_string(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| file_error(e.to_string()))?;
        Self::from_pem(&pem).map_err(file_error)
    }

    /// Verifies `chain` (end entity first) for client authentication.
    fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no client certificate".into());
        };
        let cert = webpki::EndEntityCert::try_from(leaf).map_err(|e| e.to_string())?;
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        cert.verify_for_usage(
            algs.all,
            &self.anchors,
            intermediates,
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map(|_| ())
        .map_err(|e| format!("verifying certificate: {e}"))
    }
}

/// The front proxy's settings (`--requestheader-*` or the ConfigMap's `requestheader-*`).
#[derive(Debug, Clone)]
pub(crate) struct RequestHeaderConfig {
    pub ca: CaBundle,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

/// CN and Os of a DER certificate's subject.
fn subject_names(der: &[u8]) -> Result<(String, Vec<String>), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    Ok((cn, orgs))
}

impl RequestHeaderConfig {
    /// `Ok(None)`: not a front-proxy request (no client certificate, or no user header).
    fn authenticate(&self, req: &RequestInfo<'_>) -> Result<Option<User>, String> {
        if req.peer_certs.is_empty() {
            return Ok(None);
        }
        self.ca.verify(req.peer_certs)?;
        if !self.allowed_names.is_empty() {
            let (cn, _) = subject_names(&req.peer_certs[0])?;
            if !self.allowed_names.contains(&cn) {
                return Err(format!(
                    "x509: subject with cn={cn} is not in the allowed list"
                ));
            }
        }
        let first = |headers: &[String]| {
            headers
                .iter()
                .find_map(|h| req.header_values(h).find(|v| !v.is_empty()))
                .map(String::from)
        };
        let Some(name) = first(&self.username_headers) else {
            return Ok(None);
        };
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| req.header_values(h).map(String::from))
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(headers) = req.headers {
            for (header, value) in headers {
                let lower = header.as_str().to_ascii_lowercase();
                for prefix in &self.extra_prefixes {
                    let prefix = prefix.to_ascii_lowercase();
                    if let Some(key) = lower.strip_prefix(&prefix)
                        && let Ok(v) = value.to_str()
                    {
                        let key = percent_decode(key);
                        extra.entry(key).or_default().push(v.to_string());
                    }
                }
            }
        }
        Ok(Some(User {
            name,
            uid: first(&self.uid_headers).unwrap_or_default(),
            groups,
            extra,
        }))
    }
}

/// Extra keys are percent-encoded in header names (upstream unescapes them).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Some(b) = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cached answers, each for its own time.
struct TtlCache<V> {
    entries: Mutex<HashMap<[u8; 32], (V, Instant)>>,
}

impl<V: Clone> TtlCache<V> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &[u8; 32]) -> Option<V> {
        let entries = self.entries.lock();
        let (value, until) = entries.get(key)?;
        (Instant::now() < *until).then(|| value.clone())
    }

    fn put(&self, key: [u8; 32], value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_CACHED {
            let now = Instant::now();
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= MAX_CACHED {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now() + ttl));
    }
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

/// Bearer tokens checked with TokenReview.
struct TokenReviewer {
    api: Api<TokenReview>,
    cache: TtlCache<Result<Option<User>, String>>,
    ttl: Duration,
}

impl TokenReviewer {
    async fn review(&self, token: &str) -> Result<Option<User>, String> {
        let key = digest(&[token]);
        if let Some(cached) = self.cache.get(&key) {
            return cached;
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            self.api.create(&PostParams::default(), &review),
        )
        .await;
        let result = match answer {
            Err(_) => return Err("the token review was not answered in time".into()),
            // Not cached: the next request asks again.
            Ok(Err(e)) => return Err(format!("token review: {e}")),
            Ok(Ok(review)) => {
                let status = review.status.unwrap_or_default();
                if status.authenticated == Some(true) {
                    let user = status.user.unwrap_or_default();
                    Ok(Some(User {
                        name: user.username.unwrap_or_default(),
                        uid: user.uid.unwrap_or_default(),
                        groups: user.groups.unwrap_or_default(),
                        extra: user.extra.unwrap_or_default().into_iter().collect(),
                    }))
                } else {
                    match status.error.filter(|e| !e.is_empty()) {
                        Some(e) => Err(e),
                        None => Ok(None),
                    }
                }
            }
        };
        self.cache.put(key, result.clone(), self.ttl);
        result
    }
}

/// Where the client CA and front-proxy settings are now.
#[derive(Default)]
struct Dynamic {
    client_ca: Option<CaBundle>,
    request_header: Option<RequestHeaderConfig>,
}

/// Authenticates requests as kube-scheduler's delegating authenticator does.
pub(crate) struct Authenticator {
    tokens: Option<TokenReviewer>,
    /// From files (fixed) or the ConfigMap (updated by its watch).
    current: RwLock<Dynamic>,
}

impl Authenticator {
    /// Who sent `req`: a user, anonymous, or refused (401).
    pub(crate) async fn authenticate(&self, req: &RequestInfo<'_>) -> Result<User, Refusal> {
        let mut errors = Vec::new();
        let (client_ca, request_header) = {
            let current = self.current.read();
            (current.client_ca.clone(), current.request_header.clone())
        };
        if let Some(rh) = &request_header {
            match rh.authenticate(req) {
                Ok(Some(user)) => return Ok(user.authenticated()),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if let Some(ca) = &client_ca
            && !req.peer_certs.is_empty()
        {
            match ca
                .verify(req.peer_certs)
                .and_then(|()| subject_names(&req.peer_certs[0]))
            {
                Ok((cn, _)) if cn.is_empty() => {
                    errors.push("the client certificate has no common name".into())
                }
                Ok((cn, orgs)) => return Ok(User::named(cn, orgs).authenticated()),
                Err(e) => errors.push(e),
            }
        }
        if let (Some(tokens), Some(token)) = (&self.tokens, req.bearer_token()) {
            match tokens.review(token).await {
                Ok(Some(user)) => return Ok(user.authenticated()),
                Ok(None) => errors.push("invalid bearer token".into()),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(User::anonymous())
        } else {
            Err(Refusal::Unauthorized(errors.join("; ")))
        }
    }

    /// Applies the ConfigMap's data (what kube-apiserver publishes) where no flag set it.
    fn apply_configmap(&self, data: &BTreeMap<String, String>, from_flags: &Dynamic) {
        let client_ca = from_flags.client_ca.clone().or_else(|| {
            let pem = data.get("client-ca-file")?;
            CaBundle::from_pem(pem.as_bytes())
                .map_err(|e| warn!(error = %e, "ignoring the client CA of configmap/extension-apiserver-authentication"))
                .ok()
        });
        let request_header = from_flags
            .request_header
            .clone()
            .or_else(|| request_header_from_configmap(data));
        let mut current = self.current.write();
        current.client_ca = client_ca;
        current.request_header = request_header;
    }
}

/// The ConfigMap's `requestheader-*` keys (JSON string lists), when it has a request-header CA.
fn request_header_from_configmap(data: &BTreeMap<String, String>) -> Option<RequestHeaderConfig> {
    let pem = data.get("requestheader-client-ca-file")?;
    let ca = CaBundle::from_pem(pem.as_bytes())
        .map_err(|e| warn!(error = %e, "ignoring the request-header CA of configmap/extension-apiserver-authentication"))
        .ok()?;
    let list = |key: &str| -> Vec<String> {
        data.get(key)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default()
    };
    Some(RequestHeaderConfig {
        ca,
        allowed_names: list("requestheader-allowed-names"),
        username_headers: list("requestheader-username-headers"),
        uid_headers: list("requestheader-uid-headers"),
        group_headers: list("requestheader-group-headers"),
        extra_prefixes: list("requestheader-extra-headers-prefix"),
    })
}

/// One always-allowed path: exact, or a prefix when it ended in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathRule {
    Exact(String),
    Prefix(String),
}

fn path_rules(paths: &[String]) -> Result<Vec<PathRule>, AuthSetupError> {
    let mut rules = Vec::new();
    for p in paths.iter().filter(|p| !p.is_empty()) {
        // A leading slash is optional, as upstream's.
        let p = if p.starts_with('/') {
            p.clone()
        } else {
            format!("/{p}")
        };
        match p.strip_suffix('*') {
            Some(prefix) if prefix.contains('*') => {
                return Err(AuthSetupError::Path(format!(
                    "{p}: only a trailing * is allowed"
                )));
            }
            Some(prefix) => rules.push(PathRule::Prefix(prefix.to_string())),
            None if p.contains('*') => {
                return Err(AuthSetupError::Path(format!(
                    "{p}: only a trailing * is allowed"
                )));
            }
            None => rules.push(PathRule::Exact(p)),
        }
    }
    Ok(rules)
}

/// Access decisions by SubjectAccessReview.
struct AccessReviewer {
    api: Api<SubjectAccessReview>,
    cache: TtlCache<(bool, String)>,
    allow_ttl: Duration,
    deny_ttl: Duration,
}

impl AccessReviewer {
    /// (allowed, reason).
    async fn review(&self, user: &User, verb: &str, path: &str) -> Result<(bool, String), String> {
        let extra = serde_json::to_string(&user.extra).unwrap_or_default();
        let groups = user.groups.join("\n");
        let key = digest(&[&user.name, &user.uid, &groups, &extra, verb, path]);
        if let Some(cached) = self.cache.get(&key) {
            return Ok(cached);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            self.api.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| "the subject access review was not answered in time".to_string())?
        .map_err(|e| format!("subject access review: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let decision = (status.allowed, status.reason.unwrap_or_default());
        let ttl = if decision.0 {
            self.allow_ttl
        } else {
            self.deny_ttl
        };
        self.cache.put(key, decision.clone(), ttl);
        Ok(decision)
    }
}

/// Authorizes requests as kube-scheduler's delegating authorizer does.
pub(crate) struct Authorizer {
    always_allow: Vec<PathRule>,
    privileged_groups: Vec<String>,
    reviews: Option<AccessReviewer>,
}

impl Authorizer {
    pub(crate) async fn authorize(
        &self,
        user: &User,
        method: &str,
        path: &str,
    ) -> Result<(), Refusal> {
        if user
            .groups
            .iter()
            .any(|g| self.privileged_groups.contains(g))
        {
            return Ok(());
        }
        let path_allowed = self.always_allow.iter().any(|rule| match rule {
            PathRule::Exact(p) => p == path,
            PathRule::Prefix(p) => path.starts_with(p.as_str()),
        });
        if path_allowed {
            return Ok(());
        }
        let verb = method.to_ascii_lowercase();
        let forbidden = |reason: String| Refusal::Forbidden {
            user: user.name.clone(),
            reason: format!("User {:?} cannot {verb} path {path:?}{reason}", user.name),
        };
        let Some(reviews) = &self.reviews else {
            return Err(forbidden(String::new()));
        };
        match reviews.review(user, &verb, path).await {
            Ok((true, _)) => Ok(()),
            Ok((false, reason)) if reason.is_empty() => Err(forbidden(reason)),
            Ok((false, reason)) => Err(forbidden(format!(": {reason}"))),
            Err(e) => Err(Refusal::Error(e)),
        }
    }
}

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

/// Watches the authentication ConfigMap: kube-apiserver rotates its CAs there.
async fn keep_configmap_fresh(api: Api<ConfigMap>, authn: Arc<Authenticator>, from_flags: Dynamic) {
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", AUTHENTICATION_CONFIGMAP.1));
    let mut events = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(cm) => {
                authn.apply_configmap(&cm.data.unwrap_or_default(), &from_flags);
                debug!(
                    "authentication configuration updated from configmap/extension-apiserver-authentication"
                );
            }
            Err(e) => {
                debug!(error = %crate::infra::logging::watch_error(&e), "watching configmap/extension-apiserver-authentication")
            }
        }
    }
    info!("stopped watching configmap/extension-apiserver-authentication");
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a client certificate it signed, as PEM and DER.
    struct Pki {
        ca_pem: String,
        client: CertificateDer<'static>,
    }

    fn pki(cn: &str, orgs: &[&str]) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = params.signed_by(&key, &issuer).unwrap();
        Pki {
            ca_pem: ca.pem(),
            client: client.der().clone(),
        }
    }

    fn authenticator(
        client_ca: Option<CaBundle>,
        rh: Option<RequestHeaderConfig>,
    ) -> Authenticator {
        Authenticator {
            tokens: None,
            current: RwLock::new(Dynamic {
                client_ca,
                request_header: rh,
            }),
        }
    }

    #[tokio::test]
    async fn a_client_certificate_of_the_client_ca_is_its_cn_and_orgs() {
        // rcgen writes one O per certificate.
        let p = pki("alice", &["system:monitoring"]);
        let ca = CaBundle::from_pem(p.ca_pem.as_bytes()).unwrap();
        let authn = authenticator(Some(ca), None);
        let certs = [p.client];
        let req = RequestInfo {
            method: "GET",
            path: "/metrics",
            headers: None,
            peer_certs: &certs,
        };
        let user = authn.authenticate(&req).await.unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(
            user.groups,
            vec!["system:monitoring", "system:authenticated"]
        );
    }

    #[tokio::test]
    async fn a_certificate_of_another_ca_is_refused_and_none_is_anonymous() {
        let ours = pki("alice", &[]);
        let theirs = pki("mallory", &[]);
        let authn = authenticator(
            Some(CaBundle::from_pem(ours.ca_pem.as_bytes()).unwrap()),
            None,
        );
        let certs = [theirs.client];
        let req = RequestInfo {
            method: "GET",
            path: "/metrics",
            headers: None,
            peer_certs: &certs,
        };
        assert!(matches!(
            authn.authenticate(&req).await,
            Err(Refusal::Unauthorized(_))
        ));
        let anonymous = RequestInfo {
            peer_certs: &[],
            ..req
        };
        assert_eq!(
            authn.authenticate(&anonymous).await.unwrap(),
            User::anonymous()
        );
    }

    fn front_proxy(ca: &str, allowed: &[&str]) -> RequestHeaderConfig {
        RequestHeaderConfig {
            ca: CaBundle::from_pem(ca.as_bytes()).unwrap(),
            allowed_names: allowed.iter().map(|s| s.to_string()).collect(),
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec![],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }

    #[tokio::test]
    async fn a_front_proxy_names_the_user_in_headers() {
        let proxy = pki("front-proxy-client", &[]);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-remote-user", "bob".parse().unwrap());
        headers.append("x-remote-group", "g1".parse().unwrap());
        headers.append("x-remote-group", "g2".parse().unwrap());
        headers.insert("x-remote-extra-scopes%2Fa", "s".parse().unwrap());
        let certs = [proxy.client.clone()];
        let req = RequestInfo {
            method: "GET",
            path: "/metrics",
            headers: Some(&headers),
            peer_certs: &certs,
        };
        let authn = authenticator(
            None,
            Some(front_proxy(&proxy.ca_pem, &["front-proxy-client"])),
        );
        let user = authn.authenticate(&req).await.unwrap();
        assert_eq!(user.name, "bob");
        assert_eq!(user.groups, vec!["g1", "g2", "system:authenticated"]);
        assert_eq!(user.extra.get("scopes/a"), Some(&vec!["s".to_string()]));
        // A proxy whose name is not allowed is refused.
        let authn = authenticator(None, Some(front_proxy(&proxy.ca_pem, &["other"])));
        let err = authn.authenticate(&req).await.unwrap_err();
        assert!(
            matches!(&err, Refusal::Unauthorized(m) if m.contains("is not in the allowed list")),
            "{err:?}"
        );
    }

    fn authorizer(paths: &[&str]) -> Authorizer {
        let paths: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
        Authorizer {
            always_allow: path_rules(&paths).unwrap(),
            privileged_groups: vec![MASTERS.into()],
            reviews: None,
        }
    }

    #[tokio::test]
    async fn always_allowed_paths_and_masters_pass_others_are_forbidden() {
        let a = authorizer(&["/healthz", "readyz", "/debug/*"]);
        let anon = User::anonymous();
        assert!(a.authorize(&anon, "GET", "/healthz").await.is_ok());
        assert!(a.authorize(&anon, "GET", "/readyz").await.is_ok());
        assert!(
            a.authorize(&anon, "GET", "/debug/pprof/profile")
                .await
                .is_ok()
        );
        // Exact paths are exact: a check under /healthz needs authorization, as upstream.
        let err = a
            .authorize(&anon, "GET", "/healthz/leaderElection")
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Refusal::Forbidden {
                user: ANONYMOUS.into(),
                reason: r#"User "system:anonymous" cannot get path "/healthz/leaderElection""#
                    .into()
            }
        );
        let admin = User::named("admin".into(), vec![MASTERS.into()]);
        assert!(a.authorize(&admin, "GET", "/metrics").await.is_ok());
    }

    #[test]
    fn a_star_is_only_allowed_at_the_end() {
        let bad = vec!["/a*/b".to_string()];
        assert!(path_rules(&bad).is_err());
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", "Bearer abc.def".parse().unwrap());
        let req = RequestInfo {
            method: "GET",
            path: "/",
            headers: Some(&headers),
            peer_certs: &[],
        };
        assert_eq!(req.bearer_token(), Some("abc.def"));
        let mut basic = http::HeaderMap::new();
        basic.insert("authorization", "Basic abc".parse().unwrap());
        let req = RequestInfo {
            headers: Some(&basic),
            ..req
        };
        assert_eq!(req.bearer_token(), None);
    }

    #[test]
    fn the_configmap_gives_the_front_proxy_settings() {
        let p = pki("front-proxy-client", &[]);
        let data = BTreeMap::from([
            ("requestheader-client-ca-file".to_string(), p.ca_pem.clone()),
            (
                "requestheader-allowed-names".to_string(),
                r#"["front-proxy-client"]"#.to_string(),
            ),
            (
                "requestheader-username-headers".to_string(),
                r#"["X-Remote-User"]"#.to_string(),
            ),
        ]);
        let rh = request_header_from_configmap(&data).unwrap();
        assert_eq!(rh.allowed_names, vec!["front-proxy-client"]);
        assert_eq!(rh.username_headers, vec!["X-Remote-User"]);
        assert!(request_header_from_configmap(&BTreeMap::new()).is_none());
    }

    #[test]
    fn ttl_cache_forgets_after_its_time() {
        let cache: TtlCache<bool> = TtlCache::new();
        let key = digest(&["a"]);
        cache.put(key, true, Duration::from_millis(50));
        assert_eq!(cache.get(&key), Some(true));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(cache.get(&key), None);
        cache.put(key, true, Duration::ZERO);
        assert_eq!(cache.get(&key), None);
    }
}
