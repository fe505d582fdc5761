package gitobj

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// receivePackShim puts a git-receive-pack first on PATH that records each
// start in the returned file and then runs the real one, so that a test
// can tell a push written in process from one through receive-pack.
func receivePackShim(t *testing.T) (started func() int) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	script := "#!/bin/sh\necho x >> " + marker + "\nexec git receive-pack \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "git-receive-pack"), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func() int {
		b, _ := os.ReadFile(marker)
		return strings.Count(string(b), "x")
	}
}

// localPushEnv is a source repository to build commits in and a second
// repository, dst, to push them to.
type localPushEnv struct {
	t    *testing.T
	src  string
	d    *Dir
	sign SignFunc
}

func newLocalPushEnv(t *testing.T) *localPushEnv {
	src, d := bareRepo(t)
	return &localPushEnv{t: t, src: src, d: d, sign: testSign(t)}
}

// push builds a commit of files on parent and pushes it to dst's ref from
// old.
func (e *localPushEnv) push(dst string, ref plumbing.ReferenceName, parent, old plumbing.Hash, files map[string]string) (plumbing.Hash, error) {
	b, c, err := commitPack(e.t, e.src, e.d, e.sign, parent, files)
	require.NoError(e.t, err)
	r, err := NewRemote(dst, Auth{})
	require.NoError(e.t, err)
	return c, r.Push(e.t.Context(), b.Objects(), ref, old, c, b.Hashes())
}

func revParse(t *testing.T, repo, ref string) string {
	out, err := gittest.Cmd(t, repo, "rev-parse", "-q", "--verify", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestPushLocalInProcess: a push to a local repository that no hook
// watches is written without receive-pack, and stock git reads the
// result as its own (fsck --strict, rev-parse, reflog); it is the same
// compare-and-swap: a stale old value or a held ref lock moves nothing.
func TestPushLocalInProcess(t *testing.T) {
	started := receivePackShim(t)
	const ref = plumbing.ReferenceName("refs/heads/signet/evidence")

	t.Run("bare", func(t *testing.T) {
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "dst.git")
		gittest.InitBare(t, dst)
		c1, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"a/one": "1"})
		require.NoError(t, err)
		_, err = gittest.Run(t, dst, nil, "cat-file", "-e", c1.String())
		require.NoError(t, err, "the ref moved to objects that were not written")
		c2, err := e.push(dst, ref, c1, c1, map[string]string{"a/two": "2"})
		require.NoError(t, err)
		assert.Equal(t, c2.String(), revParse(t, dst, ref.String()))
		gittest.Git(t, dst, "fsck", "--strict", "--no-dangling")
		assert.Equal(t, "1", gittest.Git(t, dst, "show", c2.String()+":a/one"))
		assert.Zero(t, started(), "receive-pack ran")

		// A stale old value: the remote moved on.
		_, err = e.push(dst, ref, c1, c1, map[string]string{"a/three": "3"})
		var moved *MovedError
		require.ErrorAs(t, err, &moved, "a push from a stale tip was accepted")
		assert.Equal(t, c2.String(), revParse(t, dst, ref.String()), "a push from a stale tip moved the ref")
		assert.NoFileExists(t, filepath.Join(dst, ref.String()+".lock"))

		// Another writer holds the ref's lock.
		lock := filepath.Join(dst, ref.String()+".lock")
		require.NoError(t, os.WriteFile(lock, nil, 0o644))
		_, err = e.push(dst, ref, c2, c2, map[string]string{"a/four": "4"})
		require.ErrorIs(t, err, ErrUnreachable, "a push took a ref another writer had locked")
		assert.Equal(t, c2.String(), revParse(t, dst, ref.String()), "a push moved a locked ref")
		assert.FileExists(t, lock, "another writer's lock was removed")
		assert.NotContains(t, err.Error(), "remove", "a fresh lock was called stale")
		// One left by a writer that died an hour ago: still never
		// removed, but the error says where it is and what to do.
		hourAgo := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(lock, hourAgo, hourAgo))
		_, err = e.push(dst, ref, c2, c2, map[string]string{"a/four": "4"})
		require.ErrorIs(t, err, ErrUnreachable)
		assert.Contains(t, err.Error(), "held since "+hourAgo.UTC().Format(time.RFC3339))
		assert.Contains(t, err.Error(), "one that crashed left it; remove "+lock)
		assert.FileExists(t, lock, "a stale lock was removed by the push")
		require.NoError(t, os.Remove(lock))

		// A ref only in packed-refs is compared by its packed value.
		gittest.Git(t, dst, "pack-refs", "--all")
		require.NoFileExists(t, filepath.Join(dst, ref.String()))
		_, err = e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"b": "b"})
		require.ErrorAs(t, err, &moved, "a packed ref was taken for absent")
		c3, err := e.push(dst, ref, c2, c2, map[string]string{"a/five": "5"})
		require.NoError(t, err)
		assert.Equal(t, c3.String(), revParse(t, dst, ref.String()))
		gittest.Git(t, dst, "fsck", "--strict", "--no-dangling")
		assert.Zero(t, started(), "receive-pack ran")
	})

	t.Run("work tree on another branch", func(t *testing.T) {
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "work")
		gittest.Git(t, "", "init", "-q", "-b", "main", dst)
		c1, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"x": "1"})
		require.NoError(t, err)
		assert.Equal(t, c1.String(), revParse(t, dst, ref.String()))
		assert.Contains(t, gittest.Git(t, dst, "reflog", "show", "--format=%H %gs", ref.String()), c1.String()+" push", "core.logAllRefUpdates is on in a work tree")
		gittest.Git(t, dst, "fsck", "--strict", "--no-dangling")
		assert.Zero(t, started(), "receive-pack ran")
	})
}

// TestPushLocalLeavesReceivePackItsRules: where receive-pack would do more
// than store objects and move the ref — a hook, the branch checked out in
// a work tree, receive.* settings — the push goes through receive-pack and
// its refusal stands.
func TestPushLocalLeavesReceivePackItsRules(t *testing.T) {
	started := receivePackShim(t)
	const ref = plumbing.ReferenceName("refs/heads/signet/evidence")
	refused := func(t *testing.T, dst string, err error) {
		t.Helper()
		require.Error(t, err, "the push landed despite receive-pack's rule")
		var moved *MovedError
		assert.True(t, errors.Is(err, ErrRejected) || errors.As(err, &moved), "%v", err)
		assert.Empty(t, revParse(t, dst, ref.String()), "the ref moved")
	}

	t.Run("pre-receive hook", func(t *testing.T) {
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "dst.git")
		gittest.InitBare(t, dst)
		require.NoError(t, os.WriteFile(filepath.Join(dst, "hooks", "pre-receive"), []byte("#!/bin/sh\necho no evidence here >&2\nexit 1\n"), 0o755))
		before := started()
		_, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"x": "1"})
		refused(t, dst, err)
		assert.Equal(t, before+1, started(), "the hook's repository was written without receive-pack")
	})

	t.Run("checked-out branch", func(t *testing.T) {
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "work")
		gittest.Git(t, "", "init", "-q", "-b", "signet/evidence", dst)
		before := started()
		_, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"x": "1"})
		refused(t, dst, err)
		assert.Equal(t, before+1, started())
	})

	t.Run("not a fast-forward", func(t *testing.T) {
		// receive.denyNonFastForwards (gittest.InitBare sets it): a
		// commit whose parent is not the old value is receive-pack's to
		// refuse.
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "dst.git")
		gittest.InitBare(t, dst)
		c1, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"x": "1"})
		require.NoError(t, err)
		before := started()
		_, err = e.push(dst, ref, plumbing.ZeroHash, c1, map[string]string{"y": "2"})
		require.Error(t, err, "a non-fast-forward landed")
		assert.Equal(t, c1.String(), revParse(t, dst, ref.String()), "the ref moved")
		assert.Equal(t, before+1, started(), "a non-fast-forward was written without receive-pack")
	})

	t.Run("receive settings", func(t *testing.T) {
		e := newLocalPushEnv(t)
		dst := filepath.Join(t.TempDir(), "dst.git")
		gittest.InitBare(t, dst)
		gittest.Git(t, dst, "config", "receive.fsckObjects", "true")
		before := started()
		_, err := e.push(dst, ref, plumbing.ZeroHash, plumbing.ZeroHash, map[string]string{"x": "1"})
		require.NoError(t, err)
		assert.Equal(t, before+1, started(), "a repository with receive.fsckObjects was written without receive-pack")
	})
}
