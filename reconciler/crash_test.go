package reconciler_test

import (
	"errors"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/specs"
)

// crashChecks are the checks of the crash matrix: each lives long enough
// for the during-check point (200 ms into a running check) to fire.
var crashChecks = []testenv.Check{
	{Name: "first", Script: "sleep 0.5; result Pass; exit 0"},
	{Name: "second", Script: "sleep 0.5; result Pass; exit 0"},
	{Name: "third", Script: "result Pass; exit 0"},
}

// signetRun runs `signet run` for request as a separate process with
// extraEnv and returns its exit error (nil on exit 0) and output.
func (e *env) signetRun(request string, extraEnv ...string) (*exec.ExitError, string) {
	e.t.Helper()
	cmd := exec.CommandContext(e.t.Context(), testenv.Signet(e.t), "run", "--repo", e.repo.Dir, "--branch", "main",
		"--request", request, "--trust", e.keys.TrustFile, "--key", e.keys.ReconcilerFile,
		"--cluster", cluster, "--state-dir", e.state, "--timeout", "90s", "-v")
	cmd.Env = append(cmd.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil, string(out)
	}
	var ee *exec.ExitError
	require.ErrorAs(e.t, err, &ee, "signet run: %s", out)
	return ee, string(out)
}

// TestCrashMatrix kills `signet run` at every crash point of the lifecycle
// (SIGNET_CRASH_AT), runs it again, and proves: one receipt and one chain
// link for the run, no check executed twice, a check interrupted after
// its intent recorded as Error and never re-run, every check with intent
// and evidence, and a clean `signet audit`.
func TestCrashMatrix(t *testing.T) {
	for _, point := range crash.Points {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			e.repo.AddProfile("crashy", "", crashChecks...)
			e.repo.AddRequest("crash-1", "crashy")
			e.repo.Commit("crashy")
			e.repo.Approve(e.keys.ApproverFile, "", "CertificationProfile/crashy", "CertificationRequest/crash-1")

			ee, out := e.signetRun("crash-1", crash.EnvVar+"="+point)
			require.NotNil(t, ee, "signet run was not killed at %s:\n%s", point, out)
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "signet run was not killed at %s (%v):\n%s", point, ee, out)

			ee, out = e.signetRun("crash-1")
			if ee != nil {
				// 10 Fail, 11 Error, 12 Inconclusive are verdicts
				// (signet help exit-codes).
				require.Contains(t, []int{10, 11, 12}, ee.ExitCode(), "restart did not reach a verdict:\n%s", out)
			}

			ev := e.evidence()
			files := ev.Files()
			assert.Equal(t, 1, countSuffix(files, "/"+evidence.ReceiptFile), "receipts")
			assert.Equal(t, 1, countPrefix(files, "chain/"+cluster+"/"), "chain links")
			docs := e.readRun("crash-1")
			assert.Equal(t, int64(1), docs.receipt.Sequence)
			effects := map[string]int{}
			for _, line := range e.repo.Effects() {
				effects[line]++
			}
			for _, c := range crashChecks {
				assert.LessOrEqual(t, effects["crash-1/"+c.Name], 1, "check %s executed more than once", c.Name)
				_, hasIntent := docs.intents[c.Name]
				ce, hasEvidence := docs.checks[c.Name]
				assert.True(t, hasIntent && hasEvidence, "check %s: intent %v, evidence %v", c.Name, hasIntent, hasEvidence)
				if effects["crash-1/"+c.Name] == 0 || ce.Verdict != specs.VerdictPass {
					// Never finished before the crash: recorded, not re-run.
					assert.Equal(t, specs.VerdictError, ce.Verdict, "check %s", c.Name)
					assert.Contains(t, ce.Reason, "interrupted", "check %s", c.Name)
				}
			}
			switch point {
			case "after-intent", "during-check":
				assert.Equal(t, specs.VerdictError, docs.checks["first"].Verdict)
				assert.Contains(t, docs.checks["first"].Reason, "interrupted")
				assert.Equal(t, specs.VerdictError, docs.evidence.Verdict)
			default:
				assert.Equal(t, specs.VerdictPass, docs.evidence.Verdict)
				for _, c := range crashChecks {
					assert.Equal(t, 1, effects["crash-1/"+c.Name], "check %s", c.Name)
				}
			}
			for _, f := range []string{evidence.EvidenceFile, evidence.ReceiptFile, evidence.AdmissionFile} {
				assert.Contains(t, files, path.Join(docs.dir, f))
			}

			audit := exec.CommandContext(t.Context(), testenv.Signet(t), "audit", "--repo", e.repo.Dir, "--trust", e.keys.TrustFile)
			aout, err := audit.CombinedOutput()
			var aee *exec.ExitError
			if errors.As(err, &aee) && aee.ExitCode() == 2 {
				require.NoError(t, err, "signet audit could not read the branch:\n%s", aout)
			}
			assert.NoError(t, err, "signet audit:\n%s", aout)
		})
	}
}

func countSuffix(files []string, suffix string) int {
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, suffix) {
			n++
		}
	}
	return n
}

func countPrefix(files []string, prefix string) int {
	n := 0
	for _, f := range files {
		if strings.HasPrefix(f, prefix) {
			n++
		}
	}
	return n
}
