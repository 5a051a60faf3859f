//! The `ksched` command: operator, scheduler, and the offline tools around them.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Crds,
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => match ksched::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: cannot serialize the CRDs: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Version => {
            println!("ksched {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}
