package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/specs"
)

// TestVerify: signet verify finds a run through the index and reports its
// verdict, per check and per node, and every binding; a forged document
// in the run exits 1 naming the rule.
func TestVerify(t *testing.T) {
	f := evidenceFixture(t)
	for _, run := range []string{"run-a", "run-b"} {
		out, stderr, code := runSigningCLI(t, "verify", run, "--repo", f.Repo, "--trust", f.TrustFile, "-o", "json")
		require.Equal(t, 0, code, stderr)
		var rep audit.RunReport
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		assert.Equal(t, run, rep.Run)
		assert.Equal(t, evidencetest.Cluster, rep.Cluster)
		assert.Equal(t, specs.VerdictPass, rep.Verdict)
		assert.Empty(t, rep.Findings)
		require.Len(t, rep.Checks, 2)
		for _, c := range rep.Checks {
			assert.Equal(t, specs.VerdictPass, c.Verdict)
			require.Len(t, c.Participants, 1)
		}
		require.Len(t, rep.Nodes, 1)
		assert.Equal(t, specs.VerdictPass, rep.Nodes[0].Verdict)
		assert.NotEmpty(t, rep.Bindings)
	}
	out, _, code := runSigningCLI(t, "verify", "run-a", "--repo", f.Repo, "--trust", f.TrustFile, "--cluster", evidencetest.Cluster)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "verify: verified")
	assert.Contains(t, out, "00 first")

	t.Run("forged", func(t *testing.T) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p, err := c.Find("/run-a/evidence.json")
		require.NoError(t, err)
		b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
		require.NoError(t, err)
		forged, err := evidencetest.FlipSignature(b)
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: forged})
		require.NoError(t, err)
		out, _, code := runSigningCLI(t, "verify", "run-a", "--repo", c.Dir, "--trust", f.TrustFile)
		assert.Equal(t, 1, code, out)
		assert.Contains(t, out, audit.RuleSignature+" run run-a "+p)
	})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown run", []string{"verify", "nope", "--repo", f.Repo, "--trust", f.TrustFile}},
		{"other cluster", []string{"verify", "run-a", "--cluster", "elsewhere", "--repo", f.Repo, "--trust", f.TrustFile}},
		{"no run", []string{"verify", "--repo", f.Repo, "--trust", f.TrustFile}},
		{"no trust", []string{"verify", "run-a", "--repo", f.Repo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runSigningCLI(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
		})
	}
}
