package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportCommand: signet report on the reconciler's branch creates
// --out (parents included), prints the index path and exits 0; a second
// report writes nothing; missing flags are usage errors (exit 2).
func TestReportCommand(t *testing.T) {
	f := evidenceFixture(t)
	out := filepath.Join(t.TempDir(), "missing", "site")
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

// TestReportHelpOut: signet report --help says what --out is: a
// directory created when missing, the generations layout it gets, what
// becomes of a report of the earlier flat layout already there, and
// that nothing else in it is touched.
func TestReportHelpOut(t *testing.T) {
	stdout, stderr, code := runSigningCLI(t, "report", "--help")
	require.Equal(t, 0, code, stderr)
	flag := regexp.MustCompile(`(?m)^\s+--out string\s+(.*)$`).FindStringSubmatch(stdout)
	require.NotNil(t, flag, stdout)
	assert.Contains(t, flag[1], "directory, created when missing")
	help := strings.Join(strings.Fields(stdout), " ") // however it is wrapped
	for _, s := range []string{
		"DIR/gens/<id>/",
		"DIR/current links to it",
		"DIR/index.html, the entry",
		"stays until the report after",
		"A report of the earlier flat layout in DIR (DIR/manifest.json)",
		"has the files that manifest lists removed",
		"nothing else in DIR is touched",
		"DIR/.lock",
	} {
		assert.True(t, strings.Contains(help, s), "signet report --help says %q", s)
	}
}
