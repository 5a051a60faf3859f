//! Walks a document's mappings into the v1 types, checking each field's name and type and
//! collecting every error with its full path.

use serde_json::{Map, Value};

use super::fields::{Ctx, allowed_fields, misplaced_hint, point_from_field};
use super::{Decoded, describe, suggest};
use crate::config::duration::GoDuration;
use crate::config::error::{FieldError, join_path};
use crate::config::types::{
    ApiVersion, ClientConnectionConfiguration, Extender, ExtenderManagedResource,
    ExtenderTLSConfig, KIND, KubeSchedulerProfile, LeaderElectionConfiguration, Plugin,
    PluginConfig, PluginSet, Plugins,
};
use crate::emulation::Minor;

pub(crate) struct Walker {
    pub version: ApiVersion,
    /// The emulated Kubernetes minor: which v1 fields exist.
    pub minor: Minor,
    pub errors: Vec<FieldError>,
}

impl Walker {
    fn err(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(path, reason));
    }

    fn type_err(&mut self, path: &str, expected: &str, got: &Value) {
        self.err(path, format!("expected {expected}, got {}", describe(got)));
    }

    fn check_fields(&mut self, map: &Map<String, Value>, path: &str, ctx: Ctx) {
        let allowed = allowed_fields(ctx, self.version, self.minor);
        for key in map.keys() {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            let field_path = join_path(path, key);
            let parent = if path.is_empty() {
                "the top level"
            } else {
                path
            };
            let mut reason = format!("unknown field {key:?}");
            if let Some(hint) = misplaced_hint(ctx, key, self.version, self.minor, parent) {
                reason = format!("{reason}: {hint}");
            } else if let Some(s) = suggest(key, &allowed) {
                reason = format!("{reason}: did you mean `{s}`?");
            } else {
                reason = format!("{reason}; the fields here are: {}", allowed.join(", "));
            }
            self.err(&field_path, reason);
        }
    }

    fn map<'v>(&mut self, v: &'v Value, path: &str, what: &str) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                self.type_err(path, &format!("a mapping ({what})"), other);
                None
            }
        }
    }

    fn list<'v>(&mut self, v: &'v Value, path: &str, what: &str) -> &'v [Value] {
        match v {
            Value::Null => &[],
            Value::Array(a) => a,
            other => {
                self.type_err(path, &format!("a list ({what})"), other);
                &[]
            }
        }
    }

    fn string(&mut self, v: &Value, path: &str) -> Option<String> {
        match v {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => {
                let hint = match other {
                    Value::Number(_) | Value::Bool(_) => " (quote it to make it a string)",
                    _ => "",
                };
                self.err(
                    path,
                    format!("expected a string, got {}{hint}", describe(other)),
                );
                None
            }
        }
    }

    fn boolean(&mut self, v: &Value, path: &str) -> Option<bool> {
        match v {
            Value::Null => None,
            Value::Bool(b) => Some(*b),
            other => {
                self.type_err(path, "a boolean (true or false)", other);
                None
            }
        }
    }

    fn integer<T: TryFrom<i64>>(&mut self, v: &Value, path: &str, type_name: &str) -> Option<T> {
        match v {
            Value::Null => None,
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    match T::try_from(i) {
                        Ok(t) => Some(t),
                        Err(_) => {
                            self.err(
                                path,
                                format!("{i} is out of range for an integer of type {type_name}"),
                            );
                            None
                        }
                    }
                } else if n.is_u64() {
                    self.err(
                        path,
                        format!("{n} is out of range for an integer of type {type_name}"),
                    );
                    None
                } else {
                    self.err(
                        path,
                        format!("expected an integer ({type_name}), got the fractional number {n}"),
                    );
                    None
                }
            }
            Value::String(s) if s.trim().parse::<i64>().is_ok() => {
                self.err(
                    path,
                    format!(
                        "expected an integer ({type_name}), got the string {s:?}: remove the quotes"
                    ),
                );
                None
            }
            other => {
                self.type_err(path, &format!("an integer ({type_name})"), other);
                None
            }
        }
    }

    fn float32(&mut self, v: &Value, path: &str) -> Option<f32> {
        match v {
            Value::Null => None,
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() && f.abs() <= f64::from(f32::MAX) => Some(f as f32),
                _ => {
                    self.err(path, format!("{n} is out of range for a float32"));
                    None
                }
            },
            other => {
                self.type_err(path, "a number", other);
                None
            }
        }
    }

    fn duration(&mut self, v: &Value, path: &str) -> Option<GoDuration> {
        match v {
            Value::Null => None,
            Value::String(s) => match GoDuration::parse(s) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.err(
                        path,
                        format!("{e}: expected a duration such as \"15s\", \"1m30s\" or \"500ms\" (units ns, us, ms, s, m, h)"),
                    );
                    None
                }
            },
            Value::Number(n) => {
                self.err(
                    path,
                    format!("expected a duration string such as \"15s\", got the number {n}: add a unit, e.g. \"{n}s\""),
                );
                None
            }
            other => {
                self.type_err(path, "a duration string such as \"15s\"", other);
                None
            }
        }
    }

    fn base64(&mut self, v: &Value, path: &str) -> String {
        let Some(s) = self.string(v, path) else {
            return String::new();
        };
        if !is_base64(&s) {
            self.err(
                path,
                "must be base64-encoded (standard alphabet, with padding), as JSON encodes bytes",
            );
        }
        s
    }

    pub(crate) fn top(&mut self, map: &Map<String, Value>) -> Decoded {
        self.check_fields(map, "", Ctx::Top);
        let mut out = Decoded {
            version: Some(self.version),
            ..Decoded::default()
        };
        let doc = &mut out.doc;
        doc.api_version = Some(self.version.api_version());
        doc.kind = Some(KIND.to_string());
        for (key, v) in map {
            let path = key.as_str();
            match path {
                "parallelism" => doc.parallelism = self.integer(v, path, "int32"),
                "leaderElection" => {
                    if let Some(m) = self.map(v, path, "leader election settings") {
                        doc.leader_election = self.leader_election(m, path);
                    }
                }
                "clientConnection" => {
                    if let Some(m) = self.map(v, path, "client connection settings") {
                        doc.client_connection = self.client_connection(m, path);
                    }
                }
                "healthzBindAddress" => doc.healthz_bind_address = self.string(v, path),
                "metricsBindAddress" => doc.metrics_bind_address = self.string(v, path),
                "enableProfiling" => doc.enable_profiling = self.boolean(v, path),
                "enableContentionProfiling" => {
                    doc.enable_contention_profiling = self.boolean(v, path)
                }
                "percentageOfNodesToScore" => {
                    doc.percentage_of_nodes_to_score = self.integer(v, path, "int32")
                }
                "podInitialBackoffSeconds" => {
                    doc.pod_initial_backoff_seconds = self.integer(v, path, "int64")
                }
                "podMaxBackoffSeconds" => {
                    doc.pod_max_backoff_seconds = self.integer(v, path, "int64")
                }
                "delayCacheUntilActive" if self.version >= ApiVersion::V1Beta3 => {
                    doc.delay_cache_until_active = self.boolean(v, path);
                }
                "disablePreemption" if self.version == ApiVersion::V1Beta1 => {
                    out.disable_preemption = self.boolean(v, path);
                }
                "profiles" => {
                    let items = self.list(v, path, "scheduling profiles");
                    for (i, item) in items.iter().enumerate() {
                        let p = format!("profiles[{i}]");
                        match item {
                            Value::Object(m) => {
                                let (profile, unreserve) = self.profile(m, &p);
                                doc.profiles.push(profile);
                                if let Some(u) = unreserve {
                                    out.unreserve.push((i, u));
                                }
                            }
                            other => {
                                self.type_err(
                                    &p,
                                    "a mapping (a profile: schedulerName, plugins, pluginConfig)",
                                    other,
                                );
                                doc.profiles.push(KubeSchedulerProfile::default());
                            }
                        }
                    }
                }
                "extenders" => {
                    let items = self.list(v, path, "scheduler extenders");
                    for (i, item) in items.iter().enumerate() {
                        let p = format!("extenders[{i}]");
                        if let Some(m) = self.map(item, &p, "an extender") {
                            doc.extenders.push(self.extender(m, &p));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn leader_election(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
    ) -> LeaderElectionConfiguration {
        self.check_fields(map, path, Ctx::LeaderElection);
        let mut le = LeaderElectionConfiguration::default();
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "leaderElect" => le.leader_elect = self.boolean(v, &p),
                "leaseDuration" => le.lease_duration = self.duration(v, &p),
                "renewDeadline" => le.renew_deadline = self.duration(v, &p),
                "retryPeriod" => le.retry_period = self.duration(v, &p),
                "resourceLock" => le.resource_lock = self.string(v, &p),
                "resourceName" => le.resource_name = self.string(v, &p),
                "resourceNamespace" => le.resource_namespace = self.string(v, &p),
                _ => {}
            }
        }
        le
    }

    fn client_connection(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
    ) -> ClientConnectionConfiguration {
        self.check_fields(map, path, Ctx::ClientConnection);
        let mut cc = ClientConnectionConfiguration::default();
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "kubeconfig" => cc.kubeconfig = self.string(v, &p),
                "acceptContentTypes" => cc.accept_content_types = self.string(v, &p),
                "contentType" => cc.content_type = self.string(v, &p),
                "qps" => cc.qps = self.float32(v, &p),
                "burst" => cc.burst = self.integer(v, &p, "int32"),
                _ => {}
            }
        }
        cc
    }

    fn profile(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
    ) -> (KubeSchedulerProfile, Option<PluginSet>) {
        self.check_fields(map, path, Ctx::Profile);
        let mut profile = KubeSchedulerProfile::default();
        let mut unreserve = None;
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "schedulerName" => profile.scheduler_name = self.string(v, &p),
                "percentageOfNodesToScore" if self.version == ApiVersion::V1 => {
                    profile.percentage_of_nodes_to_score = self.integer(v, &p, "int32");
                }
                "plugins" => {
                    if let Some(m) =
                        self.map(v, &p, "extension points: queueSort, filter, score, ...")
                    {
                        let (plugins, u) = self.plugins(m, &p);
                        profile.plugins = Some(plugins);
                        unreserve = u;
                    }
                }
                "pluginConfig" => {
                    let items = self.list(v, &p, "plugin args: [{name, args}]");
                    for (j, item) in items.iter().enumerate() {
                        let ip = format!("{p}[{j}]");
                        if let Some(m) = self.map(item, &ip, "{name, args}") {
                            profile.plugin_config.push(self.plugin_config(m, &ip));
                        }
                    }
                }
                _ => {}
            }
        }
        (profile, unreserve)
    }

    fn plugins(&mut self, map: &Map<String, Value>, path: &str) -> (Plugins, Option<PluginSet>) {
        self.check_fields(map, path, Ctx::Plugins);
        let allowed = allowed_fields(Ctx::Plugins, self.version, self.minor);
        let mut plugins = Plugins::default();
        let mut unreserve = None;
        for (key, v) in map {
            if !allowed.contains(&key.as_str()) {
                continue;
            }
            let p = join_path(path, key);
            let Some(m) = self.map(v, &p, "{enabled: [...], disabled: [...]}") else {
                continue;
            };
            let set = self.plugin_set(m, &p);
            match key.as_str() {
                "multiPoint" => plugins.multi_point = set,
                "unreserve" => unreserve = Some(set),
                other => {
                    if let Some(point) = point_from_field(other) {
                        *plugins.get_mut(point) = set;
                    }
                }
            }
        }
        (plugins, unreserve)
    }

    fn plugin_set(&mut self, map: &Map<String, Value>, path: &str) -> PluginSet {
        self.check_fields(map, path, Ctx::PluginSet);
        let mut set = PluginSet::default();
        for (key, v) in map {
            let p = join_path(path, key);
            let target = match key.as_str() {
                "enabled" => &mut set.enabled,
                "disabled" => &mut set.disabled,
                _ => continue,
            };
            let items = self.list(v, &p, "plugins: [{name: ...}]");
            for (k, item) in items.iter().enumerate() {
                let ip = format!("{p}[{k}]");
                match item {
                    Value::Object(m) => target.push(self.plugin(m, &ip)),
                    Value::String(s) => {
                        self.err(
                            &ip,
                            format!("expected a mapping {{name: {s}}}, got a bare string: write `- name: {s}`"),
                        );
                    }
                    other => self.type_err(&ip, "a mapping {name: <plugin>}", other),
                }
            }
        }
        set
    }

    fn plugin(&mut self, map: &Map<String, Value>, path: &str) -> Plugin {
        self.check_fields(map, path, Ctx::Plugin);
        let mut plugin = Plugin::default();
        let mut has_name = false;
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "name" => {
                    if let Some(n) = self.string(v, &p) {
                        has_name = true;
                        plugin.name = n;
                    }
                }
                "weight" => plugin.weight = self.integer(v, &p, "int32"),
                _ => {}
            }
        }
        if !has_name && !map.contains_key("name") {
            self.err(&join_path(path, "name"), "required: the plugin name");
        } else if has_name && plugin.name.is_empty() {
            self.err(
                &join_path(path, "name"),
                "must not be empty: the plugin name",
            );
        }
        plugin
    }

    fn plugin_config(&mut self, map: &Map<String, Value>, path: &str) -> PluginConfig {
        self.check_fields(map, path, Ctx::PluginConfig);
        let mut pc = PluginConfig::default();
        let mut has_name = false;
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "name" => {
                    if let Some(n) = self.string(v, &p) {
                        has_name = !n.is_empty();
                        pc.name = n;
                    }
                }
                "args" => match v {
                    Value::Null => {}
                    Value::Object(_) => pc.args = Some(v.clone()),
                    other => self.type_err(&p, "a mapping of the plugin's arguments", other),
                },
                _ => {}
            }
        }
        if !has_name {
            self.err(
                &join_path(path, "name"),
                "required: the name of the plugin these args are for",
            );
        }
        pc
    }

    fn extender(&mut self, map: &Map<String, Value>, path: &str) -> Extender {
        self.check_fields(map, path, Ctx::Extender);
        let mut e = Extender::default();
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "urlPrefix" => e.url_prefix = self.string(v, &p).unwrap_or_default(),
                "filterVerb" => e.filter_verb = self.string(v, &p).unwrap_or_default(),
                "preemptVerb" => e.preempt_verb = self.string(v, &p).unwrap_or_default(),
                "prioritizeVerb" => e.prioritize_verb = self.string(v, &p).unwrap_or_default(),
                "weight" => e.weight = self.integer(v, &p, "int64").unwrap_or_default(),
                "bindVerb" => e.bind_verb = self.string(v, &p).unwrap_or_default(),
                "enableHTTPS" => e.enable_https = self.boolean(v, &p).unwrap_or_default(),
                "tlsConfig" => {
                    if let Some(m) = self.map(v, &p, "TLS settings") {
                        e.tls_config = Some(self.tls_config(m, &p));
                    }
                }
                "httpTimeout" => e.http_timeout = self.duration(v, &p).unwrap_or_default(),
                "nodeCacheCapable" => {
                    e.node_cache_capable = self.boolean(v, &p).unwrap_or_default()
                }
                "managedResources" => {
                    let items = self.list(v, &p, "managed extended resources");
                    for (k, item) in items.iter().enumerate() {
                        let ip = format!("{p}[{k}]");
                        if let Some(m) = self.map(item, &ip, "{name, ignoredByScheduler}") {
                            self.check_fields(m, &ip, Ctx::ManagedResource);
                            let mut r = ExtenderManagedResource::default();
                            for (rk, rv) in m {
                                let rp = join_path(&ip, rk);
                                match rk.as_str() {
                                    "name" => r.name = self.string(rv, &rp).unwrap_or_default(),
                                    "ignoredByScheduler" => {
                                        r.ignored_by_scheduler =
                                            self.boolean(rv, &rp).unwrap_or_default();
                                    }
                                    _ => {}
                                }
                            }
                            e.managed_resources.push(r);
                        }
                    }
                }
                "ignorable" => e.ignorable = self.boolean(v, &p).unwrap_or_default(),
                _ => {}
            }
        }
        e
    }

    fn tls_config(&mut self, map: &Map<String, Value>, path: &str) -> ExtenderTLSConfig {
        self.check_fields(map, path, Ctx::TlsConfig);
        let mut t = ExtenderTLSConfig::default();
        for (key, v) in map {
            let p = join_path(path, key);
            match key.as_str() {
                "insecure" => t.insecure = self.boolean(v, &p).unwrap_or_default(),
                "serverName" => t.server_name = self.string(v, &p).unwrap_or_default(),
                "certFile" => t.cert_file = self.string(v, &p).unwrap_or_default(),
                "keyFile" => t.key_file = self.string(v, &p).unwrap_or_default(),
                "caFile" => t.ca_file = self.string(v, &p).unwrap_or_default(),
                "certData" => t.cert_data = self.base64(v, &p),
                "keyData" => t.key_data = self.base64(v, &p),
                "caData" => t.ca_data = self.base64(v, &p),
                _ => {}
            }
        }
        t
    }
}

fn is_base64(s: &str) -> bool {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return false;
    }
    bytes[..bytes.len() - padding]
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_check() {
        assert!(is_base64(""));
        assert!(is_base64("YWJj"));
        assert!(is_base64("YWI="));
        assert!(!is_base64("YWI"));
        assert!(!is_base64("Y*I="));
    }
}
