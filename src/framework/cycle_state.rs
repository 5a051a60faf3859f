//! `CycleState`: a pod's per-cycle data shared between its extension points (upstream's
//! `pkg/scheduler/framework/cycle_state.go`). Re-exported by [`super::interface`].

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

/// A [`CycleState`] key. A plugin reads with the same literal it wrote with, so the keys are
/// usually the same pointer: equal without comparing the bytes.
#[derive(Clone, Copy, Eq)]
struct StateKey(&'static str);

impl PartialEq for StateKey {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0) || self.0 == other.0
    }
}

impl std::hash::Hash for StateKey {
    /// The length and the last 8 bytes: the keys are a plugin's name after a point's, so their
    /// ends differ, and equal keys still compare in full.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let bytes = self.0.as_bytes();
        let mut tail = [0u8; 8];
        let end = &bytes[bytes.len().saturating_sub(8)..];
        tail[..end.len()].copy_from_slice(end);
        h.write_u64(u64::from_le_bytes(tail) ^ (bytes.len() as u64) << 56);
    }
}

/// Per-pod, per-cycle data shared between a pod's extension points.
///
/// Plugins store their data under a key (by convention `"PreFilter" + plugin name`). Values are
/// `Arc`s, so cloning a `CycleState` (for preemption's what-if simulation, or for nominated pods)
/// is cheap; a plugin that must change a value after cloning uses [`CycleState::get_mut`], which
/// copies it first when it is shared (copy-on-write), so clones never see each other's changes.
#[derive(Clone, Default)]
pub struct CycleState {
    /// Read by several plugins on every node: a fast hash of the static keys, not SipHash.
    data: HashMap<StateKey, Arc<dyn Any + Send + Sync>, foldhash::fast::FixedState>,
    skip_filter_plugins: BTreeSet<Arc<str>>,
    /// `skip_filter_plugins` as bits over the profile's Filter list (bit i: the i-th Filter plugin
    /// is skipped), when the framework that set it could say; Filter runs on every node and
    /// tests a bit instead of comparing names.
    skip_filter_mask: Option<u64>,
    skip_score_plugins: BTreeSet<Arc<str>>,
    skip_pre_bind_plugins: BTreeSet<Arc<str>>,
    num_all_nodes: usize,
    record_plugin_metrics: bool,
}

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&str> = self.data.keys().map(|k| k.0).collect();
        keys.sort();
        f.debug_struct("CycleState")
            .field("keys", &keys)
            .field("skip_filter_plugins", &self.skip_filter_plugins)
            .field("skip_score_plugins", &self.skip_score_plugins)
            .field("skip_pre_bind_plugins", &self.skip_pre_bind_plugins)
            .field("num_all_nodes", &self.num_all_nodes)
            .field("record_plugin_metrics", &self.record_plugin_metrics)
            .finish()
    }
}

impl CycleState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` under `key`, replacing what was there.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(StateKey(key), Arc::new(value));
    }

    /// The value under `key`, if there is one of type `T`.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data
            .get(&StateKey(key))
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// Mutable access to the value under `key`; copies it first when a clone of this state shares it.
    pub fn get_mut<T: Any + Send + Sync + Clone>(&mut self, key: &'static str) -> Option<&mut T> {
        let entry = self.data.get_mut(&StateKey(key))?;
        if !entry.is::<T>() {
            return None;
        }
        if Arc::get_mut(entry).is_none() {
            let copy: T = entry.downcast_ref::<T>()?.clone();
            *entry = Arc::new(copy);
        }
        Arc::get_mut(entry)?.downcast_mut::<T>()
    }

    pub fn delete(&mut self, key: &'static str) {
        self.data.remove(&StateKey(key));
    }

    /// Plugins whose PreFilter returned Skip: their Filter (and PreFilter extensions) do not run.
    pub fn skip_filter_plugins(&self) -> &BTreeSet<Arc<str>> {
        &self.skip_filter_plugins
    }

    pub fn set_skip_filter_plugins(&mut self, plugins: BTreeSet<Arc<str>>) {
        self.skip_filter_plugins = plugins;
        self.skip_filter_mask = None;
    }

    /// [`CycleState::set_skip_filter_plugins`], with the same set as bits over the Filter list of
    /// the framework that runs this cycle.
    pub(crate) fn set_skip_filter_plugins_masked(
        &mut self,
        plugins: BTreeSet<Arc<str>>,
        mask: Option<u64>,
    ) {
        self.skip_filter_plugins = plugins;
        self.skip_filter_mask = mask;
    }

    pub(crate) fn skip_filter_mask(&self) -> Option<u64> {
        self.skip_filter_mask
    }

    /// Plugins whose PreScore returned Skip: their Score does not run.
    pub fn skip_score_plugins(&self) -> &BTreeSet<Arc<str>> {
        &self.skip_score_plugins
    }

    pub fn set_skip_score_plugins(&mut self, plugins: BTreeSet<Arc<str>>) {
        self.skip_score_plugins = plugins;
    }

    /// PreBind plugins whose PreBindPreFlight returned Skip: their PreBind is not called.
    pub fn skip_pre_bind_plugins(&self) -> &BTreeSet<Arc<str>> {
        &self.skip_pre_bind_plugins
    }

    pub fn set_skip_pre_bind_plugins(&mut self, plugins: BTreeSet<Arc<str>>) {
        self.skip_pre_bind_plugins = plugins;
    }

    /// The number of nodes in the snapshot this cycle runs against (set by the runtime before
    /// PreFilter; upstream plugins read it from the snapshot lister).
    pub fn num_all_nodes(&self) -> usize {
        self.num_all_nodes
    }

    pub fn set_num_all_nodes(&mut self, n: usize) {
        self.num_all_nodes = n;
    }

    /// Whether this cycle measures each plugin's duration (upstream samples 10 % of cycles).
    pub fn record_plugin_metrics(&self) -> bool {
        self.record_plugin_metrics
    }

    pub fn set_record_plugin_metrics(&mut self, record: bool) {
        self.record_plugin_metrics = record;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Counter(u32);

    #[test]
    fn cycle_state_keys_match_by_content_whatever_their_address() {
        let mut state = CycleState::new();
        state.write("PreFilterSome", 7u32);
        // The same text at another address: a key built at run time.
        let elsewhere: &'static str = String::from("PreFilterSome").leak();
        assert_eq!(state.read::<u32>(elsewhere), Some(&7));
        assert_eq!(state.read::<u32>("PreFilterOther"), None);
        state.delete(elsewhere);
        assert_eq!(state.read::<u32>("PreFilterSome"), None);
    }

    #[test]
    fn cycle_state_copy_on_write() {
        let mut a = CycleState::new();
        a.write("k", Counter(1));
        let mut b = a.clone();
        if let Some(c) = b.get_mut::<Counter>("k") {
            c.0 = 2;
        }
        assert_eq!(a.read::<Counter>("k"), Some(&Counter(1)));
        assert_eq!(b.read::<Counter>("k"), Some(&Counter(2)));
        // Wrong type: nothing.
        assert!(a.read::<u32>("k").is_none());
        assert!(a.get_mut::<u32>("k").is_none());
        a.delete("k");
        assert!(a.read::<Counter>("k").is_none());
    }
}
