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
// check (a script writing its pid to the file named by helperEnv) in
// helperRootEnv, for tests that kill signet itself.
const (
	helperEnv     = "SIGNET_LOCAL_TEST_HELPER_PIDFILE"
	helperRootEnv = "SIGNET_LOCAL_TEST_HELPER_ROOT"
)

func TestMain(m *testing.M) {
	if pidfile := os.Getenv(helperEnv); pidfile != "" {
		_, err := Run(context.Background(), Request{
			Script:     []byte(fmt.Sprintf("#!/bin/sh\necho $$ > %s\nexec sleep 1000\n", pidfile)),
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

// TestCheckDiesWithSignet kills a signet (this test binary as a helper)
// while its check runs, and asserts the kernel killed the check.
func TestCheckDiesWithSignet(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	self, err := os.Executable()
	require.NoError(t, err)
	signet := exec.Command(self, "-test.run=^$")
	signet.Env = append(os.Environ(), helperEnv+"="+pidfile, helperRootEnv+"="+dir)
	require.NoError(t, signet.Start())
	t.Cleanup(func() { _ = signet.Process.Kill(); _ = signet.Wait() })

	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	require.True(t, running(t, pid))

	require.NoError(t, signet.Process.Signal(syscall.SIGKILL))
	_ = signet.Wait()
	assert.Eventually(t, func() bool { return !running(t, pid) }, 5*time.Second, 10*time.Millisecond,
		"check %d outlived the signet that started it", pid)
}
