//! What the API server does to a custom resource before it stores it, offline: the CRD's own
//! structural schema (defaults, unknown fields, types, formats, enums, bounds, patterns, required
//! fields) and its CEL rules (`x-kubernetes-validations`, evaluated with the `cel` crate), read
//! from the CRDs this crate generates ([`super::crds`]), so `ksched render` refuses what
//! `kubectl apply` would, with the API server's field paths.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Program};
use serde_json::{Map, Value};

use crate::config::FieldError;
use crate::config::error::join_path;
use crate::config::suggest;

/// The openAPIV3Schema of each kind ksched installs, from the generated CRDs.
static SCHEMAS: LazyLock<HashMap<String, Value>> = LazyLock::new(|| {
    super::crds()
        .into_iter()
        .filter_map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let version = crd.spec.versions.into_iter().find(|v| v.storage)?;
            let schema = version.schema?.open_api_v3_schema?;
            Some((kind, serde_json::to_value(schema).ok()?))
        })
        .collect()
});

static CEL: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// Validates `object` (a whole resource: apiVersion, kind, metadata, spec) against the CRD of
/// `kind` as the API server would, after filling in the schema's defaults (also into `object`).
/// Every problem, each with the field's path and the API server's wording.
pub(crate) fn validate(kind: &str, object: &mut Value) -> Result<(), Vec<FieldError>> {
    let Some(schema) = SCHEMAS.get(kind) else {
        return Err(vec![FieldError::new(
            "kind",
            format!("Unsupported value: {kind:?}: ksched has no CRD of that kind"),
        )]);
    };
    let mut v = Validator { errors: Vec::new() };
    v.node(schema, object, "", true);
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

struct Validator {
    errors: Vec<FieldError>,
}

impl Validator {
    fn err(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(path, reason));
    }

    /// Checks `value` at `path` against `schema`, then the CEL rules of `schema` when nothing
    /// below failed (a rule over a mistyped value would only report that again, less clearly).
    fn node(&mut self, schema: &Value, value: &mut Value, path: &str, root: bool) {
        prune_null(schema, value);
        defaults(schema, value);
        let before = self.errors.len();
        self.shape(schema, value, path, root);
        if self.errors.len() == before {
            self.rules(schema, value, path, root);
        }
    }

    /// Type, format, enum, bounds and pattern of `value`, and the same for what it contains.
    fn shape(&mut self, schema: &Value, value: &mut Value, path: &str, root: bool) {
        let int_or_string = schema["x-kubernetes-int-or-string"] == true;
        let want = schema["type"].as_str().unwrap_or("");
        let type_ok = match (want, &*value) {
            _ if int_or_string => value.is_string() || value.is_i64() || value.is_u64(),
            ("", _) => true,
            ("object", Value::Object(_))
            | ("array", Value::Array(_))
            | ("string", Value::String(_))
            | ("boolean", Value::Bool(_))
            | ("number", Value::Number(_)) => true,
            ("integer", Value::Number(n)) => n.is_i64() || n.is_u64(),
            _ => false,
        };
        if !type_ok {
            let want = if int_or_string {
                "integer or string"
            } else {
                want
            };
            self.err(
                path,
                format!(
                    "Invalid value: {}: must be of type {want}",
                    shown(value, true)
                ),
            );
            return;
        }
        if let Some(allowed) = schema["enum"].as_array()
            && !allowed.contains(value)
        {
            let list: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
            self.err(
                path,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    value,
                    list.join(", ")
                ),
            );
        }
        match value {
            Value::Number(n) => self.number(schema, n, path),
            Value::String(s) => self.string(schema, s, path),
            Value::Array(items) => self.array(schema, items, path),
            Value::Object(map) => self.object(schema, map, path, root),
            _ => {}
        }
    }

    fn number(&mut self, schema: &Value, n: &serde_json::Number, path: &str) {
        let Some(x) = n.as_f64() else { return };
        if schema["format"] == "int32" && (x < f64::from(i32::MIN) || x > f64::from(i32::MAX)) {
            self.err(
                path,
                format!("Invalid value: {n}: must fit a 32-bit integer"),
            );
        }
        if let Some(min) = schema["minimum"].as_f64() {
            let exclusive = schema["exclusiveMinimum"] == true;
            if x < min || (exclusive && x == min) {
                let than = if exclusive { "" } else { " or equal to" };
                self.err(
                    path,
                    format!(
                        "Invalid value: {n}: should be greater than{than} {}",
                        number(min)
                    ),
                );
            }
        }
        if let Some(max) = schema["maximum"].as_f64() {
            let exclusive = schema["exclusiveMaximum"] == true;
            if x > max || (exclusive && x == max) {
                let than = if exclusive { "" } else { " or equal to" };
                self.err(
                    path,
                    format!(
                        "Invalid value: {n}: should be less than{than} {}",
                        number(max)
                    ),
                );
            }
        }
    }

    fn string(&mut self, schema: &Value, s: &str, path: &str) {
        let chars = s.chars().count() as u64;
        if let Some(min) = schema["minLength"].as_u64()
            && chars < min
        {
            self.err(
                path,
                format!("Invalid value: {s:?}: should be at least {min} chars long"),
            );
        }
        if let Some(max) = schema["maxLength"].as_u64()
            && chars > max
        {
            self.err(
                path,
                format!("Too long: may not be more than {max} chars, got {chars}"),
            );
        }
        if let Some(pattern) = schema["pattern"].as_str() {
            match regex::Regex::new(pattern) {
                Ok(re) if re.is_match(s) => {}
                Ok(_) => self.err(
                    path,
                    format!("Invalid value: {s:?}: should match '{pattern}'"),
                ),
                Err(e) => self.err(path, format!("the CRD's pattern does not compile: {e}")),
            }
        }
    }

    fn array(&mut self, schema: &Value, items: &mut [Value], path: &str) {
        let n = items.len() as u64;
        if let Some(min) = schema["minItems"].as_u64()
            && n < min
        {
            self.err(
                path,
                format!("Invalid value: {n}: should have at least {min} items"),
            );
        }
        if let Some(max) = schema["maxItems"].as_u64()
            && n > max
        {
            self.err(
                path,
                format!("Too many: {n}: must have at most {max} items"),
            );
        }
        let item_schema = &schema["items"];
        if item_schema.is_object() {
            for (i, item) in items.iter_mut().enumerate() {
                self.node(item_schema, item, &format!("{path}[{i}]"), false);
            }
        }
    }

    fn object(&mut self, schema: &Value, map: &mut Map<String, Value>, path: &str, root: bool) {
        let props = schema["properties"].as_object();
        let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
        let additional = &schema["additionalProperties"];
        if let Some(required) = schema["required"].as_array() {
            for field in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(field) {
                    self.err(&join_path(path, field), "Required value");
                }
            }
        }
        let n = map.len() as u64;
        if let Some(max) = schema["maxProperties"].as_u64()
            && n > max
        {
            self.err(
                path,
                format!("Too many: {n}: must have at most {max} items"),
            );
        }
        let known: Vec<&str> = props
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            // The API server's own fields, checked by it, not by the CRD's schema.
            if root && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
                continue;
            }
            let field = join_path(path, &key);
            let Some(value) = map.get_mut(&key) else {
                continue;
            };
            let child = props.and_then(|p| p.get(&key));
            match child {
                Some(child) => self.node(child, value, &field, false),
                None if additional.is_object() => {
                    self.node(additional, value, &format!("{path}[{key}]"), false);
                }
                None if preserve || additional == &Value::Bool(true) => {}
                None => {
                    let hint = match suggest(&key, &known) {
                        Some(s) => format!(": did you mean `{s}`?"),
                        None if known.is_empty() => String::new(),
                        None => format!("; the fields here are: {}", known.join(", ")),
                    };
                    self.err(&field, format!("unknown field {field:?}{hint}"));
                }
            }
        }
    }

    /// The CEL rules of `schema` on `value` (`self`), as the API server runs them.
    fn rules(&mut self, schema: &Value, value: &Value, path: &str, root: bool) {
        let Some(rules) = schema["x-kubernetes-validations"].as_array() else {
            return;
        };
        let this = if root {
            root_self(value)
        } else {
            value.clone()
        };
        let mut context = Context::with_env(CEL.clone());
        context.add_variable_from_value("self", to_cel(&this));
        for rule in rules {
            let Some(source) = rule["rule"].as_str() else {
                continue;
            };
            let message = rule["message"]
                .as_str()
                .map_or_else(|| format!("failed rule: {source}"), String::from);
            let field = rule["fieldPath"].as_str().map_or_else(
                || path.to_string(),
                |f| join_path(path, f.trim_start_matches('.')),
            );
            let outcome = CEL
                .compile(source)
                .map_err(|e| format!("compilation failed: {e}"))
                .and_then(|p: Program| {
                    p.execute(&context)
                        .map_err(|e| format!("evaluation failed: {e}"))
                });
            match outcome {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => self.err(
                    &field,
                    format!("Invalid value: {}: {message}", shown(value, false)),
                ),
                Ok(other) => self.err(
                    &field,
                    format!("the rule {source:?} gave {other:?}, not a boolean"),
                ),
                Err(e) => self.err(
                    &field,
                    format!("Invalid value: {}: {e}", shown(value, false)),
                ),
            }
        }
    }
}

/// A value as the API server shows it in an error: scalars as they are (strings quoted); an
/// object or list by its type, as `"object"`.
fn shown(value: &Value, in_type_error: bool) -> String {
    match value {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        Value::Null if in_type_error => "\"null\"".into(),
        other => other.to_string(),
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

/// `self` of a rule on the whole resource: its spec and status, and of its metadata only the
/// name and generateName (as the API server exposes it).
fn root_self(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(map) = out.as_object_mut() {
        let metadata: Map<String, Value> = object["metadata"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| *k == "name" || *k == "generateName")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        map.insert("metadata".into(), Value::Object(metadata));
    }
    out
}

/// A JSON value as CEL sees it: integers are `int`, other numbers `double`.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => n.as_u64().map_or_else(
                || cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
                cel::Value::UInt,
            ),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<String, cel::Value> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::Map(entries.into())
        }
    }
}

/// A `null` for a field that is not nullable is dropped, as the API server prunes it (then its
/// default applies).
fn prune_null(schema: &Value, value: &mut Value) {
    if let Value::Object(map) = value
        && let Some(props) = schema["properties"].as_object()
    {
        map.retain(|k, v| !(v.is_null() && props.get(k).is_some_and(|p| p["nullable"] != true)));
    }
}

/// Fills in the defaults of `schema`'s properties missing from `value`, at this level (the walk
/// reaches the deeper levels, defaults included, next).
fn defaults(schema: &Value, value: &mut Value) {
    let (Value::Object(map), Some(props)) = (value, schema["properties"].as_object()) else {
        return;
    };
    for (key, child) in props {
        if !map.contains_key(key)
            && let Some(default) = child.get("default")
        {
            map.insert(key.clone(), default.clone());
        }
    }
}

#[cfg(test)]
mod tests;
