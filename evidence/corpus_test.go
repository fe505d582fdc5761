package evidence_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/testing/corpus"
	"signet.dev/signet/internal/testing/evidencetest"
)

const corpusDir = "testdata/corpus"

// evidenceReasons are the evidence package's named rejection reasons: the
// sentinel errors callers decide on with errors.Is (the store's; the
// auditor's are evidence/audit's corpus). Other messages of the package
// are details inside one of these.
func evidenceReasons(t *testing.T) []corpus.Reason {
	t.Helper()
	rs, err := corpus.Scan(corpus.Source{Dir: ".", Sentinels: true})
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	// The remote's errors, which the Store returns as its own, are stated
	// by the Git object engine; its ErrExists comes wrapped in ErrExists.
	engine, err := corpus.Scan(corpus.Source{Dir: "../internal/gitobj", Sentinels: true,
		Ignore: []string{gitobj.ErrExists.Error()}})
	require.NoError(t, err)
	require.NotEmpty(t, engine)
	return append(rs, engine...)
}

// TestCorpus runs every checked-in scenario and requires the reason the
// manifest names for it.
func TestCorpus(t *testing.T) {
	reasons := evidenceReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Run(e.Input, func(t *testing.T) {
			msgs := evidencetest.RunScenario(t, corpusDir, filepath.Join(corpusDir, e.Input))
			r, ok := corpus.Find(reasons, e.Reason)
			require.True(t, ok, "the manifest names %q, which the evidence source no longer states", e.Reason)
			assert.True(t, r.Matches(msgs), "want reason %q (%s); got:\n%s", r.ID, r.Where, strings.Join(msgs, "\n"))
		})
	}
}

// TestCorpusCoverage lists every named reason of the evidence package that
// no scenario reaches, and fails when there is one not owned up to in
// testdata/corpus/uncovered.json.
func TestCorpusCoverage(t *testing.T) {
	reasons := evidenceReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	corpus.RequireCovered(t, corpusDir, reasons, entries)
}
