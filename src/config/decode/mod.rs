//! Strict decoding of a `KubeSchedulerConfiguration` file: any bytes in, either the document as
//! written (in v1 types, whatever version it was written in) or field errors that say what to change.
//!
//! Decoding walks a generic YAML/JSON tree by hand instead of deriving it, so every error carries
//! the full field path, the expected type, and — for fields placed at the wrong level, misspelled, or
//! from another API version — where the field belongs.
//!
//! This module reads the document and its type meta (`apiVersion`, `kind`) and holds the entry
//! point [`decode`]; `walker` walks the document's fields into the v1 types, with the fields each
//! mapping may hold and the hints for misplaced ones in `fields`.

mod fields;
mod walker;

use serde_json::{Map, Value};

use super::error::FieldError;
use super::types::{
    API_VERSION_V1, ApiVersion, GROUP, KIND, KubeSchedulerConfiguration, PluginSet,
};
use crate::emulation::Minor;
use walker::Walker;

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

/// ` (did you mean X?)` with the closest candidate, or nothing when none is close: the one wording
/// of every "unknown name" message (plugins, scheduler names).
pub(crate) fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    suggest(word, candidates).map_or(String::new(), |s| format!(" (did you mean {s}?)"))
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
}
