package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// helperEnv, when set, makes the test binary act as a signet that runs one
// check (a script writing its pid to the file named by helperEnv, then
// running helperScriptEnv's shell, else exec sleep) in helperRootEnv, for
// tests that kill signet itself.
const (
	helperEnv       = "SIGNET_LOCAL_TEST_HELPER_PIDFILE"
	helperRootEnv   = "SIGNET_LOCAL_TEST_HELPER_ROOT"
	helperScriptEnv = "SIGNET_LOCAL_TEST_HELPER_SCRIPT"
)

func TestMain(m *testing.M) {
	if pidfile := os.Getenv(helperEnv); pidfile != "" {
		_, err := Run(context.Background(), Request{
			Script:     []byte(fmt.Sprintf("#!/bin/sh\n%s\necho $$ > %s\nexec sleep 1000\n", os.Getenv(helperScriptEnv), pidfile)),
			ScriptName: "check.sh",
			Env: map[string]string{
				specs.EnvRunID: testRun, specs.EnvCheckName: testCheck, specs.EnvCheckIndex: "0",
				specs.EnvNonce: "nonce", specs.EnvParticipantIndex: "0", specs.EnvParticipants: "1", specs.EnvGPUCount: "0",
			},
			Deadline: time.Now().Add(time.Minute),
			WorkRoot: os.Getenv(helperRootEnv),
		})
		fmt.Fprintln(os.Stderr, "helper: Run returned:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// startHelperSignet starts a signet whose check runs script first, and
// returns the check's main pid once it runs.
func startHelperSignet(t *testing.T, dir, script string) (signet *exec.Cmd, pid int) {
	t.Helper()
	pidfile := filepath.Join(dir, "pid")
	self, err := os.Executable()
	require.NoError(t, err)
	signet = exec.Command(self, "-test.run=^$")
	signet.Env = append(os.Environ(), helperEnv+"="+pidfile, helperRootEnv+"="+dir, helperScriptEnv+"="+script)
	require.NoError(t, signet.Start())
	t.Cleanup(func() { _ = signet.Process.Kill(); _ = signet.Wait() })
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	return signet, pid
}

// TestCheckDiesWithSignet kills a signet (this test binary as a helper)
// while its check runs, and asserts the kernel killed the check.
func TestCheckDiesWithSignet(t *testing.T) {
	signet, pid := startHelperSignet(t, t.TempDir(), "")
	require.True(t, running(t, pid))

	require.NoError(t, signet.Process.Signal(syscall.SIGKILL))
	_ = signet.Wait()
	assert.Eventually(t, func() bool { return !running(t, pid) }, 5*time.Second, 10*time.Millisecond,
		"check %d outlived the signet that started it", pid)
}

// TestSweep kills a signet while its check has background processes, which
// outlive it, and asserts Sweep ends them (one in the check's directory,
// one that left it) and removes the directory.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	children := filepath.Join(dir, "children")
	signet, pid := startHelperSignet(t, dir, "sleep 1000 & echo $! > "+children+".tmp; (cd / && exec sleep 1000) & echo $! >> "+children+".tmp; mv "+children+".tmp "+children)
	require.NoError(t, signet.Process.Signal(syscall.SIGKILL))
	_ = signet.Wait()
	b, err := os.ReadFile(children)
	require.NoError(t, err)
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		p, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, p)
		t.Cleanup(func() { _ = syscall.Kill(p, syscall.SIGKILL) })
	}
	require.Len(t, pids, 2)
	require.Eventually(t, func() bool { return !running(t, pid) }, 5*time.Second, 10*time.Millisecond)
	for _, p := range pids {
		require.True(t, running(t, p), "background child %d died with signet: nothing left to sweep", p)
	}
	stale, err := filepath.Glob(filepath.Join(dir, "signet-check-*"))
	require.NoError(t, err)
	require.Len(t, stale, 1)

	killed, err := Sweep(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, pids, killed)
	for _, p := range pids {
		assert.False(t, running(t, p))
	}
	assert.NoDirExists(t, stale[0])

	killed, err = Sweep(dir)
	require.NoError(t, err)
	assert.Empty(t, killed)
}
