package audit_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/corpus"
	"signet.dev/signet/internal/testing/evidencetest"
)

const corpusDir = "testdata/corpus"

// auditReasons are the audit's named outcomes: its rule ids and the
// sentinel errors callers decide on with errors.Is (ErrNoBranch,
// ErrRunNotFound, ErrAmbiguousRun). Other messages of the package are
// details inside one of these.
func auditReasons(t *testing.T) []corpus.Reason {
	t.Helper()
	rs, err := corpus.Scan(corpus.Source{Dir: ".", Sentinels: true, ConstPrefix: "Rule"})
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	return rs
}

// TestCorpus runs every checked-in scenario and requires the reason the
// manifest names for it.
func TestCorpus(t *testing.T) {
	reasons := auditReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Run(e.Input, func(t *testing.T) {
			msgs := evidencetest.RunScenario(t, corpusDir, filepath.Join(corpusDir, e.Input))
			r, ok := corpus.Find(reasons, e.Reason)
			require.True(t, ok, "the manifest names %q, which the audit source no longer states", e.Reason)
			assert.True(t, r.Matches(msgs), "want reason %q (%s); got:\n%s", r.ID, r.Where, strings.Join(msgs, "\n"))
		})
	}
}

// TestCorpusCoverage lists every named reason of the audit that no
// scenario reaches, and fails when there is one not owned up to in
// testdata/corpus/uncovered.json.
func TestCorpusCoverage(t *testing.T) {
	reasons := auditReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	corpus.RequireCovered(t, corpusDir, reasons, entries)
}
