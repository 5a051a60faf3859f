//! Certificates for the test control plane: a self-made CA, the API server's serving certificate,
//! an admin client certificate in `system:masters`, and the service-account signing key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub sa_public: PathBuf,
    pub sa_private: PathBuf,
}

impl Pki {
    pub fn generate(dir: &Path) -> Result<Pki, String> {
        let err = |e: rcgen::Error| e.to_string();
        let write = |name: &str, pem: String| -> Result<PathBuf, String> {
            let path = dir.join(name);
            std::fs::write(&path, pem).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path)
        };

        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ksched-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate().map_err(err)?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .map_err(err)?;
        serving.subject_alt_names.push(SanType::IpAddress(
            "127.0.0.1".parse().map_err(|e| format!("{e}"))?,
        ));
        serving.subject_alt_names.push(SanType::IpAddress(
            "10.0.0.1".parse().map_err(|e| format!("{e}"))?,
        ));
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &issuer).map_err(err)?;

        let admin_key = KeyPair::generate().map_err(err)?;
        let mut admin = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        admin
            .distinguished_name
            .push(DnType::CommonName, "ksched-test-admin");
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &issuer).map_err(err)?;

        let sa_key = KeyPair::generate().map_err(err)?;

        Ok(Pki {
            ca_cert: write("ca.crt", ca_cert.pem())?,
            serving_cert: write("apiserver.crt", serving_cert.pem())?,
            serving_key: write("apiserver.key", serving_key.serialize_pem())?,
            admin_cert: write("admin.crt", admin_cert.pem())?,
            admin_key: write("admin.key", admin_key.serialize_pem())?,
            sa_public: write("sa.pub", sa_key.public_key_pem())?,
            sa_private: write("sa.key", sa_key.serialize_pem())?,
        })
    }

    pub fn write_kubeconfig(&self, path: &Path, server: &str) -> Result<(), String> {
        let config = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: admin
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
",
            ca = self.ca_cert.display(),
            cert = self.admin_cert.display(),
            key = self.admin_key.display(),
        );
        std::fs::write(path, config).map_err(|e| format!("{}: {e}", path.display()))
    }
}
