package reconciler_test

import (
	"path"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

const standingRef = "StandingCertification/"

// clock is the real clock moved forward by the test (Options.Now, which
// also dates the evidence commits): deadlines still pass in real time
// while days pass between reconcile passes.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// firing reads and verifies the firing record of run.
func (e *env) firing(run string) evidence.Firing {
	e.t.Helper()
	ev := e.evidence()
	dir := ev.RunDir(cluster, run)
	require.NotEmpty(e.t, dir, "run %s is not on the evidence branch", run)
	var fr evidence.Firing
	ev.Document(path.Join(dir, evidence.FiringFile), evidence.PredicateFiring, &fr)
	return fr
}

// standingStatus is the standing status of name after the last pass.
func standingStatus(t *testing.T, r *reconciler.Reconciler, name string) *reconciler.StandingStatus {
	t.Helper()
	o := object(t, r, specs.KindStanding, name)
	require.NotNil(t, o.Standing, "%s has no standing status: %v", name, o.Conditions)
	return o.Standing
}

// TestStandingLocalDaily: a daily standing certification of this machine
// (the local backend's one node, budget 1), approved once. The first pass
// fires run daily-1 (the node was never certified: joined) before
// anything is admitted, and the run passes; a pass an hour later fires
// nothing and says when the node is due; a pass a day later fires daily-2
// for the schedule, naming daily-1. A reconciler restarted on the same
// branch fires nothing twice. The audit of the branch is clean.
func TestStandingLocalDaily(t *testing.T) {
	e := newEnv(t)
	clk := &clock{}
	e.now = clk.Now
	e.repo.AddProfile("smoke", "", testenv.Check{Name: "smoke", Script: "result Pass; exit 0"})
	e.repo.AddStanding("daily", "smoke", "nodes: [localhost]", "nodesPerRun: 1", "every: 24h", "budget: {maxNodes: 1}")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"smoke", standingRef+"daily")

	r, stop := e.buildStoppable(e.config())
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st := standingStatus(t, r, "daily")
	require.Equal(t, []string{"daily-1"}, st.Fired, "%+v", st)
	assert.Equal(t, specs.VerdictPass, e.wait(r, "daily-1").Verdict)
	assert.Empty(t, res.Admitted, "a firing is not a request's admission")

	fr := e.firing("daily-1")
	assert.Equal(t, int64(1), fr.Sequence)
	require.Len(t, fr.Chosen, 1)
	assert.Equal(t, e.host, fr.Chosen[0].Node)
	assert.Equal(t, evidence.DueJoined, fr.Chosen[0].Reason.Kind)
	assert.Empty(t, fr.InUse)
	docs := e.readRun("daily-1")
	assert.Equal(t, []string{e.host}, docs.receipt.Released)

	clk.Advance(time.Hour)
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st = standingStatus(t, r, "daily")
	assert.Empty(t, st.Fired, "an hour after a pass the node is not due")
	assert.Equal(t, 1, st.Certified)
	assert.Equal(t, docs.evidence.EndedAt.Add(24*time.Hour).UTC(), st.Next.UTC(), "due a day after the run ended")

	clk.Advance(24 * time.Hour)
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st = standingStatus(t, r, "daily")
	require.Equal(t, []string{"daily-2"}, st.Fired, "%+v", st)
	assert.Equal(t, specs.VerdictPass, e.wait(r, "daily-2").Verdict)
	fr = e.firing("daily-2")
	require.Len(t, fr.Chosen, 1)
	assert.Equal(t, evidence.DueSchedule, fr.Chosen[0].Reason.Kind)
	assert.Equal(t, "daily-1", fr.Chosen[0].Reason.Run)
	stop()

	// A restart on the same branch knows both firings and fires nothing.
	r2 := e.build(e.config())
	_, err = r2.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st = standingStatus(t, r2, "daily")
	assert.Empty(t, st.Fired, "a restarted reconciler fired again")
	assert.Equal(t, "daily-2", st.LastFiring)
	e.audit()
}
