package pagetable

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildTree writes a tree of n records (key(i), value(i)) to store.
func buildTree(t testing.TB, store Store, n int) []Page {
	t.Helper()
	w := NewTreeWriter(store)
	for i := range n {
		require.NoError(t, w.Add(key(i), value(i)))
	}
	root, err := w.Finish()
	require.NoError(t, err)
	return root
}

// TestTree: a tree of 4·10^4 records in 4 KiB pages signs an index of a
// few pages for hundreds of data pages; every key reads back, absent ones
// do not, an update rewrites the data pages it touches and the index
// pages naming them, carrying the rest, and the old tree still reads its
// values.
func TestTree(t *testing.T) {
	setPageSize(t, 4<<10)
	store := NewMemStore()
	root := buildTree(t, store, 40000)
	tr, err := OpenTree(root, store)
	require.NoError(t, err)
	all, err := tr.Digests()
	require.NoError(t, err)
	assert.Greater(t, len(all), 20*len(root), "the index is not small against the data: %d root pages, %d pages", len(root), len(all))
	for i := range 40000 {
		v, ok, err := tr.Get(key(i))
		require.NoError(t, err)
		require.True(t, ok, key(i))
		require.Equal(t, value(i), v)
	}
	for _, k := range []string{"a", "k00000001", "k00050005", "z"} {
		_, ok, err := tr.Get(k)
		require.NoError(t, err)
		assert.False(t, ok, k)
	}

	puts := map[string]string{"a-first": "before every key", key(5000): "replaced", "k00050005": "inserted", "z-last": "after every key"}
	for i := range 200 {
		puts[key(7000)+"x"+key(i)] = "a run of inserts that splits a page"
	}
	dst := NewMemStore()
	root2, err := tr.Update(puts, dst)
	require.NoError(t, err)
	tr2, err := OpenTree(root2, dst)
	require.NoError(t, err)
	for k, v := range puts {
		got, ok, err := tr2.Get(k)
		require.NoError(t, err)
		require.True(t, ok, k)
		require.Equal(t, v, got, k)
	}
	for _, i := range []int{0, 1, 4999, 5001, 7000, 39999} {
		got, ok, err := tr2.Get(key(i))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, value(i), got)
		got, _, err = tr.Get(key(i))
		require.NoError(t, err)
		require.Equal(t, value(i), got, "the old tree changed")
	}
	got, _, err := tr.Get(key(5000))
	require.NoError(t, err)
	assert.Equal(t, value(5000), got, "the old tree changed")
	all2, err := tr2.Digests()
	require.NoError(t, err)
	old := map[string]bool{}
	for _, d := range all {
		old[d] = true
	}
	kept := 0
	for _, d := range all2 {
		if old[d] {
			kept++
		}
		_, err := dst.Get(d)
		require.NoError(t, err, "page %s of the new tree is not in its store", d)
	}
	t.Logf("%d pages, %d after the update, %d kept", len(all), len(all2), kept)
	assert.Greater(t, kept, len(all)-30, "the update rewrote more than the pages its keys touch")
}

// TestTreeEmpty: an empty tree has an empty root; an update of it is a
// fresh tree.
func TestTreeEmpty(t *testing.T) {
	store := NewMemStore()
	root := buildTree(t, store, 0)
	assert.Equal(t, []Page{}, root)
	tr, err := OpenTree(root, store)
	require.NoError(t, err)
	_, ok, err := tr.Get("k")
	require.NoError(t, err)
	assert.False(t, ok)
	root, err = tr.Update(map[string]string{"k": "v"}, store)
	require.NoError(t, err)
	tr, err = OpenTree(root, store)
	require.NoError(t, err)
	v, ok, err := tr.Get("k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "v", v)
}

// TestTreeCorrupt: a data page or an index page that is not what names
// it fails every read through it with ErrCorrupt, never a value; a page
// gone is the store's not-exist error.
func TestTreeCorrupt(t *testing.T) {
	setPageSize(t, 512)
	dir := t.TempDir()
	store, err := NewDirStore(dir)
	require.NoError(t, err)
	root := buildTree(t, store, 2000)
	tr, err := OpenTree(root, store)
	require.NoError(t, err)
	dps, err := tr.dataPages()
	require.NoError(t, err)
	target := dps[len(dps)/2]
	flip := func(t *testing.T, digest string) {
		p := filepath.Join(dir, digest)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, os.WriteFile(p, b, 0o600)) })
		c := slices.Clone(b)
		c[len(c)/2] ^= 1
		require.NoError(t, os.WriteFile(p, c, 0o600))
	}
	t.Run("data page", func(t *testing.T) {
		flip(t, target.p.Digest)
		tr, err := OpenTree(root, store)
		require.NoError(t, err)
		_, ok, err := tr.Get(target.p.First)
		require.ErrorIs(t, err, ErrCorrupt)
		assert.False(t, ok)
		_, err = tr.Update(map[string]string{target.p.First: "x"}, NewMemStore())
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("index page", func(t *testing.T) {
		flip(t, root[0].Digest)
		tr, err := OpenTree(root, store)
		require.NoError(t, err)
		_, _, err = tr.Get(key(0))
		require.ErrorIs(t, err, ErrCorrupt)
		_, err = tr.Digests()
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("index record naming a page outside its range", func(t *testing.T) {
		// An index page written (its digest in the root) whose second
		// record names the first data page, whose keys are before its
		// bound.
		m := NewMemStore()
		w := NewWriter(m)
		require.NoError(t, w.Add(firstBound, dps[0].p.Digest+" 1 "+dps[0].p.First))
		require.NoError(t, w.Add(dps[1].bound, dps[0].p.Digest+" 1 "+dps[0].p.First))
		bad, err := w.Finish()
		require.NoError(t, err)
		require.NoError(t, Carry(m, store, dps[0].p.Digest))
		tr, err := OpenTree(bad, m)
		require.NoError(t, err)
		_, _, err = tr.Get(dps[1].bound)
		require.ErrorIs(t, err, ErrCorrupt)
		_, err = tr.Digests()
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("page gone", func(t *testing.T) {
		m := NewMemStore()
		for _, p := range root {
			require.NoError(t, Carry(m, store, p.Digest))
		}
		tr, err := OpenTree(root, m)
		require.NoError(t, err)
		_, _, err = tr.Get(target.p.First)
		require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
		assert.NotErrorIs(t, err, ErrCorrupt)
	})
}
