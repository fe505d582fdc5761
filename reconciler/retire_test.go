package reconciler_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestFinishedRunsRetired (issue 19: memory bounded by the work in
// flight, not by history): a reconciler keeps no finished run that
// retains nothing in full, neither the runs it drove to their receipts
// nor, after a restart, those its requests name; only compact, as what
// the certification sweep, the repair of reservations, the standing pool
// and a request's condition read. /status still lists the recent ones
// with their checks, Wait reads one again in full, a later pass gives
// each request its condition without reading its run from the evidence
// branch, and an edit of a finished request is refused as before. A run
// that retains its node stays in full until an approved release.
func TestFinishedRunsRetired(t *testing.T) {
	e := newEnv(t)
	e.passAndFailProfiles("a-pass")
	e.repo.AddRequest("b-fail", "failing")
	e.repo.AddRequest("c-pass", "passing")
	e.repo.Commit("more")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"b-fail", requestRef+"c-pass")
	r0, stop := e.buildStoppable(e.config())
	// One node: the three run one after another, each admitted once the
	// one before has finished.
	verdicts := map[string]specs.Verdict{}
	for i := 0; len(verdicts) < 3 && i < 10; i++ {
		for id, st := range e.reconcileAndWait(r0) {
			verdicts[id] = st.Verdict
		}
		if _, ok := verdicts["b-fail"]; ok {
			break // retains the node: c-pass waits for an approved release
		}
	}
	require.Equal(t, specs.VerdictFail, verdicts["b-fail"])
	assert.Zero(t, r0.RunReads(), "a pass read a finished run from the branch to give its request a condition")
	for id, v := range verdicts {
		if v != specs.VerdictPass {
			continue
		}
		full, compact := r0.InFull(id)
		assert.False(t, full, "a finished run that retains nothing is retired: %s still held in full", id)
		assert.True(t, compact, "%s is not kept compact", id)
	}
	full, compact := r0.InFull("b-fail")
	assert.True(t, full, "a run that retains its node is held in full")
	assert.False(t, compact)

	st := r0.Status()
	ids := map[string]reconciler.RunStatus{}
	for _, rs := range st.Runs {
		ids[rs.ID] = rs
	}
	require.Contains(t, ids, "a-pass", "a retired run left /status")
	assert.Equal(t, specs.VerdictPass, ids["a-pass"].Verdict)
	require.Len(t, ids["a-pass"].Checks, 1, "a retired run lost its checks in /status")
	got, err := r0.Wait(t.Context(), "a-pass")
	require.NoError(t, err)
	require.Len(t, got.Checks, 1)
	full, _ = r0.InFull("a-pass")
	assert.False(t, full, "Wait's read is not kept")

	// A later pass (a new commit) gives the finished request its
	// condition without reading its run.
	e.repo.AddRequest("d-other", "passing")
	e.repo.Commit("unrelated")
	reads := r0.RunReads()
	_, err = r0.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, msg := readyReason(object(t, r0, specs.KindRequest, "a-pass"))
	assert.Equal(t, "Succeeded", reason, msg)
	assert.Equal(t, reads, r0.RunReads(), "a pass read a finished run from the branch to give its request a condition")

	// An edit of the finished request's execution fields is refused.
	e.repo.AddRequest("a-pass", "failing")
	e.repo.Commit("edit a finished request")
	_, err = r0.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, msg = readyReason(object(t, r0, specs.KindRequest, "a-pass"))
	assert.Equal(t, "EditRefused", reason, "an edit of a finished request's execution fields was not refused: %s", msg)
	stop()

	// After a restart from the record, the first pass reads none of the
	// finished runs its requests name.
	r1, stop := e.buildStoppable(e.config())
	defer stop()
	assert.Equal(t, int64(1), r1.RunReads(), "recovery reads only b-fail, which retains its node")
	_, err = r1.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(1), r1.RunReads(), "the first pass after a restart read a finished run to give its request a condition")
	reason, _ = readyReason(object(t, r1, specs.KindRequest, "a-pass"))
	assert.Equal(t, "EditRefused", reason)
	reason, _ = readyReason(object(t, r1, specs.KindRequest, "b-fail"))
	assert.Equal(t, "Failed", reason)
	full, compact = r1.InFull("a-pass")
	assert.False(t, full, "a finished run its request names is held in full after a restart")
	assert.True(t, compact)
	assert.True(t, slices.ContainsFunc(r1.Status().Runs, func(rs reconciler.RunStatus) bool { return rs.ID == "b-fail" }))
}
