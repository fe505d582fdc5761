package audit_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
)

// TestResume: an audit resumed from the in-memory state of a clean
// audit reads only the runs after its tip and is clean; an audit with a
// finding keeps no state; the state is
// refused (ErrCheckpoint, nothing audited) under another trust policy,
// for another branch, and once the branch was rewritten under it.
func TestResume(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	before, err := c.Before("/run-b/" + evidence.AdmissionFile)
	require.NoError(t, err)
	ref := "refs/heads/" + evidencetest.Branch
	at := func(commit string) {
		_, err := c.Git("update-ref", ref, commit)
		require.NoError(t, err)
	}
	at(before)
	first, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy, KeepResume: true})
	require.NoError(t, err)
	require.True(t, first.Clean())
	require.NotNil(t, first.Resume)
	assert.Equal(t, before, first.Resume.Tip())
	at(tip)

	next, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy, Resume: first.Resume})
	require.NoError(t, err)
	assert.True(t, next.Clean(), "%v", next.Findings)
	require.Len(t, next.Runs, 1)
	assert.Equal(t, "run-b", next.Runs[0].Run)
	require.NotNil(t, next.From)
	assert.Equal(t, before, next.From.Tip)
	assert.Nil(t, next.Resume, "kept only when asked for")

	_, err = c.Append(map[string][]byte{"stray.txt": []byte("not evidence\n")})
	require.NoError(t, err)
	dirty, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy, Resume: first.Resume, KeepResume: true})
	require.NoError(t, err)
	require.False(t, dirty.Clean())
	assert.Nil(t, dirty.Resume, "an audit with findings keeps no state to resume from")
	at(tip)

	other := checkpointPolicy(t, f, newKey(t), time.Time{}, "")
	_, err = audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: other, Resume: first.Resume})
	assert.ErrorIs(t, err, audit.ErrCheckpoint, "another trust policy")

	_, err = c.Git("branch", "other", tip)
	require.NoError(t, err)
	_, err = audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Branch: "other", Policy: f.Policy, Resume: first.Resume})
	assert.ErrorIs(t, err, audit.ErrCheckpoint, "another branch")

	p, err := c.Find("/run-a/" + evidence.EvidenceFile)
	require.NoError(t, err)
	landed, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(landed, map[string][]byte{"runs/stray.txt": []byte("x\n")})
	require.NoError(t, err)
	_, err = audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy, Resume: first.Resume})
	assert.ErrorIs(t, err, audit.ErrCheckpoint, "a rewritten branch")
}
