package evidence

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

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

// TestOpenWhileConsolidating opens a store whose fetch brings a third
// pack, so the refresh at Open starts a consolidation of the mirror's
// packs, and holds Open inside its refresh (in the TipKeeper's LoadTip,
// the second, after the fetch and before the ancestry check) until the
// consolidation has removed the packs it replaced, or 2 s have passed.
// Open refreshes under the store's lock, so the removal (which takes the
// lock) must wait for Open: a removal while Open runs would unmap packs
// its ancestry check may be reading, a fault rather than an error. Then
// every document reads back.
func TestOpenWhileConsolidating(t *testing.T) {
	ctx := context.Background()
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	opts := testOptions(t, remote, signer)
	for _, run := range []string{"run-1", "run-2"} { // one pack per Close
		s, err := Open(ctx, opts)
		require.NoError(t, err)
		_, err = s.Append(ctx, "", runFiles("c", run, 2, 64))
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	other := openStore(t, testOptions(t, remote, signer))
	moved, err := other.Append(ctx, "", runFiles("c", "run-3", 2, 64))
	require.NoError(t, err)
	require.NoError(t, other.Close())

	packsDir := filepath.Join(opts.StateDir, mirrorDir, "objects", "pack")
	keeper := &pausingKeeper{packs: filepath.Join(packsDir, "pack-*.pack"), wait: 2 * time.Second}
	opts.Keeper = keeper
	s := openStore(t, opts)
	require.GreaterOrEqual(t, keeper.loads, 2, "Open must read the kept tip inside its refresh")
	assert.Greater(t, keeper.packsSeen, 1, "the consolidation removed the mirror's packs while Open was inside its refresh")
	s.repacking.Wait()
	require.Len(t, mirrorPacks(t, s), 1, "the fetch at open must have started a consolidation of the mirror's packs")
	assert.Equal(t, moved, s.Tip())
	for _, run := range []string{"run-1", "run-2", "run-3"} {
		f := runFiles("c", run, 2, 64)[1]
		b, err := s.Read(ctx, f.Path)
		require.NoError(t, err, f.Path)
		assert.Equal(t, f.Data, b, f.Path)
	}
}

// pausingKeeper keeps a tip in memory (a version counter as its
// compare-and-swap). Open reads the kept tip twice: before its fetch and
// inside its refresh, after the fetch. That second LoadTip waits until the packs matching the
// glob packs are down to one (a consolidation removed the rest) or wait
// has passed, and records how many there were.
type pausingKeeper struct {
	packs     string
	wait      time.Duration
	loads     int
	packsSeen int

	mu   sync.Mutex
	kept KeptTip
	n    int
}

func (k *pausingKeeper) LoadTip(context.Context) (KeptTip, error) {
	if k.loads++; k.loads == 2 {
		for deadline := time.Now().Add(k.wait); ; time.Sleep(10 * time.Millisecond) {
			packs, err := filepath.Glob(k.packs)
			if err != nil {
				return KeptTip{}, err
			}
			k.packsSeen = len(packs)
			if len(packs) <= 1 || time.Now().After(deadline) {
				break
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	kt := k.kept
	kt.Version = strconv.Itoa(k.n)
	return kt, nil
}

func (k *pausingKeeper) SwapTip(_ context.Context, old, next KeptTip) (KeptTip, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old.Version != strconv.Itoa(k.n) {
		return KeptTip{}, fmt.Errorf("%w: version %s, kept %d", ErrTipConflict, old.Version, k.n)
	}
	k.n++
	k.kept = next
	k.kept.Version = strconv.Itoa(k.n)
	return k.kept, nil
}

func (k *pausingKeeper) String() string { return "the test's keeper" }
