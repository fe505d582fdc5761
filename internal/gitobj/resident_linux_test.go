package gitobj

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// TestDropResidentDropsPackAndIndex: after reading every object of a pack
// stock git wrote, both the pack's and its index's pages are in the
// process's resident set (/proc/self/smaps); DropResident leaves neither
// there, and reading again still works. At 10^5 runs the index alone was
// 305 MB of an audit's resident set.
func TestDropResidentDropsPackAndIndex(t *testing.T) {
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q", "--bare")
	var (
		in  strings.Builder
		d   *Dir
		err error
	)
	blobs := t.TempDir()
	for i := range 2000 {
		p := filepath.Join(blobs, strconv.Itoa(i))
		require.NoError(t, os.WriteFile(p, fmt.Appendf(nil, "blob %d %s\n", i, strings.Repeat("x", i%97)), 0o644))
		in.WriteString(p + "\n")
	}
	out, err := gittest.Run(t, dir, []byte(in.String()), "hash-object", "-w", "--stdin-paths")
	require.NoError(t, err)
	names := strings.Fields(out)
	require.Len(t, names, 2000)
	// Unreachable: repack would leave them loose.
	_, err = gittest.Run(t, dir, []byte(strings.Join(names, "\n")+"\n"), "pack-objects", "-q", "objects/pack/pack")
	require.NoError(t, err)
	gittest.Git(t, dir, "prune-packed")
	idx := mustGlob(t, filepath.Join(dir, "objects/pack/*.idx"))
	pack := strings.TrimSuffix(idx, ".idx") + ".pack"

	d, err = OpenDir(dir)
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
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && fields[5] == p
		case in && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.Atoi(fields[1])
			require.NoError(t, err)
			total += kb
		}
	}
	require.NoError(t, sc.Err())
	return total
}
