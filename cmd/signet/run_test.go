package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestRunCommand runs `signet run` as a process for one request per
// verdict: its exit status follows the run verdict, the summary table (or
// --output json) shows every check, and progress goes to stderr. Each case
// uses its own cluster, so that a node retained by a non-passing run of
// one case does not hold the next.
func TestRunCommand(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	rows := []struct {
		name    string
		script  string
		approve bool
		json    bool
		code    int
		verdict specs.Verdict
		stdout  string
		stderr  string
	}{
		{"pass", "result Pass; exit 0", true, false, 0, specs.VerdictPass, "run pass: Pass", "[1/1] pass: running"},
		{"fail", "result Fail; exit 1", true, false, exitRunFail, specs.VerdictFail, "retained until an approved release", "[1/1] fail: Fail"},
		{"error", "exit 0", true, false, exitRunError, specs.VerdictError, "run error: Error", ""},
		{"inconclusive", "result Inconclusive; exit 2", true, true, exitRunInconclusive, specs.VerdictInconclusive, "", ""},
		{"unapproved", "result Pass; exit 0", false, false, exitNotApproved, "", "", "was not run: NotApproved"},
	}
	var objects []string
	for _, row := range rows {
		repo.AddProfile(row.name, "", testenv.Check{Name: row.name, Script: row.script})
		repo.AddRequest(row.name, row.name)
		objects = append(objects, "CertificationProfile/"+row.name)
		if row.approve {
			objects = append(objects, "CertificationRequest/"+row.name)
		}
	}
	repo.Commit("profiles")
	repo.Approve(keys.ApproverFile, "", objects...)

	// One machine's state directory: the rows write one evidence branch,
	// and a fresh state directory would not trust the tip an earlier row
	// left (ErrUnanchored).
	state := filepath.Join(t.TempDir(), "state")
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			args := []string{"run", "--repo", repo.Dir, "--request", row.name, "--trust", keys.TrustFile, "--key", keys.ReconcilerFile,
				"--cluster", row.name, "--state-dir", state}
			if row.json {
				args = append(args, "--output", "json")
			}
			code, stdout, stderr := signetExec(t, args...)
			assert.Equal(t, row.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, row.stdout)
			assert.Contains(t, stderr, row.stderr)
			if row.json {
				var st reconciler.RunStatus
				require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
				assert.Equal(t, row.verdict, st.Verdict)
				require.Len(t, st.Checks, 1)
				assert.Equal(t, row.name, st.Checks[0].Name)
			} else if row.approve {
				assert.Contains(t, stdout, "CHECK")
			}
		})
	}
	assert.Len(t, repo.Effects(), 4, "the unapproved request ran no check")
}
