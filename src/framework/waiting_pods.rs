//! Pods that a Permit plugin asked to wait: plugins (or the scheduler) allow or reject them; the
//! binding cycle awaits the outcome, bounded by each waiting plugin's timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::interface::{Code, Status};
use super::types::PodInfo;

/// Formats a duration as Go's `time.Duration.String()` does (`10s`, `1m30s`, `1.5s`, `250ms`),
/// for messages that must read like upstream's.
pub(crate) fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = d.as_secs();
    let h = total_secs / 3600;
    let m = (total_secs % 3600) / 60;
    let s_nanos = nanos - u128::from(h * 3600 + m * 60) * 1_000_000_000;
    let secs = format!("{}s", trim_fraction(s_nanos, 1_000_000_000));
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

fn trim_fraction(v: u128, unit: u128) -> String {
    let whole = v / unit;
    let frac = v % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let f = format!("{frac:0width$}");
    format!("{whole}.{}", f.trim_end_matches('0'))
}

struct WaitState {
    /// Plugin -> (deadline, the wait it asked for).
    pending: HashMap<String, (Instant, Duration)>,
    outcome: Option<Status>,
}

/// One pod waiting at Permit.
pub struct WaitingPod {
    pod: Arc<PodInfo>,
    state: Mutex<WaitState>,
    notify: Notify,
}

impl std::fmt::Debug for WaitingPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingPod")
            .field("pod", &self.pod.key())
            .finish()
    }
}

impl WaitingPod {
    /// A pod waiting for each plugin in `plugins` for at most its duration.
    pub fn new(pod: Arc<PodInfo>, plugins: HashMap<String, Duration>) -> WaitingPod {
        let now = Instant::now();
        let pending = plugins
            .into_iter()
            .map(|(p, d)| (p, (now + d, d)))
            .collect();
        WaitingPod {
            pod,
            state: Mutex::new(WaitState {
                pending,
                outcome: None,
            }),
            notify: Notify::new(),
        }
    }

    pub fn pod(&self) -> &Arc<PodInfo> {
        &self.pod
    }

    /// The plugins the pod still waits for.
    pub fn pending_plugins(&self) -> Vec<String> {
        let mut v: Vec<String> = self.state.lock().pending.keys().cloned().collect();
        v.sort();
        v
    }

    /// Allowed (success) or rejected, once decided; `None` while the pod still waits.
    pub fn outcome(&self) -> Option<Status> {
        self.state.lock().outcome.clone()
    }

    /// `plugin` lets the pod go; when no plugin is left, the pod is allowed.
    pub fn allow(&self, plugin: &str) {
        let mut st = self.state.lock();
        st.pending.remove(plugin);
        if st.pending.is_empty() && st.outcome.is_none() {
            st.outcome = Some(Status::success());
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Rejects the pod (Unschedulable, attributed to `plugin`).
    pub fn reject(&self, plugin: &str, message: &str) {
        let mut st = self.state.lock();
        if st.outcome.is_none() {
            let mut s = Status::new(Code::Unschedulable, message);
            if !plugin.is_empty() {
                s.set_plugin(plugin);
            }
            st.outcome = Some(s);
            st.pending.clear();
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Waits until the pod is allowed or rejected; a plugin that does not answer in time rejects
    /// it with upstream's message `rejected due to timeout after waiting 10s at plugin X`.
    pub async fn wait(&self) -> Status {
        loop {
            let next_deadline = {
                let st = self.state.lock();
                if let Some(s) = &st.outcome {
                    return s.clone();
                }
                st.pending
                    .iter()
                    .min_by_key(|(_, (deadline, _))| *deadline)
                    .map(|(p, (dl, d))| (p.clone(), *dl, *d))
            };
            match next_deadline {
                // Nothing pending and no outcome: allowed (all plugins answered before we waited).
                None => {
                    self.allow("");
                }
                Some((plugin, deadline, waited)) => {
                    tokio::select! {
                        _ = self.notify.notified() => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            let msg = format!(
                                "rejected due to timeout after waiting {} at plugin {plugin}",
                                go_duration(waited)
                            );
                            self.reject(&plugin, &msg);
                        }
                    }
                }
            }
        }
    }
}

/// The waiting pods of one framework (profile), by pod UID.
#[derive(Debug, Default)]
pub struct WaitingPods {
    pods: Mutex<HashMap<String, Arc<WaitingPod>>>,
}

impl WaitingPods {
    pub fn new() -> WaitingPods {
        WaitingPods::default()
    }

    pub fn add(&self, wp: Arc<WaitingPod>) {
        self.pods.lock().insert(wp.pod().uid().to_string(), wp);
    }

    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.pods.lock().get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.pods.lock().remove(uid)
    }

    /// A copy of the current list (so callbacks may allow/reject without holding the lock).
    pub fn list(&self) -> Vec<Arc<WaitingPod>> {
        self.pods.lock().values().cloned().collect()
    }

    /// Rejects the waiting pod with `uid` (e.g. it was deleted); whether it was waiting.
    pub fn reject(&self, uid: &str, message: &str) -> bool {
        match self.get(uid) {
            Some(wp) => {
                wp.reject("", message);
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.pods.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn go_durations() {
        for (d, want) in [
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(5), "5µs"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(go_duration(d), want);
        }
    }

    fn wp(plugins: &[(&str, u64)]) -> Arc<WaitingPod> {
        Arc::new(WaitingPod::new(
            PodBuilder::new("p").arc_info(),
            plugins
                .iter()
                .map(|(p, s)| (p.to_string(), Duration::from_millis(*s)))
                .collect(),
        ))
    }

    #[tokio::test]
    async fn allowed_by_all_plugins() {
        let w = wp(&[("A", 60_000), ("B", 60_000)]);
        let w2 = w.clone();
        let h = tokio::spawn(async move { w2.wait().await });
        w.allow("A");
        tokio::task::yield_now().await;
        assert_eq!(w.pending_plugins(), ["B"]);
        w.allow("B");
        let s = h.await.expect("join");
        assert!(s.is_success());
    }

    #[tokio::test]
    async fn rejected_and_timed_out() {
        let w = wp(&[("A", 60_000)]);
        w.reject("A", "no");
        let s = w.wait().await;
        assert_eq!(
            (s.code(), s.message(), s.plugin()),
            (Code::Unschedulable, "no".to_string(), Some("A"))
        );

        let w = wp(&[("A", 60_000), ("B", 20)]);
        let s = w.wait().await;
        assert_eq!(
            s.message(),
            "rejected due to timeout after waiting 20ms at plugin B"
        );
        assert_eq!(s.plugin(), Some("B"));
    }

    #[test]
    fn map_operations() {
        let m = WaitingPods::new();
        let w = wp(&[("A", 10)]);
        m.add(w.clone());
        assert_eq!(m.len(), 1);
        assert!(m.get("p").is_some());
        assert!(m.reject("p", "removed"));
        assert!(!m.reject("q", "removed"));
        assert!(m.remove("p").is_some());
        assert!(m.is_empty());
    }
}
