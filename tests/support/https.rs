//! A minimal HTTPS GET that verifies the server against the test CA.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// GETs `https://127.0.0.1:<port><path>`; returns (status code, body).
pub async fn get(ca_file: &Path, port: u16, path: &str) -> Result<(u16, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A peer closing without close_notify is fine for this check.
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("no HTTP status in {text:?}"))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .replace(' ', "")
            .starts_with("transfer-encoding:chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// A `Transfer-Encoding: chunked` body (Go's servers send one when a response outgrows their
/// buffer, as kube-scheduler's /metrics does) without its chunk framing.
fn dechunk(mut rest: &str) -> Result<String, String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or_else(|| format!("chunked body without a chunk size: {rest:.40?}"))?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size:?}: {e}"))?;
        if size == 0 {
            return Ok(body);
        }
        let chunk = after
            .get(..size)
            .ok_or_else(|| format!("chunk of {size} bytes cut short"))?;
        body.push_str(chunk);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chunked_body_loses_its_framing_even_inside_a_line() {
        use super::dechunk;
        let framed = "5\r\nmetri\r\na;ext=1\r\nc_total 7\n\r\n0\r\n\r\n";
        assert_eq!(dechunk(framed), Ok("metric_total 7\n".to_string()));
        assert!(dechunk("zz\r\nabc").is_err());
    }
}
