//! Watches nodes and pods and feeds the cache and the queue, as upstream's event handlers do:
//! assigned pods go to the cache, pending pods of our profiles to the queue, and the cluster events
//! that can make a pending pod schedulable (node added or changed, an assigned pod gone) move the
//! unschedulable pool back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
use crate::framework::listers::{Informer, Listers, ObjectStore, PodGroupMembers};
use crate::framework::types::PodInfo;

/// `ns/name`, the key the cache and the queue use.
pub fn pod_key(pod: &Pod) -> String {
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

/// Upstream's `isPodUpdated`: a change that can alter the scheduling decision (not a status or
/// resourceVersion bump, such as our own PodScheduled condition). The names of the ResourceClaims
/// generated for the pod are such a change (upstream's `UpdatePodGeneratedResourceClaim`).
fn scheduling_relevant_change(old: &Pod, new: &Pod) -> bool {
    fn claim_statuses(p: &Pod) -> Option<&Vec<k8s_openapi::api::core::v1::PodResourceClaimStatus>> {
        p.status.as_ref()?.resource_claim_statuses.as_ref()
    }
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || claim_statuses(old) != claim_statuses(new)
}

/// Whether a node change can make pending pods fit (not a heartbeat).
fn node_relevant_change(old: &Node, new: &Node) -> bool {
    let alloc = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    let images = |n: &Node| n.status.as_ref().and_then(|s| s.images.clone());
    let features = |n: &Node| n.status.as_ref().and_then(|s| s.declared_features.clone());
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || alloc(old) != alloc(new)
        || images(old) != images(new)
        || features(old) != features(new)
}

/// Routes pod events; `profiles` are the scheduler names this process serves. Pods are kept trimmed
/// to what scheduling reads (`trim::trim_pod`, `trim::assigned_pod`).
pub struct PodHandler {
    pub cache: Arc<Cache>,
    pub queue: Arc<SchedulingQueue>,
    pub profiles: HashSet<String>,
    known: HashMap<String, KnownPod>,
}

/// What the handler remembers of a pod it has seen: a pending pod whole (its next update is
/// compared against it), an assigned one only as such (the cache keeps it).
enum KnownPod {
    Pending(Arc<Pod>),
    Assigned,
}

impl PodHandler {
    pub fn new(cache: Arc<Cache>, queue: Arc<SchedulingQueue>, profiles: HashSet<String>) -> Self {
        Self {
            cache,
            queue,
            profiles,
            known: HashMap::new(),
        }
    }

    pub fn apply(&mut self, mut pod: Pod) {
        let key = pod_key(&pod);
        let node = node_name(&pod).to_string();
        if !node.is_empty() {
            self.known.insert(key.clone(), KnownPod::Assigned);
            self.queue.delete(&key);
            self.cache
                .add_or_update_pod(&node, Arc::new(assigned_pod(pod)));
            return;
        }
        trim_pod(&mut pod);
        let pod = Arc::new(pod);
        let old = match self
            .known
            .insert(key.clone(), KnownPod::Pending(pod.clone()))
        {
            Some(KnownPod::Pending(old)) => Some(old),
            _ => None,
        };
        if !self.profiles.contains(scheduler_name(&pod)) {
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            self.queue.delete(&key);
            return;
        }
        let info = Arc::new(PodInfo::new(pod.clone()));
        match old {
            None => self.queue.add(info),
            Some(old) => self
                .queue
                .update(info, scheduling_relevant_change(&old, &pod)),
        }
    }

    pub fn delete(&mut self, key: &str) {
        let Some(old) = self.known.remove(key) else {
            return;
        };
        if let KnownPod::Pending(_) = old {
            self.queue.delete(key);
        } else {
            self.cache.remove_pod(key);
            // Resources were freed: pending pods may fit now.
            self.queue.move_all_to_active_or_backoff();
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
pub async fn watch_pods(client: Client, mut handler: PodHandler, synced: watch::Sender<bool>) {
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
            Err(err) => warn!(%err, "pod watch failed; retrying with backoff"),
        }
    }
}

/// Watches nodes into the cache; node additions and relevant changes move the unschedulable pool.
pub async fn watch_nodes(
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
        let name = node.metadata.name.clone().unwrap_or_default();
        trim_metadata(&mut node);
        let node = Arc::new(node);
        let relevant = known
            .get(&name)
            .is_none_or(|old| node_relevant_change(old, &node));
        known.insert(name, node.clone());
        if relevant {
            cache.add_node(node);
            queue.move_all_to_active_or_backoff();
        }
    };
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(node))) => apply(node, &mut known),
            Ok(Some(Event::Delete(node))) => {
                let name = node.metadata.name.unwrap_or_default();
                known.remove(&name);
                cache.remove_node(&name);
            }
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
                    known.remove(&name);
                    cache.remove_node(&name);
                }
                seen.clear();
                let _ = synced.send(true);
                debug!("node informer synced");
            }
            Ok(None) => return,
            Err(err) => warn!(%err, "node watch failed; retrying with backoff"),
        }
    }
}

/// A store an informer fills (an [`ObjectStore`], or the index of PodGroup members).
trait Store<K>: Send + Sync {
    /// Adds or updates `obj`; whether pending pods may fit now (the unschedulable pool moves).
    fn apply(&self, obj: K) -> bool;
    /// Removes `obj`; whether pending pods may fit now.
    fn delete(&self, obj: &K) -> bool;
    /// Replaces everything (after a re-list).
    fn replace(&self, objs: Vec<K>);
}

/// Any change may make a pending pod schedulable (a claim bound, a PodGroup created).
impl<K: kube::Resource + Send + Sync> Store<K> for ObjectStore<K> {
    fn apply(&self, obj: K) -> bool {
        ObjectStore::apply(self, obj);
        true
    }

    fn delete(&self, obj: &K) -> bool {
        ObjectStore::delete(self, &ObjectStore::<K>::key_of(obj));
        true
    }

    fn replace(&self, objs: Vec<K>) {
        ObjectStore::replace(self, objs);
    }
}

/// A group's pending members may pass Coscheduling's PreFilter once another member joins; a
/// member's status change alone helps none of them.
impl Store<Pod> for PodGroupMembers {
    fn apply(&self, pod: Pod) -> bool {
        PodGroupMembers::apply(self, pod)
    }

    fn delete(&self, pod: &Pod) -> bool {
        PodGroupMembers::delete(self, &pod_key(pod))
    }

    fn replace(&self, pods: Vec<Pod>) {
        PodGroupMembers::replace(self, pods);
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

/// Watches one extra kind into its store. Any change may make a pending pod schedulable (a claim
/// bound, a PodGroup created), so it moves the unschedulable pool back.
async fn watch_store<K>(
    api: Api<K>,
    listers: Arc<Listers>,
    store: fn(&Listers) -> &ObjectStore<K>,
    queue: Arc<SchedulingQueue>,
    synced: watch::Sender<bool>,
) where
    K: Watched,
{
    let config = watcher::Config::default();
    watch_store_with(api, config, listers, store, queue, synced).await
}

/// Watches what `config` selects into a store, moving the unschedulable pool when the store says
/// a change may help pending pods.
async fn watch_store_with<K, S>(
    api: Api<K>,
    config: watcher::Config,
    listers: Arc<Listers>,
    store: fn(&Listers) -> &S,
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
                if store(&listers).apply(obj) {
                    queue.move_all_to_active_or_backoff();
                }
            }
            Ok(Some(Event::Delete(obj))) => {
                if store(&listers).delete(&obj) {
                    queue.move_all_to_active_or_backoff();
                }
            }
            Ok(Some(Event::Init)) => initial.clear(),
            Ok(Some(Event::InitApply(mut obj))) => {
                trim_metadata(&mut obj);
                initial.push(obj);
            }
            Ok(Some(Event::InitDone)) => {
                store(&listers).replace(std::mem::take(&mut initial));
                queue.move_all_to_active_or_backoff();
                let _ = synced.send(true);
            }
            Ok(None) => return,
            Err(err) => {
                let kind = K::kind(&Default::default()).into_owned();
                warn!(%err, "{kind} watch failed; retrying with backoff")
            }
        }
    }
}

/// Starts a watcher per informer kind; each returned receiver turns true once its first list is in.
pub fn start_informers(
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
        let (c, l, q) = (client.clone(), listers.clone(), queue.clone());
        let task = match informer {
            Informer::PersistentVolumes => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.persistent_volumes,
                q,
                tx,
            )),
            Informer::PersistentVolumeClaims => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.persistent_volume_claims,
                q,
                tx,
            )),
            Informer::StorageClasses => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.storage_classes, q, tx))
            }
            Informer::CSINodes => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.csi_nodes, q, tx))
            }
            Informer::CSIDrivers => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.csi_drivers, q, tx))
            }
            Informer::CSIStorageCapacities => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.csi_storage_capacities,
                q,
                tx,
            )),
            Informer::PodDisruptionBudgets => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.pod_disruption_budgets,
                q,
                tx,
            )),
            Informer::Namespaces => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.namespaces, q, tx))
            }
            Informer::PodGroups => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.pod_groups, q, tx))
            }
            // Every phase: a group's Succeeded and Failed members count too.
            Informer::PodGroupMembers => tokio::spawn(watch_store_with(
                Api::all(c),
                watcher::Config::default().labels(POD_GROUP_LABEL),
                l,
                |l| &l.pod_group_members,
                q,
                tx,
            )),
            Informer::Services => tokio::spawn(watch_store(Api::all(c), l, |l| &l.services, q, tx)),
            Informer::ReplicationControllers => tokio::spawn(watch_store(
                Api::all(c),
                l,
                |l| &l.replication_controllers,
                q,
                tx,
            )),
            Informer::ReplicaSets => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.replica_sets, q, tx))
            }
            Informer::StatefulSets => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.stateful_sets, q, tx))
            }
            Informer::ResourceClaims => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.resource_claims, q, tx))
            }
            Informer::ResourceSlices => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.resource_slices, q, tx))
            }
            Informer::DeviceClasses => {
                tokio::spawn(watch_store(Api::all(c), l, |l| &l.device_classes, q, tx))
            }
        };
        tasks.push(task);
    }
    (tasks, synced)
}
