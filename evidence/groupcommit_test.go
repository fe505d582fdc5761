package evidence

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/testing/gittest"
)

// gatedRemote is a local bare remote whose first push waits in its
// pre-receive hook (run by the stock receive-pack) until open is called:
// while it waits, the store is held and the appends that arrive queue for
// the next commit.
type gatedRemote struct {
	dir, gate string
}

func newGatedRemote(t *testing.T) *gatedRemote {
	g := &gatedRemote{dir: bareRemote(t), gate: filepath.Join(t.TempDir(), "gate")}
	hook := fmt.Sprintf("#!/bin/sh\nif [ ! -e %[1]s.first ]; then\n  touch %[1]s.first %[1]s.in\n  while [ ! -e %[1]s.go ]; do sleep 0.01; done\nfi\nexit 0\n", g.gate)
	require.NoError(t, os.WriteFile(filepath.Join(g.dir, "hooks", "pre-receive"), []byte(hook), 0o755))
	return g
}

// waitHeld waits until the first push is held in the hook.
func (g *gatedRemote) waitHeld(t *testing.T) {
	require.Eventually(t, func() bool {
		_, err := os.Stat(g.gate + ".in")
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the first push never reached the hook")
}

func (g *gatedRemote) open(t *testing.T) {
	require.NoError(t, os.WriteFile(g.gate+".go", nil, 0o644))
}

// waitQueued waits until n appends wait for the store.
func waitQueued(t *testing.T, s *Store, n int) {
	require.Eventually(t, func() bool {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		return len(s.waiting) == n
	}, 30*time.Second, 5*time.Millisecond, "the appends never queued")
}

// heldStore opens a store on a gated remote and starts appending run
// "a", whose push the hook holds: the appends made next queue behind it.
// Wait on wg for them all; open the gate with g.open.
func heldStore(t *testing.T) (*gatedRemote, *Store, *sync.WaitGroup) {
	g := newGatedRemote(t)
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, g.dir, signer))
	wg := &sync.WaitGroup{}
	wg.Go(func() {
		_, err := s.Append(t.Context(), "first", runFiles("c", "a", 1, 64))
		assert.NoError(t, err)
	})
	g.waitHeld(t)
	return g, s, wg
}

type appendResult struct {
	commit string
	err    error
}

// TestGroupCommit: appends that arrive while another is written land
// together in one signed commit that stock git accepts, each returning
// only once it landed; a member whose path exists fails alone, and one
// whose caller gave up while waiting writes nothing.
func TestGroupCommit(t *testing.T) {
	t.Run("one commit", func(t *testing.T) {
		g := newGatedRemote(t)
		signer, allowed := testSigner(t)
		s := openStore(t, testOptions(t, g.dir, signer))
		var first appendResult
		var wg sync.WaitGroup
		wg.Go(func() { first.commit, first.err = s.Append(t.Context(), "first", runFiles("c", "r0", 1, 64)) })
		g.waitHeld(t)
		const waiting = 4
		res := make([]appendResult, waiting)
		for i := range waiting {
			wg.Go(func() {
				res[i].commit, res[i].err = s.Append(t.Context(), fmt.Sprintf("step %d", i+1), runFiles("c", fmt.Sprintf("r%d", i+1), 2, 64))
			})
		}
		waitQueued(t, s, waiting)
		for _, r := range res {
			assert.Empty(t, r.commit, "an append returned before its commit landed")
		}
		g.open(t)
		wg.Wait()

		require.NoError(t, first.err)
		for i, r := range res {
			require.NoError(t, r.err, "append %d", i+1)
			require.NotEmpty(t, r.commit, "append %d returned without being written", i+1)
			assert.Equal(t, res[0].commit, r.commit, "the waiting appends were not committed together")
		}
		assert.NotEqual(t, first.commit, res[0].commit)
		assert.Equal(t, "2", gittest.Git(t, g.dir, "rev-list", "--count", "signet/evidence"), "the waiting appends were not committed together")
		assert.Equal(t, res[0].commit, gittest.Git(t, g.dir, "rev-parse", "signet/evidence"))
		msg := gittest.Git(t, g.dir, "log", "-1", "--format=%B", "signet/evidence")
		assert.True(t, strings.HasPrefix(msg, "evidence: 4 appends in one commit\n"), msg)
		for i := range waiting {
			assert.Contains(t, msg, fmt.Sprintf("step %d", i+1))
		}
		files := gittest.Git(t, g.dir, "ls-tree", "-r", "--name-only", "signet/evidence")
		for i := range waiting + 1 {
			for _, f := range runFiles("c", fmt.Sprintf("r%d", i), 2, 64)[:2] {
				assert.Contains(t, files, f.Path)
			}
		}
		gittest.Git(t, g.dir, "fsck", "--strict", "--no-dangling")
		_, err := gittest.Run(t, g.dir, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", res[0].commit)
		require.NoError(t, err)
	})

	// Two runs' copies of one document (an approval relied on by both, an
	// equal log) are one blob in a group commit: the pack pushed holds it
	// once, and stock git reads the branch (found by a crash test, where a
	// pack counted such a blob twice and git refused it).
	t.Run("identical documents of two members", func(t *testing.T) {
		remote := bareRemote(t) // no hook: written in process
		signer, _ := testSigner(t)
		s := openStore(t, testOptions(t, remote, signer))
		_, err := s.Append(t.Context(), "first", runFiles("c", "r0", 1, 64))
		require.NoError(t, err)
		shared := []byte(`{"approval":"the same bytes in both runs"}`)
		res := make([]appendResult, 2)
		var wg sync.WaitGroup
		s.mu.Lock() // as an append in flight holds it: both queue
		for i := range res {
			wg.Go(func() {
				files := runFiles("c", fmt.Sprintf("r%d", i+1), 1, 64)
				files = append(files, File{Path: path.Join(RunDir("c", fmt.Sprintf("r%d", i+1), day), "approvals", "shared.json"), Data: shared})
				res[i].commit, res[i].err = s.Append(t.Context(), "copy", files)
			})
		}
		waitQueued(t, s, 2)
		s.mu.Unlock()
		wg.Wait()
		for _, r := range res {
			require.NoError(t, r.err, "stock git's view of the pack aside, the push itself failed")
		}
		assert.Equal(t, res[0].commit, res[1].commit, "not one group commit")
		_, err = gittest.Run(t, remote, nil, "fsck", "--strict", "--no-dangling")
		require.NoError(t, err, "stock git refused the pack of a group commit with a shared blob")
		files := gittest.Git(t, remote, "ls-tree", "-r", "--name-only", "signet/evidence")
		assert.Equal(t, 2, strings.Count(files, "approvals/shared.json"))
	})

	t.Run("a member whose path exists fails alone", func(t *testing.T) {
		g, s, wg := heldStore(t)
		// Queued in this order: b (new), a again (on the tip once the
		// first lands), c (new).
		runs := []string{"b", "a", "c"}
		res := make([]appendResult, len(runs))
		for i, run := range runs {
			wg.Go(func() { res[i].commit, res[i].err = s.Append(t.Context(), run, runFiles("c", run, 1, 64)) })
			waitQueued(t, s, i+1) // keep the arrival order
		}
		g.open(t)
		wg.Wait()
		require.NoError(t, res[0].err, "an append failed for another member's path")
		require.ErrorIs(t, res[1].err, ErrExists, "a path on the tip was written again")
		require.NoError(t, res[2].err, "an append failed for another member's path")
		files := gittest.Git(t, g.dir, "ls-tree", "-r", "--name-only", "signet/evidence")
		for _, run := range []string{"a", "b", "c"} {
			assert.Contains(t, files, IndexPath("c", run))
		}
		gittest.Git(t, g.dir, "fsck", "--strict", "--no-dangling")
	})

	t.Run("two members writing one path: the first wins", func(t *testing.T) {
		g, s, wg := heldStore(t)
		runs := []string{"b", "c", "b"}
		res := make([]appendResult, len(runs))
		for i, run := range runs {
			wg.Go(func() {
				files := runFiles("c", run, 1, 64)
				files[1].Data = fmt.Appendf(nil, "member %d", i) // same paths, other bytes
				res[i].commit, res[i].err = s.Append(t.Context(), run, files)
			})
			waitQueued(t, s, i+1)
		}
		g.open(t)
		wg.Wait()
		require.NoError(t, res[0].err)
		require.NoError(t, res[1].err, "an append failed for another member's path")
		require.ErrorIs(t, res[2].err, ErrExists, "one path was written twice")
		assert.Equal(t, "member 0", gittest.Git(t, g.dir, "show", "signet/evidence:"+runFiles("c", "b", 1, 64)[1].Path), "the later member overwrote the first")
		gittest.Git(t, g.dir, "fsck", "--strict", "--no-dangling")
	})

	t.Run("a member that gave up writes nothing", func(t *testing.T) {
		g, s, wg := heldStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		var gaveUp, other appendResult
		wg.Go(func() { gaveUp.commit, gaveUp.err = s.Append(ctx, "gave up", runFiles("c", "x", 1, 64)) })
		waitQueued(t, s, 1)
		wg.Go(func() { other.commit, other.err = s.Append(t.Context(), "other", runFiles("c", "y", 1, 64)) })
		waitQueued(t, s, 2)
		cancel()
		g.open(t)
		wg.Wait()
		require.ErrorIs(t, gaveUp.err, context.Canceled, "an append whose caller gave up was written")
		require.NoError(t, other.err, "an append failed because another member gave up")
		files := gittest.Git(t, g.dir, "ls-tree", "-r", "--name-only", "signet/evidence")
		assert.NotContains(t, files, IndexPath("c", "x"), "an append whose caller gave up was written")
		assert.Contains(t, files, IndexPath("c", "y"))
	})
}

// groupCrashEnv names the directory a TestGroupCommitCrash child works in.
const groupCrashEnv = "SIGNET_TEST_GROUP_CRASH_DIR"

// TestGroupCommitCrash kills a writer (a process of its own, real
// SIGKILL at crash point after-group-commit) once a group commit of three
// appends has landed and before any of them was answered, then opens the
// store again on the same state directory: the commit is on the branch
// whole (every member's files, never some), the store starts from it
// without a rollback alarm or a re-accepted tip, and writing any member's
// step again is refused (ErrExists): the restarted writer finds each step
// recorded once.
func TestGroupCommitCrash(t *testing.T) {
	if dir := os.Getenv(groupCrashEnv); dir != "" {
		groupCrashChild(t, dir)
		return
	}
	require.Contains(t, crash.EvidencePoints, "after-group-commit")
	dir := t.TempDir()
	g := newGatedRemote(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key"), priv.Seed(), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "remote"), []byte(g.dir+"\n"+g.gate), 0o600))

	// The child is killed, so its own temporary directories are never
	// removed by it: they go under this test's, which is.
	childTmp := filepath.Join(dir, "tmp")
	require.NoError(t, os.Mkdir(childTmp, 0o700))
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestGroupCommitCrash$", "-test.v")
	cmd.Env = append(os.Environ(), groupCrashEnv+"="+dir, crash.EnvVar+"=after-group-commit", "TMPDIR="+childTmp)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the writer was not killed:\n%s", out)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the writer was not killed at after-group-commit (%v):\n%s", ee, out)
	left, err := os.ReadDir(childTmp)
	require.NoError(t, err)
	require.NotEmpty(t, left, "the killed writer's temporary directories are not under this test's")

	// Whole on the branch: one commit after the first, with all three.
	assert.Equal(t, "2", gittest.Git(t, g.dir, "rev-list", "--count", "signet/evidence"))
	files := gittest.Git(t, g.dir, "ls-tree", "-r", "--name-only", "signet/evidence")
	for _, run := range []string{"r1", "r2", "r3"} {
		for _, f := range runFiles("c", run, 2, 64) {
			assert.Contains(t, files, f.Path, "a member of the group commit is missing")
		}
	}
	gittest.Git(t, g.dir, "fsck", "--strict", "--no-dangling")

	// The restarted writer: its state is behind the branch, which
	// descends from it; no tip is re-accepted.
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	opts := testOptions(t, g.dir, signer)
	opts.StateDir = filepath.Join(dir, "state")
	opts.AcceptCurrentTip = false
	s, err := Open(t.Context(), opts)
	require.NoError(t, err, "the store refused the branch its group commit left")
	defer s.Close()
	assert.Equal(t, gittest.Git(t, g.dir, "rev-parse", "signet/evidence"), s.Tip())
	for _, run := range []string{"r1", "r2", "r3"} {
		_, err := s.Append(t.Context(), "again", runFiles("c", run, 2, 64))
		require.ErrorIs(t, err, ErrExists, "step %s written twice", run)
	}
}

// groupCrashChild is the writer TestGroupCommitCrash kills: a first
// append held in the hook, three more queued behind it.
func groupCrashChild(t *testing.T, dir string) {
	seed, err := os.ReadFile(filepath.Join(dir, "key"))
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
	require.NoError(t, err)
	remote, err := os.ReadFile(filepath.Join(dir, "remote"))
	require.NoError(t, err)
	rdir, gate, _ := strings.Cut(string(remote), "\n")
	g := &gatedRemote{dir: rdir, gate: gate}
	opts := testOptions(t, g.dir, signer)
	opts.StateDir = filepath.Join(dir, "state")
	s, err := Open(t.Context(), opts)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := s.Append(t.Context(), "first", runFiles("c", "r0", 1, 64))
		assert.NoError(t, err)
	})
	g.waitHeld(t)
	for i := 1; i <= 3; i++ {
		wg.Go(func() {
			_, err := s.Append(t.Context(), "step", runFiles("c", fmt.Sprintf("r%d", i), 2, 64))
			assert.NoError(t, err)
		})
	}
	waitQueued(t, s, 3)
	g.open(t)
	wg.Wait()
	t.Fatal("the group commit landed and the writer was not killed")
}
