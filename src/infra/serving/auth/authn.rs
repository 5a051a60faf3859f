//! Authentication: a front proxy's client certificate with the user in headers, a client
//! certificate of the client CA, a bearer token checked by a `TokenReview`; the client CA and
//! front-proxy settings from the flags or `kube-system/extension-apiserver-authentication`, kept
//! up to date by a watch.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::RwLock;
use rustls::pki_types::{CertificateDer, UnixTime, pem::PemObject};
use tracing::{debug, info, warn};

use super::{
    AUTHENTICATION_CONFIGMAP, AuthSetupError, REVIEW_TIMEOUT, Refusal, RequestInfo, TtlCache, User,
    digest,
};

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

    pub(super) fn from_file(flag: &'static str, path: &Path) -> Result<Self, AuthSetupError> {
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

/// Bearer tokens checked with TokenReview.
pub(super) struct TokenReviewer {
    pub(super) api: Api<TokenReview>,
    pub(super) cache: TtlCache<Result<Option<User>, String>>,
    pub(super) ttl: Duration,
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
pub(super) struct Dynamic {
    pub(super) client_ca: Option<CaBundle>,
    pub(super) request_header: Option<RequestHeaderConfig>,
}

/// Authenticates requests as kube-scheduler's delegating authenticator does.
pub(crate) struct Authenticator {
    pub(super) tokens: Option<TokenReviewer>,
    /// From files (fixed) or the ConfigMap (updated by its watch).
    pub(super) current: RwLock<Dynamic>,
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
    pub(super) fn apply_configmap(&self, data: &BTreeMap<String, String>, from_flags: &Dynamic) {
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

/// Watches the authentication ConfigMap: kube-apiserver rotates its CAs there.
pub(super) async fn keep_configmap_fresh(
    api: Api<ConfigMap>,
    authn: Arc<Authenticator>,
    from_flags: Dynamic,
) {
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
}
