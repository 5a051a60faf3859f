//! Watches nodes, pods and the kinds the enabled plugins declared, and feeds the cache and the
//! queue, as upstream's event handlers do: assigned pods go to the cache, pending pods of our
//! profiles to the queue, and every change is handed to the queue as the typed cluster event it
//! is (with its old and new objects), which moves the pods whose rejecting plugins' hints say it
//! may help.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::cache::Cache;
use super::queue::SchedulingQueue;
use super::trim::{assigned_pod, trim_metadata, trim_pod};
use crate::framework::events::{
    EVENT_ASSIGNED_POD_ADD, EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD, EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD, EVENT_UNSCHEDULED_POD_DELETE, EVENT_UNSCHEDULED_POD_UPDATE,
    assigned_pod_scheduling_properties_change, node_scheduling_properties_change,
};
use crate::framework::listers::{EventSink, Informer, Listers, WatchContext};
use crate::framework::types::{ClusterEvent, EventObject, PodInfo, PodObject};
use crate::infra::informer::informer;

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
    pod_kinds: PodKinds,
}

/// The kinds of pods this informer fills ([`WatchedKind::fed_by_pod_informer`]: GangScheduling's
/// members index), each told of a pod before the queue is.
#[derive(Default)]
pub(crate) struct PodKinds {
    listers: Option<Arc<Listers>>,
    kinds: Vec<Informer>,
}

impl PodKinds {
    /// Those of `informers` that the pod informer fills, in `listers`.
    pub(crate) fn new(informers: &BTreeSet<Informer>, listers: Arc<Listers>) -> Self {
        Self {
            listers: Some(listers),
            kinds: informers
                .iter()
                .copied()
                .filter(|k| k.fed_by_pod_informer())
                .collect(),
        }
    }

    fn applied(&self, pod: &Pod) {
        if let Some(listers) = &self.listers {
            for kind in &self.kinds {
                kind.pod_applied(listers, pod);
            }
        }
    }

    fn deleted(&self, key: &str) {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        if let Some(listers) = &self.listers {
            for kind in &self.kinds {
                kind.pod_deleted(listers, namespace, name);
            }
        }
    }
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
            pod_kinds: PodKinds::default(),
        }
    }

    /// Fills `pod_kinds` too.
    pub(crate) fn with_pod_kinds(mut self, pod_kinds: PodKinds) -> Self {
        self.pod_kinds = pod_kinds;
        self
    }

    pub(crate) fn apply(&mut self, mut pod: Pod) {
        self.pod_kinds.applied(&pod);
        let key = pod_key(&pod);
        let node = node_name(&pod).to_string();
        if !node.is_empty() {
            let previous = self.known.insert(key.clone(), KnownPod::Assigned);
            let was_nominated = matches!(previous, Some(KnownPod::Foreign(Some(_))));
            // A pod seen bound before left the queue then; another scheduler's was never in it
            // (and a bound one's nomination must outlive this event, see below).
            if !was_nominated && !matches!(previous, Some(KnownPod::Assigned)) {
                self.queue.delete(&key);
            }
            self.assigned_pod_applied(&node, pod);
            if was_nominated {
                // Another scheduler's pod bound where it was nominated (or elsewhere): its
                // nomination goes once the scheduling cycle's snapshot holds it.
                self.queue.nominator().foreign_bound(&key, &node);
            }
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
        self.pod_kinds.deleted(key);
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
                // A foreign pod's nomination kept after its binding goes with it.
                self.queue.nominator().delete(key);
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
                warn!(err = %crate::infra::logging::watch_error(&err), "pod watch failed; retrying with backoff")
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
                warn!(err = %crate::infra::logging::watch_error(&err), "node watch failed; retrying with backoff")
            }
        }
    }
}

/// The images a node reports (ImageLocality scores them; no plugin requeues pods on them).
fn images(n: &Node) -> Option<&Vec<k8s_openapi::api::core::v1::ContainerImage>> {
    n.status.as_ref().and_then(|s| s.images.as_ref())
}

/// The queue takes every change of a watched kind as the cluster event it is.
impl EventSink for SchedulingQueue {
    fn cluster_event(
        &self,
        event: &ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        let start = Instant::now();
        self.move_all_to_active_or_backoff(event, old, new);
        self.observe_event_handling(event, start);
    }
}

/// Starts the informer of each kind; each returned receiver turns true once its first list is in.
pub(crate) fn start_informers(
    client: &Client,
    informers: &BTreeSet<Informer>,
    listers: &Arc<Listers>,
    queue: &Arc<SchedulingQueue>,
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<watch::Receiver<bool>>) {
    let mut tasks = Vec::new();
    let mut synced = Vec::new();
    for kind in informers.iter().filter(|k| !k.fed_by_pod_informer()) {
        let (tx, rx) = watch::channel(false);
        synced.push(rx);
        let ctx = WatchContext {
            client: client.clone(),
            listers: listers.clone(),
            events: queue.clone(),
            synced: tx,
        };
        tasks.push(tokio::spawn(kind.watch(ctx)));
    }
    (tasks, synced)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use parking_lot::Mutex;

    use super::*;
    use crate::framework::listers::SCHEDULING_GROUP_MEMBERS;
    use crate::framework::registry::PodNominator;
    use crate::framework::testing::{NodeBuilder, PodBuilder};
    use crate::scheduler::queue::{LessFn, PreEnqueueFn};

    const PROFILE: &str = "default-scheduler";

    fn member(name: &str) -> Pod {
        PodBuilder::new(name)
            .namespace("ns")
            .scheduler_name(PROFILE)
            .scheduling_group("g")
            .build()
    }

    /// A gang's PreEnqueue counts its members in the index the pod informer fills: when a
    /// member is queued, the index holds it and every member queued before it, and a deleted
    /// member leaves it at once (a watch of its own could run ahead of the queue or behind it).
    #[test]
    fn the_pod_informer_fills_the_members_index_before_it_queues_the_pod() {
        let listers = Arc::new(Listers::default());
        let counted = Arc::new(Mutex::new(Vec::new()));
        let gate: PreEnqueueFn = {
            let (listers, counted) = (listers.clone(), counted.clone());
            Arc::new(move |pod: &PodInfo| {
                let members = listers.store(&SCHEDULING_GROUP_MEMBERS).members("ns", "g");
                counted.lock().push((pod.name().to_string(), members.len()));
                None
            })
        };
        let less: LessFn = Arc::new(|a, b| a.timestamp < b.timestamp);
        let queue = Arc::new(SchedulingQueue::new(
            less,
            gate,
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
        let informers: BTreeSet<Informer> = BTreeSet::from([&SCHEDULING_GROUP_MEMBERS as Informer]);
        let mut handler = PodHandler::new(
            Arc::new(Cache::default()),
            queue,
            HashSet::from([PROFILE.to_string()]),
        )
        .with_pod_kinds(PodKinds::new(&informers, listers.clone()));

        handler.apply(member("a"));
        handler.apply(member("b"));
        let seen: Vec<(String, usize)> = counted.lock().clone();
        assert_eq!(seen, [("a".to_string(), 1), ("b".to_string(), 2)]);

        handler.delete("ns/a");
        let left = listers.store(&SCHEDULING_GROUP_MEMBERS).members("ns", "g");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].metadata.name.as_deref(), Some("b"));
    }

    /// Another scheduler's preemptor, seen nominated and then bound, keeps its room until a
    /// snapshot holds it on its node: a cycle whose snapshot predates the binding sees it there
    /// as nominated, a later one as bound, and none in neither place.
    #[test]
    fn another_schedulers_bound_preemptor_keeps_its_room_until_a_snapshot_holds_it() {
        let less: LessFn = Arc::new(|a, b| a.timestamp < b.timestamp);
        let queue = Arc::new(SchedulingQueue::new(
            less,
            Arc::new(|_: &PodInfo| None),
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
        let cache = Arc::new(Cache::default());
        cache.add_node(Arc::new(NodeBuilder::new("n1").build()));
        let mut handler = PodHandler::new(
            cache.clone(),
            queue.clone(),
            HashSet::from([PROFILE.to_string()]),
        );
        let preemptor = || {
            PodBuilder::new("preemptor")
                .namespace("ns")
                .scheduler_name("other-scheduler")
                .priority(1000)
        };
        let key = "ns/preemptor";
        let nominated = |q: &SchedulingQueue| {
            q.nominator()
                .nominated_pods_for_node("n1")
                .iter()
                .any(|p| p.key() == key)
        };
        handler.apply(preemptor().nominated_node("n1").build());
        assert!(nominated(&queue));
        let mut before = crate::framework::types::Snapshot::default();
        cache.update_snapshot(&mut before);

        handler.apply(preemptor().nominated_node("n1").node("n1").build());
        // Its next update (the kubelet's status) comes as fast.
        handler.apply(preemptor().nominated_node("n1").node("n1").build());
        assert!(nominated(&queue), "dropped before a snapshot holds it");
        queue
            .nominator()
            .retire_bound(|node, uid| before.get(node).is_some_and(|n| n.holds(uid)));
        assert!(nominated(&queue), "retired by a snapshot without it");

        let mut after = crate::framework::types::Snapshot::default();
        cache.update_snapshot(&mut after);
        assert!(after.get("n1").is_some_and(|n| n.holds("preemptor")));
        queue
            .nominator()
            .retire_bound(|node, uid| after.get(node).is_some_and(|n| n.holds(uid)));
        assert!(!nominated(&queue));
    }

    /// The informers started for a profile leave out the kinds the pod informer fills: a second
    /// watch of every pod would cost a list of the cluster's pods and could disagree with it.
    #[tokio::test]
    async fn a_kind_the_pod_informer_fills_has_no_informer_of_its_own() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let informers: BTreeSet<Informer> = BTreeSet::from([
            &SCHEDULING_GROUP_MEMBERS as Informer,
            &crate::framework::listers::POD_GROUP_MEMBERS,
        ]);
        let queue = Arc::new(SchedulingQueue::new(
            Arc::new(|a, b| a.timestamp < b.timestamp),
            Arc::new(|_: &PodInfo| None),
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
        let (tasks, synced) =
            start_informers(&client, &informers, &Arc::new(Listers::default()), &queue);
        assert_eq!(
            (tasks.len(), synced.len()),
            (1, 1),
            "only Coscheduling's index watches"
        );
        tasks.iter().for_each(|t| t.abort());
    }
}
