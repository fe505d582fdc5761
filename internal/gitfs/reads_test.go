package gitfs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gitfs"
	"signet.dev/signet/specs"
)

// countingStorer counts the blobs and trees read through it.
type countingStorer struct {
	storer.EncodedObjectStorer
	blobs, trees atomic.Int64
}

func (c *countingStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := c.EncodedObjectStorer.EncodedObject(t, h)
	if err == nil && o.Type() == plumbing.BlobObject {
		c.blobs.Add(1)
	}
	if err == nil && o.Type() == plumbing.TreeObject {
		c.trees.Add(1)
	}
	return o, err
}

// TestRenderReadsEachSpecFileOnce: rendering a spec directory of N files
// from a Git tree reads each file's blob a bounded number of times, not N
// times each. specs' lstat used to list the parent directory for every
// file, and a listing read every entry's blob for its size: a pass over
// a spec repository of N request files read N² blobs (13 ms a request a
// pass at 150 requests, growing; BenchmarkLocalCheckOverhead's CPU
// profile). A listing now reads no blob, and Lstat one entry.
func TestRenderReadsEachSpecFileOnce(t *testing.T) {
	const n = 60
	f, count, commit := countedTree(t, func(dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "specs"), 0o755))
		for i := range n {
			doc := fmt.Sprintf("apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: r%03d\nspec:\n  profile: p\n  nodes: [n%d]\n", i, i)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "specs", fmt.Sprintf("r%03d.yaml", i)), []byte(doc), 0o644))
		}
	})

	count.blobs.Store(0)
	entries, err := fs.ReadDir(f, "specs")
	require.NoError(t, err)
	require.Len(t, entries, n)
	assert.Zero(t, count.blobs.Load(), "listing a directory read its files' blobs")
	info, err := entries[0].Info()
	require.NoError(t, err)
	assert.Positive(t, info.Size(), "an entry's Info gives its blob's size")

	count.blobs.Store(0)
	docs, err := specs.LoadDocuments(f, "specs")
	require.NoError(t, err)
	require.Len(t, docs, n)
	assert.LessOrEqual(t, count.blobs.Load(), int64(3*n), "loading %d spec files read %d blobs: more than a few each", n, count.blobs.Load())

	// Rendering (which hides oversized files behind its own fs.FS) lists
	// each directory a few times, not once a file.
	fresh, err := gitfs.FromCommit(commit) // no directory decoded yet
	require.NoError(t, err)
	count.blobs.Store(0)
	count.trees.Store(0)
	cf := &listingCounter{FS: fresh}
	_, err = specs.Render(cf, "specs")
	require.NoError(t, err)
	t.Logf("render of %d files: %d listings, %d blob reads, %d tree reads", n, cf.lists.Load(), count.blobs.Load(), count.trees.Load())
	assert.LessOrEqual(t, cf.lists.Load(), int64(8), "rendering %d spec files listed their directory %d times", n, cf.lists.Load())
	assert.LessOrEqual(t, count.blobs.Load(), int64(4*n), "rendering %d spec files read %d blobs: more than a few each", n, count.blobs.Load())
	assert.LessOrEqual(t, count.trees.Load(), int64(1), "rendering decoded the spec directory's tree %d times, not once", count.trees.Load())
}

// listingCounter counts the directory listings of FS; it forwards what
// FS implements.
type listingCounter struct {
	*gitfs.FS
	lists atomic.Int64
}

func (c *listingCounter) ReadDir(name string) ([]fs.DirEntry, error) {
	c.lists.Add(1)
	return c.FS.ReadDir(name)
}

func (c *listingCounter) Open(name string) (fs.File, error) {
	f, err := c.FS.Open(name)
	if d, ok := f.(fs.ReadDirFile); ok && err == nil {
		return countedDir{ReadDirFile: d, c: c}, nil
	}
	return f, err
}

type countedDir struct {
	fs.ReadDirFile
	c *listingCounter
}

func (d countedDir) ReadDir(n int) ([]fs.DirEntry, error) {
	d.c.lists.Add(1)
	return d.ReadDirFile.ReadDir(n)
}

// TestLstatAndReadLink: FS is an fs.ReadLinkFS: Lstat describes a symlink
// entry as a symlink, ReadLink returns its target, and a regular file is
// not a link.
func TestLstatAndReadLink(t *testing.T) {
	f, _, _ := countedTree(t, func(dir string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "real"), []byte("xyz"), 0o644))
		require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))
	})
	li, err := fs.Lstat(f, "link")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, li.Mode().Type())
	target, err := fs.ReadLink(f, "link")
	require.NoError(t, err)
	assert.Equal(t, "/etc/passwd", target)
	ri, err := fs.Lstat(f, "real")
	require.NoError(t, err)
	assert.True(t, ri.Mode().IsRegular())
	assert.Equal(t, int64(3), ri.Size())
	_, err = fs.ReadLink(f, "real")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = fs.Lstat(f, "missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// countedTree is commitTree's tree read through a countingStorer.
func countedTree(t *testing.T, setup func(dir string)) (*gitfs.FS, *countingStorer, *object.Commit) {
	t.Helper()
	repo, head := commitRepo(t, setup, false)
	cs := &countingStorer{EncodedObjectStorer: repo.Storer}
	c, err := object.GetCommit(cs, head)
	require.NoError(t, err)
	f, err := gitfs.FromCommit(c)
	require.NoError(t, err)
	return f, cs, c
}

// BenchmarkRenderSpecTree renders a spec directory of N request files from
// a Git tree read through go-git's storage, as each reconcile pass does
// (reconciler.GitSource): the cost of a pass's rendering as the spec
// repository accumulates requests. Reports ms per render and µs per file.
func BenchmarkRenderSpecTree(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			repo, head := commitRepo(b, func(dir string) {
				require.NoError(b, os.MkdirAll(filepath.Join(dir, "specs"), 0o755))
				for i := range n {
					doc := fmt.Sprintf("apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: r%05d\nspec:\n  profile: p\n  nodes: [n%d]\n", i, i)
					require.NoError(b, os.WriteFile(filepath.Join(dir, "specs", fmt.Sprintf("r%05d.yaml", i)), []byte(doc), 0o644))
				}
			}, true)
			c, err := repo.CommitObject(head)
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				f, err := gitfs.FromCommit(c)
				require.NoError(b, err)
				r, err := specs.Render(f, "specs")
				require.NoError(b, err)
				require.Len(b, r.Objects, n)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/render")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/file")
		})
	}
}
