package kube

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// execFixture writes script into a directory standing for the ConfigMap
// volume and returns options for Exec with a fresh termination log.
func execFixture(t *testing.T, script string) (ExecOptions, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "check.sh")
	require.NoError(t, os.WriteFile(p, []byte(script), 0o444))
	var stdout, stderr bytes.Buffer
	return ExecOptions{
		Script:         p,
		Digest:         string(specs.DigestOf([]byte(script))),
		TerminationLog: filepath.Join(dir, "termination-log"),
		WorkDir:        t.TempDir(),
		Stdout:         &stdout,
		Stderr:         &stderr,
		Env:            []string{"PATH=/usr/bin:/bin", specs.EnvRunID + "=r1", specs.EnvResultFile + "=/elsewhere"},
		Signals:        make(chan os.Signal),
	}, &stdout, &stderr
}

func readLog(t *testing.T, o ExecOptions) string {
	t.Helper()
	b, err := os.ReadFile(o.TerminationLog)
	require.NoError(t, err)
	return string(b)
}

const passResult = `{"run":"r1","check":"c","nonce":"n","verdict":"Pass","summary":"ok"}`

func TestExec(t *testing.T) {
	tests := []struct {
		name   string
		script string
		code   int
		// log is the termination log's exact content, or its prefix when
		// prefix is set.
		log    string
		prefix bool
		stdout string
	}{
		{
			name:   "pass",
			script: "#!/bin/sh\necho running as $SIGNET_RUN_ID\nprintf '%s' '" + passResult + "' > \"$SIGNET_RESULT_FILE\"\nexit 0\n",
			code:   0, log: passResult, stdout: "running as r1\n",
		},
		{
			name:   "fail exits 1 with its result",
			script: "#!/bin/sh\nprintf '%s' '" + strings.Replace(passResult, "Pass", "Fail", 1) + "' > \"$SIGNET_RESULT_FILE\"\nexit 1\n",
			code:   1, log: strings.Replace(passResult, "Pass", "Fail", 1),
		},
		{
			name:   "result file is where SIGNET_RESULT_FILE says, not the inherited value",
			script: "#!/bin/sh\ncase \"$SIGNET_RESULT_FILE\" in /elsewhere) exit 9;; esac\nprintf x > \"$SIGNET_RESULT_FILE\"\n",
			code:   0, log: "x",
		},
		{
			name:   "no result",
			script: "#!/bin/sh\nexit 0\n",
			code:   0, log: RefusalPrefix + "no result: the check wrote no result file\n",
		},
		{
			name:   "empty result",
			script: "#!/bin/sh\n: > \"$SIGNET_RESULT_FILE\"\n",
			code:   0, log: RefusalPrefix + "no result: the result file is empty\n",
		},
		{
			name:   "oversized result",
			script: "#!/bin/sh\nhead -c 4097 /dev/zero | tr '\\0' x > \"$SIGNET_RESULT_FILE\"\nexit 0\n",
			code:   0, log: RefusalPrefix + "no result: the result file is larger than 4096 bytes\n",
		},
		{
			name:   "result of exactly 4096 bytes is kept",
			script: "#!/bin/sh\nhead -c 4096 /dev/zero | tr '\\0' x > \"$SIGNET_RESULT_FILE\"\n",
			code:   0, log: strings.Repeat("x", 4096),
		},
		{
			name:   "symlinked result is not followed",
			script: "#!/bin/sh\necho secret > secret\nln -s \"$PWD/secret\" \"$SIGNET_RESULT_FILE\"\n",
			code:   0, log: RefusalPrefix + "no result: the result file is a symlink\n",
		},
		{
			name:   "fifo result does not block",
			script: "#!/bin/sh\nmkfifo \"$SIGNET_RESULT_FILE\"\n",
			code:   0, log: RefusalPrefix + "no result: the result file is not a regular file", prefix: true,
		},
		{
			name:   "exit code passes through",
			script: "#!/bin/sh\nexit 42\n",
			code:   42, log: RefusalPrefix, prefix: true,
		},
		{
			name:   "killed by a signal is 128+n",
			script: "#!/bin/sh\nkill -KILL $$\n",
			code:   128 + 9, log: RefusalPrefix, prefix: true,
		},
		{
			name:   "no interpreter line",
			script: "echo hi\n",
			code:   ExitExecFailed, log: RefusalPrefix + "start check.sh:", prefix: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, stdout, _ := execFixture(t, tt.script)
			code := Exec(t.Context(), o)
			assert.Equal(t, tt.code, code)
			got := readLog(t, o)
			if tt.prefix {
				assert.True(t, strings.HasPrefix(got, tt.log), "termination log %q, want prefix %q", got, tt.log)
			} else {
				assert.Equal(t, tt.log, got)
			}
			if tt.stdout != "" {
				assert.Equal(t, tt.stdout, stdout.String())
			}
			left, err := os.ReadDir(o.WorkDir)
			require.NoError(t, err)
			assert.Empty(t, left, "the private directory is removed")
		})
	}
}

// TestExecDigestMismatch: a script whose bytes do not match the digest is
// never run; the termination log and stderr say why; exit 3.
func TestExecDigestMismatch(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\ntouch " + marker + "\nprintf '%s' '" + passResult + "' > \"$SIGNET_RESULT_FILE\"\n"
	o, stdout, stderr := execFixture(t, script)
	o.Digest = string(specs.DigestOf([]byte(script + "# tampered\n")))

	code := Exec(t.Context(), o)
	assert.Equal(t, ExitExecFailed, code)
	assert.NoFileExists(t, marker, "the script never ran")
	log := readLog(t, o)
	assert.True(t, strings.HasPrefix(log, RefusalPrefix), log)
	assert.Contains(t, log, "does not match the expected "+o.Digest)
	assert.Contains(t, stderr.String(), "does not match")
	assert.Empty(t, stdout.String())

	t.Run("malformed digest", func(t *testing.T) {
		o, _, _ := execFixture(t, script)
		o.Digest = strings.ToUpper(o.Digest)
		assert.Equal(t, ExitExecFailed, Exec(t.Context(), o))
		assert.NoFileExists(t, marker)
		assert.Contains(t, readLog(t, o), RefusalPrefix+"--digest:")
	})
	t.Run("missing script", func(t *testing.T) {
		o, _, _ := execFixture(t, script)
		o.Script += ".missing"
		assert.Equal(t, ExitExecFailed, Exec(t.Context(), o))
		assert.Contains(t, readLog(t, o), RefusalPrefix+"script ")
	})
}

// TestExecForwardsSIGTERM: a TERM delivered to signet exec reaches the
// script's process group, whose trap writes its result; signet exec then
// exits with the script's code.
func TestExecForwardsSIGTERM(t *testing.T) {
	script := "#!/bin/sh\n" +
		"trap 'printf term > \"$SIGNET_RESULT_FILE\"; exit 7' TERM\n" +
		"echo ready > \"$READY\"\n" +
		"while :; do sleep 0.05; done\n"
	o, _, _ := execFixture(t, script)
	ready := filepath.Join(t.TempDir(), "ready")
	o.Env = append(o.Env, "READY="+ready)
	sigs := make(chan os.Signal, 1)
	o.Signals = sigs

	done := make(chan int, 1)
	go func() { done <- Exec(t.Context(), o) }()
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 20*time.Millisecond)
	sigs <- syscall.SIGTERM
	select {
	case code := <-done:
		assert.Equal(t, 7, code)
		assert.Equal(t, "term", readLog(t, o))
	case <-time.After(20 * time.Second):
		t.Fatal("signet exec did not return after SIGTERM")
	}

	t.Run("ctx done counts as SIGTERM", func(t *testing.T) {
		o, _, _ := execFixture(t, script)
		ready := filepath.Join(t.TempDir(), "ready")
		o.Env = append(o.Env, "READY="+ready)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan int, 1)
		go func() { done <- Exec(ctx, o) }()
		require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 20*time.Millisecond)
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 7, code)
		case <-time.After(20 * time.Second):
			t.Fatal("signet exec did not return after its context ended")
		}
	})
}

func TestInstall(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "signet")
	require.NoError(t, Install(dst))
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o555), fi.Mode().Perm())
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the copy is the running binary")
}
