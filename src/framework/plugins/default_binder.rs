//! DefaultBinder: binds the pod through the API handle (the `pods/binding` subresource); from
//! 1.37 a transient failure is retried as upstream's `util.BindPod` retries it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::names;
use crate::emulation::{self, Minor};
use crate::framework::api_calls::{ApiClient, ApiError, Bind};
use crate::framework::args::no_args;
use crate::framework::interface::{BindPlugin, CycleState, Status};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::PodInfo;

/// How a failed bind is retried: the tries, the first wait, its growth factor (client-go's
/// `wait.Backoff`, 10 % jitter on each wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retries {
    tries: u32,
    first_wait: Duration,
    factor: u32,
}

/// One try, as before 1.37.
const ONCE: Retries = Retries {
    tries: 1,
    first_wait: Duration::ZERO,
    factor: 1,
};

/// client-go's `retry.DefaultBackoff` (4 tries, 10 ms then x5), which 1.37's `util.BindPod`
/// retries `util.Retriable` errors with.
const DEFAULT_BACKOFF: Retries = Retries {
    tries: 4,
    first_wait: Duration::from_millis(10),
    factor: 5,
};

/// How binds are retried, per minor: 1.36 binds once; 1.37 retries transient errors.
const RETRIES: &[(Minor, Retries)] = &[(Minor::V1_36, ONCE), (Minor::V1_37, DEFAULT_BACKOFF)];

pub(crate) struct DefaultBinder {
    api: Arc<dyn ApiClient>,
    retries: Retries,
}

impl DefaultBinder {
    /// The binder of the newest minor.
    #[cfg(test)]
    pub(crate) fn new(api: Arc<dyn ApiClient>) -> DefaultBinder {
        DefaultBinder::at(api, Minor::NEWEST)
    }

    pub(crate) fn at(api: Arc<dyn ApiClient>, minor: Minor) -> DefaultBinder {
        DefaultBinder {
            api,
            retries: *emulation::at(RETRIES, minor),
        }
    }
}

impl_plugin!(DefaultBinder, names::DEFAULT_BINDER, [Bind]);

#[async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, _state: &CycleState, pod: &PodInfo, node_name: &str) -> Status {
        tracing::debug!(pod = %pod.key(), node = node_name, "binding pod");
        let mut wait = self.retries.first_wait;
        let mut tries = 1;
        loop {
            match self.api.call(Bind::new(pod, node_name)).await {
                Ok(()) => return Status::success(),
                Err(ApiError::Retriable(msg)) if tries < self.retries.tries => {
                    tracing::debug!(pod = %pod.key(), error = %msg, "binding failed; retrying");
                    let jitter = wait.mul_f64(0.1 * fastrand::f64());
                    tokio::time::sleep(wait + jitter).await;
                    wait *= self.retries.factor;
                    tries += 1;
                }
                Err(e) => return Status::error(e.to_string()),
            }
        }
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(DefaultBinder::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(DefaultBinder::at(
            handle.api.clone(),
            handle.emulation.minor(),
        )))
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

    /// An API whose first `failures` binds fail with `error`.
    fn flaky(failures: u32, error: ApiError) -> Arc<RecordingApi> {
        let api = Arc::new(RecordingApi::default());
        for _ in 0..failures {
            api.fail_once::<Pod>(Verb::Create, error.clone());
        }
        api
    }

    /// 1.37's `util.BindPod`: transient errors are retried (4 tries in all), others are not;
    /// 1.36 binds once.
    #[tokio::test]
    async fn transient_bind_errors_are_retried_from_1_37() {
        let unavailable =
            ApiError::Retriable("the server is currently unable to handle the request".into());
        let bind = async |api: Arc<RecordingApi>, minor| {
            let s = DefaultBinder::at(api.clone(), minor)
                .bind(&CycleState::new(), &PodBuilder::new("p").info(), "n1")
                .await;
            (s, api.sent::<Pod>(Verb::Create, Some("binding")).len())
        };
        // Three failures, then success on the fourth try.
        let (s, calls) = bind(flaky(3, unavailable.clone()), Minor::V1_37).await;
        assert!(s.is_success(), "{s:?}");
        assert_eq!(calls, 4);
        // Four failures: the last error.
        let (s, calls) = bind(flaky(4, unavailable.clone()), Minor::V1_37).await;
        assert_eq!((s.code(), calls), (Code::Error, 4));
        assert_eq!(
            s.message(),
            "the server is currently unable to handle the request"
        );
        // Not transient: one try.
        let (s, calls) = bind(flaky(1, ApiError::Conflict("x".into())), Minor::V1_37).await;
        assert_eq!((s.code(), calls), (Code::Error, 1));
        // 1.36: one try.
        let (s, calls) = bind(flaky(1, unavailable), Minor::V1_36).await;
        assert_eq!((s.code(), calls), (Code::Error, 1));
    }
}
