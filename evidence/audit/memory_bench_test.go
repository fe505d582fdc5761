package audit_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/proctest"
)

// memBenchRuns are the branch lengths BenchmarkAuditMemory compares:
// SIGNET_BENCH_AUDIT_MEMORY_RUNS, two comma-separated run counts, or 201
// and 1001 runs of four checks (12 signed documents each). Branches are
// synthesized once and cached under the temporary directory
// (evidencetest.SynthesizeCached: about 5 minutes per 1000 runs on a
// shared 2-core machine); 10001 is the one BenchmarkReport uses.
func memBenchRuns(b *testing.B) (small, large int) {
	small, large = 201, 1001
	if v := os.Getenv("SIGNET_BENCH_AUDIT_MEMORY_RUNS"); v != "" {
		s, l, ok := strings.Cut(v, ",")
		var err1, err2 error
		small, err1 = strconv.Atoi(s)
		large, err2 = strconv.Atoi(l)
		if !ok || err1 != nil || err2 != nil || small < 1 || large <= small {
			b.Fatalf("SIGNET_BENCH_AUDIT_MEMORY_RUNS=%q: want two run counts, the smaller first (201,1001)", v)
		}
	}
	return small, large
}

// BenchmarkAuditMemory measures what a whole-branch audit keeps of the
// history, at two branch lengths (memBenchRuns): the live heap once the
// history is read and every run with a receipt checked and compacted
// (audit's afterWalk, after a collection; without the object reader's
// bounded delta base cache, runs checked 8 at a time), and the peak
// resident set of
// a process that does nothing but that audit (VmHWM, from a child
// running TestAuditRSSHelper). Reported: retained-B/run, the growth of
// that live heap per run between the two lengths; heap-ratio, the live
// heap at the larger length over the smaller (1 would be flat);
// rss-MiB-small and rss-MiB-large; and rss-MiB-1e5, the resident set
// extrapolated linearly to 10^5 runs from the two (the bound is
// 1024).
func BenchmarkAuditMemory(b *testing.B) {
	ctx := b.Context()
	small, large := memBenchRuns(b)
	// The live heap without the object reader's delta base cache (64 MiB
	// at most: gitobj.MaxBaseBytes), with runs checked 8 at a time
	// (instead of 256) so that both lengths hold the same few runs in
	// flight: what is left grows with the history.
	retained := func(s *evidencetest.Synthetic) uint64 {
		defer gitobj.MaxBaseBytes.Store(gitobj.MaxBaseBytes.Swap(0))
		defer audit.SetClosedRunBatch(8)()
		var live uint64
		defer audit.SetAfterWalk(func() {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			live = ms.HeapAlloc
		})()
		runtime.GC()
		rep, err := audit.Branch(ctx, audit.Options{Repo: s.Remote, Policy: s.Policy})
		require.NoError(b, err)
		require.Empty(b, rep.Findings)
		return live
	}
	var perRun, ratio, rssSmall, rssLarge float64
	for b.Loop() {
		ss, err := evidencetest.SynthesizeCached(ctx, small, 4)
		require.NoError(b, err)
		sl, err := evidencetest.SynthesizeCached(ctx, large, 4)
		require.NoError(b, err)
		hs, hl := retained(ss), retained(sl)
		perRun = (float64(hl) - float64(hs)) / float64(large-small)
		ratio = float64(hl) / float64(hs)
		rs, rl := auditRSS(b, small), auditRSS(b, large)
		rssSmall, rssLarge = float64(rs)/(1<<20), float64(rl)/(1<<20)
		b.Logf("live heap after the walk: %d B at %d runs (%d documents), %d B at %d runs (%d documents): %.0f B per run, %.2f×; peak RSS %.1f MiB, %.1f MiB",
			hs, small, ss.Documents, hl, large, sl.Documents, perRun, ratio, rssSmall, rssLarge)
	}
	b.ReportMetric(perRun, "retained-B/run")
	b.ReportMetric(ratio, "heap-ratio")
	b.ReportMetric(rssSmall, "rss-MiB-small")
	b.ReportMetric(rssLarge, "rss-MiB-large")
	b.ReportMetric(rssSmall+(rssLarge-rssSmall)/float64(large-small)*float64(100_000-small), "rss-MiB-1e5")
}

// auditRSS runs TestAuditRSSHelper in a child process on the cached
// branch of runs runs and returns its peak resident set in bytes.
func auditRSS(b *testing.B, runs int) uint64 {
	cmd := exec.CommandContext(b.Context(), os.Args[0], "-test.run", "^TestAuditRSSHelper$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "SIGNET_AUDIT_RSS_RUNS="+strconv.Itoa(runs))
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "%s", out)
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "VmHWM-bytes "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			require.NoError(b, err)
			return n
		}
	}
	b.Fatalf("no VmHWM in the helper's output:\n%s", out)
	return 0
}

// TestAuditRSSHelper is BenchmarkAuditMemory's child: with
// SIGNET_AUDIT_RSS_RUNS set it audits that cached synthetic branch and
// prints its own peak resident set (VmHWM of /proc/self/status); without
// it, the same measurement over a small branch of 5 runs, so that the
// path the benchmark relies on runs in every test run. Like signet audit,
// it sets audit.DefaultMemoryLimit unless GOMEMLIMIT is set.
func TestAuditRSSHelper(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(audit.DefaultMemoryLimit))
	}
	runs := 5
	if v := os.Getenv("SIGNET_AUDIT_RSS_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		runs = n
	}
	ctx := context.Background()
	s, err := evidencetest.SynthesizeCached(ctx, runs, 4)
	require.NoError(t, err)
	sampler := proctest.StartSampler(20 * time.Millisecond)
	rep, err := audit.Branch(ctx, audit.Options{Repo: s.Remote, Policy: s.Policy})
	require.NoError(t, err)
	require.Empty(t, rep.Findings)
	peaks, err := sampler.Stop()
	require.NoError(t, err)
	hwm, err := proctest.PeakRSS()
	require.NoError(t, err)
	require.Positive(t, hwm, "no peak resident set read")
	fmt.Printf("VmHWM-bytes %d\n", hwm)
	// VmHWM has no split: what was the audit's own (anonymous) and what
	// mapped files' pages, sampled.
	fmt.Printf("peak-RssAnon-bytes %d peak-RssFile-bytes %d\n", peaks.Anon, peaks.File)
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for line := range strings.Lines(string(status)) {
		if strings.HasPrefix(line, "Rss") {
			fmt.Print("at the end: ", line)
		}
	}
	fmt.Printf("heap: HeapSys %d, HeapInuse %d, NextGC %d, NumGC %d; %d runs, %d documents\n", ms.HeapSys, ms.HeapInuse, ms.NextGC, ms.NumGC, runs, s.Documents)
}
