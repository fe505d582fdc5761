package report_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/report"
)

// benchReportRuns is the branch size of BenchmarkReport;
// SIGNET_BENCH_REPORT_RUNS overrides it (the figure is at 10^4).
func benchReportRuns(b *testing.B) int {
	if s := os.Getenv("SIGNET_BENCH_REPORT_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err)
		return n
	}
	return 200
}

// BenchmarkReport measures signet report on a synthetic branch of N+1
// runs (4 checks each, one commit per lifecycle step, as the reconciler
// writes them; evidencetest.SynthesizeCached, written once per size and
// generator under the system temporary directory), read from a packed
// clone as an auditor would:
//
//   - full: a report.Builder's first report, of the first N runs, into
//     an empty directory (the whole audit, every page rendered; one run
//     short of the others, so that the branch is audited in full once
//     less per iteration: at 10^4 runs each full audit takes minutes);
//   - incremental: the same Builder's report of N+1 runs into the same
//     directory (one new run since): it audits only the commits after
//     the last report's tip and renders only the pages that run changed,
//     the others linked after their digest is checked;
//   - audit: audit.Branch of the N+1 runs, which every report runs
//     first (it takes the documents from it).
//
// Metrics: the mean of each in ms, incremental/full and full/audit.
func BenchmarkReport(b *testing.B) {
	ctx := b.Context()
	n := benchReportRuns(b)
	t0 := time.Now()
	s, err := evidencetest.SynthesizeCached(ctx, n+1, 4)
	require.NoError(b, err)
	b.Logf("synthetic branch of %d runs at %s (%s)", n+1, s.Remote, time.Since(t0).Round(time.Millisecond))
	repo := filepath.Join(b.TempDir(), "clone.git")
	_, err = evidencetest.Git("", nil, "clone", "-q", "--bare", "--no-local", s.Remote, repo)
	require.NoError(b, err)
	c := &evidencetest.Copy{Dir: repo}
	tip, err := c.Tip()
	require.NoError(b, err)
	last := "run-" + pad(n)
	adm, err := c.Find("/" + last + "/" + evidence.AdmissionFile)
	require.NoError(b, err)
	landed, err := c.Landed(adm)
	require.NoError(b, err)
	before, err := c.Git("rev-parse", landed+"^")
	require.NoError(b, err)
	ref := "refs/heads/" + evidencetest.Branch
	at := func(commit string) {
		_, err := c.Git("update-ref", ref, commit)
		require.NoError(b, err)
	}
	opts := func(out string) report.Options { return report.Options{Repo: repo, Policy: s.Policy, Out: out} }
	b.Logf("%d+1 runs, %d signed documents", n, s.Documents)
	// Read the clone's pack once so that the first report does not pay
	// alone for bringing it into the page cache.
	packs, err := filepath.Glob(filepath.Join(repo, "objects", "pack", "*"))
	require.NoError(b, err)
	for _, p := range packs {
		_, err := os.ReadFile(p)
		require.NoError(b, err)
	}

	var full, incr, aud time.Duration
	var phases report.Phases
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		out := filepath.Join(dir, strconv.Itoa(i))
		b.StopTimer()
		at(before)
		b.StartTimer()

		var builder report.Builder
		t0 := time.Now()
		res, err := builder.Build(ctx, opts(out))
		full += time.Since(t0)
		require.NoError(b, err)
		require.Empty(b, res.Audit.Findings)
		b.StopTimer()
		at(tip)
		b.StartTimer()

		t0 = time.Now()
		res, err = builder.Build(ctx, opts(out))
		incr += time.Since(t0)
		require.NoError(b, err)
		require.True(b, res.Incremental, "the second report starts from the first")
		b.Logf("incremental: %d of %d pages rendered; audit %s, join and render %s, write %s", res.Rendered, res.Pages,
			res.Took.Audit, res.Took.Render, res.Took.Write)
		phases.Audit += res.Took.Audit
		phases.Render += res.Took.Render
		phases.Write += res.Took.Write
		// The index, the new run's page, its node's, its profile's, the
		// archive page listing it (and, when it opens a new archive page,
		// the link to it on the one before).
		require.LessOrEqual(b, len(res.Changed), 6, "%v", res.Changed)

		t0 = time.Now()
		_, err = audit.Branch(ctx, audit.Options{Repo: repo, Policy: s.Policy})
		aud += time.Since(t0)
		require.NoError(b, err)
		b.StopTimer()
		require.NoError(b, os.RemoveAll(out))
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(i) }
	b.ReportMetric(ms(full), "full-ms")
	b.ReportMetric(ms(incr), "incremental-ms")
	b.ReportMetric(ms(aud), "audit-ms")
	b.ReportMetric(ms(phases.Audit), "incremental-audit-ms")
	b.ReportMetric(ms(phases.Render), "incremental-render-ms")
	b.ReportMetric(ms(phases.Write), "incremental-write-ms")
	b.ReportMetric(float64(incr)/float64(full), "incremental/full")
	b.ReportMetric(float64(full)/float64(aud), "full/audit")
}

func pad(i int) string {
	s := strconv.Itoa(i)
	for len(s) < 6 {
		s = "0" + s
	}
	return s
}
