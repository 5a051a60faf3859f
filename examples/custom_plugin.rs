//! Out-of-tree plugins: the Rust form of kube-scheduler's
//! `app.NewSchedulerCommand(app.WithPlugin("PreferLabeled", New))`.
//!
//! `PreferLabeled` is a Score plugin that prefers nodes carrying a label (`label`, default
//! `example.com/preferred`): 100 for those nodes, 0 for the others.
//!
//! `NodeWeights` is a Score plugin that reads a kind of its own: it watches the ConfigMaps labelled
//! `example.com/node-weights` ([`NODE_WEIGHTS`], declared once as a [`Kind`]) and gives each node
//! the weight they set for it (`data: {<node name>: "<0..100>"}`; the highest when several do).
//! The scheduler starts the watch when the plugin is enabled, the operator grants `list` and
//! `watch` on ConfigMaps to a profile that enables it, and `ksched simulate` reads such ConfigMaps
//! from a snapshot (`kubectl get configmaps -l example.com/node-weights`).
//!
//! The binary is the whole `ksched` command line with these plugins added ([`ksched_main`]): its
//! `scheduler` runs them, its `operator` accepts SchedulerProfiles that enable them (and grants
//! the kinds they watch), `render`, `simulate` and `config validate` know them:
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

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use ksched::prelude::*;
use serde::{Deserialize, Serialize};

const NAME: &str = "PreferLabeled";
const NODE_WEIGHTS_NAME: &str = "NodeWeights";
/// The label of the ConfigMaps `NodeWeights` reads.
const WEIGHTS_LABEL: &str = "example.com/node-weights";

/// The ConfigMaps that weigh nodes: declared once, named by the plugin's registration. Score reads
/// them, so a change ends opportunistic batching's reuse of scores.
static NODE_WEIGHTS: Kind<ConfigMap> = Kind::new("NodeWeightConfigMaps")
    .selected_by(WEIGHTS_LABEL)
    .read_by_filter_or_score()
    .in_snapshot("configmaps", false);

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

/// The weights of the nodes, as PreScore read them from the ConfigMaps for this cycle.
#[derive(Default)]
struct Weights(HashMap<String, i64>);

const WEIGHTS_KEY: &str = "NodeWeights/weights";

struct NodeWeights {
    listers: Arc<Listers>,
}

impl_plugin!(NodeWeights, NODE_WEIGHTS_NAME, [PreScore, Score]);

impl PreScorePlugin for NodeWeights {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        _: &Snapshot,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        let mut weights = Weights::default();
        for config_map in self.listers.store(&NODE_WEIGHTS).list() {
            for (node, weight) in config_map.data.iter().flatten() {
                // A value that is no weight counts as none; weights are clamped to the score range.
                let Ok(weight) = weight.trim().parse::<i64>() else {
                    continue;
                };
                let weight = weight.clamp(MIN_NODE_SCORE, MAX_NODE_SCORE);
                let best = weights.0.entry(node.clone()).or_insert(weight);
                *best = (*best).max(weight);
            }
        }
        state.write(WEIGHTS_KEY, weights);
        Status::success()
    }
}

impl ScorePlugin for NodeWeights {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let weights = state
            .read::<Weights>(WEIGHTS_KEY)
            .ok_or_else(|| Status::error("NodeWeights: PreScore did not run"))?;
        Ok(weights.0.get(node.name()).copied().unwrap_or(0))
    }
}

/// `NodeWeights` reads its own kind: the registration names it, and everything else follows.
fn node_weights_registration() -> PluginRegistration {
    PluginRegistration::new(NodeWeights::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(NodeWeights {
            listers: handle.listers.clone(),
        }) as Arc<dyn Plugin>)
    })
    .with_informers(&[&NODE_WEIGHTS])
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

fn main() -> ExitCode {
    let mut registry = Registry::in_tree();
    for (name, registration) in [
        (NAME, registration()),
        (NODE_WEIGHTS_NAME, node_weights_registration()),
    ] {
        if let Err(err) = registry.register(name, registration) {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    }
    // The whole ksched command line with these plugins: `scheduler` runs them, `operator` and
    // `render` accept SchedulerProfiles that enable them (and grant the kinds they watch),
    // `simulate` and `config validate` know them. Logging is set up by each command.
    ksched_main(registry)
}
