//! The Kubernetes minor ksched behaves as, decided once at start, and its feature gates.
//!
//! ksched serves the API servers of every minor in [`SUPPORTED`] with the behaviour of that
//! minor's kube-scheduler: `--emulated-version` (kube-scheduler's flag) when given, else the API
//! server's minor from discovery ([`Minor::from_server`]); any other minor is refused with the
//! list of supported ones. What differs between minors lives in one small table per plugin or
//! component, read with [`at`] (`(minor, value)` rows: the row of the newest minor not after the
//! emulated one), and in the feature gates' defaults ([`FeatureGates`], one generated table per
//! minor in `gates/`). Code asks the [`Emulation`] it was given, never a global.

mod gates;

pub use gates::{
    FeatureGateError, FeatureGates, GENERIC_WORKLOAD, GENERIC_WORKLOAD_SINCE,
    OPPORTUNISTIC_BATCHING, Stage, TOPOLOGY_AWARE_WORKLOAD_SCHEDULING,
};

use std::fmt;
use std::sync::Arc;

/// A Kubernetes minor version, `1.37`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minor {
    major: u16,
    minor: u16,
}

impl Minor {
    pub const V1_36: Minor = Minor::new(1, 36);
    pub const V1_37: Minor = Minor::new(1, 37);

    pub const fn new(major: u16, minor: u16) -> Minor {
        Minor { major, minor }
    }

    pub fn major(self) -> u16 {
        self.major
    }

    pub fn minor(self) -> u16 {
        self.minor
    }

    /// The newest supported minor: what ksched emulates when nothing else decides.
    pub const NEWEST: Minor = Minor::V1_37;

    /// Parses `major.minor` (`1.36`; a leading `v` is accepted). A patch (`1.36.3`) is refused, as
    /// kube-scheduler's `--emulated-version` refuses it.
    pub fn parse(s: &str) -> Result<Minor, EmulationError> {
        let bad = || EmulationError::Syntax(s.to_string());
        let trimmed = s.trim();
        let digits = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let mut parts = digits.split('.');
        let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        if parts.next().is_some() {
            return Err(EmulationError::Patch(s.to_string()));
        }
        Ok(Minor::new(
            major.parse().map_err(|_| bad())?,
            minor.parse().map_err(|_| bad())?,
        ))
    }

    /// The minor of an API server's `/version` (`major` and `minor` as it reports them: `1` and
    /// `37`, or `37+` on some distributions), for the message its `gitVersion`.
    pub fn from_server(
        info: &k8s_openapi::apimachinery::pkg::version::Info,
    ) -> Result<Minor, EmulationError> {
        let digits = |s: &str| s.trim_end_matches(|c: char| !c.is_ascii_digit()).parse();
        match (digits(&info.major), digits(&info.minor)) {
            (Ok(major), Ok(minor)) => Ok(Minor::new(major, minor)),
            _ => Err(EmulationError::ServerVersion(format!(
                "major {:?}, minor {:?}, gitVersion {:?}",
                info.major, info.minor, info.git_version
            ))),
        }
    }

    /// Whether this ksched emulates the minor.
    pub fn is_supported(self) -> bool {
        SUPPORTED.contains(&self)
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for Minor {
    type Err = EmulationError;

    fn from_str(s: &str) -> Result<Minor, EmulationError> {
        Minor::parse(s)
    }
}

/// The minors this ksched emulates, oldest first.
pub const SUPPORTED: &[Minor] = &[Minor::V1_36, Minor::V1_37];

/// `1.36, 1.37`: the supported minors, for messages.
pub fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(Minor::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CEL rule a field naming a minor is checked by: one of [`SUPPORTED`]
/// (`SchedulerProfile.spec.kubernetesVersion`).
pub fn supported_cel() -> String {
    let quoted: Vec<String> = SUPPORTED.iter().map(|m| format!("'{m}'")).collect();
    format!("self in [{}]", quoted.join(", "))
}

/// The message of [`supported_cel`].
pub fn supported_cel_message() -> String {
    format!(
        "kubernetesVersion must be a Kubernetes minor this ksched emulates: {} (major.minor, no patch); leave it out to follow the API server's minor",
        supported_list()
    )
}

/// The value of a per-minor table at `minor`: the row of the newest minor not after it (the
/// first row when `minor` is older than every row). Tables list minors oldest first.
pub fn at<T>(table: &[(Minor, T)], minor: Minor) -> &T {
    let mut value = &table[0].1;
    for (since, v) in table {
        if *since <= minor {
            value = v;
        }
    }
    value
}

/// Why ksched cannot emulate what it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmulationError {
    #[error(
        "--emulated-version: {0:?} is not a version: the format is major.minor (1.37), optionally prefixed `kube=`"
    )]
    Syntax(String),
    #[error("--emulated-version: patch version not allowed, got: {0}")]
    Patch(String),
    #[error("--emulated-version: only the kube component can be set, got: {0}")]
    Component(String),
    #[error(
        "--emulated-version: emulation version {0} is not supported by this ksched: it emulates {list}",
        list = supported_list()
    )]
    UnsupportedFlag(Minor),
    #[error(
        "the API server runs Kubernetes {git_version} (minor {minor}), which this ksched does not emulate: it emulates {list}; pass --emulated-version with one of them (a SchedulerProfile: spec.kubernetesVersion)",
        list = supported_list()
    )]
    UnsupportedServer { minor: Minor, git_version: String },
    #[error("the API server's /version is not a Kubernetes version: {0}")]
    ServerVersion(String),
}

/// The minor `--emulated-version` asks for (`1.36` or `kube=1.36`; the flag may repeat), `None`
/// when not given. An unsupported minor is an error naming the supported ones.
pub fn minor_from_flag(values: &[String]) -> Result<Option<Minor>, EmulationError> {
    let mut chosen = None;
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        let version = match value.split_once('=') {
            Some(("kube", v)) => v,
            Some(_) => return Err(EmulationError::Component(value.to_string())),
            None => value,
        };
        let minor = Minor::parse(version)?;
        if !minor.is_supported() {
            return Err(EmulationError::UnsupportedFlag(minor));
        }
        chosen = Some(minor);
    }
    Ok(chosen)
}

/// The minor of the API server, which must be a supported one.
pub fn minor_from_server(
    info: &k8s_openapi::apimachinery::pkg::version::Info,
) -> Result<Minor, EmulationError> {
    let minor = Minor::from_server(info)?;
    if !minor.is_supported() {
        return Err(EmulationError::UnsupportedServer {
            minor,
            git_version: info.git_version.clone(),
        });
    }
    Ok(minor)
}

/// What ksched emulates: the minor and the feature gates (that minor's defaults, and what
/// `--feature-gates` set). Shared read-only by everything the scheduler builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulation {
    pub gates: FeatureGates,
}

impl Default for Emulation {
    /// The newest minor with its default gates.
    fn default() -> Emulation {
        Emulation::of(Minor::NEWEST)
    }
}

impl Emulation {
    /// `minor` with its default gates.
    pub fn of(minor: Minor) -> Emulation {
        Emulation {
            gates: FeatureGates::defaults(minor),
        }
    }

    /// `minor` with `--feature-gates` values (checked against that minor's gates, as
    /// kube-scheduler checks them against its emulated version's).
    pub fn with_gates(minor: Minor, values: &[String]) -> Result<Emulation, FeatureGateError> {
        Ok(Emulation {
            gates: FeatureGates::parse(minor, values)?,
        })
    }

    pub fn minor(&self) -> Minor {
        self.gates.minor()
    }

    /// Whether the feature gate is on (the minor's default unless set).
    pub fn enabled(&self, gate: &str) -> bool {
        self.gates.enabled(gate)
    }

    pub fn shared(self) -> Arc<Emulation> {
        Arc::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, git: &str) -> k8s_openapi::apimachinery::pkg::version::Info {
        k8s_openapi::apimachinery::pkg::version::Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git.into(),
            ..Default::default()
        }
    }

    #[test]
    fn minors_parse_as_major_minor_only() {
        assert_eq!(Minor::parse("1.36"), Ok(Minor::V1_36));
        assert_eq!(Minor::parse("v1.37"), Ok(Minor::V1_37));
        assert_eq!(
            Minor::parse("1.36.3"),
            Err(EmulationError::Patch("1.36.3".into()))
        );
        assert!(matches!(Minor::parse("1"), Err(EmulationError::Syntax(_))));
        assert!(matches!(
            Minor::parse("one.two"),
            Err(EmulationError::Syntax(_))
        ));
        assert_eq!(Minor::V1_37.to_string(), "1.37");
        assert!(Minor::V1_36 < Minor::V1_37);
    }

    #[test]
    fn the_flag_takes_a_supported_minor_with_or_without_the_component() {
        assert_eq!(minor_from_flag(&[]), Ok(None));
        assert_eq!(minor_from_flag(&["1.36".into()]), Ok(Some(Minor::V1_36)));
        assert_eq!(
            minor_from_flag(&["kube=1.37".into()]),
            Ok(Some(Minor::V1_37))
        );
        let err = minor_from_flag(&["1.35".into()]).unwrap_err();
        assert_eq!(err, EmulationError::UnsupportedFlag(Minor::new(1, 35)));
        assert_eq!(
            err.to_string(),
            "--emulated-version: emulation version 1.35 is not supported by this ksched: it emulates 1.36, 1.37"
        );
        assert!(matches!(
            minor_from_flag(&["wardle=1.2".into()]),
            Err(EmulationError::Component(_))
        ));
    }

    #[test]
    fn the_server_minor_must_be_supported_and_the_refusal_lists_the_supported() {
        assert_eq!(
            minor_from_server(&info("1", "36", "v1.36.3")),
            Ok(Minor::V1_36)
        );
        // Some distributions report `37+`.
        assert_eq!(
            minor_from_server(&info("1", "37+", "v1.37.2-eks-1")),
            Ok(Minor::V1_37)
        );
        let err = minor_from_server(&info("1", "38", "v1.38.0")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("Kubernetes v1.38.0 (minor 1.38)")
                && text.contains("emulates 1.36, 1.37"),
            "{text}"
        );
        assert!(matches!(
            minor_from_server(&info("", "", "")),
            Err(EmulationError::ServerVersion(_))
        ));
    }

    #[test]
    fn a_table_answers_the_row_of_the_newest_minor_not_after_the_emulated_one() {
        let table = [(Minor::V1_36, "old"), (Minor::V1_37, "new")];
        assert_eq!(*at(&table, Minor::V1_36), "old");
        assert_eq!(*at(&table, Minor::V1_37), "new");
        assert_eq!(*at(&table, Minor::new(1, 38)), "new");
        assert_eq!(*at(&table, Minor::new(1, 35)), "old");
    }

    #[test]
    fn the_default_emulation_is_the_newest_supported_minor() {
        assert_eq!(Emulation::default().minor(), Minor::NEWEST);
        assert_eq!(SUPPORTED.last(), Some(&Minor::NEWEST));
    }
}
