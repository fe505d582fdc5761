package evidence_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/gittest"
)

// tipOptions are the options of a store over a fresh StateDir.
func tipOptions(t *testing.T, remote string) evidence.StoreOptions {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	return evidence.StoreOptions{URL: remote, CommitSigner: signer, Author: "signet", Email: "signet@example.invalid",
		StateDir: t.TempDir(), Timeout: time.Minute}
}

// appendRun appends one file and returns the new tip.
func appendRun(t *testing.T, s *evidence.Store, p string) string {
	t.Helper()
	c, err := s.Append(t.Context(), "", []evidence.File{{Path: p, Data: []byte(p + "\n")}})
	require.NoError(t, err)
	return c
}

// TestFinding6FreshStateDirRefusesExistingBranch: a store over a fresh
// StateDir, with no kept and no pinned tip, used to trust whatever tip it
// found (a rolled-back one too). Now it refuses an existing branch until
// a tip is pinned or the current one accepted (logged); a branch that
// does not exist yet is first use.
func TestFinding6FreshStateDirRefusesExistingBranch(t *testing.T) {
	remote := filepath.Join(t.TempDir(), "evidence.git")
	gittest.InitBare(t, remote)

	first, err := evidence.Open(t.Context(), tipOptions(t, remote))
	require.NoError(t, err, "a branch that does not exist yet needs no anchor")
	one := appendRun(t, first, "a/one")
	two := appendRun(t, first, "a/two")
	require.NoError(t, first.Close())

	_, err = evidence.Open(t.Context(), tipOptions(t, remote))
	require.ErrorIs(t, err, evidence.ErrUnanchored)
	assert.ErrorContains(t, err, "is at "+two)

	pinned := tipOptions(t, remote)
	pinned.Pinned = one
	s, err := evidence.Open(t.Context(), pinned)
	require.NoError(t, err, "the branch descends from the pinned tip")
	assert.Equal(t, two, s.Tip())
	require.NoError(t, s.Close())

	var log bytes.Buffer
	accept := tipOptions(t, remote)
	accept.AcceptCurrentTip, accept.Logger = true, slog.New(slog.NewTextHandler(&log, nil))
	s, err = evidence.Open(t.Context(), accept)
	require.NoError(t, err)
	assert.Contains(t, log.String(), "tip="+two, "accepting a tip is logged with the tip")
	require.NoError(t, s.Close())

	// Accepted once, the tip is remembered: a rollback is refused from
	// then on, with or without the flag.
	gittest.Git(t, remote, "update-ref", "refs/heads/"+evidence.DefaultBranch, one)
	_, err = evidence.Open(t.Context(), accept)
	require.ErrorIs(t, err, evidence.ErrRolledBack)

	// A pinned tip the branch does not descend from is a rollback.
	pinned = tipOptions(t, remote)
	pinned.Pinned = two
	_, err = evidence.Open(t.Context(), pinned)
	require.ErrorIs(t, err, evidence.ErrRolledBack)
}

// TestFinding6KeptTipSurvivesLostStateDir: with a TipKeeper, a store
// whose StateDir was lost (an emptyDir after a restart) still refuses a
// rolled-back branch, and a deleted one.
func TestFinding6KeptTipSurvivesLostStateDir(t *testing.T) {
	remote := filepath.Join(t.TempDir(), "evidence.git")
	gittest.InitBare(t, remote)
	keeper := &evidencetest.MemoryKeeper{}
	opts := tipOptions(t, remote)
	opts.Keeper = keeper
	s, err := evidence.Open(t.Context(), opts)
	require.NoError(t, err)
	one := appendRun(t, s, "a/one")
	two := appendRun(t, s, "a/two")
	require.NoError(t, s.Close())
	kept, err := keeper.LoadTip(t.Context())
	require.NoError(t, err)
	assert.Equal(t, two, kept.Tip)

	restarted := tipOptions(t, remote) // a fresh StateDir
	restarted.Keeper = keeper
	s, err = evidence.Open(t.Context(), restarted)
	require.NoError(t, err, "the kept tip anchors a fresh StateDir")
	assert.Equal(t, two, s.Tip())
	require.NoError(t, s.Close())

	gittest.Git(t, remote, "update-ref", "refs/heads/"+evidence.DefaultBranch, one)
	restarted = tipOptions(t, remote)
	restarted.Keeper, restarted.AcceptCurrentTip = keeper, true
	_, err = evidence.Open(t.Context(), restarted)
	require.ErrorIs(t, err, evidence.ErrRolledBack, "accepting a tip never overrides a kept one")
	assert.Equal(t, one, gittest.Git(t, remote, "rev-parse", evidence.DefaultBranch), "nothing written")

	gittest.Git(t, remote, "update-ref", "-d", "refs/heads/"+evidence.DefaultBranch)
	restarted = tipOptions(t, remote)
	restarted.Keeper = keeper
	_, err = evidence.Open(t.Context(), restarted)
	require.ErrorIs(t, err, evidence.ErrRolledBack, "a deleted branch is not first use when a tip is kept")
	kept, err = keeper.LoadTip(t.Context())
	require.NoError(t, err)
	assert.Equal(t, two, kept.Tip, "the kept tip is never moved back")
}

// TestFirstUseSurvivesCrashBeforeStateWrite: a store that found no branch
// remembers that in StateDir, so a crash between its first push and the
// state write (the branch exists, no tip remembered) restarts as first
// use, logged, instead of refusing its own branch; it is held to that tip
// from then on.
func TestFirstUseSurvivesCrashBeforeStateWrite(t *testing.T) {
	remote := filepath.Join(t.TempDir(), "evidence.git")
	gittest.InitBare(t, remote)
	opts := tipOptions(t, remote)
	s, err := evidence.Open(t.Context(), opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// The push that landed unrecorded, played by another store.
	other := tipOptions(t, remote)
	w, err := evidence.Open(t.Context(), other)
	require.NoError(t, err)
	one := appendRun(t, w, "a/one")
	require.NoError(t, w.Close())

	var log bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	s, err = evidence.Open(t.Context(), opts)
	require.NoError(t, err)
	assert.Equal(t, one, s.Tip())
	assert.Contains(t, log.String(), "tip="+one)
	two := appendRun(t, s, "a/two")
	require.NoError(t, s.Close())
	gittest.Git(t, remote, "update-ref", "refs/heads/"+evidence.DefaultBranch, one)
	_, err = evidence.Open(t.Context(), opts)
	require.ErrorIs(t, err, evidence.ErrRolledBack, "past first use, %s is remembered", two)
}
