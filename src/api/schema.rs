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

/// A resource quantity as the API server parses one (`500m`, `2`, `1.5Gi`, `1e3`), without the
/// sign the API server would refuse in a container's resources.
const QUANTITY: &str = "^(([0-9]+([.][0-9]*)?)|([.][0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+([.][0-9]*)?)|([.][0-9]+))))?$";

/// The container resources' `limits` and `requests`: each value must be a quantity, checked when
/// the profile is applied (the API server would otherwise refuse only the rendered Deployment).
pub(super) fn container_resources(schema: &mut Schema) {
    for field in ["limits", "requests"] {
        let Some(map) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut(field))
            .and_then(|m| m.as_object_mut())
        else {
            continue;
        };
        map.insert(
            "additionalProperties".into(),
            serde_json::json!({
                "type": "string",
                "maxLength": 64,
                "description": "A quantity: cpu in cores (500m, 2), memory and storage in bytes (256Mi, 1Gi)."
            }),
        );
        map.insert("maxProperties".into(), 16.into());
        map.insert(
            "x-kubernetes-validations".into(),
            serde_json::json!([{
                "rule": format!("self.all(k, self[k].matches('{QUANTITY}'))"),
                "message": format!("resources.{field} values must be quantities: cpu in cores such as 500m or 2, memory in bytes such as 256Mi or 1Gi (no spaces or words)"),
            }]),
        );
    }
}
