//! The HTTP(S) client of the configuration's `extenders` (upstream's `HTTPExtender`): the `filter`,
//! `prioritize`, `preempt` and `bind` verbs, `managedResources`, `ignorable`, `nodeCacheCapable`,
//! `httpTimeout`, `enableHTTPS` and `tlsConfig`, with upstream's wire format (Go field names, as
//! `extender/v1` has no JSON tags) and upstream's error texts, which end up in pods' conditions.
//!
//! Extender calls are synchronous for the scheduling cycle, as upstream's: requests run on a small
//! runtime of their own and the caller (a blocking section of the cycle) waits for the answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::types::{Extender as ExtenderConfig, ExtenderTLSConfig};
use crate::framework::extender::{Extender, ExtenderFilterResult, ExtenderNodes, Victims};
use crate::framework::runtime::ProfileSpec;
use crate::framework::types::{AssignedPod, NodeInfo, PodInfo, PodView};

/// Upstream's `DefaultExtenderTimeout`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// An extender that cannot be set up (its TLS material).
#[derive(Debug, thiserror::Error)]
#[error("extenders[{index}] ({url}): {reason}")]
pub struct ExtenderSetupError {
    pub index: usize,
    pub url: String,
    pub reason: String,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The runtime extender requests run on (shut down without blocking when the last extender goes).
struct RequestRuntime(Option<tokio::runtime::Runtime>);

impl Drop for RequestRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// One configured extender.
pub(crate) struct HttpExtender {
    url_prefix: String,
    filter_verb: String,
    prioritize_verb: String,
    preempt_verb: String,
    bind_verb: String,
    weight: i64,
    node_cache_capable: bool,
    managed_resources: BTreeSet<String>,
    ignorable: bool,
    timeout: Duration,
    client: HttpsClient,
    runtime: Arc<RequestRuntime>,
}

impl std::fmt::Debug for HttpExtender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtender")
            .field("url_prefix", &self.url_prefix)
            .field("ignorable", &self.ignorable)
            .finish()
    }
}

/// The configuration's extenders, non-ignorable ones first (upstream puts ignorable extenders at
/// the tail).
pub(crate) fn build_extenders(
    configs: &[ExtenderConfig],
) -> Result<Vec<Arc<dyn Extender>>, ExtenderSetupError> {
    if configs.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("extender-requests")
        .enable_all()
        .build()
        .map_err(|e| ExtenderSetupError {
            index: 0,
            url: configs[0].url_prefix.clone(),
            reason: format!("starting the request runtime: {e}"),
        })?;
    let runtime = Arc::new(RequestRuntime(Some(runtime)));
    let mut strict: Vec<Arc<dyn Extender>> = Vec::new();
    let mut ignorable: Vec<Arc<dyn Extender>> = Vec::new();
    for (index, c) in configs.iter().enumerate() {
        let e = HttpExtender::new(c, runtime.clone()).map_err(|reason| ExtenderSetupError {
            index,
            url: c.url_prefix.clone(),
            reason,
        })?;
        if c.ignorable {
            ignorable.push(Arc::new(e));
        } else {
            strict.push(Arc::new(e));
        }
    }
    strict.extend(ignorable);
    Ok(strict)
}

/// Resources an extender manages with `ignoredByScheduler` are left to it: NodeResourcesFit's
/// `ignoredResources` becomes their list in every profile (as upstream overrides it).
pub(crate) fn ignore_managed_resources(spec: &mut ProfileSpec, configs: &[ExtenderConfig]) {
    let ignored: Vec<&str> = configs
        .iter()
        .flat_map(|c| &c.managed_resources)
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| r.name.as_str())
        .collect();
    if ignored.is_empty() {
        return;
    }
    let args = spec
        .args
        .entry(crate::framework::plugins::names::NODE_RESOURCES_FIT.to_string())
        .or_insert_with(|| serde_json::json!({}));
    if let Some(obj) = args.as_object_mut() {
        obj.insert("ignoredResources".into(), serde_json::json!(ignored));
    }
}

impl HttpExtender {
    fn new(c: &ExtenderConfig, runtime: Arc<RequestRuntime>) -> Result<HttpExtender, String> {
        let tls = tls_config(c.enable_https, c.tls_config.as_ref())?;
        let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        if let Some(name) = c
            .tls_config
            .as_ref()
            .map(|t| t.server_name.clone())
            .filter(|n| !n.is_empty())
        {
            let name = ServerName::try_from(name.clone())
                .map_err(|e| format!("tlsConfig.serverName {name:?}: {e}"))?;
            builder = builder.with_server_name_resolver(
                hyper_rustls::FixedServerNameResolver::new(name.to_owned()),
            );
        }
        let connector = builder.enable_http1().build();
        let _guard = runtime.0.as_ref().map(|rt| rt.enter());
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let timeout = c
            .http_timeout
            .to_std()
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TIMEOUT);
        Ok(HttpExtender {
            url_prefix: c.url_prefix.clone(),
            filter_verb: c.filter_verb.clone(),
            prioritize_verb: c.prioritize_verb.clone(),
            preempt_verb: c.preempt_verb.clone(),
            bind_verb: c.bind_verb.clone(),
            weight: c.weight,
            node_cache_capable: c.node_cache_capable,
            managed_resources: c.managed_resources.iter().map(|r| r.name.clone()).collect(),
            ignorable: c.ignorable,
            timeout,
            client,
            runtime,
        })
    }

    /// POSTs `args` as JSON to `<urlPrefix>/<verb>` and decodes the answer; errors as upstream's.
    fn send<A: Serialize, R: for<'de> Deserialize<'de> + Send + 'static>(
        &self,
        verb: &str,
        args: &A,
    ) -> Result<R, String> {
        let url = format!("{}/{verb}", self.url_prefix.trim_end_matches('/'));
        let body = serde_json::to_vec(args).map_err(|e| e.to_string())?;
        let request = hyper::Request::post(&url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        let Some(rt) = self.runtime.0.as_ref() else {
            return Err(format!("Post {url:?}: the extender client is shut down"));
        };
        let client = self.client.clone();
        let timeout = self.timeout;
        let verb = verb.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let answer = tokio::time::timeout(timeout, exchange(client, request, &url, &verb)).await;
            let answer = match answer {
                Ok(a) => a,
                Err(_) => Err(format!(
                    "Post {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                )),
            };
            let _ = tx.send(answer);
        });
        let bytes = rx
            .recv()
            .map_err(|_| "the extender request was dropped".to_string())??;
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

/// One request and its body; non-200 answers are upstream's error.
async fn exchange(
    client: HttpsClient,
    request: hyper::Request<Full<Bytes>>,
    url: &str,
    verb: &str,
) -> Result<Bytes, String> {
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("Post {url:?}: {}", go_error(url, &e)))?;
    let status = response.status();
    if status != hyper::StatusCode::OK {
        return Err(format!(
            "failed {verb} with extender at URL {url}, code {}",
            status.as_u16()
        ));
    }
    response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| format!("Post {url:?}: {e}"))
}

/// How Go's HTTP client words the usual failures (the text reaches pods' conditions).
fn go_error(url: &str, e: &hyper_util::client::legacy::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            let addr = url
                .split_once("://")
                .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
                .unwrap_or(url);
            let addr = if addr.contains(':') {
                addr.to_string()
            } else if url.starts_with("https") {
                format!("{addr}:443")
            } else {
                format!("{addr}:80")
            };
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("dial tcp {addr}: connect: connection refused")
                }
                _ => format!("dial tcp {addr}: {io}"),
            };
        }
        source = s.source();
    }
    e.to_string()
}

/// The TLS settings: a CA (file or data) verifies the server; `enableHTTPS` without a CA, or
/// `insecure`, skips verification (as upstream); a client certificate when given.
fn tls_config(
    enable_https: bool,
    tls: Option<&ExtenderTLSConfig>,
) -> Result<rustls::ClientConfig, String> {
    let default = ExtenderTLSConfig::default();
    let t = tls.unwrap_or(&default);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let has_ca = !t.ca_file.is_empty() || !t.ca_data.is_empty();
    let insecure = t.insecure || (enable_https && !has_ca);
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certs(&t.ca_file, &t.ca_data, "CA")? {
            roots.add(cert).map_err(|e| format!("tlsConfig CA: {e}"))?;
        }
        builder.with_root_certificates(roots)
    };
    let certs = pem_certs(&t.cert_file, &t.cert_data, "certificate")?;
    if certs.is_empty() {
        return Ok(builder.with_no_client_auth());
    }
    let key = if !t.key_data.is_empty() {
        let pem = decode_data(&t.key_data, "keyData")?;
        PrivateKeyDer::from_pem_slice(&pem)
    } else {
        PrivateKeyDer::from_pem_file(&t.key_file)
    }
    .map_err(|e| format!("tlsConfig key: {e}"))?;
    builder
        .with_client_auth_cert(certs, key)
        .map_err(|e| format!("tlsConfig client certificate: {e}"))
}

fn decode_data(data: &str, field: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("tlsConfig.{field}: not base64: {e}"))
}

/// PEM certificates from `data` (base64, as JSON `[]byte`) or else `file`; none when both are empty.
fn pem_certs(file: &str, data: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = if !data.is_empty() {
        decode_data(data, &format!("{what} data"))?
    } else if !file.is_empty() {
        std::fs::read(file).map_err(|e| format!("tlsConfig {what} file {file}: {e}"))?
    } else {
        return Ok(Vec::new());
    };
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tlsConfig {what}: {e}"))
}

/// Accepts any server certificate (`insecure`, or HTTPS without a CA, as upstream).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

// The wire format: `k8s.io/kube-scheduler/extender/v1`, whose structs have no JSON tags, so Go
// writes the field names as they are and reads them case-insensitively.

#[derive(Serialize)]
struct ExtenderArgs<'a> {
    #[serde(rename = "Pod")]
    pod: &'a Pod,
    #[serde(rename = "Nodes")]
    nodes: Option<NodeList>,
    #[serde(rename = "NodeNames")]
    node_names: Option<Vec<&'a str>>,
}

#[derive(Serialize, Deserialize, Default)]
struct NodeList {
    #[serde(default)]
    items: Vec<Node>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FilterResult {
    #[serde(alias = "Nodes")]
    nodes: Option<NodeList>,
    #[serde(alias = "NodeNames", alias = "nodeNames", alias = "nodenames")]
    node_names: Option<Vec<String>>,
    #[serde(alias = "FailedNodes", alias = "failedNodes", alias = "failednodes")]
    failed_nodes: Option<BTreeMap<String, String>>,
    #[serde(
        alias = "FailedAndUnresolvableNodes",
        alias = "failedAndUnresolvableNodes",
        alias = "failedandunresolvablenodes"
    )]
    failed_and_unresolvable_nodes: Option<BTreeMap<String, String>>,
    #[serde(alias = "Error")]
    error: Option<String>,
}

#[derive(Deserialize)]
struct HostPriority {
    #[serde(alias = "Host")]
    host: String,
    #[serde(alias = "Score")]
    score: i64,
}

#[derive(Serialize)]
struct BindingArgs<'a> {
    #[serde(rename = "PodName")]
    pod_name: &'a str,
    #[serde(rename = "PodNamespace")]
    pod_namespace: &'a str,
    #[serde(rename = "PodUID")]
    pod_uid: &'a str,
    #[serde(rename = "Node")]
    node: &'a str,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorResult {
    #[serde(alias = "Error")]
    error: Option<String>,
}

#[derive(Serialize)]
struct PreemptionArgs<'a> {
    #[serde(rename = "Pod")]
    pod: &'a Pod,
    #[serde(rename = "NodeNameToVictims")]
    node_name_to_victims: Option<BTreeMap<String, WireVictims>>,
    #[serde(rename = "NodeNameToMetaVictims")]
    node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

#[derive(Serialize)]
struct WireVictims {
    #[serde(rename = "Pods")]
    pods: Vec<Value>,
    #[serde(rename = "NumPDBViolations")]
    num_pdb_violations: i64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct MetaVictims {
    #[serde(rename = "Pods", alias = "pods")]
    pods: Vec<MetaPod>,
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations")]
    num_pdb_violations: i64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct MetaPod {
    #[serde(rename = "UID", alias = "uid")]
    uid: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PreemptionResult {
    #[serde(alias = "NodeNameToMetaVictims", alias = "nodeNameToMetaVictims")]
    node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

/// What the scheduler keeps of a victim, as a Pod (the full object is not kept for bound pods).
fn victim_pod(p: &AssignedPod) -> Value {
    serde_json::json!({
        "metadata": {"name": p.name(), "namespace": p.namespace(), "uid": p.uid(),
            "labels": p.labels()},
        "spec": {"priority": p.priority()},
    })
}

impl HttpExtender {
    fn args<'a>(&self, pod: &'a Pod, nodes: &'a [Arc<NodeInfo>]) -> ExtenderArgs<'a> {
        if self.node_cache_capable {
            ExtenderArgs {
                pod,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| n.name()).collect()),
            }
        } else {
            ExtenderArgs {
                pod,
                nodes: Some(NodeList {
                    items: nodes.iter().filter_map(|n| n.node().cloned()).collect(),
                }),
                node_names: None,
            }
        }
    }

    fn has_managed_resources(&self, containers: &[Container]) -> bool {
        containers.iter().any(|c| {
            let r = c.resources.as_ref();
            let names = r
                .and_then(|r| r.requests.as_ref())
                .into_iter()
                .flatten()
                .chain(r.and_then(|r| r.limits.as_ref()).into_iter().flatten())
                .map(|(name, _)| name);
            names
                .into_iter()
                .any(|n| self.managed_resources.contains(n))
        })
    }
}

impl Extender for HttpExtender {
    fn name(&self) -> &str {
        &self.url_prefix
    }

    fn is_ignorable(&self) -> bool {
        self.ignorable
    }

    fn is_interested(&self, pod: &PodInfo) -> bool {
        if self.managed_resources.is_empty() {
            return true;
        }
        let Some(spec) = pod.pod.spec.as_ref() else {
            return false;
        };
        self.has_managed_resources(&spec.containers)
            || self.has_managed_resources(spec.init_containers.as_deref().unwrap_or_default())
    }

    fn is_filter(&self) -> bool {
        !self.filter_verb.is_empty()
    }

    fn is_prioritizer(&self) -> bool {
        !self.prioritize_verb.is_empty()
    }

    fn is_binder(&self) -> bool {
        !self.bind_verb.is_empty()
    }

    fn supports_preemption(&self) -> bool {
        !self.preempt_verb.is_empty()
    }

    fn filter(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ExtenderFilterResult, String> {
        if self.filter_verb.is_empty() {
            return Ok(ExtenderFilterResult {
                nodes: ExtenderNodes::Names(nodes.iter().map(|n| n.name().to_string()).collect()),
                ..Default::default()
            });
        }
        let result: FilterResult = self.send(&self.filter_verb, &self.args(&pod.pod, nodes))?;
        if let Some(e) = result.error.filter(|e| !e.is_empty()) {
            return Err(e);
        }
        let nodes = match (self.node_cache_capable, result.node_names, result.nodes) {
            (true, Some(names), _) => ExtenderNodes::Names(names),
            (_, _, Some(list)) => ExtenderNodes::Objects(list.items),
            _ => ExtenderNodes::None,
        };
        Ok(ExtenderFilterResult {
            nodes,
            failed: result.failed_nodes.unwrap_or_default(),
            failed_and_unresolvable: result.failed_and_unresolvable_nodes.unwrap_or_default(),
        })
    }

    fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<(String, i64)>, i64), String> {
        if self.prioritize_verb.is_empty() {
            return Ok((nodes.iter().map(|n| (n.name().to_string(), 0)).collect(), 0));
        }
        let list: Option<Vec<HostPriority>> =
            self.send(&self.prioritize_verb, &self.args(&pod.pod, nodes))?;
        Ok((
            list.unwrap_or_default()
                .into_iter()
                .map(|h| (h.host, h.score))
                .collect(),
            self.weight,
        ))
    }

    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: BTreeMap<String, Victims>,
        node_pods: &dyn Fn(&str) -> Option<Vec<Arc<AssignedPod>>>,
    ) -> Result<BTreeMap<String, Victims>, String> {
        if self.preempt_verb.is_empty() {
            return Err(format!(
                "preempt verb is not defined for extender {} but run into ProcessPreemption",
                self.url_prefix
            ));
        }
        let args = if self.node_cache_capable {
            PreemptionArgs {
                pod: &pod.pod,
                node_name_to_victims: None,
                node_name_to_meta_victims: Some(
                    victims
                        .iter()
                        .map(|(n, v)| {
                            let meta = MetaVictims {
                                pods: v
                                    .pods
                                    .iter()
                                    .map(|p| MetaPod {
                                        uid: p.uid().to_string(),
                                    })
                                    .collect(),
                                num_pdb_violations: v.num_pdb_violations,
                            };
                            (n.clone(), meta)
                        })
                        .collect(),
                ),
            }
        } else {
            PreemptionArgs {
                pod: &pod.pod,
                node_name_to_victims: Some(
                    victims
                        .iter()
                        .map(|(n, v)| {
                            let wire = WireVictims {
                                pods: v.pods.iter().map(|p| victim_pod(p)).collect(),
                                num_pdb_violations: v.num_pdb_violations,
                            };
                            (n.clone(), wire)
                        })
                        .collect(),
                ),
                node_name_to_meta_victims: None,
            }
        };
        let result: PreemptionResult = self.send(&self.preempt_verb, &args)?;
        let mut out = BTreeMap::new();
        for (node, meta) in result.node_name_to_meta_victims.unwrap_or_default() {
            let pods_on_node = node_pods(&node)
                .ok_or_else(|| format!("nodeinfo not found for node name {node:?}"))?;
            let mut pods = Vec::with_capacity(meta.pods.len());
            for m in &meta.pods {
                let p = pods_on_node.iter().find(|p| p.uid() == m.uid).ok_or_else(|| {
                    format!(
                        "extender: {} claims to preempt pod (UID: {}) on node: {node}, but the pod is not found on that node",
                        self.url_prefix, m.uid
                    )
                })?;
                pods.push(p.clone());
            }
            out.insert(
                node,
                Victims {
                    pods,
                    num_pdb_violations: meta.num_pdb_violations,
                },
            );
        }
        Ok(out)
    }

    fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Result<(), String> {
        if self.bind_verb.is_empty() {
            return Err("unexpected empty bindVerb in extender".into());
        }
        let args = BindingArgs {
            pod_name: name,
            pod_namespace: namespace,
            pod_uid: uid,
            node,
        };
        let result: ErrorResult = self.send(&self.bind_verb, &args)?;
        match result.error.filter(|e| !e.is_empty()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::types::ExtenderManagedResource;
    use crate::framework::testing::{NodeBuilder, PodBuilder};

    fn config(url: &str) -> ExtenderConfig {
        ExtenderConfig {
            url_prefix: url.into(),
            filter_verb: "filter".into(),
            ..Default::default()
        }
    }

    #[test]
    fn ignorable_extenders_go_last() {
        let mut a = config("http://a");
        a.ignorable = true;
        let b = config("http://b");
        let built = build_extenders(&[a, b]).expect("extenders");
        let names: Vec<&str> = built.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["http://b", "http://a"]);
    }

    #[test]
    fn unreachable_extender_fails_with_gos_words() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let url = format!("http://127.0.0.1:{port}/prefix/");
        let built = build_extenders(&[config(&url)]).expect("extenders");
        let nodes = vec![Arc::new(NodeBuilder::new("n1").info(vec![]))];
        let e = built[0]
            .filter(&PodBuilder::new("p").info(), &nodes)
            .expect_err("nobody listens");
        assert_eq!(
            e,
            format!(
                "Post \"http://127.0.0.1:{port}/prefix/filter\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
    }

    #[test]
    fn managed_resources_decide_interest_and_may_be_left_to_the_extender() {
        let mut c = config("http://gpu");
        c.managed_resources = vec![ExtenderManagedResource {
            name: "example.com/gpu".into(),
            ignored_by_scheduler: true,
        }];
        let built = build_extenders(std::slice::from_ref(&c)).expect("extenders");
        let plain = PodBuilder::new("p").container(&[("cpu", "1")]).info();
        let gpu = PodBuilder::new("g")
            .container(&[("cpu", "1")])
            .container(&[("example.com/gpu", "1")])
            .info();
        assert!(!built[0].is_interested(&plain));
        assert!(built[0].is_interested(&gpu));
        let mut spec = ProfileSpec::default();
        ignore_managed_resources(&mut spec, &[c]);
        assert_eq!(
            spec.args["NodeResourcesFit"]["ignoredResources"],
            serde_json::json!(["example.com/gpu"])
        );
    }

    #[test]
    fn answers_decode_with_gos_field_names_in_any_case() {
        let r: FilterResult = serde_json::from_str(
            r#"{"NodeNames": ["a"], "FailedNodes": {"b": "full"}, "Error": ""}"#,
        )
        .expect("go names");
        assert_eq!(r.node_names, Some(vec!["a".to_string()]));
        assert_eq!(r.failed_nodes.map(|m| m.len()), Some(1));
        let r: FilterResult = serde_json::from_str(
            r#"{"nodenames": ["a"], "failedAndUnresolvableNodes": {"c": "x"}}"#,
        )
        .expect("other cases");
        assert_eq!(r.node_names, Some(vec!["a".to_string()]));
        assert_eq!(r.failed_and_unresolvable_nodes.map(|m| m.len()), Some(1));
        let h: Vec<HostPriority> =
            serde_json::from_str(r#"[{"Host": "a", "Score": 3}, {"host": "b", "score": 1}]"#)
                .expect("priorities");
        assert_eq!((h[0].host.as_str(), h[1].score), ("a", 1));
    }

    #[test]
    fn tls_settings_as_upstream() {
        // HTTPS without a CA: no verification (upstream sets Insecure).
        assert!(tls_config(true, None).is_ok());
        let bad = ExtenderTLSConfig {
            ca_data: "not base64!".into(),
            ..Default::default()
        };
        let e = tls_config(true, Some(&bad)).expect_err("bad CA data");
        assert!(e.starts_with("tlsConfig.CA data: not base64"), "{e}");
        let missing = ExtenderTLSConfig {
            ca_file: "/nonexistent/ca.crt".into(),
            ..Default::default()
        };
        let e = tls_config(false, Some(&missing)).expect_err("missing CA file");
        assert!(e.contains("/nonexistent/ca.crt"), "{e}");
    }
}
