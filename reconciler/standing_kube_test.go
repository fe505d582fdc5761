package reconciler_test

import (
	"cmp"
	"fmt"
	"os/exec"
	"path"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/kube"
	"signet.dev/signet/specs"
)

// poolNodes creates n GPU nodes prefix-00 … labelled pool=prefix, so that
// their names sort in creation order.
func (w *kubeWorld) poolNodes(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		w.kube.CreateNode(t.Context(), kubetest.NodeOptions{Name: name, GPUs: 8, Labels: map[string]string{"pool": prefix}})
		names = append(names, name)
	}
	return names
}

// reboot gives node a new boot ID, as a reboot would.
func (w *kubeWorld) reboot(t *testing.T, name, bootID string) {
	t.Helper()
	n, err := w.kube.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	n.Status.NodeInfo.BootID = bootID
	_, err = w.kube.Client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// reservedBySignet returns the nodes among names that carry a reservation
// of this cluster's reconciler.
func (w *kubeWorld) reservedBySignet(t *testing.T, names []string) []string {
	t.Helper()
	var out []string
	for name, st := range w.state(t, names...) {
		if _, ok := st.Annotations[kube.ReservationAnnotation]; ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// standingPass runs one pass of r, checks that the pool never has more
// than budget nodes reserved while its firings run, waits for them and
// returns them.
func standingPass(t *testing.T, e *env, w *kubeWorld, r *reconciler.Reconciler, name string, pool []string, budget int) []string {
	t.Helper()
	_, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	st := standingStatus(t, r, name)
	held := w.reservedBySignet(t, pool)
	assert.LessOrEqual(t, len(held), budget, "the pool has more nodes reserved than the budget: %v", held)
	assert.LessOrEqual(t, st.InUse, budget, "%+v", st)
	for _, run := range st.Fired {
		e.wait(r, run)
	}
	return st.Fired
}

// standingPool: a weekly standing certification over a pool of 20
// simulated nodes with a budget of 3 nodes and one node per run, approved
// once for ten days, on the real control plane with the test agent and a
// clock the test moves. Every node is certified in name order (none was
// certified before) and no pass ever finds more than 3 pool nodes
// reserved; the node whose check fails stays reserved and counts against
// the budget until the release of its firing is approved, and is then
// certified again at once; a reboot (new boot ID) of one node fires a run
// for that node only; a week later the nodes whose certification is
// oldest go first; after the approval expired nothing fires. The audit is
// clean.
func standingPool(t *testing.T, w *kubeWorld) {
	e := newEnv(t)
	clk := &clock{}
	e.now = clk.Now
	pool := w.poolNodes(t, "sp", 20)
	script := `if [ "$SIGNET_RUN_ID" = weekly-2 ]; then SUMMARY=ecc result Fail; exit 1; fi; result Pass; exit 0`
	e.repo.AddProfileFor("burn", 1, "", gpuCheck("burn", "pod", script, 60))
	e.repo.AddStanding("weekly", "burn", "selector: {pool: sp}", "nodesPerRun: 1", "every: 168h", "triggers: [identity, joined]", "budget: {maxNodes: 3}")
	e.repo.Commit("specs")
	approveFor(t, e, "240h", profileRef+"burn", standingRef+"weekly")
	r := e.build(e.kubeConfig(w))

	// Round one: all 20 nodes, in name order, at most 3 at a time.
	var order []string
	latest := map[string]string{} // node -> the run that last certified it
	for pass := 0; len(order) < len(pool) && pass < 30; pass++ {
		for _, run := range standingPass(t, e, w, r, "weekly", pool, 3) {
			fr := e.firing(run)
			order = append(order, fr.Nodes()...)
			for _, n := range fr.Nodes() {
				latest[n] = run
			}
		}
		clk.Advance(time.Minute)
	}
	require.Equal(t, pool, order, "every node certified once, in name order")
	assert.Equal(t, []string{"sp-01"}, w.reservedBySignet(t, pool), "the failing node (weekly-2) stays reserved")
	assert.Empty(t, standingPass(t, e, w, r, "weekly", pool, 3), "every node was certified in this round")
	st := standingStatus(t, r, "weekly")
	assert.Equal(t, 19, st.Certified)
	assert.Equal(t, 1, st.Failed)
	assert.Equal(t, 1, st.InUse, "the retained node counts against the budget")

	// The node is repaired; a reviewed change lists its firing under
	// spec.release and the release of that firing is approved: the next
	// pass lifts the reservation and certifies the node again at once.
	e.repo.AddStanding("weekly", "burn", "selector: {pool: sp}", "nodesPerRun: 1", "every: 168h", "triggers: [identity, joined]", "budget: {maxNodes: 3}", "release: [weekly-2]")
	e.repo.Commit("release weekly-2")
	_, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"sp-01"}, w.reservedBySignet(t, pool), "release: [weekly-2] without its approval changes nothing")
	e.repo.Approve(e.keys.ApproverFile, "release", standingRef+"weekly")
	fired := standingPass(t, e, w, r, "weekly", pool, 3)
	require.Len(t, fired, 1)
	fr := e.firing(fired[0])
	require.Len(t, fr.Chosen, 1)
	assert.Equal(t, "sp-01", fr.Chosen[0].Node)
	latest["sp-01"] = fired[0]
	assert.Equal(t, evidence.DueFailed, fr.Chosen[0].Reason.Kind)
	assert.Equal(t, "weekly-2", fr.Chosen[0].Reason.Run)
	assert.Empty(t, fr.InUse, "the released node no longer counts")
	assert.Contains(t, e.evidence().Files(), path.Join(e.evidence().RunDir(cluster, "weekly-2"), evidence.ReleaseFile))
	assert.Empty(t, w.reservedBySignet(t, pool), "every node certified and released")

	// A reboot of one node fires a run for that node only.
	w.reboot(t, "sp-07", "rebooted-1")
	fired = standingPass(t, e, w, r, "weekly", pool, 3)
	require.Len(t, fired, 1)
	fr = e.firing(fired[0])
	require.Len(t, fr.Chosen, 1)
	assert.Equal(t, "sp-07", fr.Chosen[0].Node)
	latest["sp-07"] = fired[0]
	assert.Equal(t, evidence.DueIdentity, fr.Chosen[0].Reason.Kind)
	assert.Contains(t, fr.Chosen[0].Reason.Detail, "rebooted-1")
	assert.Empty(t, fr.InUse)
	assert.Empty(t, standingPass(t, e, w, r, "weekly", pool, 3), "nothing else is due")

	// A week later: the oldest certifications first, three at a time
	// (a pass whose firings kept losing the race to its own runs' steps
	// leaves the rest to the next pass). Oldest is by the end of each
	// node's latest run (then by name): the runs of one pass end in
	// whatever order their checks finish, not in firing order.
	ended := map[string]time.Time{}
	for n, run := range latest {
		ended[n] = e.readRun(run).evidence.EndedAt
	}
	oldest := slices.Clone(pool)
	slices.SortFunc(oldest, func(a, b string) int { return cmp.Or(ended[a].Compare(ended[b]), cmp.Compare(a, b)) })
	clk.Advance(7*24*time.Hour + time.Hour)
	fired = nil
	for pass := 0; len(fired) < 3 && pass < 5; pass++ {
		fired = append(fired, standingPass(t, e, w, r, "weekly", pool, 3)...)
	}
	require.GreaterOrEqual(t, len(fired), 3)
	fired = fired[:3]
	var next []string
	for _, run := range fired {
		c := e.firing(run).Chosen
		require.Len(t, c, 1)
		assert.Equal(t, evidence.DueSchedule, c[0].Reason.Kind)
		next = append(next, c[0].Node)
	}
	assert.Equal(t, oldest[:3], next, "the oldest certifications go first (ended: %v)", ended)

	// The approval expires ten days after it was signed: nothing fires.
	clk.Advance(3 * 24 * time.Hour)
	_, err = r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	reason, msg := readyReason(object(t, r, specs.KindStanding, "weekly"))
	assert.Equal(t, "NotApproved", reason, msg)
	assert.Contains(t, msg, "expired")
	assert.Empty(t, w.reservedBySignet(t, pool), "nothing fired after the approval expired")
	e.audit()
}

// approveFor signs objects with the approver key, expiring after d, and
// commits the approval.
func approveFor(t *testing.T, e *env, d string, objects ...string) {
	t.Helper()
	args := []string{"sign", "--repo", e.repo.Dir, "--key", e.keys.ApproverFile, "--expires", d}
	for _, o := range objects {
		args = append(args, "--object", o)
	}
	out, err := exec.Command(testenv.Signet(t), args...).CombinedOutput()
	require.NoError(t, err, "signet sign: %s", out)
	e.repo.Commit("approve with expiry")
}

// standingTwoReconcilers: two reconcilers of one cluster (each its own
// state directory) run their passes at the same time over one pool of 6
// nodes with a budget of 2: every node is fired exactly once, no firing
// sequence is taken twice, the pool never has more than 2 nodes reserved,
// and the audit is clean.
func standingTwoReconcilers(t *testing.T, w *kubeWorld) {
	e := newEnv(t)
	pool := w.poolNodes(t, "tr", 6)
	e.repo.AddProfileFor("burn", 1, "", gpuCheck("burn", "pod", "result Pass; exit 0", 60))
	e.repo.AddStanding("twice", "burn", "selector: {pool: tr}", "nodesPerRun: 1", "every: 168h", "budget: {maxNodes: 2}")
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", standingRef+"twice")
	cfg1 := e.kubeConfig(w)
	r1 := e.build(cfg1)
	cfg2 := e.kubeConfig(w)
	cfg2.StateDir = t.TempDir()
	r2 := e.build(cfg2)

	fired := map[string]*reconciler.Reconciler{}
	for pass := 0; len(fired) < len(pool) && pass < 20; pass++ {
		var wg sync.WaitGroup
		results := make([][]string, 2)
		for i, r := range []*reconciler.Reconciler{r1, r2} {
			wg.Go(func() {
				_, err := r.ReconcileOnce(t.Context())
				assert.NoError(t, err)
				if o := objectOrNil(r, specs.KindStanding, "twice"); o != nil && o.Standing != nil {
					results[i] = o.Standing.Fired
				}
			})
		}
		wg.Wait()
		assert.LessOrEqual(t, len(w.reservedBySignet(t, pool)), 2, "the pool has more nodes reserved than the budget")
		for i, r := range []*reconciler.Reconciler{r1, r2} {
			for _, run := range results[i] {
				require.NotContains(t, fired, run, "firing %s recorded twice", run)
				fired[run] = r
			}
		}
		for run := range fired {
			// Either reconciler may have admitted and driven it: the
			// one that fired it, or the other resuming its firing.
			e.waitReceipt(run)
		}
	}
	var nodes []string
	for run := range fired {
		fr := e.firing(run)
		nodes = append(nodes, fr.Nodes()...)
	}
	slices.Sort(nodes)
	assert.Equal(t, pool, nodes, "every node fired exactly once")
	assert.Equal(t, len(pool), countSuffix(e.evidence().Files(), "/"+evidence.FiringFile), "firing records")
	e.audit()
}

// waitReceipt waits until run's receipt is on the evidence branch.
func (e *env) waitReceipt(run string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		ev := e.evidence()
		dir := ev.RunDir(cluster, run)
		return dir != "" && slices.Contains(ev.Files(), path.Join(dir, evidence.ReceiptFile))
	}, 2*time.Minute, 200*time.Millisecond, "run %s never finished", run)
}

// objectOrNil is object without failing the test (for goroutines).
func objectOrNil(r *reconciler.Reconciler, kind, name string) *reconciler.ObjectStatus {
	for _, o := range r.Status().Objects {
		if o.Kind == kind && o.Name == name {
			return &o
		}
	}
	return nil
}

// standingCrash: a reconciler on the real control plane is killed after
// it recorded a firing and before it reserved anything (each crash point
// of crash.StandingPoints, in a process of its own); the reconciler that
// starts next on the same state and branch reserves and admits exactly
// the recorded firing, fires nothing twice, and the node ends certified
// and restored.
func standingCrash(t *testing.T, w *kubeWorld) {
	for i, point := range crash.StandingPoints {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			prefix := fmt.Sprintf("sc%d", i)
			pool := w.poolNodes(t, prefix, 2)
			before := w.state(t, pool...)
			e.repo.AddProfileFor("burn", 1, "", gpuCheck("burn", "pod", "result Pass; exit 0", 60))
			e.repo.AddStanding("crashy", "burn", "selector: {pool: "+prefix+"}", "nodesPerRun: 1", "every: 168h", "budget: {maxNodes: 1}")
			e.repo.Commit("specs")
			e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", standingRef+"crashy")

			err, out := e.runPassProcess(e.kubeConfig(w), crash.EnvVar+"="+point)
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the pass was not killed at %s:\n%s", point, out)
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the pass was not killed at %s (%v):\n%s", point, ee, out)
			require.NotEmpty(t, e.evidence().RunDir(cluster, "crashy-1"), "the firing is not durable")
			require.Empty(t, w.reservedBySignet(t, pool), "reserved before the firing's admission")

			r := e.build(e.kubeConfig(w))
			_, err = r.ReconcileOnce(t.Context())
			require.NoError(t, err)
			st := standingStatus(t, r, "crashy")
			require.Empty(t, st.Fired, "the restarted reconciler fired again instead of resuming the recorded firing")
			assert.Equal(t, specs.VerdictPass, e.wait(r, "crashy-1").Verdict)
			fr := e.firing("crashy-1")
			adm := e.admission("crashy-1")
			require.Len(t, adm.Participants, 1)
			assert.Equal(t, fr.Nodes(), []string{adm.Participants[0].Node})
			assert.Equal(t, before, w.state(t, pool...), "every node restored exactly")
			assert.Equal(t, 1, countSuffix(e.evidence().Files(), "/"+evidence.FiringFile), "firing records")
			e.audit()
		})
	}
}
