#!/usr/bin/env bash
# Where the machine's time goes in each scheduler_perf workload: one round with ksched as the only
# contender under a system-wide `perf record` (the API server, etcd and the kernel are most of it
# on an API-bound workload, and a per-process profile would miss them).
#
#   hack/bench-profile.sh [workload,...]      (default: every workload of the preset)
#
# KSCHED_BIN is the ksched build to profile (default target/release/ksched, built if missing);
# BENCH_PRESET as for `make bench`. Per workload it prints the BENCH line, the share of samples
# per process and the ksched functions with the most samples; the perf data stays in
# $OUT (default target/bench-profile/). Needs `perf` (Debian: linux-perf) and root or
# kernel.perf_event_paranoid <= -1.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v perf >/dev/null || { echo "bench-profile: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
OUT=${OUT:-target/bench-profile}
KSCHED_BIN=${KSCHED_BIN:-$PWD/target/release/ksched}
[ -x "$KSCHED_BIN" ] || cargo build --release --bin ksched
export KSCHED_BIN
mkdir -p "$OUT"

workloads=${1:-}
if [ -z "$workloads" ]; then
    # The harness names its workloads when asked for one it does not know.
    workloads=$({ cargo bench --bench scheduler_perf -- --workloads '?' 2>&1 || true; } |
        sed -n 's/.*BENCH_WORKLOADS: use //p' | sed 's/, /,/g; s/,MemoryFootprint//')
fi

IFS=, read -r -a list <<<"$workloads"
# Built before the recording, so that no compiler is in the profile.
cargo bench --bench scheduler_perf --no-run >/dev/null 2>&1
for w in "${list[@]}"; do
    data="$OUT/$w.perf.data"
    log="$OUT/$w.log"
    # perf samples every CPU while the round runs; the harness's own set-up is in it too, and is
    # small next to the measured pods.
    perf record -a -F 499 -o "$data" -- \
        cargo bench --bench scheduler_perf -- --preset "${BENCH_PRESET:-default}" \
        --contenders ksched --rounds 1 --workloads "$w" >"$log" 2>&1 || {
        echo "bench-profile: $w failed, see $log" >&2
        continue
    }
    echo "== $w"
    grep -m1 '^BENCH' "$log" || true
    # Samples per process (a thread's process is its pid field), named by its main thread.
    perf script -i "$data" -F pid,tid,comm 2>/dev/null | python3 -c '
import collections, sys
by_pid, names = collections.Counter(), {}
for line in sys.stdin:
    parts = line.split()
    if len(parts) < 2 or "/" not in parts[-1]:
        continue
    pid, tid = parts[-1].split("/")
    by_pid[pid] += 1
    if pid == tid or pid not in names:
        names[pid] = " ".join(parts[:-1])
total = sum(by_pid.values()) or 1
named = collections.Counter()
for pid, n in by_pid.items():
    named["idle" if pid == "0" else names[pid]] += n
print("  samples by process: " + ", ".join(f"{name} {100 * n / total:.1f} %" for name, n in named.most_common(8)))
' || true
    echo "  ksched's own code, by function (share of all samples):"
    perf report -i "$data" --dsos "$(basename "$KSCHED_BIN")" --percentage absolute --no-children --sort symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -12 | sed -E 's/ +$//; s/^ +/    /' | cut -c1-150 || true
done
