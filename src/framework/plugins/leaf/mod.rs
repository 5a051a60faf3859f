//! Kosmos's leaf-node plugins (LeafNodeTaintToleration, LeafNodeVolumeBinding,
//! LeafNodeDistribution) — built in a later issue; for now LeafNodeVolumeBinding's args, which are
//! upstream's `VolumeBindingArgs` (seed 000 sets `bindTimeoutSeconds`).

use serde::{Deserialize, Serialize};

use super::volume_binding::{VolumeBindingArgs, validate_volume_binding};
use crate::config::FieldError;
use crate::framework::args::PluginArgs;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeafNodeVolumeBindingArgs(pub VolumeBindingArgs);

impl PluginArgs for LeafNodeVolumeBindingArgs {
    const KIND: &'static str = "LeafNodeVolumeBindingArgs";

    fn set_defaults(&mut self) {
        self.0.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        validate_volume_binding(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use serde_json::json;

    #[test]
    fn seed_args() {
        assert_eq!(
            decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"bindTimeoutSeconds": 5}))),
            Ok(json!({"bindTimeoutSeconds": 5}))
        );
        assert!(decode::<LeafNodeVolumeBindingArgs>(Some(&json!({"bindTimeout": 5}))).is_err());
    }
}
