package reconciler_test

import (
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

const (
	profileRef = "CertificationProfile/"
	requestRef = "CertificationRequest/"
)

func TestUnapprovedRequestIsNotRun(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("smoke", "", testenv.Check{Name: "ok", Script: "result Pass; exit 0"})
	e.repo.AddRequest("unapproved", "smoke")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"smoke")

	r := e.build(e.config())
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, res.Admitted)
	reason, _ := readyReason(object(t, r, specs.KindRequest, "unapproved"))
	assert.Equal(t, "NotApproved", reason)
	assert.Empty(t, e.evidence().Files(), "nothing may be written for an unapproved request")
	assert.Empty(t, e.repo.Effects())
}

// TestCancelWithoutApprovalIsIgnored sets cancel: true on a running
// request without a cancel approval: the run goes on to Pass and no
// cancel document is written.
func TestCancelWithoutApprovalIsIgnored(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("slow", "", testenv.Check{Name: "slow", Script: "sleep 2; result Pass; exit 0"})
	e.repo.AddRequest("slow-1", "slow")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"slow", requestRef+"slow-1")

	r := e.build(e.config())
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"slow-1"}, res.Admitted)

	e.repo.AddRequest("slow-1", "slow", "cancel: true")
	e.repo.Commit("cancel without approval")
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, _ := readyReason(object(t, r, specs.KindRequest, "slow-1"))
	assert.Equal(t, "CancelNotApproved", reason)

	st := e.wait(r, "slow-1")
	assert.Equal(t, specs.VerdictPass, st.Verdict)
	docs := e.readRun("slow-1")
	assert.Equal(t, specs.VerdictPass, docs.evidence.Verdict)
	assert.NotContains(t, e.evidence().Files(), path.Join(docs.dir, evidence.CancelFile))
}

// TestEditAfterAdmissionIsRefused changes a running request's execution
// fields: the edit is refused (EditRefused) and the original run completes.
func TestEditAfterAdmissionIsRefused(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("slow", "", testenv.Check{Name: "slow", Script: "sleep 1; result Pass; exit 0"})
	e.repo.AddProfile("other", "", testenv.Check{Name: "other", Script: "result Fail; exit 1"})
	e.repo.AddRequest("edited", "slow")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"slow", profileRef+"other", requestRef+"edited")

	r := e.build(e.config())
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"edited"}, res.Admitted)

	// Edit the execution fields and even approve the edit: still refused.
	e.repo.AddRequest("edited", "other")
	e.repo.Commit("edit")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"edited")
	res, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, res.Admitted)
	reason, msg := readyReason(object(t, r, specs.KindRequest, "edited"))
	assert.Equal(t, "EditRefused", reason, msg)

	st := e.wait(r, "edited")
	assert.Equal(t, specs.VerdictPass, st.Verdict)
	docs := e.readRun("edited")
	assert.Equal(t, "slow", docs.evidence.Checks[0].Check)
	assert.Equal(t, []string{"edited/slow"}, e.repo.Effects(), "only the original profile's check ran")
	assert.Equal(t, 1, countSuffix(e.evidence().Files(), "/"+evidence.AdmissionFile))
	e.audit()
}

// TestApprovedCancelStopsTheRunningCheck cancels a run while its long
// check runs: the check stops within the grace period, the run records
// Canceled with cancel.json and the later check is skipped.
func TestApprovedCancelStopsTheRunningCheck(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("long", "",
		// Ignores SIGTERM (and so does its sleep): only the KILL after
		// the grace period stops it.
		testenv.Check{Name: "long", Deadline: 120, Script: "trap '' TERM; sleep 60; result Pass; exit 0"},
		testenv.Check{Name: "after", Script: "result Pass; exit 0"})
	e.repo.AddRequest("long-1", "long")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"long", requestRef+"long-1")

	cfg := e.config()
	r := e.build(cfg)
	r.Start(t.Context()) // daemon-style: polls every second
	require.Eventually(t, func() bool { return len(e.repo.Effects()) == 1 }, 30*time.Second, 50*time.Millisecond, "the long check never started")

	e.repo.AddRequest("long-1", "long", "cancel: true")
	e.repo.Commit("cancel")
	e.repo.Approve(e.keys.ApproverFile, "cancel", requestRef+"long-1")
	canceled := time.Now()
	st := e.waitFor(r, "long-1", 30*time.Second)
	stopped := time.Since(canceled)
	// Poll interval (1 s) + grace (1 s) + evidence appends: far below the
	// check's 60 s sleep.
	assert.Less(t, stopped, 20*time.Second)
	assert.Equal(t, specs.VerdictCanceled, st.Verdict)

	docs := e.readRun("long-1")
	assert.Equal(t, specs.VerdictCanceled, docs.evidence.Verdict)
	assert.True(t, docs.evidence.Canceled)
	assert.Equal(t, specs.VerdictCanceled, docs.checks["long"].Verdict)
	assert.Less(t, docs.checks["long"].EndedAt.Sub(docs.checks["long"].StartedAt), 30*time.Second)
	require.Len(t, docs.evidence.Checks, 2)
	assert.True(t, docs.evidence.Checks[1].Skipped)
	var act evidence.Action
	e.evidence().Document(path.Join(docs.dir, evidence.CancelFile), evidence.PredicateCancel, &act)
	assert.Equal(t, "cancel", act.Action)
	assert.NotEmpty(t, act.Approvals)
	// Stopped within the grace period (1 s) of the durable cancel, plus
	// scheduling slack, and by the KILL that follows it.
	ended := docs.checks["long"].EndedAt.Sub(act.At)
	assert.Less(t, ended, 3*time.Second, "the check outlived the grace period after the cancel")
	assert.Contains(t, docs.checks["long"].Reason, "SIGKILL")
	assert.Equal(t, []string{"long-1/long"}, e.repo.Effects(), "the check after the cancel never ran")
	e.audit()
}

// TestReleaseLiftsRetainedReservation: a failed run retains its node,
// also across a restart; a second request for it waits (NodesBusy);
// release: true without its own
// approval does nothing; with it, release.json is written and the waiting
// request is admitted.
func TestReleaseLiftsRetainedReservation(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("failing", "", testenv.Check{Name: "fails", Script: "result Fail; exit 1"})
	e.repo.AddProfile("passing", "", testenv.Check{Name: "passes", Script: "result Pass; exit 0"})
	e.repo.AddRequest("b-first", "failing")
	e.repo.Commit("first")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"failing", profileRef+"passing", requestRef+"b-first")

	r0, stop := e.buildStoppable(e.config())
	runs := e.reconcileAndWait(r0)
	require.Equal(t, specs.VerdictFail, runs["b-first"].Verdict)
	assert.Equal(t, []string{e.host}, runs["b-first"].Retained)
	// A restarted reconciler holds the retained node again, from the
	// evidence branch alone.
	stop()
	r, stopR := e.buildStoppable(e.config())
	assert.Equal(t, "b-first", r.Status().Holds[e.host])

	// Sorted before b-first, so it is looked at first in every pass.
	e.repo.AddRequest("a-second", "passing")
	e.repo.Commit("second")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"a-second")
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, res.Admitted)
	reason, msg := readyReason(object(t, r, specs.KindRequest, "a-second"))
	assert.Equal(t, "NodesBusy", reason, msg)
	// The message says what to do next (issue 17).
	assert.Contains(t, msg, `held by run "b-first" (retained after a non-passing verdict until an approved release: signet sign --key KEY --object CertificationRequest/b-first --action release)`)

	e.repo.AddRequest("b-first", "failing", "release: true")
	e.repo.Commit("release without approval")
	res, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, res.Admitted)
	reason, _ = readyReason(object(t, r, specs.KindRequest, "b-first"))
	assert.Equal(t, "ReleaseNotApproved", reason)
	docs := e.readRun("b-first")
	assert.NotContains(t, e.evidence().Files(), path.Join(docs.dir, evidence.ReleaseFile))

	e.repo.Approve(e.keys.ApproverFile, "release", requestRef+"b-first")
	var admitted []string
	require.Eventually(t, func() bool {
		res, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		admitted = append(admitted, res.Admitted...)
		return len(admitted) > 0
	}, 10*time.Second, 100*time.Millisecond, "the waiting request was never admitted after the release")
	assert.Equal(t, []string{"a-second"}, admitted)
	var act evidence.Action
	e.evidence().Document(path.Join(docs.dir, evidence.ReleaseFile), evidence.PredicateRelease, &act)
	assert.Equal(t, "release", act.Action)
	assert.Equal(t, []string{e.host}, act.Nodes)
	st := e.wait(r, "a-second")
	assert.Equal(t, specs.VerdictPass, st.Verdict)
	// The status says what was recorded: released, no longer retained —
	// live and, from the evidence branch alone, after a restart (issue 17).
	released := func(r *reconciler.Reconciler) {
		t.Helper()
		for _, run := range r.Status().Runs {
			if run.ID == "b-first" {
				assert.Empty(t, run.Retained)
				assert.Equal(t, []string{e.host}, run.Released)
				return
			}
		}
		t.Fatal("run b-first is not in the status")
	}
	released(r)
	stopR()
	// A restarted reconciler keeps a finished run that retains nothing
	// only in compact form (issue 19): not listed, its node not held,
	// and read again in full (Wait) it says released.
	r = e.build(e.config())
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.NotContains(t, r.Status().Holds, e.host)
	again, err := r.Wait(t.Context(), "b-first")
	require.NoError(t, err)
	assert.Empty(t, again.Retained)
	assert.Equal(t, []string{e.host}, again.Released)
	e.audit()
}

// TestRemovedKeyStopsCountingWithoutCommit removes an approver's key from
// the trust policy with no new spec commit: the next reconcile is not a
// no-op and the key's approvals no longer count.
func TestRemovedKeyStopsCountingWithoutCommit(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("failing", "", testenv.Check{Name: "fails", Script: "result Fail; exit 1"})
	e.repo.AddProfile("passing", "", testenv.Check{Name: "passes", Script: "result Pass; exit 0"})
	e.repo.AddRequest("blocker", "failing")
	e.repo.Commit("blocker")
	// The blocker is approved by the key that stays; it retains the node.
	e.repo.Approve(e.keys.Approver2File, "", profileRef+"failing", requestRef+"blocker")
	r := e.build(e.config())
	runs := e.reconcileAndWait(r)
	require.Equal(t, specs.VerdictFail, runs["blocker"].Verdict)

	e.repo.AddRequest("waiting", "passing")
	e.repo.Commit("waiting")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"passing", requestRef+"waiting")
	_, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, msg := readyReason(object(t, r, specs.KindRequest, "waiting"))
	require.Equal(t, "NodesBusy", reason, "approved, waiting for the node: %s", msg)
	reason, _ = readyReason(object(t, r, specs.KindProfile, "passing"))
	require.Equal(t, "Approved", reason)
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.True(t, res.Noop, "nothing changed: the pass is a no-op")

	e.keys.WriteTrust(t, e.keys.Approver2)
	res, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.False(t, res.Noop, "a changed trust policy is never a no-op")
	reason, _ = readyReason(object(t, r, specs.KindRequest, "waiting"))
	assert.Equal(t, "NotApproved", reason)
	reason, _ = readyReason(object(t, r, specs.KindProfile, "passing"))
	assert.Equal(t, "NotApproved", reason)
	reason, _ = readyReason(object(t, r, specs.KindProfile, "failing"))
	assert.Equal(t, "Approved", reason, "the remaining key still counts")
	assert.Equal(t, "", e.evidence().RunDir(cluster, "waiting"))
}

// TestFinishedRunDropsCheckDocuments: a finished run this reconciler
// drove that retains its node stays in memory in full until an approved
// release, so once the run evidence summarizing its checks is durable it
// drops the check documents (their log tails are the bulk of a run) and
// keeps what /status and Wait show: the verdict and each check's summary.
// (A run that retains nothing is retired: TestFinishedRunsRetired.)
func TestFinishedRunDropsCheckDocuments(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("chatty", "",
		testenv.Check{Name: "one", Script: "head -c 3000 /dev/zero | tr '\\0' x; result Pass; exit 0"},
		testenv.Check{Name: "two", Script: "head -c 3000 /dev/zero | tr '\\0' y >&2; result Fail; exit 1"})
	e.repo.AddRequest("talk", "chatty")
	e.repo.Commit("first")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"chatty", requestRef+"talk")
	r := e.build(e.config())
	st := e.reconcileAndWait(r)["talk"]
	require.Equal(t, specs.VerdictFail, st.Verdict)
	require.Equal(t, []string{e.host}, st.Retained)
	assert.Zero(t, r.CheckDocsHeld("talk"), "a finished run still holds its check documents")
	got, err := r.Wait(t.Context(), "talk")
	require.NoError(t, err)
	assert.Equal(t, specs.VerdictFail, got.Verdict)
	require.Len(t, got.Checks, 2, "the finished run lost its check summaries")
	assert.Equal(t, specs.VerdictPass, got.Checks[0].Verdict)
	assert.Equal(t, specs.VerdictFail, got.Checks[1].Verdict)
}

// TestRestartKeepsFinishedRunsCompact: a restarted reconciler keeps a
// finished run that retains nothing only in compact form, and still
// answers for it what the evidence branch says — the certification sweep
// (a label of the run's profile on a node it released holds, on another
// node or profile it does not) and, when Wait asks for it, the run in
// full with its checks (read for that call, not kept). A run that retains its node stays in full, its node held. Both
// ways a restart finds finished runs: read from the branch (a new pod,
// no record of finished runs) and from the record.
func TestRestartKeepsFinishedRunsCompact(t *testing.T) {
	e := newEnv(t)
	e.passAndFailProfiles("a-pass")
	r0, stop := e.buildStoppable(e.config())
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r0)["a-pass"].Verdict)
	e.repo.AddRequest("b-fail", "failing")
	e.repo.Commit("second")
	e.repo.Approve(e.keys.ApproverFile, "", requestRef+"b-fail")
	require.Equal(t, specs.VerdictFail, e.reconcileAndWait(r0)["b-fail"].Verdict)
	stop()

	for _, from := range []string{"branch", "record"} {
		t.Run(from, func(t *testing.T) {
			if from == "branch" {
				require.NoError(t, os.Remove(filepath.Join(e.state, reconciler.FinishedRecordFile)))
			}
			r, stop := e.buildStoppable(e.config())
			defer stop()
			if from == "branch" {
				require.Equal(t, reconciler.RecoveryCounts{Read: 2}, r.Recovered())
			} else {
				require.Equal(t, reconciler.RecoveryCounts{Recorded: 1, Read: 1}, r.Recovered())
			}
			full, compact := r.InFull("a-pass")
			assert.False(t, full, "a finished run that retains nothing is not held in full after a restart")
			assert.True(t, compact, "a finished run is kept compact after a restart")
			assert.True(t, r.Vouched("a-pass", e.host, "passing"), "the passing run vouches for its node's certification")
			assert.False(t, r.Vouched("a-pass", e.host, "failing"), "a compact run vouches only under its own profile")
			assert.False(t, r.Vouched("a-pass", "another-node", "passing"), "a compact run vouches only for the nodes it released")
			assert.False(t, r.Vouched("b-fail", e.host, "failing"), "a run that retained its node vouches for nothing")
			full, compact = r.InFull("b-fail")
			assert.True(t, full, "a run that retains its node is held in full")
			assert.False(t, compact)
			assert.Equal(t, "b-fail", r.Status().Holds[e.host], "its node is held from the evidence branch alone")

			st, err := r.Wait(t.Context(), "a-pass")
			require.NoError(t, err, "a compact run is read again in full when asked for")
			assert.Equal(t, specs.VerdictPass, st.Verdict)
			assert.Equal(t, []string{e.host}, st.Released)
			require.Len(t, st.Checks, 1, "a compact run read again lost its check summaries")
			assert.Equal(t, specs.VerdictPass, st.Checks[0].Verdict)
			full, _ = r.InFull("a-pass")
			assert.False(t, full, "a compact run read for Wait is kept in full")
		})
	}
}
