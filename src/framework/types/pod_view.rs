//! [`PodView`], what plugins read of any pod whether it waits for a node or already has one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Volume};

/// What selectors and volume checks read of a pod: a `Pod`, a
/// [`PodInfo`](super::pod_info::PodInfo) being scheduled, an
/// [`AssignedPod`](super::assigned_pod::AssignedPod) on a node.
pub trait PodView {
    fn name(&self) -> &str;
    fn namespace(&self) -> &str;
    fn uid(&self) -> &str;
    fn labels(&self) -> Option<&BTreeMap<String, String>>;
    fn volumes(&self) -> &[Volume];
}

impl<T: PodView + ?Sized> PodView for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn namespace(&self) -> &str {
        (**self).namespace()
    }

    fn uid(&self) -> &str {
        (**self).uid()
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        (**self).labels()
    }

    fn volumes(&self) -> &[Volume] {
        (**self).volumes()
    }
}

impl PodView for Pod {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }

    fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata.labels.as_ref()
    }

    fn volumes(&self) -> &[Volume] {
        self.spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[])
    }
}
