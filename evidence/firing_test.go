package evidence

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/specs"
)

// firingFiles is what AppendFiring writes for run: its index entry, its
// firing record and one approval copy.
func firingFiles(run string) []string {
	dir := RunDir("prod", run, day)
	return []string{IndexPath("prod", run), path.Join(dir, FiringFile), ApprovalPath(dir, "standing-0.json")}
}

func appendFiring(s *Store, t *testing.T, base, run, writer string) (string, error) {
	dir := RunDir("prod", run, day)
	return s.AppendFiring(t.Context(), base, "prod", run, day, []byte("firing of "+run+" by "+writer+"\n"),
		[]File{{Path: ApprovalPath(dir, "standing-0.json"), Data: []byte("approval\n")}})
}

// assertFsck runs stock git fsck --strict on repo.
func assertFsck(t *testing.T, repo string) {
	t.Helper()
	out, err := gittest.Run(t, repo, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	require.NoError(t, err, "git fsck --strict in %s", repo)
	assert.Empty(t, out)
}

// TestAppendFiringOnce: writers that decided the same firing on the same
// tip race for it; exactly one firing lands, in one commit with its index
// entry, and every other writer gets ErrExists (the lost race) and writes
// nothing.
func TestAppendFiringOnce(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	first := openStore(t, testOptions(t, remote, signer))
	base, err := first.Append(t.Context(), "before", runFiles("prod", "other", 1, 16))
	require.NoError(t, err)

	const writers = 4
	stores := make([]*Store, writers)
	for i := range stores {
		stores[i] = openStore(t, testOptions(t, remote, signer))
		require.Equal(t, base, stores[i].Tip())
	}
	errs := make([]error, writers)
	commits := make([]string, writers)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { commits[i], errs[i] = appendFiring(s, t, base, "pool-a-1", fmt.Sprint(i)) })
	}
	wg.Wait()

	won := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, won, "two writers fired pool-a-1: %d and %d", won, i)
			won = i
		}
	}
	require.NotEqual(t, -1, won, "no firing landed")
	for i, err := range errs {
		if i == won {
			continue
		}
		require.ErrorIs(t, err, ErrExists, "writer %d", i)
		var stale *StaleTipError
		require.ErrorAs(t, err, &stale)
		assert.Equal(t, StaleTipError{Base: base, Tip: commits[won], Path: IndexPath("prod", "pool-a-1")}, *stale, "writer %d", i)
	}
	tip := gittest.Git(t, remote, "rev-parse", "signet/evidence")
	assert.Equal(t, commits[won], tip)
	assert.Equal(t, base, gittest.Git(t, remote, "rev-parse", tip+"^"), "the firing is a child of the tip it was decided from")
	assert.Equal(t, "2", gittest.Git(t, remote, "rev-list", "--count", "signet/evidence"))
	changed := gittest.Git(t, remote, "diff-tree", "--no-commit-id", "--name-only", "-r", tip)
	assert.ElementsMatch(t, firingFiles("pool-a-1"), strings.Fields(changed))
	got := gittest.Git(t, remote, "cat-file", "blob", tip+":"+path.Join(RunDir("prod", "pool-a-1", day), FiringFile))
	assert.Equal(t, "firing of pool-a-1 by "+fmt.Sprint(won), got)
	assertFsck(t, remote)
}

// TestAppendFiringStaleTip: a firing decided on a tip the branch has left
// is refused with ErrTipMoved and never re-applied on the new tip, whether
// the writer learns of the move from its push or knew the newer tip
// already; decided again on the new tip, it lands.
func TestAppendFiringStaleTip(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	a := openStore(t, testOptions(t, remote, signer))
	base, err := a.Append(t.Context(), "before", runFiles("prod", "other", 1, 16))
	require.NoError(t, err)
	b := openStore(t, testOptions(t, remote, signer))
	require.Equal(t, base, b.Tip())
	moved, err := a.Append(t.Context(), "another run", runFiles("prod", "second", 1, 16))
	require.NoError(t, err)

	for name, s := range map[string]*Store{"push refused": b, "tip known": a} {
		t.Run(name, func(t *testing.T) {
			_, err := appendFiring(s, t, base, "pool-a-1", name)
			require.ErrorIs(t, err, ErrTipMoved)
			assert.NotErrorIs(t, err, ErrExists)
			var stale *StaleTipError
			require.ErrorAs(t, err, &stale)
			assert.Equal(t, StaleTipError{Base: base, Tip: moved}, *stale)
			assert.Equal(t, moved, gittest.Git(t, remote, "rev-parse", "signet/evidence"), "nothing was written")
			assert.Equal(t, moved, s.Tip())
		})
	}

	c, err := appendFiring(b, t, moved, "pool-a-1", "b")
	require.NoError(t, err)
	assert.Equal(t, moved, gittest.Git(t, remote, "rev-parse", c+"^"))
	// The first decision, replayed on its old tip by a writer that has
	// read the new tip, lost the race.
	require.NoError(t, a.Refresh(t.Context()))
	_, err = appendFiring(a, t, base, "pool-a-1", "a")
	require.ErrorIs(t, err, ErrExists)
	assert.Equal(t, c, gittest.Git(t, remote, "rev-parse", "signet/evidence"))
	assertFsck(t, remote)
}

// TestAppendAtFirstUse: on a branch that does not exist yet, the base is
// "" and the first writer creates the branch; a base that is not a commit
// hash is refused.
func TestAppendAtFirstUse(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	a := openStore(t, testOptions(t, remote, signer))
	b := openStore(t, testOptions(t, remote, signer))
	c, err := appendFiring(a, t, "", "pool-a-1", "a")
	require.NoError(t, err)
	_, err = appendFiring(b, t, "", "pool-a-1", "b")
	require.ErrorIs(t, err, ErrExists)
	_, err = a.AppendAt(t.Context(), "x", "HEAD", []File{{Path: "ids/prod/00/x", Data: []byte("x")}})
	require.Error(t, err)
	assert.Equal(t, c, gittest.Git(t, remote, "rev-parse", "signet/evidence"))
	_, err = a.AppendFiring(t.Context(), c, "prod", "pool-a-2", day, []byte("f"), []File{{Path: "runs/prod/elsewhere", Data: []byte("x")}})
	require.ErrorIs(t, err, ErrInvalidPath)
}

// TestNextFiringSequence: the next firing's number is one more than the
// highest on the tip, for each standing certification on its own, read
// with the tip it was read from; on a branch not yet created it is 1.
func TestNextFiringSequence(t *testing.T) {
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, bareRemote(t), signer))
	seq, tip, err := s.NextFiringSequence(t.Context(), "prod", "pool-a")
	require.NoError(t, err)
	assert.Equal(t, int64(1), seq)
	assert.Empty(t, tip)
	for want := int64(1); want <= 11; want++ {
		seq, tip, err := s.NextFiringSequence(t.Context(), "prod", "pool-a")
		require.NoError(t, err)
		require.Equal(t, want, seq)
		require.Equal(t, s.Tip(), tip)
		_, err = appendFiring(s, t, tip, specs.FiringRunID("pool-a", seq), "a")
		require.NoError(t, err)
		seq, _, err = s.NextFiringSequence(t.Context(), "prod", "pool-a")
		require.NoError(t, err)
		assert.Equal(t, want+1, seq)
	}
	seq, _, err = s.NextFiringSequence(t.Context(), "prod", "pool")
	require.NoError(t, err)
	assert.Equal(t, int64(1), seq, "pool-a's firings are not pool's")
	seq, _, err = s.NextFiringSequence(t.Context(), "other", "pool-a")
	require.NoError(t, err)
	assert.Equal(t, int64(1), seq, "nor another cluster's")
}
