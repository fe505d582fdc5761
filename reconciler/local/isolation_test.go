package local

// Tests of issue 15's local check isolation, each an attack a check could
// make on another check or on signet, performed with real processes,
// transient uids and cgroups (this test binary runs as root, as the
// daemon's local backend does).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// cgroupParent is a cgroup of this test's own under the writable cgroup2
// directory of this machine (other test binaries create theirs beside
// it); the tests require one (this CI machine has one:
// ../shared/RECIPES.md).
func cgroupParent(t *testing.T) string {
	t.Helper()
	root, why := FindCgroupParent()
	require.NotEmpty(t, root, "no writable cgroup2 hierarchy: %s", why)
	dir, err := os.MkdirTemp(root, "signet-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Rmdir(dir) })
	return dir
}

// TestFinding1StragglerDiesWithItsCheck is finding 1's first step: a check
// leaves a process that left its process group (setsid) and exits Pass.
// Before issue 15 that process outlived the check and signet and later
// forged another check's result. Now it dies before Run returns: by
// cgroup.kill where the machine has a writable cgroup2, by uid otherwise.
func TestFinding1StragglerDiesWithItsCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cgroup bool
		note   string
	}{
		{"cgroup", true, "ended the processes left in the check's cgroup (cgroup.kill)"},
		{"uid", false, "ended the processes of uid %d left after the check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The straggler says its pid once it has left the group, and the
			// check exits only then.
			req := request(t, `setsid sh -c 'echo child=$$ > "$HOME/child"; exec sleep 1000' </dev/null >/dev/null 2>&1 &
while [ ! -s "$HOME/child" ]; do sleep 0.01; done; cat "$HOME/child"
result Pass; exit 0`)
			openToOthers(t, req.WorkRoot)
			req.User = transientUser(t)
			if tc.cgroup {
				req.Cgroup = cgroupParent(t)
			}
			rep, err := Run(t.Context(), req)
			require.NoError(t, err)
			child := childPID(t, rep.Stdout)
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			assert.False(t, running(t, child), "the setsid'd process outlived its check")
			note := tc.note
			if !tc.cgroup {
				note = fmt.Sprintf(note, req.User.UID)
			}
			assert.Contains(t, rep.Termination.Reason, note)
			assert.Equal(t, specs.VerdictPass, specs.Evaluate(expect(req), rep.Termination, rep.Result).Verdict)
			alive, err := uidAlive(req.User.UID)
			require.NoError(t, err)
			assert.False(t, alive, "a process of uid %d is alive after its check", req.User.UID)
			if tc.cgroup {
				left, err := filepath.Glob(filepath.Join(req.Cgroup, cgroupPrefix+"*"))
				require.NoError(t, err)
				assert.Empty(t, left, "the check's cgroup was not removed")
			}
		})
	}
}

// TestFinding1ChecksCannotReachEachOther runs two checks at once, each as
// its own transient uid, the second attacking the first: it cannot read
// the first's environment (its nonce), write its result file, enter its
// workspace or trace it.
func TestFinding1ChecksCannotReachEachOther(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	victimInfo := filepath.Join(dir, "victim")
	victim := request(t, `printf '%s %s\n' $$ "$SIGNET_RESULT_FILE" > `+victimInfo+`.tmp && mv `+victimInfo+`.tmp `+victimInfo+`
sleep 5; result Fail; exit 1`)
	openToOthers(t, victim.WorkRoot)
	victim.User = transientUser(t)
	victim.Cgroup = cgroupParent(t)

	attacker := request(t, `while [ ! -s `+victimInfo+` ]; do sleep 0.05; done
read pid rf < `+victimInfo+`
if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -q SIGNET_NONCE; then echo environ=readable; else echo environ=denied; fi
if printf forged > "$rf" 2>/dev/null; then echo result=written; else echo result=denied; fi
if ls "$(dirname "$rf")" >/dev/null 2>&1; then echo workspace=readable; else echo workspace=denied; fi
if timeout 3 strace -qq -e trace=none -p $pid 2>&1 | grep -q 'not permitted'; then echo ptrace=denied; else echo ptrace=allowed; fi
result Pass; exit 0`)
	openToOthers(t, attacker.WorkRoot)
	attacker.User = transientUser(t)
	attacker.Cgroup = victim.Cgroup
	require.NotEqual(t, victim.User.UID, attacker.User.UID)

	var wg sync.WaitGroup
	var victimRep *Report
	wg.Go(func() {
		var err error
		victimRep, err = Run(t.Context(), victim)
		assert.NoError(t, err)
	})
	rep, err := Run(t.Context(), attacker)
	require.NoError(t, err)
	wg.Wait()
	out := string(rep.Stdout)
	for _, want := range []string{"environ=denied", "result=denied", "workspace=denied", "ptrace=denied"} {
		assert.Contains(t, out, want+"\n", "stderr: %s", rep.Stderr)
	}
	got := specs.Evaluate(expect(victim), victimRep.Termination, victimRep.Result)
	assert.Equal(t, specs.VerdictFail, got.Verdict, got.Reason)
}

// TestFinding3NoInheritedDescriptors is finding 3: signet inherited a
// descriptor without close-on-exec (`signet run --key /dev/fd/7
// 7<reconciler.key`); the check read the key through it. Now no
// descriptor above 2 reaches a check.
func TestFinding3NoInheritedDescriptors(t *testing.T) {
	key := filepath.Join(t.TempDir(), "reconciler.key")
	require.NoError(t, os.WriteFile(key, []byte("PRIVATE KEY MATERIAL"), 0o600))
	fd, err := syscall.Open(key, syscall.O_RDONLY, 0) // no O_CLOEXEC, as a shell's 7<
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })

	req := request(t, fmt.Sprintf(`echo "fds=$(ls /proc/$$/fd | sort -n | tr '\n' ' ')"
if cat <&%d; then echo key=read; else echo key=denied; fi
result Pass; exit 0`, fd))
	openToOthers(t, req.WorkRoot)
	req.User = transientUser(t)
	rep, err := Run(t.Context(), req)
	require.NoError(t, err)
	out := string(rep.Stdout)
	assert.NotContains(t, out, "PRIVATE KEY")
	assert.Contains(t, out, "key=denied\n")
	assert.NotContains(t, " "+strings.SplitN(out, "\n", 2)[0]+" ", " "+strconv.Itoa(fd)+" ", "descriptor %d reached the check: %s", fd, out)
}

// TestFinding4WorkRoot is finding 4: a work root someone else made (owned
// by the check user, mode 0777), a symlink, one with a mode that lets
// others in, or one under a directory others may write is refused before
// anything is created in it; EnsureWorkRoot creates a missing one with
// signet as owner and mode 0711.
func TestFinding4WorkRoot(t *testing.T) {
	u := transientUser(t)
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, 0o755))

	attacker := filepath.Join(base, "attacker")
	require.NoError(t, os.Mkdir(attacker, 0o777))
	require.NoError(t, os.Chmod(attacker, 0o777))
	require.NoError(t, os.Chown(attacker, int(u.UID), int(u.GID)))

	link := filepath.Join(base, "link")
	target := filepath.Join(base, "target")
	require.NoError(t, os.Mkdir(target, WorkRootMode))
	require.NoError(t, os.Chmod(target, WorkRootMode))
	require.NoError(t, os.Symlink(target, link))

	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chmod(open, 0o755))

	shared := filepath.Join(base, "shared")
	require.NoError(t, os.Mkdir(shared, 0o777))
	require.NoError(t, os.Chmod(shared, 0o777)) // writable by all, not sticky
	under := filepath.Join(shared, "root")
	require.NoError(t, os.Mkdir(under, WorkRootMode))
	require.NoError(t, os.Chmod(under, WorkRootMode))

	for _, tc := range []struct{ name, root, want string }{
		{"owned by the check user", attacker, fmt.Sprintf("is owned by uid %d, not signet's uid 0", u.UID)},
		{"symlink", link, "is a symlink"},
		{"mode lets others list", open, "has mode 0755, not 0711"},
		{"parent writable by others", under, "its parent " + shared + " is writable by group or others (mode 0777) and not sticky"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := EnsureWorkRoot(tc.root, true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "work root "+tc.root)

			req := request(t, "result Pass; exit 0")
			req.WorkRoot, req.User = tc.root, u
			rep, err := Run(t.Context(), req)
			var se *StartError
			require.ErrorAs(t, err, &se)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, rep.Termination.Started)
			ents, err := os.ReadDir(tc.root)
			if err == nil {
				assert.Empty(t, ents, "a refused work root was written to")
			}
		})
	}

	t.Run("created", func(t *testing.T) {
		root := filepath.Join(base, "fresh")
		require.NoError(t, EnsureWorkRoot(root, true))
		fi, err := os.Lstat(root)
		require.NoError(t, err)
		assert.Equal(t, os.ModeDir|WorkRootMode, fi.Mode())
		assert.Equal(t, uint32(0), fi.Sys().(*syscall.Stat_t).Uid)
		require.NoError(t, EnsureWorkRoot(root, true), "a second start accepts the root it made")
	})
}

// TestWorkspaceRenamedAway asserts the check runs in the directory signet
// built, reached through its descriptor: the script is started and its
// result read there even when the path to it no longer names it.
func TestWorkspaceRenamedAway(t *testing.T) {
	req := request(t, "result Pass; exit 0")
	ws, err := newWorkspace(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.remove() })
	moved := ws.top + "-moved"
	require.NoError(t, os.Rename(ws.top, moved))
	t.Cleanup(func() { _ = os.RemoveAll(moved) })
	require.NoError(t, os.Mkdir(ws.top, 0o700))
	require.NoError(t, os.Mkdir(ws.work, 0o700))
	require.NoError(t, os.WriteFile(ws.script, []byte("#!/bin/sh\necho impostor\n"), 0o700))

	cmd := exec.Command("./" + req.ScriptName)
	cmd.Dir = ws.dir()
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "impostor")
}

// TestUIDPool asserts a uid is never handed to two live checks (of this
// pool or of another process holding its lock), that Sweep ends what a
// uid no one holds still runs, and that ranges overlapping accounts are
// refused.
func TestUIDPool(t *testing.T) {
	first, last := uint32(67000), uint32(67003)
	p, err := NewUIDPool(first, last)
	require.NoError(t, err)
	seen := map[uint32]bool{}
	for range 4 {
		uid, err := p.Acquire()
		require.NoError(t, err)
		assert.False(t, seen[uid], "uid %d handed out twice", uid)
		seen[uid] = true
	}
	_, err = p.Acquire()
	require.ErrorIs(t, err, ErrNoUID, "a fifth check got a uid while four checks held all of them: a uid handed out twice")
	p.Release(first)
	uid, err := p.Acquire()
	require.NoError(t, err)
	assert.Equal(t, first, uid)
	for id := first; id <= last; id++ {
		p.Release(id)
	}

	// Another process's pool holds a lock: never handed out here.
	other, err := NewUIDPool(first, last)
	require.NoError(t, err)
	held, err := other.Acquire()
	require.NoError(t, err)
	for range 8 {
		uid, err := p.Acquire()
		require.NoError(t, err)
		assert.NotEqual(t, held, uid, "uid %d held elsewhere was handed out", held)
		p.Release(uid)
	}
	other.Release(held)

	// A process of a pool uid that no one holds (a dead signet's check)
	// is swept.
	live := exec.Command("sleep", "1000")
	live.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: first + 1, Gid: first + 1, Groups: []uint32{}}}
	require.NoError(t, live.Start())
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	swept, err := p.Sweep()
	require.NoError(t, err)
	assert.Equal(t, []uint32{first + 1}, swept)
	require.Eventually(t, func() bool { return !running(t, live.Process.Pid) }, 5*time.Second, 10*time.Millisecond)

	for _, tc := range []struct {
		first, last uint32
		want        string
	}{
		{1, 10, "uid 1 is the account"},
		{65530, 65540, "holds 65534"},
		{0, 10, "want 0 < FIRST <= LAST"},
		{70000, 69999, "want 0 < FIRST <= LAST"},
		{100000, 300000, "more than 65536"},
	} {
		_, err := NewUIDPool(tc.first, tc.last)
		assert.ErrorContains(t, err, tc.want)
	}
	_, _, err = ParseUIDRange("65536")
	assert.ErrorContains(t, err, `uid range "65536": want FIRST-LAST`)
}

// TestRunRefusesUIDWithLiveProcess asserts no check starts while any
// process of its uid is alive: such a process could read the new check's
// environment and result file or trace it.
func TestRunRefusesUIDWithLiveProcess(t *testing.T) {
	u := transientUser(t)
	live := exec.Command("sleep", "1000")
	live.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}}
	require.NoError(t, live.Start())
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	req := request(t, "result Pass; exit 0")
	openToOthers(t, req.WorkRoot)
	req.User = u
	rep, err := Run(t.Context(), req)
	var se *StartError
	require.ErrorAs(t, err, &se, "a check started as uid %d while a process of it was alive", u.UID)
	assert.Contains(t, err.Error(), fmt.Sprintf("uid %d has live processes", u.UID))
	assert.ErrorIs(t, err, ErrUIDAlive)
	assert.False(t, rep.Termination.Started)
	assert.True(t, running(t, live.Process.Pid), "Run killed a process it did not start")
}

// TestRunRefusesUIDInAnyField: a process of the check's uid is any live
// process with the uid as its real, effective, saved or filesystem uid.
// The leftovers that matter keep the uid in one field only: a setuid-root
// program a check ran (real uid the check's, the others root), or a root
// process that took the uid as its effective uid. Each shape is started
// with setpriv as a real process; a zombie of the uid is dead and does
// not hold it. A scan that read only the first or only the effective uid
// would start the check beside a process that can trace it.
func TestRunRefusesUIDInAnyField(t *testing.T) {
	u := transientUser(t)
	id := strconv.FormatUint(uint64(u.UID), 10)
	for _, tc := range []struct {
		name  string
		flags []string
		want  string // the status file's Uid line, tab-separated
	}{
		{"real uid only (a setuid-root program the check ran)", []string{"--ruid", id}, id + "\t0\t0\t0"},
		{"effective, saved and filesystem uid (root's real uid)", []string{"--euid", id}, "0\t" + id + "\t" + id + "\t" + id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := exec.Command("setpriv", append(tc.flags, "sleep", "1000")...)
			require.NoError(t, live.Start())
			t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", live.Process.Pid))
				return err == nil && strings.HasPrefix(string(b), "Name:\tsleep\n") && strings.Contains(string(b), "\nUid:\t"+tc.want+"\n")
			}, 10*time.Second, 5*time.Millisecond, "setpriv did not leave a sleep with Uid %q", tc.want)

			req := request(t, "result Pass; exit 0")
			openToOthers(t, req.WorkRoot)
			req.User = u
			_, err := Run(t.Context(), req)
			require.ErrorIs(t, err, ErrUIDAlive, "a check started as uid %d beside a process whose Uid line is %q", u.UID, tc.want)
			assert.True(t, running(t, live.Process.Pid), "Run killed a process it did not start")
		})
	}
	t.Run("a zombie does not hold the uid", func(t *testing.T) {
		// Started and never waited for: once it exits it stays a zombie
		// until the cleanup reaps it.
		dead := exec.Command("true")
		dead.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}}
		require.NoError(t, dead.Start())
		t.Cleanup(func() { _ = dead.Wait() })
		require.Eventually(t, func() bool { return !running(t, dead.Process.Pid) }, 10*time.Second, 5*time.Millisecond)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", dead.Process.Pid))
		require.NoError(t, err, "the zombie was reaped before the check")
		require.Contains(t, string(b), "\nState:\tZ", "not a zombie")

		req := request(t, "result Pass; exit 0")
		openToOthers(t, req.WorkRoot)
		req.User = u
		rep, err := Run(t.Context(), req)
		require.NoError(t, err, "a zombie of uid %d kept the check from starting", u.UID)
		assert.True(t, rep.Termination.Exited)
	})
}

// BenchmarkRunIsolated measures Run of a trivial passing script isolated
// as the daemon runs it as root (a transient uid, a cgroup of its own where
// the machine has one, the work root verified, the uid swept after) against
// a bare exec.Command of the same script, interleaved so that both see the
// same machine state; x-forkexec is their ratio (issue 15's goal: <= 3).
func BenchmarkRunIsolated(b *testing.B) {
	pool, err := testPool()
	require.NoError(b, err)
	root := filepath.Join(b.TempDir(), "work")
	for _, d := range []string{filepath.Dir(root), filepath.Dir(filepath.Dir(root))} {
		require.NoError(b, os.Chmod(d, 0o755)) // searchable by the check, as /tmp is
	}
	require.NoError(b, EnsureWorkRoot(root, true))
	cg, _ := FindCgroupParent()
	req := Request{
		Script:     script("result Pass; exit 0"),
		ScriptName: "check.sh",
		Env: map[string]string{
			specs.EnvRunID: testRun, specs.EnvCheckName: testCheck, specs.EnvCheckIndex: "0",
			specs.EnvNonce: "nonce", specs.EnvParticipantIndex: "0", specs.EnvParticipants: "1", specs.EnvGPUCount: "0",
		},
		WorkRoot: root,
		Cgroup:   cg,
	}
	exp := specs.Expect{Run: testRun, Check: testCheck, Nonce: "nonce"}

	bare := b.TempDir()
	path := filepath.Join(bare, "check.sh")
	require.NoError(b, os.WriteFile(path, req.Script, 0o500))
	env := []string{
		specs.EnvRunID + "=" + testRun, specs.EnvCheckName + "=" + testCheck, specs.EnvNonce + "=nonce",
		specs.EnvResultFile + "=" + filepath.Join(bare, "result.json"), "PATH=" + SafePATH,
	}

	var isolated, fork time.Duration
	for b.Loop() {
		start := time.Now()
		uid, err := pool.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		req.User = &User{UID: uid, GID: uid}
		req.Deadline = time.Now().Add(time.Minute)
		rep, err := Run(b.Context(), req)
		pool.Release(uid)
		if err != nil {
			b.Fatal(err)
		}
		if got := specs.Evaluate(exp, rep.Termination, rep.Result); got.Verdict != specs.VerdictPass {
			b.Fatal(got.Reason)
		}
		isolated += time.Since(start)

		start = time.Now()
		cmd := exec.Command(path)
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		fork += time.Since(start)
	}
	b.ReportMetric(float64(isolated.Microseconds())/1000/float64(b.N), "isolated-ms")
	b.ReportMetric(float64(fork.Microseconds())/1000/float64(b.N), "forkexec-ms")
	b.ReportMetric(float64(isolated)/float64(fork), "x-forkexec")
}
