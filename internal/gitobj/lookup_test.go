package gitobj

import (
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLookupThroughSamples: with buckets searched through their samples
// (here one sample every 3 names, so that every bucket of a 2000-object
// pack is), every object is found at the offset a binary search of the
// whole index finds, and no name next to one (one more or one less in
// its last byte), before a bucket's first name or after its last is.
func TestLookupThroughSamples(t *testing.T) {
	defer func(n int) { sampleEvery = n }(sampleEvery)
	sampleEvery = 3
	dir, names, _, _ := packOfBlobs(t, 2000, "sampled")
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	require.Len(t, d.packs, 1)
	p := d.packs[0]
	sampled := 0
	for _, n := range names {
		h := plumbing.NewHash(n)
		off, ok := p.offset(h)
		require.True(t, ok, "%s not found", n)
		assert.Equal(t, wholeSearch(p, h), off, "%s found at another offset", n)
		for _, delta := range []int{-1, 1} {
			near := h
			near[len(near)-1] += byte(delta)
			if slices.Contains(names, near.String()) {
				continue
			}
			_, found := p.offset(near)
			assert.False(t, found, "%s (next to %s, not in the pack) found", near, n)
		}
	}
	for b := range 256 {
		if p.samples[b].Load() != nil {
			sampled++
		}
		for _, h := range []plumbing.Hash{{byte(b)}, {byte(b), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
			_, found := p.offset(h)
			assert.False(t, found, "%s found", h)
		}
	}
	assert.Greater(t, sampled, 200, "few buckets were searched through samples: the test proves little")
	for _, n := range names {
		_, err := d.Object(plumbing.BlobObject, plumbing.NewHash(n), 1<<20)
		require.NoError(t, err)
	}
}

// wholeSearch is the offset of h by a binary search of its whole bucket.
func wholeSearch(p *mappedPack, h plumbing.Hash) int64 {
	defer func(n int) { sampleEvery = n }(sampleEvery)
	sampleEvery = 1 << 30
	off, _ := p.offset(h)
	return off
}
