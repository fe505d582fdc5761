package report_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/report"
)

// TestReportFiredRun: a standing certification's run that is fired and
// not admitted yet is proven by its firing record: the report shows it in
// phase Fired with its chosen nodes and why they were due, never as
// withheld, and its node as open.
func TestReportFiredRun(t *testing.T) {
	f, err := evidencetest.BuildRuns(t.Context(), t.TempDir(),
		evidencetest.Run{Name: "run-a"},
		evidencetest.Run{Name: "pool-1", Fired: true},
		evidencetest.Run{Name: "pool-2", FiredOnly: true})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "site")
	res, err := report.Build(t.Context(), report.Options{Repo: f.Repo, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	require.Empty(t, res.Audit.Findings)
	site := readTree(t, filepath.Join(out, report.CurrentLink))
	page := site["runs/fixture/pool-2.html"]
	assert.NotContains(t, page, `id="withheld"`)
	assert.Contains(t, page, `id="chosen"`)
	assert.Contains(t, page, "identity changed since run pool-1")
	assert.Contains(t, page, "Fired: not admitted yet")
	assert.Contains(t, site["runs/fixture/pool-1.html"], `id="matrix"`, "an admitted firing is an ordinary run")
	assert.NotContains(t, site["index.html"], "v-withheld")
	assert.NotContains(t, site["index.html"], "profiles/.html", "the fired run's profile is its standing certification's")
	assert.Contains(t, site["nodes/fixture/localhost.html"], "pool-2", "the fired run is the node's latest")

	// A firing the evidence key re-signed over its budget verifies, and
	// the audit's finding withholds the run like any run a finding names.
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	p, err := c.Find("/pool-2/" + evidence.FiringFile)
	require.NoError(t, err)
	raw, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	forged, err := evidencetest.Resign(raw, f.Reconciler, func(pred map[string]any) {
		pred["pool"] = append(pred["pool"].([]any), map[string]any{"node": "gpu-2", "uid": "uid-gpu-2"})
		pred["inUse"] = []any{"gpu-2"}
	})
	require.NoError(t, err)
	at, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(at, map[string][]byte{p: forged})
	require.NoError(t, err)
	out = filepath.Join(t.TempDir(), "site")
	res, err = report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	require.Len(t, res.Audit.Findings, 1)
	require.Equal(t, audit.RuleBudgetExceeded, res.Audit.Findings[0].Rule)
	site = readTree(t, filepath.Join(out, report.CurrentLink))
	assert.Contains(t, site["runs/fixture/pool-2.html"], `id="withheld"`)
	assert.NotContains(t, site["runs/fixture/pool-2.html"], `id="chosen"`)
}
