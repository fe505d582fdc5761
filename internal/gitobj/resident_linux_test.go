package gitobj

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/proctest"
)

// TestDropResidentDropsPackAndIndex: after reading every object of a pack
// stock git wrote, both the pack's and its index's pages are in the
// process's resident set (/proc/self/smaps); DropResident leaves neither
// there, and reading again still works. At 10^5 runs the index alone was
// 305 MB of an audit's resident set.
func TestDropResidentDropsPackAndIndex(t *testing.T) {
	dir, names, idx, pack := packOfBlobs(t, 2000, "blob")
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	readAll := func() {
		for _, n := range names {
			_, err := d.Object(plumbing.BlobObject, plumbing.NewHash(n), 1<<20)
			require.NoError(t, err)
		}
	}
	readAll()
	require.Positive(t, residentKB(t, idx), "reading every object left none of the index resident: the test proves nothing")
	require.Positive(t, residentKB(t, pack), "reading every object left none of the pack resident: the test proves nothing")
	d.DropResident()
	require.Zero(t, residentKB(t, idx), "the index's pages are still resident after DropResident")
	require.Zero(t, residentKB(t, pack), "the pack's pages are still resident after DropResident")
	readAll()
}

// residentKB sums the Rss of this process's mappings of file p.
func residentKB(t *testing.T, p string) int {
	t.Helper()
	m, err := proctest.Mapped(p)
	require.NoError(t, err)
	return m.RSSKB
}

// packOfBlobs writes n blobs (their contents start with prefix) into a
// new bare repository as one pack stock git writes, and returns the
// repository, the blobs' names and the pack's index and pack files.
func packOfBlobs(t *testing.T, n int, prefix string) (dir string, names []string, idx, pack string) {
	t.Helper()
	dir = t.TempDir()
	gittest.Git(t, dir, "init", "-q", "--bare")
	names = addPackOfBlobs(t, dir, n, prefix)
	idx = mustGlob(t, filepath.Join(dir, "objects/pack/*.idx"))
	return dir, names, idx, strings.TrimSuffix(idx, ".idx") + ".pack"
}

// addPackOfBlobs writes n blobs into repository dir as one more pack and
// returns their names.
func addPackOfBlobs(t *testing.T, dir string, n int, prefix string) []string {
	t.Helper()
	return addPackOf(t, dir, n, func(i int) []byte {
		return fmt.Appendf(nil, "%s %d %s\n", prefix, i, strings.Repeat("x", i%97))
	})
}

// addPackOf writes n blobs, the i-th body(i), into repository dir as one
// more pack stock git writes and returns their names.
func addPackOf(t *testing.T, dir string, n int, body func(i int) []byte) []string {
	t.Helper()
	var in strings.Builder
	blobs := t.TempDir()
	for i := range n {
		p := filepath.Join(blobs, strconv.Itoa(i))
		require.NoError(t, os.WriteFile(p, body(i), 0o644))
		in.WriteString(p + "\n")
	}
	out, err := gittest.Run(t, dir, []byte(in.String()), "hash-object", "-w", "--stdin-paths")
	require.NoError(t, err)
	names := strings.Fields(out)
	require.Len(t, names, n)
	// Unreachable: repack would leave them loose.
	_, err = gittest.Run(t, dir, []byte(strings.Join(names, "\n")+"\n"), "pack-objects", "-q", "objects/pack/pack")
	require.NoError(t, err)
	gittest.Git(t, dir, "prune-packed")
	return names
}

// TestAdviseRandomMapsPacksForRandomReads: after AdviseRandom, every
// mapping of a pack and of its index carries the kernel's random-read
// flag (VmFlags "rr" in /proc/self/smaps: no read-around on a fault), and
// so does a pack mapped later (a fetch adds one). Without it, a
// reconciler's first start on a 10^5-run branch under a 256 MiB memory
// limit read 145 GB from disk in three minutes of recovery, megabytes a
// page fault.
func TestAdviseRandomMapsPacksForRandomReads(t *testing.T) {
	dir, names, idx, pack := packOfBlobs(t, 200, "first")
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	flags := func(p string) []string {
		m, err := proctest.Mapped(p)
		require.NoError(t, err)
		require.Equal(t, 1, m.Count, "%s is not mapped once", p)
		return m.Flags
	}
	require.NotContains(t, flags(pack), "rr", "a pack is mapped for random reads before AdviseRandom: the test proves nothing")
	d.AdviseRandom()
	assert.Contains(t, flags(pack), "rr", "the pack is not mapped for random reads")
	assert.Contains(t, flags(idx), "rr", "the index is not mapped for random reads")

	later := addPackOfBlobs(t, dir, 200, "second")
	require.NoError(t, d.rescan())
	all, err := filepath.Glob(filepath.Join(dir, "objects/pack/*.idx"))
	require.NoError(t, err)
	var idx2 string
	for _, p := range all {
		if p != idx {
			idx2 = p
		}
	}
	require.NotEmpty(t, idx2)
	assert.Contains(t, flags(strings.TrimSuffix(idx2, ".idx")+".pack"), "rr", "a pack mapped after AdviseRandom is not mapped for random reads")
	assert.Contains(t, flags(idx2), "rr", "an index mapped after AdviseRandom is not mapped for random reads")
	for _, n := range append(names, later...) {
		_, err := d.Object(plumbing.BlobObject, plumbing.NewHash(n), 1<<20)
		require.NoError(t, err)
	}
}

// TestReadsKeepResidentBounded: a reader of every object of a pack larger
// than its bound (an audit of the whole history, a reconciler's first
// recovery) never has more of the pack and its index resident than the
// bound, what the reads between two measures bring in and the large
// folios the last faults may map whole (up to 2 MiB each; two allowed).
// At 10^5 runs the pages an audit read between two of its own drops were
// 330 MiB of its resident set; only the bound keeps the resident set
// independent of the pack's size.
func TestReadsKeepResidentBounded(t *testing.T) {
	const limit = 2 << 20
	dir, names, idx, pack := randomBlobPack(t, 3000, 8<<10)
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	d.LimitResident(limit)
	peak := 0
	for i, n := range names {
		_, err := d.Object(plumbing.BlobObject, plumbing.NewHash(n), 1<<20)
		require.NoError(t, err)
		if i%25 == 0 || i == len(names)-1 {
			peak = max(peak, residentKB(t, pack)+residentKB(t, idx))
		}
	}
	fi, err := os.Stat(pack)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(4*limit), "the pack is not much larger than the bound: the test proves nothing")
	assert.Positive(t, peak, "nothing of the pack was ever resident: the test proves nothing")
	t.Logf("at most %d KiB of the pack and index resident", peak)
	assert.LessOrEqual(t, peak, (limit+residentCheckEvery+(4<<20))>>10, "reading every object of a %d KiB pack left %d KiB of it resident, over the bound of %d KiB", fi.Size()>>10, peak, limit>>10)
}

// randomBlobPack writes n blobs of size random (incompressible) bytes into
// a new bare repository as one pack stock git writes, and returns the
// repository, the blobs' names and the pack's index and pack files.
func randomBlobPack(t *testing.T, n, size int) (dir string, names []string, idx, pack string) {
	t.Helper()
	dir = t.TempDir()
	gittest.Git(t, dir, "init", "-q", "--bare")
	names = addPackOf(t, dir, n, func(int) []byte {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		return b
	})
	idx = mustGlob(t, filepath.Join(dir, "objects/pack/*.idx"))
	return dir, names, idx, strings.TrimSuffix(idx, ".idx") + ".pack"
}

// TestIndexingKeepsResidentBounded: indexing a fetched pack larger than
// the readers' bound (a new pod's first fetch of the whole branch) never
// has more of the pack resident than the bound, what one measure's worth
// of scanning brings in and the large folios of the file just written
// that the last faults may map whole (up to 2 MiB each; two allowed).
func TestIndexingKeepsResidentBounded(t *testing.T) {
	const limit = 2 << 20
	defer MaxResidentBytes.Store(MaxResidentBytes.Load())
	MaxResidentBytes.Store(limit)
	_, _, _, packFile := randomBlobPack(t, 3000, 8<<10)
	data, err := os.ReadFile(packFile)
	require.NoError(t, err)
	require.Greater(t, len(data), 4*limit, "the pack is not much larger than the bound: the test proves nothing")

	dir := filepath.Join(t.TempDir(), "objects", "pack")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	x, err := NewPackIndexer(dir)
	require.NoError(t, err)
	_, err = x.Write(data)
	require.NoError(t, err)
	tmp := x.tmp.Name()
	done := make(chan struct{})
	peak := make(chan int)
	go func() {
		most := 0
		for {
			if m, err := proctest.Mapped(tmp); err == nil {
				most = max(most, m.RSSKB)
			}
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	require.NoError(t, x.Close())
	close(done)
	most := <-peak
	assert.Positive(t, most, "the pack was never seen resident while indexed: the test proves nothing")
	t.Logf("at most %d KiB of the pack resident", most)
	assert.LessOrEqual(t, most, (limit+residentCheckEvery+(4<<20))>>10, "indexing a %d KiB pack had %d KiB of it resident, over the bound of %d KiB", len(data)>>10, most, limit>>10)
}
