//! Host ports: the ports a pod asks for ([`HostPort`]) and those in use on a node
//! ([`HostPortInfo`]), with upstream's conflict rules.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::resource::is_restartable_init_container;

/// One host port a pod uses, sanitized: empty IP is `0.0.0.0`, empty protocol is `TCP`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

pub const DEFAULT_BIND_ALL_HOST_IP: &str = "0.0.0.0";

impl HostPort {
    pub fn new(ip: &str, protocol: &str, port: i32) -> HostPort {
        HostPort {
            ip: if ip.is_empty() {
                DEFAULT_BIND_ALL_HOST_IP.to_string()
            } else {
                ip.to_string()
            },
            protocol: if protocol.is_empty() {
                "TCP".to_string()
            } else {
                protocol.to_string()
            },
            port,
        }
    }
}

/// The host ports of a pod's containers and restartable init containers (upstream's
/// `GetHostPorts`), only those with `hostPort > 0`.
pub fn pod_host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let hp = p.host_port.unwrap_or(0);
            (hp > 0).then(|| {
                HostPort::new(
                    p.host_ip.as_deref().unwrap_or(""),
                    p.protocol.as_deref().unwrap_or(""),
                    hp,
                )
            })
        })
        .collect()
}

/// The host ports in use on a node, with upstream's conflict rules (`HostPortInfo`): `0.0.0.0`
/// conflicts with the same protocol/port on any IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPortInfo {
    // (ip, protocol, port) -> number of users; nodes use few host ports, a small map is enough.
    used: HashMap<HostPort, u32>,
}

impl HostPortInfo {
    pub fn add(&mut self, p: &HostPort) {
        if p.port <= 0 {
            return;
        }
        *self.used.entry(p.clone()).or_insert(0) += 1;
    }

    pub fn remove(&mut self, p: &HostPort) {
        if let Some(n) = self.used.get_mut(p) {
            *n -= 1;
            if *n == 0 {
                self.used.remove(p);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.used.len()
    }

    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    /// Whether `p` conflicts with a port in use.
    pub fn check_conflict(&self, p: &HostPort) -> bool {
        if p.port <= 0 {
            return false;
        }
        if p.ip == DEFAULT_BIND_ALL_HOST_IP {
            return self
                .used
                .keys()
                .any(|u| u.protocol == p.protocol && u.port == p.port);
        }
        self.used.keys().any(|u| {
            u.protocol == p.protocol
                && u.port == p.port
                && (u.ip == p.ip || u.ip == DEFAULT_BIND_ALL_HOST_IP)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_conflicts() {
        let mut used = HostPortInfo::default();
        used.add(&HostPort::new("127.0.0.1", "TCP", 80));
        used.add(&HostPort::new("", "", 8080));
        let cases = [
            (HostPort::new("127.0.0.1", "TCP", 80), true),
            (HostPort::new("127.0.0.2", "TCP", 80), false),
            (HostPort::new("0.0.0.0", "TCP", 80), true),
            (HostPort::new("127.0.0.1", "UDP", 80), false),
            (HostPort::new("10.0.0.1", "TCP", 8080), true),
            (HostPort::new("10.0.0.1", "UDP", 8080), false),
            (HostPort::new("", "", 0), false),
        ];
        for (p, want) in cases {
            assert_eq!(used.check_conflict(&p), want, "{p:?}");
        }
        used.remove(&HostPort::new("0.0.0.0", "TCP", 8080));
        assert!(!used.check_conflict(&HostPort::new("10.0.0.1", "TCP", 8080)));
    }
}
