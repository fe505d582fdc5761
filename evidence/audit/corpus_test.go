package audit_test

import (
	"testing"

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

// TestCorpus runs every checked-in scenario, requires the reason the
// manifest names for it, and that every named reason is reached or owned
// up to in testdata/corpus/uncovered.json.
func TestCorpus(t *testing.T) {
	evidencetest.RunCorpus(t, corpusDir, auditReasons(t))
}
