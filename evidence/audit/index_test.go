package audit_test

import (
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
)

// TestRunIDUsedTwice: the evidence key's holder appends a second
// directory for a finished run's ID in the same cluster, dated another
// day, holding a byte-for-byte copy of the run's signed admission (a
// second run of one request, which the branch must never hold). The
// audit reports it under the index rule, always on the directory that
// landed second and naming the first, however many times it is run (the
// runs were kept in a map, whose order changes from run to run).
func TestRunIDUsedTwice(t *testing.T) {
	ctx := t.Context()
	f, err := evidencetest.Build(ctx, t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	adm, err := c.Find("/run-a/" + evidence.AdmissionFile)
	require.NoError(t, err)
	first := path.Dir(adm)
	rp, ok := evidence.ParsePath(adm)
	require.True(t, ok, adm)
	second := strings.Replace(first, "/"+rp.Date+"/", "/2020/01/01/", 1)
	require.NotEqual(t, first, second, "the copy must be another directory")
	data, err := c.Read("refs/heads/"+evidencetest.Branch, adm)
	require.NoError(t, err)
	_, err = c.Append(map[string][]byte{path.Join(second, evidence.AdmissionFile): data})
	require.NoError(t, err)

	want := audit.Finding{Rule: audit.RuleIndex, Cluster: evidencetest.Cluster, Run: "run-a", Path: second,
		Message: "run ID used twice in cluster " + evidencetest.Cluster + ": also " + first}
	for range 8 {
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		var twice []audit.Finding
		for _, g := range findings(rep, audit.RuleIndex) {
			if strings.HasPrefix(g.Message, "run ID used twice") {
				twice = append(twice, g)
			}
		}
		require.Len(t, twice, 1, "one finding for the second directory: %v", rep.Findings)
		assert.Equal(t, want, twice[0], "the directory that landed second is the finding")
	}
}
