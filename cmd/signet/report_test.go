package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportCommand: signet report on the reconciler's branch prints the
// index path and exits 0; a second report writes nothing; missing flags
// are usage errors (exit 2).
func TestReportCommand(t *testing.T) {
	f := evidenceFixture(t)
	out := filepath.Join(t.TempDir(), "site")
	stdout, stderr, code := runSigningCLI(t, "report", "--repo", f.Repo, "--trust", f.TrustFile, "--out", out)
	require.Equal(t, 0, code, stdout+stderr)
	index := strings.TrimSpace(stdout)
	assert.Equal(t, filepath.Join(out, "index.html"), index)
	b, err := os.ReadFile(index)
	require.NoError(t, err)
	assert.Contains(t, string(b), "Audit clean")
	assert.Contains(t, stderr, "0 finding(s)")
	_, stderr, code = runSigningCLI(t, "report", "--repo", f.Repo, "--trust", f.TrustFile, "--out", out)
	require.Equal(t, 0, code)
	assert.Contains(t, stderr, ", 0 written, 0 removed")

	for _, args := range [][]string{
		{"report", "--repo", f.Repo, "--trust", f.TrustFile},
		{"report", "--repo", f.Repo, "--out", out},
	} {
		_, stderr, code := runSigningCLI(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "required")
	}
	// --repo defaults to the current directory (here no repository).
	t.Chdir(t.TempDir())
	_, stderr, code = runSigningCLI(t, "report", "--trust", f.TrustFile, "--out", out)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "could not open repository .")
}
