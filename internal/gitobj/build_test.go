package gitobj

import (
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// TestBuilderTreeOrder commits, one on another, names whose Git order
// differs from plain byte order (a directory sorts as if its name ended
// with "/"), so that spliced trees insert before, between and after
// existing entries; git fsck --strict refuses a tree out of order. A
// change to a path the tree holds fails with ErrExists.
func TestBuilderTreeOrder(t *testing.T) {
	repo, d := bareRepo(t)
	sign := testSign(t)
	steps := []map[string]string{
		{"d/a-b": "1", "d/m": "2"},
		{"d/a/x": "3", "d/a.json": "4"},
		{"d/a0": "5", "d/a/y": "6", "d/0": "7", "d/z/q": "8"},
		{"d/a/w": "9", "d/ab": "10", "e": "11"},
	}
	tip := plumbing.ZeroHash
	for _, files := range steps {
		_, c, err := commitPack(t, repo, d, sign, tip, files)
		require.NoError(t, err)
		tip = c
	}
	for name, files := range map[string]map[string]string{
		"file over a file":      {"d/a/x": "again"},
		"file under a file":     {"d/a-b/x": "under a file"},
		"file over a directory": {"d/a": "over a directory"},
	} {
		_, _, err := commitPack(t, repo, d, sign, tip, files)
		require.ErrorIs(t, err, ErrExists, name)
	}
	out, err := gittest.Run(t, repo, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	require.NoError(t, err)
	assert.Empty(t, out)
	assert.Equal(t, "0\na-b\na.json\na/w\na/x\na/y\na0\nab\nm\nz/q",
		gittest.Git(t, repo, "-c", "core.quotePath=false", "ls-tree", "-r", "--name-only", "main:d"))
	for _, files := range steps {
		for p, data := range files {
			assert.Equal(t, data, gittest.Git(t, repo, "cat-file", "blob", "main:"+p), p)
		}
	}
}
