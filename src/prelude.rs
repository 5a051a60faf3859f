//! What a plugin author needs, in one `use`: `use ksched::prelude::*;`.
//!
//! A plugin is written once, in four pieces (see `examples/custom_plugin.rs`):
//!
//! 1. a type implementing the extension-point traits it uses ([`ScorePlugin`], [`FilterPlugin`],
//!    ...), and [`impl_plugin!`] to implement [`Plugin`] for it (its name, the `as_*`
//!    accessors of those points, and an `EXTENSION_POINTS` constant for its registration); a
//!    plugin that rejects pods also implements [`EnqueueExtensions`] (the cluster events, with a
//!    [`QueueingHint`] each, that may make them schedulable);
//! 2. its args, if any: a serde struct implementing [`PluginArgs`] (strict decoding with
//!    [`decode`], defaults, validation errors naming the field: [`required`], [`invalid`], ...;
//!    defaults or validation that depend on the emulated Kubernetes minor or a feature gate:
//!    [`PluginArgs::set_defaults_at`], [`PluginArgs::validate_at`] and
//!    [`PluginRegistration::with_emulated_args`]); the factory reads the [`Emulation`] the
//!    scheduler runs as from [`Handle::emulation`];
//! 3. a factory `Fn(&Value, &Handle) -> Result<Arc<dyn Plugin>, PluginError>` that reads its args
//!    back ([`typed`]) and builds it; `?` turns an args or `String` error into a [`PluginError`];
//! 4. a [`PluginRegistration`] (extension points, args decoder, factory; the informers, RBAC
//!    rules and metrics it declares) registered under the plugin's name into
//!    [`Registry::in_tree`], which a binary hands to [`ksched_main`] (the whole `ksched` command
//!    line with its plugins: a SchedulerProfile may then name them) or [`main_with_registry`] (the
//!    scheduler alone) — the Rust form of kube-scheduler's `app.WithPlugin`.
//!
//! With the crate's `testing` feature (`ksched = { version = "…", features = ["testing"] }` in
//! `[dev-dependencies]`), [`testing`] has the builders the in-tree plugins' tests use:
//! `PodBuilder`, `NodeBuilder`, snapshots (`snapshot_of`, `snapshot_with`), a recording
//! [`Handle`] (`handle()`), score helpers (`score_nodes`) and queueing-hint helpers.

pub use crate::cli::main as ksched_main;
pub use crate::config::{ExtensionPoint, FieldError};
pub use crate::emulation::{Emulation, Minor};
pub use crate::framework::args::{
    PluginArgs, decode, decode_at, duplicate, forbidden, invalid, no_args, not_supported, required,
    typed,
};
pub use crate::framework::background::{BackgroundTask, TaskContext};
pub use crate::framework::interface::{
    BindPlugin, ClusterEventWithHint, Code, CycleState, EnqueueExtensions, FilterPlugin,
    FrameworkHandle, GroupInCycle, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore, PermitPlugin,
    Placement, PlacementAssignments, PlacementFeasiblePlugin, PlacementGeneratePlugin,
    PlacementProgress, PlacementScorePlugin, Plugin, PodGroupPlacement, PodGroupPostFilterPlugin,
    PodGroupPostFilterResult, PostBindPlugin, PostFilterPlugin, PostFilterResult, PreBindPlugin,
    PreEnqueuePlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    ProposedAssignment, QueueSortPlugin, ReservePlugin, ScorePlugin, SignFragment, SignPlugin,
    Status, signer_names,
};
pub use crate::framework::listers::{Informer, Kind, Listers, ObjectStore, Store, WatchedKind};
pub use crate::framework::registry::{
    Counter, FloatGauge, Handle, MetricDeclaration, MetricKind, PluginError, PluginRegistration,
    Registry, RegistryError, policy_rule,
};
pub use crate::framework::types::{
    ActionType, ClusterEvent, EventObject, EventResource, NodeInfo, PodInfo, QueueingHint, Snapshot,
};
pub use crate::impl_plugin;
pub use crate::scheduler::command::{SchedulerArgs, main_with_registry};
/// The normalized args a factory receives.
pub use serde_json::Value;

/// Builders for plugin tests (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub use crate::framework::testing;
