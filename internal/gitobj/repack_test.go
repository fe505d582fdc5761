package gitobj

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

func TestRollup(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		max    int
		want   int
	}{
		{nil, 100, 0},
		{[]int{5}, 100, 0},
		{[]int{5, 5}, 100, 2},     // a binary counter's carry
		{[]int{5, 10}, 100, 0},    // already geometric
		{[]int{5, 5, 10}, 100, 3}, // the carry reaches the next pack
		{[]int{5, 5, 20}, 100, 2}, // and stops below it
		{[]int{1, 1, 1, 1, 1, 64}, 100, 5},
		{[]int{1, 2, 4, 8, 16}, 100, 5}, // each equal to the sum before: not twice it
		{[]int{1, 2, 6, 18, 54}, 100, 0},
		{[]int{30, 30, 30, 30}, 100, 3},    // cut to stay within max
		{[]int{5, 5, 500, 500}, 100, 2},    // packs over max are left alone
		{[]int{200, 300}, 100, 0},          // nothing small enough
		{[]int{60, 60, 60}, 100, 0},        // even two exceed max
		{[]int{10, 10, 10, 10, 10}, 25, 2}, // the longest prefix within max
	} {
		t.Run(fmt.Sprint(tc.counts, tc.max), func(t *testing.T) {
			require.Equal(t, tc.want, rollup(tc.counts, tc.max))
		})
	}
}

// removeNow is a Consolidate swap with no reader to hold off.
func removeNow(remove func() error) error { return remove() }

// gitPacks makes a repository whose objects stock git wrote as packs:
// versions of similar files gc'd with deltas (what a fetch from a gc'd
// remote brings), then more commits in a pack of their own. With window
// 0 no pack holds a delta.
func gitPacks(t testing.TB, window string) string {
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q")
	commit := func(i int) {
		for j := range 3 {
			body := strings.Repeat(fmt.Sprintf("line %d of file %d\n", j, j), 50) + fmt.Sprintf("version %d\n", i)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.json", j)), []byte(body), 0o644))
		}
		gittest.Git(t, dir, "add", "-A")
		gittest.Git(t, dir, "commit", "-q", "-m", fmt.Sprintf("v%d", i))
	}
	for i := range 20 {
		commit(i)
	}
	gittest.Git(t, dir, "repack", "-a", "-d", "-q", "--window="+window)
	for i := range 3 {
		commit(20 + i)
		gittest.Git(t, dir, "repack", "-d", "-q", "--window="+window)
	}
	return dir
}

// allObjects lists a repository's objects as `git cat-file
// --batch-check` shows them (name, type, size), sorted.
func allObjects(t testing.TB, dir string) []string {
	out := gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	return lines
}

// TestMergePacksResolvesDeltas merges packs stock git wrote with deltas
// and one gitobj wrote: every object survives with its type and size,
// the merged packs are removed, and git fsck agrees.
func TestMergePacksResolvesDeltas(t *testing.T) {
	dir := gitPacks(t, "50")
	gitDir := filepath.Join(dir, ".git")
	d, err := OpenDir(gitDir)
	require.NoError(t, err)
	defer d.Close()
	b := NewBuilder(d)
	_, err = b.Commit(plumbing.ZeroHash, changesOf(map[string]string{"own/a": "own a", "own/b": "own b"}), "own\n", testWho, testSign(t))
	require.NoError(t, err)
	_, err = d.AddPack(b.Objects(), b.Hashes())
	require.NoError(t, err)

	before := allObjects(t, dir)
	packs, err := filepath.Glob(filepath.Join(gitDir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(packs), 3)
	deltas := 0
	for _, p := range packs {
		out := gittest.Git(t, "", "verify-pack", "-v", strings.TrimSuffix(p, ".pack")+".idx")
		deltas += strings.Count(out, "chain length")
	}
	require.Positive(t, deltas, "git's packs must hold deltas for this test to mean anything")

	mergeAll(t, d, gitDir, dir, before)
	for _, p := range packs {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "a merged pack must be removed")
	}
	// d reads the merged pack.
	want := gittest.Git(t, dir, "cat-file", "blob", "HEAD:f1.json")
	got, err := d.Object(plumbing.BlobObject, plumbing.NewHash(gittest.Git(t, dir, "rev-parse", "HEAD:f1.json")), 0)
	require.NoError(t, err)
	require.Equal(t, want, strings.TrimSpace(string(got)))
}

// TestMergePacksRefusesCorruptEntry flips a byte inside a whole object
// stored in a pack: the merge fails naming the object, and every pack is
// left as it was (nothing removed, no new pack, no temporary file).
func TestMergePacksRefusesCorruptEntry(t *testing.T) {
	dir := gitPacks(t, "0")
	d, err := OpenDir(filepath.Join(dir, ".git"))
	require.NoError(t, err)
	defer d.Close()
	packs := d.packList()
	require.GreaterOrEqual(t, len(packs), 2)
	victim := packs[0]
	h, off, _, ok := victim.idx.entry(0)
	require.True(t, ok)
	path := filepath.Join(d.dir, "pack", victim.name+".pack")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off+3)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off+3)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	before, err := os.ReadDir(filepath.Join(d.dir, "pack"))
	require.NoError(t, err)
	err = d.mergePacks(packs, removeNow)
	require.ErrorContains(t, err, h.String(), "a corrupt object must stop the merge")
	after, err := os.ReadDir(filepath.Join(d.dir, "pack"))
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed merge must leave the packs as they were")
}

// TestPackRefusesAnObjectTwice: a pack listing one object twice would
// count it twice in its header and once in its index, which stock git
// refuses; writing it fails and leaves no pack behind. The Builder lists
// identical contents once.
func TestPackRefusesAnObjectTwice(t *testing.T) {
	repo, d := bareRepo(t)
	b := NewBuilder(d)
	_, err := b.Commit(plumbing.ZeroHash, changesOf(map[string]string{"a/one": "same", "b/two": "same"}), "twice\n", testWho, testSign(t))
	require.NoError(t, err)
	hashes := b.Hashes()
	seen := map[plumbing.Hash]bool{}
	for _, h := range hashes {
		require.False(t, seen[h], "the builder listed %s twice", h)
		seen[h] = true
	}
	_, err = d.AddPack(b.Objects(), append(hashes, hashes[0]))
	require.ErrorContains(t, err, "twice", "a pack holding an object twice was written")
	packs, err := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.pack"))
	require.NoError(t, err)
	require.Empty(t, packs, "a pack holding an object twice was written")
}

// TestMergePacksWritesTreeVersionsAsDeltas merges the packs of 200
// appends, each adding a link to one chain shard and a run to one day
// (the two directories every append rewrites whole): the merged pack
// holds every object (git's count, types and sizes agree; fsck and
// index-pack --verify pass), the versions of those directories are deltas
// against newer ones with chains no longer than git's default depth, the
// newest version of each is whole (what the next append reads), the pack
// is a fraction of the whole versions, and every version reads back.
func TestMergePacksWritesTreeVersionsAsDeltas(t *testing.T) {
	repo, d := bareRepo(t)
	sign := testSign(t)
	const appends = 200
	var commits []plumbing.Hash
	parent := plumbing.ZeroHash
	for i := range appends {
		_, c, err := commitPack(t, repo, d, sign, parent, map[string]string{
			fmt.Sprintf("chain/c/0/%06d.json", i):                   fmt.Sprintf("link %d\n", i),
			fmt.Sprintf("runs/2026-12-03/run-%06d/receipt.json", i): fmt.Sprintf("receipt %d\n", i),
		})
		require.NoError(t, err)
		commits = append(commits, c)
		parent = c
	}
	before := allObjects(t, repo)
	packs, err := filepath.Glob(filepath.Join(repo, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, appends)
	wholeBytes := int64(0)
	for _, p := range packs {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		wholeBytes += fi.Size()
	}

	merged := mergeAll(t, d, repo, repo, before)

	// git verify-pack -v: "name type size size-in-pack offset" for a whole
	// object, then "depth base" for a delta; "chain length = N: M objects".
	verify := gittest.Git(t, repo, "verify-pack", "-v", strings.TrimSuffix(merged, ".pack")+".idx")
	deltas, longest := 0, 0
	stored := map[string]int{} // object name -> its fields on its line
	for _, line := range strings.Split(verify, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && len(f[0]) == 40 {
			stored[f[0]] = len(f)
			if len(f) == 7 {
				deltas++
			}
		}
		if rest, ok := strings.CutPrefix(line, "chain length = "); ok {
			n, err := strconv.Atoi(strings.SplitN(rest, ":", 2)[0])
			require.NoError(t, err)
			longest = max(longest, n)
		}
	}
	t.Logf("%d deltas, longest chain %d; pack %d bytes against %d in the appends' packs", deltas, longest, fileSize(t, merged), wholeBytes)
	require.GreaterOrEqual(t, deltas, 2*(appends-appends/maxWriteDeltaDepth)-4, "the versions of the chain shard and the day's directory must be deltas")
	require.LessOrEqual(t, longest, maxWriteDeltaDepth, "a delta chain may not be longer than git's default depth")
	tip := commits[len(commits)-1].String()
	for _, dir := range []string{"chain/c/0", "runs/2026-12-03"} {
		h := gittest.Git(t, repo, "rev-parse", tip+":"+dir)
		require.Equal(t, 5, stored[h], "the newest %s (%s) must be stored whole: the next append reads it", dir, h)
	}
	require.Less(t, fileSize(t, merged), wholeBytes/4, "the merged pack must not hold every version of a growing directory whole")

	for _, c := range commits {
		for _, dir := range []string{"chain/c/0", "runs/2026-12-03"} {
			h := plumbing.NewHash(gittest.Git(t, repo, "rev-parse", c.String()+":"+dir))
			got, err := d.Object(plumbing.TreeObject, h, 0)
			require.NoError(t, err)
			require.Equal(t, h, HashObject(plumbing.TreeObject, got), "tree %s of %s read back", dir, c)
		}
	}
}

func fileSize(t *testing.T, name string) int64 {
	fi, err := os.Stat(name)
	require.NoError(t, err)
	return fi.Size()
}

// mergeAll merges every pack of d (the objects of gitDir, the repository
// git runs in at dir) into one and checks it with stock git: every object
// of before is still there with its type and size, fsck --strict and
// index-pack --verify pass. It returns the merged pack's path.
func mergeAll(t *testing.T, d *Dir, gitDir, dir string, before []string) string {
	t.Helper()
	require.NoError(t, d.rescan())
	require.NoError(t, d.mergePacks(d.packList(), removeNow))
	after, err := filepath.Glob(filepath.Join(gitDir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, before, allObjects(t, dir), "every object must survive a merge with its type and size")
	gittest.Git(t, dir, "fsck", "--strict", "--full", "--no-dangling")
	gittest.Git(t, dir, "index-pack", "--verify", after[0])
	return after[0]
}
