//! Logging of `ksched scheduler` and `ksched operator`: kube-scheduler's `--logging-format`
//! (`text`, or `json` with klog's keys: `ts` in epoch milliseconds, `caller`, `msg`, `v` or `err`),
//! `-v` levels, split streams, and repeats rate-limited.
//!
//! A message logged again with the same fields (an API server that stays down makes every watch
//! and every lease attempt fail the same way) is written the first time, then at most once per
//! interval that doubles from [`FIRST_INTERVAL`] to [`MAX_INTERVAL`]; the line that is written
//! after a quiet spell says how many repeats were left out (`repeated=N`). A message that stops
//! for [`MAX_INTERVAL`] starts afresh. Distinct messages are never held back.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
use tracing_subscriber::registry::LookupSpan;

/// The first repeat of a message is written this long after it, at the earliest.
pub(crate) const FIRST_INTERVAL: Duration = Duration::from_secs(2);
/// Repeats are written at least this far apart.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(300);
/// Distinct messages remembered at most (the oldest are forgotten first).
const MAX_REMEMBERED: usize = 4096;

/// kube-scheduler's `--logging-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// How a process logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    pub format: LogFormat,
    /// `tracing` filter directives when `RUST_LOG` is not set.
    pub default_filter: String,
    /// Errors to stderr, everything else to stdout (`--log-text-split-stream`,
    /// `--log-json-split-stream`); otherwise all to stderr.
    pub split_stream: bool,
}

/// The `tracing` filter of klog's `-v` level: 0-1 info (the watch machinery's chatter at warn),
/// 2-3 info, 4-5 ksched's debug, 6 and more trace.
pub(crate) fn verbosity_filter(verbosity: u32) -> &'static str {
    match verbosity {
        0..=1 => "info,kube_runtime=warn",
        2..=3 => "info",
        4..=5 => "ksched=debug,info",
        _ => "ksched=trace,debug",
    }
}

/// Replaces the installed logger's filter (`/debug/flags/v`); unset until [`init`] installs one.
type SetFilter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;
static SET_FILTER: OnceLock<SetFilter> = OnceLock::new();

/// kube-scheduler's `PUT /debug/flags/v` (component-base's `GlogSetter`): sets the verbosity of a
/// running process to `value` (a number), with its answer, or why not.
pub(crate) fn set_verbosity(value: &str) -> Result<String, String> {
    let v: u32 = value
        .trim()
        .parse()
        .map_err(|e| format!("strconv.ParseUint: parsing {value:?}: {e}"))?;
    let set = SET_FILTER
        .get()
        .ok_or("this process's logger was not installed by ksched: its verbosity cannot be set")?;
    set(verbosity_filter(v))?;
    Ok(format!(
        "successfully set klog.logging.verbosity to {}",
        value.trim()
    ))
}

/// Installs the process's logger (a no-op when one is installed already, e.g. by an out-of-tree
/// binary's `main`).
pub(crate) fn init(opts: &LogOptions) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&opts.default_filter));
    let ansi = !opts.split_stream
        && opts.format == LogFormat::Text
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let format = Formatter::new(opts.format, RepeatLimiter::default());
    let writer = if opts.split_stream {
        BoxMakeWriter::new(
            std::io::stderr
                .with_max_level(Level::ERROR)
                .or_else(std::io::stdout),
        )
    } else {
        BoxMakeWriter::new(std::io::stderr)
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .event_format(format)
        .with_writer(writer)
        .with_filter_reloading();
    let reload = builder.reload_handle();
    if builder.try_init().is_ok() {
        let _ = SET_FILTER.set(Box::new(move |directives: &str| {
            reload
                .reload(tracing_subscriber::EnvFilter::new(directives))
                .map_err(|e| e.to_string())
        }));
    }
}

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Write it; `repeated` earlier copies were left out since it was last written.
    Write {
        repeated: u64,
    },
    Suppress,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The next copy is written at or after this.
    next: Instant,
    interval: Duration,
    /// Copies left out since the last one written.
    repeated: u64,
    last: Instant,
}

/// Remembers recent messages (by a hash of their call site and fields) and decides which copies
/// are written.
#[derive(Debug)]
pub(crate) struct RepeatLimiter {
    seen: Mutex<HashMap<u64, Seen>>,
    first: Duration,
    max: Duration,
}

impl Default for RepeatLimiter {
    fn default() -> Self {
        Self::new(FIRST_INTERVAL, MAX_INTERVAL)
    }
}

impl RepeatLimiter {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self {
            seen: Mutex::new(HashMap::new()),
            first,
            max,
        }
    }

    /// The verdict for the message hashed as `key`, seen at `now`.
    pub(crate) fn check(&self, key: u64, now: Instant) -> Verdict {
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REMEMBERED && !seen.contains_key(&key) {
            let max = self.max;
            seen.retain(|_, s| now.saturating_duration_since(s.last) < max);
            if seen.len() >= MAX_REMEMBERED {
                seen.clear();
            }
        }
        let fresh = Seen {
            next: now + self.first,
            interval: self.first,
            repeated: 0,
            last: now,
        };
        let Some(s) = seen.get_mut(&key) else {
            seen.insert(key, fresh);
            return Verdict::Write { repeated: 0 };
        };
        if now.saturating_duration_since(s.last) >= self.max {
            // Quiet for long enough: a new episode.
            let repeated = s.repeated;
            *s = fresh;
            return Verdict::Write { repeated };
        }
        s.last = now;
        if now < s.next {
            s.repeated += 1;
            return Verdict::Suppress;
        }
        s.interval = (s.interval * 2).min(self.max);
        s.next = now + s.interval;
        Verdict::Write {
            repeated: std::mem::take(&mut s.repeated),
        }
    }
}

/// An event's fields in order, values rendered as JSON.
#[derive(Default)]
struct Fields {
    message: String,
    values: Vec<(&'static str, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, serde_json::Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, serde_json::Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, serde_json::Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, serde_json::Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, serde_json::Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, serde_json::Value::from(format!("{value:?}")));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
        } else {
            self.values.push((field.name(), value));
        }
    }

    fn key(&self, event: &Event<'_>) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        event.metadata().callsite().hash(&mut h);
        self.message.hash(&mut h);
        for (name, value) in &self.values {
            name.hash(&mut h);
            value.to_string().hash(&mut h);
        }
        h.finish()
    }
}

/// klog's verbosity of a level, for JSON's `v` (ksched's `-v` maps 4 to debug, 6 to trace).
fn verbosity(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 6,
        Level::DEBUG => 4,
        _ => 0,
    }
}

/// zap's short caller: the file's last directory and name, and the line.
fn caller(event: &Event<'_>) -> Option<String> {
    let file = event.metadata().file()?;
    let mut parts = file.rsplitn(3, '/');
    let name = parts.next()?;
    let short = match parts.next() {
        Some(dir) => format!("{dir}/{name}"),
        None => name.to_string(),
    };
    Some(match event.metadata().line() {
        Some(line) => format!("{short}:{line}"),
        None => short,
    })
}

/// One JSON log line as klog's JSON format writes it.
fn json_line(event: &Event<'_>, fields: Fields, repeated: u64, now: SystemTime) -> String {
    let ts = now
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let mut obj = serde_json::Map::new();
    obj.insert("ts".into(), serde_json::Value::from(ts));
    if let Some(caller) = caller(event) {
        obj.insert("caller".into(), caller.into());
    }
    obj.insert("msg".into(), fields.message.into());
    let level = event.metadata().level();
    if *level == Level::ERROR {
        if let Some((_, err)) = fields
            .values
            .iter()
            .find(|(n, _)| *n == "error" || *n == "err")
        {
            obj.insert("err".into(), err.clone());
        }
    } else {
        obj.insert("v".into(), verbosity(level).into());
    }
    obj.insert("logger".into(), event.metadata().target().into());
    for (name, value) in fields.values {
        if *level == Level::ERROR && (name == "error" || name == "err") {
            continue;
        }
        obj.insert(name.to_string(), value);
    }
    if repeated > 0 {
        obj.insert("repeated".into(), repeated.into());
    }
    serde_json::Value::Object(obj).to_string()
}

/// The event formatter: text (tracing's full format) or klog-style JSON, after the repeat limiter.
pub(crate) struct Formatter {
    format: LogFormat,
    text: format::Format,
    limiter: RepeatLimiter,
}

impl Formatter {
    pub(crate) fn new(format: LogFormat, limiter: RepeatLimiter) -> Self {
        Self {
            format,
            text: format::Format::default(),
            limiter,
        }
    }
}

impl<S, N> FormatEvent<S, N> for Formatter
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let repeated = match self.limiter.check(fields.key(event), Instant::now()) {
            Verdict::Suppress => return Ok(()),
            Verdict::Write { repeated } => repeated,
        };
        match self.format {
            LogFormat::Json => {
                let mut line = json_line(event, fields, repeated, SystemTime::now());
                // Spans carry no fields ksched relies on; JSON lines stay flat, as klog's.
                line.push('\n');
                writer.write_str(&line)
            }
            LogFormat::Text if repeated == 0 => self.text.format_event(ctx, writer, event),
            LogFormat::Text => {
                let mut line = String::new();
                // Without colours: a terminal shows this one line plain.
                self.text.format_event(ctx, Writer::new(&mut line), event)?;
                let line = line.trim_end_matches('\n');
                writeln!(writer, "{line} repeated={repeated}")
            }
        }
    }
}

/// A kube error as people read it. kube's own text of an API error ends in a debug dump of the
/// Status (`ApiError: ... (Status { status: Some(Failure), ... })`); this is the API server's
/// message (which names the object), its reason and the HTTP code.
pub(crate) fn kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => format!("{} (HTTP {})", s.message, s.code),
        kube::Error::Api(s) => format!("{} ({}, HTTP {})", s.message, s.reason, s.code),
        other => other.to_string(),
    }
}

/// A watch error as people read it (the API errors inside as [`kube_error`] says them).
pub(crate) fn watch_error(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match e {
        Error::InitialListFailed(k) => {
            format!("failed to perform initial object list: {}", kube_error(k))
        }
        Error::WatchStartFailed(k) => format!("failed to start watching object: {}", kube_error(k)),
        Error::WatchFailed(k) => format!("watch stream failed: {}", kube_error(k)),
        other => other.to_string(),
    }
}

/// A controller's error as people read it: the watch and API errors inside as [`watch_error`] and
/// [`kube_error`] say them.
pub(crate) fn controller_error<E: std::fmt::Display>(
    e: &kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
) -> String {
    use kube::runtime::controller::Error;
    match e {
        Error::QueueError(w) => format!("event queue error: {}", watch_error(w)),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_api_errors_read_as_the_api_server_says_them() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": "serviceaccounts \"ksched-operator-uninstall\" not found",
            "reason": "NotFound",
            "code": 404,
        }))
        .expect("status");
        let e = kube::Error::Api(Box::new(status));
        assert!(e.to_string().contains("Status {"), "kube's own text: {e}");
        assert_eq!(
            kube_error(&e),
            "serviceaccounts \"ksched-operator-uninstall\" not found (NotFound, HTTP 404)"
        );
        let w = kube::runtime::watcher::Error::InitialListFailed(e);
        assert_eq!(
            watch_error(&w),
            "failed to perform initial object list: serviceaccounts \"ksched-operator-uninstall\" not found (NotFound, HTTP 404)"
        );
    }

    fn at(start: Instant, secs: f64) -> Instant {
        start + Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_repeated_message_is_written_with_doubling_gaps() {
        let limiter = RepeatLimiter::new(Duration::from_secs(2), Duration::from_secs(60));
        let start = Instant::now();
        let mut written = Vec::new();
        // The same message every 100 ms for 40 s.
        for i in 0..400 {
            let t = f64::from(i) * 0.1;
            if let Verdict::Write { repeated } = limiter.check(7, at(start, t)) {
                written.push((t.round() as u64, repeated));
            }
        }
        let times: Vec<u64> = written.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![0, 2, 6, 14, 30], "{written:?}");
        // Each written copy counts the ones left out before it.
        assert_eq!(written[0].1, 0);
        assert_eq!(written[1].1, 19);
        assert_eq!(written[2].1, 39);
        let total: u64 = written.iter().map(|(_, r)| r + 1).sum();
        assert!(total <= 400);
    }

    #[test]
    fn distinct_messages_are_not_held_back() {
        let limiter = RepeatLimiter::new(Duration::from_secs(2), Duration::from_secs(60));
        let now = Instant::now();
        for key in 0..100 {
            assert_eq!(limiter.check(key, now), Verdict::Write { repeated: 0 });
        }
        assert_eq!(limiter.check(5, now), Verdict::Suppress);
    }

    #[test]
    fn a_message_quiet_for_the_longest_interval_starts_afresh() {
        let limiter = RepeatLimiter::new(Duration::from_secs(2), Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(limiter.check(1, start), Verdict::Write { repeated: 0 });
        assert_eq!(limiter.check(1, at(start, 1.0)), Verdict::Suppress);
        assert_eq!(
            limiter.check(1, at(start, 70.0)),
            Verdict::Write { repeated: 1 }
        );
        // The next repeat waits the first interval again, not a doubled one.
        assert_eq!(limiter.check(1, at(start, 71.0)), Verdict::Suppress);
        assert_eq!(
            limiter.check(1, at(start, 72.5)),
            Verdict::Write { repeated: 1 }
        );
    }

    #[test]
    fn memory_is_bounded() {
        let limiter = RepeatLimiter::new(Duration::from_secs(2), Duration::from_secs(60));
        let now = Instant::now();
        for key in 0..(3 * MAX_REMEMBERED as u64) {
            limiter.check(key, now);
        }
        assert!(limiter.seen.lock().len() <= MAX_REMEMBERED);
    }

    /// Captures what the formatter writes for events logged inside `f`.
    fn capture(format: LogFormat, f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_ansi(false)
            .event_format(Formatter::new(format, RepeatLimiter::default()))
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().clone()).unwrap()
    }

    #[test]
    fn json_lines_have_klogs_keys() {
        let out = capture(LogFormat::Json, || {
            tracing::info!(pod = "ns/p", node = "n1", "Successfully bound pod to node");
            tracing::debug!(count = 3, "queue");
            tracing::error!(error = "connection refused", "Failed to watch");
        });
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0]["msg"], "Successfully bound pod to node");
        assert_eq!(lines[0]["v"], 0);
        assert_eq!(lines[0]["pod"], "ns/p");
        assert!(
            lines[0]["ts"].as_f64().unwrap() > 1.6e12,
            "epoch milliseconds"
        );
        assert!(
            lines[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("infra/logging.rs:")
        );
        assert_eq!(lines[1]["v"], 4);
        assert_eq!(lines[1]["count"], 3);
        assert_eq!(lines[2]["err"], "connection refused");
        assert!(lines[2].get("v").is_none() && lines[2].get("error").is_none());
    }

    #[test]
    fn repeats_are_left_out_of_the_output() {
        let out = capture(LogFormat::Text, || {
            for _ in 0..1000 {
                tracing::warn!(error = "connection refused", "Failed to watch");
            }
            tracing::warn!(error = "connection reset", "Failed to watch");
        });
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(out.contains("connection refused") && out.contains("connection reset"));
    }
}
