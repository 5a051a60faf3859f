//! A minimal HTTPS GET that verifies the server against the test CA, optionally with a bearer
//! token or the admin's client certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Who the request is from.
#[derive(Debug, Clone, Copy)]
pub enum As<'a> {
    Anonymous,
    Token(&'a str),
    /// A client certificate and key (PEM files).
    Cert(&'a Path, &'a Path),
}

/// GETs `https://127.0.0.1:<port><path>` anonymously; returns (status code, body).
pub async fn get(ca_file: &Path, port: u16, path: &str) -> Result<(u16, String), String> {
    get_as(ca_file, port, path, As::Anonymous).await
}

/// GETs `https://127.0.0.1:<port><path>` as `who`; returns (status code, body).
pub async fn get_as(
    ca_file: &Path,
    port: u16,
    path: &str,
    who: As<'_>,
) -> Result<(u16, String), String> {
    let (status, body) = get_bytes(ca_file, port, path, who).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// [`get_as`] with the body as bytes.
pub async fn get_bytes(
    ca_file: &Path,
    port: u16,
    path: &str,
    who: As<'_>,
) -> Result<(u16, Vec<u8>), String> {
    request(ca_file, port, "GET", path, "", who).await
}

/// Sends `method path` with `body` to `https://127.0.0.1:<port>` as `who`; returns (status code,
/// body).
pub async fn request(
    ca_file: &Path,
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    who: As<'_>,
) -> Result<(u16, Vec<u8>), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match who {
        As::Cert(cert, key) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(|e| e.to_string())?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| e.to_string())?
        }
        _ => builder.with_no_client_auth(),
    };
    let connector = TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let auth = match who {
        As::Token(token) => format!("Authorization: Bearer {token}\r\n"),
        _ => String::new(),
    };
    let length = if body.is_empty() {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{length}Connection: close\r\n\r\n{body}"
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A peer closing without close_notify is fine for this check.
    let _ = tls.read_to_end(&mut response).await;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no HTTP response in {:?}",
                String::from_utf8_lossy(&response)
            )
        })?;
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("no HTTP status in {head:?}"))?;
    let mut body = response[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    Ok((status, body))
}

/// The payload of a chunked body.
fn unchunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = data.get(end + 2..).unwrap_or(&[]);
    }
    out
}
