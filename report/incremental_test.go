package report_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/report"
)

// site is the report in out as a reader gets it: the current
// generation's files and the entry.
func site(t *testing.T, out string) map[string]string {
	t.Helper()
	s := readTree(t, filepath.Join(out, report.CurrentLink))
	s["(entry)"] = readTree(t, out)["index.html"]
	return s
}

// TestBuilderIncrementalEqualsFull: a Builder that reports the branch
// again after every commit (runs opening and closing, new archive pages
// at a page size of 1, a stray file that withholds every run at the end)
// writes, each time, exactly the bytes of a full report of the same
// branch into an empty directory, and after the first clean report
// starts from the last one.
func TestBuilderIncrementalEqualsFull(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	_, err = c.Append(map[string][]byte{"stray.txt": []byte("not evidence\n")})
	require.NoError(t, err)
	commits, err := c.Commits() // oldest first
	require.NoError(t, err)
	ref := "refs/heads/" + evidencetest.Branch

	out := filepath.Join(t.TempDir(), "site")
	var b report.Builder
	incremental, fewer := 0, 0
	for i, commit := range commits {
		_, err := c.Git("update-ref", ref, commit)
		require.NoError(t, err)
		opts := report.Options{Repo: c.Dir, Policy: f.Policy, PageSize: 1}
		opts.Out = out
		res, err := b.Build(t.Context(), opts)
		require.NoError(t, err, "commit %d", i)
		if res.Incremental {
			incremental++
			assert.LessOrEqual(t, res.Rendered, res.Pages)
			if res.Rendered < res.Pages {
				fewer++
			}
		}
		if i == len(commits)-1 {
			require.NotEmpty(t, res.Audit.Findings)
			assert.False(t, res.Incremental, "a finding since the last report: every page rendered again")
		}
		opts.Out = filepath.Join(t.TempDir(), "full")
		_, err = report.Build(t.Context(), opts)
		require.NoError(t, err)
		require.Equal(t, site(t, opts.Out), site(t, out), "commit %d of %d: incremental and full reports differ", i, len(commits))
	}
	assert.Greater(t, incremental, len(commits)/2, "most reports start from the last one")
	assert.Greater(t, fewer, len(commits)/3, "and render only some pages")
	t.Logf("%d commits, %d incremental reports, %d of them rendering only some pages", len(commits), incremental, fewer)
}

// TestBuilderTamperedPageNotKept: a page of the last report changed in
// the output directory is not linked into the next report: the report is
// rendered in full, and its bytes are a full report's.
func TestBuilderTamperedPageNotKept(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	before, err := c.Before("/run-b/" + evidence.AdmissionFile)
	require.NoError(t, err)
	ref := "refs/heads/" + evidencetest.Branch
	_, err = c.Git("update-ref", ref, before)
	require.NoError(t, err)

	out := filepath.Join(t.TempDir(), "site")
	opts := report.Options{Repo: c.Dir, Policy: f.Policy, Out: out}
	var b report.Builder
	_, err = b.Build(t.Context(), opts)
	require.NoError(t, err)
	page := filepath.Join(out, report.CurrentLink, "runs/fixture/run-a.html")
	require.NoError(t, os.WriteFile(page, []byte("<p>run-a: Pass, trust me</p>\n"), 0o644))

	_, err = c.Git("update-ref", ref, tip)
	require.NoError(t, err)
	res, err := b.Build(t.Context(), opts)
	require.NoError(t, err)
	assert.False(t, res.Incremental, "a changed page forces a full report")
	assert.Contains(t, res.Changed, "runs/fixture/run-a.html")

	full := filepath.Join(t.TempDir(), "full")
	_, err = report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: full})
	require.NoError(t, err)
	assert.Equal(t, site(t, full), site(t, out))
}

// TestBuilderStartsOverWhenStateDoesNotHold: the branch rewritten under
// the kept state (a document of an old run changed), or the options
// changed (page size), gives a full report, never one joined with the
// kept state; its bytes are a full report's.
func TestBuilderStartsOverWhenStateDoesNotHold(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, c *evidencetest.Copy, opts *report.Options)
	}{
		{"rewritten", func(t *testing.T, c *evidencetest.Copy, _ *report.Options) {
			p, err := c.Find("/run-a/" + evidence.EvidenceFile)
			require.NoError(t, err)
			raw, err := c.Read("refs/heads/"+evidencetest.Branch, p)
			require.NoError(t, err)
			forged, err := evidencetest.Resign(raw, f.Reconciler, func(pred map[string]any) { pred["verdict"] = "Inconclusive" })
			require.NoError(t, err)
			at, err := c.Landed(p)
			require.NoError(t, err)
			_, err = c.Rewrite(at, map[string][]byte{p: forged})
			require.NoError(t, err)
		}},
		{"page size", func(_ *testing.T, _ *evidencetest.Copy, opts *report.Options) { opts.PageSize = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			out := filepath.Join(t.TempDir(), "site")
			opts := report.Options{Repo: c.Dir, Policy: f.Policy, Out: out, PageSize: 1}
			var b report.Builder
			_, err = b.Build(t.Context(), opts)
			require.NoError(t, err)
			tc.change(t, c, &opts)
			res, err := b.Build(t.Context(), opts)
			require.NoError(t, err)
			assert.False(t, res.Incremental, "the kept state does not hold: a full report")
			full := filepath.Join(t.TempDir(), "full")
			opts.Out = full
			_, err = report.Build(t.Context(), opts)
			require.NoError(t, err)
			assert.Equal(t, site(t, full), site(t, out))
		})
	}
}
