//! Opportunistic batching (upstream 1.35+, KEP-5598, feature gate `OpportunisticBatching`, on by
//! default): consecutive pods with the same scheduling signature share their Filter and Score work,
//! with decisions identical to scheduling each pod in full.
//!
//! Upstream keeps the previous pod's sorted scores and hands the next identical pod the runner-up
//! as a hint, after checking that the node it just used no longer fits; Filter runs on the hint
//! only. That reuse is exact only in part: with `percentageOfNodesToScore` the next pod would have
//! searched other nodes, NormalizeScore over fewer nodes may reorder them, ties fall differently,
//! and cluster changes in the 500 ms a batch lives are not seen. ksched reuses the same work, a
//! node at a time, under conditions that make it exact:
//!
//! - A pod's [`PodSignature`] is built from every PreFilter, Filter, PreScore and Score plugin's
//!   [`SignPlugin`](super::interface::SignPlugin) fragments, plus its scheduler name, namespace and
//!   priority. A plugin that does not sign (an out-of-tree plugin that says nothing, Coscheduling,
//!   NetworkTraffic) turns batching off for its profile, as do extenders; a plugin that cannot
//!   sign a pod (InterPodAffinity or PodTopologySpread constraints, DRA claims, unbound volume
//!   claims, ReadWriteOncePod claims) makes that pod's cycle run in full.
//! - The batch remembers, per node, the Filter status and the raw (not yet normalized) scores it
//!   computed for the signature, with the node's generation. A later cycle of the same signature
//!   reuses them for every node that has not changed since, and runs the plugins on the nodes that
//!   did (the node the previous pod went to, above all). PreFilter and PreScore run every cycle,
//!   the search from the rotating start index, NormalizeScore and host selection too: the cycle is
//!   the unbatched one with pure per-node results looked up instead of recomputed.
//! - Results are kept only while nothing they may depend on beyond their own node has changed:
//!   the batch is dropped when another pod was scheduled in between (any profile), the previous
//!   cycle ended in an error, the signature differs, a node was added, removed or its object
//!   changed, pods with affinity terms changed anywhere, a volume, storage, namespace or DRA object
//!   changed, or some pod is nominated to a node.
//!
//! - A pod group's members tried in one placement (topology-aware scheduling) batch among
//!   themselves, as upstream's do: the placement is part of the [`World`], so its positions
//!   never serve another placement's list.
//!
//! Where upstream drops its batch because the node just used still fits the next pod
//! (`node_not_full`), ksched rescores that node and goes on: pods that share nodes batch too.
//! Metrics use upstream's names and labels; of the flush reasons, upstream's `node_missing`,
//! `node_not_full`, `empty_list` and `expired` never occur, `cluster_changed` is ksched's own, and
//! a flush is counted only when there was a batch to drop (upstream also counts
//! `pod_not_batchable` for an unsignable pod when it had none).

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::interface::{Code, Plugin, PodSignature, SignFragment, Status, signer_names};
use super::metrics::{
    BatchAttemptLabels, BatchFlushLabels, FrameworkMetrics, NodeHintLabels, ProfileLabels,
};
use super::registry::Handle;
use super::types::{NodeInfo, PodInfo, Snapshot};

/// Why a batch was dropped: the `reason` of `scheduler_batch_cache_flushed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// Another pod was scheduled since (upstream's `pod_skipped`).
    PodSkipped,
    /// The previous cycle ended in an error (`pod_failed`).
    PodFailed,
    /// The pod's signature differs (`pod_incompatible`).
    PodIncompatible,
    /// The pod cannot be signed (`pod_not_batchable`).
    PodNotBatchable,
    /// ksched's own: something besides the batch's pods changed what Filter or Score may see on
    /// other nodes, or a plugin skipped differently (`cluster_changed`).
    ClusterChanged,
}

impl FlushReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FlushReason::PodSkipped => "pod_skipped",
            FlushReason::PodFailed => "pod_failed",
            FlushReason::PodIncompatible => "pod_incompatible",
            FlushReason::PodNotBatchable => "pod_not_batchable",
            FlushReason::ClusterChanged => "cluster_changed",
        }
    }
}

/// What a cycle made of the batch: the `result` of `scheduler_batch_attempts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// There was no batch to reuse.
    NoHint,
    /// The cycle reused the batch's results.
    HintUsed,
    /// There was a batch, but this cycle could not use it (its pod had a nominated node, a
    /// PreFilter plugin narrowed its nodes, or its plugins skipped differently).
    HintNotUsed,
}

impl AttemptResult {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptResult::NoHint => "no_hint",
            AttemptResult::HintUsed => "hint_used",
            AttemptResult::HintNotUsed => "hint_not_used",
        }
    }
}

/// What one cycle did with its profile's batch, for the scheduler's metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchReport {
    /// Signing the pod: how long, and Success or why not (the `Sign` extension point).
    pub sign: Option<(Duration, Code)>,
    /// Looking for a batch to reuse: whether there was one, and how long it took
    /// (`scheduler_get_node_hint_duration_seconds`).
    pub hint: Option<(bool, Duration)>,
    pub attempt: Option<AttemptResult>,
    pub flushed: Vec<FlushReason>,
    /// Recording the cycle's results (`scheduler_store_schedule_results_duration_seconds`).
    pub store: Option<Duration>,
}

impl BatchReport {
    /// Records the report under upstream's names: `scheduler_batch_attempts_total`,
    /// `scheduler_batch_cache_flushed_total`, `scheduler_get_node_hint_duration_seconds`,
    /// `scheduler_store_schedule_results_duration_seconds` (the Sign extension point's duration
    /// goes with the other extension points, through the framework).
    pub fn record(&self, metrics: &FrameworkMetrics, profile: &str) {
        if let Some(result) = self.attempt {
            metrics
                .batch_attempts
                .get_or_create(&BatchAttemptLabels {
                    profile: profile.into(),
                    result: result.as_str().into(),
                })
                .inc();
        }
        for reason in &self.flushed {
            metrics
                .batch_cache_flushed
                .get_or_create(&BatchFlushLabels {
                    profile: profile.into(),
                    reason: reason.as_str().into(),
                })
                .inc();
        }
        if let Some((hinted, took)) = self.hint {
            metrics
                .get_node_hint_duration
                .get_or_create(&NodeHintLabels {
                    hinted: if hinted { "hint" } else { "no_hint" }.into(),
                    profile: profile.into(),
                })
                .observe(took.as_secs_f64());
        }
        if let Some(took) = self.store {
            metrics
                .store_schedule_results_duration
                .get_or_create(&ProfileLabels {
                    profile: profile.into(),
                })
                .observe(took.as_secs_f64());
        }
    }
}

/// Everything beyond a node itself that its Filter and Score results may depend on, as
/// generations: while they are equal, a node whose own generation is unchanged gives the same
/// results to pods of the same signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    nodes: u64,
    affinity: u64,
    listers: u64,
    nominations: u64,
    num_nodes: usize,
    /// The pod group placement the search is limited to (0: none): a batch's positions are in
    /// the list it searched, so one placement's results never serve another's.
    placement: u64,
}

impl World {
    /// The world of `snapshot` and `handle`'s caches now; `None` while some pod is nominated to a
    /// node (nominated pods count in Filter) or the nominator cannot tell.
    pub fn now(snapshot: &Snapshot, handle: &Handle) -> Option<World> {
        let nominations = match &handle.nominator {
            Some(n) => n.batching_generation()?,
            None => 0,
        };
        Some(World {
            nodes: snapshot.nodes_generation(),
            affinity: snapshot.affinity_generation(),
            listers: handle.listers.generation(),
            nominations,
            num_nodes: snapshot.num_nodes(),
            placement: 0,
        })
    }

    /// The same world, searched within the placement `id` (its `placement`).
    pub fn in_placement(self, id: u64) -> World {
        World {
            placement: id,
            ..self
        }
    }
}

/// The plugins that sign a profile's pods: every PreFilter, Filter, PreScore and Score plugin,
/// once each; `Err` names those that cannot sign (upstream's `computeBatchablePlugins`).
pub fn batchable_plugins<'a>(
    candidates: impl IntoIterator<Item = &'a Arc<dyn Plugin>>,
) -> Result<Vec<Arc<dyn Plugin>>, Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut signers = Vec::new();
    let mut unsupported = Vec::new();
    for p in candidates {
        if !seen.insert(p.name().to_string()) {
            continue;
        }
        if p.as_sign().is_some() {
            signers.push(p.clone());
        } else {
            unsupported.push(p.name().to_string());
        }
    }
    if unsupported.is_empty() {
        Ok(signers)
    } else {
        Err(unsupported)
    }
}

/// The pod's signature from its scheduler name, namespace, priority and every signer's
/// fragments (upstream's `SignPod`); `Err` with the first plugin's reason when one cannot sign.
pub fn sign_pod(pod: &PodInfo, signers: &[Arc<dyn Plugin>]) -> Result<PodSignature, Status> {
    let mut fragments = vec![
        SignFragment::new(signer_names::SCHEDULER_NAME, pod.scheduler_name()),
        SignFragment::new(signer_names::NAMESPACE, pod.namespace()),
        SignFragment::new(signer_names::PRIORITY, pod.priority().to_string()),
    ];
    for p in signers {
        let Some(signer) = p.as_sign() else { continue };
        let mut f = signer
            .sign_pod(pod)
            .map_err(|s| s.with_plugin(p.name().to_string()))?;
        fragments.append(&mut f);
    }
    Ok(PodSignature::from_fragments(fragments))
}

/// One profile's batch: the signature it holds results for, and the results per node.
#[derive(Default)]
pub struct OpportunisticBatch {
    /// The scheduler-wide number of the last cycle of this profile, and whether it ended in an
    /// error.
    last_cycle: Option<(u64, bool)>,
    state: Option<BatchState>,
    memo: Memo,
    report: BatchReport,
    /// Pods scheduled with reused results (for tests, as upstream's `batchedPods`).
    batched_pods: u64,
}

struct BatchState {
    signature: PodSignature,
    world: World,
    /// The plugins PreFilter and PreScore skipped when the results were computed: the same
    /// results come only from the same plugins.
    skip_filter: Option<BTreeSet<Arc<str>>>,
    skip_score: Option<BTreeSet<Arc<str>>>,
}

/// Per-node results by snapshot position. Entries of an older epoch are empty, so dropping the
/// batch allocates and clears nothing.
#[derive(Default)]
struct Memo {
    epoch: u64,
    entries: Vec<Entry>,
    /// Raw scores, `stride` per position (the profile's Score plugins not skipped, in order).
    raw: Vec<i64>,
    stride: usize,
}

#[derive(Default, Clone)]
struct Entry {
    epoch: u64,
    /// The node's generation its Filter status was computed at (0: none).
    filtered: u64,
    status: Status,
    /// The node's generation its raw scores were computed at (0: none).
    scored: u64,
}

impl Memo {
    fn reset(&mut self, num_nodes: usize, stride: usize) {
        self.epoch += 1;
        if self.entries.len() != num_nodes {
            self.entries.resize(num_nodes, Entry::default());
        }
        self.stride = stride;
        self.raw.resize(num_nodes * stride, 0);
    }

    fn entry(&self, pos: usize) -> Option<&Entry> {
        self.entries.get(pos).filter(|e| e.epoch == self.epoch)
    }

    fn entry_mut(&mut self, pos: usize) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let e = self.entries.get_mut(pos)?;
        if e.epoch != epoch {
            *e = Entry {
                epoch,
                ..Entry::default()
            };
        }
        Some(e)
    }
}

impl OpportunisticBatch {
    /// Starts cycle number `cycle` (scheduler-wide, one per pod scheduled) for `pod`: signs it,
    /// drops the batch if it cannot serve this pod, and makes one for the pod's signature when
    /// there is none. `stride` is the profile's number of Score plugins.
    pub fn begin(
        &mut self,
        pod: &PodInfo,
        signers: Option<&[Arc<dyn Plugin>]>,
        cycle: u64,
        world: Option<World>,
        stride: usize,
        num_nodes: usize,
    ) -> BatchCycle<'_> {
        self.report = BatchReport::default();
        let started = Instant::now();
        let signature = signers.map(|s| sign_pod(pod, s));
        if let Some(result) = &signature {
            let code = match result {
                Ok(_) => Code::Success,
                Err(s) => s.code(),
            };
            if let Err(s) = result
                && s.code() == Code::Error
            {
                tracing::error!(pod = %pod.key(), plugin = s.plugin().unwrap_or(""),
                    error = %s.message(), "SignPod failed");
            }
            self.report.sign = Some((started.elapsed(), code));
        }
        let signature = signature.and_then(Result::ok);
        let looked_up = Instant::now();
        let last = self.last_cycle.take();
        let reason = self.state.as_ref().and_then(|state| {
            let Some(sig) = &signature else {
                return Some(FlushReason::PodNotBatchable);
            };
            match last {
                Some((c, _)) if c + 1 != cycle => Some(FlushReason::PodSkipped),
                None => Some(FlushReason::PodSkipped),
                Some((_, true)) => Some(FlushReason::PodFailed),
                Some(_) if *sig != state.signature => Some(FlushReason::PodIncompatible),
                Some(_) if world != Some(state.world) => Some(FlushReason::ClusterChanged),
                Some(_) => None,
            }
        });
        if let Some(reason) = reason {
            self.flush(reason);
        }
        let reusable = self.state.is_some();
        if !reusable && let (Some(signature), Some(world)) = (signature, world) {
            self.state = Some(BatchState {
                signature,
                world,
                skip_filter: None,
                skip_score: None,
            });
            self.memo.reset(num_nodes, stride);
        }
        if signers.is_some() {
            self.report.hint = Some((reusable, looked_up.elapsed()));
            if !reusable {
                self.report.attempt = Some(AttemptResult::NoHint);
            }
        }
        BatchCycle {
            active: self.state.is_some(),
            reusable,
            reused: false,
            world,
            cycle,
            store: Duration::ZERO,
            batch: self,
        }
    }

    fn flush(&mut self, reason: FlushReason) {
        if self.state.take().is_some() {
            self.report.flushed.push(reason);
        }
    }

    /// What the last cycle did with the batch (taken: each cycle reports once).
    pub fn take_report(&mut self) -> BatchReport {
        std::mem::take(&mut self.report)
    }

    /// Pods scheduled with reused results so far.
    pub fn batched_pods(&self) -> u64 {
        self.batched_pods
    }
}

/// One cycle's use of its profile's batch (see [`OpportunisticBatch::begin`]).
pub struct BatchCycle<'a> {
    batch: &'a mut OpportunisticBatch,
    /// Whether results are read and recorded in this cycle.
    active: bool,
    /// Whether the batch held results for this pod when the cycle began.
    reusable: bool,
    /// Whether this cycle used any of them.
    reused: bool,
    world: Option<World>,
    cycle: u64,
    store: Duration,
}

impl BatchCycle<'_> {
    /// Whether per-node results are looked up and recorded in this cycle.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// This cycle cannot use the batch (a nominated node tried first, nodes narrowed by PreFilter):
    /// it neither reads nor records results; the batch stays for the next pod.
    pub fn pass(&mut self) {
        self.active = false;
    }

    /// The plugins PreFilter skipped for this pod: results computed with other plugins are
    /// dropped.
    pub fn pre_filter_skipped(&mut self, skipped: &BTreeSet<Arc<str>>) {
        self.check_skipped(skipped, |s| &mut s.skip_filter);
    }

    /// The plugins PreScore skipped for this pod, likewise.
    pub fn pre_score_skipped(&mut self, skipped: &BTreeSet<Arc<str>>) {
        self.check_skipped(skipped, |s| &mut s.skip_score);
    }

    fn check_skipped(
        &mut self,
        skipped: &BTreeSet<Arc<str>>,
        field: impl Fn(&mut BatchState) -> &mut Option<BTreeSet<Arc<str>>>,
    ) {
        if !self.active {
            return;
        }
        let batch = &mut *self.batch;
        let Some(state) = batch.state.as_mut() else {
            return;
        };
        if field(state).as_ref().is_some_and(|r| r != skipped) {
            // Start over for the same signature, with this cycle's plugins.
            state.skip_filter = None;
            state.skip_score = None;
            batch.report.flushed.push(FlushReason::ClusterChanged);
            let (n, stride) = (batch.memo.entries.len(), batch.memo.stride);
            batch.memo.reset(n, stride);
        }
        *field(state) = Some(skipped.clone());
    }

    /// The Filter status recorded for the node at snapshot position `pos`, if it is still valid.
    pub fn filter_status(&mut self, pos: usize, node: &NodeInfo) -> Option<Status> {
        if !self.active {
            return None;
        }
        let hit = self
            .batch
            .memo
            .entry(pos)
            .filter(|e| e.filtered == node.generation)
            .map(|e| e.status.clone());
        self.reused |= hit.is_some();
        hit
    }

    /// Records the Filter status of the node at `pos`.
    pub fn record_filter_status(&mut self, pos: usize, node: &NodeInfo, status: &Status) {
        if !self.active {
            return;
        }
        let t = Instant::now();
        if let Some(e) = self.batch.memo.entry_mut(pos) {
            e.filtered = node.generation;
            e.status = status.clone();
        }
        self.store += t.elapsed();
    }

    /// The raw scores (one per Score plugin not skipped) recorded for the node at `pos`.
    pub fn raw_scores(&mut self, pos: usize, node: &NodeInfo, len: usize) -> Option<&[i64]> {
        if !self.active || len > self.batch.memo.stride {
            return None;
        }
        let memo = &self.batch.memo;
        let valid = memo.entry(pos).is_some_and(|e| e.scored == node.generation);
        if !valid {
            return None;
        }
        self.reused = true;
        let start = pos * memo.stride;
        memo.raw.get(start..start + len)
    }

    /// Records the raw scores of the node at `pos`.
    pub fn record_raw_scores(&mut self, pos: usize, node: &NodeInfo, row: &[i64]) {
        if !self.active || row.len() > self.batch.memo.stride {
            return;
        }
        let t = Instant::now();
        let start = pos * self.batch.memo.stride;
        let stored = match self.batch.memo.raw.get_mut(start..start + row.len()) {
            Some(slot) => {
                slot.copy_from_slice(row);
                true
            }
            None => false,
        };
        if stored && let Some(e) = self.batch.memo.entry_mut(pos) {
            e.scored = node.generation;
        }
        self.store += t.elapsed();
    }

    /// Ends the cycle. `errored`: it ended in an error (the next pod starts a new batch).
    /// `world`: the world now; results computed while it changed are dropped.
    pub fn finish(self, errored: bool, world: Option<World>) {
        let batch = self.batch;
        batch.last_cycle = Some((self.cycle, errored));
        if batch.state.is_some() && (world.is_none() || world != self.world) {
            batch.flush(FlushReason::ClusterChanged);
        }
        if self.reusable {
            let result = if self.reused {
                AttemptResult::HintUsed
            } else {
                AttemptResult::HintNotUsed
            };
            batch.report.attempt = Some(result);
            if self.reused && !errored {
                batch.batched_pods += 1;
            }
        }
        if self.active {
            batch.report.store = Some(self.store);
        }
    }
}
