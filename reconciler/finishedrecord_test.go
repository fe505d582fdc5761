package reconciler_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestRestartReadsFinishedRunsFromRecord: a restarted reconciler takes
// the finished runs that retain nothing from the record in its state
// directory and reads from the evidence branch only the others: a run
// that retains its node, and the runs finished after the record it finds
// was written (a crash lost the last one). A record changed on disk is
// not used: every run is read again, and the certification sweep answers
// what the branch says, not what the changed record says (recovery logs
// its progress reading them); nor is a whole
// record naming a run the branch's index lacks.
func TestRestartReadsFinishedRunsFromRecord(t *testing.T) {
	e := newEnv(t)
	e.passAndFailProfiles("a-pass")
	r0, stop := e.buildStoppable(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{}, r0.Recovered())
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r0)["a-pass"].Verdict)
	stop()
	record := filepath.Join(e.state, reconciler.FinishedRecordFile)
	saved, err := os.ReadFile(record)
	require.NoError(t, err, "a reconciler that stops writes the record of its finished runs")
	require.Equal(t, os.FileMode(0o600), fileMode(t, record))

	r1, stop := e.buildStoppable(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Recorded: 1}, r1.Recovered(), "the recorded run is not read again")
	assert.True(t, r1.Vouched("a-pass", e.host, "passing"), "a recorded run vouches for its node's certification")
	e.repo.AddRequest("c-pass", "passing")
	e.repo.Commit("second")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"c-pass")
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r1)["c-pass"].Verdict)
	e.repo.AddRequest("b-fail", "failing")
	e.repo.Commit("third")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"b-fail")
	require.Equal(t, specs.VerdictFail, e.reconcileAndWait(r1)["b-fail"].Verdict)
	stop()

	r2, stop := e.buildStoppable(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Recorded: 2, Read: 1}, r2.Recovered(),
		"a-pass and c-pass come from the record; b-fail retains its node and is read from the branch")
	assert.Equal(t, "b-fail", r2.Status().Holds[e.host], "the retained node is held")
	stop()

	// A crash lost the last record: the runs finished since the one
	// found are read from the branch.
	require.NoError(t, os.WriteFile(record, saved, 0o600))
	r3, stop := e.buildStoppable(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Recorded: 1, Read: 2}, r3.Recovered())
	assert.True(t, r3.Vouched("c-pass", e.host, "passing"))
	stop()

	// A record changed on disk (a-pass's profile, the first run in it)
	// is not used.
	b, err := os.ReadFile(record)
	require.NoError(t, err)
	changed := bytes.Replace(b, []byte(`"profile":"passing"`), []byte(`"profile":"failing"`), 1)
	require.NotEqual(t, b, changed)
	require.NoError(t, os.WriteFile(record, changed, 0o600))
	defer reconciler.SetRecoverProgressEvery(0)()
	var log syncbuf.Buffer
	r4, stop := e.buildStoppableWith(e.config(), reconciler.Options{Now: e.now}, &log)
	assert.Equal(t, reconciler.RecoveryCounts{Read: 3}, r4.Recovered(), "a changed record was used")
	assert.Contains(t, log.String(), `msg="recovering runs" cluster=acceptance indexed=3 recorded=0 toRead=3`)
	assert.Contains(t, log.String(), `msg="recovering runs" read=2 of=3`, "recovery's progress")
	assert.False(t, r4.Vouched("a-pass", e.host, "failing"), "the changed record's word was taken")
	assert.True(t, r4.Vouched("a-pass", e.host, "passing"))
	assert.Equal(t, "b-fail", r4.Status().Holds[e.host])
	stop()

	// A whole record (its trailer's hash recomputed) giving a run a
	// verdict no run can have is not used: a request's condition is read
	// from it.
	require.NoError(t, os.WriteFile(record, rehashed(t, saved, `"verdict":"Pass"`, `"verdict":"Passed"`), 0o600))
	r45, stop := e.buildStoppable(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Read: 3}, r45.Recovered(), "a record with an unknown verdict was used")
	stop()

	// A whole record (its trailer's hash recomputed) naming a run the
	// branch's index lacks is not used.
	ghost := fmt.Sprintf(`{"run":"ghost","dir":%q,"profile":"passing","released":[%q],"request":"sha256:%064x","verdict":"Pass"}`, evidence.RunDir(cluster, "ghost", time.Now()), e.host, 1)
	require.NoError(t, os.WriteFile(record, withEntry(t, saved, ghost), 0o600))
	r5 := e.build(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Read: 3}, r5.Recovered(), "a record naming a run not on the branch was used")
	assert.False(t, r5.Vouched("ghost", e.host, "passing"), "a run not on the branch vouches for a certification")
}

// withEntry returns record (header, entries, trailer) with the entry line
// added last, its header's count and its trailer's hash made to match.
func withEntry(t *testing.T, record []byte, entry string) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(record), "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	var hdr map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &hdr))
	hdr["runs"] = hdr["runs"].(float64) + 1
	h, err := json.Marshal(hdr)
	require.NoError(t, err)
	body := string(h) + "\n" + strings.Join(lines[1:len(lines)-1], "\n")
	if len(lines) > 2 {
		body += "\n"
	}
	body += entry + "\n"
	sum := sha256.Sum256([]byte(body))
	return []byte(body + `{"sha256":"` + hex.EncodeToString(sum[:]) + `"}` + "\n")
}

// rehashed returns record with old replaced by new once, its trailer's
// hash made to match.
func rehashed(t *testing.T, record []byte, old, new string) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(record), "\n"), "\n")
	body := strings.Join(lines[:len(lines)-1], "\n") + "\n"
	changed := strings.Replace(body, old, new, 1)
	require.NotEqual(t, body, changed, "%s is not in the record", old)
	sum := sha256.Sum256([]byte(changed))
	return []byte(changed + `{"sha256":"` + hex.EncodeToString(sum[:]) + `"}` + "\n")
}

// TestRecordOfAnotherHistoryNotUsed performs the rewrite a record must
// not survive: run x passed on one history of the evidence branch, which
// was then rewound (its state directory's evidence mirror lost, the
// rewound tip accepted as current) and x run again and failed. A record
// taken on the first history (it vouches for x's node) is refused, its
// tip not being an ancestor of the branch, so x is read from the branch:
// no certification vouched, its node retained.
func TestRecordOfAnotherHistoryNotUsed(t *testing.T) {
	e := newEnv(t)
	e.passAndFailProfiles("warmup")
	r0, stop := e.buildStoppable(e.config())
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r0)["warmup"].Verdict)
	rewound := e.evidenceTip("")
	e.repo.AddRequest("x", "passing")
	e.repo.Commit("x passes")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"x")
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r0)["x"].Verdict)
	stop()
	record := filepath.Join(e.state, reconciler.FinishedRecordFile)
	first, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Contains(t, string(first), `"run":"x"`)

	gittest.Git(t, e.repo.Dir, "update-ref", "refs/heads/"+evidence.DefaultBranch, rewound)
	require.NoError(t, os.RemoveAll(filepath.Join(e.state, "evidence")))
	e.repo.AddRequest("x", "failing")
	e.repo.Commit("x fails")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"x")
	r1, stop := e.buildStoppableWith(e.config(), reconciler.Options{AcceptCurrentTip: true}, nil)
	require.Equal(t, specs.VerdictFail, e.reconcileAndWait(r1)["x"].Verdict)
	stop()

	require.NoError(t, os.WriteFile(record, first, 0o600))
	var log syncbuf.Buffer
	r2, _ := e.buildStoppableWith(e.config(), reconciler.Options{}, &log)
	assert.Equal(t, reconciler.RecoveryCounts{Read: 2}, r2.Recovered(), "a record of another history was used")
	assert.False(t, r2.Vouched("x", e.host, "passing"), "the other history's passing x vouches here")
	assert.Equal(t, "x", r2.Status().Holds[e.host], "x's node is not retained")
	assert.Contains(t, log.String(), "does not descend from", "the refusal says why")
}

// passAndFailProfiles commits and approves profiles "passing" and
// "failing" (one check each) and request first of "passing".
func (e *env) passAndFailProfiles(first string) {
	e.repo.AddProfile("failing", "", testenv.Check{Name: "fails", Script: "result Fail; exit 1"})
	e.repo.AddProfile("passing", "", testenv.Check{Name: "passes", Script: "result Pass; exit 0"})
	e.repo.AddRequest(first, "passing")
	e.repo.Commit("first")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"failing", profileRef+"passing", requestRef+first)
}

func fileMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// TestRestartKeepsStandingHistoryInRecord: the standing pool's history of
// finished runs (each node's latest run of the profile) goes into the
// record once folded, so the first standing pass after a restart reads
// no finished run again and still knows the node is certified: it fires
// nothing and says when the node is due.
func TestRestartKeepsStandingHistoryInRecord(t *testing.T) {
	e := newEnv(t)
	clk := &clock{}
	e.now = clk.Now
	e.dailySmoke()
	r0, stop := e.buildStoppable(e.config())
	_, err := r0.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"daily-1"}, standingStatus(t, r0, "daily").Fired)
	require.Equal(t, specs.VerdictPass, e.wait(r0, "daily-1").Verdict)
	stop()
	due := e.readRun("daily-1").evidence.EndedAt.Add(24 * time.Hour).UTC()

	// The first pass after a restart folds daily-1 into the pool's
	// history, reading it once; the record written at the stop keeps it.
	clk.Advance(time.Hour)
	r1, stop := e.buildStoppable(e.config())
	_, err = r1.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(1), r1.FoldReads())
	stop()

	clk.Advance(time.Hour)
	r2 := e.build(e.config())
	assert.Equal(t, reconciler.RecoveryCounts{Recorded: 1}, r2.Recovered())
	_, err = r2.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Zero(t, r2.FoldReads(), "the standing pass read the finished run again")
	st := standingStatus(t, r2, "daily")
	assert.Empty(t, st.Fired, "the restarted reconciler forgot the node's latest run and fired")
	assert.Equal(t, 1, st.Certified)
	assert.Equal(t, due, st.Next.UTC(), "due a day after the recorded run ended")
}
