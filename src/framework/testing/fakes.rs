//! A configurable fake plugin, a recording handle and small profiles, for runtime tests.

use std::sync::Arc;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::config::ExtensionPoint;
use crate::framework::api_calls::RecordingApi;
use crate::framework::interface::{
    BindPlugin, Code, CycleState, FilterPlugin, NodeScore, PermitPlugin, Plugin, PostBindPlugin,
    PreBindPlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, QueueSortPlugin,
    ReservePlugin, ScorePlugin, Status,
};
use crate::framework::registry::{Handle, PluginRegistration, Registry};
use crate::framework::types::{NodeInfo, PodInfo, QueuedPodInfo, Snapshot};

/// A plugin whose behaviour at each point is set per test; every call is logged.
#[derive(Default)]
pub struct Fake {
    pub name: String,
    /// PreFilter: (result node names, code).
    pub pre_filter: Option<(Option<Vec<String>>, Code)>,
    /// Filter: node name -> (code, reason); absent nodes pass.
    pub filter: HashMap<String, (Code, String)>,
    pub pre_score: Option<Code>,
    /// Score: node name -> score (absent: 0).
    pub score: HashMap<String, i64>,
    /// Normalize: multiply every score by this factor.
    pub normalize_factor: Option<i64>,
    pub reserve: Option<Code>,
    pub permit: Option<(Code, Duration)>,
    pub bind: Option<Code>,
    /// PreBindPreFlight's code (absent: Success).
    pub pre_bind_pre_flight: Option<Code>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    pub fn new(name: &str, log: &Arc<Mutex<Vec<String>>>) -> Fake {
        Fake {
            name: name.to_string(),
            log: log.clone(),
            ..Default::default()
        }
    }

    fn record(&self, what: &str) {
        self.log.lock().push(format!("{}.{what}", self.name));
    }
}

impl Plugin for Fake {
    fn name(&self) -> &str {
        &self.name
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for Fake {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        a.timestamp < b.timestamp
    }
}

impl PreFilterPlugin for Fake {
    fn pre_filter(
        &self,
        _s: &mut CycleState,
        _p: &PodInfo,
        _snap: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        self.record("PreFilter");
        match &self.pre_filter {
            None => (None, Status::success()),
            Some((names, code)) => (
                names
                    .as_ref()
                    .map(|n| PreFilterResult::nodes(n.iter().cloned())),
                Status::new(
                    *code,
                    if *code == Code::Success || *code == Code::Skip {
                        ""
                    } else {
                        "prefilter says no"
                    },
                ),
            ),
        }
    }
}

impl FilterPlugin for Fake {
    fn filter(&self, _s: &CycleState, _p: &PodInfo, node: &NodeInfo) -> Status {
        match self.filter.get(node.name()) {
            Some((code, reason)) => Status::new(*code, reason.clone()),
            None => Status::success(),
        }
    }
}

impl PreScorePlugin for Fake {
    fn pre_score(
        &self,
        _s: &mut CycleState,
        _p: &PodInfo,
        _snap: &Snapshot,
        _n: &[Arc<NodeInfo>],
    ) -> Status {
        Status::code_only(self.pre_score.unwrap_or(Code::Success))
    }
}

impl ScorePlugin for Fake {
    fn score(&self, _s: &CycleState, _p: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.score.get(node.name()).copied().unwrap_or(0))
    }
    fn has_normalize_score(&self) -> bool {
        self.normalize_factor.is_some()
    }
    fn normalize_score(&self, _s: &CycleState, _p: &PodInfo, scores: &mut [NodeScore]) -> Status {
        for s in scores {
            s.score *= self.normalize_factor.unwrap_or(1);
        }
        Status::success()
    }
}

impl ReservePlugin for Fake {
    fn reserve(&self, _s: &mut CycleState, _p: &PodInfo, _n: &str) -> Status {
        self.record("Reserve");
        Status::new(self.reserve.unwrap_or(Code::Success), "reserve failed")
    }
    fn unreserve(&self, _s: &mut CycleState, _p: &PodInfo, _n: &str) {
        self.record("Unreserve");
    }
}

impl PermitPlugin for Fake {
    fn permit(&self, _s: &mut CycleState, _p: &PodInfo, _n: &str) -> (Status, Duration) {
        let (code, d) = self.permit.unwrap_or((Code::Success, Duration::ZERO));
        (
            Status::new(
                code,
                if code == Code::Unschedulable {
                    "permit denied"
                } else {
                    ""
                },
            ),
            d,
        )
    }
}

#[async_trait]
impl PreBindPlugin for Fake {
    fn pre_bind_pre_flight(&self, _s: &CycleState, _p: &PodInfo, _n: &str) -> Status {
        self.record("PreBindPreFlight");
        Status::code_only(self.pre_bind_pre_flight.unwrap_or(Code::Success))
    }

    async fn pre_bind(&self, _s: &CycleState, _p: &PodInfo, _n: &str) -> Status {
        self.record("PreBind");
        Status::success()
    }
}

#[async_trait]
impl BindPlugin for Fake {
    async fn bind(&self, _s: &CycleState, _p: &PodInfo, _n: &str) -> Status {
        self.record("Bind");
        Status::code_only(self.bind.unwrap_or(Code::Skip))
    }
}

#[async_trait]
impl PostBindPlugin for Fake {
    async fn post_bind(&self, _s: &CycleState, _p: &PodInfo, _n: &str) {
        self.record("PostBind");
    }
}

/// Registers `fakes` (all extension points) into a copy of the in-tree registry; counts factory
/// calls in the returned counter.
pub fn registry_with(fakes: Vec<Fake>) -> (Registry, Arc<AtomicUsize>) {
    let mut r = Registry::in_tree();
    let calls = Arc::new(AtomicUsize::new(0));
    for f in fakes {
        let name = f.name.clone();
        let plugin: Arc<dyn Plugin> = Arc::new(f);
        let c = calls.clone();
        let reg = PluginRegistration::new(
            &ExtensionPoint::ALL,
            crate::framework::args::no_args,
            move |_, _| {
                c.fetch_add(1, Ordering::Relaxed);
                Ok(plugin.clone())
            },
        );
        if r.register(name, reg).is_err() {
            panic!("duplicate fake");
        }
    }
    (r, calls)
}

/// A test handle recording API calls.
pub fn handle() -> (Handle, Arc<RecordingApi>) {
    let api = Arc::new(RecordingApi::default());
    (Handle::new(api.clone()), api)
}

/// A profile with the given plugins per extension point (weight 1 for score), plus PrioritySort
/// and DefaultBinder so it is valid.
pub fn profile(points: &[(ExtensionPoint, &[&str])]) -> crate::framework::runtime::ProfileSpec {
    let mut spec = crate::framework::runtime::ProfileSpec {
        scheduler_name: "test".into(),
        ..Default::default()
    };
    spec.plugins
        .insert(ExtensionPoint::QueueSort, vec![("PrioritySort".into(), 0)]);
    spec.plugins
        .insert(ExtensionPoint::Bind, vec![("DefaultBinder".into(), 0)]);
    for (ep, names) in points {
        let weight = if *ep == ExtensionPoint::Score { 1 } else { 0 };
        spec.plugins
            .insert(*ep, names.iter().map(|n| (n.to_string(), weight)).collect());
    }
    spec
}
