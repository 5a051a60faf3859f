//! DefaultBinder: binds the pod through the API handle (the `pods/binding` subresource).

use std::sync::Arc;

use async_trait::async_trait;

use super::names;
use crate::framework::api_calls::{ApiClient, Bind};
use crate::framework::args::no_args;
use crate::framework::interface::{BindPlugin, CycleState, Status};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::PodInfo;

pub(crate) struct DefaultBinder {
    api: Arc<dyn ApiClient>,
}

impl DefaultBinder {
    pub(crate) fn new(api: Arc<dyn ApiClient>) -> DefaultBinder {
        DefaultBinder { api }
    }
}

impl_plugin!(DefaultBinder, names::DEFAULT_BINDER, [Bind]);

#[async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, _state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        tracing::debug!(pod = %pod.key(), node = node_name, "binding pod");
        match self.api.call(Bind::new(pod, node_name)).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e.to_string()),
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(DefaultBinder::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(DefaultBinder::new(handle.api.clone())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::api_calls::{ApiError, RecordingApi, Verb};
    use crate::framework::interface::Code;
    use crate::framework::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{Binding, Pod};

    #[tokio::test]
    async fn binds_through_the_api() {
        let api = Arc::new(RecordingApi::default());
        let b = DefaultBinder::new(api.clone());
        let pod = PodBuilder::new("p").info();
        let s = b.bind(&CycleState::new(), &pod, "n1").await;
        assert!(s.is_success());
        assert_eq!(
            api.keys::<Pod>(Verb::Create, Some("binding")),
            ["default/p"]
        );
        let bindings: Vec<Binding> = api.bodies::<Pod, _>(Verb::Create, Some("binding"));
        assert_eq!(bindings[0].target.name.as_deref(), Some("n1"));

        api.fail::<Pod>(Verb::Create, ApiError::Conflict("pod already bound".into()));
        let s = b.bind(&CycleState::new(), &pod, "n1").await;
        assert_eq!(s.code(), Code::Error);
        assert_eq!(s.message(), "conflict: pod already bound");
    }
}
