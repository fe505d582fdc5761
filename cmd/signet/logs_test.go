package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogs: signet logs prints the tails the verified check documents of
// the reconciler's branch bind (golden text), filters by check, node and
// stream, and prints none from a run whose log was tampered with.
func TestLogs(t *testing.T) {
	f := evidenceFixture(t)
	base := []string{"logs", "run-a", "--repo", f.Repo, "--trust", f.TrustFile}
	out, stderr, code := runSigningCLI(t, base...)
	require.Equal(t, 0, code, out+stderr)
	// The local family names the node by this machine's hostname.
	host, err := os.Hostname()
	require.NoError(t, err)
	golden(t, "logs.golden", strings.ReplaceAll(out, " on "+host+", ", " on HOST, "))

	js, stderr, code := runSigningCLI(t, append(base, "--check", "second", "--node", host, "--stream", "stdout", "-o", "json")...)
	require.Equal(t, 0, code, js+stderr)
	var tails []logTail
	require.NoError(t, json.Unmarshal([]byte(js), &tails))
	require.Len(t, tails, 1)
	assert.Equal(t, "second", tails[0].Check)
	assert.Equal(t, "check second of run-a passed\n", tails[0].Text)

	_, stderr, code = runSigningCLI(t, append(base, "--stream", "stderr")...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "no recorded log of run run-a matches")
	_, stderr, code = runSigningCLI(t, append(base, "--stream", "stdin")...)
	assert.Equal(t, 2, code, stderr)

	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	p, err := c.Find("/run-a/logs/00-first/")
	require.NoError(t, err)
	at, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(at, map[string][]byte{p: []byte("check first of run-a FAILED\n")})
	require.NoError(t, err)
	out, stderr, code = runSigningCLI(t, "logs", "run-a", "--repo", c.Dir, "--trust", f.TrustFile)
	assert.Equal(t, 1, code)
	assert.Empty(t, out, "no log printed from a run with findings")
	assert.Contains(t, stderr, "digest-binding")
}
