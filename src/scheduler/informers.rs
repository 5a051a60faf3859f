//! Watches nodes, pods and the kinds the enabled plugins declared, and feeds the cache and the
//! queue, as upstream's event handlers do: assigned pods go to the cache, pending pods of our
//! profiles to the queue, and every change is handed to the queue as the typed cluster event it
//! is (with its old and new objects), which moves the pods whose rejecting plugins' hints say it
//! may help.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::cache::Cache;
use super::queue::SchedulingQueue;
use super::trim::{assigned_pod, trim_metadata, trim_pod};
use crate::api::pod_group::POD_GROUP_LABEL;
use crate::framework::events::{
    EVENT_ASSIGNED_POD_ADD, EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD, EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD, EVENT_UNSCHEDULED_POD_DELETE, EVENT_UNSCHEDULED_POD_UPDATE,
    assigned_pod_scheduling_properties_change, node_scheduling_properties_change,
};
use crate::framework::listers::{Informer, Listers, ObjectStore, PodGroupMembers, StoreChange};
use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, PodInfo, PodObject,
};

/// `ns/name`, the key the cache and the queue use.
pub(crate) fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("default-scheduler")
}

/// Routes pod events; `profiles` are the scheduler names this process serves. Pods are kept trimmed
/// to what scheduling reads (`trim::trim_pod`, `trim::assigned_pod`). Each change is handed to
/// the queue as the cluster event it is (upstream's `eventhandlers.go`): an assigned pod added,
/// updated or deleted moves the pool's pods its rejecting plugins' hints say it may help; a
/// pending pod's own update is checked against its rejecting plugins.
pub(crate) struct PodHandler {
    pub cache: Arc<Cache>,
    pub queue: Arc<SchedulingQueue>,
    pub profiles: HashSet<String>,
    known: HashMap<String, KnownPod>,
}

/// What the handler remembers of a pod it has seen: a pending pod of ours whole (its next update
/// is compared against it), another scheduler's pending pod or an assigned one only as such (the
/// cache keeps assigned pods).
enum KnownPod {
    Pending(Option<Arc<PodInfo>>),
    /// Another scheduler's pending pod, kept while it is nominated to a node.
    Foreign(Option<Arc<PodInfo>>),
    Assigned,
}

impl PodHandler {
    pub(crate) fn new(
        cache: Arc<Cache>,
        queue: Arc<SchedulingQueue>,
        profiles: HashSet<String>,
    ) -> Self {
        Self {
            cache,
            queue,
            profiles,
            known: HashMap::new(),
        }
    }

    pub(crate) fn apply(&mut self, mut pod: Pod) {
        let key = pod_key(&pod);
        let node = node_name(&pod).to_string();
        if !node.is_empty() {
            if let Some(KnownPod::Foreign(Some(_))) = self.known.get(&key) {
                // Bound where it was nominated (or elsewhere): the cache holds it from now on.
                self.queue.nominator().delete(&key);
            }
            self.known.insert(key.clone(), KnownPod::Assigned);
            self.queue.delete(&key);
            self.assigned_pod_applied(&node, pod);
            return;
        }
        trim_pod(&mut pod);
        let ours = self.profiles.contains(scheduler_name(&pod));
        if !ours {
            self.foreign_pending_applied(key, pod);
            return;
        }
        let info = Some(Arc::new(PodInfo::new(Arc::new(pod))));
        let old = match self
            .known
            .insert(key.clone(), KnownPod::Pending(info.clone()))
        {
            Some(KnownPod::Pending(old)) => old,
            _ => None,
        };
        let Some(info) = info else {
            return;
        };
        if info.pod.metadata.deletion_timestamp.is_some() {
            self.queue.delete(&key);
            return;
        }
        let start = Instant::now();
        match old {
            None => {
                self.queue.add(info.clone());
                // A new pod may complete a gang (Coscheduling); as upstream with GangScheduling.
                let new = PodObject::Unscheduled(info).into_event_object();
                self.queue.move_all_to_active_or_backoff(
                    &EVENT_UNSCHEDULED_POD_ADD,
                    None,
                    Some(new),
                );
                self.queue
                    .observe_event_handling(&EVENT_UNSCHEDULED_POD_ADD, start);
            }
            // The same object again (a re-list): nothing changed.
            Some(old)
                if old.pod.metadata.resource_version == info.pod.metadata.resource_version => {}
            Some(old) => {
                let nomination_changed = !old.nominated_node_name().is_empty()
                    && old.nominated_node_name() != info.nominated_node_name();
                self.queue.update(Some(old.clone()), info);
                if nomination_changed {
                    // The room it was nominated to is free for pods of lower or equal priority.
                    self.nominated_pod_gone(old);
                }
                self.queue
                    .observe_event_handling(&EVENT_UNSCHEDULED_POD_UPDATE, start);
            }
        }
    }

    /// Another scheduler's pending pod: only its nomination matters here (respected in Filter as
    /// ours are); when it is dropped, the pods it kept out may fit.
    fn foreign_pending_applied(&mut self, key: String, pod: Pod) {
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
            && pod.metadata.deletion_timestamp.is_none();
        let info = nominated.then(|| Arc::new(PodInfo::new(Arc::new(pod))));
        let old = match self
            .known
            .insert(key.clone(), KnownPod::Foreign(info.clone()))
        {
            Some(KnownPod::Foreign(old)) => old,
            _ => None,
        };
        match info {
            Some(info) => self.queue.nominator().update_foreign(info),
            None => self.queue.nominator().delete(&key),
        }
        if let Some(old) = old
            && self.known_foreign_node(&key) != Some(old.nominated_node_name().to_string())
        {
            self.nominated_pod_gone(old);
        }
    }

    /// The node another scheduler's pending pod `key` is nominated to now.
    fn known_foreign_node(&self, key: &str) -> Option<String> {
        match self.known.get(key) {
            Some(KnownPod::Foreign(Some(p))) => Some(p.nominated_node_name().to_string()),
            _ => None,
        }
    }

    /// A pod bound to `node`: into the cache, and the event it is (added: also a binding
    /// confirmed; updated: each kind of change).
    fn assigned_pod_applied(&self, node: &str, pod: Pod) {
        let start = Instant::now();
        let new = Arc::new(assigned_pod(pod));
        let old = self.cache.add_or_update_pod(node, new.clone());
        let new_obj = PodObject::assigned(new.clone(), node).into_event_object();
        match old.filter(|o| !o.assumed) {
            None => {
                self.queue.move_all_to_active_or_backoff(
                    &EVENT_ASSIGNED_POD_ADD,
                    None,
                    Some(new_obj),
                );
                self.queue
                    .observe_event_handling(&EVENT_ASSIGNED_POD_ADD, start);
            }
            Some(old) => {
                let events = assigned_pod_scheduling_properties_change(&old.pod, &new);
                let old_obj = PodObject::assigned(old.pod, &old.node).into_event_object();
                for event in &events {
                    self.queue.move_all_to_active_or_backoff(
                        event,
                        Some(old_obj.clone()),
                        Some(new_obj.clone()),
                    );
                    self.queue.observe_event_handling(event, start);
                }
            }
        }
    }

    /// A pending pod with a nominated node left (deleted, or nominated elsewhere): the pods of
    /// lower or equal priority that it kept out may fit.
    fn nominated_pod_gone(&self, old: Arc<PodInfo>) {
        let priority = old.priority();
        self.queue.move_matching_to_active_or_backoff(
            &EVENT_ASSIGNED_POD_DELETE,
            Some(PodObject::Unscheduled(old).into_event_object()),
            None,
            |p| p.priority() <= priority,
        );
    }

    pub(crate) fn delete(&mut self, key: &str) {
        let start = Instant::now();
        match self.known.remove(key) {
            None | Some(KnownPod::Pending(None)) | Some(KnownPod::Foreign(None)) => {}
            Some(KnownPod::Foreign(Some(old))) => {
                self.queue.nominator().delete(key);
                self.nominated_pod_gone(old);
            }
            Some(KnownPod::Pending(Some(old))) => {
                self.queue.delete(key);
                if !old.nominated_node_name().is_empty() {
                    self.nominated_pod_gone(old);
                }
                self.queue
                    .observe_event_handling(&EVENT_UNSCHEDULED_POD_DELETE, start);
            }
            Some(KnownPod::Assigned) => {
                // Resources were freed: pending pods may fit now.
                if let Some(old) = self.cache.remove_pod(key) {
                    let old = PodObject::assigned(old.pod, &old.node).into_event_object();
                    self.queue.move_all_to_active_or_backoff(
                        &EVENT_ASSIGNED_POD_DELETE,
                        Some(old),
                        None,
                    );
                }
                self.queue
                    .observe_event_handling(&EVENT_ASSIGNED_POD_DELETE, start);
            }
        }
    }

    fn known_keys(&self) -> HashSet<String> {
        self.known.keys().cloned().collect()
    }
}

/// The list-then-watch stream of `api`, retried after an error with client-go's reflector backoff
/// (0.8 s doubling to 30 s, with jitter, reset after 2 min without error): an unreachable API
/// server costs a few requests and log lines a minute, not hundreds a second.
fn informer<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher::watcher(api, config).default_backoff().boxed()
}

/// Watches pods that are not finished (as upstream: `status.phase!=Succeeded,status.phase!=Failed`;
/// a pod that finishes leaves the watch as a deletion). Sets `synced` after the first list.
pub(crate) async fn watch_pods(
    client: Client,
    mut handler: PodHandler,
    synced: watch::Sender<bool>,
) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    let mut stream = informer(api, config);
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(pod))) => handler.apply(pod),
            Ok(Some(Event::Delete(pod))) => handler.delete(&pod_key(&pod)),
            Ok(Some(Event::Init)) => seen.clear(),
            Ok(Some(Event::InitApply(pod))) => {
                seen.insert(pod_key(&pod));
                handler.apply(pod);
            }
            Ok(Some(Event::InitDone)) => {
                for key in handler.known_keys().difference(&seen) {
                    handler.delete(key);
                }
                seen.clear();
                let _ = synced.send(true);
                debug!("pod informer synced");
            }
            Ok(None) => return,
            Err(err) => {
                warn!(err = %crate::logging::watch_error(&err), "pod watch failed; retrying with backoff")
            }
        }
    }
}

/// Watches nodes into the cache; each addition, change (as the specific kinds of change it is) and
/// deletion is a cluster event for the queue.
pub(crate) async fn watch_nodes(
    client: Client,
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    synced: watch::Sender<bool>,
) {
    let api: Api<Node> = Api::all(client);
    let mut stream = informer(api, watcher::Config::default());
    let mut known: HashMap<String, Arc<Node>> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    let apply = |mut node: Node, known: &mut HashMap<String, Arc<Node>>| {
        let start = Instant::now();
        let name = node.metadata.name.clone().unwrap_or_default();
        trim_metadata(&mut node);
        let node = Arc::new(node);
        let new = EventObject::new(node.clone());
        match known.insert(name, node.clone()) {
            None => {
                cache.add_node(node);
                queue.move_all_to_active_or_backoff(&EVENT_NODE_ADD, None, Some(new));
                queue.observe_event_handling(&EVENT_NODE_ADD, start);
            }
            Some(old) => {
                let events = node_scheduling_properties_change(&old, &node);
                if !events.is_empty() || images(&old) != images(&node) {
                    cache.add_node(node);
                }
                let old = EventObject::new(old);
                for event in &events {
                    queue.move_all_to_active_or_backoff(
                        event,
                        Some(old.clone()),
                        Some(new.clone()),
                    );
                    queue.observe_event_handling(event, start);
                }
            }
        }
    };
    let delete = |name: &str, known: &mut HashMap<String, Arc<Node>>| {
        let start = Instant::now();
        let old = known.remove(name);
        cache.remove_node(name);
        queue.move_all_to_active_or_backoff(&EVENT_NODE_DELETE, old.map(EventObject::new), None);
        queue.observe_event_handling(&EVENT_NODE_DELETE, start);
    };
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(node))) => apply(node, &mut known),
            Ok(Some(Event::Delete(node))) => delete(
                node.metadata.name.as_deref().unwrap_or_default(),
                &mut known,
            ),
            Ok(Some(Event::Init)) => seen.clear(),
            Ok(Some(Event::InitApply(node))) => {
                seen.insert(node.metadata.name.clone().unwrap_or_default());
                apply(node, &mut known);
            }
            Ok(Some(Event::InitDone)) => {
                let gone: Vec<String> = known
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for name in gone {
                    delete(&name, &mut known);
                }
                seen.clear();
                let _ = synced.send(true);
                debug!("node informer synced");
            }
            Ok(None) => return,
            Err(err) => {
                warn!(err = %crate::logging::watch_error(&err), "node watch failed; retrying with backoff")
            }
        }
    }
}

/// The images a node reports (ImageLocality scores them; no plugin requeues pods on them).
fn images(n: &Node) -> Option<&Vec<k8s_openapi::api::core::v1::ContainerImage>> {
    n.status.as_ref().and_then(|s| s.images.as_ref())
}

/// Hands a change of a watched kind to the queue as the cluster event it is (none for kinds
/// without events).
fn store_event<K: Send + Sync + 'static, S: Store<K> + ?Sized>(
    queue: &SchedulingQueue,
    store: &S,
    resource: Option<EventResource>,
    old: Option<Arc<K>>,
    new: Option<Arc<K>>,
) {
    let Some(resource) = resource else {
        return;
    };
    let action = match (&old, &new) {
        (None, _) => ActionType::ADD,
        (_, None) => ActionType::DELETE,
        _ => ActionType::UPDATE,
    };
    let event = ClusterEvent::new(resource, action);
    let start = Instant::now();
    queue.move_all_to_active_or_backoff(
        &event,
        old.map(|o| store.event_object(o)),
        new.map(|n| store.event_object(n)),
    );
    queue.observe_event_handling(&event, start);
}

/// A store an informer fills (an [`ObjectStore`], or the index of PodGroup members). Each write
/// returns the change it made as `(old, new)`, for the cluster event it is.
trait Store<K>: Send + Sync {
    /// Adds or updates `obj`.
    fn apply(&self, obj: K) -> Option<StoreChange<K>>;
    /// Removes `obj`.
    fn delete(&self, obj: K) -> Option<StoreChange<K>>;
    /// Replaces everything (after a re-list).
    fn replace(&self, objs: Vec<K>) -> Vec<StoreChange<K>>;
    /// What the queue's hints get for a stored object.
    fn event_object(&self, obj: Arc<K>) -> EventObject
    where
        K: Send + Sync + 'static,
    {
        EventObject::new(obj)
    }
}

impl<K: kube::Resource + Send + Sync> Store<K> for ObjectStore<K> {
    fn apply(&self, obj: K) -> Option<StoreChange<K>> {
        let new = Arc::new(obj);
        Some((self.apply_arc(new.clone()), Some(new)))
    }

    fn delete(&self, obj: K) -> Option<StoreChange<K>> {
        let old = ObjectStore::delete(self, &ObjectStore::<K>::key_of(&obj));
        Some((Some(old.unwrap_or_else(|| Arc::new(obj))), None))
    }

    fn replace(&self, objs: Vec<K>) -> Vec<StoreChange<K>> {
        ObjectStore::replace(self, objs)
    }
}

/// Member pods. The pod informer tells the queue what changed, but this index is filled by a
/// watch of its own and may catch up later: a gang member rejected because its siblings were
/// not counted yet would then wait for an unrelated event. So a pending pod joining a group is an
/// unscheduled pod added once more, when the index holds it.
impl Store<Pod> for PodGroupMembers {
    fn apply(&self, pod: Pod) -> Option<StoreChange<Pod>> {
        let pending = pod.spec.as_ref().is_none_or(|s| s.node_name.is_none());
        let added = pending.then(|| Arc::new(pod.clone()));
        let joined = PodGroupMembers::apply(self, pod);
        added.filter(|_| joined).map(|pod| (None, Some(pod)))
    }

    fn event_object(&self, pod: Arc<Pod>) -> EventObject {
        PodObject::Unscheduled(Arc::new(PodInfo::new(pod))).into_event_object()
    }

    fn delete(&self, pod: Pod) -> Option<StoreChange<Pod>> {
        PodGroupMembers::delete(self, &pod_key(&pod));
        None
    }

    fn replace(&self, pods: Vec<Pod>) -> Vec<StoreChange<Pod>> {
        PodGroupMembers::replace(self, pods);
        Vec::new()
    }
}

/// A kind an informer can watch into a store.
trait Watched:
    kube::Resource<DynamicType: Default>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType: Default>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Watches one extra kind into its store; its changes are cluster events (`resource`) for the
/// queue.
async fn watch_store<K>(
    api: Api<K>,
    listers: Arc<Listers>,
    store: fn(&Listers) -> &ObjectStore<K>,
    resource: Option<EventResource>,
    queue: Arc<SchedulingQueue>,
    synced: watch::Sender<bool>,
) where
    K: Watched,
{
    let config = watcher::Config::default();
    watch_store_with(api, config, listers, store, resource, queue, synced).await
}

/// Watches what `config` selects into a store; its changes are cluster events (`resource`) for
/// the queue.
async fn watch_store_with<K, S>(
    api: Api<K>,
    config: watcher::Config,
    listers: Arc<Listers>,
    store: fn(&Listers) -> &S,
    resource: Option<EventResource>,
    queue: Arc<SchedulingQueue>,
    synced: watch::Sender<bool>,
) where
    S: Store<K> + ?Sized,
    K: Watched,
{
    let mut stream = informer(api, config);
    let mut initial: Vec<K> = Vec::new();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(mut obj))) => {
                trim_metadata(&mut obj);
                if let Some((old, new)) = store(&listers).apply(obj) {
                    store_event(&queue, store(&listers), resource, old, new);
                }
            }
            Ok(Some(Event::Delete(obj))) => {
                if let Some((old, new)) = store(&listers).delete(obj) {
                    store_event(&queue, store(&listers), resource, old, new);
                }
            }
            Ok(Some(Event::Init)) => initial.clear(),
            Ok(Some(Event::InitApply(mut obj))) => {
                trim_metadata(&mut obj);
                initial.push(obj);
            }
            Ok(Some(Event::InitDone)) => {
                for (old, new) in store(&listers).replace(std::mem::take(&mut initial)) {
                    store_event(&queue, store(&listers), resource, old, new);
                }
                let _ = synced.send(true);
            }
            Ok(None) => return,
            Err(err) => {
                let kind = K::kind(&Default::default()).into_owned();
                warn!(err = %crate::logging::watch_error(&err), "{kind} watch failed; retrying with backoff")
            }
        }
    }
}

/// Starts a watcher per informer kind; each returned receiver turns true once its first list is in.
pub(crate) fn start_informers(
    client: &Client,
    informers: &std::collections::BTreeSet<Informer>,
    listers: &Arc<Listers>,
    queue: &Arc<SchedulingQueue>,
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<watch::Receiver<bool>>) {
    let mut tasks = Vec::new();
    let mut synced = Vec::new();
    for informer in informers {
        let (tx, rx) = watch::channel(false);
        synced.push(rx);
        let (c, l, q, r) = (
            client.clone(),
            listers.clone(),
            queue.clone(),
            informer.event_resource(),
        );
        let task = match informer {
            Informer::PersistentVolumes => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.persistent_volumes,
                r,
                q,
                tx,
            )),
            Informer::PersistentVolumeClaims => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.persistent_volume_claims,
                r,
                q,
                tx,
            )),
            Informer::StorageClasses => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.storage_classes,
                r,
                q,
                tx,
            )),
            Informer::CSINodes => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.csi_nodes, r, q, tx))
            }
            Informer::CSIDrivers => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.csi_drivers, r, q, tx))
            }
            Informer::CSIStorageCapacities => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.csi_storage_capacities,
                r,
                q,
                tx,
            )),
            Informer::PodDisruptionBudgets => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.pod_disruption_budgets,
                r,
                q,
                tx,
            )),
            Informer::Namespaces => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.namespaces, r, q, tx))
            }
            Informer::PodGroups => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.pod_groups, r, q, tx))
            }
            Informer::Services => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.services, r, q, tx))
            }
            // Every phase: a group's Succeeded and Failed members count too.
            Informer::PodGroupMembers => tokio::spawn(watch_store_with(
                Api::all(c),
                watcher::Config::default().labels(POD_GROUP_LABEL),
                l,
                |l| &l.pod_group_members,
                r,
                q,
                tx,
            )),
            Informer::ReplicationControllers => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.replication_controllers,
                r,
                q,
                tx,
            )),
            Informer::ReplicaSets => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.replica_sets, r, q, tx))
            }
            Informer::StatefulSets => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.stateful_sets, r, q, tx))
            }
            Informer::ResourceClaims => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.resource_claims,
                r,
                q,
                tx,
            )),
            Informer::ResourceSlices => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.resource_slices,
                r,
                q,
                tx,
            )),
            Informer::DeviceClasses => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.device_classes, r, q, tx))
            }
        };
        tasks.push(task);
    }
    (tasks, synced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;
    use crate::framework::types::objects;

    fn member(name: &str) -> PodBuilder {
        PodBuilder::new(name)
            .namespace("ns")
            .label(POD_GROUP_LABEL, "g")
    }

    /// The members index raises an unscheduled-pod add for a pending pod the first time it holds
    /// it, so a sibling rejected before the index caught up is requeued (Coscheduling's hint
    /// matches the group); updates, bound members and pods outside a group raise nothing.
    #[test]
    fn a_pending_pod_joining_a_group_is_an_unscheduled_pod_added() {
        let members = PodGroupMembers::default();
        let (old, new) = Store::apply(&members, member("a").build()).expect("an event");
        assert!(old.is_none());
        let object = members.event_object(new.expect("the new member"));
        let (_, added) = objects::<PodObject>(None, Some(&object)).expect("a PodObject");
        assert!(matches!(added, Some(PodObject::Unscheduled(p)) if p.name() == "a"));
        assert_eq!(
            Informer::PodGroupMembers.event_resource(),
            Some(EventResource::UnscheduledPod)
        );

        assert!(Store::apply(&members, member("a").build()).is_none());
        assert!(Store::apply(&members, member("b").node("n1").build()).is_none());
        assert!(Store::apply(&members, PodBuilder::new("c").namespace("ns").build()).is_none());
        assert_eq!(members.members("ns", "g").len(), 2);
    }
}
