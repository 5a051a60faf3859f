//! The process's memory allocator, chosen when it starts: jemalloc (with heap profiling, what
//! `/debug/pprof/heap` reads) or glibc's malloc. `KSCHED_ALLOCATOR=jemalloc|glibc` picks one;
//! unset, [`DEFAULT`].
//!
//! A switch at run time rather than a cargo feature: one build ships both, so `make bench`
//! measures the two allocators on the very same binary (one dist build, ~9 min, not two), and a
//! cluster switches a scheduler's allocator with an environment variable, without another image.
//! The price is one predictable branch on a static per allocation, paid by both.
//!
//! A binary installs it with [`use_selectable_allocator!`] (the `ksched` binary does; an
//! out-of-tree plugin's binary may). The choice is made at the first allocation, from the
//! environment (read with `getenv`, which does not allocate), and never changes, so every block
//! is freed by the allocator that gave it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{CStr, c_char};
use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemallocator::Jemalloc;

/// The environment variable that chooses the allocator.
pub const ENV: &str = "KSCHED_ALLOCATOR";
/// [`ENV`] for `getenv`.
const ENV_C: &CStr = c"KSCHED_ALLOCATOR";

/// The allocator when [`ENV`] is unset: jemalloc, so heap profiles are served as kube-scheduler
/// serves them, with no restart.
pub const DEFAULT: Kind = Kind::Jemalloc;

/// jemalloc's options, read once when it starts (`_RJEM_MALLOC_CONF` in the environment overrides
/// any of them):
/// - heap profiling on and active, one sample per 512 KiB allocated on average (Go's
///   `MemProfileRate`, what kube-scheduler's heap profile samples at);
/// - two arenas, not four per CPU: a scheduler's threads allocate little concurrently, and each
///   arena keeps partly used pages of its own;
/// - freed pages go back to the system within a second, by jemalloc's background thread, rather
///   than ten seconds later and only when the process allocates again (an idle scheduler kept them).
///
/// On `make bench` (500 nodes) these cut the anonymous memory a pod costs from ~10.4-11.0 KB to
/// ~7.8-9.1 KB and the peak RSS by 3-5 MB, with CPU seconds within the rounds' spread (README,
/// Profiling).
pub const JEMALLOC_CONF: &CStr = c"prof:true,prof_active:true,lg_prof_sample:19,narenas:2,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// An allocator this process can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Jemalloc,
    Glibc,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Jemalloc => "jemalloc",
            Kind::Glibc => "glibc",
        }
    }

    /// The allocator a value of [`ENV`] names; `None` for anything else.
    pub fn parse(value: &[u8]) -> Option<Kind> {
        match value {
            b"jemalloc" => Some(Kind::Jemalloc),
            b"glibc" => Some(Kind::Glibc),
            _ => None,
        }
    }
}

const UNDECIDED: u8 = 0;
const JEMALLOC: u8 = 1;
const GLIBC: u8 = 2;
/// [`ENV`] named no allocator: [`DEFAULT`] runs, and [`check_environment`] says so.
const DEFAULT_FOR_INVALID: u8 = 3;

static CHOSEN: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The global allocator that dispatches to the chosen one.
pub struct Selectable;

#[cold]
fn decide() -> u8 {
    // SAFETY: the name is a NUL-terminated literal; getenv returns NULL or a C string that stays
    // valid while nobody calls setenv, which nothing does before the first allocation.
    let value = unsafe { libc::getenv(ENV_C.as_ptr()) };
    let choice = if value.is_null() {
        code(DEFAULT)
    } else {
        // SAFETY: getenv returned a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(value) }.to_bytes();
        Kind::parse(bytes).map_or(DEFAULT_FOR_INVALID, code)
    };
    match CHOSEN.compare_exchange(UNDECIDED, choice, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => choice,
        Err(earlier) => earlier,
    }
}

fn code(kind: Kind) -> u8 {
    match kind {
        Kind::Jemalloc => JEMALLOC,
        Kind::Glibc => GLIBC,
    }
}

#[inline]
fn jemalloc() -> bool {
    let chosen = match CHOSEN.load(Ordering::Relaxed) {
        UNDECIDED => decide(),
        c => c,
    };
    chosen == JEMALLOC || (chosen == DEFAULT_FOR_INVALID && DEFAULT == Kind::Jemalloc)
}

// SAFETY: every call goes to one of two allocators, the same one for the life of the process, so
// each block is freed, grown and shrunk by the allocator that gave it.
unsafe impl GlobalAlloc for Selectable {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        unsafe {
            if jemalloc() {
                Jemalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        unsafe {
            if jemalloc() {
                Jemalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received, to the allocator that gave `ptr`.
        unsafe {
            if jemalloc() {
                Jemalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received, to the allocator that gave `ptr`.
        unsafe {
            if jemalloc() {
                Jemalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

/// jemalloc's options as the `const char *` it reads (`_rjem_malloc_conf`, the prefixed name
/// tikv-jemallocator builds it with).
#[repr(transparent)]
pub struct MallocConf(pub *const c_char);

// SAFETY: a pointer to a `'static` C string literal, never written.
unsafe impl Sync for MallocConf {}

/// Installs [`Selectable`] as the binary's global allocator and gives jemalloc its options
/// ([`JEMALLOC_CONF`]). Once, in the binary's crate root.
#[macro_export]
macro_rules! use_selectable_allocator {
    () => {
        #[global_allocator]
        static GLOBAL_ALLOCATOR: $crate::allocator::Selectable = $crate::allocator::Selectable;

        #[unsafe(export_name = "_rjem_malloc_conf")]
        #[used]
        static JEMALLOC_MALLOC_CONF: $crate::allocator::MallocConf =
            $crate::allocator::MallocConf($crate::allocator::JEMALLOC_CONF.as_ptr());
    };
}

/// The allocator this process runs on: `None` when the binary did not install [`Selectable`]
/// (nothing was allocated through it).
pub fn active() -> Option<Kind> {
    match CHOSEN.load(Ordering::Acquire) {
        JEMALLOC => Some(Kind::Jemalloc),
        GLIBC => Some(Kind::Glibc),
        DEFAULT_FOR_INVALID => Some(DEFAULT),
        _ => None,
    }
}

/// An error naming the variable and its values when [`ENV`] names no allocator (the process then
/// runs on [`DEFAULT`]; the caller decides whether to go on).
pub fn check_environment() -> Result<(), String> {
    match std::env::var_os(ENV) {
        Some(value) if Kind::parse(value.as_encoded_bytes()).is_none() => Err(format!(
            "{ENV}={}: not an allocator; use {ENV}=jemalloc (heap profiles on /debug/pprof/heap) or {ENV}=glibc, or leave it unset for {}",
            value.to_string_lossy(),
            DEFAULT.name()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_one_of_two_allocators() {
        assert_eq!(Kind::parse(b"jemalloc"), Some(Kind::Jemalloc));
        assert_eq!(Kind::parse(b"glibc"), Some(Kind::Glibc));
        assert_eq!(Kind::parse(b"tcmalloc"), None);
        assert_eq!(Kind::parse(b""), None);
        assert_eq!(ENV_C.to_str(), Ok(ENV));
    }

    /// The unit tests run on the selectable allocator themselves (lib.rs installs it under
    /// `cfg(test)`), chosen at their first allocation.
    #[test]
    fn the_test_binary_runs_on_the_selectable_allocator() {
        let expected = std::env::var_os(ENV)
            .and_then(|v| Kind::parse(v.as_encoded_bytes()))
            .unwrap_or(DEFAULT);
        assert_eq!(active(), Some(expected));
        let v: Vec<u64> = (0..10_000).collect();
        assert_eq!(v.iter().sum::<u64>(), 49_995_000);
    }

    /// jemalloc runs with the options [`JEMALLOC_CONF`] gives (lib.rs installs them for the unit
    /// tests as `use_selectable_allocator!` does for a binary), unless the environment overrides.
    #[test]
    fn jemalloc_runs_with_two_arenas_a_background_purger_and_profiling() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        // SAFETY: each name is a NUL-terminated `opt.*` name of the type read.
        let (arenas, background, dirty, muzzy, prof, sample) = unsafe {
            (
                tikv_jemalloc_ctl::raw::read::<u32>(b"opt.narenas\0"),
                tikv_jemalloc_ctl::raw::read::<bool>(b"opt.background_thread\0"),
                tikv_jemalloc_ctl::raw::read::<isize>(b"opt.dirty_decay_ms\0"),
                tikv_jemalloc_ctl::raw::read::<isize>(b"opt.muzzy_decay_ms\0"),
                tikv_jemalloc_ctl::raw::read::<bool>(b"opt.prof\0"),
                tikv_jemalloc_ctl::raw::read::<usize>(b"opt.lg_prof_sample\0"),
            )
        };
        assert_eq!(arenas, Ok(2));
        assert_eq!(background, Ok(true));
        assert_eq!(dirty, Ok(1000));
        assert_eq!(muzzy, Ok(0));
        assert_eq!(prof, Ok(true));
        assert_eq!(sample, Ok(19));
    }
}
