//! The [`MetricsSource`] over Prometheus' HTTP API (`GET /api/v1/query`).
//!
//! Deliberately small: the plugin's refresher (a background task, never the scheduling cycle)
//! asks once per refresh period, so one HTTP/1.0 request over `tokio::net` within a deadline is
//! enough. Only `http://` addresses are supported (a Prometheus behind TLS is reached through a
//! proxy or a sidecar).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{MetricsSource, Sample};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("the Prometheus address {0:?} is not an http:// URL (https is not supported)")]
    Scheme(String),
    #[error("the Prometheus address {0:?} has no host")]
    NoHost(String),
}

/// A Prometheus server at `http://host[:port][/prefix]`.
#[derive(Debug, Clone)]
pub struct PrometheusClient {
    host_port: String,
    prefix: String,
}

impl PrometheusClient {
    /// `address` as in the plugin's `ip` arg (`http://10.0.0.4:9090`; a bare `host:port` is taken
    /// as http).
    pub fn new(address: &str) -> Result<PrometheusClient, AddressError> {
        let rest = if let Some(r) = address.strip_prefix("http://") {
            r
        } else if address.contains("://") {
            return Err(AddressError::Scheme(address.to_string()));
        } else {
            address
        };
        let (host_port, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host_port.is_empty() {
            return Err(AddressError::NoHost(address.to_string()));
        }
        let host_port = if host_port.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) && !host_port.ends_with(']')
        }) {
            host_port.to_string()
        } else {
            format!("{host_port}:80")
        };
        Ok(PrometheusClient {
            host_port,
            prefix: prefix.to_string(),
        })
    }

    /// `GET path_and_query`, all of it (resolving, connecting, sending, reading) within `timeout`.
    async fn get(&self, path_and_query: &str, timeout: Duration) -> Result<(u16, Vec<u8>), String> {
        tokio::time::timeout(timeout, self.exchange(path_and_query))
            .await
            .map_err(|_| format!("timed out after {timeout:?}"))?
    }

    async fn exchange(&self, path_and_query: &str) -> Result<(u16, Vec<u8>), String> {
        let mut stream = TcpStream::connect(&self.host_port)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.host_port))?;
        let request = format!(
            "GET {}{path_and_query} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: ksched\r\nConnection: close\r\n\r\n",
            self.prefix, self.host_port
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending the query: {e}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        parse_response(&response)
    }
}

/// Status code and body of an HTTP/1.x response (chunked bodies decoded).
fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("malformed HTTP answer")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or("malformed HTTP status line")?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((code, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("malformed chunked body")?;
        let size_str = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "malformed chunk size")?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok((code, out));
        }
        if rest.len() < size {
            return Err("truncated chunked body".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[derive(Deserialize)]
struct QueryResponse {
    status: String,
    #[serde(default)]
    data: Option<QueryData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryData {
    result_type: String,
    result: Vec<VectorSample>,
}

#[derive(Deserialize)]
struct VectorSample {
    metric: HashMap<String, String>,
    value: (f64, String),
}

/// The samples of an instant-query answer (`resultType: vector`).
pub fn parse_query_response(body: &[u8]) -> Result<Vec<Sample>, String> {
    let r: QueryResponse =
        serde_json::from_slice(body).map_err(|e| format!("decoding the answer: {e}"))?;
    if r.status != "success" {
        return Err(format!(
            "query failed: {}",
            r.error.unwrap_or_else(|| r.status.clone())
        ));
    }
    let data = r.data.ok_or("the answer has no data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "expected a vector result, got {:?}",
            data.result_type
        ));
    }
    data.result
        .into_iter()
        .map(|s| {
            let value = s
                .value
                .1
                .parse::<f64>()
                .map_err(|_| format!("malformed sample value {:?}", s.value.1))?;
            Ok(Sample {
                labels: s.metric,
                value,
            })
        })
        .collect()
}

#[async_trait]
impl MetricsSource for PrometheusClient {
    async fn query(&self, query: &str, timeout: Duration) -> Result<Vec<Sample>, String> {
        let (code, body) = self
            .get(
                &format!("/api/v1/query?query={}", url_encode(query)),
                timeout,
            )
            .await?;
        match code {
            200 => parse_query_response(&body),
            400 | 422 | 503 => parse_query_response(&body)
                .and_then(|_| Err(format!("Prometheus answered HTTP {code}"))),
            _ => Err(format!("Prometheus answered HTTP {code}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let c = PrometheusClient::new("http://10.0.0.4:9090").unwrap();
        assert_eq!(
            (c.host_port.as_str(), c.prefix.as_str()),
            ("10.0.0.4:9090", "")
        );
        let c = PrometheusClient::new("http://prom.example/sub/").unwrap();
        assert_eq!(
            (c.host_port.as_str(), c.prefix.as_str()),
            ("prom.example:80", "/sub")
        );
        let c = PrometheusClient::new("127.0.0.1:9090").unwrap();
        assert_eq!(c.host_port, "127.0.0.1:9090");
        assert!(matches!(
            PrometheusClient::new("https://x:9090"),
            Err(AddressError::Scheme(_))
        ));
        assert!(matches!(
            PrometheusClient::new("http://"),
            Err(AddressError::NoHost(_))
        ));
    }

    #[test]
    fn responses() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"device":"eth0","instance":"n1"},"value":[1.5,"1200"]}]}}"#;
        let raw = [
            b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n".as_slice(),
            body,
        ]
        .concat();
        let (code, b) = parse_response(&raw).unwrap();
        assert_eq!(code, 200);
        let samples = parse_query_response(&b).unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].value, 1200.0);
        assert_eq!(samples[0].labels["instance"], "n1");

        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().1, b"abcdef");

        let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert_eq!(
            parse_query_response(err).unwrap_err(),
            "query failed: parse error"
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(parse_query_response(matrix).is_err());
        assert!(parse_response(b"garbage").is_err());
        assert_eq!(url_encode("a{b=\"c\"}[60s]"), "a%7Bb%3D%22c%22%7D%5B60s%5D");
    }

    #[tokio::test]
    async fn unreachable_server_fails_within_the_timeout() {
        // A port nothing listens on (bound then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let c = PrometheusClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let t = std::time::Instant::now();
        assert!(c.query("up", Duration::from_secs(2)).await.is_err());
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn silent_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let c = PrometheusClient::new(&format!("http://{addr}")).unwrap();
        let t = std::time::Instant::now();
        let err = c.query("up", Duration::from_millis(300)).await.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{err}");
        assert!(err.contains("timed out"), "{err}");
        drop(listener);
    }
}
