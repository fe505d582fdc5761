package gitobj

import (
	"crypto/rand"
	"fmt"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/stretchr/testify/require"
)

// testTree encodes n tree entries named from first, with random object
// names.
func testTree(t testing.TB, first, n int) []byte {
	var b []byte
	h := make([]byte, 20)
	for i := range n {
		_, err := rand.Read(h)
		require.NoError(t, err)
		b = append(b, fmt.Sprintf("100644 %010d.json\x00", first+i)...)
		b = append(b, h...)
	}
	return b
}

// TestTreeDelta: the delta treeDelta makes gives the target back from the
// source (go-git's PatchDelta, which git's format is), for versions of a
// directory (an entry added at the end, in the middle, one object
// changed, one removed, the same), across the 64 KiB copy limit, and for
// unrelated trees (the general delta); a version one entry larger costs
// about that entry.
func TestTreeDelta(t *testing.T) {
	big := testTree(t, 0, 10_000) // 430 KB: copies past 64 KiB
	entry := testTree(t, 10_000, 1)
	changed := slices.Clone(big)
	copy(changed[len(changed)/2:], "changed object name!")
	cases := []struct {
		name     string
		src, tgt []byte
		most     int // bytes the delta may take; 0: any
	}{
		{"added at the end", big, append(slices.Clone(big), entry...), len(entry) + 64},
		{"added in the middle", big, slices.Concat(big[:40*5000], entry, big[40*5000:]), len(entry) + 64},
		{"one object changed", big, changed, 64},
		{"one entry removed", big, slices.Concat(big[:40*77], big[40*78:]), 64},
		{"the same", big, big, 64},
		{"an older, smaller version", append(slices.Clone(big), entry...), big, 64},
		{"empty target", big, nil, 64},
		{"unrelated", testTree(t, 0, 100), testTree(t, 500, 100), 0},
		{"small", testTree(t, 0, 3), testTree(t, 0, 4)[:40*3+7], 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := treeDelta(c.src, c.tgt)
			got, err := packfile.PatchDelta(c.src, d)
			require.NoError(t, err, "the delta must give the target back")
			require.True(t, slices.Equal(c.tgt, got), "the delta must give the target back: %d bytes, want %d", len(got), len(c.tgt))
			if c.most > 0 {
				require.LessOrEqual(t, len(d), c.most, "a version that differs by an entry costs about that entry")
			}
		})
	}
}

// BenchmarkTreeDelta: the delta of a receipt chain's shard of 10^4 links
// to its next version (one link more), by treeDelta and by go-git's
// general packfile.DiffDelta, which consolidation used first.
func BenchmarkTreeDelta(b *testing.B) {
	src := testTree(b, 0, 10_000)
	tgt := append(slices.Clone(src), testTree(b, 10_000, 1)...)
	for _, c := range []struct {
		name  string
		delta func(src, tgt []byte) []byte
	}{{"ends", treeDelta}, {"diffdelta", packfile.DiffDelta}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(tgt)))
			for b.Loop() {
				c.delta(src, tgt)
			}
		})
	}
}
