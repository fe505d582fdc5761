package evidence_test

import (
	"testing"

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

// TestCorpus runs every checked-in scenario, requires the reason the
// manifest names for it, and that every named reason is reached or owned
// up to in testdata/corpus/uncovered.json.
func TestCorpus(t *testing.T) {
	evidencetest.RunCorpus(t, corpusDir, evidenceReasons(t))
}
