//! VolumeBinding — built in the issue "affinity, topology spread, volumes and preemption"; for now
//! its args (also used by Kosmos's LeafNodeVolumeBinding).

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, UtilizationShapePoint, invalid};

/// The default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// Upstream's `VolumeBindingArgs`. `shape` needs the StorageCapacityScoring feature, which is off
/// (as upstream's default), so setting it is an error as upstream reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VolumeBindingArgs {
    pub bind_timeout_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

impl PluginArgs for VolumeBindingArgs {
    const KIND: &'static str = "VolumeBindingArgs";

    fn set_defaults(&mut self) {
        self.bind_timeout_seconds
            .get_or_insert(DEFAULT_BIND_TIMEOUT_SECONDS);
    }

    fn validate(&self) -> Vec<FieldError> {
        validate_volume_binding(self)
    }
}

pub fn validate_volume_binding(args: &VolumeBindingArgs) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let t = args
        .bind_timeout_seconds
        .unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS);
    if t < 0 {
        errs.push(invalid(
            "bindTimeoutSeconds",
            t,
            "invalid BindTimeoutSeconds, should not be a negative value",
        ));
    }
    if let Some(shape) = &args.shape {
        errs.push(invalid(
            "shape",
            format!("{shape:?}"),
            "unsupported when StorageCapacityScoring feature is disabled",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use serde_json::json;

    #[test]
    fn args() {
        assert_eq!(
            decode::<VolumeBindingArgs>(None),
            Ok(json!({"bindTimeoutSeconds": 600}))
        );
        assert_eq!(
            decode::<VolumeBindingArgs>(Some(&json!({"bindTimeoutSeconds": 5}))),
            Ok(json!({"bindTimeoutSeconds": 5}))
        );
        let e = decode::<VolumeBindingArgs>(Some(&json!({"bindTimeoutSeconds": -1}))).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value"
        );
        let e =
            decode::<VolumeBindingArgs>(Some(&json!({"shape": [{"utilization": 0, "score": 0}]})))
                .unwrap_err();
        assert_eq!(e[0].path, "shape");
        let e = decode::<VolumeBindingArgs>(Some(&json!({"bindTimeout": 5}))).unwrap_err();
        assert_eq!(e[0].path, "bindTimeout");
    }
}
