package audit_test

import (
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
)

// TestAuditBatchesMatchWholeBranch: the audit checks a run as soon as its
// receipt lands (in batches) and drops its decoded documents; a file
// added to a run after that reopens it. Whatever the batch size, the
// report must be the one of an audit that checks every run at the end,
// including for files added to finished runs in later commits.
func TestAuditBatchesMatchWholeBranch(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	read := func(c *evidencetest.Copy, p string) []byte {
		b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, c *evidencetest.Copy) (rule, path string)
	}{
		{"clean", func(t *testing.T, c *evidencetest.Copy) (string, string) { return "", "" }},
		{"stray file in a finished run", func(t *testing.T, c *evidencetest.Copy) (string, string) {
			adm, err := c.Find("/run-a/" + evidence.AdmissionFile)
			require.NoError(t, err)
			p := path.Join(path.Dir(adm), "nodes", "extra.json")
			_, err = c.Append(map[string][]byte{p: []byte(`{"node":"extra"}`)})
			require.NoError(t, err)
			return audit.RuleLayout, p
		}},
		{"check outside the profile added after the receipt", func(t *testing.T, c *evidencetest.Copy) (string, string) {
			// A check document that verifies, filed under a check index the
			// admitted profile lacks: only the run's own check, done again
			// when the file reopens it, can see that.
			adm, err := c.Find("/run-a/" + evidence.AdmissionFile)
			require.NoError(t, err)
			first, err := c.Find("/run-a/checks/00-first.json")
			require.NoError(t, err)
			p := path.Join(path.Dir(adm), "checks", "07-first.json")
			_, err = c.Append(map[string][]byte{p: read(c, first)})
			require.NoError(t, err)
			return audit.RuleLayout, p
		}},
		{"document of a finished run deleted", func(t *testing.T, c *evidencetest.Copy) (string, string) {
			p, err := c.Find("/run-a/checks/00-first.json")
			require.NoError(t, err)
			_, err = c.Append(map[string][]byte{p: nil})
			require.NoError(t, err)
			return audit.RuleAppendOnly, p
		}},
		{"document of a finished run replaced", func(t *testing.T, c *evidencetest.Copy) (string, string) {
			p, err := c.Find("/run-b/checks/00-first.json")
			require.NoError(t, err)
			other, err := c.Find("/run-b/checks/01-second.json")
			require.NoError(t, err)
			_, err = c.Append(map[string][]byte{p: read(c, other)})
			require.NoError(t, err)
			return audit.RuleAppendOnly, p
		}},
		{"cancel added after the receipt", func(t *testing.T, c *evidencetest.Copy) (string, string) {
			adm, err := c.Find("/run-a/" + evidence.AdmissionFile)
			require.NoError(t, err)
			ev, err := c.Find("/run-c/" + evidence.EvidenceFile)
			require.NoError(t, err)
			p := path.Join(path.Dir(adm), evidence.CancelFile)
			_, err = c.Append(map[string][]byte{p: read(c, ev)})
			require.NoError(t, err)
			return audit.RulePredicate, p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			rule, p := tc.tamper(t, c)
			auditBatched := func(batch int) *audit.Report {
				defer audit.SetClosedRunBatch(batch)()
				rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy})
				require.NoError(t, err)
				return rep
			}
			whole := auditBatched(1 << 30)
			if rule == "" {
				assert.Empty(t, whole.Findings)
			} else {
				assert.True(t, slices.ContainsFunc(whole.Findings, func(f audit.Finding) bool { return f.Rule == rule && f.Path == p }),
					"want %s %s in %v", rule, p, whole.Findings)
			}
			require.Len(t, whole.Runs, 3)
			for _, batch := range []int{1, 2} {
				assert.Equal(t, whole, auditBatched(batch), "closed runs checked %d at a time", batch)
			}
		})
	}
}
