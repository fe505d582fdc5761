package report_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/report"
)

// readTree returns every file under dir by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	dir, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	return out
}

// TestReportDeterministicAndIncremental: the same branch gives the same
// bytes in a new directory and writes nothing the second time in the
// same one; after one new run, only the pages that run changes are
// written (index, the archive page that lists it, its run, its node, its
// profile).
func TestReportDeterministicAndIncremental(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	before, err := c.Before("/run-c/" + evidence.AdmissionFile)
	require.NoError(t, err)
	ref := "refs/heads/" + evidencetest.Branch

	out := filepath.Join(t.TempDir(), "site")
	_, err = c.Git("update-ref", ref, before)
	require.NoError(t, err)
	first, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	require.Empty(t, first.Audit.Findings)
	assert.Equal(t, first.Pages, first.Written)
	assert.NotContains(t, readTree(t, filepath.Join(out, report.CurrentLink)), "runs/fixture/run-c.html")

	_, err = c.Git("update-ref", ref, tip)
	require.NoError(t, err)
	second, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	assert.Equal(t, []string{"index.html", "nodes/fixture/localhost.html", "profiles/quick.html", "runs-1.html", "runs/fixture/run-c.html"}, second.Changed,
		"after one new run, only the pages it changes are written")

	again, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	assert.Empty(t, again.Changed, "nothing changed, nothing written")

	fresh := filepath.Join(t.TempDir(), "fresh")
	_, err = report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: fresh})
	require.NoError(t, err)
	assert.Equal(t, readTree(t, filepath.Join(out, report.CurrentLink)), readTree(t, filepath.Join(fresh, report.CurrentLink)), "same branch, same bytes")
	assert.Equal(t, readTree(t, out)["index.html"], readTree(t, fresh)["index.html"], "the same entry page")
}

// TestReportWithholdsRunsWithFindings: a run whose evidence was forged
// (re-signed with the evidence key, so it verifies, but is not the
// summary of its checks) gets a page with the audit's findings and none
// of its documents; a stray file in the output directory is left alone.
func TestReportWithholdsRunsWithFindings(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	p, err := c.Find("/run-b/" + evidence.EvidenceFile)
	require.NoError(t, err)
	raw, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	forged, err := evidencetest.Resign(raw, f.Reconciler, func(pred map[string]any) { pred["verdict"] = "Inconclusive" })
	require.NoError(t, err)
	at, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(at, map[string][]byte{p: forged})
	require.NoError(t, err)

	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, "keep.txt"), []byte("mine"), 0o644))
	res, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	var rules []string
	for _, fd := range res.Audit.Findings {
		require.Equal(t, "run-b", fd.Run, "%s", fd)
		rules = append(rules, fd.Rule)
	}
	require.Contains(t, rules, audit.RuleRunSummary)
	site := readTree(t, filepath.Join(out, report.CurrentLink))
	page := site["runs/fixture/run-b.html"]
	assert.Contains(t, page, `id="withheld"`)
	assert.Contains(t, page, audit.RuleRunSummary)
	assert.NotContains(t, page, `id="matrix"`, "no matrix from a run the audit did not prove")
	// The forged verdict appears only inside the findings that refute it.
	assert.NotContains(t, page, "v-inconclusive", "no verdict shown from the forged document")
	assert.NotContains(t, site["index.html"], "v-inconclusive")
	assert.Contains(t, site["runs/fixture/run-a.html"], `id="matrix"`, "the clean run is shown")
	assert.Equal(t, "mine", readTree(t, out)["keep.txt"])
	assert.Contains(t, site["index.html"], "unproven (latest run withheld)", "run-a's Pass does not certify the node past run-b")
	assert.True(t, strings.Contains(site["index.html"], "withheld"))
}

// TestReportWithholdsEveryRunOnBranchFindings: a finding about the branch
// itself (here a file outside the evidence layout) withholds every run.
func TestReportWithholdsEveryRunOnBranchFindings(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	_, err = c.Append(map[string][]byte{"stray.txt": []byte("not evidence\n")})
	require.NoError(t, err)
	out := t.TempDir()
	res, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	require.NotEmpty(t, res.Audit.Findings)
	site := readTree(t, filepath.Join(out, report.CurrentLink))
	assert.Contains(t, site["index.html"], "concern the branch itself")
	assert.Contains(t, site["runs/fixture/run-a.html"], `id="withheld"`)
	assert.NotContains(t, site["runs/fixture/run-a.html"], `id="matrix"`, "a branch finding withholds every run")
}

// TestReportReplacesFlatLayout: a directory holding a report of the
// layout before generations (pages and manifest.json straight in it)
// gets the generations; the old pages its manifest lists are removed
// once the new one is switched in, a file it does not list is kept.
func TestReportReplacesFlatLayout(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a")
	require.NoError(t, err)
	out := t.TempDir()
	for p, b := range map[string]string{
		"index.html":        "old index",
		"runs/old/run.html": "old run",
		"keep.txt":          "mine",
		report.ManifestFile: `{"files": {"index.html": "sha256:00", "runs/old/run.html": "sha256:00", "../outside.txt": "sha256:00"}}`,
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(out, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(out, p), []byte(b), 0o644))
	}
	outside := filepath.Join(filepath.Dir(out), "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("not the report's"), 0o644))
	res, err := report.Build(t.Context(), report.Options{Repo: f.Repo, Policy: f.Policy, Out: out})
	require.NoError(t, err)
	top := readTree(t, out)
	assert.NotContains(t, top, "runs/old/run.html")
	assert.NotContains(t, top, report.ManifestFile)
	assert.Equal(t, "mine", top["keep.txt"])
	assert.Contains(t, top["index.html"], `<base href="gens/`)
	assert.Equal(t, filepath.Join(out, "index.html"), res.Index)
	_, err = os.Stat(outside)
	assert.NoError(t, err, "a path outside the directory is never removed")
}
