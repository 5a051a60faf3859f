//! Watching and listing one kind with kube, for whatever store the caller fills: the
//! list-then-watch loop every informer runs ([`watch`]), and a paged list ([`list_all`]).

use std::time::Instant;

use futures::StreamExt;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::warn;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::metrics::{InformerLabels, informer_metrics};

/// Objects per list call.
const PAGE: u32 = 500;

/// A kind an informer can watch.
pub trait Watchable:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Where a watch's objects go.
pub trait WatchSink<K>: Send {
    /// An object added or changed.
    fn apply(&mut self, obj: K);
    /// An object deleted.
    fn delete(&mut self, obj: K);
    /// Everything the (re)list found.
    fn replace(&mut self, objs: Vec<K>);
}

/// The list-then-watch stream of `api`, retried after an error with client-go's reflector backoff
/// (0.8 s doubling to 30 s, with jitter, reset after 2 min without error): an unreachable API
/// server costs a few requests and log lines a minute, not hundreds a second. It records
/// client-go's informer metrics.
pub fn informer<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    K: kube::Resource<DynamicType: Default>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let dt = K::DynamicType::default();
    let labels = InformerLabels {
        group: K::group(&dt).into_owned(),
        name: "kube-scheduler".into(),
        resource: K::plural(&dt).into_owned(),
        version: K::version(&dt).into_owned(),
    };
    let metrics = informer_metrics();
    metrics.queued_items.get_or_create(&labels).set(0);
    Instrumented {
        inner: watcher::watcher(api, config).default_backoff().boxed(),
        latency: metrics.processing_latency.get_or_create(&labels).clone(),
        resource_version: metrics
            .store_resource_version
            .get_or_create(&labels)
            .clone(),
        handed_over: None,
    }
    .boxed()
}

/// An informer's stream that times how long its consumer takes to handle each event (from the
/// event's hand-over to the next poll: the consumer polls again once done) and records the
/// resource version of the last object seen.
struct Instrumented<K> {
    inner: BoxStream<'static, watcher::Result<Event<K>>>,
    latency: Histogram,
    resource_version: Gauge<f64, std::sync::atomic::AtomicU64>,
    handed_over: Option<Instant>,
}

impl<K: kube::Resource> futures::Stream for Instrumented<K> {
    type Item = watcher::Result<Event<K>>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if let Some(at) = self.handed_over.take() {
            self.latency.observe(at.elapsed().as_secs_f64());
        }
        let polled = self.inner.poll_next_unpin(cx);
        if let std::task::Poll::Ready(Some(Ok(event))) = &polled {
            let object = match event {
                Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => Some(o),
                Event::Init | Event::InitDone => None,
            };
            if let Some(rv) = object
                .and_then(|o| o.meta().resource_version.as_deref())
                .and_then(|rv| rv.parse::<u64>().ok())
            {
                // The 15 least significant digits, as client-go keeps them (exact in an f64).
                self.resource_version
                    .set((rv % 1_000_000_000_000_000) as f64);
            }
            self.handed_over = Some(Instant::now());
        }
        polled
    }
}

/// The watch configuration: every object, or those `label_selector` selects.
pub fn config(label_selector: Option<&str>) -> watcher::Config {
    match label_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    }
}

/// Watches every object of kind `K` (that `label_selector` selects) into `sink`; sets `synced`
/// after the first list. Runs until the stream ends.
pub async fn watch<K: Watchable>(
    client: Client,
    label_selector: Option<&str>,
    mut sink: impl WatchSink<K>,
    synced: watch::Sender<bool>,
) {
    let mut stream = informer(Api::<K>::all(client), config(label_selector));
    let mut initial: Vec<K> = Vec::new();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(obj))) => sink.apply(obj),
            Ok(Some(Event::Delete(obj))) => sink.delete(obj),
            Ok(Some(Event::Init)) => initial.clear(),
            Ok(Some(Event::InitApply(obj))) => initial.push(obj),
            Ok(Some(Event::InitDone)) => {
                sink.replace(std::mem::take(&mut initial));
                let _ = synced.send(true);
            }
            Ok(None) => return,
            Err(err) => {
                let kind = K::kind(&());
                warn!(err = %super::logging::watch_error(&err), "{kind} watch failed; retrying with backoff")
            }
        }
    }
}

/// Every object of kind `K` (that `label_selector` selects), page by page.
pub async fn list_all<K: Watchable>(
    client: &Client,
    label_selector: Option<&str>,
) -> Result<Vec<K>, kube::Error> {
    let api: Api<K> = Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    if let Some(selector) = label_selector {
        params = params.labels(selector);
    }
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}
