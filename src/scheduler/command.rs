//! `ksched scheduler`: every flag of kube-scheduler (1.36 and 1.37 have the same), then
//! [`super::run`].
//!
//! The Kubernetes minor ksched emulates is decided once, before the configuration is read:
//! `--emulated-version`, else the API server's minor from discovery (`--write-config-to`, which
//! needs no cluster: the newest supported minor); `--feature-gates` and the configuration are then
//! read as that minor's kube-scheduler reads them.
//!
//! Each flag is accepted as upstream spells it (pflag syntax: `--flag=value`, `--flag value`,
//! bare booleans, comma-separated lists). Those that mean something to ksched are honoured, with
//! upstream's precedence: the leader-election flags override the configuration file; the
//! deprecated ones (`--kube-api-qps`, `--profiling`, ...) apply only without `--config`, as
//! upstream's. The others are accepted and named in one warning at start. One deliberate
//! difference: `--kubeconfig` also applies with `--config` (upstream ignores it then), as ksched
//! has always done.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::http::Endpoint;
use super::leader_election::default_identity;
use super::queue::DEFAULT_MAX_IN_UNSCHEDULABLE;
use super::run::{SchedulerOptions, run};
use crate::config::{self, GoDuration};
use crate::emulation::{self, Emulation, FeatureGateError, Minor, OPPORTUNISTIC_BATCHING};
use crate::framework::registry::Registry;
use crate::infra::logging::{self, LogFormat, LogOptions};
use crate::infra::serving::auth::{AuthenticationArgs, AuthorizationArgs};
use crate::infra::serving::tls::TlsArgs;

/// The configuration upstream runs without `--config`: its defaults.
const DEFAULT_CONFIG: &[u8] =
    b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    /// The path to the configuration file (KubeSchedulerConfiguration v1, or v1beta1-3
    /// converted). Without it, upstream's default configuration.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// If set, write the configuration values to this file and exit.
    #[arg(long)]
    pub write_config_to: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig)
    #[arg(long)]
    pub master: Option<String>,
    /// Print version information and quit.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub version: Option<String>,

    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0", help_heading = "Secure serving flags")]
    pub bind_address: IpAddr,
    /// The port on which to serve HTTPS with authentication and authorization. If 0, don't serve
    /// HTTPS at all.
    #[arg(long, default_value_t = 10259, help_heading = "Secure serving flags")]
    pub secure_port: u16,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub authentication: AuthenticationArgs,
    #[command(flatten)]
    pub authorization: AuthorizationArgs,
    #[command(flatten)]
    pub deprecated: DeprecatedArgs,
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    #[command(flatten)]
    pub feature_gate: FeatureGateArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub logs: LogsArgs,
}

/// kube-scheduler's deprecated flags: they apply only without `--config`.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Deprecated flags")]
pub struct DeprecatedArgs {
    /// Enable profiling via web interface host:port/debug/pprof/ (ignored with --config).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub profiling: Option<bool>,
    /// Enable block profiling, if profiling is enabled (ignored with --config).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub contention_profiling: Option<bool>,
    /// Path to kubeconfig file with authorization and master location information; in ksched
    /// it also overrides clientConnection.kubeconfig of --config. In-cluster config when
    /// neither is set.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Content type of requests sent to apiserver (ignored with --config; ksched sends JSON).
    #[arg(long)]
    pub kube_api_content_type: Option<String>,
    /// QPS to use while talking with kubernetes apiserver (ignored with --config).
    #[arg(long)]
    pub kube_api_qps: Option<f32>,
    /// Burst to use while talking with kubernetes apiserver (ignored with --config).
    #[arg(long)]
    pub kube_api_burst: Option<i32>,
    /// DEPRECATED: the maximum time a pod can stay in unschedulablePods. If a pod stays in
    /// unschedulablePods for longer than this value, the pod will be moved from
    /// unschedulablePods to backoffQ or activeQ (default 5m).
    #[arg(long)]
    pub pod_max_in_unschedulable_pods_duration: Option<GoDuration>,
}

/// kube-scheduler's leader-election flags: they override the configuration file.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Leader election flags")]
pub struct LeaderElectionArgs {
    /// Start a leader election client and gain leadership before executing the main loop.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// The duration that non-leader candidates will wait after observing a leadership renewal
    /// until attempting to acquire leadership.
    #[arg(long)]
    pub leader_elect_lease_duration: Option<GoDuration>,
    /// The interval between attempts by the acting master to renew a leadership slot before it
    /// stops leading.
    #[arg(long)]
    pub leader_elect_renew_deadline: Option<GoDuration>,
    /// The type of resource object that is used for locking during leader election: leases.
    #[arg(long)]
    pub leader_elect_resource_lock: Option<String>,
    /// The name of resource object that is used for locking during leader election.
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
    /// The namespace of resource object that is used for locking during leader election.
    #[arg(long)]
    pub leader_elect_resource_namespace: Option<String>,
    /// The duration the clients should wait between attempting acquisition and renewal of a
    /// leadership.
    #[arg(long)]
    pub leader_elect_retry_period: Option<GoDuration>,
}

/// kube-scheduler's feature-gate flags.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Feature gate flags")]
pub struct FeatureGateArgs {
    /// Comma-separated list of component:key=value pairs that describe feature gates.
    #[arg(long)]
    pub feature_gates: Vec<String>,
    /// The Kubernetes minor to behave as (`1.36` or `kube=1.36`): its defaults, plugins, feature
    /// gates, messages and metrics. Default: the API server's minor. Options are: 1.36, 1.37.
    #[arg(long, value_delimiter = ',')]
    pub emulated_version: Vec<String>,
    /// The min version a component's behavior is compatible with.
    #[arg(long, value_delimiter = ',')]
    pub min_compatibility_version: Vec<String>,
}

/// kube-scheduler's metrics flags.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Metrics flags")]
pub struct MetricsArgs {
    /// Map from metric-label to value allow-list of this label.
    #[arg(long)]
    pub allow_metric_labels: Vec<String>,
    /// The path to the manifest file that contains the allow-list mapping.
    #[arg(long)]
    pub allow_metric_labels_manifest: Option<PathBuf>,
    /// This flag provides an escape hatch for misbehaving metrics: their names, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub disabled_metrics: Vec<String>,
    /// The previous version for which you want to show hidden metrics.
    #[arg(long)]
    pub show_hidden_metrics_for_version: Option<String>,
}

/// kube-scheduler's logs flags.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Logs flags")]
pub struct LogsArgs {
    /// Maximum number of seconds between log flushes (ksched writes every line at once).
    #[arg(long, default_value = "5s")]
    pub log_flush_frequency: GoDuration,
    /// [Alpha] In JSON format with split output streams, the info messages can be buffered.
    #[arg(long)]
    pub log_json_info_buffer_size: Option<String>,
    /// [Alpha] In JSON format, write error messages to stderr and info messages to stdout.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub log_json_split_stream: bool,
    /// [Alpha] In text format with split output streams, the info messages can be buffered.
    #[arg(long)]
    pub log_text_info_buffer_size: Option<String>,
    /// [Alpha] In text format, write error messages to stderr and info messages to stdout.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub log_text_split_stream: bool,
    /// Sets the log format. Permitted formats: "json", "text".
    #[arg(long, value_enum, default_value = "text")]
    pub logging_format: LogFormat,
    /// Number for the log level verbosity (0-10); RUST_LOG overrides.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
    /// comma-separated list of pattern=N settings for file-filtered logging (Go files: ksched
    /// accepts it without effect; use RUST_LOG).
    #[arg(long)]
    pub vmodule: Option<String>,
}

impl LogsArgs {
    pub fn options(&self) -> LogOptions {
        LogOptions {
            format: self.logging_format,
            default_filter: crate::infra::logging::verbosity_filter(u32::from(self.verbosity))
                .to_string(),
            split_stream: match self.logging_format {
                LogFormat::Text => self.log_text_split_stream,
                LogFormat::Json => self.log_json_split_stream,
            },
        }
    }
}

impl SchedulerArgs {
    /// The flags given that ksched accepts without acting on them, for the start-up warning.
    pub fn not_honoured(&self, emulation: &Emulation) -> Vec<String> {
        let mut flags: Vec<String> = self
            .tls
            .not_honoured()
            .into_iter()
            .map(String::from)
            .collect();
        let d = &self.deprecated;
        if self.config.is_none() && d.kube_api_content_type.is_some() {
            flags.push("--kube-api-content-type (ksched speaks JSON)".into());
        }
        let gates = emulation.gates.not_honoured();
        if !gates.is_empty() {
            flags.push(format!(
                "--feature-gates {} (ksched implements these gates at their {} default, or they are not scheduling gates)",
                gates.join(","),
                emulation.minor()
            ));
        }
        let fg = &self.feature_gate;
        if !fg.min_compatibility_version.is_empty() {
            flags.push("--min-compatibility-version".into());
        }
        let m = &self.metrics;
        if !m.allow_metric_labels.is_empty() {
            flags.push("--allow-metric-labels".into());
        }
        if m.allow_metric_labels_manifest.is_some() {
            flags.push("--allow-metric-labels-manifest".into());
        }
        if m.show_hidden_metrics_for_version.is_some() {
            flags.push("--show-hidden-metrics-for-version (ksched hides no metric)".into());
        }
        let l = &self.logs;
        if l.vmodule.is_some() {
            flags.push("--vmodule (use RUST_LOG)".into());
        }
        if l.log_json_info_buffer_size.is_some() || l.log_text_info_buffer_size.is_some() {
            flags.push("--log-*-info-buffer-size".into());
        }
        flags
    }

    /// Deprecated flags given together with `--config`: upstream ignores them, and so does ksched,
    /// saying so.
    pub fn ignored_with_config(&self) -> Vec<&'static str> {
        if self.config.is_none() {
            return Vec::new();
        }
        let d = &self.deprecated;
        [
            (d.profiling.is_some(), "--profiling"),
            (d.contention_profiling.is_some(), "--contention-profiling"),
            (d.kube_api_content_type.is_some(), "--kube-api-content-type"),
            (d.kube_api_qps.is_some(), "--kube-api-qps"),
            (d.kube_api_burst.is_some(), "--kube-api-burst"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }

    /// Applies the flags that override the configuration, with upstream's precedence.
    pub fn apply_to(&self, cfg: &mut config::Config) {
        let d = &self.deprecated;
        if self.config.is_none() {
            if let Some(p) = d.profiling {
                cfg.enable_profiling = p;
            }
            if let Some(p) = d.contention_profiling {
                cfg.enable_contention_profiling = p;
            }
            if let Some(qps) = d.kube_api_qps {
                cfg.client_connection.qps = qps;
            }
            if let Some(burst) = d.kube_api_burst {
                cfg.client_connection.burst = burst;
            }
            if let Some(ct) = &d.kube_api_content_type {
                cfg.client_connection.content_type = ct.clone();
            }
        }
        let le = &self.leader_election;
        let l = &mut cfg.leader_election;
        if let Some(v) = le.leader_elect {
            l.leader_elect = v;
        }
        if let Some(v) = le.leader_elect_lease_duration {
            l.lease_duration = v;
        }
        if let Some(v) = le.leader_elect_renew_deadline {
            l.renew_deadline = v;
        }
        if let Some(v) = le.leader_elect_retry_period {
            l.retry_period = v;
        }
        if let Some(v) = &le.leader_elect_resource_lock {
            l.resource_lock = v.clone();
        }
        if let Some(v) = &le.leader_elect_resource_name {
            l.resource_name = v.clone();
        }
        if let Some(v) = &le.leader_elect_resource_namespace {
            l.resource_namespace = v.clone();
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            tls: self.tls.clone(),
            auth: Some((self.authentication.clone(), self.authorization.clone())),
            disabled_metrics: self.metrics.disabled_metrics.clone(),
        }
    }
}

/// `ksched scheduler`: runs the scheduler with `registry`'s plugins. A binary with out-of-tree
/// plugins usually runs the whole command line with them ([`crate::cli::main`]); this is the
/// scheduler alone, for a binary that parses [`SchedulerArgs`] (a `clap::Args`) itself.
pub fn main_with_registry(args: SchedulerArgs, registry: Registry) -> ExitCode {
    if let Some(v) = &args.version {
        if v == "raw" {
            println!("{{\"gitVersion\":\"v{}\"}}", env!("CARGO_PKG_VERSION"));
        } else if v != "false" {
            println!("ksched {}", env!("CARGO_PKG_VERSION"));
        }
        if v != "false" {
            return ExitCode::SUCCESS;
        }
    }
    logging::init(&args.logs.options());
    let flag_minor = match emulation::minor_from_flag(&args.feature_gate.emulated_version) {
        Ok(m) => m,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let bytes = match &args.config {
        Some(path) => match std::fs::read(path) {
            Ok(b) => b,
            Err(err) => {
                eprintln!("error: reading {}: {err}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => DEFAULT_CONFIG.to_vec(),
    };
    let registry = Arc::new(registry);
    // Before connecting (and so before discovery decides the minor): the gates and the
    // configuration must be valid for some minor this run may emulate; the newest such minor's
    // configuration names the kubeconfig.
    let candidates: Vec<Minor> = match flag_minor {
        Some(m) => vec![m],
        None if args.write_config_to.is_some() => vec![Minor::NEWEST],
        None => emulation::SUPPORTED.iter().rev().copied().collect(),
    };
    let mut first_error = None;
    let mut preliminary = None;
    for minor in &candidates {
        match load_config(&args, &bytes, &registry, *minor) {
            Ok(loaded) => {
                preliminary = Some(loaded);
                break;
            }
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    let Some((cfg, warnings)) = preliminary else {
        if let Some(err) = first_error {
            err.report(&args);
        }
        return ExitCode::FAILURE;
    };
    if let Some(path) = &args.write_config_to {
        report_warnings(&args, &cfg, &warnings);
        return match std::fs::write(path, config::to_v1_yaml(&cfg)) {
            Ok(()) => {
                info!(file = %path.display(), "Wrote configuration");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: writing {}: {err}", path.display());
                ExitCode::FAILURE
            }
        };
    }
    let kubeconfig = args.deprecated.kubeconfig.clone().or_else(|| {
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
    let endpoint = args.endpoint();
    let master = args.master.clone();
    runtime.block_on(async move {
        let client = match client(kubeconfig, master).await {
            Ok(c) => c,
            Err(err) => {
                error!("{err}");
                return ExitCode::FAILURE;
            }
        };
        let minor = match flag_minor {
            Some(m) => {
                info!(emulated = %m, "emulating Kubernetes {m} (--emulated-version)");
                m
            }
            None => match discover_minor(&client).await {
                Ok(m) => {
                    info!(emulated = %m, "emulating Kubernetes {m}, the API server's minor");
                    m
                }
                Err(err) => {
                    error!("{err}");
                    return ExitCode::FAILURE;
                }
            },
        };
        let (cfg, warnings) = if cfg.emulation.minor() == minor {
            (cfg, warnings)
        } else {
            match load_config(&args, &bytes, &registry, minor) {
                Ok(loaded) => loaded,
                Err(err) => {
                    err.report(&args);
                    return ExitCode::FAILURE;
                }
            }
        };
        report_warnings(&args, &cfg, &warnings);
        let configz = serde_saphyr::from_str::<serde_json::Value>(&config::to_v1_yaml(&cfg))
            .map(|v| serde_json::json!({ "componentconfig": v }).to_string())
            .unwrap_or_default();
        let opportunistic_batching = cfg.emulation.enabled(OPPORTUNISTIC_BATCHING);
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
            endpoint,
            metrics: None,
            identity: default_identity(),
            configz,
            // As upstream, it applies with --config too; a negative duration flushes at once.
            pod_max_in_unschedulable_pods_duration: args
                .deprecated
                .pod_max_in_unschedulable_pods_duration
                .map_or(DEFAULT_MAX_IN_UNSCHEDULABLE, |d| {
                    d.to_std().unwrap_or(Duration::ZERO)
                }),
            opportunistic_batching,
            embedded_in: None,
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

/// Why the configuration cannot run, at one minor.
enum StartError {
    Gates(Minor, FeatureGateError),
    Config(Minor, config::ConfigErrors),
    ResourceLock(String),
}

impl StartError {
    fn report(&self, args: &SchedulerArgs) {
        match self {
            StartError::Gates(minor, err) => {
                eprintln!("error: {err} (the gates of Kubernetes {minor}, which ksched emulates)");
            }
            StartError::Config(minor, errors) => {
                for e in &errors.errors {
                    eprintln!("error: {e}");
                }
                let file = args
                    .config
                    .as_deref()
                    .map_or_else(|| "(default)".into(), |p| p.display().to_string());
                eprintln!(
                    "the configuration {file} is invalid for Kubernetes {minor} (the minor ksched emulates); `ksched config validate` shows the same errors"
                );
            }
            StartError::ResourceLock(lock) => eprintln!(
                "error: leaderElection.resourceLock: Invalid value: {lock:?}: resourceLock value must be \"leases\""
            ),
        }
    }
}

/// The configuration as the kube-scheduler of `minor` with the given gates reads it, the flags
/// that override it applied; and its warnings.
fn load_config(
    args: &SchedulerArgs,
    bytes: &[u8],
    registry: &Registry,
    minor: Minor,
) -> Result<(config::Config, Vec<String>), StartError> {
    let emulation = Emulation::with_gates(minor, &args.feature_gate.feature_gates)
        .map_err(|e| StartError::Gates(minor, e))?;
    let loaded =
        config::load_at(bytes, registry, &emulation).map_err(|e| StartError::Config(minor, e))?;
    let mut cfg = loaded.config;
    args.apply_to(&mut cfg);
    if cfg.leader_election.resource_lock != "leases" {
        return Err(StartError::ResourceLock(
            cfg.leader_election.resource_lock.clone(),
        ));
    }
    Ok((cfg, loaded.warnings))
}

/// The configuration's warnings, deprecated flags ignored with `--config`, flags without effect.
fn report_warnings(args: &SchedulerArgs, cfg: &config::Config, warnings: &[String]) {
    for w in warnings {
        warn!("{w}");
    }
    let ignored = args.ignored_with_config();
    if !ignored.is_empty() {
        warn!(
            flags = %ignored.join(", "),
            "these deprecated flags are ignored because --config is given, as kube-scheduler ignores them"
        );
    }
    let not_honoured = args.not_honoured(&cfg.emulation);
    if !not_honoured.is_empty() {
        warn!(
            flags = %not_honoured.join("; "),
            "these kube-scheduler flags are accepted but have no effect in ksched"
        );
    }
}

/// The API server's minor (discovery's `/version`), which ksched must emulate.
pub(crate) async fn discover_minor(client: &kube::Client) -> Result<Minor, String> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| format!("asking the API server for its version (to decide which Kubernetes minor to emulate; --emulated-version decides without asking): {e}"))?;
    emulation::minor_from_server(&info).map_err(|e| e.to_string())
}

async fn client(
    kubeconfig: Option<PathBuf>,
    master: Option<String>,
) -> Result<kube::Client, String> {
    let mut config = match kubeconfig {
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
    if let Some(master) = master {
        config.cluster_url = master
            .parse()
            .map_err(|e| format!("--master={master}: {e}"))?;
    }
    crate::infra::metrics::set_api_host(&config.cluster_url);
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
