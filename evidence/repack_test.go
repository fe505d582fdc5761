package evidence

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gittest"
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

// mirrorPacks lists the mirror's pack files.
func mirrorPacks(t *testing.T, s *Store) []string {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(s.opts.StateDir, mirrorDir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	return packs
}

// TestMirrorPacksStayFew appends through many flushes and holds the
// mirror to a logarithmic number of packs (without consolidation there
// would be one pack per flush), then has stock git check the mirror and
// the store read every document back after a restart.
func TestMirrorPacksStayFew(t *testing.T) {
	// Restored after the stores close (cleanups run last first), which
	// waits for their background consolidations.
	f, m := flushObjects, maxRepackObjects
	t.Cleanup(func() { flushObjects, maxRepackObjects = f, m })
	flushObjects, maxRepackObjects = 16, 1<<18
	signer, _ := testSigner(t)
	opts := testOptions(t, bareRemote(t), signer)
	s := openStore(t, opts)
	const runs = 120
	objects, most := 0, 0 // objects: how many the mirror's packs hold at the end
	for i := range runs {
		_, err := s.Append(context.Background(), "", runFiles("c", fmt.Sprintf("run-%03d", i), 2, 64))
		require.NoError(t, err)
		s.repacking.Wait() // consolidation runs in the background
		n := len(mirrorPacks(t, s))
		most = max(most, n)
	}
	mirror := filepath.Join(opts.StateDir, mirrorDir)
	require.NoError(t, s.flush())
	s.repacking.Wait()
	for _, line := range strings.Split(gittest.Git(t, mirror, "count-objects", "-v"), "\n") {
		if n, ok := strings.CutPrefix(line, "in-pack: "); ok {
			objects, _ = strconv.Atoi(n)
		}
	}
	bound := int(math.Log2(float64(objects)/float64(flushObjects))) + 2
	t.Logf("%d objects in %d packs; at most %d packs at once, bound %d", objects, len(mirrorPacks(t, s)), most, bound)
	require.LessOrEqual(t, most, bound, "the mirror's packs must stay logarithmic in the objects written (%d objects)", objects)
	require.Greater(t, objects, 20*flushObjects, "the test must flush many times")

	gittest.Git(t, mirror, "fsck", "--strict", "--full", "--no-dangling")
	require.NoError(t, s.Close())
	s = openStore(t, opts)
	for i := range runs {
		for _, f := range runFiles("c", fmt.Sprintf("run-%03d", i), 2, 64) {
			b, err := s.Read(context.Background(), f.Path)
			require.NoError(t, err, f.Path)
			require.Equal(t, f.Data, b, f.Path)
		}
	}
	_, err := s.Append(context.Background(), "", runFiles("c", "after-restart", 2, 64))
	require.NoError(t, err)
}

// TestMergePacksResolvesDeltas merges a pack stock git wrote with deltas
// (what a fetch from a gc'd remote brings) and the store's own packs:
// every object survives with its content, and git fsck agrees.
func TestMergePacksResolvesDeltas(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	w := openStore(t, testOptions(t, remote, signer))
	for i := range 30 {
		_, err := w.Append(context.Background(), "", runFiles("c", fmt.Sprintf("run-%03d", i), 3, 2048))
		require.NoError(t, err)
	}
	gittest.Git(t, remote, "gc", "-q", "--aggressive")

	opts := testOptions(t, remote, signer)
	s := openStore(t, opts)
	_, err := s.Append(context.Background(), "", runFiles("c", "own", 3, 2048))
	require.NoError(t, err)
	require.NoError(t, s.flush())
	s.repacking.Wait()
	mirror := filepath.Join(opts.StateDir, mirrorDir)
	all := func() []string {
		out := gittest.Git(t, mirror, "cat-file", "--batch-all-objects", "--batch-check")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		sort.Strings(lines)
		return lines
	}
	before := all()
	packs := mirrorPacks(t, s)
	require.GreaterOrEqual(t, len(packs), 2)
	deltas := 0
	for _, p := range packs {
		out := gittest.Git(t, "", "verify-pack", "-v", strings.TrimSuffix(p, ".pack")+".idx")
		deltas += strings.Count(out, "chain length")
	}
	require.Positive(t, deltas, "the fetched pack must hold deltas for this test to mean anything")

	require.NoError(t, s.mergePacks(s.fast.packList()))
	after := mirrorPacks(t, s)
	require.Len(t, after, 1)
	require.Equal(t, before, all(), "every object must survive a merge with its type and size")
	gittest.Git(t, mirror, "fsck", "--strict", "--full", "--no-dangling")
	for _, p := range packs {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "a merged pack must be removed")
	}
	// The store still reads and appends after the merge.
	b, err := s.Read(context.Background(), runFiles("c", "run-007", 3, 2048)[2].Path)
	require.NoError(t, err)
	require.Equal(t, runFiles("c", "run-007", 3, 2048)[2].Data, b)
	_, err = s.Append(context.Background(), "", runFiles("c", "after-merge", 3, 2048))
	require.NoError(t, err)
}

// TestMergePacksRefusesCorruptEntry flips a byte inside an object stored
// in a mirror pack: the merge fails naming the object, and every pack is
// left as it was (nothing removed, no new pack, no temporary file).
func TestMergePacksRefusesCorruptEntry(t *testing.T) {
	saved := flushObjects
	t.Cleanup(func() { flushObjects = saved })
	flushObjects = 1 << 30 // flush only when asked
	signer, _ := testSigner(t)
	opts := testOptions(t, bareRemote(t), signer)
	s := openStore(t, opts)
	for i := range 2 {
		_, err := s.Append(context.Background(), "", runFiles("c", fmt.Sprintf("run-%d", i), 2, 512))
		require.NoError(t, err)
		require.NoError(t, s.flush())
		s.repacking.Wait()
	}
	// The second flush may have merged the two packs: write one more.
	_, err := s.Append(context.Background(), "", runFiles("c", "run-x", 2, 512))
	require.NoError(t, err)
	require.NoError(t, s.flush())
	s.repacking.Wait()
	packs := s.fast.packList()
	require.GreaterOrEqual(t, len(packs), 2)
	victim := packs[0]
	h, off, _, ok := victim.idx.entry(0)
	require.True(t, ok)
	path := filepath.Join(s.fast.dir, "pack", victim.name+".pack")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off+3)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off+3)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	before, err := os.ReadDir(filepath.Join(s.fast.dir, "pack"))
	require.NoError(t, err)
	err = s.mergePacks(packs)
	require.ErrorContains(t, err, h.String(), "a corrupt object must stop the merge")
	after, err := os.ReadDir(filepath.Join(s.fast.dir, "pack"))
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed merge must leave the packs as they were")
}

// TestOpenRemovesInterruptedPackWrites: temporary files a crash left in
// the mirror's pack directory are removed at the next open; packs stay.
func TestOpenRemovesInterruptedPackWrites(t *testing.T) {
	signer, _ := testSigner(t)
	opts := testOptions(t, bareRemote(t), signer)
	s := openStore(t, opts)
	_, err := s.Append(context.Background(), "", runFiles("c", "run-1", 2, 64))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	dir := filepath.Join(opts.StateDir, mirrorDir, "objects", "pack")
	packs := mirrorPacks(t, s)
	require.NotEmpty(t, packs)
	for _, name := range []string{"tmp_pack_123", "tmp_idx_456"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("torn"), 0o600))
	}
	s = openStore(t, opts)
	for _, name := range []string{"tmp_pack_123", "tmp_idx_456"} {
		_, err := os.Stat(filepath.Join(dir, name))
		require.ErrorIs(t, err, os.ErrNotExist, "a leftover temporary file must be removed at open")
	}
	s.repacking.Wait()
	require.Equal(t, packs, mirrorPacks(t, s), "the packs themselves stay")
	b, err := s.Read(context.Background(), runFiles("c", "run-1", 2, 64)[1].Path)
	require.NoError(t, err)
	require.Equal(t, runFiles("c", "run-1", 2, 64)[1].Data, b)
}
