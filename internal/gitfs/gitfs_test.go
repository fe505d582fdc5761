package gitfs_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gitfs"
)

// gitIn runs the stock git CLI in dir.
func gitIn(tb testing.TB, dir string, args ...string) {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, string(out))
}

// commitRepo makes a real repository with the stock git CLI (setup
// writes its files; gc packs them when asked) and returns it opened with
// go-git, and its HEAD commit's hash.
func commitRepo(tb testing.TB, setup func(dir string), gc bool) (*git.Repository, plumbing.Hash) {
	tb.Helper()
	dir := tb.TempDir()
	gitIn(tb, dir, "init", "-q", "-b", "main")
	setup(dir)
	gitIn(tb, dir, "add", "-A")
	gitIn(tb, dir, "commit", "-q", "-m", "x")
	if gc {
		gitIn(tb, dir, "gc", "-q")
	}
	repo, err := git.PlainOpen(dir)
	require.NoError(tb, err)
	head, err := repo.Head()
	require.NoError(tb, err)
	return repo, head.Hash()
}

// commitTree returns the HEAD commit's tree of commitRepo as an FS.
func commitTree(t *testing.T, setup func(dir string)) *gitfs.FS {
	t.Helper()
	repo, head := commitRepo(t, setup, false)
	c, err := repo.CommitObject(head)
	require.NoError(t, err)
	f, err := gitfs.FromCommit(c)
	require.NoError(t, err)
	return f
}

func TestFSReadsCommitTree(t *testing.T) {
	f := commitTree(t, func(dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "top.yaml"), []byte("top"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "x y é.txt"), []byte("awkward"), 0o644))
	})
	require.NoError(t, fstest.TestFS(f, "top.yaml", "a/b/run.sh", "a/x y é.txt"))
	b, err := fs.ReadFile(f, "a/b/run.sh")
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\n", string(b))
	st, err := fs.Stat(f, "a/b/run.sh")
	require.NoError(t, err)
	assert.Equal(t, int64(10), st.Size())
	assert.Equal(t, fs.FileMode(0o555), st.Mode().Perm(), "executable bit is kept")
}

func TestFSRefusesSymlinks(t *testing.T) {
	f := commitTree(t, func(dir string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "real"), []byte("x"), 0o644))
		require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))
	})
	_, err := f.Open("link")
	require.Error(t, err, "a symlink entry must not be opened")
	assert.Contains(t, err.Error(), "symlink")
	entries, err := fs.ReadDir(f, ".")
	require.NoError(t, err)
	var linkType fs.FileMode
	for _, e := range entries {
		if e.Name() == "link" {
			linkType = e.Type()
		}
	}
	assert.Equal(t, fs.ModeSymlink, linkType, "ReadDir reports the symlink as a symlink")
	_, err = f.Open("../x")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = f.Open("missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// TestFSConcurrentReads guards concurrent use: the reconciler renders a
// commit's tree while runs read their scripts from the same cached FS.
// Under -race, unsynchronized access to go-git's trees is reported.
func TestFSConcurrentReads(t *testing.T) {
	f := commitTree(t, func(dir string) {
		for _, d := range []string{"a", "b", "c"} {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, d, "x"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, d, "x", "f.sh"), []byte(d), 0o644))
		}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := []string{"a", "b", "c"}[i%3]
			b, err := fs.ReadFile(f, d+"/x/f.sh")
			assert.NoError(t, err)
			assert.Equal(t, d, string(b))
			assert.NoError(t, fs.WalkDir(f, ".", func(string, fs.DirEntry, error) error { return nil }))
		}()
	}
	wg.Wait()
}
