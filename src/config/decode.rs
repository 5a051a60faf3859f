//! Strict decoding of a `KubeSchedulerConfiguration` file: any bytes in, either the document as
//! written (in v1 types, whatever version it was written in) or field errors that say what to change.
//!
//! Decoding walks a generic YAML/JSON tree by hand instead of deriving it, so every error carries
//! the full field path, the expected type, and — for fields placed at the wrong level, misspelled, or
//! from another API version — where the field belongs.

use serde_json::{Map, Value};

use super::catalog::ExtensionPoint;
use super::duration::GoDuration;
use super::error::{FieldError, join_path};
use super::types::{
    API_VERSION_V1, ApiVersion, ClientConnectionConfiguration, Extender, ExtenderManagedResource,
    ExtenderTLSConfig, GROUP, KIND, KubeSchedulerConfiguration, KubeSchedulerProfile,
    LeaderElectionConfiguration, Plugin, PluginConfig, PluginSet, Plugins,
};
use crate::emulation::Minor;

/// The decoded document plus what only older versions can say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decoded {
    pub version: Option<ApiVersion>,
    pub doc: KubeSchedulerConfiguration,
    /// v1beta1's `profiles[i].plugins.unreserve`, by profile index.
    pub unreserve: Vec<(usize, PluginSet)>,
    /// v1beta1's `disablePreemption`.
    pub disable_preemption: Option<bool>,
}

const READABLE_VERSIONS: &str =
    "ksched also reads kubescheduler.config.k8s.io/v1beta3, v1beta2 and v1beta1 and converts them";

/// Parses `bytes` as one YAML (or JSON) document holding a mapping.
pub(crate) fn parse_document(bytes: &[u8]) -> Result<Map<String, Value>, FieldError> {
    let bytes = bytes
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        FieldError::new(
            "",
            format!(
                "the file is not UTF-8 text (invalid byte at offset {}): a KubeSchedulerConfiguration is a YAML or JSON document",
                e.valid_up_to()
            ),
        )
    })?;
    if text.contains('\0') {
        return Err(FieldError::new(
            "",
            "the file contains NUL bytes, so it is not YAML or JSON text: a KubeSchedulerConfiguration is a YAML or JSON document",
        ));
    }
    let meaningful = text
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with('#') && l != "---" && l != "...");
    if !meaningful {
        return Err(FieldError::new(
            "",
            format!(
                "the file is empty: write a KubeSchedulerConfiguration, at least `apiVersion: {API_VERSION_V1}` and `kind: {KIND}`"
            ),
        ));
    }
    let value = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(text)
            .map_err(|e| FieldError::new("", format!("the file is not valid JSON: {e}")))?
    } else {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
                FieldError::new(
                    "",
                    format!("the file is not valid YAML: {}", one_line(&e.to_string())),
                )
            })?;
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        match docs.len() {
            0 => {
                return Err(FieldError::new(
                    "",
                    format!(
                        "the file holds no YAML document: write a KubeSchedulerConfiguration, at least `apiVersion: {API_VERSION_V1}` and `kind: {KIND}`"
                    ),
                ));
            }
            1 => docs.into_iter().next().unwrap_or(Value::Null),
            n => {
                return Err(FieldError::new(
                    "",
                    format!(
                        "the file holds {n} YAML documents (separated by `---`); a scheduler configuration file holds exactly one KubeSchedulerConfiguration: keep one document"
                    ),
                ));
            }
        }
    };
    match value {
        Value::Object(map) => Ok(map),
        other => Err(FieldError::new(
            "",
            format!(
                "expected a KubeSchedulerConfiguration mapping (apiVersion, kind, profiles, ...) at the top of the file, got {}",
                describe(&other)
            ),
        )),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "a string (\"16\")", "a list", ... for type errors.
pub(crate) fn describe(v: &Value) -> String {
    fn short(s: &str) -> String {
        let mut out: String = s.chars().take(40).collect();
        if s.chars().count() > 40 {
            out.push_str("...");
        }
        out
    }
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(s) => format!("a string ({:?})", short(s)),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a mapping".to_string(),
    }
}

/// Checks `apiVersion` and `kind`. Every problem is reported; the version only when both are right.
pub(crate) fn check_type_meta(map: &Map<String, Value>) -> Result<ApiVersion, Vec<FieldError>> {
    let mut errors = Vec::new();
    let version = match map.get("apiVersion") {
        None | Some(Value::Null) => {
            errors.push(FieldError::new(
                "apiVersion",
                format!("required: add `apiVersion: {API_VERSION_V1}` ({READABLE_VERSIONS})"),
            ));
            None
        }
        Some(Value::String(s)) => match parse_api_version(s) {
            Ok(v) => Some(v),
            Err(reason) => {
                errors.push(FieldError::new("apiVersion", reason));
                None
            }
        },
        Some(other) => {
            errors.push(FieldError::new(
                "apiVersion",
                format!(
                    "expected a string such as {API_VERSION_V1:?}, got {}",
                    describe(other)
                ),
            ));
            None
        }
    };
    match map.get("kind") {
        None | Some(Value::Null) => errors.push(FieldError::new(
            "kind",
            format!("required: add `kind: {KIND}`"),
        )),
        Some(Value::String(k)) if k == KIND => {}
        Some(Value::String(k)) => {
            if !k.eq_ignore_ascii_case(KIND) {
                // Another kind of document altogether: its apiVersion is beside the point.
                errors.clear();
            }
            errors.push(FieldError::new("kind", kind_reason(k)));
        }
        Some(other) => errors.push(FieldError::new(
            "kind",
            format!("expected the string {KIND:?}, got {}", describe(other)),
        )),
    }
    match version {
        Some(v) if errors.is_empty() => Ok(v),
        _ => Err(errors),
    }
}

fn kind_reason(kind: &str) -> String {
    if kind.eq_ignore_ascii_case(KIND) {
        return format!("unknown kind {kind:?}: kinds are case-sensitive, write `kind: {KIND}`");
    }
    match kind {
        "Policy" => format!(
            "unknown kind \"Policy\": the scheduler Policy API (predicates and priorities) was removed in Kubernetes 1.23; write a `kind: {KIND}` whose profiles[i].plugins enable the equivalent plugins"
        ),
        "ConfigMap" => format!(
            "this file is a ConfigMap, not a {KIND}: validate the configuration it holds (the value under data, e.g. data.\"config.yaml\")"
        ),
        "SchedulerProfile" => format!(
            "this file is a ksched SchedulerProfile, not a {KIND}: `ksched render -f FILE` prints the {KIND} rendered from it"
        ),
        _ => {
            let hint = suggest(kind, &[KIND, "KubeSchedulerConfig"])
                .map_or(String::new(), |_| " (misspelled?)".to_string());
            format!(
                "unknown kind {kind:?}{hint}: a scheduler configuration file has `kind: {KIND}`"
            )
        }
    }
}

/// `kubescheduler.config.k8s.io/<version>` -> the version, or a reason naming the valid apiVersions.
pub(crate) fn parse_api_version(s: &str) -> Result<ApiVersion, String> {
    let valid = format!("use `apiVersion: {API_VERSION_V1}` ({READABLE_VERSIONS})");
    let (group, version) = match s.split_once('/') {
        Some((g, v)) => (g, v),
        None => {
            if ApiVersion::from_version(s).is_some() || s.starts_with('v') && s.len() <= 8 {
                return Err(format!(
                    "unknown apiVersion {s:?}: the API group is missing, write `apiVersion: {GROUP}/{s}`"
                ));
            }
            if let Some(rest) = s.strip_prefix(GROUP).and_then(|r| r.strip_prefix('.'))
                && ApiVersion::from_version(rest).is_some()
            {
                return Err(format!(
                    "unknown apiVersion {s:?}: the version is separated from the group by `/`, not `.`: write `apiVersion: {GROUP}/{rest}`"
                ));
            }
            return Err(format!(
                "unknown apiVersion {s:?}: a KubeSchedulerConfiguration apiVersion is `{GROUP}/<version>`; {valid}"
            ));
        }
    };
    if group == GROUP {
        if let Some(v) = ApiVersion::from_version(version) {
            return Ok(v);
        }
        return Err(match version {
            "v1alpha1" | "v1alpha2" => format!(
                "apiVersion {s:?} is no longer readable (the alpha versions were removed in Kubernetes 1.19 and 1.21, and their fields differ): rewrite the file as `apiVersion: {API_VERSION_V1}`"
            ),
            _ => format!("unknown version {version:?} of {GROUP}: {valid}"),
        });
    }
    let misspelled = if suggest(group, &[GROUP]).is_some()
        || group.contains("scheduler")
        || group.contains("kube-scheduler")
    {
        format!(" ({group:?} is not the KubeSchedulerConfiguration API group, which is {GROUP:?})")
    } else {
        format!(" (the KubeSchedulerConfiguration API group is {GROUP:?})")
    };
    Err(format!("unknown apiVersion {s:?}{misspelled}: {valid}"))
}

/// The closest candidate within a small edit distance (case-insensitive), if any.
pub(crate) fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let max = match word.chars().count() {
        0..=3 => 0,
        4..=7 => 1,
        8..=12 => 2,
        _ => 3,
    };
    candidates
        .iter()
        .map(|c| (levenshtein(&lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= max)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Where in the document a mapping sits, for field lists and hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Top,
    LeaderElection,
    ClientConnection,
    Profile,
    Plugins,
    PluginSet,
    Plugin,
    PluginConfig,
    Extender,
    TlsConfig,
    ManagedResource,
}

const TOP_LEVEL_ONLY: [&str; 11] = [
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "extenders",
    "delayCacheUntilActive",
    "healthzBindAddress",
    "metricsBindAddress",
];
const LEADER_ELECTION_FIELDS: [&str; 7] = [
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
];
const CLIENT_CONNECTION_FIELDS: [&str; 5] = [
    "kubeconfig",
    "acceptContentTypes",
    "contentType",
    "qps",
    "burst",
];

fn point_from_field(name: &str) -> Option<ExtensionPoint> {
    ExtensionPoint::ALL
        .into_iter()
        .find(|p| p.field_name() == name)
}

fn is_point_like(key: &str) -> bool {
    point_from_field(key).is_some()
        || matches!(
            key,
            "multiPoint"
                | "unreserve"
                | "placementGenerate"
                | "placementScore"
                | "podGroupPostFilter"
                | "normalizeScore"
        )
}

/// `plugins` fields of v1 that a Kubernetes minor added: kube-scheduler of an older minor calls
/// them unknown.
const PLUGINS_FIELDS_SINCE: &[(&str, Minor)] = &[("podGroupPostFilter", Minor::V1_37)];

fn allowed_fields(ctx: Ctx, version: ApiVersion, minor: Minor) -> Vec<&'static str> {
    match ctx {
        Ctx::Top => {
            let mut f = vec![
                "apiVersion",
                "kind",
                "parallelism",
                "leaderElection",
                "clientConnection",
                "enableProfiling",
                "enableContentionProfiling",
                "percentageOfNodesToScore",
                "podInitialBackoffSeconds",
                "podMaxBackoffSeconds",
                "profiles",
                "extenders",
                "healthzBindAddress",
                "metricsBindAddress",
            ];
            if version >= ApiVersion::V1Beta3 {
                f.push("delayCacheUntilActive");
            }
            if version == ApiVersion::V1Beta1 {
                f.push("disablePreemption");
            }
            f
        }
        Ctx::LeaderElection => LEADER_ELECTION_FIELDS.to_vec(),
        Ctx::ClientConnection => CLIENT_CONNECTION_FIELDS.to_vec(),
        Ctx::Profile => {
            let mut f = vec!["schedulerName", "plugins", "pluginConfig"];
            if version == ApiVersion::V1 {
                f.push("percentageOfNodesToScore");
            }
            f
        }
        Ctx::Plugins => {
            let mut f: Vec<&'static str> = ExtensionPoint::ALL
                .into_iter()
                .filter(|p| *p != ExtensionPoint::PreEnqueue || version >= ApiVersion::V1Beta3)
                .map(ExtensionPoint::field_name)
                .collect();
            if version >= ApiVersion::V1Beta3 {
                f.push("multiPoint");
            }
            if version == ApiVersion::V1 {
                f.push("placementGenerate");
                f.push("placementScore");
                f.extend(
                    PLUGINS_FIELDS_SINCE
                        .iter()
                        .filter(|(_, since)| minor >= *since)
                        .map(|(field, _)| *field),
                );
            }
            if version == ApiVersion::V1Beta1 {
                f.push("unreserve");
            }
            f
        }
        Ctx::PluginSet => vec!["enabled", "disabled"],
        Ctx::Plugin => vec!["name", "weight"],
        Ctx::PluginConfig => vec!["name", "args"],
        Ctx::Extender => vec![
            "urlPrefix",
            "filterVerb",
            "preemptVerb",
            "prioritizeVerb",
            "weight",
            "bindVerb",
            "enableHTTPS",
            "tlsConfig",
            "httpTimeout",
            "nodeCacheCapable",
            "managedResources",
            "ignorable",
        ],
        Ctx::TlsConfig => vec![
            "insecure",
            "serverName",
            "certFile",
            "keyFile",
            "caFile",
            "certData",
            "keyData",
            "caData",
        ],
        Ctx::ManagedResource => vec!["name", "ignoredByScheduler"],
    }
}

/// Why `key` is not allowed here and where it belongs, when we can tell.
fn misplaced_hint(
    ctx: Ctx,
    key: &str,
    version: ApiVersion,
    minor: Minor,
    parent: &str,
) -> Option<String> {
    if ctx == Ctx::Plugins
        && let Some((_, since)) = PLUGINS_FIELDS_SINCE.iter().find(|(f, _)| *f == key)
        && minor < *since
    {
        return Some(format!(
            "`{key}` exists from Kubernetes {since} on, and this scheduler emulates {minor} (kube-scheduler {minor} does not know it either): remove it, or emulate {since} or later"
        ));
    }
    let v1 = API_VERSION_V1;
    let ver = version.api_version();
    match ctx {
        Ctx::Top => match key {
            "schedulerName" | "plugins" | "pluginConfig" => Some(format!(
                "`{key}` belongs under `profiles[i]`, not at the top level: `profiles: [{{schedulerName: ..., plugins: ..., pluginConfig: ...}}]`"
            )),
            k if LEADER_ELECTION_FIELDS.contains(&k) => Some(format!(
                "`{key}` belongs under `leaderElection` (`leaderElection.{key}`), not at the top level"
            )),
            "lockObjectName" | "lockObjectNamespace" => Some(format!(
                "`{key}` was renamed: use `leaderElection.{}`",
                if key == "lockObjectName" { "resourceName" } else { "resourceNamespace" }
            )),
            k if CLIENT_CONNECTION_FIELDS.contains(&k) => Some(format!(
                "`{key}` belongs under `clientConnection` (`clientConnection.{key}`), not at the top level"
            )),
            "disablePreemption" => Some(format!(
                "`disablePreemption` does not exist in {ver}: disable the DefaultPreemption plugin instead, `profiles[i].plugins.postFilter.disabled: [{{name: DefaultPreemption}}]`"
            )),
            "featureGates" => Some(
                "`featureGates` is not part of KubeSchedulerConfiguration: pass feature gates on the command line (--feature-gates)".to_string(),
            ),
            "algorithmSource" => Some(
                "`algorithmSource` (the Policy API) was removed in Kubernetes 1.23: enable the equivalent plugins in `profiles[i].plugins`".to_string(),
            ),
            "hardPodAffinitySymmetricWeight" => Some(
                "`hardPodAffinitySymmetricWeight` moved to the InterPodAffinity plugin args: `profiles[i].pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: N}}]`".to_string(),
            ),
            "bindTimeoutSeconds" => Some(
                "`bindTimeoutSeconds` moved to the VolumeBinding plugin args: `profiles[i].pluginConfig: [{name: VolumeBinding, args: {bindTimeoutSeconds: N}}]`".to_string(),
            ),
            "delayCacheUntilActive" => Some(format!(
                "`delayCacheUntilActive` does not exist in {ver}: move the file to `apiVersion: {v1}`"
            )),
            "metadata" | "spec" | "data" | "status" => Some(format!(
                "a {KIND} has no `{key}`: if this file is a ConfigMap or a SchedulerProfile, validate the {KIND} it holds"
            )),
            "profile" => Some("did you mean `profiles` (a list of profiles)?".to_string()),
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point of a profile: `profiles[i].plugins.<extensionPoint>.{key}`"
            )),
            "args" => Some("`args` belongs in a pluginConfig entry: `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` belongs under `profiles[i].plugins` (`profiles[i].plugins.{key}`), not at the top level"
            )),
            _ => None,
        },
        Ctx::Profile => match key {
            "leaderElect" => Some(format!(
                "`leaderElect` belongs under `leaderElection` at the top level of the {KIND} (`leaderElection.leaderElect`), not under {parent}: leader election is per scheduler process, not per profile"
            )),
            k if TOP_LEVEL_ONLY.contains(&k) => Some(format!(
                "`{key}` belongs at the top level of the {KIND}, not under {parent}: it applies to the whole scheduler process, not to one profile"
            )),
            "percentageOfNodesToScore" => Some(format!(
                "a per-profile `percentageOfNodesToScore` exists only in {v1}: set it at the top level, or move the file to `apiVersion: {v1}`"
            )),
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point: `{parent}.plugins.<extensionPoint>.{key}`"
            )),
            "args" => Some(format!("`args` belongs in a pluginConfig entry: `{parent}.pluginConfig: [{{name: <plugin>, args: {{...}}}}]`")),
            "name" => Some("did you mean `schedulerName`?".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` belongs under `{parent}.plugins` (`{parent}.plugins.{key}`)"
            )),
            _ => None,
        },
        Ctx::Plugins => match key {
            "enabled" | "disabled" => Some(format!(
                "`{key}` belongs under an extension point (`{parent}.<extensionPoint>.{key}`, e.g. `{parent}.score.{key}`), or under `{parent}.multiPoint.{key}` for every extension point the plugin implements"
            )),
            "pluginConfig" | "args" => Some(format!(
                "`{key}` belongs beside `plugins`, not inside it: `profiles[i].pluginConfig: [{{name: <plugin>, args: {{...}}}}]`"
            )),
            "unreserve" => Some(
                "`unreserve` was merged into `reserve` (a reserve plugin also unreserves): move these plugins to `reserve`".to_string(),
            ),
            "normalizeScore" => Some("`normalizeScore` is part of `score`: configure the plugin under `score`".to_string()),
            "multiPoint" | "preEnqueue" => Some(format!(
                "`{key}` does not exist in {ver} (it was added in v1beta3): move the file to `apiVersion: {v1}`"
            )),
            "placementGenerate" | "placementScore" | "podGroupPostFilter" => Some(format!(
                "`{key}` does not exist in {ver}: it exists only in {v1}"
            )),
            k if k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) => Some(format!(
                "plugins are listed under an extension point, not by name: `{parent}.<extensionPoint>.enabled: [{{name: {key}}}]` (or `{parent}.multiPoint.enabled` for all its extension points)"
            )),
            _ => None,
        },
        Ctx::PluginSet => match key {
            "name" | "weight" => Some(format!(
                "list plugins as entries of `enabled` or `disabled`: `{parent}.enabled: [{{name: ..., weight: ...}}]`"
            )),
            "args" => Some("plugin args belong in `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string()),
            k if is_point_like(k) => Some(format!(
                "`{key}` is an extension point: it belongs beside this one under `plugins`, not inside it"
            )),
            _ => None,
        },
        Ctx::Plugin => match key {
            "args" => Some(
                "plugin args do not go in the plugin list: put them in `profiles[i].pluginConfig: [{name: <plugin>, args: {...}}]`".to_string(),
            ),
            _ => None,
        },
        Ctx::PluginConfig => Some(format!(
            "a pluginConfig entry has only `name` and `args`: if `{key}` is an argument of the plugin, put it under args (`{parent}.args.{key}`)"
        )),
        Ctx::LeaderElection => match key {
            "lockObjectName" => Some("`lockObjectName` was renamed: use `resourceName`".to_string()),
            "lockObjectNamespace" => Some("`lockObjectNamespace` was renamed: use `resourceNamespace`".to_string()),
            _ => None,
        },
        _ => None,
    }
}

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
                "placementGenerate" => plugins.placement_generate = set,
                "placementScore" => plugins.placement_score = set,
                "podGroupPostFilter" => plugins.pod_group_post_filter = set,
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

/// Decodes the whole file: the document (converted to v1 types) or every error found.
/// Decodes a document strictly, with the fields of the emulated `minor`.
pub(crate) fn decode(bytes: &[u8], minor: Minor) -> Result<Decoded, Vec<FieldError>> {
    let map = parse_document(bytes).map_err(|e| vec![e])?;
    let version = check_type_meta(&map)?;
    let mut walker = Walker {
        version,
        minor,
        errors: Vec::new(),
    };
    let decoded = walker.top(&map);
    if walker.errors.is_empty() {
        Ok(decoded)
    } else {
        Err(walker.errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_str(s: &str) -> Result<Decoded, Vec<FieldError>> {
        decode(s.as_bytes(), Minor::NEWEST)
    }

    fn only_error(s: &str) -> FieldError {
        let errs = decode_str(s).expect_err("should fail");
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs.into_iter().next().expect("one error")
    }

    #[test]
    fn api_versions() {
        assert_eq!(
            parse_api_version("kubescheduler.config.k8s.io/v1"),
            Ok(ApiVersion::V1)
        );
        assert_eq!(
            parse_api_version("kubescheduler.config.k8s.io/v1beta1"),
            Ok(ApiVersion::V1Beta1)
        );
        let e = parse_api_version("kube-scheduler.k8s.io/v1").expect_err("bad group");
        assert!(
            e.contains("\"kube-scheduler.k8s.io\" is not the KubeSchedulerConfiguration API group"),
            "{e}"
        );
        assert!(e.contains("kubescheduler.config.k8s.io/v1"), "{e}");
        let e = parse_api_version("kubescheduler.config.k8s.io.v1").expect_err("dot");
        assert!(e.contains("separated from the group by `/`"), "{e}");
        let e = parse_api_version("kubescheduler.k8s.io/v1").expect_err("bad group");
        assert!(
            e.contains("not the KubeSchedulerConfiguration API group"),
            "{e}"
        );
        let e = parse_api_version("v1").expect_err("no group");
        assert!(e.contains("group is missing"), "{e}");
        let e = parse_api_version("kubescheduler.config.k8s.io/v1alpha1").expect_err("alpha");
        assert!(e.contains("no longer readable"), "{e}");
        let e = parse_api_version("kubescheduler.config.k8s.io/v2").expect_err("v2");
        assert!(e.contains("unknown version"), "{e}");
    }

    #[test]
    fn kind_errors() {
        let e =
            only_error("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfig\n");
        assert_eq!(e.path, "kind");
        assert!(e.reason.contains("kind: KubeSchedulerConfiguration"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: kubeschedulerconfiguration\n",
        );
        assert!(e.reason.contains("case-sensitive"), "{e}");
        let e = only_error("apiVersion: kubescheduler.config.k8s.io/v1\n");
        assert_eq!(e.path, "kind");
        assert!(e.reason.starts_with("required"), "{e}");
        let e = only_error("apiVersion: v1\nkind: ConfigMap\ndata: {}\n");
        assert_eq!(e.path, "kind");
        assert!(e.reason.contains("is a ConfigMap"), "{e}");
    }

    #[test]
    fn garbage_inputs_are_clean_errors() {
        for input in [
            &b""[..],
            b"   \n# only a comment\n",
            b"---\n",
            b"\xff\xfe\x00binary",
            b"- a\n- b\n",
            b"just a string",
            b"42",
            b"{\"apiVersion\": ",
            b"a: [\n",
            b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n---\napiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
        ] {
            let errs = decode(input, Minor::NEWEST).expect_err("must fail");
            assert!(!errs.is_empty());
            assert!(errs.iter().all(|e| !e.reason.is_empty()));
        }
        let e = only_error("");
        assert!(e.reason.contains("empty"), "{e}");
        let e = only_error("- a\n");
        assert!(e.reason.contains("got a list"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n---\nkind: x\n",
        );
        assert!(e.reason.contains("2 YAML documents"), "{e}");
    }

    #[test]
    fn json_is_read() {
        let d = decode_str(r#"{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", "parallelism": 8}"#)
            .expect("json");
        assert_eq!(d.doc.parallelism, Some(8));
    }

    #[test]
    fn type_errors_name_path_and_type() {
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nparallelism: \"16\"\n",
        );
        assert_eq!(e.path, "parallelism");
        assert!(
            e.reason.contains("expected an integer (int32)")
                && e.reason.contains("remove the quotes"),
            "{e}"
        );
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaseDuration: 15\n",
        );
        assert_eq!(e.path, "leaderElection.leaseDuration");
        assert!(e.reason.contains("duration"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n  plugins:\n    score:\n      enabled:\n      - name: X\n        weight: high\n",
        );
        assert_eq!(e.path, "profiles[0].plugins.score.enabled[0].weight");
        assert!(e.reason.contains("expected an integer (int32)"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nparallelism: 99999999999\n",
        );
        assert!(e.reason.contains("out of range"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n  schedulerName: a\n",
        );
        assert_eq!(e.path, "profiles");
        assert!(e.reason.contains("expected a list"), "{e}");
    }

    #[test]
    fn misplaced_fields_say_where_they_belong() {
        let base = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
        let cases = [
            (
                "pluginConfig: []\n",
                "pluginConfig",
                "belongs under `profiles[i]`, not at the top level",
            ),
            ("plugins: {}\n", "plugins", "belongs under `profiles[i]`"),
            (
                "schedulerName: x\n",
                "schedulerName",
                "belongs under `profiles[i]`",
            ),
            (
                "leaderElect: true\n",
                "leaderElect",
                "belongs under `leaderElection`",
            ),
            ("qps: 5\n", "qps", "belongs under `clientConnection`"),
            (
                "profiles:\n- leaderElection: {leaderElect: true}\n",
                "profiles[0].leaderElection",
                "belongs at the top level",
            ),
            (
                "profiles:\n- score: {}\n",
                "profiles[0].score",
                "belongs under `profiles[0].plugins`",
            ),
            (
                "profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    bindTimeoutSeconds: 5\n",
                "profiles[0].pluginConfig[0].bindTimeoutSeconds",
                "put it under args (`profiles[0].pluginConfig[0].args.bindTimeoutSeconds`)",
            ),
            (
                "profiles:\n- plugins:\n    enabled: []\n",
                "profiles[0].plugins.enabled",
                "belongs under an extension point",
            ),
            (
                "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: A\n        args: {}\n",
                "profiles[0].plugins.score.enabled[0].args",
                "pluginConfig",
            ),
            (
                "profiles:\n- plugins:\n    unreserve: {}\n",
                "profiles[0].plugins.unreserve",
                "merged into `reserve`",
            ),
            (
                "leaderElection:\n  leaseDurtion: 15s\n",
                "leaderElection.leaseDurtion",
                "did you mean `leaseDuration`?",
            ),
            (
                "percentageOfNodeToScore: 5\n",
                "percentageOfNodeToScore",
                "did you mean `percentageOfNodesToScore`?",
            ),
            ("healthz: x\n", "healthz", "the fields here are"),
        ];
        for (extra, path, needle) in cases {
            let e = only_error(&format!("{base}{extra}"));
            assert_eq!(e.path, path, "{extra}");
            assert!(e.reason.contains(needle), "{extra}: {e}");
        }
    }

    #[test]
    fn version_specific_fields() {
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    multiPoint: {}\n",
        );
        assert!(e.reason.contains("added in v1beta3"), "{e}");
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\nprofiles:\n- percentageOfNodesToScore: 5\n",
        );
        assert!(
            e.reason
                .contains("exists only in kubescheduler.config.k8s.io/v1"),
            "{e}"
        );
        let d = decode_str(
            "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\ndisablePreemption: true\nprofiles:\n- plugins:\n    unreserve:\n      enabled: [{name: X}]\n",
        )
        .expect("v1beta1 specifics");
        assert_eq!(d.disable_preemption, Some(true));
        assert_eq!(d.unreserve.len(), 1);
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\ndisablePreemption: true\n",
        );
        assert!(e.reason.contains("DefaultPreemption"), "{e}");
    }

    #[test]
    fn bare_string_plugin_entry() {
        let e = only_error(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    filter:\n      enabled: [VolumeBinding]\n",
        );
        assert_eq!(e.path, "profiles[0].plugins.filter.enabled[0]");
        assert!(e.reason.contains("- name: VolumeBinding"), "{e}");
    }

    #[test]
    fn base64_check() {
        assert!(is_base64(""));
        assert!(is_base64("YWJj"));
        assert!(is_base64("YWI="));
        assert!(!is_base64("YWI"));
        assert!(!is_base64("Y*I="));
    }
}
