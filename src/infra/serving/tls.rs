//! The HTTPS side of the endpoints: kube-scheduler's secure-serving flags, the serving certificate
//! (files, `--cert-dir`, or self-signed as upstream), and client certificates requested (not
//! required) so [`super::auth`] can authenticate them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio_rustls::TlsAcceptor;
use tracing::warn;

/// kube-scheduler's secure-serving flags besides `--bind-address` and `--secure-port`.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Secure serving flags")]
pub struct TlsArgs {
    /// The directory where the TLS certs are located. If --tls-cert-file and
    /// --tls-private-key-file are provided, this flag will be ignored.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// File containing the default x509 Certificate for HTTPS. If HTTPS serving is enabled, and
    /// --tls-cert-file and --tls-private-key-file are not provided, a self-signed certificate and
    /// key are generated.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Comma-separated list of cipher suites for the server (TLS 1.2; TLS 1.3 suites are not
    /// configurable). Only those rustls implements are used.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Minimum TLS version supported: VersionTLS12 (the lowest ksched serves) or VersionTLS13.
    #[arg(long)]
    pub tls_min_version: Option<String>,
    /// Comma-separated list of elliptic curve preferences for ECDHE handshakes (accepted; ksched
    /// uses rustls's order: X25519, P-256, P-384).
    #[arg(long, value_delimiter = ',')]
    pub tls_curve_preferences: Vec<String>,
    /// A pair of x509 certificate and private key file paths, optionally suffixed with a list of
    /// domain patterns (accepted; ksched serves the default certificate to every name).
    #[arg(long)]
    pub tls_sni_cert_key: Vec<String>,
    /// If true, disable HTTP/2 serving on the secure port.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub disable_http2_serving: bool,
    /// The limit the server gives to clients for the maximum number of streams in an HTTP/2
    /// connection. Zero means the default.
    #[arg(long, default_value_t = 0)]
    pub http2_max_streams_per_connection: u32,
    /// If true, SO_REUSEPORT will be used when binding the port.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub permit_port_sharing: bool,
    /// If true, SO_REUSEADDR will be used when binding the port.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub permit_address_sharing: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading TLS certificate/key: {0}")]
    Pem(String),
    #[error("generating a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error(
        "--tls-min-version={0}: must be one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13"
    )]
    MinVersion(String),
    #[error("--tls-cipher-suites: none of {0} is a cipher suite ksched implements ({1})")]
    CipherSuites(String, String),
    #[error("--cert-dir {dir}: {reason}")]
    CertDir { dir: String, reason: String },
}

/// How connections are served beyond TLS.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http2Options {
    pub disabled: bool,
    /// 0: hyper's default.
    pub max_streams: u32,
}

impl TlsArgs {
    pub fn http2(&self) -> Http2Options {
        Http2Options {
            disabled: self.disable_http2_serving,
            max_streams: self.http2_max_streams_per_connection,
        }
    }

    /// Flags given that ksched accepts without acting on them.
    pub fn not_honoured(&self) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if !self.tls_sni_cert_key.is_empty() {
            flags.push("--tls-sni-cert-key");
        }
        if !self.tls_curve_preferences.is_empty() {
            flags.push("--tls-curve-preferences");
        }
        flags
    }
}

/// The serving certificate: the files, else `<cert-dir>/<pair>.crt|key` (generated there when
/// missing), else a self-signed one in memory, as kube-scheduler's.
fn serving_certificate(
    args: &TlsArgs,
    pair: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) {
        return read_pair(cert, key);
    }
    if let Some(dir) = &args.cert_dir {
        let cert = dir.join(format!("{pair}.crt"));
        let key = dir.join(format!("{pair}.key"));
        if cert.exists() && key.exists() {
            return read_pair(&cert, &key);
        }
        let (cert_pem, key_pem) = self_signed_pem()?;
        let write = |path: &Path, pem: &str| {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(path, pem))
                .map_err(|e| TlsError::CertDir {
                    dir: dir.display().to_string(),
                    reason: e.to_string(),
                })
        };
        write(&cert, &cert_pem)?;
        write(&key, &key_pem)?;
        return read_pair(&cert, &key);
    }
    let (cert_pem, key_pem) = self_signed_pem()?;
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    Ok((certs, key))
}

fn read_pair(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Pem(format!("{}: {e}", cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::Pem(format!("{}: {e}", key.display())))?;
    Ok((certs, key))
}

/// upstream's `MaybeDefaultWithSelfSignedCerts("localhost", nil, [127.0.0.1])`.
fn self_signed_pem() -> Result<(String, String), TlsError> {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    Ok((generated.cert.pem(), generated.signing_key.serialize_pem()))
}

/// Go's names of the TLS 1.2 suites rustls implements, and rustls's suite.
const SUITES: [(&str, rustls::CipherSuite); 8] = [
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// The crypto provider with `--tls-cipher-suites` applied: every TLS 1.3 suite (Go's are not
/// configurable either) and the named TLS 1.2 suites rustls implements; the others are named in a
/// warning (rustls has no CBC, RSA key exchange or 3DES suites).
fn provider(args: &TlsArgs) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if args.tls_cipher_suites.is_empty() {
        return Ok(provider);
    }
    let wanted: Vec<rustls::CipherSuite> = args
        .tls_cipher_suites
        .iter()
        .filter_map(|name| SUITES.iter().find(|(n, _)| n == name).map(|(_, s)| *s))
        .collect();
    let unsupported: Vec<&str> = args
        .tls_cipher_suites
        .iter()
        .filter(|name| !SUITES.iter().any(|(n, _)| n == *name))
        .map(String::as_str)
        .collect();
    if wanted.is_empty() {
        let known: Vec<&str> = SUITES.iter().map(|(n, _)| *n).collect();
        return Err(TlsError::CipherSuites(
            args.tls_cipher_suites.join(","),
            known.join(", "),
        ));
    }
    if !unsupported.is_empty() {
        warn!(
            suites = %unsupported.join(","),
            "--tls-cipher-suites: these suites are not implemented by ksched's TLS library and are not offered"
        );
    }
    provider
        .cipher_suites
        .retain(|s| s.version() == &rustls::version::TLS13 || wanted.contains(&s.suite()));
    Ok(provider)
}

fn versions(
    min: Option<&str>,
) -> Result<&'static [&'static rustls::SupportedProtocolVersion], TlsError> {
    static BOTH: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        None | Some("VersionTLS12") => Ok(&BOTH),
        Some("VersionTLS13") => Ok(&TLS13),
        Some(v @ ("VersionTLS10" | "VersionTLS11")) => {
            warn!("--tls-min-version={v}: ksched serves TLS 1.2 and 1.3 only");
            Ok(&BOTH)
        }
        Some(other) => Err(TlsError::MinVersion(other.to_string())),
    }
}

/// Asks for a client certificate without requiring one, and checks only that the client holds
/// its key: whether the chain is trusted is decided per request by the authenticator, against
/// CAs that may change while connections stay open (as Go's `RequestClientCert`).
#[derive(Debug)]
struct RequestClientCert {
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The TLS acceptor of an endpoint whose certificate pair is named `pair` (`kube-scheduler`).
pub(crate) fn acceptor(args: &TlsArgs, pair: &str) -> Result<TlsAcceptor, TlsError> {
    let (certs, key) = serving_certificate(args, pair)?;
    let provider = Arc::new(provider(args)?);
    let verifier = Arc::new(RequestClientCert {
        algs: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions(args.tls_min_version.as_deref())?)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = if args.disable_http2_serving {
        vec![b"http/1.1".to_vec()]
    } else {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suites_keep_tls13_and_the_named_ones() {
        let args = TlsArgs {
            tls_cipher_suites: vec![
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
                "TLS_RSA_WITH_AES_128_CBC_SHA".into(),
            ],
            ..TlsArgs::default()
        };
        let p = provider(&args).unwrap();
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls12,
            vec![rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        );
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS13)
        );
        let none = TlsArgs {
            tls_cipher_suites: vec!["TLS_RSA_WITH_3DES_EDE_CBC_SHA".into()],
            ..TlsArgs::default()
        };
        assert!(provider(&none).is_err());
    }

    #[test]
    fn min_versions_as_go_names_them() {
        assert_eq!(versions(Some("VersionTLS13")).unwrap().len(), 1);
        assert_eq!(versions(None).unwrap().len(), 2);
        let err = versions(Some("TLS1.3")).unwrap_err().to_string();
        assert!(err.contains("--tls-min-version=TLS1.3"), "{err}");
    }

    #[test]
    fn cert_dir_gets_a_generated_pair_that_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let args = TlsArgs {
            cert_dir: Some(dir.path().to_path_buf()),
            ..TlsArgs::default()
        };
        let (first, _) = serving_certificate(&args, "kube-scheduler").unwrap();
        assert!(dir.path().join("kube-scheduler.crt").exists());
        let (second, _) = serving_certificate(&args, "kube-scheduler").unwrap();
        assert_eq!(first, second);
        assert!(acceptor(&args, "kube-scheduler").is_ok());
    }
}
