//! Small schema helpers for fields whose OpenAPI shape the derive cannot express.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Plugin args: any object, kept as written (each plugin validates its own args).
pub(super) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A Go duration string as metav1.Duration accepts it (`15s`, `1m30s`, `500ms`).
pub(super) fn go_duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$",
    })
}

/// A short list of object names (DNS subdomains), bounded so CEL rules over it stay cheap.
pub(super) fn name_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 32,
        "items": {"type": "string", "minLength": 1, "maxLength": 253},
    })
}
