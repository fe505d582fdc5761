package reconciler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
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

// dailySmoke commits and approves profile "smoke" (one passing check) and
// standing certification "daily" of this machine: every 24h, one node a
// run, a budget of one node.
func (e *env) dailySmoke() {
	e.repo.AddProfile("smoke", "", testenv.Check{Name: "smoke", Script: "result Pass; exit 0"})
	e.repo.AddStanding("daily", "smoke", "nodes: [localhost]", "nodesPerRun: 1", "every: 24h", "budget: {maxNodes: 1}")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"smoke", standingRef+"daily")
}

// TestStandingLocalDaily: a daily standing certification of this machine
// (the local backend's one node, budget 1), approved once. The first pass
// fires run daily-1 (the node was never certified: joined) before
// anything is admitted, and the run passes; a pass an hour later fires
// nothing and says when the node is due; a pass a day later fires daily-2
// for the schedule, naming daily-1. A reconciler restarted on the same
// branch fires nothing twice; after five days down it fires once; once
// the approval is revoked nothing fires. The audit of the branch is clean.
func TestStandingLocalDaily(t *testing.T) {
	e := newEnv(t)
	clk := &clock{}
	e.now = clk.Now
	e.dailySmoke()

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

	// Down for five days: the missed days fire once, not once per day.
	clk.Advance(5 * 24 * time.Hour)
	_, err = r2.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"daily-3"}, standingStatus(t, r2, "daily").Fired)
	assert.Equal(t, specs.VerdictPass, e.wait(r2, "daily-3").Verdict)
	_, err = r2.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Empty(t, standingStatus(t, r2, "daily").Fired, "a missed schedule fired more than once")

	// The approval is revoked (removed by a reviewed change): a day later
	// the node is due and nothing fires.
	approvals, err := filepath.Glob(filepath.Join(e.repo.Dir, ".signet", "approvals", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, approvals)
	for _, a := range approvals {
		require.NoError(t, os.Remove(a))
	}
	e.repo.Commit("revoke the approvals")
	clk.Advance(25 * time.Hour)
	_, err = r2.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, msg := readyReason(object(t, r2, specs.KindStanding, "daily"))
	assert.Equal(t, "NotApproved", reason, msg)
	assert.Equal(t, 3, countSuffix(e.evidence().Files(), "/"+evidence.FiringFile), "fired without an approval")
	e.audit()
}

// passProcessEnv names the reconciler configuration (JSON) with which the
// test binary, started again by a test, runs one reconcile pass as its own
// process (passProcess) instead of the tests: a crash point armed in its
// environment kills that process, not the test.
const passProcessEnv = "SIGNET_TEST_PASS_CONFIG"

// passProcess builds a reconciler from the configuration file cfgPath,
// recovers and runs one pass, waiting for the runs it starts; it returns
// the exit code.
func passProcess(cfgPath string) int {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var cfg reconciler.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	sec, err := reconciler.LoadSecrets(&cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var opts reconciler.Options
	if dir := os.Getenv(ledgerEnv); dir != "" {
		opts.Families = []*backend.Family{newLedger(dir).family()}
	}
	r, store, err := reconciler.Build(ctx, &cfg, sec, slog.New(slog.NewTextHandler(os.Stderr, nil)), nil, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer store.Close()
	if err := r.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := r.ReconcileOnce(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := r.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// runPassProcess runs passProcess for cfg with extraEnv and returns how it
// ended and what it printed.
func (e *env) runPassProcess(cfg *reconciler.Config, extraEnv ...string) (error, string) {
	e.t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(e.t, err)
	p := filepath.Join(e.t.TempDir(), "config.json")
	require.NoError(e.t, os.WriteFile(p, b, 0o600))
	cmd := exec.CommandContext(e.t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(cmd.Environ(), append([]string{passProcessEnv + "=" + p}, extraEnv...)...)
	out, err := cmd.CombinedOutput()
	return err, string(out)
}

// TestStandingCrash kills a reconciler at every crash point of a firing
// (crash.StandingPoints: after the firing record is durable, before
// anything is reserved or admitted), in a process of its own. Restarted
// on the same state and branch, the reconciler admits the recorded firing
// under its run ID with its nodes, fires nothing a second time, and keeps
// the firing's node from an approved request that asks for it meanwhile.
// A second reconciler of the cluster that was already running when the
// first died does the same. The run passes and the audit is clean.
func TestStandingCrash(t *testing.T) {
	for _, point := range crash.StandingPoints {
		setup := func(t *testing.T) *env {
			e := newEnv(t)
			e.dailySmoke()
			return e
		}
		// crashAt runs a pass in a process of its own with state dir
		// state, killed at the crash point after the firing of daily-1.
		crashAt := func(t *testing.T, e *env, state string) {
			cfg := e.config()
			cfg.StateDir = state
			err, out := e.runPassProcess(cfg, crash.EnvVar+"="+point)
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the pass was not killed at %s:\n%s", point, out)
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the pass was not killed at %s (%v):\n%s", point, ee, out)
			ev := e.evidence()
			dir := ev.RunDir(cluster, "daily-1")
			require.NotEmpty(t, dir, "the firing is not durable at %s", point)
			require.NotContains(t, ev.Files(), path.Join(dir, evidence.AdmissionFile), "admitted before the crash point")
		}
		// resumed checks that r, in its next pass, admitted daily-1 and
		// fired nothing else.
		resumed := func(t *testing.T, e *env, r *reconciler.Reconciler) {
			_, err := r.ReconcileOnce(t.Context())
			require.NoError(t, err)
			st := standingStatus(t, r, "daily")
			require.Empty(t, st.Fired, "the reconciler fired again instead of resuming the recorded firing")
			assert.Equal(t, specs.VerdictPass, e.wait(r, "daily-1").Verdict)
			fr := e.firing("daily-1")
			adm := e.admission("daily-1")
			require.NotNil(t, adm.Firing)
			require.Len(t, adm.Participants, 1)
			assert.Equal(t, fr.Nodes(), []string{adm.Participants[0].Node})
			assert.Equal(t, 1, countSuffix(e.evidence().Files(), "/"+evidence.FiringFile), "firing records")
		}
		t.Run(point+"/restart", func(t *testing.T) {
			e := setup(t)
			crashAt(t, e, e.state)
			// While the reconciler was down a request for the same node
			// was approved: the firing keeps the node it chose.
			e.repo.AddRequest("adhoc", "smoke")
			e.repo.Commit("adhoc")
			e.repo.Approve(e.keys.ApproverFile, "", requestRef+"adhoc")
			r := e.build(e.config())
			resumed(t, e, r)
			reason, msg := readyReason(object(t, r, specs.KindRequest, "adhoc"))
			assert.Equal(t, "NodesBusy", reason, "the request took the node of a recorded firing: %s", msg)
			e.audit()
		})
		t.Run(point+"/other-reconciler", func(t *testing.T) {
			e := setup(t)
			other := e.build(e.config())
			crashAt(t, e, filepath.Join(t.TempDir(), "state-2"))
			resumed(t, e, other)
			e.audit()
		})
	}
}

// admission reads and verifies the admission of run.
func (e *env) admission(run string) evidence.Admission {
	e.t.Helper()
	ev := e.evidence()
	dir := ev.RunDir(cluster, run)
	require.NotEmpty(e.t, dir, "run %s is not on the evidence branch", run)
	var adm evidence.Admission
	ev.Document(path.Join(dir, evidence.AdmissionFile), evidence.PredicateAdmission, &adm)
	return adm
}

// TestStandingLocalRelease: a firing whose check fails retains this
// machine, which counts against the budget of 1: nothing more fires.
// Listing the firing under spec.release changes nothing until the release
// of that firing (StandingCertification/daily#release:daily-1) is
// approved; then the pass records the release, the node is free and due
// at once (its latest run failed), and daily-2 certifies it. The audit of
// the branch, release included, is clean.
func TestStandingLocalRelease(t *testing.T) {
	e := newEnv(t)
	e.repo.AddProfile("flaky", "", testenv.Check{Name: "flaky", Script: `if [ "$SIGNET_RUN_ID" = daily-1 ]; then result Fail; exit 1; fi; result Pass; exit 0`})
	spec := []string{"nodes: [localhost]", "nodesPerRun: 1", "every: 24h", "budget: {maxNodes: 1}"}
	e.repo.AddStanding("daily", "flaky", spec...)
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"flaky", standingRef+"daily")
	r := e.build(e.config())

	_, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, specs.VerdictFail, e.wait(r, "daily-1").Verdict)
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st := standingStatus(t, r, "daily")
	require.Empty(t, st.Fired)
	assert.Equal(t, 1, st.InUse, "the retained node counts against the budget")
	assert.Equal(t, 1, st.Failed)

	e.repo.AddStanding("daily", "flaky", append(spec, "release: [daily-1]")...)
	e.repo.Commit("release daily-1")
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st = standingStatus(t, r, "daily")
	require.Empty(t, st.Fired, "released without the release's approval")
	assert.Equal(t, 1, st.InUse)
	assert.NotContains(t, e.evidence().Files(), path.Join(e.evidence().RunDir(cluster, "daily-1"), evidence.ReleaseFile))

	e.repo.Approve(e.keys.ApproverFile, "release", standingRef+"daily")
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st = standingStatus(t, r, "daily")
	require.Equal(t, []string{"daily-2"}, st.Fired, "%+v", st)
	assert.Equal(t, specs.VerdictPass, e.wait(r, "daily-2").Verdict)
	fr := e.firing("daily-2")
	require.Len(t, fr.Chosen, 1)
	assert.Equal(t, evidence.DueFailed, fr.Chosen[0].Reason.Kind)
	assert.Equal(t, "daily-1", fr.Chosen[0].Reason.Run)
	var rel evidence.Action
	e.evidence().Document(path.Join(e.evidence().RunDir(cluster, "daily-1"), evidence.ReleaseFile), evidence.PredicateRelease, &rel)
	assert.Equal(t, evidence.ObjectRef{Kind: specs.KindStanding, Name: "daily", Digest: rel.Request.Digest}, rel.Request)
	assert.Equal(t, []string{e.host}, rel.Nodes)
	e.audit()
}
