//! `/debug/pprof/profile?seconds=N`: a CPU profile in pprof's protobuf format (what Go's
//! `net/http/pprof` serves; `go tool pprof https://.../debug/pprof/profile` reads it), sampled at
//! 100 Hz by the `pprof` crate (SIGPROF, stacks symbolized in process). `/debug/pprof/heap`: the
//! live heap, as jemalloc's profiling sampled it (every 512 KiB allocated, as Go's), converted to
//! pprof (gzipped protobuf, symbolized in process) by `jemalloc_pprof`; only when the process runs
//! on jemalloc ([`crate::allocator`]). Served when the configuration's `enableProfiling` is true,
//! behind the endpoint's authorization.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Go's default profile length.
pub(crate) const DEFAULT_SECONDS: u64 = 30;
/// Sampling rate, as Go's.
const FREQUENCY: i32 = 100;

static RUNNING: AtomicBool = AtomicBool::new(false);

#[derive(Debug, thiserror::Error)]
pub(crate) enum HeapProfileError {
    #[error(
        "heap profiles need jemalloc: this process runs on {0} malloc; start it with {env}=jemalloc",
        env = crate::allocator::ENV
    )]
    NotJemalloc(&'static str),
    /// An out-of-tree binary that did not install ksched's allocator.
    #[error(
        "heap profiles need jemalloc: this binary runs on the system's malloc; install ksched's allocator with `ksched::use_selectable_allocator!();` in its crate root"
    )]
    NoSelectableAllocator,
    #[error("heap profiles need jemalloc's profiling, which is off in this process")]
    ProfilingOff,
    /// jemalloc writes the profile to a temporary file first.
    #[error(
        "Could not write the heap profile: {0} (jemalloc writes it to a file in {dir} first: mount a writable /tmp, an emptyDir, or set TMPDIR)",
        dir = std::env::temp_dir().display()
    )]
    Dump(String),
}

/// The live heap as a gzipped pprof protobuf (Go's `/debug/pprof/heap` answer), read from
/// jemalloc's profiling.
pub(crate) async fn heap_profile() -> Result<Vec<u8>, HeapProfileError> {
    match crate::allocator::active() {
        Some(crate::allocator::Kind::Jemalloc) => {}
        Some(other) => return Err(HeapProfileError::NotJemalloc(other.name())),
        None => return Err(HeapProfileError::NoSelectableAllocator),
    }
    let ctl = jemalloc_pprof::PROF_CTL
        .as_ref()
        .ok_or(HeapProfileError::ProfilingOff)?
        .clone();
    // Writing, reading and symbolizing the dump is blocking work.
    tokio::task::spawn_blocking(move || {
        let mut ctl = ctl.blocking_lock();
        if !ctl.activated() {
            return Err(HeapProfileError::ProfilingOff);
        }
        ctl.dump_pprof()
            .map_err(|e| HeapProfileError::Dump(format!("{e:#}")))
    })
    .await
    .unwrap_or_else(|e| Err(HeapProfileError::Dump(e.to_string())))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfileError {
    /// Go answers the same, with 500.
    #[error("Could not enable CPU profiling: cpu profiling already in use")]
    Busy,
    #[error("Could not enable CPU profiling: {0}")]
    Profiler(String),
}

/// `seconds` of the `seconds` query parameter (Go's default 30), or the error to answer 400 with.
pub(crate) fn seconds(query: Option<&str>) -> Result<u64, String> {
    let Some(value) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("seconds="))
    else {
        return Ok(DEFAULT_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(s) if s > 0 => Ok(s),
        _ => Err(format!(
            "Bad Request: invalid value for \"seconds\": {value:?}"
        )),
    }
}

/// Profiles the whole process for `duration`; the profile as pprof protobuf bytes.
pub(crate) async fn cpu_profile(duration: Duration) -> Result<Vec<u8>, ProfileError> {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Err(ProfileError::Busy);
    }
    // The profiler guard is not Send: it lives on a blocking thread for the duration.
    let result = tokio::task::spawn_blocking(move || {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| ProfileError::Profiler(e.to_string()))?;
        std::thread::sleep(duration);
        let report = guard
            .report()
            .build()
            .map_err(|e| ProfileError::Profiler(e.to_string()))?;
        Ok(encode(&report))
    })
    .await
    .unwrap_or_else(|e| Err(ProfileError::Profiler(e.to_string())));
    RUNNING.store(false, Ordering::Release);
    result
}

/// Protobuf writing, just what profile.proto needs.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint(u64::from(field) << 3);
            self.varint(v);
        }
    }

    fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u32, m: Pb) {
        self.bytes(field, &m.0);
    }

    fn packed(&mut self, field: u32, values: impl IntoIterator<Item = u64>) {
        let mut inner = Pb::default();
        for v in values {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
}

/// Interned strings of a profile (index 0 is "").
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Self {
        Self {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Pb {
    let mut m = Pb::default();
    m.int(1, strings.id(kind) as i64);
    m.int(2, strings.id(unit) as i64);
    m
}

/// The report as a pprof `Profile`: samples (count, cpu nanoseconds), one location per distinct
/// frame (its inlined functions as lines, innermost first), a `thread` label per sample.
fn encode(report: &pprof::Report) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Pb::default();
    let period = 1_000_000_000 / i64::from(report.timing.frequency.max(1));
    out.message(1, value_type(&mut strings, "samples", "count"));
    out.message(1, value_type(&mut strings, "cpu", "nanoseconds"));
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    let mut function_msgs = Vec::new();
    let mut locations: HashMap<Vec<(u64, i64)>, u64> = HashMap::new();
    let mut location_msgs = Vec::new();
    let mut samples = Vec::new();
    for (frames, count) in &report.data {
        let mut location_ids = Vec::new();
        for frame in &frames.frames {
            let lines: Vec<(u64, i64)> = frame
                .iter()
                .map(|symbol| {
                    let key = (symbol.name(), symbol.filename().into_owned());
                    let next = functions.len() as u64 + 1;
                    let id = *functions.entry(key.clone()).or_insert_with(|| {
                        let mut f = Pb::default();
                        f.uint(1, next);
                        f.int(2, strings.id(&key.0) as i64);
                        f.int(3, strings.id(&key.0) as i64);
                        f.int(4, strings.id(&key.1) as i64);
                        function_msgs.push(f);
                        next
                    });
                    (id, i64::from(symbol.lineno()))
                })
                .collect();
            let next = locations.len() as u64 + 1;
            let id = *locations.entry(lines.clone()).or_insert_with(|| {
                let mut l = Pb::default();
                l.uint(1, next);
                for (function, line) in &lines {
                    let mut m = Pb::default();
                    m.uint(1, *function);
                    m.int(2, *line);
                    l.message(4, m);
                }
                location_msgs.push(l);
                next
            });
            location_ids.push(id);
        }
        let count = i64::try_from(*count).unwrap_or(0);
        let mut s = Pb::default();
        s.packed(1, location_ids);
        s.packed(2, [count as u64, (count * period) as u64]);
        let mut label = Pb::default();
        label.int(1, strings.id("thread") as i64);
        label.int(2, strings.id(&frames.thread_name_or_id()) as i64);
        s.message(3, label);
        samples.push(s);
    }
    for s in samples {
        out.message(2, s);
    }
    for l in location_msgs {
        out.message(4, l);
    }
    for f in function_msgs {
        out.message(5, f);
    }
    let time_nanos = report
        .timing
        .start_time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let duration_nanos = report.timing.duration.as_nanos() as i64;
    let period_type = value_type(&mut strings, "cpu", "nanoseconds");
    for s in &strings.table {
        out.bytes(6, s.as_bytes());
    }
    out.int(9, time_nanos);
    out.int(10, duration_nanos);
    out.message(11, period_type);
    out.int(12, period);
    out.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_default_and_errors() {
        assert_eq!(seconds(None), Ok(30));
        assert_eq!(seconds(Some("seconds=2")), Ok(2));
        assert!(seconds(Some("seconds=x")).is_err());
        assert!(seconds(Some("seconds=0")).is_err());
    }

    /// The unit tests run on jemalloc unless KSCHED_ALLOCATOR says otherwise: a live block of
    /// 64 MiB (sampled for certain) is in the profile, which is gzip.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_heap_profile_holds_a_live_allocation() {
        if crate::allocator::active() != Some(crate::allocator::Kind::Jemalloc) {
            assert!(matches!(
                heap_profile().await,
                Err(HeapProfileError::NotJemalloc("glibc"))
            ));
            return;
        }
        let live = std::hint::black_box(vec![1u8; 64 << 20]);
        let profile = heap_profile().await.unwrap();
        assert_eq!(&profile[..2], &[0x1f, 0x8b], "not gzip");
        let mut text = Vec::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(&profile[..])
            .read_to_end(&mut text)
            .unwrap();
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("inuse_space"), "no inuse_space sample type");
        assert!(
            text.contains("a_heap_profile_holds_a_live_allocation"),
            "the allocating test is not named"
        );
        drop(live);
    }

    #[test]
    fn varints_and_fields_are_protobufs() {
        let mut pb = Pb::default();
        pb.uint(1, 150);
        assert_eq!(pb.0, vec![0x08, 0x96, 0x01]);
        let mut pb = Pb::default();
        pb.bytes(6, b"cpu");
        assert_eq!(pb.0, vec![0x32, 3, b'c', b'p', b'u']);
    }

    /// Burns CPU on a thread of its own while a short profile runs: the profile has samples
    /// and names its functions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cpu_profile_has_samples_of_the_busy_function() {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let busy = stop.clone();
        let burner = std::thread::spawn(move || {
            let mut x = 0u64;
            while !busy.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        });
        let profile = cpu_profile(Duration::from_millis(600)).await.unwrap();
        stop.store(true, Ordering::Relaxed);
        let _ = burner.join();
        assert!(profile.len() > 100, "{} bytes", profile.len());
        let text = String::from_utf8_lossy(&profile);
        assert!(text.contains("samples") && text.contains("nanoseconds"));
        // A second profile at the same time is refused, as Go's.
        RUNNING.store(true, Ordering::Release);
        assert!(matches!(
            cpu_profile(Duration::from_millis(1)).await,
            Err(ProfileError::Busy)
        ));
        RUNNING.store(false, Ordering::Release);
    }
}
