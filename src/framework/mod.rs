//! The embedded scheduling framework core — pure: data in, data out; no I/O, no `kube::Client`.
//!
//! - [`types`]: one module per type: [`types::PodInfo`], [`types::NodeInfo`],
//!   [`types::Resource`] arithmetic, the incrementally updated [`types::Snapshot`], ...
//! - [`interface`]: extension-point traits, [`interface::Status`] and [`interface::Code`],
//!   [`interface::CycleState`], and [`interface::FrameworkHandle`], what the framework running a
//!   profile offers its plugins (upstream's `framework.Handle`).
//! - [`events`]: the cluster events the informers' changes are (upstream's
//!   `NodeSchedulingPropertiesChange` ...) and a profile's [`events::QueueingHintMap`].
//! - [`listers`], [`waiting_pods`], [`extender`]: what plugins read besides the snapshot, pods
//!   waiting at Permit, the extenders' interface.
//! - [`api_calls`]: the API calls plugins make, as values ([`api_calls::ApiCall`]), sent by an
//!   [`api_calls::ApiClient`]: the scheduler's over kube, or the in-memory
//!   [`api_calls::RecordingApi`].
//! - [`background`]: the work plugins do outside the scheduling cycle (their
//!   [`background::BackgroundTask`]s, the [`background::ApiDispatcher`]), which the scheduler
//!   starts.
//! - [`metrics`]: the handles of the metrics the runtime and plugins record (kube-scheduler's
//!   per-extension-point, per-plugin and preemption families).
//! - [`registry`]: plugin name -> factory(args, [`registry::Handle`]); implements the
//!   configuration's `PluginCatalog`. It knows no plugin: the in-tree list is in [`plugins`].
//! - [`args`]: strict args decoding (unknown fields are errors with their path), defaults,
//!   validation.
//! - [`batch`]: opportunistic batching: pods with the same signature share Filter and Score work
//!   with decisions identical to scheduling each in full.
//! - [`runtime`]: [`runtime::Framework`] — one profile's plugins run per extension point with
//!   upstream's semantics.
//! - [`schedule`]: the pure find-nodes-that-fit / prioritize / select-host pipeline and
//!   [`schedule::FitError`] with upstream's message.
//! - [`plugins`]: the in-tree plugins, one module each, and `Registry::in_tree`.
//!
//! The modules form a DAG (a unit test reads their `use`s and fails on a cycle): `types`,
//! `status` and `cycle_state` at the bottom, then `interface` (which re-exports the latter two's
//! `Status`, `Code` and `CycleState`), then `listers`/`waiting_pods`/`extender`/`metrics`,
//! `api_calls`, `background`, `registry`, `batch`, `runtime`, `schedule`, `plugins`. Plugins never
//! name the runtime: preemption runs its profile's plugins through `FrameworkHandle`.
//!
//! A typical scheduling cycle, as `scheduler/` drives it:
//!
//! ```text
//! let fwk = Framework::new(&profile_spec, &Registry::in_tree(), handle)?;
//! let mut state = CycleState::new();
//! match algorithm.schedule_pod(&fwk, &mut state, &pod_info, &snapshot) {
//!     Ok(r) => { assume; fwk.run_reserve_plugins_reserve(..); fwk.run_permit_plugins(..);
//!                (binding cycle, async) fwk.wait_on_permit(..).await; run_pre_bind_plugins;
//!                run_bind_plugins; run_post_bind_plugins }
//!     Err(ScheduleError::Fit(mut e)) => { fwk.run_post_filter_plugins(..);
//!                e.set_post_filter_message(..); report e.to_string() }
//!     Err(other) => { retry with backoff }
//! }
//! ```

pub mod api_calls;
pub mod args;
pub mod background;
pub mod batch;
#[cfg(test)]
mod cycle_io;
mod cycle_state;
pub(crate) mod events;
pub(crate) mod extender;
#[cfg(test)]
mod integration_tests;
pub mod interface;
pub mod listers;
pub mod metrics;
pub mod plugins;
pub mod registry;
pub mod runtime;
pub mod schedule;
mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod types;
pub(crate) mod waiting_pods;
