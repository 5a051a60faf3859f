//! The `ksched operator`, `ksched render` and `ksched uninstall` commands (argument parsing and
//! process set-up; the work is in [`super::run`], [`super::render_cli`] and
//! [`super::uninstall::teardown()`]).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::in_process::InProcessSchedulers;
use super::render::{DEFAULT_NAMESPACE, RenderOptions};
use super::{LEASE_NAME, OPERATOR_NAME, OperatorOptions, http, render_cli, uninstall};
use crate::framework::registry::Registry;
use crate::infra::duration::GoDuration;
use crate::infra::leader_election::{LeaderElectionConfig, default_identity};

/// The scheduler image when neither `--image` nor `KSCHED_IMAGE` says: this build's own tag.
pub const DEFAULT_IMAGE: &str = concat!("ksched:", env!("CARGO_PKG_VERSION"));

/// `ksched operator`.
#[derive(Debug, Clone, clap::Args)]
pub struct OperatorArgs {
    /// The operator namespace (rendered objects and Leases go here).
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Scheduler image for profiles that set none (the operator's own image).
    #[arg(long, env = "KSCHED_IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// Kubeconfig file; default: in-cluster config, then $KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Another scheduler name that something besides ksched serves (repeatable): pods naming it
    /// get no UnknownSchedulerName warning. `default-scheduler` is always known.
    #[arg(long = "known-scheduler")]
    pub known_schedulers: Vec<String>,
    /// Address of the HTTP endpoint (`/healthz`, `/readyz`, `/metrics`).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Port of the HTTP endpoint; 0 turns it off.
    #[arg(long, default_value_t = http::DEFAULT_PORT)]
    pub http_port: u16,
    /// Port of an HTTPS endpoint with delegated authentication and authorization (as the
    /// scheduler's); `/metrics` moves there from the plain port. 0 (default): none.
    #[arg(long, default_value_t = 0)]
    pub secure_port: u16,
    /// Serve `/debug/pprof/profile` and `/debug/pprof/heap` on the secure port.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub profiling: bool,
    #[command(flatten)]
    pub tls: crate::infra::serving::tls::TlsArgs,
    #[command(flatten)]
    pub authentication: crate::infra::serving::auth::AuthenticationArgs,
    #[command(flatten)]
    pub authorization: crate::infra::serving::auth::AuthorizationArgs,
    /// Log format: "text" or "json" (klog's JSON keys).
    #[arg(long, value_enum, default_value = "text")]
    pub logging_format: crate::infra::logging::LogFormat,
    /// Elect a leader among replicas on the Lease `ksched-operator` in the operator namespace; only
    /// the leader reconciles and runs Embedded schedulers (`--leader-elect=false`: this one leads).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a follower waits after the last renewal before it takes the Lease.
    #[arg(long, default_value = "15s")]
    pub leader_elect_lease_duration: GoDuration,
    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value = "10s")]
    pub leader_elect_renew_deadline: GoDuration,
    /// How long candidates wait between attempts.
    #[arg(long, default_value = "2s")]
    pub leader_elect_retry_period: GoDuration,
}

impl OperatorArgs {
    /// The elector's settings, or None without `--leader-elect`; an error names the bad flag.
    pub fn leader_election(&self) -> Result<Option<LeaderElectionConfig>, String> {
        if !self.leader_elect {
            return Ok(None);
        }
        let std = |flag: &str, d: GoDuration| {
            d.to_std()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("--{flag}={d}: must be a positive duration"))
        };
        let config = LeaderElectionConfig {
            namespace: self.namespace.clone(),
            lease_name: LEASE_NAME.into(),
            identity: default_identity(),
            lease_duration: std(
                "leader-elect-lease-duration",
                self.leader_elect_lease_duration,
            )?,
            renew_deadline: std(
                "leader-elect-renew-deadline",
                self.leader_elect_renew_deadline,
            )?,
            retry_period: std("leader-elect-retry-period", self.leader_elect_retry_period)?,
            takeover: None,
        };
        config
            .validate()
            .map_err(|e| format!("--leader-elect-*: {e}"))?;
        Ok(Some(config))
    }
}

/// `ksched render`.
#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// A YAML file of SchedulerProfiles and LeafClusterPolicies (repeatable; `-` is stdin).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// The operator namespace the objects are rendered for.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Scheduler image for profiles that set none.
    #[arg(long, env = "KSCHED_IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: String,
}

/// Runs `ksched render`.
pub fn render_main(args: RenderArgs, registry: &Registry) -> ExitCode {
    let opts = RenderOptions {
        namespace: args.namespace,
        image: args.image,
        cluster_minor: None,
    };
    let out = render_cli::render_paths(&args.files, &opts, registry);
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    if out.code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs `ksched operator` until SIGINT or SIGTERM.
pub fn operator_main(args: OperatorArgs, registry: Registry) -> ExitCode {
    crate::infra::logging::init(&crate::infra::logging::LogOptions {
        format: args.logging_format,
        default_filter: "info,kube_runtime=warn".into(),
        split_stream: false,
    });
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let leader_election = match args.leader_election() {
        Ok(le) => le,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let (client, config) = match client(args.kubeconfig.as_deref()).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let registry = Arc::new(registry);
        let mut opts = OperatorOptions::new(args.namespace, args.image, registry.clone());
        opts.known_schedulers = args.known_schedulers;
        opts.leader_election = leader_election;
        opts.client_config = Some(config);
        let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
        if args.secure_port != 0 {
            let endpoint = http::SecureEndpoint {
                addr: SocketAddr::new(args.bind_address, args.secure_port),
                tls: args.tls.clone(),
                authentication: args.authentication.clone(),
                authorization: args.authorization.clone(),
                profiling: args.profiling,
            };
            if let Err(e) =
                http::serve_secure(&endpoint, opts.health.clone(), http_stopped.clone()).await
            {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        if args.http_port != 0 {
            let addr = SocketAddr::new(args.bind_address, args.http_port);
            let routes = if args.secure_port != 0 {
                http::PlainRoutes::ProbesOnly
            } else {
                http::PlainRoutes::All
            };
            if let Err(e) = http::serve(addr, opts.health.clone(), routes, http_stopped).await {
                eprintln!("error: {e} (choose another --http-port, or 0 for none)");
                return ExitCode::FAILURE;
            }
        }
        let embedded = InProcessSchedulers::new(client.clone(), registry, opts.instance.clone())
            .with_metrics(opts.health.metrics.clone());
        let result = super::run(client, opts, Arc::new(embedded), shutdown_signal()).await;
        let _ = stop_http.send(true);
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// A multi-threaded tokio runtime, or None after saying why not.
fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("error: starting the async runtime: {e}"))
        .ok()
}

/// A client from `kubeconfig`, or inferred (in-cluster, then the usual kubeconfig), and the
/// configuration it was made from.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<(Client, Config), String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| format!("no cluster configuration: {e}"))?,
    };
    crate::infra::metrics::set_api_host(&config.cluster_url);
    let client =
        Client::try_from(config.clone()).map_err(|e| format!("creating the client: {e}"))?;
    Ok((client, config))
}

/// `ksched uninstall`.
#[derive(Debug, Clone, clap::Args)]
pub struct UninstallArgs {
    /// Kubeconfig file; default: in-cluster config, then $KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace ksched was installed in.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

/// Runs `ksched uninstall`: stops the operator (its Deployment scaled to 0) and waits until no
/// replica leads, removes the taints it added, the LeafClusterPolicies' finalizers and what it
/// rendered, marks the profiles left behind, and releases the objects of the operator's identity
/// (so deleting the installation finishes at once). The chart's pre-delete hook runs it; by hand,
/// it finishes an uninstall whose operator was gone.
pub fn uninstall_main(args: UninstallArgs) -> ExitCode {
    crate::infra::logging::init(&crate::infra::logging::LogOptions {
        format: crate::infra::logging::LogFormat::default(),
        default_filter: "warn,ksched=info".into(),
        split_stream: false,
    });
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async move {
        let client = match client(args.kubeconfig.as_deref()).await {
            Ok((c, _)) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        match uninstall(&client, &args.namespace).await {
            Ok(summary) => {
                println!("uninstalled: {summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// What `ksched uninstall` does (see [`uninstall_main`]); what it did.
async fn uninstall(client: &Client, namespace: &str) -> Result<String, super::Error> {
    let stopped = uninstall::stop_operator(client, namespace).await?;
    let removed = uninstall::teardown(client, namespace).await?;
    let released = uninstall::release(client, namespace).await?;
    uninstall::delete_leftover_release(client).await?;
    let operator = if stopped {
        format!("operator {namespace}/{OPERATOR_NAME} stopped; ")
    } else {
        String::new()
    };
    Ok(format!(
        "{operator}{removed}; {released} object(s) of the operator's identity released"
    ))
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: OperatorArgs,
    }

    fn parse(flags: &[&str]) -> OperatorArgs {
        Cli::parse_from(std::iter::once("operator").chain(flags.iter().copied())).args
    }

    #[test]
    fn leader_election_is_on_by_default_on_the_operator_lease_of_its_namespace() {
        let le = parse(&["--namespace=ops"])
            .leader_election()
            .unwrap()
            .expect("on by default");
        assert_eq!(le.namespace, "ops");
        assert_eq!(le.lease_name, "ksched-operator");
        assert_eq!(le.lease_duration, std::time::Duration::from_secs(15));
        assert_eq!(le.renew_deadline, std::time::Duration::from_secs(10));
        assert_eq!(le.retry_period, std::time::Duration::from_secs(2));
        assert!(
            parse(&["--leader-elect=false"])
                .leader_election()
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_leader_election_timings_name_the_flags() {
        let err = parse(&["--leader-elect-renew-deadline=20s"])
            .leader_election()
            .unwrap_err();
        assert!(
            err.contains("--leader-elect-") && err.contains("renewDeadline"),
            "{err}"
        );
        let err = parse(&["--leader-elect-retry-period=0s"])
            .leader_election()
            .unwrap_err();
        assert!(err.contains("--leader-elect-retry-period=0s"), "{err}");
    }
}
