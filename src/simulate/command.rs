//! `ksched simulate`: reads the cluster state (a snapshot file, or a live cluster read-only), the
//! profile and policies, runs [`engine::simulate`] and prints the report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::engine::{self, Request};
use super::live;
use super::profile::{self, SimulatedProfile};
use super::report::Report;
use super::snapshot::ClusterState;
use crate::emulation::{self, Minor};
use crate::framework::registry::Registry;
use crate::operator::render_cli::Input;

/// Exit code when `--fail-on-pending` finds a pod that would stay Pending (1 is an error).
pub const EXIT_PENDING: u8 = 3;

/// Pods simulated before a progress bar is worth showing.
const PROGRESS_FROM: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Yaml,
}

/// `ksched simulate`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["kubeconfig", "snapshot"])))]
pub struct SimulateArgs {
    /// Read the cluster state from this kubeconfig's cluster (get/list calls only, nothing written).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the cluster state from a file: what `kubectl get nodes,pods,pv,pvc,storageclasses,csinodes,pdb,priorityclasses,podgroups,resourceclaims,resourceslices,deviceclasses -A -o yaml` prints.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// With --kubeconfig: write the cluster state to FILE as a snapshot and stop.
    #[arg(long, value_name = "FILE", requires = "kubeconfig")]
    pub save_snapshot: Option<PathBuf>,
    /// A SchedulerProfile (rendered as the operator would) or a KubeSchedulerConfiguration;
    /// default: upstream's default profile, `default-scheduler`.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// LeafClusterPolicies to render into the SchedulerProfile (repeatable).
    #[arg(long, value_name = "FILE")]
    pub policy: Vec<PathBuf>,
    /// Simulate every pending pod, not only those of the profile's scheduler name.
    #[arg(long, conflicts_with_all = ["reschedule", "all", "explain"])]
    pub all_pending: bool,
    /// Place the running pods of NAMESPACE anew, as on an empty cluster (capacity planning).
    #[arg(long, value_name = "NAMESPACE", num_args = 0..=1, default_missing_value = "", conflicts_with = "explain")]
    pub reschedule: Option<String>,
    /// With --reschedule (or alone): the running pods of every namespace.
    #[arg(long, conflicts_with = "explain")]
    pub all: bool,
    /// Every plugin's filter status and score for one pod (NAMESPACE/NAME), per node; or, for
    /// `podgroup/NAMESPACE/NAME`, what the group cycle made of that PodGroup and each member.
    #[arg(long, value_name = "POD")]
    pub explain: Option<String>,
    /// With --explain: only this node.
    #[arg(long, value_name = "NODE", requires = "explain")]
    pub node: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    /// Exit 3 when a pod would stay Pending (unschedulable, held at Permit, or a plugin error).
    #[arg(long)]
    pub fail_on_pending: bool,
    /// Feature gates of the simulated scheduler, as kube-scheduler's flag
    /// (`GenericWorkload=true`: PodGroup members placed all or nothing in one group cycle;
    /// `TopologyAwareWorkloadScheduling=true` as well: a PodGroup's topology constraint keeps
    /// them in one domain). Unset: a SchedulerProfile's own (`workloadAwareScheduling`,
    /// `topologyAwareScheduling`), else the minor's defaults.
    #[arg(long, value_name = "GATE=BOOL,...")]
    pub feature_gates: Vec<String>,
    /// The Kubernetes minor whose kube-scheduler to emulate (`1.36`, or `kube=1.36`, as
    /// kube-scheduler's flag). Default: with --kubeconfig, the API server's minor; with
    /// --snapshot (which does not record its cluster's version), the newest ksched supports. A
    /// SchedulerProfile's own `spec.kubernetesVersion` wins, as in the operator.
    #[arg(long, value_name = "VERSION")]
    pub emulated_version: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Message(String),
}

fn read(path: &Path) -> Result<Input, CommandError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    text.map(|text| Input {
        name: path.display().to_string(),
        text,
    })
    .map_err(|source| CommandError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn request(args: &SimulateArgs) -> Result<Request, CommandError> {
    if let Some(group) = args.explain.as_deref().and_then(|e| {
        e.strip_prefix("podgroup/")
            .or_else(|| e.strip_prefix("podgroups/"))
    }) {
        return Ok(Request::ExplainGroup {
            group: group.to_string(),
        });
    }
    if let Some(pod) = &args.explain {
        return Ok(Request::Explain {
            pod: pod.clone(),
            node: args.node.clone(),
        });
    }
    match (args.reschedule.as_deref(), args.all) {
        (Some(""), false) => Err(CommandError::Message(
            "--reschedule needs a NAMESPACE, or --all for every namespace".into(),
        )),
        (Some(ns), false) => Ok(Request::Reschedule {
            namespace: Some(ns.to_string()),
        }),
        (Some(""), true) | (None, true) => Ok(Request::Reschedule { namespace: None }),
        (Some(_), true) => Err(CommandError::Message(
            "--reschedule NAMESPACE and --all exclude each other".into(),
        )),
        (None, false) => Ok(Request::Pending {
            all: args.all_pending,
        }),
    }
}

/// The simulation's output for `report` in `format`.
pub fn render(report: &Report, format: OutputFormat) -> Result<String, String> {
    match format {
        OutputFormat::Table => Ok(report.to_table()),
        OutputFormat::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        OutputFormat::Yaml => serde_saphyr::to_string(report).map_err(|e| e.to_string()),
    }
}

pub fn main(args: SimulateArgs, registry: Registry) -> ExitCode {
    match run(&args, registry) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &SimulateArgs, registry: Registry) -> Result<ExitCode, CommandError> {
    let registry = engine::offline_registry(registry);
    let request = request(args)?;
    let profile_input = args.profile.as_deref().map(read).transpose()?;
    let policies = args
        .policy
        .iter()
        .map(|p| read(p))
        .collect::<Result<Vec<_>, _>>()?;
    let live = args.kubeconfig.as_deref().map(Live::connect).transpose()?;
    let minor = match emulation::minor_from_flag(&args.emulated_version)
        .map_err(|e| CommandError::Message(format!("--emulated-version: {e}")))?
    {
        Some(minor) => minor,
        None => match &live {
            Some(live) => live.minor()?,
            None => Minor::NEWEST,
        },
    };
    let profile = profile::load_for(
        profile_input.as_ref(),
        &policies,
        &registry,
        minor,
        &args.feature_gates,
    )
    .map_err(|e| CommandError::Message(format!("the profile cannot be simulated:\n{e}")))?;
    let needs = needs(&profile, &registry)?;
    let state = match (live, &args.snapshot) {
        (Some(live), _) => {
            let (state, warnings) = live.read(&registry, &needs)?;
            for w in warnings {
                eprintln!("warning: {w}");
            }
            if let Some(path) = &args.save_snapshot {
                save(&state, path)?;
                return Ok(ExitCode::SUCCESS);
            }
            state
        }
        (None, Some(path)) => {
            let input = read(path)?;
            let state =
                ClusterState::parse_with(&input.name, &input.text, registry.watched_kinds())
                    .map_err(|e| {
                        CommandError::Message(format!("the snapshot cannot be used:\n{e}"))
                    })?;
            // A live read lists every kind the plugins need; a file may have left some out.
            state
                .check_complete(&needs)
                .map_err(|e| CommandError::Message(format!("the snapshot is incomplete:\n{e}")))?;
            state
        }
        (None, None) => {
            return Err(CommandError::Message(
                "give --kubeconfig or --snapshot".into(),
            ));
        }
    };
    let report = simulate_with_progress(state, &profile, &registry, &request)?;
    if args.output == OutputFormat::Table {
        for w in &report.warnings {
            eprintln!("warning: {w}");
        }
    }
    let out = render(&report, args.output).map_err(CommandError::Message)?;
    print!("{out}");
    if args.fail_on_pending && report.has_pending() {
        return Ok(ExitCode::from(EXIT_PENDING));
    }
    Ok(ExitCode::SUCCESS)
}

/// The object kinds the profile's plugins read.
fn needs(
    profile: &SimulatedProfile,
    registry: &Registry,
) -> Result<std::collections::BTreeSet<crate::framework::listers::Informer>, CommandError> {
    let handle = crate::framework::registry::Handle::new(std::sync::Arc::new(
        crate::framework::api_calls::RecordingApi::default(),
    ));
    let (_, informers) =
        crate::scheduler::run::build_frameworks(&profile.config, registry, &handle)
            .map_err(|e| CommandError::Message(e.to_string()))?;
    Ok(informers)
}

/// A live cluster, asked with get/list calls only.
struct Live {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Live {
    fn connect(kubeconfig: &Path) -> Result<Live, CommandError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CommandError::Message(format!("starting the runtime: {e}")))?;
        let client = runtime
            .block_on(live::client(kubeconfig))
            .map_err(|e| CommandError::Message(e.to_string()))?;
        Ok(Live { runtime, client })
    }

    /// The API server's minor, which the simulated scheduler emulates (as `ksched scheduler`
    /// does by default).
    fn minor(&self) -> Result<Minor, CommandError> {
        self.runtime
            .block_on(crate::scheduler::command::discover_minor(&self.client))
            .map_err(CommandError::Message)
    }

    /// The state of the kinds the plugins need. The runtime ends here: the simulation runs
    /// without it, its plugins using the in-memory API synchronously.
    fn read(
        self,
        registry: &Registry,
        needs: &std::collections::BTreeSet<crate::framework::listers::Informer>,
    ) -> Result<(ClusterState, Vec<String>), CommandError> {
        self.runtime
            .block_on(live::read(&self.client, &registry.watched_kinds(), needs))
            .map_err(|e| CommandError::Message(e.to_string()))
    }
}

fn save(state: &ClusterState, path: &Path) -> Result<(), CommandError> {
    let list = state
        .to_list()
        .map_err(|e| CommandError::Message(format!("serializing the snapshot: {e}")))?;
    let yaml = serde_saphyr::to_string(&list)
        .map_err(|e| CommandError::Message(format!("serializing the snapshot: {e}")))?;
    std::fs::write(path, yaml).map_err(|source| CommandError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let counts: Vec<String> = state
        .counts()
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    eprintln!("wrote {}: {}", path.display(), counts.join(", "));
    Ok(())
}

fn simulate_with_progress(
    state: ClusterState,
    profile: &SimulatedProfile,
    registry: &Registry,
    request: &Request,
) -> Result<Report, CommandError> {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("simulating {bar:40} {pos}/{len} pods {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut progress = |done: usize, total: usize| {
        if total >= PROGRESS_FROM {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    };
    let report = engine::simulate(state, profile, registry, request, &mut progress)
        .map_err(|e| CommandError::Message(e.to_string()));
    bar.finish_and_clear();
    report
}
