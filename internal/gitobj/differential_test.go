package gitobj

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// The differential tests hold gitobj to stock git: what gitobj writes,
// git reads back identically and accepts under its strictest checks; what
// git writes, gitobj reads identically (TestDirReadsWhatGitWrote,
// TestMergePacksResolvesDeltas).

// gitObject is one object as `git cat-file --batch` prints it.
type gitObject struct {
	typ  string
	data []byte
}

// catFile reads objects through `git cat-file --batch`; a missing object
// fails the test.
func catFile(t *testing.T, repo string, hashes []plumbing.Hash) []gitObject {
	var in bytes.Buffer
	for _, h := range hashes {
		fmt.Fprintln(&in, h)
	}
	cmd := gittest.Cmd(t, repo, "cat-file", "--batch")
	cmd.Stdin = &in
	out, err := cmd.Output()
	require.NoError(t, err)
	r := bufio.NewReader(bytes.NewReader(out))
	objs := make([]gitObject, len(hashes))
	for i, h := range hashes {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		f := strings.Fields(line)
		require.Len(t, f, 3, "git cat-file: %q", line)
		require.Equal(t, h.String(), f[0])
		size, err := strconv.Atoi(f[2])
		require.NoError(t, err)
		data := make([]byte, size+1) // and the newline after it
		_, err = io.ReadFull(r, data)
		require.NoError(t, err)
		objs[i] = gitObject{typ: f[1], data: data[:size]}
	}
	return objs
}

// requireGitReads checks that git reads every object b created as b holds
// it (type, size and content), under the name gitobj gave it.
func requireGitReads(t *testing.T, repo string, b *Builder) {
	got := catFile(t, repo, b.Hashes())
	for i, h := range b.Hashes() {
		o, err := b.Objects().EncodedObject(plumbing.AnyObject, h)
		require.NoError(t, err)
		want, err := ReadEncoded(o, 0)
		require.NoError(t, err)
		assert.Equal(t, o.Type().String(), got[i].typ, h.String())
		assert.Equal(t, want, got[i].data, h.String())
		assert.Equal(t, h, HashObject(o.Type(), got[i].data), "the name gitobj gave %s", h)
	}
}

// requireGitIndexes checks that git verifies the pack named and computes,
// from the pack alone, exactly the index gitobj wrote for it.
func requireGitIndexes(t *testing.T, repo string, name plumbing.Hash) {
	base := filepath.Join(repo, "objects", "pack", "pack-"+name.String())
	gittest.Git(t, repo, "index-pack", "--verify", "--strict", base+".pack")
	gitIdx := filepath.Join(t.TempDir(), "git.idx")
	gittest.Git(t, repo, "index-pack", "--index-version=2", "-o", gitIdx, base+".pack")
	want, err := os.ReadFile(gitIdx)
	require.NoError(t, err)
	got, err := os.ReadFile(base + ".idx")
	require.NoError(t, err)
	assert.Equal(t, want, got, "the index gitobj wrote for pack %s", name)
}

// requireFsckClean runs git fsck --strict over the whole repository.
func requireFsckClean(t *testing.T, repo string) {
	out, err := gittest.Run(t, repo, nil, "fsck", "--strict", "--full", "--no-dangling", "--no-progress")
	require.NoError(t, err)
	assert.Empty(t, out)
}

// TestGitReadsWhatGitobjWrote builds signed commits with Builder, one on
// another, writes each as a pack with AddPack, then consolidates the
// packs: git reads every object back as written, computes the same
// index for every pack and finds nothing wrong with the repository.
func TestGitReadsWhatGitobjWrote(t *testing.T) {
	repo, d := bareRepo(t)
	sign := testSign(t)
	steps := []map[string]string{
		{"runs/c/01/run-1/doc.json": `{"a":1}`, "runs/c/01/run-1/receipt.json": "r", "index/c/01": "1"},
		{"runs/c/01/run-2/doc.json": `{"a":2}`, "runs/c/02/run-3/doc.json": "", "index/c/02": "2"},
		{"runs/c/01/run-1/extra": strings.Repeat("x", 70000), "a": "top", "z/z/z/z": "deep"},
	}
	tip := plumbing.ZeroHash
	var names []plumbing.Hash
	for i, files := range steps {
		b := NewBuilder(d)
		c, err := b.Commit(tip, changesOf(files), fmt.Sprintf("step %d\n", i), testWho, sign)
		require.NoError(t, err)
		name, err := d.AddPack(b.Objects(), b.Hashes())
		require.NoError(t, err)
		names = append(names, name)
		gittest.Git(t, repo, "update-ref", "refs/heads/main", c.String())

		requireGitReads(t, repo, b)
		requireGitIndexes(t, repo, name)
		requireFsckClean(t, repo)
		wantParent := ""
		if !tip.IsZero() {
			wantParent = tip.String()
		}
		assert.Equal(t, wantParent, gittest.Git(t, repo, "log", "-1", "--format=%P", "main"), "parent of step %d", i)
		for p, data := range files {
			assert.Equal(t, data, gittest.Git(t, repo, "cat-file", "blob", "main:"+p), p)
		}
		tip = c
	}

	// A consolidation of the three packs: the merged pack and its index
	// are what git would make of it.
	before := allObjects(t, repo)
	require.NoError(t, d.Consolidate(1<<20, removeNow))
	packs, err := filepath.Glob(filepath.Join(repo, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, 1, "three packs of geometric sizes 1:1:1 merge into one")
	merged := plumbing.NewHash(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(packs[0]), "pack-"), ".pack"))
	requireGitIndexes(t, repo, merged)
	assert.Equal(t, before, allObjects(t, repo))
	requireFsckClean(t, repo)
}

// TestGitReadsThePushPack: the pack a push sends (writePack) is one that
// git's receive side indexes under --strict with every object of the
// commit, and nothing else.
func TestGitReadsThePushPack(t *testing.T) {
	_, d := bareRepo(t)
	b := NewBuilder(d)
	_, err := b.Commit(plumbing.ZeroHash, changesOf(map[string]string{"d/a": "1", "d/b": "2", "e": "3"}), "m\n", testWho, testSign(t))
	require.NoError(t, err)
	var pack bytes.Buffer
	require.NoError(t, writePack(&pack, b.Objects(), b.Hashes()))

	repo := filepath.Join(t.TempDir(), "receiver.git")
	gittest.InitBare(t, repo)
	_, err = gittest.Run(t, repo, pack.Bytes(), "index-pack", "--stdin", "--strict")
	require.NoError(t, err)
	requireGitReads(t, repo, b)
	listed := strings.Fields(gittest.Git(t, repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"))
	assert.Len(t, listed, len(b.Hashes()), "the pack holds exactly the objects the builder created")
}
