package reconciler_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/specs"
)

// TestResultMatrix runs every row of DESIGN §4's verdict/exit matrix as a
// real script through the reconciler and the local backend, and reads the
// verdict back from the signed check evidence on the evidence branch.
func TestResultMatrix(t *testing.T) {
	e := newEnv(t)
	pidFile := filepath.Join(e.repo.Side, "pid")
	rows := []struct {
		check   testenv.Check
		want    specs.Verdict
		reason  string // substring of the participant's reason
		summary string // the result's summary, when a valid result is expected
	}{
		{testenv.Check{Name: "pass", Script: "result Pass; exit 0"}, specs.VerdictPass, "exit code 0 with a valid Pass result", "ok"},
		{testenv.Check{Name: "valid-fail", Script: "result Fail; exit 1"}, specs.VerdictFail, "exit code 1 with a valid Fail result", "ok"},
		{testenv.Check{Name: "valid-inconclusive", Script: "result Inconclusive; exit 2"}, specs.VerdictInconclusive, "exit code 2 with a valid Inconclusive result", "ok"},
		{testenv.Check{Name: "no-result", Script: "exit 0"}, specs.VerdictError, "exit code 0 with no result", ""},
		{testenv.Check{Name: "stale-nonce", Script: "NONCE=0123456789abcdef0123456789abcdef result Pass; exit 0"}, specs.VerdictError, "stale result: nonce", ""},
		{testenv.Check{Name: "stale-run", Script: "RUN=another-run result Pass; exit 0"}, specs.VerdictError, "stale result: run", ""},
		{testenv.Check{Name: "oversized", Script: `result Pass; head -c 5000 /dev/zero | tr '\0' ' ' >> "$SIGNET_RESULT_FILE"; exit 0`}, specs.VerdictError, "larger than 4096 bytes", ""},
		{testenv.Check{Name: "malformed", Script: `printf 'not json' > "$SIGNET_RESULT_FILE"; exit 0`}, specs.VerdictError, "exit code 0", ""},
		{testenv.Check{Name: "contradicts-exit", Script: "result Pass; exit 1"}, specs.VerdictError, "contradicts exit code 1", ""},
		{testenv.Check{Name: "other-exit", Script: "result Pass; exit 3"}, specs.VerdictError, "exit code 3 is not 0, 1 or 2", ""},
		{testenv.Check{Name: "signal", Script: "result Pass; kill -KILL $$"}, specs.VerdictError, "killed by signal SIGKILL", ""},
		{testenv.Check{Name: "deadline", Deadline: 2, Script: "result Pass; sleep 300 & echo $! > " + pidFile + "; sleep 300; exit 0"}, specs.VerdictError, "deadline exceeded", ""},
		{testenv.Check{Name: "never-started", Raw: true, Script: "#!/nonexistent/interpreter\nexit 0\n"}, specs.VerdictError, "never started", ""},
		{testenv.Check{Name: "staged", Stage: "burn-in", Script: `SUMMARY="stage=${SIGNET_STAGE_NAME-unset}" result Pass; exit 0`}, specs.VerdictPass, "valid Pass", "stage=burn-in"},
		{testenv.Check{Name: "unstaged", Script: `SUMMARY="stage=${SIGNET_STAGE_NAME-unset}" result Pass; exit 0`}, specs.VerdictPass, "valid Pass", "stage=unset"},
	}
	var checks []testenv.Check
	for _, row := range rows {
		checks = append(checks, row.check)
	}
	e.repo.AddProfile("matrix", "", checks...)
	e.repo.AddRequest("matrix-1", "matrix")
	e.repo.Commit("matrix")
	e.repo.Approve(e.keys.ApproverFile, "", "CertificationProfile/matrix", "CertificationRequest/matrix-1")

	r := e.build(e.config())
	start := time.Now()
	runs := e.reconcileAndWait(r)
	require.Contains(t, runs, "matrix-1")
	elapsed := time.Since(start)
	t.Logf("run took %s", elapsed)
	docs := e.readRun("matrix-1")

	for _, row := range rows {
		t.Run(row.check.Name, func(t *testing.T) {
			ce, ok := docs.checks[row.check.Name]
			require.True(t, ok, "no check evidence for %s", row.check.Name)
			assert.Equal(t, row.want, ce.Verdict)
			require.Len(t, ce.Participants, 1)
			p := ce.Participants[0]
			assert.Equal(t, e.host, p.Node)
			assert.Equal(t, row.want, p.Verdict)
			assert.Contains(t, p.Reason, row.reason)
			if row.summary != "" {
				require.NotNil(t, p.Result)
				assert.Equal(t, row.summary, p.Result.Summary)
			}
			if row.check.Name != "never-started" {
				assert.True(t, strings.HasPrefix(p.Identity.Workload, "pid:"), "workload identity %q", p.Identity.Workload)
			}
			_, ok = docs.intents[row.check.Name]
			assert.True(t, ok, "no intent for %s", row.check.Name)
		})
	}

	t.Run("deadline leaves no process of the group alive", func(t *testing.T) {
		b, err := os.ReadFile(pidFile)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		assert.False(t, alive(t, pid), "background process %d of the overrun check is still alive", pid)
		// Deadline 2 s plus a 1 s grace: the run must not wait for sleep 300.
		assert.Less(t, elapsed, 60*time.Second)
	})
	t.Run("run verdict is Fail and the node is retained", func(t *testing.T) {
		assert.Equal(t, specs.VerdictFail, docs.evidence.Verdict)
		assert.Equal(t, specs.VerdictFail, docs.receipt.Verdict)
		require.Len(t, docs.evidence.Nodes, 1)
		assert.Equal(t, specs.VerdictFail, docs.evidence.Nodes[0].Verdict)
		assert.Equal(t, []string{e.host}, docs.receipt.Retained)
		assert.Empty(t, docs.receipt.Released)
		assert.Equal(t, "matrix-1", r.Status().Holds[e.host])
		assert.Equal(t, specs.VerdictFail, runs["matrix-1"].Verdict)
	})
	t.Run("audit", func(t *testing.T) { e.audit() })
	t.Run("every check ran exactly once", func(t *testing.T) {
		assert.Len(t, e.repo.Effects(), len(rows)-1, "every check but never-started")
	})
}

// alive reports whether pid is a process that has not terminated (a
// zombie left for a PID 1 that does not reap counts as terminated).
func alive(t *testing.T, pid int) bool {
	t.Helper()
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	require.NoError(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0] != "Z" && f[0] != "X"
}
