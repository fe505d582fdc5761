package reconciler_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/specs"
)

// TestOnFailureStop: after a failed check, a profile with onFailure: stop
// skips the rest, and the run still reaches its evidence and receipt
// (Fail, node retained) without running the skipped check.
func TestOnFailureStop(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("stops", "stop",
		testenv.Check{Name: "fails", Script: "result Fail; exit 1"},
		testenv.Check{Name: "never", Script: "result Pass; exit 0"})
	e.repo.AddRequest("stops-1", "stops")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"stops", requestRef+"stops-1")

	r := e.build(e.config())
	runs := e.reconcileAndWait(r)
	require.Contains(t, runs, "stops-1")
	assert.Equal(t, specs.VerdictFail, runs["stops-1"].Verdict)
	docs := e.readRun("stops-1")
	require.Len(t, docs.evidence.Checks, 2)
	assert.True(t, docs.evidence.Checks[1].Skipped)
	assert.False(t, docs.evidence.Covered)
	assert.NotContains(t, docs.intents, "never", "a skipped check gets no intent")
	assert.Equal(t, []string{e.host}, docs.receipt.Retained)
	assert.Equal(t, []string{"stops-1/fails"}, e.repo.Effects())
}

// TestNodeNeverInTwoRuns: two approved requests for this machine; one
// pass admits exactly one, the other waits (NodesBusy) and is admitted by
// the pass after the first run released the node (Pass).
func TestNodeNeverInTwoRuns(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("slow", "", testenv.Check{Name: "slow", Script: "sleep 1; result Pass; exit 0"})
	e.repo.AddRequest("one", "slow")
	e.repo.AddRequest("two", "slow")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"slow", requestRef+"one", requestRef+"two")

	r := e.build(e.config())
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"one"}, res.Admitted)
	reason, msg := readyReason(object(t, r, specs.KindRequest, "two"))
	assert.Equal(t, "NodesBusy", reason, msg)
	assert.Equal(t, specs.VerdictPass, e.wait(r, "one").Verdict)

	res, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"two"}, res.Admitted, "a finished run makes the next pass act")
	assert.Equal(t, specs.VerdictPass, e.wait(r, "two").Verdict)
	docsOne, docsTwo := e.readRun("one"), e.readRun("two")
	assert.True(t, docsOne.evidence.EndedAt.Before(docsTwo.checks["slow"].StartedAt), "the runs overlapped on one node")
}
