//! Strict decoding of plugin args: unknown or mistyped fields are errors with the field's path,
//! defaults are filled, and the plugin's validation runs (upstream's `ValidateXxxArgs`).
//!
//! A plugin's args type implements [`PluginArgs`]; its registry entry uses [`decode::<T>`] as the
//! decoder and [`typed`] in its factory to read the normalized JSON back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::FieldError;
use crate::config::error::join_path;
use crate::emulation::Emulation;

/// A plugin's args type: `#[serde(deny_unknown_fields, rename_all = "camelCase", default)]`.
pub trait PluginArgs: DeserializeOwned + Serialize + Default {
    /// The `kind` a configuration may name for these args (`NodeResourcesFitArgs`).
    const KIND: &'static str;

    /// Fills defaults that depend on what was given (serde's `default` covers the rest).
    fn set_defaults(&mut self) {}

    /// Upstream's `ValidateXxxArgs`: errors with paths relative to the args.
    fn validate(&self) -> Vec<FieldError> {
        Vec::new()
    }

    /// Defaults that depend on the emulated minor's feature gates, as some of upstream's
    /// `SetDefaults_XxxArgs` do; [`set_defaults`](Self::set_defaults) unless overridden. Used by
    /// registrations with [`PluginRegistration::with_emulated_args`](super::registry::PluginRegistration::with_emulated_args).
    fn set_defaults_at(&mut self, _emulation: &Emulation) {
        self.set_defaults();
    }

    /// Validation that depends on the emulated minor's feature gates;
    /// [`validate`](Self::validate) unless overridden.
    fn validate_at(&self, _emulation: &Emulation) -> Vec<FieldError> {
        self.validate()
    }
}

/// Decodes, defaults and validates `args` as `T`, returning the normalized JSON (at the newest
/// minor: [`decode_at`] for another).
pub fn decode<T: PluginArgs>(args: Option<&Value>) -> Result<Value, Vec<FieldError>> {
    decode_at::<T>(args, &Emulation::default())
}

/// [`decode`] with the defaults and validation of `emulation`'s minor and gates.
pub fn decode_at<T: PluginArgs>(
    args: Option<&Value>,
    emulation: &Emulation,
) -> Result<Value, Vec<FieldError>> {
    let mut v: T = match args {
        None | Some(Value::Null) => T::default(),
        Some(Value::Object(map)) => {
            let mut map = map.clone();
            check_type_meta::<T>(&mut map)?;
            from_value(Value::Object(map))?
        }
        Some(other) => {
            return Err(vec![FieldError::new(
                "",
                format!("Invalid value: {other}: args must be an object"),
            )]);
        }
    };
    v.set_defaults_at(emulation);
    let errors = v.validate_at(emulation);
    if !errors.is_empty() {
        return Err(errors);
    }
    serde_json::to_value(&v).map_err(|e| vec![FieldError::new("", format!("Internal error: {e}"))])
}

/// For plugins without args: nothing (or an empty object) decodes to `null`; anything else is an
/// error.
pub fn no_args(args: Option<&Value>) -> Result<Value, Vec<FieldError>> {
    match args {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(Value::Object(m)) if m.keys().all(|k| k == "apiVersion" || k == "kind") => {
            Ok(Value::Null)
        }
        Some(_) => Err(vec![FieldError::new(
            "",
            "Invalid value: this plugin takes no args",
        )]),
    }
}

/// `apiVersion` and `kind` may accompany args; `kind`, when present, must be `T::KIND`.
fn check_type_meta<T: PluginArgs>(
    map: &mut serde_json::Map<String, Value>,
) -> Result<(), Vec<FieldError>> {
    map.remove("apiVersion");
    if let Some(kind) = map.remove("kind")
        && kind.as_str() != Some(T::KIND)
    {
        return Err(vec![FieldError::new(
            "kind",
            format!(
                "Invalid value: {kind}: must be \"{}\" for this plugin's args",
                T::KIND
            ),
        )]);
    }
    Ok(())
}

/// Deserializes with the path of the failing field.
fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, Vec<FieldError>> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let msg = e.inner().to_string();
        // serde reports an unknown field at its parent: name the field itself.
        if let Some(rest) = msg.strip_prefix("unknown field `")
            && let Some(end) = rest.find('`')
        {
            let field = &rest[..end];
            let already_named = path == field || path.ends_with(&format!(".{field}"));
            let path = if already_named {
                path
            } else {
                join_path(&path, field)
            };
            return vec![FieldError::new(path, format!("Unsupported field: {msg}"))];
        }
        vec![FieldError::new(path, format!("Invalid value: {msg}"))]
    })
}

/// Reads normalized args back into `T` (for factories: `?` makes the error a
/// [`PluginError::Args`](super::registry::PluginError::Args)).
pub fn typed<T: DeserializeOwned + Default>(args: &Value) -> Result<T, serde_json::Error> {
    if args.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(args.clone())
}

// --- helpers for validation messages in upstream's field.Error format ---

pub fn invalid(path: impl Into<String>, value: impl std::fmt::Display, detail: &str) -> FieldError {
    FieldError::new(path, format!("Invalid value: {value}: {detail}"))
}

pub fn not_supported(path: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    FieldError::new(
        path,
        format!(
            "Unsupported value: \"{value}\": supported values: {}",
            list.join(", ")
        ),
    )
}

pub fn required(path: impl Into<String>, detail: &str) -> FieldError {
    FieldError::new(path, format!("Required value: {detail}"))
}

pub fn duplicate(path: impl Into<String>, value: impl std::fmt::Display) -> FieldError {
    FieldError::new(path, format!("Duplicate value: {value}"))
}

pub fn forbidden(path: impl Into<String>, detail: &str) -> FieldError {
    FieldError::new(path, format!("Forbidden: {detail}"))
}

/// Upstream's `UtilizationShapePoint` (RequestedToCapacityRatio and VolumeBinding shapes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UtilizationShapePoint {
    pub utilization: i32,
    pub score: i32,
}

/// Upstream's `validateFunctionShape`: utilization in 0..=100 strictly increasing, score in
/// 0..=`max_score`, at least one point.
pub fn validate_shape(
    shape: &[UtilizationShapePoint],
    path: &str,
    max_score: i32,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if shape.is_empty() {
        errs.push(required(path, "at least one point must be specified"));
        return errs;
    }
    for i in 1..shape.len() {
        if shape[i - 1].utilization >= shape[i].utilization {
            errs.push(invalid(
                format!("{path}[{i}].utilization"),
                shape[i].utilization,
                "utilization values must be sorted in increasing order",
            ));
            break;
        }
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            errs.push(invalid(
                format!("{path}[{i}].utilization"),
                p.utilization,
                "not in valid range [0, 100]",
            ));
        }
        if !(0..=max_score).contains(&p.score) {
            errs.push(invalid(
                format!("{path}[{i}].score"),
                p.score,
                &format!("not in valid range [0, {max_score}]"),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase", default)]
    struct Inner {
        weight: i64,
    }

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase", default)]
    struct TestArgs {
        timeout_seconds: i64,
        items: Vec<Inner>,
    }

    impl PluginArgs for TestArgs {
        const KIND: &'static str = "TestArgs";
        fn set_defaults(&mut self) {
            if self.timeout_seconds == 0 {
                self.timeout_seconds = 600;
            }
        }
        fn validate(&self) -> Vec<FieldError> {
            if self.timeout_seconds < 0 {
                return vec![invalid(
                    "timeoutSeconds",
                    self.timeout_seconds,
                    "must not be negative",
                )];
            }
            Vec::new()
        }
    }

    #[test]
    fn decode_defaults_and_errors() {
        assert_eq!(
            decode::<TestArgs>(None),
            Ok(json!({"timeoutSeconds": 600, "items": []}))
        );
        assert_eq!(
            decode::<TestArgs>(Some(
                &json!({"kind": "TestArgs", "apiVersion": "x/v1", "timeoutSeconds": 5})
            )),
            Ok(json!({"timeoutSeconds": 5, "items": []}))
        );
        let e = decode::<TestArgs>(Some(&json!({"timeoutSecond": 5}))).unwrap_err();
        assert_eq!(e[0].path, "timeoutSecond");
        assert!(
            e[0].reason
                .starts_with("Unsupported field: unknown field `timeoutSecond`"),
            "{}",
            e[0].reason
        );
        let e = decode::<TestArgs>(Some(&json!({"items": [{"weight": 1}, {"weigth": 2}]})))
            .unwrap_err();
        assert_eq!(e[0].path, "items[1].weigth");
        let e = decode::<TestArgs>(Some(&json!({"items": [{"weight": "x"}]}))).unwrap_err();
        assert_eq!(e[0].path, "items[0].weight");
        assert!(e[0].reason.contains("invalid type"), "{}", e[0].reason);
        let e = decode::<TestArgs>(Some(&json!({"timeoutSeconds": -1}))).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "timeoutSeconds: Invalid value: -1: must not be negative"
        );
        let e = decode::<TestArgs>(Some(&json!({"kind": "OtherArgs"}))).unwrap_err();
        assert_eq!(e[0].path, "kind");
        assert!(decode::<TestArgs>(Some(&json!([1]))).is_err());
    }

    #[test]
    fn no_args_plugins() {
        assert_eq!(no_args(None), Ok(Value::Null));
        assert_eq!(no_args(Some(&json!({}))), Ok(Value::Null));
        assert!(no_args(Some(&json!({"x": 1}))).is_err());
    }

    #[test]
    fn shapes() {
        let p = |u, s| UtilizationShapePoint {
            utilization: u,
            score: s,
        };
        assert!(validate_shape(&[p(0, 0), p(100, 10)], "shape", 10).is_empty());
        assert_eq!(validate_shape(&[], "shape", 10)[0].path, "shape");
        assert_eq!(
            validate_shape(&[p(50, 0), p(10, 1)], "shape", 10)[0].path,
            "shape[1].utilization"
        );
        assert_eq!(
            validate_shape(&[p(0, 11)], "shape", 10)[0].path,
            "shape[0].score"
        );
        assert_eq!(
            validate_shape(&[p(101, 1)], "shape", 10)[0].path,
            "shape[0].utilization"
        );
    }
}
