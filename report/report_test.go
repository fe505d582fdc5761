package report_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/report"
)

func TestReportSmoke(t *testing.T) {
	b := buildBranch(t)
	out := filepath.Join(t.TempDir(), "site")
	res, err := report.Build(t.Context(), report.Options{Repo: b.Repo, Policy: b.Trust, Out: out, Now: time.Now()})
	require.NoError(t, err)
	assert.Empty(t, res.Audit.Findings)
	t.Log(res.Index, res.Pages, res.Written)
	if d := os.Getenv("REPORT16_KEEP"); d != "" {
		require.NoError(t, os.CopyFS(d, os.DirFS(res.Dir)))
		require.NoError(t, os.CopyFS(d+"-repo", os.DirFS(b.Repo)))
		y, _ := os.ReadFile(b.Keys.TrustFile)
		require.NoError(t, os.WriteFile(d+"-trust.yaml", y, 0o600))
	}
}
