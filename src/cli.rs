//! The `ksched` command line (operator, scheduler, and the offline tools around them), for any
//! registry of plugins: the `ksched` binary is `cli::main(Registry::in_tree())`; a binary built with
//! out-of-tree plugins (`examples/custom_plugin.rs`) is `cli::main` of its own registry.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::framework::registry::Registry;

#[derive(Parser)]
#[command(
    name = "ksched",
    version,
    about = "Scheduler profiles as Kubernetes resources, and the scheduler they run"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions ksched installs, as YAML.
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long)]
        output_dir: Option<std::path::PathBuf>,
    },
    /// Run the scheduler: `ksched scheduler --config FILE`.
    Scheduler(Box<crate::scheduler::command::SchedulerArgs>),
    /// Work with KubeSchedulerConfiguration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Run the operator: reconcile SchedulerProfiles and LeafClusterPolicies.
    Operator(Box<crate::operator::command::OperatorArgs>),
    /// Print the objects the operator renders for profiles (and policies) in files, or the errors.
    Render(crate::operator::command::RenderArgs),
    /// What a profile would do, before it does it: pending pods placed, or why not, with no writes.
    Simulate(crate::simulate::command::SimulateArgs),
    /// Stop the operator and remove what it added and rendered (the taints it added, the
    /// policies' finalizers, its schedulers), then release its identity: the chart's pre-delete
    /// hook; by hand, it finishes an uninstall whose operator was gone.
    Uninstall(crate::operator::command::UninstallArgs),
    /// Print the version.
    Version,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the normalized v1 configuration (defaults and effective plugins), or the errors.
    Validate {
        /// The KubeSchedulerConfiguration file.
        file: std::path::PathBuf,
        /// The Kubernetes minor whose kube-scheduler reads the file (its fields, defaults and
        /// validation): 1.36 or 1.37; default the newest.
        #[arg(long)]
        emulated_version: Option<String>,
        /// Feature gates, as `ksched scheduler --feature-gates` (checked against that minor).
        #[arg(long)]
        feature_gates: Vec<String>,
    },
}

/// The `ksched` command with `registry`'s plugins: what the `ksched` binary runs with
/// [`Registry::in_tree`], and what a binary with out-of-tree plugins runs with its own registry, so
/// its `scheduler` runs them, and its `operator`, `render`, `simulate` and `config validate`
/// accept profiles and configurations that name them.
pub fn main(registry: Registry) -> ExitCode {
    if let Err(err) = crate::allocator::check_environment() {
        eprintln!("error: {err}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Scheduler(args) => crate::scheduler::command::main_with_registry(*args, registry),
        Command::Config(ConfigCommand::Validate {
            file,
            emulated_version,
            feature_gates,
        }) => validate_config(
            &file,
            emulated_version.as_deref(),
            &feature_gates,
            &registry,
        ),
        Command::Operator(args) => crate::operator::command::operator_main(*args, registry),
        Command::Render(args) => crate::operator::command::render_main(args, &registry),
        Command::Simulate(args) => crate::simulate::command::main(args, registry),
        Command::Uninstall(args) => crate::operator::command::uninstall_main(args),
        Command::Crds { output_dir } => crds(output_dir.as_deref()),
        Command::Version => {
            println!("ksched {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

fn crds(output_dir: Option<&std::path::Path>) -> ExitCode {
    let Some(dir) = output_dir else {
        return match crate::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: cannot serialize the CRDs: {err}");
                ExitCode::FAILURE
            }
        };
    };
    let files = match crate::api::crd_files() {
        Ok(files) => files,
        Err(err) => {
            eprintln!("error: cannot serialize the CRDs: {err}");
            return ExitCode::FAILURE;
        }
    };
    for (name, yaml) in files {
        let path = dir.join(name);
        if let Err(err) = std::fs::write(&path, yaml) {
            eprintln!("error: writing {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

fn validate_config(
    file: &std::path::Path,
    emulated_version: Option<&str>,
    feature_gates: &[String],
    registry: &Registry,
) -> ExitCode {
    use crate::emulation::{Emulation, Minor, minor_from_flag};
    let minor = match minor_from_flag(
        &emulated_version
            .map(String::from)
            .into_iter()
            .collect::<Vec<_>>(),
    ) {
        Ok(m) => m.unwrap_or(Minor::NEWEST),
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let emulation = match Emulation::with_gates(minor, feature_gates) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(err) => {
            eprintln!("error: reading {}: {err}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let (code, stdout, stderr) = crate::config::validate_file_output(&bytes, registry, &emulation);
    print!("{stdout}");
    eprint!("{stderr}");
    if code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
