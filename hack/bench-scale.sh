#!/usr/bin/env bash
# bench-scale.sh: issue 19's measurements on a long evidence branch, each
# in a process of its own so that one's memory never counts in another's
# peak (make bench-scale; docs/performance.md):
#   1. the synthetic branch of SCALE_RUNS runs (internal/tools/synth),
#      cached under TMPDIR (writing 10^5 runs takes about an hour on two
#      cores, docs/performance.md; a cached branch is reused);
#   2. signet audit of the whole branch: wall time and peak RSS
#      (goal at 10^5: <= 1 GiB), progress every minute;
#   3. BenchmarkStartup: a reconciler's start-up and one no-op pass on it,
#      from an empty state directory and again on its state (<= 256 MiB);
#   4. BenchmarkLocalCheckOverhead with the branch on the evidence remote
#      (<= 5x a bare fork/exec), SCALE_LOCAL_COUNT rounds (default 1) of
#      SCALE_LOCAL_BENCHTIME (default 10x: the benchmark runs once with
#      one run and again with ten, and each time fetches the whole branch
#      twice, more than half an hour at 10^5 on two cores; 1x runs it
#      once);
#   5. BenchmarkIncrementalAudit on the branch: the audit of its last run
#      from the checkpoint of the branch before it, against auditing that
#      run alone (<= 2x); its set-up is one whole audit writing the
#      checkpoint (tens of minutes at 10^5).
# SCALE_STEPS picks and orders steps 2-5 (default "audit startup local";
# "incremental" is run only when named).
# SCALE_MEMCG, a memory cgroup directory this user may create cgroups in
# (v1: /sys/fs/cgroup/memory; v2: one with the memory controller enabled
# for its children), runs the audit inside a child cgroup limited to
# 1 GiB and the reconciler's first start and restart each inside one
# limited to 256 MiB (the remote then served over loopback HTTP), the
# issue's bounds: a run whose own memory the limit does not hold is
# killed, and fails; one whose page cache does not fit thrashes (slow).
# Results go to stdout and to bench-scale-<runs>.log (SCALE_LOG: another
# file, for two steps run at once); the benchmarks' whole output to
# bench-scale-<runs>.<step>.out.
set -euo pipefail

runs=${SCALE_RUNS:-100000}
steps=${SCALE_STEPS:-audit startup local}
for step in $steps; do
	case $step in
	audit | startup | local | incremental) ;;
	*) echo "bench-scale: SCALE_STEPS: unknown step \"$step\" (audit, startup, local, incremental)" >&2; exit 2 ;;
	esac
done
export TMPDIR=${TMPDIR:-/dev/shm}
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log=${SCALE_LOG:-$root/bench-scale-$runs.log}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }

# memcg NAME BYTES creates (or resets) cgroup NAME under SCALE_MEMCG with
# memory limit BYTES and prints its directory.
memcg() {
	local d=$SCALE_MEMCG/$1
	mkdir -p "$d"
	if [ -e "$d/memory.limit_in_bytes" ]; then
		echo "$2" >"$d/memory.limit_in_bytes"
		echo 0 >"$d/memory.max_usage_in_bytes"
	else
		echo "$2" >"$d/memory.max"
	fi
	echo "$d"
}

# memcg_report DIR prints what the kernel says of cgroup DIR's memory.
memcg_report() {
	if [ -e "$1/memory.max_usage_in_bytes" ]; then
		echo "cgroup $1: limit $(cat "$1/memory.limit_in_bytes") bytes, peak usage $(cat "$1/memory.max_usage_in_bytes") bytes (anonymous and page cache), $(grep -E '^total_rss ' "$1/memory.stat")"
	else
		echo "cgroup $1: limit $(cat "$1/memory.max") bytes, peak usage $(cat "$1/memory.peak" 2>/dev/null || echo ?) bytes, $(grep -E '^(oom_kill) ' "$1/memory.events")"
	fi
}

: >"$log"
say "building"
$GO build -o "$work/signet" ./cmd/signet
$GO build -o "$work/synth" ./internal/tools/synth
$GO test -c -o "$work/reconciler.test" ./reconciler
$GO test -c -o "$work/audit.test" ./evidence/audit

say "synthetic branch of $runs runs under $TMPDIR"
"$work/synth" -runs "$runs" | tee "$work/synth.json" | tee -a "$log"
dir=$(sed -n 's/^  "dir": "\(.*\)",$/\1/p' "$work/synth.json")
[ -d "$dir" ] || { say "no branch directory in the synth output"; exit 1; }

step_audit() {
	say "signet audit of the whole branch"
	local cg=""
	if [ -n "${SCALE_MEMCG:-}" ]; then
		cg=$(memcg signet-bench-audit $((1 << 30)))
	fi
	bash -c 'if [ -n "$1" ]; then echo $$ >"$1/cgroup.procs"; fi; shift; exec "$@"' _ "$cg" \
		/usr/bin/time -v "$work/signet" audit --repo "$dir/remote.git" --trust "$dir/trust.yaml" \
		--progress-interval 60s >"$work/audit.out" 2>"$work/audit.err" || true
	if [ -n "$cg" ]; then memcg_report "$cg" | tee -a "$log"; fi
	{ grep -E '^audit: ' "$work/audit.err" || true; } | tail -3 | tee -a "$log"
	{ grep -E 'Elapsed \(wall clock\)|Maximum resident set size|Exit status' "$work/audit.err" || true; } | tee -a "$log"
	{ grep -vE '^  ' "$work/audit.out" || true; } | tail -4 | tee -a "$log"
}

step_startup() {
	say "reconciler start-up"
	local cg="" first=""
	if [ -n "${SCALE_MEMCG:-}" ]; then
		first=$(memcg signet-bench-first $((256 << 20)))
		cg=$(memcg signet-bench-restart $((256 << 20)))
	fi
	(cd reconciler && SIGNET_BENCH_STARTUP_FIRST_CGROUP=$first SIGNET_BENCH_STARTUP_CGROUP=$cg SIGNET_BENCH_STARTUP_RUNS=$runs "$work/reconciler.test" -test.run '^$' \
		-test.bench '^BenchmarkStartup$' -test.benchtime 1x -test.timeout 0) 2>&1 | tee "$root/bench-scale-$runs.startup.out" | { grep -E '^Benchmark|FAIL|Error' || true; } | tee -a "$log"
	if [ -n "$cg" ]; then memcg_report "$first" | tee -a "$log"; memcg_report "$cg" | tee -a "$log"; fi
}

step_local() {
	say "local check overhead"
	(cd reconciler && SIGNET_BENCH_LOCAL_RUNS=$runs "$work/reconciler.test" -test.run '^$' \
		-test.bench '^BenchmarkLocalCheckOverhead$' -test.benchtime "${SCALE_LOCAL_BENCHTIME:-10x}" -test.count "${SCALE_LOCAL_COUNT:-1}" -test.timeout 0) 2>&1 | tee "$root/bench-scale-$runs.local.out" | { grep -E '^Benchmark|FAIL|Error' || true; } | tee -a "$log"
}

step_incremental() {
	say "incremental audit of the last run"
	(cd evidence/audit && SIGNET_BENCH_INCR_RUNS=$runs "$work/audit.test" -test.run '^$' \
		-test.bench '^BenchmarkIncrementalAudit$' -test.benchtime 20x -test.v -test.timeout 0) 2>&1 | tee "$root/bench-scale-$runs.incremental.out" | { grep -E '^Benchmark|incremental_bench_test|FAIL|Error' || true; } | tee -a "$log"
}

for step in $steps; do
	"step_$step"
done
say "done: $log"
