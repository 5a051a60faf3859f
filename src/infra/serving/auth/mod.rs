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
//!
//! `authn` holds the authenticator (client certificates, the front proxy, token reviews and
//! the ConfigMap they are read from), `authz` the authorizer (always-allowed paths, access
//! reviews), `guard` the guard of one endpoint built from both; here are the flags, the user,
//! the request, the refusals and the cache of reviews they share.

mod authn;
mod authz;
mod guard;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

use crate::infra::duration::GoDuration;

pub(crate) use guard::{Guard, guard};

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

#[cfg(test)]
mod tests {
    use super::*;

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
