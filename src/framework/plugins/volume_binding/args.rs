//! VolumeBinding's args (upstream's `VolumeBindingArgs`): their defaults and validation at the
//! emulated minor's StorageCapacityScoring.

use serde::{Deserialize, Serialize};

use super::scorer::STORAGE_CAPACITY_SCORING;
use crate::config::FieldError;
use crate::emulation::Emulation;
use crate::framework::args::{PluginArgs, UtilizationShapePoint, invalid, validate_shape};
use crate::framework::plugins::helper::MAX_CUSTOM_PRIORITY_SCORE;

/// The default `bindTimeoutSeconds`.
pub(crate) const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// Upstream's `VolumeBindingArgs`. `shape` needs the StorageCapacityScoring feature: with it on
/// (1.37's default) it defaults to "the emptier the better" and is validated; with it off (1.36's
/// default) setting it is an error, as upstream reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VolumeBindingArgs {
    pub bind_timeout_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

impl PluginArgs for VolumeBindingArgs {
    const KIND: &'static str = "VolumeBindingArgs";

    /// Upstream's `SetDefaults_VolumeBindingArgs`.
    fn set_defaults_at(&mut self, emulation: &Emulation) {
        self.bind_timeout_seconds
            .get_or_insert(DEFAULT_BIND_TIMEOUT_SECONDS);
        if self.shape.as_ref().is_none_or(Vec::is_empty)
            && emulation.enabled(STORAGE_CAPACITY_SCORING)
        {
            self.shape = Some(default_shape());
        }
    }

    fn validate_at(&self, emulation: &Emulation) -> Vec<FieldError> {
        validate_volume_binding(self, emulation)
    }
}

/// The default `shape`: an empty pool scores 10 (the most), a full one 0.
fn default_shape() -> Vec<UtilizationShapePoint> {
    vec![
        UtilizationShapePoint {
            utilization: 0,
            score: MAX_CUSTOM_PRIORITY_SCORE as i32,
        },
        UtilizationShapePoint {
            utilization: 100,
            score: 0,
        },
    ]
}

/// Go's `%#v` of a shape, as upstream's field errors print it.
fn go_shape(shape: &[UtilizationShapePoint]) -> String {
    let points: Vec<String> = shape
        .iter()
        .map(|p| {
            format!(
                "config.UtilizationShapePoint{{Utilization:{}, Score:{}}}",
                p.utilization, p.score
            )
        })
        .collect();
    format!("[]config.UtilizationShapePoint{{{}}}", points.join(", "))
}

/// Upstream's `ValidateVolumeBindingArgsWithOptions` at `emulation`'s StorageCapacityScoring.
pub(crate) fn validate_volume_binding(
    args: &VolumeBindingArgs,
    emulation: &Emulation,
) -> Vec<FieldError> {
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
    // With the gate on VolumeBinding's defaults always set a shape; LeafNodeVolumeBinding (which
    // does not score) leaves it unset.
    if emulation.enabled(STORAGE_CAPACITY_SCORING) {
        if let Some(shape) = &args.shape {
            errs.extend(validate_shape(
                shape,
                "shape",
                MAX_CUSTOM_PRIORITY_SCORE as i32,
            ));
        }
    } else if let Some(shape) = &args.shape {
        errs.push(invalid(
            "shape",
            go_shape(shape),
            "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::emulation::Minor;
    use crate::framework::args::decode_at;

    #[test]
    fn args_per_minor() {
        let (v1_36, v1_37) = (Emulation::of(Minor::V1_36), Emulation::of(Minor::V1_37));
        let at = |e: &Emulation, args: serde_json::Value| {
            decode_at::<VolumeBindingArgs>((!args.is_null()).then_some(&args), e)
        };
        // 1.36: StorageCapacityScoring is off, no shape, and one given is refused.
        assert_eq!(
            at(&v1_36, json!(null)),
            Ok(json!({"bindTimeoutSeconds": 600}))
        );
        let e = at(&v1_36, json!({"shape": [{"utilization": 0, "score": 0}]})).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "shape: Invalid value: []config.UtilizationShapePoint{config.UtilizationShapePoint{Utilization:0, Score:0}}: unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring"
        );
        // 1.37: on, the default shape (defaults.go at v1.37.2), a given one kept and validated.
        let default = json!({"bindTimeoutSeconds": 600, "shape": [
            {"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]});
        assert_eq!(at(&v1_37, json!(null)), Ok(default.clone()));
        assert_eq!(at(&v1_37, json!({"shape": []})), Ok(default));
        let mine = json!({"bindTimeoutSeconds": 5, "shape": [{"utilization": 50, "score": 3}]});
        assert_eq!(at(&v1_37, mine.clone()), Ok(mine));
        let e = at(&v1_37, json!({"shape": [{"utilization": 0, "score": 11}]})).unwrap_err();
        assert_eq!(e[0].path, "shape[0].score");
        // The gate off at 1.37: as 1.36.
        let off = Emulation::with_gates(Minor::V1_37, &["StorageCapacityScoring=false".into()])
            .expect("known gate");
        assert_eq!(
            at(&off, json!(null)),
            Ok(json!({"bindTimeoutSeconds": 600}))
        );
        // Either minor.
        for e in [&v1_36, &v1_37] {
            let err = at(e, json!({"bindTimeoutSeconds": -1})).unwrap_err();
            assert_eq!(
                err[0].to_string(),
                "bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value"
            );
            assert_eq!(
                at(e, json!({"bindTimeout": 5})).unwrap_err()[0].path,
                "bindTimeout"
            );
        }
    }
}
