//! `ksched scheduler`: the flags kube-scheduler users know, then [`super::run`].

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;
use tracing::{error, info};

use super::http::TlsFiles;
use super::leader_election::default_identity;
use super::run::{SchedulerOptions, run};
use crate::config;
use crate::framework::registry::Registry;

#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    /// The KubeSchedulerConfiguration file (v1, or v1beta1-3 converted).
    #[arg(long)]
    pub config: PathBuf,
    /// Kubeconfig; overrides clientConnection.kubeconfig. In-cluster config when neither is set.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// HTTPS port for /healthz, /livez, /readyz, /metrics and /configz (0 disables it).
    #[arg(long, default_value_t = 10259)]
    pub secure_port: u16,
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Serving certificate; a self-signed one when absent.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Overrides leaderElection.leaderElect (`--leader-elect=false`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// Log verbosity as kube-scheduler's -v (0-10); RUST_LOG overrides.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Log filter for a kube-scheduler style verbosity.
pub fn log_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0..=1 => "info,kube_runtime=warn",
        2..=3 => "info",
        4..=5 => "ksched=debug,info",
        _ => "ksched=trace,debug",
    }
}

/// `ksched scheduler`: runs the scheduler with the in-tree plugins.
pub fn main(args: SchedulerArgs) -> ExitCode {
    main_with_registry(args, Registry::in_tree())
}

/// Runs the scheduler with `registry`'s plugins: the Rust form of kube-scheduler's
/// `app.NewSchedulerCommand(app.WithPlugin(name, factory))`. An out-of-tree binary starts from
/// [`Registry::in_tree`], adds its own plugins with [`Registry::register`], parses
/// [`SchedulerArgs`] (a `clap::Args`) and calls this; configurations may then name its plugins
/// like any in-tree one (`ksched config validate` does not know them; the binary validates at
/// start-up). See `examples/custom_plugin.rs`.
pub fn main_with_registry(args: SchedulerArgs, registry: Registry) -> ExitCode {
    let bytes = match std::fs::read(&args.config) {
        Ok(b) => b,
        Err(err) => {
            eprintln!("error: reading {}: {err}", args.config.display());
            return ExitCode::FAILURE;
        }
    };
    let registry = Arc::new(registry);
    let loaded = match config::load(&bytes, registry.as_ref()) {
        Ok(l) => l,
        Err(errors) => {
            for e in &errors.errors {
                eprintln!("error: {e}");
            }
            eprintln!(
                "the configuration {} is invalid; `ksched config validate` shows the same errors",
                args.config.display()
            );
            return ExitCode::FAILURE;
        }
    };
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let mut cfg = loaded.config;
    if let Some(le) = args.leader_elect {
        cfg.leader_election.leader_elect = le;
    }
    let configz = serde_saphyr::from_str::<serde_json::Value>(&config::to_v1_yaml(&cfg))
        .map(|v| serde_json::json!({ "componentconfig": v }).to_string())
        .unwrap_or_default();
    let kubeconfig = args.kubeconfig.clone().or_else(|| {
        (!cfg.client_connection.kubeconfig.is_empty())
            .then(|| PathBuf::from(&cfg.client_connection.kubeconfig))
    });
    limit_malloc_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let client = match client(kubeconfig).await {
            Ok(c) => c,
            Err(err) => {
                error!("{err}");
                return ExitCode::FAILURE;
            }
        };
        let (shutdown_tx, shutdown) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            info!("received a termination signal; shutting down");
            let _ = shutdown_tx.send(true);
        });
        let options = SchedulerOptions {
            config: cfg,
            registry,
            secure_address: (args.secure_port != 0)
                .then(|| SocketAddr::new(args.bind_address, args.secure_port)),
            tls: TlsFiles {
                cert: args.tls_cert_file,
                key: args.tls_private_key_file,
            },
            identity: default_identity(),
            configz,
        };
        match run(client, options, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                error!("{err}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(&path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no kubeconfig given and no in-cluster config: {e}"))?,
    };
    kube::Client::try_from(with_read_timeout(config))
        .map_err(|e| format!("building the client: {e}"))
}

/// A connection that has delivered nothing for this long is given up. Idle watches hear from the
/// API server at least once a minute (bookmarks), so only a hung server or a dead path trips it:
/// client-go gets the same from HTTP/2 pings, which kube-rs's HTTP/1.1 does not have.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

fn with_read_timeout(mut config: kube::Config) -> kube::Config {
    config.read_timeout = Some(READ_TIMEOUT);
    // Counted from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// glibc gives each thread that allocates an arena of its own (up to 8 per core) and never hands
/// memory back across arenas, so the runtime's and rayon's threads each grow to their own peak:
/// measured at 1.5-2x the live heap. One arena keeps resident memory near the live heap; the
/// scheduler's threads allocate little on the hot path, so the shared lock cost no throughput or CPU
/// measurable beyond noise (SchedulingBasic, ksched-only bench rounds with `MALLOC_ARENA_MAX=1` vs
/// `8`). An operator's `MALLOC_ARENA_MAX` wins. Called before any thread starts.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}
