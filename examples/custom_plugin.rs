//! An out-of-tree plugin: the Rust form of kube-scheduler's
//! `app.NewSchedulerCommand(app.WithPlugin("PreferLabeled", New))`.
//!
//! `PreferLabeled` is a Score plugin that prefers nodes carrying a label (`label`, default
//! `example.com/preferred`): 100 for those nodes, 0 for the others. The binary is the full ksched
//! scheduler with that one plugin added:
//!
//! ```text
//! cargo run --example custom_plugin -- scheduler --config sched.yaml --kubeconfig ~/.kube/config
//! ```
//!
//! with a configuration that enables it like any in-tree plugin:
//!
//! ```yaml
//! apiVersion: kubescheduler.config.k8s.io/v1
//! kind: KubeSchedulerConfiguration
//! profiles:
//! - schedulerName: labeled-scheduler
//!   plugins:
//!     score:
//!       enabled:
//!       - name: PreferLabeled
//!         weight: 10
//!   pluginConfig:
//!   - name: PreferLabeled
//!     args:
//!       label: example.com/preferred
//! ```
//!
//! Everything it uses comes from `ksched::prelude`. Writing a plugin takes four pieces: the plugin
//! value implementing the extension traits it uses, with [`impl_plugin!`] for [`Plugin`] (its name
//! and the `as_*` accessors); its args type implementing [`PluginArgs`] (strict decoding,
//! defaults, validation); a factory building it from its args (errors are [`PluginError`]s); and
//! a [`PluginRegistration`] (extension points, args decoder, factory) added to
//! [`Registry::in_tree`] under the plugin's name.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use ksched::prelude::*;
use serde::{Deserialize, Serialize};

const NAME: &str = "PreferLabeled";

/// `PreferLabeledArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PreferLabeledArgs {
    /// The node label (any value) that makes a node preferred.
    label: String,
}

impl PluginArgs for PreferLabeledArgs {
    const KIND: &'static str = "PreferLabeledArgs";

    fn set_defaults(&mut self) {
        if self.label.is_empty() {
            self.label = "example.com/preferred".into();
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        if self.label.trim().is_empty() {
            return vec![required("label", "a node label key is needed")];
        }
        Vec::new()
    }
}

struct PreferLabeled {
    label: String,
}

impl_plugin!(PreferLabeled, NAME, [Score]);

impl ScorePlugin for PreferLabeled {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let labeled = node.labels().is_some_and(|l| l.contains_key(&self.label));
        Ok(if labeled { MAX_NODE_SCORE } else { 0 })
    }
}

/// The registration: what `app.WithPlugin(name, factory)` carries in Go.
fn registration() -> PluginRegistration {
    PluginRegistration::new(
        PreferLabeled::EXTENSION_POINTS,
        decode::<PreferLabeledArgs>,
        |args, _handle| {
            let args: PreferLabeledArgs = typed(args)?;
            Ok(Arc::new(PreferLabeled { label: args.label }) as Arc<dyn Plugin>)
        },
    )
}

#[derive(Parser)]
#[command(
    name = "custom_plugin",
    about = "ksched's scheduler with the PreferLabeled plugin"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduler (same flags as `ksched scheduler`).
    Scheduler(SchedulerArgs),
}

fn main() -> ExitCode {
    // Logging (`--logging-format`, `-v`) is set up by `main_with_registry`.
    let Command::Scheduler(args) = Cli::parse().command;

    let mut registry = Registry::in_tree();
    if let Err(err) = registry.register(NAME, registration()) {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    main_with_registry(args, registry)
}
