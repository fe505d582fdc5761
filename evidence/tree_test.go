package evidence

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// TestTreeOrder appends, over several commits, names whose Git order
// differs from plain byte order (a directory sorts as if its name ended
// with "/"), so that spliced trees insert before, between and after
// existing entries, and pushes them: the remote's git fsck --strict
// refuses a tree out of order, and a path the tip holds is ErrExists.
// (gitobj's TestBuilderTreeOrder checks the trees entry by entry.)
func TestTreeOrder(t *testing.T) {
	remote := filepath.Join(t.TempDir(), "remote.git")
	gittest.InitBare(t, remote)
	signer, _ := testSigner(t)
	opts := testOptions(t, remote, signer)
	s := openStore(t, opts)
	steps := [][]File{
		{{Path: "d/a-b", Data: []byte("1")}, {Path: "d/m", Data: []byte("2")}},
		{{Path: "d/a/x", Data: []byte("3")}, {Path: "d/a.json", Data: []byte("4")}},
		{{Path: "d/a0", Data: []byte("5")}, {Path: "d/a/y", Data: []byte("6")}, {Path: "d/0", Data: []byte("7")}, {Path: "d/z/q", Data: []byte("8")}},
		{{Path: "d/a/w", Data: []byte("9")}, {Path: "d/ab", Data: []byte("10")}, {Path: "e", Data: []byte("11")}},
	}
	for _, files := range steps {
		_, err := s.Append(t.Context(), "", files)
		require.NoError(t, err)
	}
	_, err := s.Append(t.Context(), "", []File{{Path: "d/a/x", Data: []byte("again")}})
	require.ErrorIs(t, err, ErrExists)
	_, err = s.Append(t.Context(), "", []File{{Path: "d/a-b/x", Data: []byte("under a file")}})
	require.ErrorIs(t, err, ErrExists)
	_, err = s.Append(t.Context(), "", []File{{Path: "d/a", Data: []byte("over a directory")}})
	require.ErrorIs(t, err, ErrExists)

	out, err := gittest.Run(t, remote, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	require.NoError(t, err)
	assert.Empty(t, out)
}

// TestAppendStartsFromCachedTrees: after a flush moves the overlay to a
// mirror pack, the store keeps the trees its appends wrote, and the next
// append to the same directory starts from them instead of the pack. The
// trees it then writes must be exactly what Git reads back.
func TestAppendStartsFromCachedTrees(t *testing.T) {
	saved := flushObjects
	t.Cleanup(func() { flushObjects = saved })
	flushObjects = 1 // every append is flushed
	remote := filepath.Join(t.TempDir(), "remote.git")
	gittest.InitBare(t, remote)
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, remote, signer))
	var want []string
	for i := range 12 {
		p := fmt.Sprintf("runs/c/%02d/doc-%02d", i%3, i)
		_, err := s.Append(t.Context(), "", []File{{Path: p, Data: []byte(p)}})
		require.NoError(t, err)
		want = append(want, p)
		// The directory the next append to runs/c/<i%3> starts from is
		// the tip's tree there, and it is cached.
		h := gittest.Git(t, remote, "rev-parse", fmt.Sprintf("signet/evidence:runs/c/%02d", i%3))
		s.mu.Lock()
		_, cached := s.objs.trees.m[plumbing.NewHash(strings.TrimSpace(h))]
		s.mu.Unlock()
		assert.True(t, cached, "tree of runs/c/%02d after append %d", i%3, i)
	}
	// Every append after the first three started from a cached tree
	// (at least its directory's).
	s.objs.trees.mu.Lock()
	hits := s.objs.trees.hits
	s.objs.trees.mu.Unlock()
	assert.GreaterOrEqual(t, hits, 9, "appends that started from a cached tree")
	out, err := gittest.Run(t, remote, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	require.NoError(t, err)
	assert.Empty(t, out)
	slices.Sort(want)
	assert.Equal(t, strings.Join(want, "\n"), gittest.Git(t, remote, "ls-tree", "-r", "--name-only", "signet/evidence"))
}
