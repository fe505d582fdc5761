package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// signetCmd runs signet with args and returns its stdout, stderr and exit
// status.
func signetCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), testenv.Signet(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// fields splits text output into rows of whitespace-separated cells.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// TestGet lists a working daemon's requests, runs and nodes from its
// /status, as text, json and yaml, by name, and refuses an unknown
// resource and an unreachable daemon with exit 2.
func TestGet(t *testing.T) {
	w := startWorkedDaemon(t)
	host, err := os.Hostname()
	require.NoError(t, err)

	t.Run("requests as text", func(t *testing.T) {
		out, stderr, code := signetCmd(t, "get", "requests", "--config", w.config)
		require.Equal(t, 0, code, stderr)
		rows := fields(out)
		require.Len(t, rows, 4, out)
		assert.Equal(t, []string{"NAME", "READY", "REASON", "RUN", "MESSAGE"}, rows[0])
		assert.Equal(t, []string{"a-broken", "False", "Failed", "a-broken"}, rows[1][:4])
		assert.Equal(t, []string{"b-waits", "False", "NodesBusy", "-"}, rows[2][:4])
		assert.Equal(t, []string{"c-unapproved", "False", "NotApproved", "-"}, rows[3][:4])
	})
	t.Run("one request by name", func(t *testing.T) {
		out, stderr, code := signetCmd(t, "get", "requests", "b-waits", "--addr", w.d.addr)
		require.Equal(t, 0, code, stderr)
		rows := fields(out)
		require.Len(t, rows, 2, out)
		assert.Equal(t, "b-waits", rows[1][0])
	})
	t.Run("runs as json", func(t *testing.T) {
		out, stderr, code := signetCmd(t, "get", "runs", "--config", w.config, "-o", "json")
		require.Equal(t, 0, code, stderr)
		var runs []reconciler.RunStatus
		require.NoError(t, json.Unmarshal([]byte(out), &runs), out)
		require.Len(t, runs, 1)
		assert.Equal(t, "a-broken", runs[0].ID)
		assert.Equal(t, evidence.PhaseDone, runs[0].Phase)
		assert.Equal(t, specs.VerdictFail, runs[0].Verdict)
		assert.Equal(t, []string{host}, runs[0].Retained)
	})
	t.Run("nodes as yaml", func(t *testing.T) {
		out, stderr, code := signetCmd(t, "get", "nodes", "--config", w.config, "-o", "yaml")
		require.Equal(t, 0, code, stderr)
		var nodes []NodeHold
		require.NoError(t, yaml.Unmarshal([]byte(out), &nodes), out)
		assert.Equal(t, []NodeHold{{Node: host, Run: "a-broken", State: "retained"}}, nodes)
	})
	t.Run("completion of names", func(t *testing.T) {
		out, stderr, code := runSpecsCLI(t, "__complete", "get", "requests", "--config", w.config, "b")
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, []string{"b-waits", ":4"}, strings.Fields(out)[:2])
		out, _, _ = runSpecsCLI(t, "__complete", "get", "nodes", "--addr", w.d.addr, "")
		assert.Equal(t, []string{host, ":4"}, strings.Fields(out)[:2])
	})
	t.Run("refusals", func(t *testing.T) {
		_, stderr, code := signetCmd(t, "get", "widgets", "--config", w.config)
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, stderr, `"widgets" is not requests, runs or nodes`)
		_, stderr, code = signetCmd(t, "get", "runs", "--addr", freeAddr(t))
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, stderr, "read the daemon's status at")
	})
}

// TestReconcileNowWait: `signet reconcile --now --wait` returns only once
// the pass that started after its request has ended, and prints what that
// pass did: the commit that approves a release is the revision it names,
// and when it returns the run's node is already released. A pass that
// fails (an unreadable trust policy) is printed and exits 2.
func TestReconcileNowWait(t *testing.T) {
	w := startWorkedDaemon(t)
	host, err := os.Hostname()
	require.NoError(t, err)

	w.repo.AddRequest("a-broken", "bad", "release: true")
	w.repo.Commit("release a-broken")
	rev := w.repo.Approve(w.keys.ApproverFile, "release", "CertificationRequest/a-broken")
	out, stderr, code := signetCmd(t, "reconcile", "--now", "--wait", "--config", w.config)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "► reconcile requested\n◎ waiting for pass ")
	assert.Contains(t, out, " reconciled revision "+rev[:12]+" (", "--wait printed another pass than its own")

	// No polling here: the pass --wait waited for released the node.
	out, stderr, code = signetCmd(t, "get", "runs", "a-broken", "--config", w.config, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var runs []reconciler.RunStatus
	require.NoError(t, json.Unmarshal([]byte(out), &runs), out)
	require.Len(t, runs, 1)
	assert.Equal(t, []string{host}, runs[0].Released, "--wait returned before its pass released the node")
	assert.Empty(t, runs[0].Retained)

	t.Run("json", func(t *testing.T) {
		out, stderr, code := signetCmd(t, "reconcile", "--now", "--wait", "--config", w.config, "-o", "json")
		require.Equal(t, 0, code, "%s\n%s", out, stderr)
		var ps reconciler.PassStatus
		require.NoError(t, json.Unmarshal([]byte(out), &ps), out)
		assert.Equal(t, rev, ps.Revision)
		assert.Empty(t, ps.Error)
		assert.False(t, ps.StartedAt.IsZero())
	})
	t.Run("failed pass", func(t *testing.T) {
		require.NoError(t, os.WriteFile(w.keys.TrustFile, []byte("not: a trust policy\n"), 0o600))
		out, stderr, code := signetCmd(t, "reconcile", "--now", "--wait", "--config", w.config)
		assert.Equal(t, exitUsage, code, "%s\n%s", out, stderr)
		assert.Regexp(t, `✗ pass \d+ failed after .*: trust policy: `, out)
		assert.Contains(t, stderr, "failed: trust policy: ")
	})
	t.Run("--wait without --now", func(t *testing.T) {
		_, stderr, code := signetCmd(t, "reconcile", "--wait", "--config", w.config)
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, stderr, "--wait goes with --now")
	})
}

// TestGetWatch: `signet get requests --watch` prints the list, then the
// row of a request whose state changes, and stops with exit 0 when
// interrupted.
func TestGetWatch(t *testing.T) {
	w := startWorkedDaemon(t)
	out := &syncbuf.Buffer{}
	cmd := exec.Command(testenv.Signet(t), "get", "requests", "--watch", "--interval", "100ms", "--config", w.config)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "c-unapproved") }, 30*time.Second, 50*time.Millisecond, "no list:\n%s", out.String())

	// Approving c-unapproved moves it from NotApproved to NodesBusy.
	w.repo.Approve(w.keys.ApproverFile, "", "CertificationRequest/c-unapproved")
	stdout, stderr, code := signetCmd(t, "reconcile", "--now", "--wait", "--config", w.config)
	require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
	require.Eventually(t, func() bool {
		for _, r := range fields(out.String())[4:] {
			if len(r) >= 3 && r[0] == "c-unapproved" && r[2] == "NodesBusy" {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the changed row was never printed:\n%s", out.String())
	rows := fields(out.String())
	for _, r := range rows[4:] {
		assert.NotEqual(t, "a-broken", r[0], "an unchanged row was printed again:\n%s", out.String())
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		assert.NoError(t, err, "--watch must end with exit 0 when interrupted:\n%s", out.String())
	case <-time.After(30 * time.Second):
		require.Fail(t, "--watch did not stop on SIGINT")
	}
}
